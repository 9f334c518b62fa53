"""A pure chunk of training: ``length`` rounds, then an evaluation of every client, as one program.

PureJaxRL's ``make_train(config) -> train(rng)`` is the model: :func:`make_chunk` returns a pure
function ``chunk(state, hp, data) -> (state, ChunkOut)``. The run loop (:mod:`fedalf_jax.experiment.loop`)
calls one round at a time (``run_rounds`` of 1, so that a signal is answered after the round in flight)
and ``make_chunk(spec, 0)`` for each evaluation; a sweep maps them (``jax.vmap`` or ``lax.map``) over a
leading run axis of ``state``, ``hp`` and the clients' index rows (the data pool is shared). ``data`` is an argument rather than a closure so
that the pool is not baked into the compiled program as a constant.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .algorithms import _takes
from .batching import per_run
from . import contract as C
from .client import evaluate_clients, evaluate_own_models
from .round import METRIC_KEYS, ClientData, RoundSpec, RunState, client_state_like, run_rounds


class EvalOut(NamedTuple):
    """The global model on every client's own test split, and (for an algorithm with a
    ``personal_model``) every client's own model on it."""

    acc: Any         # [N] accuracy
    test_loss: Any   # [N] mean cross-entropy
    personal_acc: Any = None   # [N] accuracy of each client's own model (Algorithm.personal_model), or None
    personal_loss: Any = None  # [N] its mean cross-entropy, or None
    avg_acc: Any = None        # [N] accuracy of the averaged iterate θ̄_t (--eval-average), or None
    avg_test_loss: Any = None  # [N] its mean cross-entropy, or None


class ChunkOut(NamedTuple):
    rounds: Any      # dict of per-round metrics, each [length] (METRIC_KEYS)
    eval: EvalOut    # after the chunk's last round


def evaluate(spec: RoundSpec, variables, data: ClientData, states=(), kept=(), run=None, hp=None) -> EvalOut:
    """Accuracy and loss of ``variables`` on every client's test split. Under ``vmap`` over runs it is
    mapped as the round's clients are (:func:`_eval`). With ``Algorithm.personal_model``, also each
    client's own model, read from its state in ``states`` (the run state's per-client states) and ``kept``
    (``RunState.clients``: which clients were sampled, their own collections); with ``client.evaluate``, the
    model it returns for each client from its ``ctx`` (``run``: the :class:`RunState`, ``hp`` the run's)."""
    acc, loss = _eval(spec)(variables, data.x, data.y, data.test_idx, data.test_n)
    client = spec.algorithm.client
    if client is not None and client.evaluate is not None:
        return EvalOut(acc, loss, *_eval_hook(spec)(run._replace(variables=variables, client_states=states), hp, data))
    if spec.algorithm.personal_model is None:
        return EvalOut(acc, loss)
    return EvalOut(acc, loss, *_eval_personal(spec)(variables, states, kept, data.x, data.y, data.test_idx,
                                                    data.test_n))


def _eval_personal(spec: RoundSpec):
    """Every client's own model ``personal_model(state_i[, theta=θ])`` on its test split, mapped like
    :func:`_eval`; a client never sampled (``kept["seen"]``) is evaluated with the global model θ. The state
    is stored in ``--state-dtype``: it is read back in its compute dtype, and the model cast to θ's dtypes.
    Batch statistics (a BatchNorm model) are the client's own with ``client_collections=("batch_stats",)``
    (the global model's for a client never sampled), else the global model's."""
    alg = spec.algorithm
    takes_theta = _takes(alg.personal_model, "theta")

    def f(variables, states, kept, x, y, idx, n):
        theta = variables["params"]
        like = client_state_like(alg, theta) if alg.has_client_state else ()
        stats = variables.get("batch_stats")
        own = "batch_stats" in alg.collections

        def params_of(st, seen):
            st = jax.tree_util.tree_map(lambda s, l: s.astype(l.dtype), st, like)
            args = (st, theta) if takes_theta else (st,)
            mine = C.check_params(alg, "personal_model", C.call(alg, "personal_model", alg.personal_model, args, {},
                                                                "state[, theta]"), theta, dtypes=False)
            return jax.tree_util.tree_map(lambda a, b: jnp.where(seen, a, b), mine, theta)

        def stats_of(own_stats, seen):
            return jax.tree_util.tree_map(lambda a, b: jnp.where(seen, a, b), own_stats, stats)

        seen = kept["seen"]
        own_stats = kept["batch_stats"] if own else None
        return evaluate_own_models(spec.model, stats, params_of, states, seen, x, y, idx, n,
                                   stats_of=stats_of if own else None, own_stats=own_stats)
    return _over_runs(spec, f)



EVAL_KEY = 0xE7A1  # folded into the round's key for the keys of client.evaluate's ctx


