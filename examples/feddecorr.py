"""FedDecorr (Shi, Liang, Zhang, Xu, Yan, Zhou, ICLR 2023, "Towards Understanding and Mitigating Dimensional
Collapse in Heterogeneous Federated Learning") written against the public API: each local step minimises

    CE + β · ‖K‖²_F / d²,   K = Ẑᵀ Ẑ / N,   Ẑ = (Z − mean(Z)) / sqrt(var(Z) + 1e-8),

``Z`` the minibatch's ``N × d`` representations (the features a model returning ``(logits, features)`` gives:
``batch.features``, in training mode), standardised per dimension over the batch's real examples (their mean
and biased variance; padding masked out), ``K`` their correlation matrix. The client uploads
``Δ_i = θ − w̃_i`` to FedAvg's server. β is its own hyper-parameter ``beta`` (default 0.1). It needs a model
that returns its representation, e.g. MOON's (``examples.moon:model``, z the layer feeding the classifier).
Run it from the repository root:

    fedalf run --algorithm examples.feddecorr:feddecorr --model examples.moon:model --rounds 20 --hp beta=0.1

This is the paper's Eq. (3) as written. The authors' code (bytedance/FedDecorr) computes instead the mean of
the squared off-diagonal entries of ``ẐᵀẐ / N`` over ``d(d−1)``, with torch's unbiased variance; on the
diagonal ``K_jj = v_j / (v_j + 1e-8) ≈ 1``, nearly constant, so the two differ mostly in scale.
"""

import jax.numpy as jnp

import fedalf_jax as fj


def decorr(z, mask):
    """‖K‖²_F / d² of the real rows of ``z`` (``[B, d]``; ``mask`` ``[B]``)."""
    m = mask.astype(z.dtype)[:, None]
    n = jnp.maximum(jnp.sum(m), 1.0)
    c = z - jnp.sum(z * m, axis=0) / n
    zh = c / jnp.sqrt(jnp.sum(c * c * m, axis=0) / n + 1e-8)
    k = (zh * m).T @ zh / n
    return jnp.sum(k * k) / z.shape[1] ** 2


def local_loss(ctx):
    hp = ctx.hp

    def loss(params, batch: fj.Batch):  # a model returning logits alone: refused in one line (no features)
        return fj.cross_entropy(batch) + hp.own["beta"] * decorr(batch.features, batch.mask)
    return loss


def feddecorr() -> fj.Algorithm:
    return fj.Algorithm(
        "feddecorr", server=fj.algorithms.weighted_mean_server, # FedAvg's
        client=fj.local_training(local_loss=local_loss), private_upload=True,   # Δ_i = θ − w̃_i: a function of w̃ and θ
        hparams={"beta": 0.1},
        needs_features=True)  # the model must return (logits, features)
