"""The checks of a user's :class:`~fedalf_jax.sim.algorithms.Algorithm` against its contract
(docs/extending.md): what ``upload``, ``server``, ``penalty`` and the state initialisers return, checked
while the round is traced (shapes, dtypes and tree structures are static there), so a mistake is one
line naming the function, what it returned and what was expected, never a JAX traceback from deep inside
the compiled round.
"""

from __future__ import annotations

import functools
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np

from ..runtime.errors import ConfigError


def error(msg: str) -> Exception:
    """A :class:`~fedalf_jax.errors.ConfigError` (the CLI prints it as one line, exit 2)."""
    return ConfigError(msg)


def call(alg, name: str, fn, args: tuple, kw: dict, expected: str, hint=None):
    """``fn(*args, **kw)``, a function of the algorithm's contract (``name``: ``penalty``, ``upload``,
    ``client.step``, ...), after checking that its signature takes these arguments: a function that does not
    fit is one line naming it, its signature and how the round calls it (``expected``), not a ``TypeError``
    from inside the round. An exception raised in the user's own code while it runs is one line too
    (:func:`user_failure`; ``hint(e)``: the likely cause, or ``""``), the original its ``__cause__``."""
    import inspect
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or a callable without a signature: called as it is
        sig = None
    if sig is not None:
        try:
            sig.bind(*args, **kw)
        except TypeError as e:
            raise error(f"algorithm {alg.name!r}: {name}{sig} does not fit the contract: the round calls it as "
                        f"{name}({expected}) ({e}); docs/extending.md") from None
    try:
        return fn(*args, **kw)
    except Exception as e:  # noqa: BLE001 - what the user's function raised, named in one line
        told = user_failure(f"algorithm {alg.name!r}: {name}", e, hint(e) if hint is not None else "")
        if told is None:
            raise
        raise told from e


DEBUG_ENV = "FEDALF_DEBUG"  # set: the CLI shows the traceback behind a one-line error (fedalf_jax/cli.py)


@functools.lru_cache(maxsize=None)
def _not_user_dirs() -> tuple:
    """The folders whose code is not the user's: this package's, the standard library's, installed packages'."""
    import os
    import sysconfig
    from pathlib import Path
    dirs = {str(Path(__file__).resolve().parents[1])}
    dirs |= {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return tuple(os.path.realpath(d) + os.sep for d in dirs)


def user_frame(tb) -> str | None:
    """``file:line (in function)`` of the innermost frame of the traceback ``tb`` in the user's own code (not
    in fedalf_jax, the standard library or an installed package such as jax, flax, optax), the file relative to
    the working directory when it lies under it; ``None`` when no frame is the user's."""
    import os
    found = None
    while tb is not None:
        code = tb.tb_frame.f_code
        path = code.co_filename
        if not path.startswith("<frozen"):
            real = os.path.realpath(path) if not path.startswith("<") else path
            if not real.startswith(_not_user_dirs()):
                found = (real, tb.tb_lineno, code.co_name)
        tb = tb.tb_next
    if found is None:
        return None
    path, line, func = found
    if not path.startswith("<"):
        rel = os.path.relpath(path)
        path = rel if not rel.startswith(os.pardir) else path
    return f"{path}:{line} (in {func})"


def user_failure(where: str, e: BaseException, hint: str = "") -> Exception | None:
    """One line for an exception ``e`` that the user's function ``where`` (``algorithm 'x': client.step``)
    raised in the user's own code: its file and line (:func:`user_frame`), the error's first line, the likely
    cause (``hint``) when known, and how to see the traceback. ``None`` (the caller re-raises ``e``) for an
    error already told in one line (a :class:`~fedalf_jax.errors.ConfigError`, any of this package's) or one
    raised outside the user's code."""
    if isinstance(e, ConfigError) or type(e).__module__.split(".")[0] == "fedalf_jax":
        return None
    at = user_frame(e.__traceback__)
    if at is None:
        return None
    text = str(e).strip()
    msg = text.splitlines()[0] if text else ""
    cause = f"; likely cause: {hint}" if hint else ""
    return error(f"{where} failed at {at}: {type(e).__name__}{': ' + msg[:200] if msg else ''}{cause} "
                 f"(set {DEBUG_ENV}=1 for the full traceback)")


def _leaf(x) -> str:
    try:
        return f"{jnp.result_type(x)}{list(jnp.shape(x))}"
    except TypeError:
        return f"a {type(x).__name__}"


def describe(tree, limit: int = 4) -> str:
    """A short description of a pytree: ``{'b': float32[3]}``-like, its first ``limit`` leaves."""
    if tree is None:
        return "None"
    leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
    if not leaves:
        return f"{treedef.unflatten([])!r}" if treedef.num_leaves == 0 else "()"
    parts = [f"{jax.tree_util.keystr(p) or 'value'}: {_leaf(x)}" for p, x in leaves[:limit]]
    more = f", ... ({len(leaves)} leaves)" if len(leaves) > limit else ""
    return "{" + ", ".join(parts) + more + "}"


def check_arrays(fn: str, what: str, tree) -> None:
    """Every leaf of ``tree`` is an array (or a number): no strings, no other Python objects."""
    for path, x in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if not isinstance(x, (jax.Array, jax.core.Tracer, jax.ShapeDtypeStruct)) and not hasattr(x, "dtype") \
                and not isinstance(x, (bool, int, float, complex)):
            raise error(f"{fn} returned {what} with {jax.tree_util.keystr(path) or 'a leaf'} = {type(x).__name__} "
                        f"{str(x)[:40]!r}; expected a pytree of arrays")


def check_like(fn: str, what: str, got, want, *, expected: str = "", dtypes: bool = True) -> None:
    """``got`` has ``want``'s tree structure, shapes and (``dtypes``) dtypes; else one line naming ``fn``."""
    how = f" ({expected})" if expected else ""
    head = f"{fn} returned {what} {describe(got)}; expected {describe(want)}{how}"
    try:
        chex.assert_trees_all_equal_structs(got, want)
    except (AssertionError, ValueError, TypeError):
        raise error(f"{head}: another tree structure") from None
    for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(got)[0], jax.tree_util.tree_leaves(want)):
        where = jax.tree_util.keystr(path) or "the value"
        if jnp.shape(a) != jnp.shape(b):
            raise error(f"{head}: {where} has shape {tuple(jnp.shape(a))}, not {tuple(jnp.shape(b))}")
        if dtypes and jnp.result_type(a) != jnp.result_type(b):
            raise error(f"{head}: {where} is {jnp.result_type(a)}, not {jnp.result_type(b)} (return it in that "
                        f"dtype; it is not cast)")


