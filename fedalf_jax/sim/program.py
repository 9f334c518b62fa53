"""The client program (issue 48; docs/extending.md "The client program"): a client's whole local procedure
as three pure functions with an explicit carry, after FedJAX's ``for_each_client(client_init, client_step,
client_final)``:

* ``init(ctx) -> carry``: any pytree of arrays (params, optimiser state, a personal model, statistics);
* ``step(carry, batch, ctx) -> carry``: called once per local minibatch step, inside the same ``lax.scan``
  over epochs of ``lax.scan`` over steps (and the same shuffle and keys) as the default client's SGD, so a
  step warm-starts from the last (pFedMe's θ̃); a step with no real example leaves the carry unchanged;
* ``final(carry, ctx) -> (Δ_i, new state[, aux])``: what the client uploads, as ``Algorithm.upload`` returns it;
  or ``fj.Reveal(w, new state[, aux])``: the model ``w`` the client reveals, which the round passes through the
  run's privacy mechanism (:func:`~fedalf_jax.sim.round.privatise`, with the default client's key) and uploads
  as ``Δ_i = θ − w̃`` (FedAvg's model upload). Under ``--ldp`` or ``--dp gaussian`` only a ``Reveal`` runs: a raw
  ``Δ_i`` would leave the client past the mechanism, and is refused in one line.

``ctx`` is one :class:`ClientContext`: θ, the client's state, ``hp``, the broadcast, the round, this round's
learning rate, a per-client key, the client's :class:`~fedalf_jax.sim.algorithms.ClientFacts` (``n``,
``steps``, ``label_counts``, ``index``), ``apply`` to run the model and ``data``, a :class:`DataPass` that
folds a function over the client's own training examples, exactly, at any params (FedProto's prototypes
after training, SCAFFOLD option I's full gradient).

An algorithm gives it as ``fj.Algorithm(name, server, client=fj.ClientProgram(init, step, final))``; the
round's :func:`~fedalf_jax.sim.round.client_step` branches to :func:`program_client`, and the default client
(``upload``, ``penalty``, ``local_loss``, ...) is untouched. Clients stay vmapped (or ``lax.map``ped) in
the one compiled round.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from . import contract as C
from . import tree as T
from .algorithms import ClientFacts, ClientProgram, HParams  # noqa: F401 (ClientProgram: here too)
from .client import (ClientOut, _chunked, epoch_batch, epoch_schedule, full_loss, local_steps, step_batches,
                     steps_per_epoch)


class ClientBatch(NamedTuple):
    """One minibatch: of a local step (``ClientProgram.step``) or of a data pass (:meth:`DataPass.fold`).

    ``x`` ``[B, ...]``, ``y`` ``[B]`` int32, ``mask`` ``[B]`` bool (the real examples; padding is ``False``:
    weigh every sum by it), ``step`` int32 (the local step's index over the round's epochs, 0 …
    ``facts.steps`` − 1; in a data pass the batch's index), ``key`` the step's dropout key (``None`` in a
    data pass)."""

    x: Any
    y: Any
    mask: Any
    step: Any
    key: Any = None


class Reveal(NamedTuple):
    """What ``client.final`` returns to reveal a model rather than an update: ``w`` the client's trained
    params (shaped like θ), ``state`` its new state, ``aux`` an auxiliary upload (``None``: none; it needs
    ``public_aux``, and with ``public_aux=False`` the privacy record lists it as not covered).

    The round computes the upload itself: ``w̃ = privatise(w)`` (the run's mechanism, its key the default
    client's, so a program revealing FedAvg's ``w`` is FedAvg under the same mechanism bit for bit) and
    ``Δ_i = θ − w̃``; without a mechanism ``Δ_i = θ − w``. Under central DP ``Δ_i`` is clipped as any upload."""

    w: Any
    state: Any
    aux: Any = None


# ctx.key under a local mechanism: the program's own randomness, folded off the mechanism's key (which the
# round draws the noise of the revealed w from) so that the two are independent
PROGRAM_KEY = 0x9E7


class ClientContext(NamedTuple):
    """What a client program's functions know (one record, the same for ``init``, ``step`` and ``final``).

    * ``theta``: the global params θ_t; ``state``: the client's own state (``()`` without
      ``init_client_state``), in the dtypes ``init_client_state`` gave;
    * ``hp``: the traced hyper-parameters (``hp.own[...]`` the algorithm's own); ``broadcast``: what the
      algorithm's ``broadcast(server_state)`` gave this round (``None`` without one);
    * ``t``: the round (int32); ``lr``: this round's local learning rate ``η_l · decay^t``;
    * ``key``: a PRNG key of this client in this round (for the program's own randomness);
    * ``facts``: :class:`~fedalf_jax.sim.algorithms.ClientFacts` ``(n, steps, label_counts, index)``:
      its sample count, its local steps this round, ``[num_classes]`` int32 counts of its training labels,
      its client index in ``0 … N − 1``;
    * ``apply(params, x, *, train=False, key=None) -> (logits, features)``: the model (``features`` what a
      model returning ``(logits, features)`` returns, else ``None``; ``train=True`` with ``key``: dropout);
    * ``data``: a :class:`DataPass` over the client's own training examples."""

    theta: Any
    state: Any
    hp: HParams
    broadcast: Any
    t: Any
    lr: Any
    key: Any
    facts: ClientFacts
    apply: Callable
    data: "DataPass"


class DataPass:
    """A pass over one client's own training examples (its padded index row, the real ones masked):
    :meth:`fold`. Exact whatever the optimiser: every real example is seen once, in its index order."""

    def __init__(self, alg, x_pool, y_pool, idx, n, batch_size: int):
        self._alg, self._x, self._y, self._idx, self._n, self._b = alg, x_pool, y_pool, idx, n, int(batch_size)

    def fold(self, fn: Callable, init, *, batch_size: Optional[int] = None):
        """``fn(acc, batch: ClientBatch) -> acc`` folded over the client's examples in batches of
        ``batch_size`` (default the run's ``--batch-size``) from ``init`` (a pytree of arrays), as one
        ``lax.scan``; ``fn`` must weigh by ``batch.mask`` (the last batch is part padding). A batch with no
        real example leaves ``acc`` unchanged. Returns the final ``acc``."""
        where = f"algorithm {self._alg.name!r}: ctx.data.fold"
        C.check_arrays(where, "its init", init)
        init = jax.tree_util.tree_map(jnp.asarray, init)
        rows, mask = _chunked(self._idx, self._n, self._b if batch_size is None else batch_size)

        def body(acc, rms):
            r, m, s = rms
            new = C.call(self._alg, "ctx.data.fold's function", fn,
                         (acc, ClientBatch(self._x[r], self._y[r], m, s)), {}, "acc, batch")
            C.check_fold(self._alg, new, acc)
            live = jnp.any(m)
            return jax.tree_util.tree_map(lambda a, b: jnp.where(live, b, a), acc, new), None

        out, _ = jax.lax.scan(body, init, (rows, mask, jnp.arange(rows.shape[0], dtype=jnp.int32)))
        return out


def label_counts(y_pool, idx, n, num_classes: int):
    """``[num_classes]`` int32: how many of the client's real training examples (the first ``n`` of ``idx``)
    carry each label."""
    real = (jnp.arange(idx.shape[0]) < n).astype(jnp.int32)
    return jnp.zeros((num_classes,), jnp.int32).at[y_pool[idx]].add(real)


def model_apply(model):
    """``ctx.apply``: ``(params, x, *, train=False, key=None) -> (logits, features)``."""
    def apply(params, x, *, train: bool = False, key=None):
        out, _ = model.apply({"params": params}, x, train=train, rng=key, features=True)
        return out
    return apply


def program_client(spec, theta_vars, state, idx, n, key, hp: HParams, t, x, y, bcast, index, privatise=None):
    """One client of round ``t`` run as its algorithm's :class:`ClientProgram` (unbatched; the round vmaps or
    maps it): ``init``, ``step`` once per local minibatch step, ``final``; returns the round's ``ClientOut``.
    ``privatise``: :func:`~fedalf_jax.sim.round.privatise` (given by the round: this module does not import
    it), applied to the model a :class:`Reveal` reveals."""
    alg = spec.algorithm
    prog = alg.client
    C.check_program_run(spec)
    if "batch_stats" in theta_vars:  # a model whose has_batch_stats is not set (not built by fedalf)
        raise C.error(f"algorithm {alg.name!r} has a client program, which does not yet train a model's batch "
                      f"statistics (batch_stats); use a model without BatchNorm")
    theta = theta_vars["params"]
    lr_t = hp.lr * hp.lr_decay ** t
    k_train, k_priv = jax.random.split(key)  # k_train: the default client's batches and dropout keys, as local_sgd
    local_mech = spec.ldp != "none" or spec.dp == "gaussian"  # noise drawn on the client from k_priv
    k_ctx = jax.random.fold_in(k_priv, PROGRAM_KEY) if local_mech else k_priv
    loss = (full_loss(spec.model, theta_vars, x, y, idx, n, chunk=spec.batch_size,
                      forward_only=spec.client_map == "map") if alg.needs_loss else jnp.zeros(()))
    facts = ClientFacts(jnp.asarray(n, jnp.int32), local_steps(n, spec.epochs, spec.batch_size, spec.local_steps),
                        label_counts(y, idx, n, spec.model.num_classes), jnp.asarray(index, jnp.int32))
    ctx = ClientContext(theta, state, hp, bcast, jnp.asarray(t, jnp.int32), lr_t, k_ctx, facts,
                        model_apply(spec.model), DataPass(alg, x, y, idx, n, spec.batch_size))
    carry = C.call(alg, "client.init", prog.init, (ctx,), {}, "ctx")
    C.check_arrays(f"algorithm {alg.name!r}: client.init", "the carry", carry)
    carry = jax.tree_util.tree_map(jnp.asarray, carry)
    if prog.step is not None:
        carry = _steps(spec, prog.step, ctx, carry, x, y, idx, n, k_train)
    out = C.call(alg, "client.final", prog.final, (carry, ctx), {}, "carry, ctx")
    noise_var = jnp.zeros((), jnp.float32)
    if isinstance(out, Reveal):  # the model the client reveals: through the mechanism, then Δ_i = θ − w̃
        w, new_state, aux = C.unpack_reveal(alg, out, theta, state)
        if alg.needs_noise_var and local_mech:  # Var Δ_i = Var w̃ (Δ_i = θ − w̃: coefficient −1)
            w_tilde, var = privatise(spec, k_priv, theta, w, hp, with_variance=True)
            noise_var = sum(jnp.sum(v) for v in jax.tree_util.tree_leaves(var))
        else:
            w_tilde = privatise(spec, k_priv, theta, w, hp)
        delta = T.sub(theta, w_tilde)  # model_upload's Δ_i
    else:
        if local_mech:  # a raw Δ_i would leave the client past the mechanism
            raise C.error(C.raw_delta_refusal(alg, spec))
        delta, new_state, aux = C.unpack_final(alg, out, theta, state)
    if spec.dp == "central":  # DP-FedAvg's client, as the default client's: its upload clipped to norm C
        from .privacy import clip_global_norm
        delta = clip_global_norm(delta, hp.clip)
    return ClientOut(delta, new_state, loss, theta_vars.get("batch_stats"), noise_var, aux)


def _steps(spec, step_fn, ctx, carry, x_pool, y_pool, idx, n, key):
    """``step`` once per local minibatch step: ``spec.epochs`` epochs of ``⌈L / B⌉`` steps over the client's
    padded row of length ``L``, the batches and keys of :func:`~fedalf_jax.sim.client.sgd` (the same shuffle,
    so the same minibatches as the default client); a step with no real example keeps the carry."""
    alg = spec.algorithm
    b = spec.batch_size
    length = idx.shape[0]
    if spec.local_steps is not None:  # --local-steps K: the default client's K steps (client.step_batches)
        batch_of = step_batches(key, n, length, b)

        def k_step(carry, k):
            pos, mask, rng = batch_of(k)
            rows = idx[pos]
            batch = ClientBatch(x_pool[rows], y_pool[rows], mask, k.astype(jnp.int32), rng)
            new = C.call(alg, "client.step", step_fn, (carry, batch, ctx), {}, "carry, batch, ctx")
            C.check_carry(alg, new, carry)
            live = jnp.any(mask)
            return jax.tree_util.tree_map(lambda a, c: jnp.where(live, c, a), carry, new), None

        carry, _ = jax.lax.scan(k_step, carry, jnp.arange(spec.local_steps))
        return carry
    steps = steps_per_epoch(length, b)
    padded = steps * b

    def run_epoch(carry, ek):
        ekey, e = ek
        order, dkey = epoch_schedule(ekey, n, length, padded)  # the default client's minibatches

        def step(carry, j):
            pos, mask = epoch_batch(order, n, j, b)
            rows = idx[pos]
            batch = ClientBatch(x_pool[rows], y_pool[rows], mask, (e * steps + j).astype(jnp.int32),
                                jax.random.fold_in(dkey, j))
            new = C.call(alg, "client.step", step_fn, (carry, batch, ctx), {}, "carry, batch, ctx")
            C.check_carry(alg, new, carry)
            live = jnp.any(mask)
            return jax.tree_util.tree_map(lambda a, c: jnp.where(live, c, a), carry, new), None

        carry, _ = jax.lax.scan(step, carry, jnp.arange(steps))
        return carry, None

    carry, _ = jax.lax.scan(run_epoch, carry, (jax.random.split(key, spec.epochs), jnp.arange(spec.epochs)))
    return carry
