"""The federated round: one pure function, compiled once, used by every algorithm (docs/algorithms.md).

``round_step(spec, state, hp, data)`` samples ``m`` clients with ``jax.random``, gathers their
(padded) index rows, runs every sampled client's local update vmapped, applies the privacy
mechanism, lets the algorithm's server function aggregate, and returns the new state and the
round's metrics. ``run_rounds`` scans it; :mod:`fedalf_jax.sim.train` adds the evaluation.

Under ``jax.vmap`` over runs (a sweep), the server step is batched: the fair direction's QPs of all
runs and layers are one batch whose solver loops run per problem (:mod:`fedalf_jax.sim.qp`), so the
server's sequential depth is its slowest run's; qFedAvg's norms (and the fair direction with the
``osqp`` solver, whose batch shares one loop) run once per run (:func:`fedalf_jax.sim.batching.per_run`).
A batched run equals its single run up to float32 summation order. The clients of all runs are
batched together with ``client_map="vmap"``, and mapped one (run, client) pair at a time with
``client_map="map"`` (:func:`fedalf_jax.sim.batching.each_pair_in_turn`).
"""

from __future__ import annotations

import dataclasses
import functools
import types
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from . import tree as T
from .tree import _HI
from . import contract as C
from .algorithms import SERVER_INFO, SERVER_KEY, Algorithm, HParams, ServerIn
from .batching import each_pair_in_turn
from .client import ClientOut
from .client import local_steps as steps_of
from .default_client import default_program
from .algorithms import _takes
from .program import model_apply, privatise, program_client, upload_noise  # noqa: F401 (privatise, upload_noise: here too)


class ClientData(NamedTuple):
    """Device-resident data: the pooled examples and every client's padded index rows."""

    x: Any          # [P, H, W, C] float32
    y: Any          # [P] int32
    train_idx: Any  # [N, L_train] int32 (padded)
    train_n: Any    # [N] int32
    test_idx: Any   # [N, L_test] int32 (padded)
    test_n: Any     # [N] int32


class RunState(NamedTuple):
    variables: Any  # global model {'params': θ, ('batch_stats': ...)}
    client_states: Any  # the per-client states of all N clients (leading axis N; FedADMM's duals), or ()
    sstate: Any     # server state (FedLF history rows), or ()
    round: Any      # int32 scalar: the next round's index
    key: Any        # the run key; round t uses fold_in(key, t)
    clients: Any = ()  # what the round keeps per client for the algorithm beside its state (:func:`kept_per_client`)
    average: Any = ()  # --eval-average: the mean of the global variables after rounds 1..t (θ_0 before any), or ()

    @property
    def duals(self):
        """The old name of :attr:`client_states` (0.1), kept for a release: read-only."""
        return self.client_states


@dataclasses.dataclass(frozen=True, eq=False)
class RoundSpec:
    """Everything static about a round (shapes, algorithm choice, privacy choice)."""

    model: Any
    algorithm: Algorithm
    num_clients: int
    clients_per_round: int
    epochs: int
    batch_size: int
    layer_of: Any               # pytree like params with int layer ids
    ldp: str = "none"
    ldp_on: str = "weights"     # the local mechanism perturbs the weights w or the update w − θ
    dp: str = "none"
    neighbouring: str = "add_remove"  # Gaussian DP's neighbouring relation
    client_map: str = "vmap"    # "vmap" or "map" (lax.map): see default_client_map
    state_dtype: Any = jnp.float32  # storage of the per-client rows (ADMM duals, history): float32 or bfloat16
    client_devices: int = 1     # shard the sampled clients over this many devices (one big run): the
                                # round must then run inside a shard_map over the mesh axis "clients"
    central_sensitivity: float = 0.0  # dp="central": the server step's sensitivity in units of η_g·clip
    local_steps: Any = None     # --local-steps K: K minibatch steps per round instead of `epochs` epochs
    eval_average: bool = False  # --eval-average: RunState.average keeps the mean of θ_1..θ_t (evaluated too)
    rounds: Any = None          # the run's --rounds (ServerIn.rounds: the last round is t == rounds - 1)
    availability: tuple = ("always",)  # --availability, parsed (sim.federation.parse_availability)
    dropout: float = 0.0        # --dropout P: a sampled client's upload is lost with probability P
    stragglers: tuple = ("none",)  # --stragglers, parsed (sim.stragglers.parse_stragglers)
    deadline: float = 0.0       # --deadline D: the round's length in local steps of a speed-1 client
    straggler_policy: str = "partial"  # --straggler-policy: a late client's partial work kept, or its upload lost

    @property
    def federated(self) -> bool:
        """Availability or dropout masks the round's slots (sim.federation); off: today's round, unchanged."""
        return tuple(self.availability) != ("always",) or self.dropout > 0


