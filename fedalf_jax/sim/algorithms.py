"""The algorithm contract of the one round (docs/algorithms.md, docs/extending.md), and the small pure pieces
algorithms are built from.

An :class:`Algorithm` is three choices,
  * the client's local objective (a penalty added to ``f_i``, possibly using the client's state),
  * what the client uploads, as the pseudo-gradient ``Δ_i = θ_t − u_i`` (and its new state),
  * the server update from the ``Δ_i``,
and two optional states: one per client (the ADMM dual; any pytree, ``init_client_state``) and the
server's (FedLF's history rows; ``init_server_state``). Privacy (LDP / DP) is applied by the round
between local training and the upload, the same way for every algorithm that uploads a model.
The pieces (penalties, uploads, servers: ``weighted_mean_server``, ``make_fair_server``, ...) are what the
built-in plug-ins (:mod:`fedalf_jax.algorithms`, one module each) and a user's own algorithm are made of.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from . import tree as T
from .batching import per_run


class OwnHParams(Mapping):
    """An algorithm's own hyper-parameters (``Algorithm.hparams``) as ``HParams.own``: a read-only mapping of
    name to traced float32 scalar (a pytree: its names are static, its values traced, so a sweep vmaps over
    them). Reading a name the algorithm does not declare is one line naming the declared ones."""

    def __init__(self, values: Optional[Mapping] = None):
        self._d = dict(values or {})

    def __getitem__(self, name):
        try:
            return self._d[name]
        except KeyError:
            from ..runtime.errors import ConfigError as error  # as contract.error makes it; contract imports this module
            have = ", ".join(self._d) or "none"
            raise error(f"hp.own[{name!r}]: the algorithm declares no hyper-parameter {name!r} (it declares: {have}; "
                        f"Algorithm(hparams={{{name!r}: default, ...}}) declares one)") from None

    def __iter__(self):
        return iter(self._d)

    def __len__(self):
        return len(self._d)

    def __repr__(self):
        return f"OwnHParams({self._d!r})"


jax.tree_util.register_pytree_with_keys(
    OwnHParams,
    lambda o: (tuple((jax.tree_util.DictKey(k), v) for k, v in o._d.items()), tuple(o._d)),
    lambda names, values: OwnHParams(dict(zip(names, values))),
    flatten_func=lambda o: (tuple(o._d.values()), tuple(o._d)))


class HParams(NamedTuple):
    """The numeric hyper-parameters: traced values, so a run can be vmapped over them. ``own``: the
    algorithm's own (``Algorithm.hparams``), read as ``hp.own["beta1"]``; empty for the built-in ones."""

    lr: Any
    lr_decay: Any
    server_lr: Any
    server_lr_decay: Any
    mu: Any
    rho: Any
    q: Any
    epsilon: Any
    delta: Any
    clip: Any
    noise_multiplier: Any = 0.0  # dp="central": the server noise's std over its step's sensitivity (host-calibrated)
    own: Any = OwnHParams()  # the algorithm's own hyper-parameters, name -> float32 scalar (no leaves when none)
    fed: Any = ()  # a real federation's numbers, traced (a sweep over them is one program): {"dropout": P} under
                   # --dropout P > 0, {"deadline": D} under --stragglers; empty otherwise (no leaves)


class ServerIn(NamedTuple):
    theta: Any          # global params θ_t
    deltas: Any         # pseudo-gradients Δ_i, leading axis m
    weights: Any        # p_i = n_i / Σ n_j, [m]
    losses: Any         # l_i = f_i(θ_t), [m] (zeros when the algorithm does not need them)
    lr_t: Any           # local learning rate of this round
    server_lr_t: Any    # server learning rate of this round
    hp: HParams
    t: Any              # round index
    sel: Any            # sampled client ids, [m]
    sstate: Any         # server state (history rows) or ()
    noise_var: Any = None  # [m]: Σ over Δ_i's values of their privacy-noise variance (needs_noise_var)
    num_clients: Any = None  # N, the federation's size (a Python int)
    n: Any = None       # [m] int32: the clients' absolute sample counts n_i
    aux: Any = None     # the clients' auxiliary uploads (upload's third element), leading axis m; or None
    key: Any = None     # a PRNG key for the server's own randomness: fold_in(fold_in(run key, t), SERVER_KEY),
                        # so it differs across seeds and rounds and is the same on resume
    apply: Any = None   # the model: apply(params, x, *, train=False, key=None) -> (logits, features)
    rounds: Any = None  # the run's --rounds (a Python int): round t is the last when t == rounds - 1
    arrived: Any = None  # [m] bool under --availability/--dropout: which slots' uploads arrived (the others'
                         # deltas are zeros, weights 0); None in a plain round (every slot arrived), so a
                         # server that branches on it in Python leaves the plain round's program as it was


