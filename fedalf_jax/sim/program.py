"""The client program (docs/extending.md "The client program"): a client's whole local procedure
as three pure functions with an explicit carry, after FedJAX's ``for_each_client(client_init, client_step,
client_final)``:

* ``init(ctx) -> carry``: any pytree of arrays (params, optimiser state, a personal model, statistics);
* ``step(carry, batch, ctx) -> carry``: called once per local minibatch step, inside the same ``lax.scan``
  over epochs of ``lax.scan`` over steps (and the same shuffle and keys) as the default client's SGD, so a
  step warm-starts from the last (pFedMe's θ̃); a step with no real example leaves the carry unchanged;
* ``final(carry, ctx) -> (Δ_i, new state[, aux])``: what the client uploads, as ``Algorithm.upload`` returns it;
  or ``fj.Reveal(w, new state[, aux])``: the model ``w`` the client reveals, which the round passes through the
  run's privacy mechanism (:func:`privatise`, with the default client's key) and uploads
  as ``Δ_i = θ − w̃`` (FedAvg's model upload). Under ``--ldp`` or ``--dp gaussian`` only a ``Reveal`` runs: a raw
  ``Δ_i`` would leave the client past the mechanism, and is refused in one line.

``ctx`` is one :class:`ClientContext`: θ, the client's state, ``hp``, the broadcast, the round, this round's
learning rate, a per-client key, the client's :class:`~fedalf_jax.sim.algorithms.ClientFacts` (``n``,
``steps``, ``label_counts``, ``index``), ``apply`` to run the model and ``data``, a :class:`DataPass` that
folds a function over the client's own training examples, exactly, at any params (FedProto's prototypes
after training, SCAFFOLD option I's full gradient).

An algorithm gives it as ``fj.Algorithm(name, server, client=fj.ClientProgram(init, step, final))``.
Without one, its optional fields (``upload``, ``penalty``, ``local_loss``, ...) describe the default client,
which :mod:`fedalf_jax.sim.default_client` builds into a program of the same form: the round's
:func:`~fedalf_jax.sim.round.client_step` runs every client through :func:`program_client`, and what leaves a
client passes through the mechanism there (:func:`privatise`). Clients stay vmapped (or ``lax.map``ped) in the
one compiled round.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from . import contract as C
from . import tree as T
from .algorithms import Batch, ClientFacts, ClientProgram, HParams  # noqa: F401 (ClientProgram: here too)
from .client import ClientOut, _chunked, _join, full_loss, full_loss_and_grad, local_steps, scan_steps


ClientBatch = Batch  # its 0.1 name: one batch type for a program's steps, a data pass and a local_loss


class Reveal(NamedTuple):
    """What ``client.final`` returns to reveal a model rather than an update: ``w`` the client's trained
    params (shaped like θ), ``state`` its new state, ``aux`` an auxiliary upload (``None``: none; it needs
    ``public_aux``, and with ``public_aux=False`` the privacy record lists it as not covered).

    The round computes the upload itself: ``w̃ = privatise(w)`` (the run's mechanism, its key the default
    client's, so a program revealing FedAvg's ``w`` is FedAvg under the same mechanism bit for bit) and
    ``Δ_i = θ − w̃``; without a mechanism ``Δ_i = θ − w``. Under central DP ``Δ_i`` is clipped as any upload.

    * ``upload(w̃) -> (Δ_i, new state[, aux])`` (optional): the upload computed from the model the mechanism let
      out, in place of ``θ − w̃`` (SCAFFOLD option II's control variate, FedPer's head kept out); then ``state``
      and ``aux`` come from it and are left ``None`` here. Affine in ``w̃`` when the server asks for the noise
      variance (``needs_noise_var``), as ``fj.local_training``'s ``upload`` is.
    * ``stats``: the batch statistics after training (``ctx.apply.with_stats``), on a model with BatchNorm, where
      they are required (``ctx.stats`` to send back the ones it trained from); the round averages them as it
      does the default client's, or keeps them per client under ``ClientProgram(collections=("batch_stats",))``."""

    w: Any
    state: Any = None
    aux: Any = None
    upload: Optional[Callable] = None
    stats: Any = None


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
    * ``data``: a :class:`DataPass` over the client's own training examples;
    * ``stats``: the batch statistics the client trains from (the global model's, or its own under
      ``client_collections``): the default client's (a client program runs only on models without them)."""

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
    stats: Any = None