def default_client_map(backend: str | None = None) -> str:
    """``vmap`` on accelerators; ``map`` (a loop inside the compiled program) on CPU, where it measured
    faster than vmap for the FMNIST CNN round (docs/lab/benchmarks.md): XLA:CPU gains nothing from the
    wider batch, and the vmapped im2col convolution's larger intermediates cost memory traffic."""
    backend = backend or jax.default_backend()
    return "map" if backend == "cpu" else "vmap"


def seed_keys(seed: int):
    """``(init_key, run_key)`` of a run of ``seed``: the model's initialisation and the run key of
    :class:`RunState` (round ``t`` samples its clients from ``fold_in(run_key, t)``)."""
    init_key, run_key = jax.random.split(jax.random.PRNGKey(seed))
    return init_key, run_key


SERVER_INIT_KEY = 0x5E1A  # folded into the seed's init key for init_server_state's key=


def server_init_kwargs(spec: RoundSpec, init_key) -> dict:
    """What ``init_server_state`` takes beside ``(params, num_clients)``, when it has parameters of these names:
    ``key`` (a PRNG key of its own: the seed's init key folded with :data:`SERVER_INIT_KEY`) and ``init``
    (``key -> params``: the model's initialiser, for a server that keeps more models than θ, IFCA's k), the
    params in the dtype the state is stored in."""
    fn, kw = spec.algorithm.init_server_state, {}
    if _takes(fn, "key"):
        kw["key"] = jax.random.fold_in(init_key, SERVER_INIT_KEY)
    if _takes(fn, "init"):
        kw["init"] = lambda key: T.cast(spec.model.init(key)["params"], spec.state_dtype)
    return kw


def init_state(spec: RoundSpec, seed: int) -> RunState:
    init_key, run_key = seed_keys(seed)
    variables = spec.model.init(init_key)
    params = variables["params"]
    stored = T.cast(params, spec.state_dtype)  # per-client rows are stored in spec.state_dtype
    states = client_states(spec.algorithm, stored, spec.num_clients, spec.state_dtype)
    kw = server_init_kwargs(spec, init_key)
    C.check_state_init(spec.algorithm, "init_server_state",  # N is static (a Python int), as in the call below
                       lambda p: C.call(spec.algorithm, "init_server_state", spec.algorithm.init_server_state,
                                        (p, spec.num_clients), kw, "params, num_clients[, key=, init=]"), stored)
    # one buffer per leaf: a user's state that holds one array twice, e.g. (z, z), would otherwise make the
    # donated round refuse to "donate the same buffer twice" in a traceback from inside XLA
    sstate = jax.tree_util.tree_map(jnp.copy, spec.algorithm.init_server_state(stored, spec.num_clients, **kw))
    return RunState(variables, states, sstate, jnp.zeros((), jnp.int32), run_key,
                    kept_per_client(spec.algorithm, variables, spec.num_clients),
                    jax.tree_util.tree_map(jnp.copy, variables) if spec.eval_average else ())


def kept_per_client(alg: Algorithm, variables, num_clients: int):
    """What the round keeps per client beside the algorithm's state (``RunState.clients``): ``"seen"``
    (``[N]`` bool, the clients sampled at least once: a ``personal_model`` evaluates the others with the
    global model) and each of ``alg.client_collections`` (its initial value repeated over the N clients);
    ``()`` when the algorithm asks for neither (the built-in ones), so their states are as before."""
    out = {}
    if alg.keeps_seen:
        out["seen"] = jnp.zeros((num_clients,), bool)
    for c in alg.collections:
        if c not in variables:
            raise C.error(f"algorithm {alg.name!r} keeps the model collection {c!r} per client, but the model has "
                          f"none (its collections: {', '.join(variables)}); use a model with {c} or drop it")
        out[c] = jax.tree_util.tree_map(lambda x: jnp.repeat(x[None], num_clients, axis=0), variables[c])
    return out or ()