SERVER_KEY = 0x5E12  # the constant folded into the round's key for ServerIn.key (central DP's noise uses 0x5EED)


class Batch(NamedTuple):
    """One minibatch, the one batch type every client function sees: a local step's (``ClientProgram.step``),
    a data pass's (:meth:`~fedalf_jax.sim.program.DataPass.fold`) and a ``local_loss``'s
    (:func:`~fedalf_jax.sim.default_client.local_training`'s piece, ``Algorithm.local_loss``,
    ``Personal.local_loss``).

    * ``x`` ``[B, ...]``, ``y`` ``[B]`` int32, ``mask`` ``[B]`` bool: the examples and which are real (padding is
      ``False``: weigh every sum by it).
    * ``step``: int32, the local step's index over the round's epochs (0, 1, ..., ``facts.steps`` − 1); in a
      data pass the batch's index.
    * ``key``: the step's dropout key in a client program's step (``None`` in a data pass and a ``local_loss``).
    * ``logits`` / ``features`` (a ``local_loss`` only, else ``None``): the model at the params being trained,
      in training mode (dropout, batch statistics) - the pass whose batch statistics the step keeps.
      ``features`` is what a model returning ``(logits, features)`` returns beside its logits (MOON's
      projection), else ``None``. For ``Personal.local_loss`` (whose params may be any pytree) both are
      ``None``: call ``apply``.
    * ``apply(params) -> (logits, features)`` (a ``local_loss`` only, else ``None``; a client program calls
      ``ctx.apply``): the model on this batch at other params (θ, a previous model, a mixture), in evaluation
      mode (no dropout; the running batch statistics). Differentiable.
    * ``w``: for ``Personal.local_loss``, the params of the global copy ``w`` at this step (its gradient
      is stopped); else ``None``.

    ``fj.ClientBatch`` is the same class (its 0.1 name). :func:`cross_entropy` is the round's default loss on a
    batch."""

    x: Any
    y: Any
    mask: Any
    step: Any
    key: Any = None
    logits: Any = None
    features: Any = None
    apply: Optional[Callable] = None
    w: Any = None


def cross_entropy(batch: Batch, logits=None):
    """The mean cross-entropy over the batch's real examples (``mask``): the loss each local step
    minimises by default; ``logits`` default ``batch.logits``."""
    import optax
    logits = batch.logits if logits is None else logits
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch.y)
    w = batch.mask.astype(ce.dtype)
    return jnp.sum(ce * w) / jnp.maximum(jnp.sum(w), 1.0)


class ClientProgram(NamedTuple):
    """A client's local procedure (docs/extending.md "The client program"): ``init(ctx) -> carry``,
    ``step(carry, batch, ctx) -> carry`` once per local minibatch step, ``final(carry, ctx) -> (Δ_i, new
    state[, aux])`` or ``fj.Reveal(w, new state[, aux])`` (the model it reveals: the round privatises it and
    uploads ``θ − w̃``; the form that runs under a privacy mechanism). ``step=None``: no local steps (the client's work is in ``init``/``final``, e.g. a data
    pass). ``evaluate(ctx) -> params``: the model each client is evaluated with, beside the global one, at
    every evaluation, for every client (sampled or not), from the same ``ctx`` (θ, its state, the broadcast,
    ``apply``, the data pass over its training examples; ``ctx.t`` the rounds done): a fine-tune, a cluster's
    model, an adaptation from θ; in place of ``Algorithm.personal_model``. ``training``: the pieces of a
    :func:`fj.local_training <fedalf_jax.sim.default_client.local_training>` program (the round builds it from
    them once per client); ``None`` for a program written by hand. ``collections``: the model collections a
    program written by hand keeps per client (``("batch_stats",)``: FedBN's own statistics, its ``ctx.stats``;
    ``fj.Reveal(stats=...)`` returns them)."""

    init: Callable
    step: Optional[Callable]
    final: Callable
    evaluate: Optional[Callable] = None
    training: Any = None
    collections: tuple = ()


class ClientFacts(NamedTuple):
    """What a client knows of itself (a client program's ``ctx.facts``; the default client's functions get it
    as ``facts=`` when they have a parameter ``facts``): its sample count, the SGD steps its local training
    takes this round, its training labels counted and its index."""

    n: Any       # int32 scalar: n_i
    steps: Any   # int32 scalar: local SGD steps, epochs · ⌈n_i / B⌉ or --local-steps K (0 without local training)
    label_counts: Any = None  # [num_classes] int32: the client's training labels counted
    index: Any = None         # int32 scalar: the client's index in 0 … N − 1


SERVER_INFO = ("qp_iters", "qp_residual", "qp_fallback", "qp_blocks")


