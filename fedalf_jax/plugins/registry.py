"""Your own algorithms, models and data sets, by name (docs/extending.md).

A config names its algorithm, model and data set by a string, so that ``config.json`` says what ran and a
run can be resumed or swept. Besides the built-in names, a name is either

* registered in this process: :func:`register_algorithm`, :func:`register_model`, :func:`register_dataset`
  (a notebook's own code), or
* ``"package.module:attribute"``: imported on first use, so the CLI and a later process (``--resume``, a
  sweep's other slices) find it again. The attribute is what ``register_*`` would take.

An algorithm factory returns a :class:`fedalf_jax.sim.algorithms.Algorithm`; it is called with
``layer_of`` (the model's layer ids, as FedLF's server needs them) when it takes that argument. A model
factory returns a flax ``nn.Module`` whose ``__call__(x)`` (or ``__call__(x, train)``) maps a batch
``[B, *example_shape]`` to logits ``[B, num_classes]``; it is called with ``num_classes`` when it takes
that argument. A data set is arrays (:class:`ArrayData`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import inspect
import os
import re
import sys
from typing import Any, Callable, Optional

import numpy as np

from ..runtime.errors import ConfigError
from .code_digest import current, parts, previous, take


class RegistryError(ConfigError):
    """A name is not registered or importable, or what it names is unusable; the message says the fix (one
    line, a :class:`ConfigError`)."""


_KINDS = ("algorithm", "model", "dataset")
_REGISTERED: dict[str, dict[str, Any]] = {k: {} for k in _KINDS}
_VERSION = {"n": 0}  # bumped on every registration: cached data pools are keyed by it
_CODE: dict[str, dict[str, Any]] = {"algorithm": {}, "model": {}}  # name -> code_digest.take(), when found
_CODE_ARGS: dict[tuple, Any] = {}  # (algorithm name, arg_items) -> code_digest.take() of what it builds with them
_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def _register(kind: str, name: str, obj: Any) -> None:
    if not isinstance(name, str) or not name or ":" in name:
        raise RegistryError(f"a registered {kind} name must be a non-empty string without ':' (':' marks "
                            f"module:attribute names), got {name!r}")
    builtin = _builtin(kind)
    if name in builtin:  # a config naming it runs the built-in: the registered one would be ignored
        raise RegistryError(f"register_{kind}({name!r}, ...): {name!r} is a built-in {kind} (as are "
                            f"{', '.join(b for b in builtin if b != name)}), which a config naming it runs; "
                            f"register yours under another name")
    _REGISTERED[kind][name] = obj
    if kind in _CODE:
        _CODE[kind][name] = _take(kind, obj)
    _forget_args(name)
    _VERSION["n"] += 1


def _builtin(kind: str) -> tuple:
    """The built-in names of ``kind`` (as :mod:`.options` lists them; it imports this module, so they are read
    from where it reads them)."""
    from ..problem.data import DATASETS
    from ..problem.models import MODEL_NAMES
    from ..algorithms import BUILTINS
    return {"algorithm": tuple(BUILTINS), "model": MODEL_NAMES, "dataset": DATASETS}[kind]


def is_path(name: Any) -> bool:
    """``"module:attribute"``, a name that imports what it names."""
    return isinstance(name, str) and bool(_PATH.match(name))


def lookup(kind: str, name: str, builtin: tuple = ()) -> Any:
    """What ``name`` names among the registered ``kind`` s (importing ``module:attribute`` on first use);
    raises :class:`RegistryError` saying how to register one."""
    if name in _REGISTERED[kind]:
        return _REGISTERED[kind][name]
    if is_path(name):
        module, attr = name.split(":")
        if os.getcwd() not in sys.path:  # like `python -m`: the folder the user runs from (a console script's
            sys.path.append(os.getcwd())  # sys.path starts at its own bin/ folder instead)
        try:
            obj = getattr(importlib.import_module(module), attr)
        except ImportError as e:
            raise RegistryError(f"{kind} {name!r}: cannot import module {module!r} ({e}); run from the folder "
                                f"that holds it (here: {os.getcwd()}) or put that folder on PYTHONPATH") from None
        except AttributeError:
            raise RegistryError(f"{kind} {name!r}: module {module!r} has no attribute {attr!r}") from None
        if kind == "dataset":
            obj = _as_data(name, obj)
        _REGISTERED[kind][name] = obj
        if kind in _CODE:  # the code as imported now: a file edited later is seen on --resume
            _CODE[kind][name] = _take(kind, obj, importlib.import_module(module))
        _forget_args(name)
        _VERSION["n"] += 1
        return obj
    known = ", ".join(list(builtin) + sorted(_REGISTERED[kind]))
    raise RegistryError(f"unknown {kind} {name!r}; choose one of {known}, register your own with "
                        f"fedalf_jax.register_{kind}({name!r}, ...), or name it as module:attribute "
                        f"(docs/extending.md)")


def _forget_args(name: str) -> None:
    for key in [k for k in _CODE_ARGS if k[0] == name]:  # taken again for the code registered now
        del _CODE_ARGS[key]


def version() -> int:
    return _VERSION["n"]


# ---- user code's digest -----------------------------------------------------------------------

def code(kind: str, name: str, args: Optional[dict] = None) -> tuple[str, str]:
    """``(digest, covers)`` of the code behind the ``kind`` (algorithm or model) ``name``: its files as read
    when the name was imported or registered, the globals its file-less code reads as they are now
    (:mod:`.code_digest`); ``digest`` is ``"uncheckable"`` when nothing of it can be hashed. ``args``: an
    algorithm factory's keyword arguments (``Config.alg_args``): the code reached is that of the
    ``Algorithm`` the factory builds with them."""
    return current(_digest(kind, name, args))


def _digest(kind: str, name: str, args: Optional[dict] = None):
    """The :class:`.code_digest.Digest` of ``name`` (with ``args``: of the algorithm built with them, its
    files as read when the name was taken; made once per arguments)."""
    if name not in _CODE[kind]:
        lookup(kind, name)
    base = _CODE[kind][name]
    if not args or kind != "algorithm":
        return base
    key = (name, arg_items(args))
    if key not in _CODE_ARGS:
        obj = _REGISTERED[kind][name]
        module = base.module if base.module is not None else (
            importlib.import_module(name.split(":")[0]) if is_path(name) else None)
        _CODE_ARGS[key] = _take(kind, obj, module, args)
    return _CODE_ARGS[key]


def legacy_code(kind: str, name: str) -> str:
    """The digest of ``name``'s code as runs recorded it before it covered folders and globals (the module's
    file, the files defining its functions, the code objects of those defined outside any file)."""
    if name not in _CODE[kind]:
        lookup(kind, name)
    return _CODE[kind][name].legacy


def code_parts(kind: str, name: str, args: Optional[dict] = None) -> dict:
    """One digest per file (and per piece of code outside any file) of ``name``'s code now
    (:func:`.code_digest.parts`): a checkpoint records it, so that ``--resume`` names what changed."""
    return parts(_digest(kind, name, args))


def previous_code(kind: str, name: str) -> str:
    """The digest of ``name``'s code as runs recorded it in format 2 (the folder digest) (every ``.py`` file under its
    modules' folders, one digest for all)."""
    if name not in _CODE[kind]:
        lookup(kind, name)
    return previous(_CODE[kind][name])


