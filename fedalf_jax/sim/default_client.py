"""The default client as a client program (issue 48): what ``fj.Algorithm``'s optional client fields
(``upload``, ``penalty``, ``local_loss``, ``local_start``, ``local_optimizer``, ``personal``,
``client_collections``, ``local_train``) describe, built into one :class:`~fedalf_jax.sim.algorithms.ClientProgram`
that the round runs like a user's (:func:`~fedalf_jax.sim.program.program_client`):

* ``init``: the start ``(w_0[, v_0])`` (θ, or ``local_start``; ``personal.start``), the batch statistics and
  the optimiser's states: the carry of :func:`~fedalf_jax.sim.client.sgd`;
* ``step``: one gradient step of ``f_i(w) + penalty(w)`` (or ``local_loss``; plus the personal model's loss,
  :func:`~fedalf_jax.sim.client.joint_objective`), plain SGD or the ``local_optimizer``;
* ``final``: ``Sent(w, upload)``: the round privatises ``w`` and calls ``upload(θ, w, w̃, state, hp, lr_t)``
  on ``w̃``. With ``local_train=False``: no step, and ``final`` sends ``∇f_i(θ)`` (a data pass).

Each function the fields name is called as it always was (its signature read for ``hp=``/``broadcast=``/
``facts=``/``personal=``), once per client, outside the steps' loop: the round is the program it was, bit for bit
(``experiments/probes/builtin_hashes.py``; docs/extending.md shows each field as the special case it is).
"""

from __future__ import annotations

from . import contract as C
from .algorithms import Algorithm, Batch, ClientProgram, HParams, _takes
from .client import _join, _w_objective, joint_objective, masked_loss, model_at, sgd_init, sgd_step
from .program import Sent

UPLOAD_CALL = "theta, w, w_tilde, state, hp, lr_t[, broadcast=, facts=, personal=]"


def default_program(spec, ctx) -> ClientProgram:
    """The client program of ``spec.algorithm``'s optional fields for one client (``ctx``: its
    :class:`~fedalf_jax.sim.program.ClientContext`). Built once per client, so what the fields derive from θ
    and the state (a penalty's centre, the optimiser) is computed once, before the steps."""
    alg = spec.algorithm
    theta, state, hp, bcast, facts, lr_t = ctx.theta, ctx.state, ctx.hp, ctx.broadcast, ctx.facts, ctx.lr
    theta_vars = _join(theta, ctx.stats)
    if not alg.local_train:  # FedSGD's client: ∇f_i(θ_t) and f_i(θ_t) over its whole split
        def final_gradient(carry, ctx):
            loss, grad = ctx.data._loss_and_grad(spec.model, theta_vars)
            return Sent(None, lambda _: (grad, state, None), ctx.stats, loss)
        return ClientProgram(lambda ctx: (), None, final_gradient)
    kw = alg.client_kwargs(alg.upload, bcast, facts)
    if alg.broadcast is not None and not any(
            f is not None and "broadcast" in alg.client_kwargs(f, bcast, facts)
            for f in (alg.upload, alg.penalty, alg.local_loss, alg.local_start, alg.local_optimizer)):
        raise C.error(f"algorithm {alg.name!r} has a broadcast, but none of its client functions (upload, penalty, "
                      f"local_loss, ...) has a parameter named broadcast to receive it; add one (docs/extending.md)")
    penalty = client_fn(alg, "penalty", alg.penalty, theta, state, hp, bcast, facts)
    C.check_penalty(alg, penalty, theta)
    local_loss = client_fn(alg, "local_loss", alg.local_loss, theta, state, hp, bcast, facts)
    C.check_callable(alg, "local_loss", local_loss)
    local_loss = C.checked_loss(alg, "local_loss", local_loss)  # a real scalar, or one line naming it
    opt = None
    if alg.local_optimizer is not None:
        opt = C.call(alg, "local_optimizer", alg.local_optimizer, (lr_t,),
                     alg.client_kwargs(alg.local_optimizer, bcast, facts, hp=hp), "lr_t[, hp=, facts=, broadcast=]")
        opt = C.check_optimizer(alg, opt)
    w0 = theta
    if alg.local_start is not None:  # local training from a point the algorithm derives (default θ)
        start = client_fn(alg, "local_start", alg.local_start, theta, state, hp, bcast, facts)
        w0 = C.check_params(alg, "local_start", start, theta)
    personal = personal_task(spec, theta, state, hp, bcast, facts) if alg.personal is not None else None
    parts = (w0,) if personal is None else (w0, personal[0])
    one = sgd_step(joint_objective(_w_objective(spec.model, penalty, None, local_loss), personal), lr_t, opt)

    def init(ctx):
        return sgd_init(parts, ctx.stats, opt)

    def step(carry, batch, ctx):
        return one(carry, batch.x, batch.y, batch.mask, batch.key, batch.step)

    def final(carry, ctx):
        ps, stats = carry[0], carry[1]
        w = ps[0]
        up_kw = kw if personal is None else {**kw, "personal": ps[1]}  # v_i: kept in the state, never uploaded

        def upload(w_tilde):
            return C.unpack_upload(alg, C.call(alg, "upload", alg.upload, (theta, w, w_tilde, state, hp, lr_t), up_kw,
                                               UPLOAD_CALL), theta, state)
        return Sent(w, upload, stats)

    return ClientProgram(init, step, final)


def client_fn(alg: Algorithm, name: str, fn, theta, state, hp: HParams, bcast, facts):
    """``fn(theta, state, hp[, broadcast=, facts=])`` (``penalty``, ``local_loss``, ``local_start``,
    ``personal.start``, ...) with its signature checked; ``None`` when the algorithm has no ``fn``."""
    if fn is None:
        return None
    return C.call(alg, name, fn, (theta, state, hp), alg.client_kwargs(fn, bcast, facts),
                  "theta, state, hp[, broadcast=, facts=]")


def personal_task(spec, theta, state, hp: HParams, bcast, facts):
    """``(v0, loss_v)``: the client's second local model (``Algorithm.personal``), trained step by step beside
    ``w_i`` over the same minibatches, with the same learning rate and its own copy of the optimiser: from
    ``personal.start`` on ``f_i(v) + personal.penalty(v)``, or on ``personal.local_loss`` (which may train any
    pytree, and sees ``w`` at the same step as ``batch.w``). Its batch statistics are not kept (the global
    model's serve its evaluation). ``v_i`` stays on the client: ``upload`` only stores it."""
    alg = spec.algorithm
    p = alg.personal
    if not _takes(alg.upload, "personal"):
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