def _no_info():
    return {k: jnp.zeros((), jnp.float32) for k in SERVER_INFO}


def _no_server_state(params, num_clients):
    return ()


def zeros_like_params(params):
    """A per-client state of zeros shaped like the model's params (the ADMM dual's ``init_client_state``)."""
    return jax.tree_util.tree_map(jnp.zeros_like, params)


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """One algorithm: small pure functions the round calls (build it with a factory below, or write
    your own: docs/extending.md has the contract).

    * ``server(s: ServerIn) -> (new θ, new server state, info)``: ``info`` is ``{}`` or a dict of float32
      scalars among :data:`SERVER_INFO` (missing ones are filled with zeros).
    * ``upload(theta, w, w_tilde, state, hp, lr_t) -> (Δ_i, new state)``: ``w`` the client's trained
      params, ``w_tilde`` what it reveals (``w`` itself unless a privacy mechanism is on), ``state`` its
      per-client state (``()`` without ``init_client_state``).
    * ``penalty(theta, state, hp) -> (params -> scalar)`` added to the client's loss, or ``None``.
    * ``init_client_state(params) -> pytree``: one client's initial state (the round keeps one per client,
      stored in ``--state-dtype``); ``None``: no per-client state.
    * ``init_server_state(params, num_clients[, key=, init=]) -> pytree`` (``key``: a PRNG key of its own;
      ``init``: ``key -> params``, the model's initialiser, for a server keeping more models than θ).
    * ``private_upload``: the upload is a function of ``w_tilde`` and public values only, so a privacy
      mechanism's guarantee covers it (post-processing); a user's algorithm declares it.
    * ``broadcast(server_state) -> pytree`` (optional): what the server sends every client this round
      beside θ; ``penalty`` and ``upload`` get it as the keyword ``broadcast=`` when they have a parameter
      of that name (shared by the clients, not vmapped).
    * ``penalty`` and ``upload`` get ``facts=ClientFacts(n, steps, label_counts, index)`` when they have a parameter ``facts``.
    * ``upload`` may return ``(Δ_i, new state, aux)``: ``aux`` (any pytree) reaches the server stacked over
      the m clients as ``ServerIn.aux``; ``public_aux`` must then say whether it is a function of ``w_tilde``
      and public values (``True``: covered by the privacy guarantee) or not (``False``).
    * ``metrics``: the names of the scalars the server returns in ``info`` beyond :data:`SERVER_INFO`, and
      of those the clients return in ``aux["metrics"]`` (averaged over the round's clients): written to
      ``metrics.csv``, TensorBoard and the report.
    * ``local_start(theta, state, hp) -> params`` (optional): where the client's local training starts
      (default θ), e.g. a point derived from its state.
    * ``local_optimizer``: ``lr_t -> optax.GradientTransformation`` (:func:`local_optimizer` makes the
      usual ones), with a fresh optimiser state every round; ``None``: plain SGD ``w − η_l g``. It gets
      ``hp=`` and ``facts=`` (and ``broadcast=``) when it has parameters of those names (FedRep's
      head-then-body schedule from ``facts.steps`` and ``hp.own``).
    * ``personal``: a :class:`Personal`, a second local model ``v_i`` trained in the same round from
      ``personal.start`` on ``f_i(v) + personal.penalty(v)`` over the same minibatches and steps (and with
      the same optimiser) as ``w_i``; ``upload`` receives it as the keyword ``personal=`` and keeps it in the
      client's new state. ``v_i`` never leaves the client: only ``Δ_i`` is privatised and uploaded.
    * ``personal_model(state[, theta]) -> params`` (optional): the client's own model, read from its state
      (and, when it has a parameter ``theta``, the current global params θ_t: FedPer's "global body + own
      head", APFL's mixture); the evaluation then also tests each client's own model on its test split
      (``personal_*`` in metrics.csv). A client never sampled yet has no model of its own: it is evaluated
      with the global model θ_t (with the global batch statistics).
    * ``local_loss(theta, state, hp) -> ((params, batch: Batch) -> scalar)`` (optional): the loss each local
      SGD step minimises instead of the cross-entropy (:func:`cross_entropy` gives that one back), from the
      step's :class:`Batch` (its examples, the model's logits and features, the model at other params).
      ``penalty`` is still added. MOON, distillation, prototypes, PropFair's ``−log(M − f)``.
    * ``client_collections``: model collections besides ``params`` kept per client (``("batch_stats",)``:
      FedBN): each client trains from its own copy (at first the model's initial one) and keeps what it
      trained; its personal evaluation uses its own. The global model's copy is still averaged as before.
    * ``local_optimizer`` and the functions above get ``hp=`` / ``broadcast=`` / ``facts=`` keywords as
      their signatures ask (see ``client_kwargs``).
    * ``local_start``, ``personal.start`` and ``personal.penalty`` get ``broadcast=``/``facts=`` like ``penalty``.
    * ``hparams``: the algorithm's own numeric hyper-parameters, ``{name: default}`` (given as a dict,
      kept as a tuple of ``(name, default)`` pairs so the algorithm stays hashable): traced like ``lr``,
      read as ``hp.own[name]``, set by ``Config(hp={name: value})`` / ``--hp name=value`` and swept in one
      program (docs/extending.md).
    * ``reads_server_lr``: ``False`` declares that ``server`` never reads ``ServerIn.server_lr_t`` (it sets its
      own step, as FedExP's extrapolation does): a given ``--server-lr``/``--server-lr-decay`` is then said to
      have no effect, and a sweep runs once the combinations differing only in them.
    * ``needs_features``: the algorithm reads the model's features (``batch.features``, ``ctx.apply``'s second
      value): a model that returns its logits only is refused in one line before anything is compiled.
    """

    name: str
    server: Callable           # ServerIn -> (new θ, new server state, info)
    upload: Optional[Callable] = None  # (theta, w, w_tilde, state, hp, lr_t) -> (Δ_i, new state); or client=
    penalty: Optional[Callable] = None  # (theta, state, hp) -> (params -> scalar), or None
    local_train: bool = True   # False: the client sends ∇f_i(θ_t) (FedLF client_grad=full)
    needs_loss: bool = False   # the server uses l_i = f_i(θ_t)
    init_client_state: Optional[Callable] = None  # params -> one client's state (the ADMM dual), or None
    init_server_state: Callable = _no_server_state  # (params, num_clients) -> server state
    needs_noise_var: bool = False  # the server uses ServerIn.noise_var (under a privacy mechanism)
    private_upload: bool = False  # the upload is post-processing of w̃ (a user's algorithm declares it)
    broadcast: Optional[Callable] = None  # server state -> pytree every client receives (keyword broadcast=)
    public_aux: Optional[bool] = None  # an auxiliary upload is post-processing of w̃ (True) or not (False)
    metrics: tuple = ()  # the algorithm's own metric names (server info beyond SERVER_INFO, aux["metrics"])
    local_start: Optional[Callable] = None  # (theta, state, hp) -> params where local training starts (θ)
    local_optimizer: Optional[Callable] = None  # lr_t -> optax.GradientTransformation, or None: w − η_l g
    personal: Optional["Personal"] = None  # a second local model v_i trained in the round (Ditto's)
    personal_model: Optional[Callable] = None  # (client state[, theta]) -> params: the client's own model
    local_loss: Optional[Callable] = None  # (theta, state, hp) -> ((params, Batch) -> scalar): each step's loss
    client_collections: tuple = ()  # model collections kept per client, e.g. ("batch_stats",) (FedBN)
    hparams: Any = ()  # the algorithm's own hyper-parameters: {name: default float}, kept as ((name, default), ...)
    client: Any = None  # a fj.ClientProgram(init, step, final): the client's whole procedure instead of upload & co.
    reads_server_lr: bool = True  # False: the server never reads ServerIn.server_lr_t (it sets its own step: FedExP)
    needs_features: bool = False  # reads the model's features: a model returning logits only is refused up front

    def __post_init__(self):
        object.__setattr__(self, "hparams", _own_hparams(self.name, self.hparams))
        _check_client_program(self)
        _warn_old_client_fields(self)
        cols = (self.client_collections,) if isinstance(self.client_collections, str) else self.client_collections
        object.__setattr__(self, "client_collections", tuple(cols))
        bad = [c for c in self.collections if c not in CLIENT_COLLECTIONS]
        if bad:
            from ..runtime.errors import ConfigError as error  # as contract.error makes it; contract imports this module
            raise error(f"algorithm {self.name!r}: client_collections {bad} are not model collections the round "
                        f"keeps per client; use {CLIENT_COLLECTIONS}")

    @property
    def hparam_defaults(self) -> dict:
        """``{name: default}`` of :attr:`hparams`, in declaration order."""
        return dict(self.hparams)

    def client_kwargs(self, fn, broadcast, facts, **more) -> dict:
        """The keywords ``fn`` (``penalty``, ``upload``, ...) takes beyond its positional arguments: ``broadcast``
        (when the algorithm has one), ``facts`` and any of ``more`` (e.g. ``hp=`` for ``local_optimizer``), each
        only if ``fn`` has a parameter of that name, so a function written for the old contract is called as
        before."""
        kw = {}
        if self.broadcast is not None and _takes(fn, "broadcast"):
            kw["broadcast"] = broadcast
        if _takes(fn, "facts"):
            kw["facts"] = facts
        kw.update({k: v for k, v in more.items() if _takes(fn, k)})
        return kw

    @property
    def collections(self) -> tuple:
        """The model collections the round keeps per client: ``fj.local_training``'s ``client_collections`` (or
        the old field's)."""
        if self.client_collections or self.client is None:
            return self.client_collections
        training = self.client.training
        cols = training.client_collections if training is not None else self.client.collections
        return (cols,) if isinstance(cols, str) else tuple(cols)

    @property
    def trains_locally(self) -> bool:
        """The client trains a model locally (it reveals one a privacy mechanism can perturb): not a
        ``full_gradient`` (old ``local_train=False``) client."""
        training = getattr(self.client, "training", None)
        return self.local_train and (training is None or not training.full_gradient)

    @property
    def hand_written(self) -> bool:
        """The client is a program written by hand (the round computes its upload from a ``fj.Reveal``), not
        local training (``fj.local_training``, or the old fields), whose upload is the algorithm's own."""
        return self.client is not None and self.client.training is None

    @property
    def evaluates_own(self) -> bool:
        """Each evaluation also evaluates every client's own model: ``client.evaluate`` or ``personal_model``."""
        return self.personal_model is not None or (self.client is not None and self.client.evaluate is not None)

    @property
    def keeps_seen(self) -> bool:
        """The round keeps which clients were ever sampled (``personal_model``'s rule for the others)."""
        return self.personal_model is not None

    @property
    def has_client_state(self) -> bool:
        """A state per client lives in the run state (FedADMM's and FedALF's dual)."""
        return self.init_client_state is not None


