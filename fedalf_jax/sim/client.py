"""Client-side local training (docs/algorithms.md §2): masked minibatch SGD as one ``lax.scan``, vmap-safe.

A client is described by a row of padded indices into the device-resident data pool and its count
``n``. Every client runs the same number of compiled steps, ``epochs * ceil(L / B)`` for padded
length ``L``; examples past ``n`` have zero loss weight and a step with no real example leaves the
model unchanged, so a padded client trains exactly as it would unpadded. With ``--local-steps K``
(``steps``) every client runs ``K`` steps instead, of ``B`` examples each (:func:`step_batches`).
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax

from . import tree as T

Penalty = Optional[Callable[[Any], jnp.ndarray]]  # params -> scalar added to the local objective


class ClientOut(NamedTuple):
    delta: Any      # Δ_i
    state: Any      # the client's new state (FedADMM's dual; or ())
    loss: Any       # l_i = f_i(θ_t) (0 when not needed)
    stats: Any      # the client's batch statistics after training (or None)
    noise_var: Any = 0.0  # Σ over Δ_i's values of their privacy-noise variance (0 unless the server asks)
    aux: Any = None       # the client's auxiliary upload (upload's third element), or None

    @property
    def dual(self):
        """The old name of :attr:`state` (0.1), kept for a release: read-only."""
        return self.state


def local_steps(n, epochs: int, batch_size: int, steps=None):
    """The SGD steps a client of ``n`` examples takes in a round: ``epochs · ⌈n / B⌉`` (a padded
    client's steps past its examples leave the model unchanged, :func:`~fedalf_jax.sim.client.local_sgd`,
    and are not counted); with ``steps`` (``--local-steps K``), ``K`` (0 for a client without examples)."""
    n = jnp.asarray(n, jnp.int32)
    if steps is not None:
        return jnp.where(n > 0, steps, 0).astype(jnp.int32)
    return (epochs * ((n + batch_size - 1) // batch_size)).astype(jnp.int32)


def epoch_order(key, n, length: int) -> jnp.ndarray:
    """A random order of the positions ``0..n-1`` followed by the padded positions ``n..length-1``.

    Position ``p`` draws its sort key from ``fold_in(key, p)``, so the order of the real positions
    does not depend on the padded ``length``: a client trains identically however its index row is
    padded (a sweep pads all its runs' rows to one length).
    """
    pos = jnp.arange(length)
    u = jax.vmap(lambda p: jax.random.uniform(jax.random.fold_in(key, p)))(pos)
    return jnp.argsort(jnp.where(pos < n, u, 2.0 + pos / length))


def epoch_schedule(ekey, n, length: int, padded: int):
    """One epoch's minibatch schedule from its key: ``(order, dropout key)``, ``order`` a random order of the
    client's ``n`` positions (:func:`epoch_order`) padded with zeros to ``padded`` (whole batches). Shared by
    the default client's SGD and a client program's steps, so both see the same minibatches."""
    okey, dkey = jax.random.split(ekey)
    order = epoch_order(okey, n, length)
    return jnp.concatenate([order, jnp.zeros(padded - length, order.dtype)]), dkey


def epoch_batch(order, n, j, batch_size: int):
    """Step ``j`` of an epoch's schedule: ``(positions, mask)``, the mask marking the real examples."""
    pos = jax.lax.dynamic_slice(order, (j * batch_size,), (batch_size,))
    return pos, (j * batch_size + jnp.arange(batch_size)) < n


def steps_per_epoch(length: int, batch_size: int) -> int:
    return int(math.ceil(length / batch_size))


def _join(params, stats):
    return {"params": params} if stats is None else {"params": params, "batch_stats": stats}


def masked_loss(model, params, stats, x, y, mask, *, train: bool, rng=None):
    """Mean cross-entropy over the examples where ``mask`` is 1 (0 if there are none)."""
    logits, new_state = model.apply(_join(params, stats), x, train=train, rng=rng)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    w = mask.astype(ce.dtype)
    loss = jnp.sum(ce * w) / jnp.maximum(jnp.sum(w), 1.0)
    correct = jnp.sum((jnp.argmax(logits, -1) == y) * w)
    return loss, (new_state.get("batch_stats", stats) if stats is not None else None, correct)


def local_sgd(model, variables, x_pool, y_pool, idx, n, key, lr, *, epochs: int, batch_size: int,
              penalty: Penalty = None, data_loss=None, optimizer=None, local_loss=None, personal=None,
              steps: Optional[int] = None):
    """Plain SGD on ``f_i(w) + penalty(w)`` from ``variables``; returns the trained variables.

    ``steps``: ``K`` minibatch steps (``--local-steps``, :func:`step_batches`) instead of ``epochs`` epochs.

    ``data_loss(params, stats, x, y, mask, rng) -> (loss, (new_stats, _))`` defaults to the model's
    masked cross-entropy (:func:`masked_loss`); tests swap in losses with closed-form minimisers.
    ``local_loss``: ``(params, Batch) -> scalar`` replacing the data loss (``Algorithm.local_loss``;
    :class:`~fedalf_jax.sim.algorithms.Batch` has the step's examples, the model's logits and features).
    ``optimizer``: an ``optax.GradientTransformation`` stepping instead of ``w − lr·g`` (its state
    initialised here; like the params it stays unchanged by a step with no real example); ``None``: plain SGD.
    ``personal``: ``(v0, loss_v)`` a second model trained step by step beside ``w`` over the same minibatches
    (``Algorithm.personal``), ``loss_v(v, w, stats, x, y, mask, rng, step) -> scalar`` (``w``'s gradient
    stopped), with its own copy of the optimiser; then ``(variables, v)`` is returned.
    """
    objective = joint_objective(_w_objective(model, penalty, data_loss, local_loss), personal)
    parts = (variables["params"],) if personal is None else (variables["params"], personal[0])
    ps, stats = sgd(parts, variables.get("batch_stats"), x_pool, y_pool, idx, n, key, lr, epochs=epochs,
                    batch_size=batch_size, objective=objective, optimizer=optimizer, steps=steps)
    out = _join(ps[0], stats)
    return out if personal is None else (out, ps[1])


def joint_objective(w_loss, personal=None):
    """The objective of one step over the parts ``(w[, v])``: ``w``'s loss (:func:`_w_objective`), plus, with a
    personal model ``personal = (v0, loss_v)``, ``loss_v(v, w, ...)`` with ``w``'s gradient stopped."""
    def objective(ps, stats, xb, yb, mask, rng, step):
        loss, new_stats = w_loss(ps[0], stats, xb, yb, mask, rng, step)
        if personal is not None:
            loss = loss + personal[1](ps[1], jax.lax.stop_gradient(ps[0]), stats, xb, yb, mask, rng, step)
        return loss, new_stats
    return objective


def _w_objective(model, penalty, data_loss, local_loss):
    """The global copy's loss of one step, ``(params, stats, x, y, mask, rng, step) -> (loss, new_stats)``:
    the data loss (or ``local_loss`` on the step's :class:`Batch`) plus the penalty."""
    if local_loss is not None:
        from .algorithms import Batch

        def data(params, stats, xb, yb, mask, rng, step):
            (logits, feats), new_state = model.apply(_join(params, stats), xb, train=True, rng=rng, features=True)
            new_stats = new_state.get("batch_stats", stats) if stats is not None else None
            return local_loss(params, Batch(xb, yb, mask, step, logits=logits, features=feats,
                                            apply=model_at(model, stats, xb))), new_stats
    else:
        if data_loss is None:
            data_loss = lambda p, s, xb, yb, mask, rng: masked_loss(model, p, s, xb, yb, mask,  # noqa: E731
                                                                    train=True, rng=rng)

        def data(params, stats, xb, yb, mask, rng, step):
            loss, (new_stats, _) = data_loss(params, stats, xb, yb, mask, rng)
            return loss, new_stats

    def objective(params, stats, xb, yb, mask, rng, step):
        loss, new_stats = data(params, stats, xb, yb, mask, rng, step)
        if penalty is not None:
            loss = loss + penalty(params)
        return loss, new_stats
    return objective


def model_at(model, stats, x):
    """``params -> (logits, features)``: the model on the batch ``x`` at other params, in evaluation mode
    (the running batch statistics ``stats``; no dropout): :attr:`Batch.apply`."""
    return lambda params: model.apply(_join(params, stats), x, train=False, features=True)[0]


def step_batches(key, n, length: int, batch_size: int):
    """``--local-steps K``: ``k -> (positions, mask, key)`` of local step ``k`` (0, 1, ...) of a client of ``n``
    real examples in a padded row of ``length``: its steps cycle through reshuffled passes over its data,
    each a minibatch of ``B`` examples, as fair_flearn's ``solve_iters`` (and FedJAX's ``num_steps``) draw
    them. A pass is ``max(⌊n / B⌋, 1)`` full batches of its order (:func:`epoch_order` with the pass's key
    ``fold_in(okey, pass)``): the ``n mod B`` examples left over wait for the next pass's shuffle; a client of
    fewer than ``B`` examples steps on all of them every step (``mask``: the real ones), a client of none
    never steps. ``key``'s halves: the orders' and the steps' dropout keys (``fold_in(dkey, k)``)."""
    okey, dkey = jax.random.split(key)
    per = jnp.maximum(jnp.asarray(n, jnp.int32) // batch_size, 1)  # batches per pass over the client's data
    padded = max(length, batch_size)

    def batch(k):
        e, j = k // per, k % per
        order = epoch_order(jax.random.fold_in(okey, e), n, length)
        order = jnp.concatenate([order, jnp.zeros(padded - length, order.dtype)])
        pos = jax.lax.dynamic_slice(order, (j * batch_size,), (batch_size,))
        mask = (j * batch_size + jnp.arange(batch_size)) < n
        return pos, mask, jax.random.fold_in(dkey, k)
    return batch


def _sgd_update(carry, g, new_stats, lr, optimizer):
    """One step of :func:`sgd` from the gradient ``g`` (:func:`scan_steps` keeps the old carry when the step
    has no real example)."""
    ps, stats, *opt = carry
    if optimizer is None:
        ps = jax.tree_util.tree_map(lambda p, gi: p - lr * gi, ps, g)
    else:
        stepped, new_opt = [], []
        for p, gi, o in zip(ps, g, opt[0]):
            updates, no = optimizer.update(gi, o, p)
            stepped.append(optax.apply_updates(p, updates))
            new_opt.append(no)
        ps, opt = tuple(stepped), [tuple(new_opt)]
    if stats is not None:
        stats = new_stats
    return (ps, stats, *opt)


def sgd_init(parts: tuple, stats, optimizer=None):
    """The carry of :func:`sgd`: ``(parts, stats[, optimiser states])``, each part with its own optimiser state."""
    init = (tuple(parts), stats)
    if optimizer is not None:
        init = init + (tuple(optimizer.init(p) for p in parts),)
    return init


def sgd_step(objective, lr, optimizer=None):
    """``(carry, x, y, mask, rng, step) -> carry``: one SGD step of :func:`sgd`'s carry (:func:`sgd_init`) on
    ``objective(parts, stats, x, y, mask, rng, step) -> (loss, new_stats)``; ``optimizer`` an optax
    transformation (``None``: ``p − lr·g``)."""
    grad_fn = jax.grad(objective, has_aux=True)

    def step(carry, xb, yb, mask, rng, k):
        g, new_stats = grad_fn(carry[0], carry[1], xb, yb, mask, rng, k)
        return _sgd_update(carry, g, new_stats, lr, optimizer)
    return step


def scan_steps(body, carry, idx, n, key, *, epochs: int, batch_size: int, steps: Optional[int] = None,
               budget=None):
    """A client's local steps, the one loop that the default client's SGD and a client program's steps share:
    ``body(carry, rows, mask, rng, step) -> carry`` once per minibatch step (``rows``: the step's ``B`` indices
    into the pool, ``mask`` the real ones, ``rng`` its dropout key, ``step`` its index over the round), as one
    ``lax.scan`` over ``epochs`` epochs of ``lax.scan`` over their ``⌈L / B⌉`` steps (:func:`epoch_schedule`);
    with ``steps`` (``--local-steps K``), one ``lax.scan`` of ``K`` steps of :func:`step_batches`. A step with
    no real example leaves the carry unchanged. ``budget`` (int32, or ``None``: no limit): only the client's first
    ``budget`` real steps run (a straggler's work before the deadline); the later ones are masked as a padded step
    is. Returns the final carry."""
    length = idx.shape[0]

    def masked(carry, pos, mask, rng, k):
        new = body(carry, idx[pos], mask, rng, k)
        live = jnp.any(mask)
        return jax.tree_util.tree_map(lambda a, c: jnp.where(live, c, a), carry, new)

    if steps is not None:
        batch = step_batches(key, n, length, batch_size)

        def k_step(carry, k):
            pos, mask, rng = batch(k)
            if budget is not None:
                mask = mask & (k < budget)
            return masked(carry, pos, mask, rng, k), None

        carry, _ = jax.lax.scan(k_step, carry, jnp.arange(steps))
        return carry
    per_epoch = steps_per_epoch(length, batch_size)
    padded = per_epoch * batch_size

    def run_epoch(carry, ek):
        ekey, e = ek
        order, dkey = epoch_schedule(ekey, n, length, padded)

        def step(carry, j):
            pos, mask = epoch_batch(order, n, j, batch_size)
            if budget is not None:  # the real steps before this one: e whole epochs of ⌈n / B⌉, then j
                mask = mask & (e * ((n + batch_size - 1) // batch_size) + j < budget)
            return masked(carry, pos, mask, jax.random.fold_in(dkey, j), e * per_epoch + j), None

        carry, _ = jax.lax.scan(step, carry, jnp.arange(per_epoch))
        return carry, None

    carry, _ = jax.lax.scan(run_epoch, carry, (jax.random.split(key, epochs), jnp.arange(epochs)))
    return carry


def sgd(parts: tuple, stats, x_pool, y_pool, idx, n, key, lr, *, epochs: int, batch_size: int, objective,
        optimizer=None, steps: Optional[int] = None):
    """Masked minibatch SGD of a tuple of param pytrees ``parts`` (the global copy ``w``, and a personal
    model beside it) on ``objective(parts, stats, x, y, mask, rng, step) -> (loss, new_stats)`` over the
    steps of :func:`scan_steps`; returns ``(parts, stats)``. Each part has its own state of ``optimizer`` (an
    optax transformation; ``None``: ``p − lr·g``). ``step``: the step's index over all epochs. A step with no
    real example changes nothing. ``steps``: ``K`` steps of :func:`step_batches` instead of the epochs."""
    one = sgd_step(objective, lr, optimizer)
    ps, stats, *_ = scan_steps(lambda c, rows, mask, rng, k: one(c, x_pool[rows], y_pool[rows], mask, rng, k),
                               sgd_init(parts, stats, optimizer), idx, n, key, epochs=epochs,
                               batch_size=batch_size, steps=steps)
    return ps, stats


LOSS_CHUNK = 50  # examples per forward pass of :func:`full_loss` when the caller names no chunk


def _chunked(idx, n, chunk: int):
    """``idx`` padded to a multiple of ``chunk`` and cut into ``[steps, chunk]`` rows, with the mask of
    real examples (positions ``< n``; the padding past ``idx``'s length is never real)."""
    length = idx.shape[0]
    chunk = max(1, min(int(chunk), length))
    steps = steps_per_epoch(length, chunk)
    padded = steps * chunk
    rows = jnp.concatenate([idx, jnp.zeros(padded - length, idx.dtype)]).reshape(steps, chunk)
    mask = (jnp.arange(padded) < n).reshape(steps, chunk)
    return rows, mask


def _sum_over_chunks(fn, init, idx, n, chunk: int):
    """``init`` plus ``fn(rows, mask)`` (a pytree like ``init``) summed over the ``chunk``-example pieces of the
    (padded) split ``idx`` of ``n`` real examples (:func:`_chunked`), as one ``lax.scan``."""
    total, _ = jax.lax.scan(lambda acc, rm: (T.add(acc, fn(*rm)), None), init, _chunked(idx, n, chunk))
    return total


def _ce_sum(model, params, stats, x, y, mask, *, forward_only: bool = False):
    """Sum of the cross-entropy over the examples where ``mask`` is true (evaluation mode; ``forward_only``:
    the caller does not differentiate it, :meth:`~fedalf_jax.problem.models.Model.apply`)."""
    logits, _ = model.apply(_join(params, stats), x, train=False, forward_only=forward_only)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    return jnp.sum(jnp.where(mask, ce, 0.0))


def full_loss(model, variables, x_pool, y_pool, idx, n, *, chunk: Optional[int] = None, forward_only: bool = False):
    """``f_i`` on the whole (padded) train split: the client's loss at ``variables``.

    Computed ``chunk`` examples at a time (a ``lax.scan`` over batch-sized forward passes: one pass over
    the whole split ran at 7x its FLOP floor on CPU) as the masked sum divided by ``max(n, 1)`` - the
    value of :func:`masked_loss` up to float summation order. ``train=False``: batch statistics unchanged.
    ``forward_only``: the model's ``forward_module`` computes it when it has one (the round asks for it when
    its clients are mapped one at a time: vmapped over a sweep's runs, per-run params turn ``lax.conv`` into
    grouped convolutions, 1.25x slower than im2col on CPU).
    """
    params, stats = variables["params"], variables.get("batch_stats")

    def ce_sum(r, m):
        return _ce_sum(model, params, stats, x_pool[r], y_pool[r], m, forward_only=forward_only)

    total = _sum_over_chunks(ce_sum, jnp.zeros((), jnp.float32), idx, n, LOSS_CHUNK if chunk is None else chunk)
    return total / jnp.maximum(jnp.asarray(n, jnp.float32), 1.0)


def full_loss_and_grad(model, variables, x_pool, y_pool, idx, n, *, chunk: Optional[int] = None):
    """``f_i(θ)`` and its exact full-batch gradient with respect to the params (FedLF, client_grad=full),
    accumulated ``chunk`` examples at a time like :func:`full_loss`."""
    params, stats = variables["params"], variables.get("batch_stats")
    vg = jax.value_and_grad(lambda p, xb, yb, m: _ce_sum(model, p, stats, xb, yb, m))
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    total, gsum = _sum_over_chunks(lambda r, m: vg(params, x_pool[r], y_pool[r], m),
                                   (jnp.zeros((), jnp.float32), zeros), idx, n, LOSS_CHUNK if chunk is None else chunk)
    scale = 1.0 / jnp.maximum(jnp.asarray(n, jnp.float32), 1.0)
    return total * scale, jax.tree_util.tree_map(lambda g: (g * scale).astype(g.dtype), gsum)


def evaluate_clients(model, variables, x_pool, y_pool, idx, n, *, batch_size: int = 10,
                     chunk: Optional[int] = None):
    """Accuracy and mean loss of one global model on every client's split (``idx`` is [N, L]).

    Clients are processed ``batch_size`` at a time with ``lax.map`` to bound memory; with ``chunk``, one at a
    time instead, each in ``chunk``-example forward passes (a ``lax.scan``, as :func:`full_loss`) of the
    model's ``forward_module``: on CPU 4.8x faster than the ``batch_size`` clients' whole splits in one
    pass (docs/lab/benchmarks.md), and what the round asks for when its clients are mapped (one run's params at a
    time: vmapped over a sweep's runs, ``lax.conv`` would become grouped convolutions).
    """
    params, stats = variables["params"], variables.get("batch_stats")
    if chunk is not None:
        return jax.lax.map(lambda a: _acc_loss_chunked(model, params, stats, x_pool, y_pool, *a, chunk), (idx, n))

    def one(args):
        ci, cn = args
        return _acc_loss(model, params, stats, x_pool, y_pool, ci, cn)

    return jax.lax.map(one, (idx, n), batch_size=batch_size)


def _acc_loss_chunked(model, params, stats, x_pool, y_pool, ci, cn, chunk: int):
    """:func:`_acc_loss` in ``chunk``-example forward passes of the model's ``forward_module`` (the same
    accuracy; the loss up to float summation order)."""
    def sums(r, m):  # Σ cross-entropy and Σ right answers over the chunk's real examples
        logits, _ = model.apply(_join(params, stats), x_pool[r], train=False, forward_only=True)
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, y_pool[r])
        right = (jnp.argmax(logits, -1) == y_pool[r]) & m
        return jnp.sum(jnp.where(m, ce, 0.0)), jnp.sum(right.astype(ce.dtype))

    zero = jnp.zeros((), jnp.float32)
    loss, correct = _sum_over_chunks(sums, (zero, zero), ci, cn, chunk)
    count = jnp.maximum(jnp.asarray(cn, jnp.float32), 1.0)
    return correct / count, loss / count


def _acc_loss(model, params, stats, x_pool, y_pool, ci, cn):
    """Accuracy and mean loss of ``params`` on one client's (padded) split ``ci`` of ``cn`` examples."""
    mask = jnp.arange(ci.shape[0]) < cn
    loss, (_, correct) = masked_loss(model, params, stats, x_pool[ci], y_pool[ci], mask, train=False)
    return correct / jnp.maximum(cn, 1), loss


def evaluate_own_models(model, stats, params_of, states, seen, x_pool, y_pool, idx, n, *, batch_size: int = 10,
                        stats_of=None, own_stats=None):
    """Accuracy and mean loss of every client's own model on its own split: client ``i``'s params are
    ``params_of(states[i], seen[i])`` (``states``: a pytree with a leading axis of N, ``()`` for none;
    ``seen``: [N] bool; ``stats``: the batch statistics every model uses, or None; with ``stats_of``, client
    ``i``'s are ``stats_of(own_stats[i], seen[i])``). Processed like :func:`evaluate_clients`, with the
    training passes' module (``batch_size`` clients' own params side by side would make ``lax.conv`` grouped
    convolutions)."""
    def one(args):
        st, sn, ost, ci, cn = args
        s = stats if stats_of is None else stats_of(ost, sn)
        return _acc_loss(model, params_of(st, sn), s, x_pool, y_pool, ci, cn)

    return jax.lax.map(one, (states, seen, own_stats if stats_of is not None else (), idx, n), batch_size=batch_size)
