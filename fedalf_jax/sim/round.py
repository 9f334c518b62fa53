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
from .algorithms import SERVER_INFO, SERVER_KEY, Algorithm, Batch, ClientFacts, HParams, ServerIn
from .batching import each_pair_in_turn
from .client import ClientOut, full_loss, full_loss_and_grad, local_sgd, local_steps, masked_loss, model_at


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
    duals: Any      # the per-client states of all N clients (leading axis N; the ADMM duals), or ()
    sstate: Any     # server state (FedLF history rows), or ()
    round: Any      # int32 scalar: the next round's index
    key: Any        # the run key; round t uses fold_in(key, t)
    clients: Any = ()  # what the round keeps per client for the algorithm beside its state (:func:`kept_per_client`)
    average: Any = ()  # --eval-average: the mean of the global variables after rounds 1..t (θ_0 before any), or ()


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


def default_client_map(backend: str | None = None) -> str:
    """``vmap`` on accelerators; ``map`` (a loop inside the compiled program) on CPU, where it measured
    faster than vmap for the FMNIST CNN round (docs/benchmarks.md): XLA:CPU gains nothing from the
    wider batch, and the vmapped im2col convolution's larger intermediates cost memory traffic."""
    backend = backend or jax.default_backend()
    return "map" if backend == "cpu" else "vmap"


def seed_keys(seed: int):
    """``(init_key, run_key)`` of a run of ``seed``: the model's initialisation and the run key of
    :class:`RunState` (round ``t`` samples its clients from ``fold_in(run_key, t)``)."""
    init_key, run_key = jax.random.split(jax.random.PRNGKey(seed))
    return init_key, run_key