_DEFAULT_CLIENT_FIELDS = ("penalty", "local_start", "local_optimizer", "personal", "local_loss")


def _check_client_program(alg: "Algorithm") -> None:
    """An algorithm gives its client as ``upload`` (and the default client's optional fields) or as ``client``
    (a :class:`~fedalf_jax.sim.program.ClientProgram`), not both; one line otherwise."""
    from ..runtime.errors import ConfigError as error  # as contract.error makes it; contract imports this module
    if alg.client is None:
        if alg.upload is None:
            raise error(f"algorithm {alg.name!r} has no client: give upload=(theta, w, w_tilde, state, hp, lr_t) -> "
                        f"(Δ_i, new state) or client=fj.ClientProgram(init, step, final) (docs/extending.md)")
        return
    if not isinstance(alg.client, ClientProgram):
        raise error(f"algorithm {alg.name!r}: client is a {type(alg.client).__name__}; expected "
                    f"fj.ClientProgram(init, step, final)")
    for k, f in zip(ClientProgram._fields, alg.client):
        if k in ("training", "collections"):
            continue
        if not callable(f) and not (k in ("step", "evaluate") and f is None):
            raise error(f"algorithm {alg.name!r}: client.{k} is a {type(f).__name__}; expected a function")
    if alg.client.evaluate is not None and alg.personal_model is not None:
        raise error(f"algorithm {alg.name!r} has both client.evaluate and personal_model, two ways to name the model "
                    f"each client is evaluated with; keep client.evaluate(ctx) (it sees the state, θ and the data)")
    given = _old_client_fields(alg)
    if given and alg.client.training is None:  # fj.local_training's program takes them (0.1 code replacing fields)
        raise error(f"algorithm {alg.name!r} has a client program and also {', '.join(given)}, which belong to the "
                    f"default client; write them into the program's init, step and final, or drop client=")


