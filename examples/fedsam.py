"""FedSAM (Qu, Li, Duan, Liu, Tang, Lu, ICML 2022, "Generalized Federated Learning via Sharpness Aware
Minimization"; Caldarola, Caputo, Ciccone, ECCV 2022, "Improving Generalization in Federated Learning by
Seeking Flat Minima") as a client program: each local step on its minibatch D is SAM's,

    g = ∇f(w; D),   ε = ρ g / (‖g‖ + 1e-12),   w ← w − η_l ∇f(w + ε; D),

``‖g‖`` the Euclidean norm over every parameter (the 1e-12 as in SAM's reference code), both gradients in
training mode on the same minibatch (the same dropout key). The client uploads ``Δ_i = θ − w_i`` to FedAvg's
server. ρ is its own hyper-parameter ``sam_rho`` (default 0.05; ``rho`` is a reserved name, q-FFL's).
Run it from the repository root:

    fedalf run --algorithm examples.fedsam:fedsam --model mlp --rounds 20 --hp sam_rho=0.05

The descent is plain SGD, as in both papers' FedSAM: a client program's steps are its own, so
``--local-optimizer`` is refused in one line (write momentum into ``step`` and the carry); under a privacy
mechanism it runs as client programs do (docs/extending.md, "The client program").
"""

import jax
import jax.numpy as jnp

import fedalf_jax as fj


def init(ctx):
    return ctx.theta  # the carry: the params w, from θ_t


def step(w, batch, ctx):
    def f(p):  # f(p; D): the minibatch's cross-entropy, in training mode
        return fj.cross_entropy(batch, ctx.apply(p, batch.x, train=True, key=batch.key)[0])
    g = jax.grad(f)(w)
    norm = jnp.sqrt(sum(jnp.sum(x * x) for x in jax.tree_util.tree_leaves(g)))
    eps = jax.tree_util.tree_map(lambda x: ctx.hp.own["sam_rho"] * x / (norm + 1e-12), g)   # the ascent ε
    g_sam = jax.grad(f)(jax.tree_util.tree_map(lambda p, e: p + e, w, eps))                 # ∇f(w + ε; D)
    return jax.tree_util.tree_map(lambda p, x: p - ctx.lr * x, w, g_sam)


def final(w, ctx):
    return jax.tree_util.tree_map(lambda t, p: t - p, ctx.theta, w), ctx.state  # Δ_i = θ − w_i


def fedsam() -> fj.Algorithm:
    return fj.Algorithm("fedsam", server=fj.algorithms.weighted_mean_server,  # FedAvg's server
                        client=fj.ClientProgram(init, step, final), hparams={"sam_rho": 0.05})
