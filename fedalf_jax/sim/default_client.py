"""The client of local training: :func:`local_training`, the public factory that returns a
:class:`~fedalf_jax.sim.algorithms.ClientProgram` from the pieces an algorithm's client is made of (a penalty, a
local loss, a local optimiser, a start, a personal model, kept collections, an upload, or a full-gradient client),
each an explicit function of the client's ``ctx`` (:class:`~fedalf_jax.sim.program.ClientContext`). The built-in
algorithms and ``examples/`` are written with it; ``fj.Algorithm``'s old client fields (``upload``, ``penalty``,
``local_loss``, ``local_start``, ``local_optimizer``, ``personal``, ``client_collections``, ``local_train``) are
turned into the same pieces by :func:`training_of` (their signatures read for ``hp=``/``broadcast=``/``facts=``/
``personal=``, as in 0.1), so one program runs both:

* ``init``: the start ``(w_0[, v_0])`` (θ, or ``local_start``; ``personal.start``), the batch statistics and
  the optimiser's states: the carry of :func:`~fedalf_jax.sim.client.sgd`;
* ``step``: one gradient step of ``f_i(w) + penalty(w)`` (or ``local_loss``; plus the personal model's loss,
  :func:`~fedalf_jax.sim.client.joint_objective`), plain SGD or the ``local_optimizer``;
* ``final``: ``Sent(w, upload)``: the round privatises ``w`` and calls ``upload(ctx, w, w̃[, v])`` on ``w̃``.
  With ``full_gradient=True``: no step, and ``final`` sends ``∇f_i(θ)`` (a data pass).

The round builds the program once per client (:func:`bind`), so what the pieces derive from θ and the state (a
penalty's centre, the optimiser) is computed once, before the steps: the round is the program it was, bit for bit
(``experiments/probes/builtin_hashes.py``).
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

from . import contract as C
from . import tree as T
from .algorithms import Algorithm, Batch, ClientProgram, HParams, Personal, _takes
from .client import _join, _w_objective, joint_objective, masked_loss, model_at, sgd_init, sgd_step
from .program import Sent

UPLOAD_CALL = "theta, w, w_tilde, state, hp, lr_t[, broadcast=, facts=, personal=]"
CTX_UPLOAD_CALL = "ctx, w, w_tilde"


class LocalTraining(NamedTuple):
    """The pieces of a :func:`local_training` program (``ClientProgram.training``), each ``None`` when not given."""

    penalty: Optional[Callable] = None
    local_loss: Optional[Callable] = None
    local_optimizer: Optional[Callable] = None
    local_start: Optional[Callable] = None
    personal: Optional[Personal] = None
    client_collections: tuple = ()
    upload: Optional[Callable] = None
    full_gradient: bool = False
    legacy: bool = False  # made from the old Algorithm fields (their own signatures and messages)


def local_training(*, penalty=None, local_loss=None, local_optimizer=None, local_start=None, personal=None,
                   client_collections=(), upload=None, full_gradient: bool = False,
                   evaluate=None) -> ClientProgram:
    """The client that trains a copy of θ locally (FedAvg's, and every variation of it): a
    :class:`ClientProgram` for ``fj.Algorithm(name, server=..., client=fj.local_training(...))``. Named for what it
    does, not for an optimiser: its steps are plain SGD ``w − η_l g`` unless ``local_optimizer`` gives another,
    and ``full_gradient=True`` is its no-step case. Every piece is a function of the client's ``ctx``
    (:class:`~fedalf_jax.sim.program.ClientContext`: θ, its state, ``hp``, the broadcast, ``facts``, ``lr``), called
    once per client and round, before the steps:

    * ``penalty(ctx) -> (params -> scalar)`` (or ``None``), added to each step's loss (FedProx's ``μ/2 ‖w − θ‖²``);
    * ``local_loss(ctx) -> ((params, batch: fj.Batch) -> scalar)``: the loss each step minimises instead of the
      cross-entropy (:func:`~fedalf_jax.sim.algorithms.cross_entropy` gives that back); ``penalty`` still added;
    * ``local_optimizer(ctx) -> optax.GradientTransformation`` (``fj.local_optimizer(name)(ctx.lr)``), a fresh
      state every round; ``None``: ``w − ctx.lr · g``;
    * ``local_start(ctx) -> params``: where training starts (default θ);
    * ``personal``: ``fj.Personal(start(ctx), penalty(ctx), local_loss(ctx))``, a second model ``v_i`` trained over
      the same minibatches beside ``w_i``; ``upload`` then gets it as a fourth argument, to keep in the state;
    * ``client_collections``: model collections kept per client (``("batch_stats",)``: FedBN's own statistics);
    * ``upload(ctx, w, w_tilde[, v]) -> (Δ_i, new state[, aux])``: from the trained ``w`` and ``w̃``, what the run's
      privacy mechanism made of it (``w`` itself without one); ``None``: ``Δ_i = θ − w̃``, the state unchanged;
    * ``full_gradient=True``: no local step; the client sends ``∇f_i(θ_t)`` and ``f_i(θ_t)`` over its whole split
      (FedSGD, FedLF's ``client_grad="full"``), which no privacy mechanism accepts; no other piece applies;
    * ``evaluate(ctx) -> params``: the model each client is evaluated with at every evaluation
      (:class:`ClientProgram`'s ``evaluate``)."""
    given = {k: v for k, v in dict(penalty=penalty, local_loss=local_loss, local_optimizer=local_optimizer,
                                   local_start=local_start, personal=personal, upload=upload).items() if v is not None}
    cols = (client_collections,) if isinstance(client_collections, str) else tuple(client_collections)
    for k, f in given.items():
        if k != "personal" and not callable(f):
            raise C.error(f"fj.local_training: {k} is a {type(f).__name__}; expected a function of ctx")
    if personal is not None and not isinstance(personal, Personal):
        raise C.error(f"fj.local_training: personal is a {type(personal).__name__}; expected fj.Personal(start, "
                      f"penalty, local_loss)")
    if personal is not None and upload is None:
        raise C.error("fj.local_training: a personal model needs an upload(ctx, w, w_tilde, v) to receive (and keep) "
                      "it in the client's state")
    if full_gradient and (given or cols):
        raise C.error(f"fj.local_training(full_gradient=True) trains nothing locally, so {', '.join([*given, *(['client_collections'] if cols else [])])} "
                      f"would not be used; drop them or full_gradient")
    if evaluate is not None and not callable(evaluate):
        raise C.error(f"fj.local_training: evaluate is a {type(evaluate).__name__}; expected a function of ctx")
    return program_of(LocalTraining(penalty, local_loss, local_optimizer, local_start, personal, cols, upload,
                                    bool(full_gradient)), evaluate)


def program_of(training: LocalTraining, evaluate=None) -> ClientProgram:
    """The :class:`ClientProgram` of ``training``: the round runs it through :func:`bind` (once per client); its own
    ``init``/``step``/``final`` say so in one line when called by hand."""
    return ClientProgram(not_by_hand, None if training.full_gradient else not_by_hand, not_by_hand,
                         evaluate=evaluate, training=training)


def not_by_hand(*_):
    """A :func:`local_training` program's ``init``/``step``/``final`` called by hand: one line."""
    raise C.error("fj.local_training's program is run by the round, which builds it once per client: give it as "
                  "fj.Algorithm(name, server=..., client=fj.local_training(...)); to change a step, write a "
                  "fj.ClientProgram(init, step, final) of your own")


class _Old:
    """An old field as a piece: called on ``ctx`` as the field always was (its signature read), with its messages."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, ctx):
        return self.fn(ctx)


def training_of(alg: Algorithm) -> LocalTraining:
    """The local-training pieces of ``alg``'s client: its :func:`local_training` program's, with the old fields it
    was also given (``dataclasses.replace(fj.algorithms.fedavg(), local_optimizer=...)``, 0.1 code) in their place;
    or, without a program, those of its old fields alone."""
    base = alg.client.training if alg.client is not None else LocalTraining(legacy=True)
    old = {}

    def piece(name, fn):
        return _Old(lambda ctx: client_fn(alg, name, fn, ctx.theta, ctx.state, ctx.hp, ctx.broadcast, ctx.facts))

    for k in ("penalty", "local_loss", "local_start"):
        if getattr(alg, k) is not None:
            old[k] = piece(k, getattr(alg, k))
    if alg.local_optimizer is not None:
        old["local_optimizer"] = _Old(lambda ctx: C.call(
            alg, "local_optimizer", alg.local_optimizer, (ctx.lr,),
            alg.client_kwargs(alg.local_optimizer, ctx.broadcast, ctx.facts, hp=ctx.hp), "lr_t[, hp=, facts=, broadcast=]"))
    if alg.personal is not None:
        p = alg.personal
        old["personal"] = Personal(piece("personal.start", p.start),
                                   None if p.penalty is None else piece("personal.penalty", p.penalty),
                                   None if p.local_loss is None else piece("personal.local_loss", p.local_loss))
    if alg.upload is not None:
        old["upload"] = _Old(alg.upload)
    if alg.client_collections:
        old["client_collections"] = alg.client_collections
    if not alg.local_train:
        old["full_gradient"] = True
    return base._replace(**old)


def default_program(spec, ctx) -> ClientProgram:
    """The client program of ``spec.algorithm``'s local training (a :func:`local_training` client, or its old
    fields) for one client (``ctx``)."""
    alg = spec.algorithm
    training = training_of(alg)
    if training.legacy and training.full_gradient is False:
        bcast, facts = ctx.broadcast, ctx.facts
        if alg.broadcast is not None and not any(
                f is not None and "broadcast" in alg.client_kwargs(f, bcast, facts)
                for f in (alg.upload, alg.penalty, alg.local_loss, alg.local_start, alg.local_optimizer)):
            raise C.error(f"algorithm {alg.name!r} has a broadcast, but none of its client functions (upload, penalty, "
                          f"local_loss, ...) has a parameter named broadcast to receive it; add one (docs/extending.md)")
        if training.personal is not None and not _takes(alg.upload, "personal"):
            raise C.error(f"algorithm {alg.name!r} has a personal model, but its upload has no parameter named "
                          f"personal to receive (and keep) it; add one (docs/extending.md)")
    return bind(spec, training, ctx)


def bind(spec, training: LocalTraining, ctx) -> ClientProgram:
    """The program of ``training`` for one client: its pieces called on ``ctx`` once, before the steps."""
    alg = spec.algorithm
    theta, state, hp, lr_t = ctx.theta, ctx.state, ctx.hp, ctx.lr
    theta_vars = _join(theta, ctx.stats)
    if training.full_gradient:  # FedSGD's client: ∇f_i(θ_t) and f_i(θ_t) over its whole split
        def final_gradient(carry, ctx):
            loss, grad = ctx.data._loss_and_grad(spec.model, theta_vars)
            return Sent(None, lambda _: (grad, state, None), ctx.stats, loss)
        return ClientProgram(lambda ctx: (), None, final_gradient)
    def piece(name, fn):
        if fn is None:
            return None
        return fn(ctx) if isinstance(fn, _Old) else C.call(alg, name, fn, (ctx,), {}, "ctx")

    penalty = piece("penalty", training.penalty)
    C.check_penalty(alg, penalty, theta)
    local_loss = piece("local_loss", training.local_loss)
    C.check_callable(alg, "local_loss", local_loss)
    local_loss = C.checked_loss(alg, "local_loss", local_loss)  # a real scalar, or one line naming it
    opt = piece("local_optimizer", training.local_optimizer)
    if opt is not None:
        opt = C.check_optimizer(alg, opt)
    w0 = theta
    if training.local_start is not None:  # local training from a point the algorithm derives (default θ)
        w0 = C.check_params(alg, "local_start", piece("local_start", training.local_start), theta)
    personal = personal_task(spec, training, piece, theta) if training.personal is not None else None
    parts = (w0,) if personal is None else (w0, personal[0])
    one = sgd_step(joint_objective(_w_objective(spec.model, penalty, None, local_loss), personal), lr_t, opt)
    up = training.upload

    def init(ctx):
        return sgd_init(parts, ctx.stats, opt)

    def step(carry, batch, ctx):
        return one(carry, batch.x, batch.y, batch.mask, batch.key, batch.step)

    def final(carry, ctx):
        ps, stats = carry[0], carry[1]
        w = ps[0]

        def upload(w_tilde):
            if up is None:  # the model upload: Δ_i = θ − w̃, the state unchanged
                return C.unpack_upload(alg, (T.sub(theta, w_tilde), state), theta, state)
            if isinstance(up, _Old):  # the old field, its signature read
                kw = alg.client_kwargs(up.fn, ctx.broadcast, ctx.facts)
                if personal is not None:
                    kw = {**kw, "personal": ps[1]}  # v_i: kept in the state, never uploaded
                out = C.call(alg, "upload", up.fn, (theta, w, w_tilde, state, hp, lr_t), kw, UPLOAD_CALL)
            elif personal is None:
                out = C.call(alg, "upload", up, (ctx, w, w_tilde), {}, CTX_UPLOAD_CALL)
            else:
                out = C.call(alg, "upload", up, (ctx, w, w_tilde, ps[1]), {}, CTX_UPLOAD_CALL + ", v")
            return C.unpack_upload(alg, out, theta, state)
        return Sent(w, upload, stats)

    return ClientProgram(init, step, final)


def client_fn(alg: Algorithm, name: str, fn, theta, state, hp: HParams, bcast, facts):
    """``fn(theta, state, hp[, broadcast=, facts=])`` (an old field: ``penalty``, ``local_loss``, ``local_start``,
    ``personal.start``, ...) with its signature checked; ``None`` when the algorithm has no ``fn``."""
    if fn is None:
        return None
    return C.call(alg, name, fn, (theta, state, hp), alg.client_kwargs(fn, bcast, facts),
                  "theta, state, hp[, broadcast=, facts=]")


def personal_task(spec, training: LocalTraining, piece, theta):
    """``(v0, loss_v)``: the client's second local model (``personal``), trained step by step beside ``w_i`` over
    the same minibatches, with the same learning rate and its own copy of the optimiser: from ``personal.start``
    on ``f_i(v) + personal.penalty(v)``, or on ``personal.local_loss`` (which may train any pytree, and sees ``w``
    at the same step as ``batch.w``). Its batch statistics are not kept (the global model's serve its
    evaluation). ``v_i`` stays on the client: ``upload`` only stores it."""
    alg = spec.algorithm
    p = training.personal
    v0 = piece("personal.start", p.start)
    if p.local_loss is None:
        v0 = C.check_params(alg, "personal.start", v0, theta)
    else:
        C.check_arrays(f"algorithm {alg.name!r}: personal.start", "the personal params", v0)
    pen = piece("personal.penalty", p.penalty)
    C.check_penalty(alg, pen, v0 if p.local_loss is not None else theta, "personal.penalty")
    ploss = piece("personal.local_loss", p.local_loss)
    C.check_callable(alg, "personal.local_loss", ploss)
    ploss = C.checked_loss(alg, "personal.local_loss", ploss)
    model = spec.model

    def loss_v(v, w, stats, xb, yb, mask, rng, step):
        if ploss is None:
            loss, _ = masked_loss(model, v, stats, xb, yb, mask, train=True, rng=rng)
        else:
            loss = ploss(v, Batch(xb, yb, mask, step, apply=model_at(model, stats, xb), w=w))
        return loss if pen is None else loss + pen(v)
    return v0, loss_v