def _old_client_fields(alg: "Algorithm") -> list:
    """The 0.1 client fields ``alg`` was given (``fj.local_training``'s pieces now)."""
    given = [k for k in ("upload", *_DEFAULT_CLIENT_FIELDS) if getattr(alg, k) is not None]
    given += ["client_collections"] if alg.client_collections else []
    given += ["local_train=False"] if not alg.local_train else []
    return given


_WARNED: set = set()  # (algorithm name, old fields) already warned of in this process
DEPRECATED = "of fj.Algorithm are deprecated; give client=fj.local_training("  # the warning's text, for tests


class unwarned:
    """Within: algorithms built with the warnings ignored (a digest's or a check's build) do not count as warned
    of, so the next build outside still gives its one line."""

    def __enter__(self):
        self._before = set(_WARNED)

    def __exit__(self, *exc):
        _WARNED.intersection_update(self._before)
        return False


def _warn_old_client_fields(alg: "Algorithm") -> None:
    """One :class:`~fedalf_jax.runtime.notices.Notice` line for an algorithm written with the 0.1 client fields,
    naming the replacement (they keep working for a release)."""
    given = _old_client_fields(alg)
    if not given or (alg.name, tuple(given)) in _WARNED:  # once a process: a factory is called at every build
        return
    _WARNED.add((alg.name, tuple(given)))
    import warnings
    from ..runtime.notices import Notice
    names = [g.split("=")[0] for g in given]
    new = ", ".join("full_gradient=True" if g == "local_train=False" else f"{g}=" for g in given)
    warnings.warn(f"algorithm {alg.name!r}: the client fields {', '.join(names)} {DEPRECATED}{new}) with functions of ctx instead (docs/extending.md)",
                  Notice, stacklevel=4)