def unpack_upload(alg, out, theta, state) -> tuple[Any, Any, Any]:
    """``(Δ_i, new state, aux)`` from what ``upload`` returned, checked against θ and the client's state."""
    if not isinstance(out, tuple) or len(out) not in (2, 3):
        got = f"a tuple of {len(out)}" if isinstance(out, tuple) else type(out).__name__
        raise error(f"algorithm {alg.name!r}: upload returned {got}; expected (Δ_i, new state) or "
                    f"(Δ_i, new state, aux)")
    delta, new_state = out[0], out[1]
    aux = out[2] if len(out) == 3 else None
    fn = f"algorithm {alg.name!r}: upload"
    check_like(fn, "Δ_i", delta, theta, expected="shaped like the params θ")
    check_like(fn, "the new client state", new_state, state, expected="the state it was given")
    if aux is not None:
        check_arrays(fn, "aux", aux)
        if alg.public_aux is None:
            raise error(f"{fn} returned an auxiliary upload (a third element) but the Algorithm does not say "
                        f"whether it is private: set public_aux=True (aux is a function of w_tilde and public "
                        f"values, so the privacy guarantee covers it) or public_aux=False")
        check_aux_metrics(alg, fn, aux)
    return delta, new_state, aux


def check_aux_metrics(alg, fn: str, aux) -> None:
    """The client metrics in ``aux["metrics"]`` (an upload's or a client program's): each declared in
    ``Algorithm.metrics`` and a scalar; one line otherwise."""
    for k, v in client_metrics(aux).items():
        if k not in alg.metrics:
            raise error(f"{fn} returned the client metric {k!r} in aux['metrics'] but the Algorithm's metrics "
                        f"are {tuple(alg.metrics)}; add {k!r} to metrics=")
        if jnp.shape(v) != ():
            raise error(f"{fn} returned the client metric {k!r} of shape {tuple(jnp.shape(v))}; expected a "
                        f"scalar")


def client_metrics(aux) -> dict:
    """The scalars a client returned in ``aux["metrics"]`` (a dict), or none."""
    if isinstance(aux, dict) and isinstance(aux.get("metrics"), dict):
        return aux["metrics"]
    return {}