def _take(kind: str, obj, module=None, args: Optional[dict] = None):
    """:func:`.code_digest.take` of a registered (or imported) ``obj``; for an algorithm's factory, with the
    ``Algorithm`` it builds without the model's layers (as :func:`.config.declared_hparams` builds it), so
    its fields' functions are reached too."""
    built = None
    if kind == "algorithm":
        from ..sim.algorithms import Algorithm, unwarned
        if callable(obj) and not isinstance(obj, Algorithm):
            import warnings
            try:
                with warnings.catch_warnings(), unwarned():
                    warnings.simplefilter("ignore")
                    args = args or {}
                    built = obj(layer_of=None, **args) if _accepts(obj, "layer_of") else obj(**args)
            except Exception:  # noqa: BLE001 - a factory that needs the model's layers: its code alone
                built = None
            if not isinstance(built, Algorithm):
                built = None
    return take(obj, module, built)


def code_digest(obj, module=None) -> tuple[str, str]:
    """``(digest, covers)`` of ``obj``'s code (a factory, a class, an Algorithm) and ``module``'s, now."""
    return current(take(obj, module))


def _accepts(fn: Callable, arg: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return arg in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


# ---- algorithms -------------------------------------------------------------------------------

def register_algorithm(name: str, factory: Callable) -> None:
    """Make ``factory`` (``() -> Algorithm``, or ``(layer_of) -> Algorithm``; an ``Algorithm`` itself also
    does) runnable as ``Config(algorithm=name)`` in this process. For the CLI or another process, name it
    ``"module:attribute"`` instead (no registration needed)."""
    from ..sim.algorithms import Algorithm
    if not (callable(factory) or isinstance(factory, Algorithm)):
        raise RegistryError(f"register_algorithm({name!r}, ...): give a factory returning an Algorithm, "
                            f"got {type(factory).__name__}")
    _register("algorithm", name, factory)


def make_algorithm(name: str, layer_of, args: Optional[dict] = None) -> Any:
    """The registered (or ``module:attribute``) algorithm ``name``, built for a model with ``layer_of``;
    ``args``: the factory's keyword arguments (``Config.alg_args``, ``--alg-arg K=2``), checked by
    :func:`check_args`."""
    from ..sim.algorithms import Algorithm
    factory = lookup("algorithm", name)
    args = dict(args or {})
    if args or (callable(factory) and not isinstance(factory, Algorithm)):
        check_args(name, factory, args)
    if isinstance(factory, Algorithm):
        alg = factory
    else:
        alg = factory(layer_of=layer_of, **args) if _accepts(factory, "layer_of") else factory(**args)
    if not isinstance(alg, Algorithm):
        raise RegistryError(f"algorithm {name!r}: its factory returned {type(alg).__name__}, not a "
                            f"fedalf_jax.Algorithm (docs/extending.md)")
    return alg


def arg_items(args) -> tuple:
    """A hashable key of a factory's keyword arguments (``Config.alg_args``): its sorted items, each value
    with its type (``K=2`` and ``K=2.0`` are two programs)."""
    return tuple(sorted((k, type(v).__name__, v) for k, v in (args or {}).items()))


def factory_signature(factory) -> str:
    """``fedgkd(K=1)``: a factory's name and parameters as a user reads them (``layer_of`` left out)."""
    fn = getattr(factory, "__name__", None) or type(factory).__name__
    try:
        params = [p for p in inspect.signature(factory).parameters.values() if p.name != "layer_of"]
    except (TypeError, ValueError):
        return f"{fn}(...)"
    return f"{fn}({', '.join(str(p) for p in params)})"


def check_args(name: str, factory, args: dict) -> None:
    """``args`` are keyword arguments ``factory`` takes, and it gets every argument it needs; one line
    naming the factory, the argument and the factory's parameters otherwise."""
    from ..sim.algorithms import Algorithm
    given = ", ".join(f"{k}={v!r}" for k, v in args.items())
    if isinstance(factory, Algorithm) or not callable(factory):
        raise RegistryError(f"algorithm {name!r} is an Algorithm, not a factory: it takes no arguments ({given}); "
                            f"register a factory taking them (e.g. def make(K=1): ...) or drop --alg-arg")
    if "layer_of" in args:
        raise RegistryError(f"algorithm {name!r}: layer_of is the model's layer ids, which the run passes itself; "
                            f"drop --alg-arg layer_of")
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return  # a callable whose signature cannot be read: its call says what it refuses
    shown = factory_signature(factory)
    has_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    takes = [p.name for p in params.values() if p.name != "layer_of"
             and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
    for k in args:
        if k not in takes and not has_kw:
            has = f"it takes {', '.join(takes)}" if takes else "it takes no arguments"
            raise RegistryError(f"algorithm {name!r}: its factory {shown} has no parameter {k!r} (--alg-arg "
                                f"{k}={args[k]!r}); {has}")
    missing = [p.name for p in params.values() if p.name != "layer_of" and p.name not in args
               and p.default is inspect.Parameter.empty
               and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
    if missing:
        raise RegistryError(f"algorithm {name!r}: its factory {shown} needs {', '.join(missing)}; give "
                            f"{' '.join(f'--alg-arg {m}=VALUE' for m in missing)} (Config(alg_args={{...}}))")


# ---- models -----------------------------------------------------------------------------------

def register_model(name: str, factory: Callable) -> None:
    """Make ``factory`` (``(num_classes) -> flax nn.Module``, or ``() -> nn.Module``) usable as
    ``Config(model=name)`` in this process."""
    if not callable(factory):
        raise RegistryError(f"register_model({name!r}, ...): give a factory returning a flax nn.Module, got "
                            f"{type(factory).__name__}")
    _register("model", name, factory)


def make_module(name: str, num_classes: int):
    """The flax module of the registered (or ``module:attribute``) model ``name``."""
    import flax.linen as nn
    factory = lookup("model", name)
    if isinstance(factory, type) and issubclass(factory, nn.Module):
        module = factory(num_classes=num_classes) if _accepts(factory, "num_classes") else factory()
    elif isinstance(factory, nn.Module):
        module = factory
    else:
        module = factory(num_classes=num_classes) if _accepts(factory, "num_classes") else factory()
    if not isinstance(module, nn.Module):
        raise RegistryError(f"model {name!r}: its factory returned {type(module).__name__}, not a flax "
                            f"nn.Module (docs/extending.md)")
    return module


def takes_train(module) -> bool:
    """Whether the module's ``__call__`` has a ``train`` argument (the built-in models' dropout switch)."""
    return _accepts(type(module).__call__, "train")


# ---- data sets --------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, eq=False)
class ArrayData:
    """A data set given as arrays: ``x_*`` float ``[n, *example_shape]``, ``y_*`` integer labels ``[n]`` in
    ``[0, num_classes)``. ``clients``: optionally each client's own examples, ``(train_lists, test_lists)``
    with one list of row indices into ``x_train`` (resp. ``x_test``) per client, run with
    ``partition="given"``; without it, a partition scheme (``pat1``, ``pat2``, ``dirichlet``, ``iid``)
    splits the pooled examples as for the built-in data sets."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    clients: Optional[tuple] = None
    digest: str = ""

    @property
    def num_clients(self) -> Optional[int]:
        return None if self.clients is None else len(self.clients[0])


def _labels(name: str, what: str, y, n_x: int, num_classes: Optional[int]) -> np.ndarray:
    y = np.asarray(y)
    if y.ndim != 1:
        raise RegistryError(f"dataset {name!r}: {what} must be one label per example, shape [n], got shape "
                            f"{y.shape}")
    if y.shape[0] != n_x:
        raise RegistryError(f"dataset {name!r}: x_{what[2:]} has {n_x} examples but {what} has {y.shape[0]} "
                            f"labels; give one label per example")
    if y.size and not np.issubdtype(y.dtype, np.integer):
        if not np.all(np.mod(y, 1) == 0):
            raise RegistryError(f"dataset {name!r}: {what} must hold integer class labels, got {y.dtype} values")
    y = y.astype(np.int64)
    if y.size and y.min() < 0:
        raise RegistryError(f"dataset {name!r}: {what} has the negative label {int(y.min())}; labels are "
                            f"0..num_classes-1")
    if num_classes is not None and y.size and y.max() >= num_classes:
        raise RegistryError(f"dataset {name!r}: {what} has the label {int(y.max())} but num_classes is "
                            f"{num_classes}; labels are 0..num_classes-1")
    return y.astype(np.int32)


def _index_lists(name: str, what: str, lists, n: int) -> list:
    out = []
    for i, rows in enumerate(lists):
        rows = np.asarray(rows)
        if rows.ndim != 1 or (rows.size and not np.issubdtype(rows.dtype, np.integer)):
            raise RegistryError(f"dataset {name!r}: client {i}'s {what} rows must be a list of integer indices, "
                                f"got shape {rows.shape} of {rows.dtype}")
        if rows.size == 0:
            raise RegistryError(f"dataset {name!r}: client {i} has no {what} examples; every client needs at "
                                f"least one")
        if rows.min() < 0 or rows.max() >= n:
            raise RegistryError(f"dataset {name!r}: client {i}'s {what} rows index 0..{n - 1} (x_{what} has {n} "
                                f"examples), got {int(rows.min())}..{int(rows.max())}")
        out.append(rows.astype(np.int64))
    return out


def _flat_rows(part) -> Optional[int]:
    """The length of ``part`` when it is one flat array (or list) of indices rather than a list of
    per-client index arrays; else ``None``."""
    if hasattr(part, "ndim") and hasattr(part, "shape"):
        return int(part.shape[0]) if part.ndim == 1 and part.shape[0] else None
    if isinstance(part, (list, tuple)) and part and np.isscalar(part[0]):
        return len(part)
    return None


def make_data(name: str, x_train, y_train, x_test, y_test, *, num_classes: Optional[int] = None,
              clients: Optional[tuple] = None) -> ArrayData:
    """Check the arrays (one clear error naming any mismatch) and return an :class:`ArrayData`."""
    xs = []
    for what, x in (("x_train", x_train), ("x_test", x_test)):
        x = np.asarray(x)
        if x.ndim < 2:
            raise RegistryError(f"dataset {name!r}: {what} must be [n, *example_shape] (at least 2-D), got shape "
                                f"{x.shape}")
        if not np.issubdtype(x.dtype, np.number):
            raise RegistryError(f"dataset {name!r}: {what} must be numbers, got {x.dtype}")
        xs.append(x.astype(np.float32))
    x_train, x_test = xs
    if x_train.shape[1:] != x_test.shape[1:]:
        raise RegistryError(f"dataset {name!r}: x_train's examples have shape {x_train.shape[1:]} but x_test's "
                            f"have {x_test.shape[1:]}; both must share one example shape")
    if not (np.all(np.isfinite(x_train)) and np.all(np.isfinite(x_test))):
        raise RegistryError(f"dataset {name!r}: the inputs hold NaN or infinite values")
    if num_classes is not None and (isinstance(num_classes, bool) or int(num_classes) != num_classes
                                    or num_classes < 2):
        raise RegistryError(f"dataset {name!r}: num_classes must be an integer >= 2, got {num_classes!r}")
    y_train = _labels(name, "y_train", y_train, x_train.shape[0], num_classes)
    y_test = _labels(name, "y_test", y_test, x_test.shape[0], num_classes)
    if num_classes is None:
        num_classes = int(max(y_train.max(initial=0), y_test.max(initial=0))) + 1
    if clients is not None:
        if not (isinstance(clients, (tuple, list)) and len(clients) == 2):
            raise RegistryError(f"dataset {name!r}: clients must be (train_lists, test_lists), one index list "
                                f"per client in each")
        flat = [_flat_rows(part) for part in clients]
        if any(n is not None for n in flat):  # e.g. clients=[rows_a, rows_b]: flat index arrays, not lists of them
            raise RegistryError(f"dataset {name!r}: clients was given {len(clients)} flat index arrays (of "
                                f"{' and '.join('?' if n is None else str(n) for n in flat)} indices), but it must "
                                f"be (train_lists, test_lists), one index array per client in each, e.g. "
                                f"clients=([train_rows_0, train_rows_1], [test_rows_0, test_rows_1])")
        tr = _index_lists(name, "train", clients[0], x_train.shape[0])
        te = _index_lists(name, "test", clients[1], x_test.shape[0])
        if len(tr) != len(te):
            raise RegistryError(f"dataset {name!r}: clients gives {len(tr)} train lists but {len(te)} test lists; "
                                f"give one of each per client")
        clients = (tr, te)
    h = hashlib.sha256()
    for a in (x_train, y_train, x_test, y_test, *(clients[0] if clients else ()), *(clients[1] if clients else ())):
        h.update(str(a.shape).encode())
        h.update(np.ascontiguousarray(a).tobytes())
        a.flags.writeable = False  # our own copies: a run trains on the arrays of the digest
    return ArrayData(x_train, y_train, x_test, y_test, int(num_classes), clients, h.hexdigest()[:16])


def _as_data(name: str, obj) -> ArrayData:
    if callable(obj):
        obj = obj()
    if isinstance(obj, ArrayData):  # checked, digested and kept read-only as a registered one
        return make_data(name, obj.x_train, obj.y_train, obj.x_test, obj.y_test, num_classes=obj.num_classes,
                         clients=obj.clients)
    if isinstance(obj, dict):
        return make_data(name, **obj)
    raise RegistryError(f"dataset {name!r}: expected an ArrayData, a dict of make_data's arguments, or a "
                        f"function returning one, got {type(obj).__name__}")


def register_dataset(name: str, x_train, y_train, x_test, y_test, *, num_classes: Optional[int] = None,
                     clients: Optional[tuple] = None) -> ArrayData:
    """Make the arrays usable as ``Config(dataset=name)`` in this process (see :class:`ArrayData`); every
    shape and label is checked now, with one error naming the mismatch. A run records the arrays'
    digest, and ``--resume`` refuses other arrays under the same name. The data set keeps read-only copies
    (the returned :class:`ArrayData`'s arrays): an in-place change (``data.x_train /= 255``) raises; to
    change the arrays, register them again."""
    data = make_data(name, x_train, y_train, x_test, y_test, num_classes=num_classes, clients=clients)
    _register("dataset", name, data)
    return data


def dataset(name: str) -> ArrayData:
    return lookup("dataset", name)