RESERVED_HPARAMS = HParams._fields  # an algorithm's own names may not shadow these
CLIENT_COLLECTIONS = ("batch_stats",)  # the model collections an algorithm may keep per client


def _own_hparams(name: str, given) -> tuple:
    """``Algorithm.hparams`` checked and normalised to ``((name, float default), ...)``; one line otherwise."""
    from ..runtime.errors import ConfigError as error  # as contract.error makes it; contract imports this module
    head = f"algorithm {name!r}: hparams"
    if isinstance(given, Mapping):
        pairs = list(given.items())
    else:
        try:
            pairs = [tuple(p) for p in given]
        except TypeError:
            pairs = None
        if pairs is None or any(len(p) != 2 for p in pairs):
            raise error(f"{head} must be a dict of name to default value, e.g. {{'beta1': 0.9}}, got "
                        f"{type(given).__name__} {given!r}")
    out, seen = [], set()
    for k, v in pairs:
        if not isinstance(k, str) or not k.isidentifier():
            raise error(f"{head}: the name {k!r} is not a Python identifier; use names like 'beta1'")
        if k in RESERVED_HPARAMS:
            raise error(f"{head}: the name {k!r} is one of fj.HParams' own fields ({', '.join(RESERVED_HPARAMS)}); "
                        f"choose another name")
        if k in seen:
            raise error(f"{head}: the name {k!r} is declared twice")
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
            raise error(f"{head}: the default of {k!r} must be a finite number, got {type(v).__name__} {v!r}")
        seen.add(k)
        out.append((k, float(v)))
    return tuple(out)


class Personal(NamedTuple):
    """A second local model ``v_i`` the client trains in the same round as ``w_i`` (Ditto's personal model):
    from ``start(theta, state, hp) -> params`` on ``f_i(v) + penalty(theta, state, hp)(v)`` (``penalty``
    ``None``: ``f_i`` alone), step by step beside ``w_i`` over the same minibatches, with the same learning
    rate and (its own copy of the) optimiser. The result reaches ``upload`` as the keyword ``personal=``,
    which keeps it in the new client state.

    ``local_loss(theta, state, hp) -> ((p, batch: Batch) -> scalar)`` (optional) replaces ``f_i(v)``: then
    ``start`` may return any pytree ``p`` (APFL's ``{"v": params, "alpha": scalar}``), and the function gets
    ``batch.w``, the global copy's params at the same step, and ``batch.apply`` to run the model at any
    params (APFL's loss at the mixture ``α v + (1 − α) w``, differentiated in ``v`` and ``α``)."""

    start: Callable                      # (theta, state, hp) -> params (any pytree with local_loss)
    penalty: Optional[Callable] = None   # (theta, state, hp) -> (params -> scalar), or None
    local_loss: Optional[Callable] = None  # (theta, state, hp) -> ((p, Batch) -> scalar), or None: f_i(v)


LOCAL_OPTIMIZERS = ("sgd", "momentum", "nesterov", "adam")


def local_optimizer(name: str, **kw) -> Callable:
    """``lr_t -> optax.GradientTransformation`` for ``Algorithm.local_optimizer``: ``"sgd"`` (optax.sgd: the
    plain step, through optax), ``"momentum"`` / ``"nesterov"`` (optax.sgd with ``momentum=`` ``kw.get("beta",
    0.9)``), ``"adam"`` (optax.adam; ``b1``, ``b2``, ``eps`` as keywords). The state starts afresh every round."""
    import optax
    if name not in LOCAL_OPTIMIZERS:
        raise ValueError(f"local_optimizer: unknown optimiser {name!r}; use one of {', '.join(LOCAL_OPTIMIZERS)}")
    if name == "sgd":
        if kw:
            raise ValueError(f"local_optimizer('sgd') takes no options, got {sorted(kw)}")
        return lambda lr: optax.sgd(lr)
    if name in ("momentum", "nesterov"):
        beta = kw.pop("beta", 0.9)
        if kw:
            raise ValueError(f"local_optimizer({name!r}) takes beta=, got {sorted(kw)}")
        return lambda lr: optax.sgd(lr, momentum=beta, nesterov=name == "nesterov")
    bad = sorted(set(kw) - {"b1", "b2", "eps"})
    if bad:
        raise ValueError(f"local_optimizer('adam') takes b1=, b2=, eps=, got {bad}")
    return lambda lr: optax.adam(lr, **kw)