class DataPass:
    """A pass over one client's own training examples (its padded index row, the real ones masked):
    :meth:`fold`. Exact whatever the optimiser: every real example is seen once, in its index order."""

    def __init__(self, alg, x_pool, y_pool, idx, n, batch_size: int, hint=None):
        self._alg, self._x, self._y, self._idx, self._n, self._b = alg, x_pool, y_pool, idx, n, int(batch_size)
        self._hint = hint  # e -> the likely cause of what fn raised (ModelApply.hint), or None

    def fold(self, fn: Callable, init, *, batch_size: Optional[int] = None):
        """``fn(acc, batch: Batch) -> acc`` folded over the client's examples in batches of
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
                         (acc, Batch(self._x[r], self._y[r], m, s)), {}, "acc, batch", hint=self._hint)
            C.check_fold(self._alg, new, acc)
            live = jnp.any(m)
            return jax.tree_util.tree_map(lambda a, b: jnp.where(live, b, a), acc, new), None

        out, _ = jax.lax.scan(body, init, (rows, mask, jnp.arange(rows.shape[0], dtype=jnp.int32)))
        return out

    def _loss_and_grad(self, model, variables):
        """``f_i`` and ``∇f_i`` at ``variables`` over the client's examples in batches of ``--batch-size``
        (:func:`~fedalf_jax.sim.client.full_loss_and_grad`): the default client's ``local_train=False``."""
        return full_loss_and_grad(model, variables, self._x, self._y, self._idx, self._n, chunk=self._b)


def label_counts(y_pool, idx, n, num_classes: int):
    """``[num_classes]`` int32: how many of the client's real training examples (the first ``n`` of ``idx``)
    carry each label."""
    real = (jnp.arange(idx.shape[0]) < n).astype(jnp.int32)
    return jnp.zeros((num_classes,), jnp.int32).at[y_pool[idx]].add(real)


class ModelApply:
    """``ctx.apply``: ``(params, x, *, train=False, key=None) -> (logits, features)``; it notes whether it
    returned ``None`` features (a model returning its logits only), so a program that failed on them is told
    why (:meth:`hint`)."""

    def __init__(self, model):
        self.model, self.gave_none = model, False

    def __call__(self, params, x, *, train: bool = False, key=None):
        out, _ = self.model.apply({"params": params}, x, train=train, rng=key, features=True)
        self.gave_none = self.gave_none or out[1] is None
        return out

    def with_stats(self, params, stats, x, *, train: bool = False, key=None):
        """``((logits, features), new stats)``: the model at ``params`` with the batch statistics ``stats``
        (``ctx.stats``, or a carried copy); ``train=True`` normalises by the batch's own moments and returns the
        running statistics updated (BatchNorm's training mode, the default client's step), ``train=False`` uses
        ``stats`` and returns them unchanged. ``stats=None``: a model without batch statistics."""
        out, new = self.model.apply(_join(params, stats), x, train=train, rng=key, features=True)
        self.gave_none = self.gave_none or out[1] is None
        return out, (new.get("batch_stats", stats) if stats is not None else None)

    def hint(self, e) -> str:
        """The likely cause of ``e``, raised by a program's function that called this ``apply``: ``None``
        features of a model that returns its logits only (``""`` when unknown)."""
        if self.gave_none and "None" in f"{type(e).__name__}: {e}":
            return (f"model {self.model.name!r} returns its logits only, so ctx.apply's features are None: use a "
                    f"model whose __call__ returns (logits, features), e.g. --model examples.moon:model "
                    f"(docs/extending.md)")
        return ""


# a pytree without leaves: it rides in ServerIn (and through the transforms a server applies to it) as static data
jax.tree_util.register_pytree_node(ModelApply, lambda m: ((), m), lambda m, _: m)