def client_states(alg: Algorithm, params, num_clients: int, dtype):
    """Every client's initial state: ``alg.init_client_state(params)`` repeated along a leading axis of
    ``num_clients`` (its floating leaves stored in ``dtype``), or ``()`` without a per-client state."""
    if alg.init_client_state is None:
        return ()
    C.check_state_init(alg, "init_client_state", lambda p: C.call(alg, "init_client_state", alg.init_client_state,
                                                                  (p,), {}, "params"), params)
    one = T.cast(alg.init_client_state(params), dtype)
    return jax.tree_util.tree_map(lambda x: jnp.repeat(jnp.asarray(x)[None], num_clients, axis=0), one)


def client_state_like(alg: Algorithm, params):
    """The shapes and (compute) dtypes of one client's state, as ``init_client_state`` makes it."""
    return jax.eval_shape(alg.init_client_state, params)


def client_step(spec: RoundSpec, theta_vars, state, idx, n, key, hp: HParams, t, x, y, bcast=None,
                own=None, index=None, budget=None) -> ClientOut:
    """One client's whole contribution to round ``t`` (unbatched; the round vmaps it): the algorithm's client
    program (``Algorithm.client``), or the default one its optional fields describe
    (:func:`~fedalf_jax.sim.default_client.default_program`), run by :func:`~fedalf_jax.sim.program.program_client`.
    ``bcast``: what the algorithm's ``broadcast`` chose this round (shared by the clients). ``own``: the
    client's own copies of the algorithm's ``client_collections`` (``{"batch_stats": ...}``), which it trains
    from instead of the global model's. ``index``: the client's id (``ClientFacts.index``). ``budget``: the local
    steps it completes before the deadline (stragglers, ``partial``), or ``None``: all of them."""
    alg = spec.algorithm
    if alg.hand_written:
        program = lambda ctx: alg.client  # noqa: E731
    else:
        program = functools.partial(default_program, spec)
    return program_client(spec, theta_vars, state, idx, n, key, hp, t, x, y, bcast, index, program, own=own,
                          budget=budget)


def sample_clients(spec: RoundSpec, key):
    return jax.random.choice(key, spec.num_clients, (spec.clients_per_round,), replace=False)


_BLOCK = 256  # rounds per call of the sampler replay below (one compile per N, m)
_SAMPLED: dict = {}


def sampled_clients(num_clients: int, clients_per_round: int, seed: int, rounds: int) -> np.ndarray:
    """``[rounds, m]``: the clients that rounds ``0 .. rounds − 1`` of a run of ``seed`` sample, replayed on
    the host from the run's keys with the round's own :func:`round_keys` and :func:`sample_clients` (the
    sampling depends on nothing else: not on the model, the data or the updates). The privacy accounting
    counts each client's participations from it (:func:`participation_counts`)."""
    n, m, seed, rounds = int(num_clients), int(clients_per_round), int(seed), int(rounds)
    key = (n, m, seed)
    have = _SAMPLED.get(key, np.zeros((0, m), np.int32))
    if len(have) < rounds:
        run_key = seed_keys(seed)[1]
        fn = _replay(n, m)
        blocks = [have]
        for t0 in range(len(have), rounds, _BLOCK):
            blocks.append(np.asarray(fn(run_key, jnp.arange(t0, t0 + _BLOCK, dtype=jnp.int32))))
        have = np.concatenate(blocks)
        _SAMPLED[key] = have
    return have[:rounds]


@functools.lru_cache(maxsize=None)
def _replay(n: int, m: int):
    spec = types.SimpleNamespace(num_clients=n, clients_per_round=m)  # all that sample_clients reads

    def one(run_key, t):
        k_sel, _ = round_keys(RunState(None, None, None, t, run_key), m)
        return sample_clients(spec, k_sel)
    return jax.jit(jax.vmap(one, in_axes=(None, 0)))


