"""FedLC (Zhang, Li, Li, Xu, Huang, Lv, ICML 2022, "Federated Learning with Label Distribution Skew via
Logits Calibration") as a client program: each local step minimises the cross-entropy of the calibrated
logits, pairwise-margin calibration by the client's own label counts ``n_{i,y}`` (``ctx.facts.label_counts``):

    ℓ(x, y) = −log softmax(z − τ n_{i,·}^{−1/4})_y,

``z`` the model's logits, ``τ`` the algorithm's own hyper-parameter ``tau`` (default 1, ``--hp tau=0.5``). A
class the client does not hold (``n_{i,c} = 0``) has an infinite margin: its calibrated logit is −∞ and it
leaves the softmax, as in the common implementation (PFLlib's ``clientlc``: the sum over every class; the
paper's Eq. 9 writes the sum over ``y' ≠ y``). Plain SGD steps ``w ← w − η_l ∇ℓ``; the client uploads
``Δ_i = θ − w_i`` to FedAvg's server; the global model is evaluated without calibration. Run it from the
repository root:

    fedalf run --algorithm examples.fedlc:fedlc --model mlp --rounds 20 --hp tau=1
"""

import jax
import jax.numpy as jnp

import fedalf_jax as fj


def calibrated_ce(logits, batch, counts, tau):
    """The mean over the batch's real examples of −log softmax(z − τ n^{−1/4})_y."""
    margin = jnp.where(counts > 0, tau * jnp.maximum(counts, 1).astype(jnp.float32) ** -0.25, jnp.inf)
    logp = jax.nn.log_softmax(logits - margin, axis=-1)
    nll = -jnp.take_along_axis(logp, batch.y[:, None], axis=-1)[:, 0]
    nll = jnp.where(batch.mask, nll, 0.0)  # a padded row's label may be one this client does not hold (+inf)
    return jnp.sum(nll) / jnp.maximum(jnp.sum(batch.mask), 1)


def init(ctx):
    return ctx.theta  # the carry: the params w, from θ_t


def step(w, batch, ctx):
    def loss(p):
        logits, _ = ctx.apply(p, batch.x, train=True, key=batch.key)
        return calibrated_ce(logits, batch, ctx.facts.label_counts, ctx.hp.own["tau"])
    return jax.tree_util.tree_map(lambda p, g: p - ctx.lr * g, w, jax.grad(loss)(w))


def final(w, ctx):
    return jax.tree_util.tree_map(lambda t, p: t - p, ctx.theta, w), ctx.state  # Δ_i = θ − w_i


def fedlc() -> fj.Algorithm:
    return fj.Algorithm("fedlc", server=fj.algorithms.weighted_mean_server,  # FedAvg's server
                        client=fj.ClientProgram(init, step, final), hparams={"tau": 1.0})