def check_params(alg, fn_name: str, got, theta, *, dtypes: bool = True):
    """What ``fn_name`` returned (``local_start``, ``personal.start``, ``personal_model``) is shaped like θ;
    returns it, its floating leaves in θ's dtypes when ``dtypes`` is False (a state stored in bfloat16)."""
    fn = f"algorithm {alg.name!r}: {fn_name}"
    check_arrays(fn, "params", got)
    check_like(fn, "params", got, theta, expected="shaped like the params θ", dtypes=dtypes)
    return jax.tree_util.tree_map(lambda x, t: jnp.asarray(x).astype(jnp.result_type(t)), got, theta)


def check_callable(alg, name: str, fn) -> None:
    """What ``name`` (``local_loss``, ...) returned is ``None`` or a function."""
    if fn is not None and not callable(fn):
        raise error(f"algorithm {alg.name!r}: {name} returned {type(fn).__name__}; expected a function "
                    f"(params, batch) -> scalar, or None")


def check_optimizer(alg, opt):
    """What ``local_optimizer`` returned is an optax ``GradientTransformation`` (``init`` and ``update``); returns it.
    A function instead (``lambda lr_t: optax.sgd``: the factory, not called) is one line saying to call it."""
    if callable(getattr(opt, "init", None)) and callable(getattr(opt, "update", None)):
        return opt
    fn = f"algorithm {alg.name!r}: local_optimizer"
    if callable(opt):
        name = getattr(opt, "__qualname__", None) or getattr(opt, "__name__", None) or type(opt).__name__
        raise error(f"{fn} returned the function {name}, not an optax.GradientTransformation (it has no init/update): "
                    f"call it with the learning rate, e.g. local_optimizer=lambda lr_t: optax.sgd(lr_t)")
    raise error(f"{fn} returned {type(opt).__name__} {str(opt)[:40]!r}; expected an optax.GradientTransformation, "
                f"e.g. local_optimizer=lambda lr_t: optax.sgd(lr_t)")


@functools.lru_cache(maxsize=None)
def _batch_class():
    """A :class:`~fedalf_jax.sim.algorithms.Batch` that notes whether its ``logits`` or ``features`` were read
    while they are ``None`` (so a function that failed on them is told why)."""
    from .algorithms import Batch

    class Batch(Batch):  # noqa: F811 - the user's function sees a Batch (isinstance, its repr's name)
        def _noted(self, field):
            v = tuple.__getitem__(self, self._fields.index(field))
            if v is None:
                self.__dict__.setdefault("read_none", []).append(field)
            return v
        logits = property(lambda self: self._noted("logits"))
        features = property(lambda self: self._noted("features"))
    return Batch


def checked_loss(alg, name: str, fn):
    """``fn`` (the ``(params, Batch) -> scalar`` that ``local_loss`` or ``personal.local_loss`` returned), checked
    on each call while the step is traced: it must return a real scalar, and an exception it raises (``None``
    features of a model that returns logits only, ...) is one line naming the function and the fix, never a
    JAX traceback from inside the compiled step. ``None`` stays ``None``. Adds no operation to the step."""
    if fn is None:
        return None
    watched = _batch_class()
    where = f"algorithm {alg.name!r}: {name}"
    personal = name.startswith("personal")

    def loss(params, batch):
        b = watched(*batch)
        try:
            out = fn(params, b)
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001 - what the user's function raised, named in one line
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            read = b.__dict__.get("read_none", [])
            if personal and read:
                hint = (f"; batch.{read[0]} is None for Personal.local_loss (its params may be any pytree): "
                        f"call batch.apply(params) for (logits, features)")
            elif "features" in read:
                hint = ("; batch.features is None: the model returns its logits only; use a model whose __call__ "
                        "returns (logits, features) (docs/extending.md), or do without batch.features")
            else:
                hint = ""
            at = user_frame(e.__traceback__)
            at = f" at {at}" if at else ""
            raise error(f"{where}'s function failed ({type(e).__name__}: {msg[:160]}){at}{hint} (set {DEBUG_ENV}=1 "
                        f"for the full traceback)") from e
        try:
            shape, dtype = jnp.shape(out), jnp.result_type(out)
        except TypeError:
            raise error(f"{where}'s function returned {type(out).__name__} {str(out)[:40]!r}; expected a float "
                        f"scalar loss (shape ())") from None
        if shape != () or not jnp.issubdtype(dtype, jnp.floating):
            fix = ("reduce it to one number, e.g. jnp.mean over the batch's real examples (batch.mask)" if shape != ()
                   else "return a float, e.g. jnp.asarray(value, jnp.float32)")
            raise error(f"{where}'s function returned {dtype}{list(shape)}; expected a float scalar loss (shape ()): "
                        f"{fix}")
        return out
    return loss