def _takes(fn, name: str) -> bool:
    """``fn`` has a parameter ``name`` (or ``**kwargs``)."""
    import inspect
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


# ---- local objectives ---------------------------------------------------------------------

def prox_penalty(theta, dual, hp):
    return lambda w: 0.5 * hp.mu * T.sq_norm(T.sub(w, theta))


def admm_penalty(theta, dual, hp):
    return lambda w: T.vdot(dual, T.sub(w, theta)) + 0.5 * hp.rho * T.sq_norm(T.sub(w, theta))


# ---- uploads ----------------------------------------------------------------------------------

def model_upload(theta, w, w_tilde, dual, hp, lr_t):
    """u_i = w̃_i: Δ_i = θ − w̃_i (the client's state passes through unchanged)."""
    return T.sub(theta, w_tilde), dual


def scaled_model_upload(theta, w, w_tilde, dual, hp, lr_t):
    """FedLF client_grad=local: Δ_i = (θ − w̃_i)/η_l."""
    return T.scale(T.sub(theta, w_tilde), 1.0 / lr_t), dual


SERVER_TARGETS = ("increment", "augmented", "model")
DUAL_FROM = ("local", "perturbed")


def make_admm_upload(server_target: str, dual_from: str):
    """The ADMM client's dual update ``λ ← λ + ρ(src − θ)`` and its upload ``u_i`` (``Δ_i = θ − u_i``).

    ``src`` is ``w`` (``dual_from="local"``) or ``w̃`` (``"perturbed"``). ``server_target``:
    ``"increment"`` ``u = w̃ + (λ − λ⁻)/ρ`` (FedADMM's released rule: the change of the augmented
    model ``w + λ/ρ``), ``"augmented"`` ``u = w̃ + λ/ρ`` (the whole dual), ``"model"`` ``u = w̃``.
    """
    if server_target not in SERVER_TARGETS:
        raise ValueError(f"unknown server_target {server_target!r}; use one of {', '.join(SERVER_TARGETS)}")
    if dual_from not in DUAL_FROM:
        raise ValueError(f"unknown dual_from {dual_from!r}; use one of {', '.join(DUAL_FROM)}")

    def upload(theta, w, w_tilde, dual, hp, lr_t):
        src = w_tilde if dual_from == "perturbed" else w
        step = T.scale(T.sub(src, theta), hp.rho)  # λ − λ⁻
        new_dual = T.add(dual, step)
        if server_target == "increment":
            u = T.add(w_tilde, T.scale(step, 1.0 / hp.rho))
        elif server_target == "augmented":
            u = T.add(w_tilde, T.scale(new_dual, 1.0 / hp.rho))
        else:
            u = w_tilde
        return T.sub(theta, u), new_dual
    return upload


# ---- server updates ---------------------------------------------------------------------------

def weighted_mean_server(s: ServerIn):
    """FedAvg / FedProx: θ ← θ − η_g Σ p_i Δ_i."""
    step = T.weighted_sum(s.deltas, s.weights)
    return T.sub(s.theta, T.scale(step, s.server_lr_t)), s.sstate, _no_info()


def mean_server(s: ServerIn):
    """FedADMM: θ ← θ − η_g mean_i Δ_i, the mean over the arrived clients (``ServerIn.arrived``)."""
    m = s.weights.shape[0]
    if s.arrived is None:
        w = jnp.full((m,), 1.0 / m)
    else:
        w = s.arrived.astype(jnp.float32) / jnp.maximum(jnp.sum(s.arrived), 1).astype(jnp.float32)
    step = T.weighted_sum(s.deltas, w)
    return T.sub(s.theta, T.scale(step, s.server_lr_t)), s.sstate, _no_info()


@per_run
def qfedavg_server(s: ServerIn):
    """q-FFL: Δ_i = F^q Δw_i, h_i = q F^{q−1}‖Δw_i‖² + F^q/η_l, θ ← θ − ΣΔ_i/Σh_i, Δw_i = (θ−w_i)/η_l."""
    F = s.losses + 1e-10
    q = s.hp.q
    dw = T.scale(s.deltas, 1.0 / s.lr_t)
    dw_sq = sum(jnp.sum(x.reshape(x.shape[0], -1) ** 2, axis=1) for x in jax.tree_util.tree_leaves(dw))
    fq = F ** q
    h = q * F ** (q - 1.0) * dw_sq + fq / s.lr_t
    if s.arrived is not None:  # the sums over the arrived clients only (nothing arrived: server_step keeps θ)
        fq = jnp.where(s.arrived, fq, 0.0)
        h = jnp.where(s.arrived, h, 0.0)
        h_sum = jnp.sum(h)
        step = T.scale(T.weighted_sum(dw, fq), 1.0 / jnp.where(h_sum > 0, h_sum, 1.0))
    else:
        step = T.scale(T.weighted_sum(dw, fq), 1.0 / jnp.sum(h))
    return T.sub(s.theta, step), s.sstate, _no_info()


