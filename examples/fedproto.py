"""FedProto (Tan, Long, Liu, Zhou, Lu, Jiang, Zhang, AAAI 2022, "FedProto: Federated Prototype Learning
across Heterogeneous Clients", Algorithm 1) as a client program. Clients share class prototypes, not
models: each keeps its own model ``w_i`` (its state, from θ_0; evaluated as ``personal_*``; the global θ
never moves) and trains it on

    ℓ = CE(z, y) + λ · mean over the batch's examples and feature dimensions of (h − C̄_y)²,

``h`` the model's features (what it returns beside its logits: the input of its last Dense layer), ``C̄_y``
the global prototype of the example's class from the broadcast (a class without one adds nothing; the
authors' MSE over the batch), λ its own hyper-parameter ``lam`` (default 1). After training, a **data pass**
over the client's own examples at its trained ``w_i`` computes its prototypes ``C_i^(j)`` = the mean of ``h``
over its examples of class ``j``, exactly, whatever the optimiser; it uploads them with its label counts as
``aux`` (``public_aux=False``: they are statistics of its data). The server averages them per class,
weighted by the counts (``C̄^(j) = Σ_i n_{i,j} C_i^(j) / Σ_i n_{i,j}``, the mean feature over the round's
examples of class ``j``; the authors' code averages the clients' prototypes unweighted), and keeps a class
no client of the round holds as it was. The model must return ``(logits, features)`` with the features
feeding its last Dense layer (its kernel ``[d, num_classes]`` gives the prototypes' shape), as
``examples.moon:model`` does. Run it from the repository root:

    fedalf run --algorithm examples.fedproto:fedproto --model examples.moon:model --rounds 20 --hp lam=1
"""

import jax
import jax.numpy as jnp

import fedalf_jax as fj


def _last_kernel(params):
    """The kernel ``[d, num_classes]`` of the model's last Dense layer (the top-level module with the largest
    index: ``Dense_3`` after ``Dense_2``)."""
    def order(k):
        tail = k.rsplit("_", 1)[-1]
        return int(tail) if tail.isdigit() else -1
    name = max((k for k, v in params.items() if hasattr(v, "get") and jnp.ndim(v.get("kernel", 0)) == 2), key=order)
    return params[name]["kernel"]


def init_server_state(params, num_clients):
    d, c = jnp.shape(_last_kernel(params))
    return {"protos": jnp.zeros((c, d), jnp.float32), "have": jnp.zeros((c,), jnp.float32)}


def init(ctx):
    return ctx.state  # the client's own model w_i


def step(w, batch, ctx):
    protos, have = ctx.broadcast["protos"], ctx.broadcast["have"]

    def loss(p):
        logits, h = ctx.apply(p, batch.x, train=True, key=batch.key)
        m = batch.mask.astype(jnp.float32)
        sq = jnp.sum((h - protos[batch.y]) ** 2, axis=-1) * have[batch.y] * m
        return fj.cross_entropy(batch, logits) + ctx.hp.own["lam"] * jnp.sum(sq) / (jnp.maximum(jnp.sum(m), 1.0)
                                                                                   * h.shape[-1])
    return jax.tree_util.tree_map(lambda p, g: p - ctx.lr * g, w, jax.grad(loss)(w))


def final(w, ctx):
    """Prototypes from a pass over the client's examples at the trained w_i; Δ_i = 0 (θ is not trained)."""
    c, d = ctx.broadcast["protos"].shape

    def add(sums, batch):
        _, h = ctx.apply(w, batch.x)
        onehot = jax.nn.one_hot(batch.y, c) * batch.mask[:, None]
        return sums + onehot.T @ h
    sums = ctx.data.fold(add, jnp.zeros((c, d), jnp.float32))
    counts = ctx.facts.label_counts
    protos = sums / jnp.maximum(counts, 1).astype(jnp.float32)[:, None]
    zero = jax.tree_util.tree_map(jnp.zeros_like, ctx.theta)
    return zero, w, {"protos": protos, "counts": counts}


def server(s: fj.ServerIn):
    """C̄^(j) = Σ_i n_{i,j} C_i^(j) / Σ_i n_{i,j} for the classes the round's clients hold; θ stays."""
    n = s.aux["counts"].astype(jnp.float32)                      # [m, C]
    total = jnp.sum(n, axis=0)                                     # [C]
    sums = jnp.einsum("mc,mcd->cd", n, s.aux["protos"], precision=jax.lax.Precision.HIGHEST)
    fresh = total > 0
    protos = jnp.where(fresh[:, None], sums / jnp.maximum(total, 1.0)[:, None], s.sstate["protos"])
    have = jnp.maximum(s.sstate["have"], fresh.astype(jnp.float32))
    return s.theta, {"protos": protos, "have": have}, {}


def fedproto() -> fj.Algorithm:
    return fj.Algorithm(
        "fedproto", server=server, client=fj.ClientProgram(init, step, final),
        init_client_state=lambda params: params,                  # w_i = θ_0 until sampled
        init_server_state=init_server_state, broadcast=lambda st: st,
        personal_model=lambda w: w,                               # evaluate each client's own model
        public_aux=False,                                         # prototypes: statistics of the client's data
        hparams={"lam": 1.0},
        needs_features=True)                                      # the model must return (logits, features)