def federated_sampled(num_clients: int, clients_per_round: int, seed: int, rounds: int, availability: str,
                      dropout: float, train_n=None, classes=None, late=None) -> np.ndarray:
    """``[rounds, m]`` int32 of a federated run (:mod:`fedalf_jax.sim.federation`): the clients whose upload
    arrived in each slot, ``-1`` where the slot was masked (fewer available than ``m``) or its upload dropped;
    replayed on the host with the round's own :func:`federation_masks`. ``train_n`` ([N], each client's training
    size) is needed by ``availability=size`` only, ``classes`` ([N], how many classes each holds) by ``labels``
    only (both in a run folder's ``clients.json``: :func:`client_facts`). ``late``: stragglers whose uploads are
    dropped, ``(stragglers, deadline, epochs, batch_size, local_steps)`` (:func:`straggler_replay`; it needs
    ``train_n``)."""
    from .federation import parse_availability
    n, m = int(num_clients), int(clients_per_round)
    av = parse_availability(availability)
    for need, got, what in (("size", train_n, "training size (train_n)"),
                            ("labels", classes, "number of classes (classes)")):
        if av[0] == need and got is None:
            raise ValueError(f"availability {need}: replaying its sampling needs each client's {what}; pass "
                             f"{what.split('(')[1][:-1]}= (a run folder's clients.json has it)")
    if late is not None and train_n is None:
        raise ValueError("stragglers dropped: replaying them needs each client's training size (train_n); pass "
                         "train_n= (a run folder's clients.json has it)")
    train_n = np.ones((n,), np.int32) if train_n is None else train_n
    run_key = seed_keys(int(seed))[1]
    tn = jnp.asarray(train_n, jnp.int32)
    cl = None if classes is None else jnp.asarray(classes, jnp.int32)
    replay = (_federated_replay.__wrapped__ if av[0] == "trace" else _federated_replay)(n, m, av, float(dropout),
                                                                                        late)
    padded = max(16, 1 << (max(int(rounds), 1) - 1).bit_length())  # a few shapes, not one per --rounds
    return np.asarray(replay(run_key, jnp.arange(padded, dtype=jnp.int32), tn, cl))[:int(rounds)]


@functools.lru_cache(maxsize=64)
def _federated_replay(n: int, m: int, av: tuple, dropout: float, late=None):
    """The compiled replay of a federated run's sampling, one per (N, m, availability, dropout) in a process (the
    seed's key and the rounds are arguments: a run's end and a report replay without compiling again); a trace's
    is built afresh (its file may change)."""
    spec = types.SimpleNamespace(num_clients=n, clients_per_round=m, availability=av, dropout=dropout)

    def one(run_key, t, tn, cl):
        state = RunState(None, None, None, t, run_key)
        k_sel, _ = round_keys(state, m)
        if av != ("always",) or dropout > 0:
            sel, fed = federation_masks(spec, state, k_sel, tn, cl)
            arrived = fed["arrived"]
        else:  # stragglers dropped alone: the round's own uniform sampling (RoundSpec.federated is off)
            sel = sample_clients(spec, k_sel)
            arrived = jnp.ones(sel.shape, bool)
        if late is not None:  # a client past the deadline sent nothing (sim.stragglers, policy drop)
            from .stragglers import steps_done
            st, deadline, epochs, batch_size, k = late
            full = jax.vmap(lambda c: steps_of(c, epochs, batch_size, k))(tn[sel])
            arrived = arrived & (steps_done(st, deadline, run_key, t, sel, full) >= full)
        return jnp.where(arrived, sel, -1)
    return jax.jit(jax.vmap(one, in_axes=(None, 0, None, None)))


def straggler_replay(cfg):
    """The ``late`` argument of :func:`federated_sampled` for a run of ``cfg`` (a Config or config.json's dict)
    whose late clients' uploads are dropped, else ``None``."""
    get = cfg.get if isinstance(cfg, dict) else lambda k, d=None: getattr(cfg, k, d)
    if get("stragglers", "none") == "none" or get("straggler_policy", "partial") != "drop":
        return None
    from .stragglers import parse_stragglers
    return (parse_stragglers(get("stragglers")), float(get("deadline")), int(get("local_epochs")),
            int(get("batch_size")), get("local_steps"))


def client_facts(clients: list) -> tuple:
    """``(train_n, classes)`` ([N] each) from a run folder's ``clients.json`` entries (``n_train``, ``classes``)."""
    return (np.asarray([c["n_train"] for c in clients], np.int32),
            np.asarray([len(c["classes"]) for c in clients], np.int32))