def check_penalty(alg, pen, theta, name: str = "penalty") -> None:
    """``penalty(...)`` is ``None`` or a function of the params returning a real scalar."""
    fn = f"algorithm {alg.name!r}: {name}"
    if pen is None:
        return
    if not callable(pen):
        raise error(f"{fn} returned {type(pen).__name__}; expected a function params -> scalar, or None")
    try:
        out = jax.eval_shape(pen, theta)
    except Exception as e:  # noqa: BLE001 - what the penalty raised, named in one line
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise error(f"{fn}'s function failed on params {describe(theta)}: {msg[:200]}") from None
    if not isinstance(out, jax.ShapeDtypeStruct) or out.shape != () or not jnp.issubdtype(out.dtype, jnp.floating):
        raise error(f"{fn}'s function returned {describe(out)}; expected a float scalar (shape ())")


def unpack_server(alg, out, s) -> tuple[Any, Any, dict]:
    """``(new θ, new server state, info)`` from what ``server`` returned, checked against ``s``."""
    from .algorithms import SERVER_INFO
    fn = f"algorithm {alg.name!r}: server"
    if not isinstance(out, tuple) or len(out) != 3:
        got = f"a tuple of {len(out)}" if isinstance(out, tuple) else type(out).__name__
        raise error(f"{fn} returned {got}; expected (new θ, new server state, info)")
    theta, sstate, info = out
    check_like(fn, "the new θ", theta, s.theta, expected="the params θ it was given")
    check_like(fn, "the new server state", sstate, s.sstate, expected="the state init_server_state made")
    if info is None:
        info = {}
    if not isinstance(info, dict):
        raise error(f"{fn} returned info of type {type(info).__name__}; expected a dict of float scalars")
    for k, v in info.items():
        if k not in SERVER_INFO and k not in alg.metrics:
            raise error(f"{fn} returned info {k!r}, which is neither one of {SERVER_INFO} nor among the Algorithm's "
                        f"metrics {tuple(alg.metrics)}; add {k!r} to metrics= to record it")
        if jnp.shape(v) != ():
            raise error(f"{fn} returned info {k!r} of shape {tuple(jnp.shape(v))}; expected a scalar")
    return theta, sstate, info


class _NotAnArray(Exception):
    pass


def check_state_init(alg, fn_name: str, make, *args):
    """``make(*args)``'s shapes (a pytree of arrays), or one line naming the initialiser."""
    fn = f"algorithm {alg.name!r}: {fn_name}"

    def checked(*a):
        out = make(*a)
        for path, leaf in jax.tree_util.tree_leaves_with_path(out):
            if not isinstance(leaf, (jax.Array, np.ndarray, np.generic, int, float, bool)):
                where = jax.tree_util.keystr(path) or "its value"
                raise _NotAnArray(f"{fn} returned {where} as a {type(leaf).__name__} ({str(leaf)[:40]!r}); expected "
                                  f"a pytree of arrays (the per-client or server state)")
        return out
    try:
        out = jax.eval_shape(checked, *args)
    except _NotAnArray as e:
        raise error(str(e)) from None
    except TypeError as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else "TypeError"
        raise error(f"{fn} did not return a pytree of arrays ({msg[:160]})") from None
    return out


# ---- the client program (fj.ClientProgram; docs/extending.md "The client program") ---------------------------

def raw_delta_refusal(alg, spec) -> str:
    """One line: under a local mechanism (``--ldp``, ``--dp gaussian``) a client program's ``final`` returned a
    raw ``(Δ_i, new state[, aux])``, which would leave the client past the mechanism (it perturbs a revealed
    model, and the program computed Δ_i from the un-noised one): it must return ``fj.Reveal(w, ...)``."""
    option, value = ("ldp", spec.ldp) if spec.ldp != "none" else ("dp", spec.dp)
    return (f"algorithm {alg.name!r} has a client program whose final returns Δ_i itself, which would leave the "
            f"client past the privacy mechanism ({option}={value!r} perturbs the model a client reveals): return "
            f"fj.Reveal(w, new state[, aux]) with the trained params w (the round privatises them and uploads "
            f"Δ_i = θ − w̃, as FedAvg does), or run it with {option}='none'")


def check_carry(alg, got, want) -> None:
    """What ``client.step`` returned is a carry like the one it was given (``init``'s structure, shapes, dtypes)."""
    fn = f"algorithm {alg.name!r}: client.step"
    check_arrays(fn, "the carry", got)
    check_like(fn, "the carry", got, want, expected="the carry it was given, as init made it")