def model_apply(model):
    """``ctx.apply``: ``(params, x, *, train=False, key=None) -> (logits, features)`` (:class:`ModelApply`)."""
    return ModelApply(model)


class Sent(NamedTuple):
    """What the default client's ``final`` returns (:mod:`fedalf_jax.sim.default_client`; not a user's form):
    ``w`` the trained params the run's mechanism perturbs (``None``: the client reveals no model, as with
    ``local_train=False``, which no mechanism accepts), ``upload(w̃) -> (Δ_i, new state, aux)`` (affine in
    ``w̃``: the noise variance is read off it, :func:`upload_noise`), ``stats`` the batch statistics after
    training (``None`` without), ``loss`` ``f_i(θ)`` when ``final`` computed it (``None``: the round does)."""

    w: Any
    upload: Callable
    stats: Any = None
    loss: Any = None


def privatise(spec, key, theta, w, hp: HParams, *, with_variance: bool = False):
    """w̃_i: the model the client reveals. A local mechanism perturbs the weights (``spec.ldp_on ==
    "weights"``, the paper's reading: each weight's offset from its tensor's centre) or the update
    (``"update"``: ``w̃ = θ + M(w − θ)``, each value's offset from its update tensor's centre, so the
    noise scales with the update); Gaussian DP noises the clipped update. ``with_variance``: return
    ``(w̃, var)``, the per-value noise variance of ``w̃`` the server can compute from what it receives
    (:mod:`fedalf_jax.sim.privacy`)."""
    if spec.ldp != "none":
        from ..privacy.mechanisms import mechanism
        mech = mechanism(spec.ldp)
        src = T.sub(w, theta) if spec.ldp_on == "update" else w
        out = mech(key, src, hp.epsilon, with_variance=with_variance)
        noisy, var = out if with_variance else (out, None)
        if spec.ldp_on == "update":
            noisy = T.add(theta, noisy)
    elif spec.dp == "gaussian":
        from ..privacy.mechanisms import gaussian_dp, gaussian_sigma
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