def run_participation(cfg, rounds: int, clients=None) -> np.ndarray:
    """``[N]`` int64: each client's arrived rounds among the first ``rounds`` of the run of ``cfg`` (its sampled
    rounds when neither availability nor dropout masks them); ``clients``: its ``clients.json`` entries, read
    by ``availability`` ``size`` and ``labels``."""
    n = int(cfg.clients)
    late = straggler_replay(cfg)
    if getattr(cfg, "availability", "always") != "always" or getattr(cfg, "dropout", 0.0) > 0 or late is not None:
        tn, cl = client_facts(clients) if clients else (None, None)
        sel = federated_sampled(n, cfg.clients_per_round, cfg.seed, rounds, cfg.availability, cfg.dropout, tn, cl,
                                late)
    else:
        sel = sampled_clients(n, cfg.clients_per_round, cfg.seed, rounds)
    sel = sel.ravel()
    return np.bincount(sel[sel >= 0], minlength=n).astype(np.int64)


def participation_counts(num_clients: int, clients_per_round: int, seed: int, rounds: int) -> np.ndarray:
    """``[N]``: how many of the first ``rounds`` rounds of a run of ``seed`` each client took part in."""
    sel = sampled_clients(num_clients, clients_per_round, seed, rounds)
    return np.bincount(sel.ravel(), minlength=int(num_clients)).astype(np.int64)


def round_keys(state: RunState, m: int):
    k_sel, k_clients = jax.random.split(jax.random.fold_in(state.key, state.round))
    return k_sel, jax.random.split(k_clients, m)


def conflicts(spec: RoundSpec, deltas, d):
    """Model-level (Δ_i·d < 0) and layer-level (Δ_{i,L}·d_L < 0) conflict counts."""
    per_leaf = jax.tree_util.tree_map(lambda x, y: jnp.einsum("i...,...->i", x, y, precision=_HI), deltas, d)
    leaves = jax.tree_util.tree_leaves(per_leaf)
    ids = jax.tree_util.tree_leaves(spec.layer_of)
    by_layer = {}
    for lid, v in zip(ids, leaves):
        by_layer[lid] = by_layer.get(lid, 0.0) + v
    model = jnp.sum(sum(leaves) < 0)
    layer = sum(jnp.sum(v < 0) for v in by_layer.values())
    return model.astype(jnp.float32), layer.astype(jnp.float32)


def central_noise(spec: RoundSpec, state: RunState, hp: HParams, theta, server_lr_t):
    """``θ + N(0, σ² I)`` with ``σ = z · s · η_g,t · clip``: the server's Gaussian noise of central DP, ``s`` the
    step's sensitivity in units of η_g·clip (``spec.central_sensitivity``), ``z`` the calibrated noise
    multiplier (``hp.noise_multiplier``). Its key is the round's, folded with a constant of its own."""
    key = jax.random.fold_in(jax.random.fold_in(state.key, state.round), 0x5EED)
    sigma = hp.noise_multiplier * spec.central_sensitivity * server_lr_t * hp.clip
    leaves, treedef = jax.tree_util.tree_flatten(theta)
    keys = jax.random.split(key, len(leaves))
    noisy = [x + (sigma * jax.random.normal(k, x.shape, jnp.float32)).astype(x.dtype) for x, k in zip(leaves, keys)]
    return jax.tree_util.tree_unflatten(treedef, noisy)


def _masked(mask, new, old):
    """``new`` where ``mask`` (one per leading row), ``old`` elsewhere, leaf by leaf in ``old``'s dtypes."""
    def one(a, b):
        mk = mask.reshape(mask.shape + (1,) * (a.ndim - 1))
        return jnp.where(mk, a.astype(b.dtype), b)
    return jax.tree_util.tree_map(one, new, old)