def history_rows(last, sel, t, tau=None):
    """Which stored rows join round ``t``'s QPs (FedLF's released code): with ``M`` the clients seen so
    far (``last ≥ 0``, or online now) and ``m = len(sel)``, when ``M > m`` every client that is not
    online and was last online at a round ``≥ t − τ``, ``τ = ⌊M/m⌋``, or ``tau`` when given (``0``: no
    stored row joins). ``last``: ``[N]`` round each client was last online (−1: never)."""
    n = last.shape[0]
    m = sel.shape[0]
    online = jnp.zeros((n,), bool).at[sel].set(True)
    seen = jnp.sum((last >= 0) | online)
    if tau is None:
        tau = seen // m
    return (seen > m) & ~online & (last >= 0) & (last >= t - tau)


FAIR_NORMS = ("raw", "denoised")


def make_fair_server(layer_of, *, history: bool, merge_tol: float, qp_method: str, fair_norm: str = "raw",
                     history_tau=None):
    """FedLF / FedALF: θ ← θ − η_g d with d the layer-wise fair direction (docs/algorithms.md).

    ``fair_norm``: the length d is rescaled to, ``‖mean_i Δ_i‖`` of the uploads as received (``"raw"``),
    or with the privacy noise's share removed (``"denoised"``: ``E‖Σ Δ̃_i‖² = ‖Σ Δ_i‖² + Σ_i Var Δ̃_i``,
    the variances from ``ServerIn.noise_var``). ``history_tau``: how many rounds a stored row stays
    (:func:`history_rows`'s ``τ``; ``None``: FedLF's ``⌊M/m⌋``)."""
    from .fairness import fair_direction, update_history_gram
    if fair_norm not in FAIR_NORMS:
        raise ValueError(f"unknown fair_norm {fair_norm!r}; use one of {', '.join(FAIR_NORMS)}")

    def server(s: ServerIn):
        noise = jnp.sum(s.noise_var) if fair_norm == "denoised" and s.noise_var is not None else None
        kw = dict(layer_of=layer_of, merge_tol=merge_tol, qp_method=qp_method, noise_sq=noise)
        if history:
            hist, last, gram = s.sstate
            mask = history_rows(last, s.sel, s.t, history_tau)
            # This round's uploads are stored first: the online clients' rows never join the QPs (masked out,
            # so the values in them change nothing), and a write after the reads made XLA copy all H x D rows
            # twice per round to keep the old rows readable (80 ms of a 190 ms CNN server step on CPU).
            hist = T.put(hist, s.sel, s.deltas)
            d, info = fair_direction(s.deltas, s.losses, history=hist, history_mask=mask, history_gram=gram, **kw)
            sstate = (hist, last.at[s.sel].set(s.t), update_history_gram(gram, s.sel, info))
        else:
            d, info = fair_direction(s.deltas, s.losses, **kw)
            sstate = s.sstate
        out = {"qp_iters": info["qp_iters"], "qp_residual": info["qp_residual"],
               "qp_fallback": info["fallback"], "qp_blocks": info["num_blocks"]}
        return T.sub(s.theta, T.scale(d, s.server_lr_t)), sstate, {k: jnp.asarray(v, jnp.float32)
                                                                     for k, v in out.items()}

    def init_state(params, num_clients):
        """History rows of all N clients (in the dtype of ``params``: the storage dtype), the round each was
        last online, and their per-layer Gram (float32)."""
        if not history:
            return ()
        k = max(jax.tree_util.tree_leaves(layer_of)) + 1
        return (T.zeros_stacked(params, num_clients), jnp.full((num_clients,), -1, jnp.int32),
                jnp.zeros((k, num_clients, num_clients), jnp.float32))

    return server, init_state


# ---- the built-in algorithms: each a plug-in in its own module (fedalf_jax.algorithms) -------------------------

_MOVED = ("fedavg", "fedprox", "qfedavg", "fedadmm", "fedlf", "fedalf", "FACTORIES")


def __getattr__(name: str):
    """The built-in factories' old import path (``from fedalf_jax.sim.algorithms import fedadmm``), kept for a
    release: each is now an ordinary plug-in in its own module, ``fedalf_jax.algorithms.NAME`` (``fj.algorithms``).
    Resolved by name at first use (this module is the floor below them: no import of theirs here)."""
    if name in _MOVED:
        import importlib
        return getattr(importlib.import_module("fedalf_jax.algorithms"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