def init_state(spec: RoundSpec, seed: int) -> RunState:
    init_key, run_key = seed_keys(seed)
    variables = spec.model.init(init_key)
    params = variables["params"]
    stored = T.cast(params, spec.state_dtype)  # per-client rows are stored in spec.state_dtype
    duals = client_states(spec.algorithm, stored, spec.num_clients, spec.state_dtype)
    C.check_state_init(spec.algorithm, "init_server_state",  # N is static (a Python int), as in the call below
                       lambda p: C.call(spec.algorithm, "init_server_state", spec.algorithm.init_server_state,
                                        (p, spec.num_clients), {}, "params, num_clients"), stored)
    # one buffer per leaf: a user's state that holds one array twice, e.g. (z, z), would otherwise make the
    # donated round refuse to "donate the same buffer twice" in a traceback from inside XLA
    sstate = jax.tree_util.tree_map(jnp.copy, spec.algorithm.init_server_state(stored, spec.num_clients))
    return RunState(variables, duals, sstate, jnp.zeros((), jnp.int32), run_key,
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
    for c in alg.client_collections:
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


def privatise(spec: RoundSpec, key, theta, w, hp: HParams, *, with_variance: bool = False):
    """w̃_i: the model the client reveals. A local mechanism perturbs the weights (``spec.ldp_on ==
    "weights"``, the paper's reading: each weight's offset from its tensor's centre) or the update
    (``"update"``: ``w̃ = θ + M(w − θ)``, each value's offset from its update tensor's centre, so the
    noise scales with the update); Gaussian DP noises the clipped update. ``with_variance``: return
    ``(w̃, var)``, the per-value noise variance of ``w̃`` the server can compute from what it receives
    (:mod:`fedalf_jax.sim.privacy`)."""
    if spec.ldp != "none":
        from .privacy import mechanism
        mech = mechanism(spec.ldp)
        src = T.sub(w, theta) if spec.ldp_on == "update" else w
        out = mech(key, src, hp.epsilon, with_variance=with_variance)
        noisy, var = out if with_variance else (out, None)
        if spec.ldp_on == "update":
            noisy = T.add(theta, noisy)
    elif spec.dp == "gaussian":
        from .privacy import gaussian_dp, gaussian_sigma
        noisy = T.add(theta, gaussian_dp(key, T.sub(w, theta), epsilon=hp.epsilon, delta=hp.delta, clip=hp.clip,
                                         neighbouring=spec.neighbouring))
        if with_variance:
            s2 = jnp.square(gaussian_sigma(hp.epsilon, hp.delta, hp.clip, neighbouring=spec.neighbouring))
            var = jax.tree_util.tree_map(lambda x: jnp.full(jnp.shape(x), s2, jnp.float32), w)
    else:
        noisy = w
        var = jax.tree_util.tree_map(lambda x: jnp.zeros(jnp.shape(x), jnp.float32), w) if with_variance else None
    return (noisy, var) if with_variance else noisy


def upload_noise(upload, w_tilde, var):
    """Σ over the upload's values of their noise variance: ``Δ_i`` is affine in ``w̃`` (coefficient
    ``a`` per value, e.g. −1 for the model upload, −2 for the ADMM increment with the dual from ``w̃``),
    so ``Var Δ_i = a² Var w̃``; ``a`` is read off a forward-mode derivative of ``upload(w̃)``."""
    _, (tangent, *_) = jax.jvp(upload, (w_tilde,), (jax.tree_util.tree_map(jnp.ones_like, w_tilde),))
    return sum(jnp.sum(jnp.square(a.astype(jnp.float32)) * v)
               for a, v in zip(jax.tree_util.tree_leaves(tangent), jax.tree_util.tree_leaves(var)))


def client_step(spec: RoundSpec, theta_vars, dual, idx, n, key, hp: HParams, t, x, y, bcast=None,
                own=None, index=None) -> ClientOut:
    """One client's whole contribution to round ``t`` (unbatched; the round vmaps it). ``bcast``: what the
    algorithm's ``broadcast`` chose this round (shared by the clients). ``own``: the client's own copies of
    the algorithm's ``client_collections`` (``{"batch_stats": ...}``), which it trains from instead of the
    global model's. ``index``: the client's id (given to a client program, ``Algorithm.client``, alone)."""
    alg = spec.algorithm
    if alg.client is not None:  # the client program (fedalf_jax/sim/program.py); the default client below
        from .program import program_client
        return program_client(spec, theta_vars, dual, idx, n, key, hp, t, x, y, bcast, index, privatise)
    if own:
        theta_vars = {**theta_vars, **own}
    theta = theta_vars["params"]
    stats0 = theta_vars.get("batch_stats")
    if not alg.local_train:
        loss, grad = full_loss_and_grad(spec.model, theta_vars, x, y, idx, n, chunk=spec.batch_size)
        return ClientOut(grad, dual, loss, stats0, jnp.zeros((), jnp.float32))
    lr_t = hp.lr * hp.lr_decay ** t
    k_train, k_priv = jax.random.split(key)
    loss = (full_loss(spec.model, theta_vars, x, y, idx, n, chunk=spec.batch_size,
                      forward_only=spec.client_map == "map") if alg.needs_loss else jnp.zeros(()))
    facts = ClientFacts(jnp.asarray(n, jnp.int32), local_steps(n, spec.epochs, spec.batch_size, spec.local_steps))
    kw = alg.client_kwargs(alg.upload, bcast, facts)
    if alg.broadcast is not None and not any(
            f is not None and "broadcast" in alg.client_kwargs(f, bcast, facts)
            for f in (alg.upload, alg.penalty, alg.local_loss, alg.local_start, alg.local_optimizer)):
        raise C.error(f"algorithm {alg.name!r} has a broadcast, but none of its client functions (upload, penalty, "
                      f"local_loss, ...) has a parameter named broadcast to receive it; add one (docs/extending.md)")
    penalty = client_fn(alg, "penalty", alg.penalty, theta, dual, hp, bcast, facts)
    C.check_penalty(alg, penalty, theta)
    local_loss = client_fn(alg, "local_loss", alg.local_loss, theta, dual, hp, bcast, facts)
    C.check_callable(alg, "local_loss", local_loss)
    local_loss = C.checked_loss(alg, "local_loss", local_loss)  # a real scalar, or one line naming it
    opt = None
    if alg.local_optimizer is not None:
        opt = C.call(alg, "local_optimizer", alg.local_optimizer, (lr_t,),
                     alg.client_kwargs(alg.local_optimizer, bcast, facts, hp=hp), "lr_t[, hp=, facts=, broadcast=]")
        opt = C.check_optimizer(alg, opt)
    start_vars = theta_vars
    if alg.local_start is not None:  # local training from a point the algorithm derives (default θ)
        start = client_fn(alg, "local_start", alg.local_start, theta, dual, hp, bcast, facts)
        start_vars = {**theta_vars, "params": C.check_params(alg, "local_start", start, theta)}
    personal = (personal_task(spec, theta_vars, dual, hp, bcast, facts) if alg.personal is not None else None)
    out = local_sgd(spec.model, start_vars, x, y, idx, n, k_train, lr_t, epochs=spec.epochs,
                    batch_size=spec.batch_size, penalty=penalty, optimizer=opt, local_loss=local_loss,
                    personal=personal, steps=spec.local_steps)
    if alg.personal is not None:  # the second local model v_i, trained beside w_i over the same minibatches
        w_vars, kw["personal"] = out
    else:
        w_vars = out
    w = w_vars["params"]
    expected = "theta, w, w_tilde, state, hp, lr_t[, broadcast=, facts=, personal=]"
    noise_var = jnp.zeros((), jnp.float32)
    if alg.needs_noise_var and (spec.ldp != "none" or spec.dp != "none"):
        w_tilde, var = privatise(spec, k_priv, theta, w, hp, with_variance=True)
        up = lambda wt: C.unpack_upload(  # noqa: E731
            alg, C.call(alg, "upload", alg.upload, (theta, w, wt, dual, hp, lr_t), kw, expected), theta, dual)
        delta, new_dual, aux = up(w_tilde)
        noise_var = upload_noise(up, w_tilde, var)
    else:
        w_tilde = privatise(spec, k_priv, theta, w, hp)
        delta, new_dual, aux = C.unpack_upload(
            alg, C.call(alg, "upload", alg.upload, (theta, w, w_tilde, dual, hp, lr_t), kw, expected), theta, dual)
    if spec.dp == "central":  # DP-FedAvg's client: its upload clipped to norm C (the server adds the noise)
        from .privacy import clip_global_norm
        delta = clip_global_norm(delta, hp.clip)
    return ClientOut(delta, new_dual, loss, w_vars.get("batch_stats"), noise_var, aux)


def client_fn(alg: Algorithm, name: str, fn, theta, state, hp: HParams, bcast, facts):
    """``fn(theta, state, hp[, broadcast=, facts=])`` (``penalty``, ``local_loss``, ``local_start``,
    ``personal.start``, ...) with its signature checked; ``None`` when the algorithm has no ``fn``."""
    if fn is None:
        return None
    return C.call(alg, name, fn, (theta, state, hp), alg.client_kwargs(fn, bcast, facts),
                  "theta, state, hp[, broadcast=, facts=]")


def personal_task(spec: RoundSpec, theta_vars, state, hp: HParams, bcast, facts):
    """``(v0, loss_v)``: the client's second local model (``Algorithm.personal``) for :func:`local_sgd`, which
    trains it step by step beside ``w_i`` over the same minibatches, with the same learning rate and its own
    copy of the optimiser: from ``personal.start`` on ``f_i(v) + personal.penalty(v)``, or on
    ``personal.local_loss`` (which may train any pytree, and sees ``w`` at the same step as ``batch.w``).
    Its batch statistics are not kept (the global model's serve its evaluation). ``v_i`` stays on the
    client: ``upload`` only stores it."""
    alg = spec.algorithm
    theta = theta_vars["params"]
    p = alg.personal
    if not _takes_personal(alg.upload):
        raise C.error(f"algorithm {alg.name!r} has a personal model, but its upload has no parameter named personal "
                      f"to receive (and keep) it; add one (docs/extending.md)")
    v0 = client_fn(alg, "personal.start", p.start, theta, state, hp, bcast, facts)
    if p.local_loss is None:
        v0 = C.check_params(alg, "personal.start", v0, theta)
    else:
        C.check_arrays(f"algorithm {alg.name!r}: personal.start", "the personal params", v0)
    pen = client_fn(alg, "personal.penalty", p.penalty, theta, state, hp, bcast, facts)
    C.check_penalty(alg, pen, v0 if p.local_loss is not None else theta, "personal.penalty")
    ploss = client_fn(alg, "personal.local_loss", p.local_loss, theta, state, hp, bcast, facts)
    C.check_callable(alg, "personal.local_loss", ploss)
    ploss = C.checked_loss(alg, "personal.local_loss", ploss)
    model = spec.model

    def loss_v(v, w, stats, xb, yb, mask, rng, step):
        if ploss is None:
            loss, _ = masked_loss(model, v, stats, xb, yb, mask, train=True, rng=rng)
        else:
            loss = ploss(v, Batch(xb, yb, mask, None, None, step, model_at(model, stats, xb), w))
        return loss if pen is None else loss + pen(v)
    return v0, loss_v


def _takes_personal(fn) -> bool:
    from .algorithms import _takes
    return _takes(fn, "personal")


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


def server_step(spec: RoundSpec, state: RunState, sel, n_sel, outs: ClientOut, hp: HParams):
    """Aggregate the clients' outputs into the next state; returns (state, metrics)."""
    alg = spec.algorithm
    t = state.round
    theta = state.variables["params"]
    weights = n_sel.astype(jnp.float32) / jnp.sum(n_sel)
    if spec.dp == "central":  # n_i would weigh a client's clipped update beyond 1/m: average uniformly
        weights = jnp.full(n_sel.shape, 1.0 / n_sel.shape[0], jnp.float32)
    s_in = ServerIn(theta, outs.delta, weights, outs.loss, hp.lr * hp.lr_decay ** t,
                    hp.server_lr * hp.server_lr_decay ** t, hp, t, sel, state.sstate, outs.noise_var,
                    spec.num_clients, n_sel, outs.aux, server_key(state))
    new_theta, sstate, info = C.unpack_server(alg, C.call(alg, "server", alg.server, (s_in,), {}, "s: fj.ServerIn"),
                                              s_in)
    own = own_metrics(alg, info, outs.aux)
    info = {k: jnp.asarray(info.get(k, 0.0), jnp.float32) for k in SERVER_INFO}  # a user's server may give {}
    if spec.dp == "central":
        new_theta = central_noise(spec, state, hp, new_theta, s_in.server_lr_t)
    variables = {"params": new_theta}
    if "batch_stats" in state.variables:  # batch statistics: averaged like FedAvg
        variables["batch_stats"] = T.weighted_sum(outs.stats, weights)
    duals = T.put(state.duals, sel, outs.dual) if alg.has_client_state else state.duals
    kept = state.clients
    if kept:  # the clients sampled so far, and their own copies of the client_collections
        kept = dict(kept)
        if "seen" in kept:
            kept["seen"] = kept["seen"].at[sel].set(True)
        for c in alg.client_collections:
            kept[c] = T.put(kept[c], sel, outs.stats)
    model_c, layer_c = conflicts(spec, outs.delta, T.sub(theta, new_theta))
    metrics = {"model_conflicts": model_c, "layer_conflicts": layer_c,
               "client_loss": jnp.mean(outs.loss) if alg.needs_loss else jnp.full((), jnp.nan), **info, **own}
    return RunState(variables, duals, sstate, t + 1, state.key, kept), metrics


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
    m = spec.clients_per_round
    k_sel, ckeys = round_keys(state, m)
    sel = sample_clients(spec, k_sel)
    alg = spec.algorithm
    duals = (T.take_as(state.duals, sel, client_state_like(alg, state.variables["params"]))
             if alg.has_client_state else ())
    idx, n = data.train_idx[sel], data.train_n[sel]
    own = {c: T.take(state.clients[c], sel) for c in alg.client_collections}  # each client's own collections

    def one(pc, sh):
        variables, hp_, t, x, y, bcast = sh
        dual, idx_, n_, key, own_, *index = pc  # index: the client ids, for a client program alone
        return client_step(spec, variables, dual, idx_, n_, key, hp_, t, x, y, bcast, own_, *index)

    def local(per_client, shared):
        if spec.client_map == "map":
            return jax.lax.map(lambda pc: one(pc, shared), per_client)
        return jax.vmap(lambda *pc: one(pc, shared))(*per_client)

    if spec.client_map == "map":
        local = each_pair_in_turn(local, one)

    bcast = (C.call(alg, "broadcast", alg.broadcast, (state.sstate,), {}, "server_state")  # once, shared
             if alg.broadcast is not None else None)
    per_client, shared = (duals, idx, n, ckeys, own), (state.variables, hp, state.round, data.x, data.y, bcast)
    if alg.client is not None:  # a client program knows its index (ClientFacts.index)
        per_client = per_client + (sel,)
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
    return sel, n, outs


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
    sel, n, outs = client_phase(spec, state, hp, data)
    new, metrics = server_step(spec, state, sel, n, outs, hp)
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