def server_step(spec: RoundSpec, state: RunState, sel, n_sel, outs: ClientOut, hp: HParams, fed=None):
    """Aggregate the clients' outputs into the next state; returns (state, metrics). ``fed``: a federated
    round's masks (:func:`federation_masks`): only the arrived slots weigh (renormalised), the others' deltas
    are zeros and their state is kept; a round where nothing arrived keeps θ and the server state."""
    alg = spec.algorithm
    t = state.round
    theta = state.variables["params"]
    weights = n_sel.astype(jnp.float32) / jnp.sum(n_sel)
    if spec.dp == "central":  # n_i would weigh a client's clipped update beyond 1/m: average uniformly
        weights = jnp.full(n_sel.shape, 1.0 / n_sel.shape[0], jnp.float32)
    if fed is not None:
        arrived = fed["arrived"]
        w_raw = jnp.where(arrived, n_sel.astype(jnp.float32), 0.0)
        total = jnp.sum(w_raw)
        weights = w_raw / jnp.where(total > 0, total, 1.0)
        if spec.dp == "central":  # 1/m each, whoever arrived: the 2·clip/m sensitivity needs a fixed denominator
            weights = jnp.where(arrived, 1.0 / n_sel.shape[0], 0.0).astype(jnp.float32)
        outs = outs._replace(delta=_masked(arrived, outs.delta, jax.tree_util.tree_map(jnp.zeros_like, outs.delta)))
    s_in = ServerIn(theta, outs.delta, weights, outs.loss, hp.lr * hp.lr_decay ** t,
                    hp.server_lr * hp.server_lr_decay ** t, hp, t, sel, state.sstate, outs.noise_var,
                    spec.num_clients, n_sel, outs.aux, server_key(state), model_apply(spec.model), spec.rounds,
                    None if fed is None else arrived)
    new_theta, sstate, info = C.unpack_server(alg, C.call(alg, "server", alg.server, (s_in,), {}, "s: fj.ServerIn"),
                                              s_in)
    own = own_metrics(alg, info, outs.aux)
    info = {k: jnp.asarray(info.get(k, 0.0), jnp.float32) for k in SERVER_INFO}  # a user's server may give {}
    if spec.dp == "central":
        new_theta = central_noise(spec, state, hp, new_theta, s_in.server_lr_t)
    if fed is not None:  # nothing arrived: θ and the server state stay; a lost upload's client keeps its state
        any_arrived = jnp.any(arrived)
        keep = lambda new, old: jax.tree_util.tree_map(  # noqa: E731
            lambda a, b: jnp.where(any_arrived, a.astype(b.dtype), b), new, old)
        new_theta = keep(new_theta, theta)
        sstate = keep(sstate, state.sstate)
        if alg.has_client_state:
            outs = outs._replace(state=_masked(arrived, outs.state, T.take(state.client_states, sel)))
    variables = {"params": new_theta}
    if "batch_stats" in state.variables:  # batch statistics: averaged like FedAvg
        variables["batch_stats"] = T.weighted_sum(outs.stats, weights)
        if fed is not None:
            variables["batch_stats"] = keep(variables["batch_stats"], state.variables["batch_stats"])
    states = T.put(state.client_states, sel, outs.state) if alg.has_client_state else state.client_states
    kept = state.clients
    if kept:  # the clients sampled so far, and their own copies of the client_collections
        kept = dict(kept)
        if "seen" in kept:
            kept["seen"] = kept["seen"].at[sel].set(True)
            if fed is not None:
                kept["seen"] = kept["seen"].at[sel].set(state.clients["seen"][sel] | arrived)
        for c in alg.collections:
            kept[c] = T.put(kept[c], sel, outs.stats if fed is None else
                            _masked(arrived, outs.stats, T.take(state.clients[c], sel)))
    model_c, layer_c = conflicts(spec, outs.delta, T.sub(theta, new_theta))
    metrics = {"model_conflicts": model_c, "layer_conflicts": layer_c,
               "client_loss": jnp.mean(outs.loss) if alg.needs_loss else jnp.full((), jnp.nan), **info, **own}
    if fed is not None:
        n_arr = jnp.sum(arrived)
        if alg.needs_loss:  # the mean over the arrived clients
            metrics["client_loss"] = jnp.sum(jnp.where(arrived, outs.loss, 0.0)) / jnp.maximum(n_arr, 1)
        metrics.update(available=fed["available"].astype(jnp.float32), arrived=n_arr.astype(jnp.float32))
    return RunState(variables, states, sstate, t + 1, state.key, kept), metrics


def server_key(state: RunState):
    """``ServerIn.key``: round ``t``'s key folded with a constant of its own (the clients' and the central
    noise's keys come from the same round key folded otherwise), so it differs across seeds and rounds."""
    return jax.random.fold_in(jax.random.fold_in(state.key, state.round), SERVER_KEY)