def program_client(spec, theta_vars, state, idx, n, key, hp: HParams, t, x, y, bcast, index, program, own=None,
                   budget=None):
    """One client of round ``t`` (unbatched; the round vmaps or maps it), run as the client program that
    ``program(ctx)`` gives: the algorithm's :class:`ClientProgram`, or the default client built from its
    optional fields (:func:`~fedalf_jax.sim.default_client.default_program`). ``init``, ``step`` once per
    local minibatch step (:func:`~fedalf_jax.sim.client.scan_steps`), ``final``; what ``final`` reveals
    passes through the run's privacy mechanism here, for every algorithm. ``own``: the client's own copies of
    the algorithm's ``client_collections``, which it trains from instead of the global model's. ``budget``: the
    local steps it completes before the round's deadline (its later steps masked, ``facts.steps`` that count), or
    ``None``. Returns the round's ``ClientOut``."""
    alg = spec.algorithm
    if own:
        theta_vars = {**theta_vars, **own}
    theta = theta_vars["params"]
    lr_t = hp.lr * hp.lr_decay ** t
    k_train, k_priv = jax.random.split(key)  # k_train: the local steps' batches and dropout keys
    local_mech = spec.ldp != "none" or spec.dp == "gaussian"  # noise drawn on the client from k_priv
    k_ctx = jax.random.fold_in(k_priv, PROGRAM_KEY) if local_mech else k_priv
    steps = local_steps(n, spec.epochs, spec.batch_size, spec.local_steps)
    facts = ClientFacts(jnp.asarray(n, jnp.int32), steps if budget is None else jnp.minimum(steps, budget),
                        label_counts(y, idx, n, spec.model.num_classes),
                        None if index is None else jnp.asarray(index, jnp.int32))
    apply = model_apply(spec.model)
    ctx = ClientContext(theta, state, hp, bcast, jnp.asarray(t, jnp.int32), lr_t, k_ctx, facts,
                        apply, DataPass(alg, x, y, idx, n, spec.batch_size, hint=apply.hint),
                        theta_vars.get("batch_stats"))
    prog = program(ctx)
    carry = C.call(alg, "client.init", prog.init, (ctx,), {}, "ctx", hint=apply.hint)
    C.check_arrays(f"algorithm {alg.name!r}: client.init", "the carry", carry)
    carry = jax.tree_util.tree_map(jnp.asarray, carry)
    if prog.step is not None:
        carry = _steps(spec, prog.step, ctx, carry, x, y, idx, n, k_train, hint=apply.hint, budget=budget)
    out = C.call(alg, "client.final", prog.final, (carry, ctx), {}, "carry, ctx", hint=apply.hint)
    noise_var = jnp.zeros((), jnp.float32)
    stats, loss = None, None
    if isinstance(out, Reveal):  # the model the client reveals: through the mechanism, then Δ_i = θ − w̃
        w, new_state, aux = C.unpack_reveal(alg, out, theta, state, ctx.stats)
        if out.upload is None:
            out = Sent(w, lambda wt: (T.sub(theta, wt), new_state, aux), out.stats)  # model_upload's Δ_i
        else:  # its own upload of w̃
            up = out.upload
            out = Sent(w, lambda wt: C.unpack_final(alg, C.call(alg, "fj.Reveal's upload", up, (wt,), {}, "w_tilde"),
                                                    theta, state, what="fj.Reveal's upload"), out.stats)
    elif not isinstance(out, Sent) and "batch_stats" in theta_vars:  # a raw Δ_i: no place for the trained stats
        raise C.error(f"algorithm {alg.name!r}: client.final on a model with batch statistics must return "
                      f"fj.Reveal(w, new state, stats=...) (its statistics after training, ctx.apply.with_stats; "
                      f"ctx.stats to keep them), not a raw (Δ_i, new state)")
    if isinstance(out, Sent):
        stats, loss = out.stats, out.loss
        if out.w is None:  # no model revealed (local_train=False): no mechanism runs such a round
            delta, new_state, aux = out.upload(None)
        elif alg.needs_noise_var and (spec.ldp != "none" or spec.dp != "none"):
            w_tilde, var = privatise(spec, k_priv, theta, out.w, hp, with_variance=True)
            delta, new_state, aux = out.upload(w_tilde)
            noise_var = upload_noise(out.upload, w_tilde, var)
        else:
            delta, new_state, aux = out.upload(privatise(spec, k_priv, theta, out.w, hp))
    else:
        if local_mech:  # a raw Δ_i would leave the client past the mechanism
            raise C.error(C.raw_delta_refusal(alg, spec))
        delta, new_state, aux = C.unpack_final(alg, out, theta, state)
    if spec.dp == "central":  # DP-FedAvg's client: its upload clipped to norm C (the server adds the noise)
        from ..privacy.mechanisms import clip_global_norm
        delta = clip_global_norm(delta, hp.clip)
    if loss is None:  # l_i = f_i(θ_t), when the server uses it
        loss = (full_loss(spec.model, theta_vars, x, y, idx, n, chunk=spec.batch_size,
                          forward_only=spec.client_map == "map") if alg.needs_loss else jnp.zeros(()))
    return ClientOut(delta, new_state, loss, stats, noise_var, aux)


def _steps(spec, step_fn, ctx, carry, x_pool, y_pool, idx, n, key, hint=None, budget=None):
    """``step`` once per local minibatch step of :func:`~fedalf_jax.sim.client.scan_steps` (``spec.epochs``
    epochs of ``⌈L / B⌉`` steps, or ``--local-steps K``): the batches and keys the default client's SGD
    steps on; a step with no real example keeps the carry."""
    alg = spec.algorithm

    def body(carry, rows, mask, rng, k):
        batch = Batch(x_pool[rows], y_pool[rows], mask, jnp.asarray(k, jnp.int32), rng)
        new = C.call(alg, "client.step", step_fn, (carry, batch, ctx), {}, "carry, batch, ctx", hint=hint)
        C.check_carry(alg, new, carry)
        return new

    return scan_steps(body, carry, idx, n, key, epochs=spec.epochs, batch_size=spec.batch_size,
                      steps=spec.local_steps, budget=budget)