def _eval_hook(spec: RoundSpec):
    """Every client's ``client.evaluate(ctx) -> params`` on its test split, mapped like :func:`_eval`: ``ctx`` is
    the client's as in a round (θ, its state read back in its compute dtype, ``hp``, the broadcast of the server
    state, ``t`` the rounds done and ``lr`` η_l at ``t``, a key of its own, its facts, ``apply``, the data pass
    over its training examples), for every client, sampled or not. The model's batch statistics, if any, are
    the global model's."""
    from .client import _acc_loss, local_steps
    from .program import ClientContext, DataPass, label_counts, model_apply
    from .algorithms import ClientFacts
    alg = spec.algorithm
    hook = alg.client.evaluate

    def f(run, hp, data):
        variables = run.variables
        theta, stats = variables["params"], variables.get("batch_stats")
        like = client_state_like(alg, theta) if alg.has_client_state else ()
        bcast = (C.call(alg, "broadcast", alg.broadcast, (run.sstate,), {}, "server_state")
                 if alg.broadcast is not None else None)
        t = jnp.asarray(run.round, jnp.int32)
        lr_t = hp.lr * hp.lr_decay ** t
        base = jax.random.fold_in(jax.random.fold_in(run.key, t), EVAL_KEY)
        apply = model_apply(spec.model)

        def one(args):
            st, i, tri, trn, tei, ten = args
            st = jax.tree_util.tree_map(lambda s, l: s.astype(l.dtype), st, like)
            facts = ClientFacts(jnp.asarray(trn, jnp.int32), local_steps(trn, spec.epochs, spec.batch_size,
                                                                          spec.local_steps),
                                label_counts(data.y, tri, trn, spec.model.num_classes), i)
            ctx = ClientContext(theta, st, hp, bcast, t, lr_t, jax.random.fold_in(base, i), facts, apply,
                                DataPass(alg, data.x, data.y, tri, trn, spec.batch_size, hint=apply.hint), stats)
            mine = C.call(alg, "client.evaluate", hook, (ctx,), {}, "ctx", hint=apply.hint)
            mine = C.check_params(alg, "client.evaluate", mine, theta, dtypes=False)
            return _acc_loss(spec.model, mine, stats, data.x, data.y, tei, ten)

        states = run.client_states if alg.has_client_state else ()
        ids = jnp.arange(spec.num_clients, dtype=jnp.int32)
        return jax.lax.map(one, (states, ids, data.train_idx, data.train_n, data.test_idx, data.test_n),
                           batch_size=10)
    return _over_runs(spec, f)


def _eval(spec: RoundSpec):
    """The evaluation of every client (:func:`evaluate_clients`, a ``lax.map`` over chunks of clients).
    Under ``jax.vmap`` over the runs of a sweep: with ``client_map="vmap"`` (the GPU's) batched like the
    round, the runs' chunks side by side, so its loop trips do not grow with the sweep's width (mapped
    per run, W runs made ``W·(1 + N/10)`` trips); with ``client_map="map"`` (the CPU's) once per run
    (:func:`per_run`): each run's evaluation in a single run's shapes, as its clients are trained, one client
    at a time in batch-sized forward passes (``evaluate_clients``'s ``chunk``: 4.8x faster on CPU than ten
    clients' whole splits per pass)."""
    chunk = spec.batch_size if spec.client_map == "map" else None  # one client at a time, batch-sized passes
    f = lambda v, x, y, idx, n: evaluate_clients(spec.model, v, x, y, idx, n, chunk=chunk)  # noqa: E731
    return _over_runs(spec, f)


def _over_runs(spec: RoundSpec, f):
    """``f`` batched over a sweep's runs with ``client_map="vmap"``, mapped once per run with ``"map"``."""
    return f if spec.client_map == "vmap" else per_run(f)


def train_losses(spec: RoundSpec, state: RunState, hp, data: ClientData):
    """``[N]``: each client's mean cross-entropy on its train split at the global model. It passes over
    every training sample (6× the test split on FMNIST), so the run loop makes it a program of its own
    and calls it on the ``train_loss_every`` cadence, not at every evaluation."""
    del hp
    return _eval(spec)(state.variables, data.x, data.y, data.train_idx, data.train_n)[1]


def make_chunk(spec: RoundSpec, length: int):
    """``chunk(state, hp, data) -> (state, ChunkOut)``: ``length`` rounds (0: evaluation only), then
    the evaluation of every client. Pure: jit it, vmap it over runs, or both."""

    def chunk(state: RunState, hp, data: ClientData):
        if length > 0:
            state, rounds = run_rounds(spec, state, hp, data, length)
        else:
            rounds = {k: jnp.zeros((0,), jnp.float32) for k in METRIC_KEYS}
        ev = evaluate(spec, state.variables, data, state.client_states, state.clients, state, hp)
        if spec.eval_average:  # the averaged iterate θ̄_t (RunState.average), beside the last one
            avg_acc, avg_loss = _eval(spec)(state.average, data.x, data.y, data.test_idx, data.test_n)
            ev = ev._replace(avg_acc=avg_acc, avg_test_loss=avg_loss)
        return state, ChunkOut(rounds, ev)

    return chunk