def own_metrics(alg: Algorithm, info: dict, aux) -> dict:
    """The algorithm's own metrics of this round (``alg.metrics``): the server's ``info`` scalars and the
    means over the round's clients of ``aux["metrics"]``; NaN for a name neither gave."""
    out = {}
    means = {k: jnp.mean(jnp.asarray(v, jnp.float32)) for k, v in C.client_metrics(aux).items()}
    for k in alg.metrics:
        if k in info:
            out[k] = jnp.asarray(info[k], jnp.float32)
        else:
            out[k] = means.get(k, jnp.full((), jnp.nan, jnp.float32))
    return out


def client_phase(spec: RoundSpec, state: RunState, hp: HParams, data: ClientData):
    """Sample this round's clients and run all of them (vmap or lax.map); returns (sel, n_sel, outs)."""
    return _client_phase(spec, state, hp, data)[:3]


def federation_masks(spec: RoundSpec, state: RunState, k_sel, train_n, classes=None, p_drop=None):
    """``(sel, {"valid", "arrived", "available"})`` of a federated round (:mod:`fedalf_jax.sim.federation`);
    ``classes``: each client's number of classes (``availability=labels`` only)."""
    from .federation import arrivals, sample_available
    sel, valid, n_avail = sample_available(tuple(spec.availability), spec.clients_per_round, state.key,
                                           state.round, k_sel, train_n, classes)
    p = spec.dropout if p_drop is None else p_drop  # the run's traced P (HParams.fed) in the round
    arrived = (arrivals(p, jax.random.fold_in(state.key, state.round), valid) if spec.dropout > 0
               else valid)
    return sel, {"valid": valid, "arrived": arrived, "available": n_avail}


def _client_phase(spec: RoundSpec, state: RunState, hp: HParams, data: ClientData, with_late: bool = False):
    """``(sel, n_sel, outs, fed)``: the round's sampled clients, their sizes and outputs, and its masks (``None``
    in a plain round); ``with_late``: also the stragglers' ``{"late", "work"}`` metrics (``None`` without)."""
    m = spec.clients_per_round
    k_sel, ckeys = round_keys(state, m)
    fed = None
    if spec.federated:
        classes = None
        if tuple(spec.availability)[0] == "labels":
            from .federation import classes_held
            classes = classes_held(data.y, data.train_idx, data.train_n, spec.model.num_classes)
        sel, fed = federation_masks(spec, state, k_sel, data.train_n, classes, _fed(hp).get("dropout"))
    else:
        sel = sample_clients(spec, k_sel)
    alg = spec.algorithm
    states = (T.take_as(state.client_states, sel, client_state_like(alg, state.variables["params"]))
              if alg.has_client_state else ())
    idx, n = data.train_idx[sel], data.train_n[sel]
    own = {c: T.take(state.clients[c], sel) for c in alg.collections}  # each client's own collections
    budget, late = None, None
    if tuple(spec.stragglers) != ("none",):
        budget, fed, late = _deadline(spec, state, sel, n, fed, _fed(hp).get("deadline", spec.deadline))

    def one(pc, sh):
        variables, hp_, t, x, y, bcast = sh
        cstate, idx_, n_, key, own_, index, budget_ = pc
        return client_step(spec, variables, cstate, idx_, n_, key, hp_, t, x, y, bcast, own_, index, budget_)

    def local(per_client, shared):
        if spec.client_map == "map":
            return jax.lax.map(lambda pc: one(pc, shared), per_client)
        return jax.vmap(lambda *pc: one(pc, shared))(*per_client)

    if spec.client_map == "map":
        local = each_pair_in_turn(local, one)

    bcast = (C.call(alg, "broadcast", alg.broadcast, (state.sstate,), {}, "server_state")  # once, shared
             if alg.broadcast is not None else None)
    per_client = (states, idx, n, ckeys, own, sel, budget)  # sel: each client's index (ClientFacts.index)
    shared = (state.variables, hp, state.round, data.x, data.y, bcast)
    if spec.client_devices > 1:
        # Inside a shard_map over the mesh axis "clients" (the run loop wraps the whole chunk in one):
        # every device holds the whole (replicated) state, runs its m/D clients, and all-gathers the
        # outputs, so the server step that follows runs identically on every device, exactly as on one.
        k = m // spec.client_devices
        i = jax.lax.axis_index("clients")
        mine = jax.tree_util.tree_map(lambda x: jax.lax.dynamic_slice_in_dim(x, i * k, k), per_client)
        outs = jax.tree_util.tree_map(lambda x: jax.lax.all_gather(x, "clients", tiled=True), local(mine, shared))
    else:
        outs = local(per_client, shared)
    return (sel, n, outs, fed, late) if with_late else (sel, n, outs, fed)