def check_fold(alg, got, want) -> None:
    """What a data pass's function returned is an accumulator like ``init``."""
    fn = f"algorithm {alg.name!r}: ctx.data.fold's function"
    check_arrays(fn, "the accumulator", got)
    check_like(fn, "the accumulator", got, want, expected="the accumulator it was given, as fold's init")


def unpack_reveal(alg, out, theta, state, stats=None) -> tuple[Any, Any, Any]:
    """``(w, new state, aux)`` from the ``fj.Reveal`` that ``client.final`` returned, checked against θ (``w``
    shaped and typed like the params) and the client's state; an ``aux`` as :func:`unpack_final` checks it. With
    its own ``upload``, state and aux come from that (``(w, None, None)``; the upload's return is checked when it
    is called). ``stats``: the statistics the client trained from (``ctx.stats``), which ``Reveal.stats`` must be
    shaped like on a model with batch statistics, and absent without."""
    fn = f"algorithm {alg.name!r}: client.final"
    check_arrays(fn, "fj.Reveal's w", out.w)
    check_like(fn, "fj.Reveal's w", out.w, theta, expected="the trained params, shaped like θ")
    if stats is not None and out.stats is None:
        raise error(f"{fn} returned fj.Reveal without stats on a model with batch statistics: pass "
                    f"stats=... (its statistics after training, from ctx.apply.with_stats; ctx.stats to keep them)")
    if stats is None and out.stats is not None:
        raise error(f"{fn} returned fj.Reveal with stats, but the model has no batch statistics; drop stats")
    if out.stats is not None:
        check_arrays(fn, "fj.Reveal's stats", out.stats)
        check_like(fn, "fj.Reveal's stats", out.stats, stats, expected="the batch statistics, shaped like ctx.stats")
    if out.upload is not None:
        if not callable(out.upload):
            raise error(f"{fn} returned fj.Reveal with upload a {type(out.upload).__name__}; expected a function "
                        f"w_tilde -> (Δ_i, new state[, aux])")
        if out.state is not None or out.aux is not None:
            raise error(f"{fn} returned fj.Reveal with both upload and {'state' if out.state is not None else 'aux'}: "
                        f"with upload, the new state and aux are what upload(w_tilde) returns; leave them None")
        return out.w, None, None
    if out.state is None and not (isinstance(state, tuple) and not state):
        raise error(f"{fn} returned fj.Reveal without its new state: pass it second (ctx.state to keep it), or "
                    f"give upload=w_tilde -> (Δ_i, new state[, aux])")
    new_state = () if out.state is None else out.state
    _check_final_rest(alg, fn, new_state, state, out.aux)
    return out.w, new_state, out.aux


def unpack_final(alg, out, theta, state, what: str = "client.final") -> tuple[Any, Any, Any]:
    """``(Δ_i, new state, aux)`` from what ``client.final`` (or ``what``: a Reveal's upload) returned, checked
    against θ and the client's state."""
    fn = f"algorithm {alg.name!r}: {what}"
    if not isinstance(out, tuple) or len(out) not in (2, 3):
        got = f"a tuple of {len(out)}" if isinstance(out, tuple) else type(out).__name__
        raise error(f"{fn} returned {got}; expected (Δ_i, new state) or (Δ_i, new state, aux)"
                    + (", or fj.Reveal(w, new state[, aux])" if what == "client.final" else ""))
    delta, new_state = out[0], out[1]
    aux = out[2] if len(out) == 3 else None
    check_arrays(fn, "Δ_i", delta)
    check_like(fn, "Δ_i", delta, theta, expected="shaped like the params θ")
    _check_final_rest(alg, fn, new_state, state, aux)
    return delta, new_state, aux


def _check_final_rest(alg, fn: str, new_state, state, aux) -> None:
    """The new client state and the ``aux`` that ``client.final`` returned (beside Δ_i or in a ``Reveal``)."""
    check_arrays(fn, "the new client state", new_state)
    check_like(fn, "the new client state", new_state, state, expected="the state it was given (ctx.state)")
    if aux is not None:
        check_arrays(fn, "aux", aux)
        if alg.public_aux is None:
            raise error(f"{fn} returned an auxiliary upload (a third element) but the Algorithm does not say "
                        f"whether it is private: set public_aux=False (or True: aux is a function of public "
                        f"values only)")
        check_aux_metrics(alg, fn, aux)