def _fed(hp: HParams) -> dict:
    """The run's traced federation numbers (``HParams.fed``), ``{}`` when none (or an HParams made by hand)."""
    return hp.fed if isinstance(hp.fed, dict) else {}


def _deadline(spec: RoundSpec, state: RunState, sel, n, fed, deadline):
    """``(budget, fed, late)`` of a round with stragglers (:mod:`fedalf_jax.sim.stragglers`): each sampled client's
    completed steps (the ``partial`` policy's budget, else ``None``), the masks with the late clients' uploads lost
    (``drop``: a plain round gets its masks here), and ``{"late", "work"}``: how many valid clients missed the
    deadline and the share of their local steps the valid clients completed."""
    from .stragglers import steps_done
    full = jax.vmap(lambda k: steps_of(k, spec.epochs, spec.batch_size, spec.local_steps))(n)
    done = steps_done(tuple(spec.stragglers), deadline, state.key, state.round, sel, full)
    valid = fed["valid"] if fed is not None else jnp.ones(sel.shape, bool)
    missed = valid & (done < full)
    late = {"late": jnp.sum(missed).astype(jnp.float32),
            "work": (jnp.sum(jnp.where(valid, done, 0)) / jnp.maximum(jnp.sum(jnp.where(valid, full, 0)), 1))
            .astype(jnp.float32)}
    if spec.straggler_policy == "drop":
        if fed is None:
            fed = {"valid": valid, "arrived": valid, "available": jnp.asarray(spec.num_clients, jnp.int32)}
        return None, {**fed, "arrived": fed["arrived"] & ~missed}, late
    return done, fed, late


def device_mesh(devices: int, axis: str):
    """A one-axis mesh over the first ``devices`` devices (all processes' devices under
    ``jax.distributed``)."""
    found = jax.devices()
    if devices > len(found):
        raise ValueError(f"{devices} devices asked for, JAX sees {len(found)} ({found[0].platform}); on a CPU "
                         f"set XLA_FLAGS=--xla_force_host_platform_device_count={devices} before starting")
    return Mesh(np.array(found[:devices]), (axis,))


def round_step(spec: RoundSpec, state: RunState, hp: HParams, data: ClientData):
    """One whole round, mapped over the sampled clients (the compiled program's body)."""
    sel, n, outs, fed, late = _client_phase(spec, state, hp, data, with_late=True)
    new, metrics = server_step(spec, state, sel, n, outs, hp, fed)
    if late is not None:  # stragglers: the late clients and the share of the work done
        metrics = {**metrics, **late}
    if spec.eval_average:  # θ̄_t = θ̄_{t−1} + (θ_t − θ̄_{t−1}) / t: the mean of θ_1..θ_t
        new = new._replace(average=running_mean(state.average, new.variables, new.round))
    return new, metrics


def running_mean(average, variables, t):
    """``average + (variables − average) / t``, leaf by leaf in its dtype: after round ``t`` (1, 2, ...) the mean
    of the ``t`` rounds' models, whatever ``average`` held before round 1."""
    return jax.tree_util.tree_map(lambda a, v: (a + (v - a) / jnp.asarray(t, a.dtype)).astype(a.dtype),
                                  average, variables)


def run_rounds(spec: RoundSpec, state: RunState, hp: HParams, data: ClientData, length: int):
    """``length`` rounds as one ``lax.scan``; metrics are stacked along a leading round axis. Nothing is
    called back to the host, so the persistent compilation cache can keep the program."""
    def body(s, _):
        return round_step(spec, s, hp, data)
    return jax.lax.scan(body, state, None, length=length)


METRIC_KEYS = ("model_conflicts", "layer_conflicts", "client_loss") + SERVER_INFO
