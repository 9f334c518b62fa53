"""MOON (Li, He, Song, "Model-Contrastive Federated Learning", CVPR 2021) written against the public API,
with its own model: ``model``, an MLP whose last hidden layer feeds a projection head; it returns
``(logits, z)``, z the projected representation.

FedAvg's server; each sampled client trains from θ_t on each minibatch's

    ℓ = CE + μ_con · mean_x −log( e^{sim(z, z_glob)/τ} / (e^{sim(z, z_glob)/τ} + e^{sim(z, z_prev)/τ}) ),

``sim`` the cosine similarity, ``z`` the representation of the model being trained (``batch.features``),
``z_glob`` that of the global model θ_t and ``z_prev`` that of the client's previous local model (its client
state, initialised to θ_0), both run on the same minibatch by ``batch.apply``. It uploads ``Δ_i = θ_t − w̃_i``
and keeps its trained ``w_i`` as its next previous model. ``mu_con`` (μ, default 1) and ``tau`` (τ, default
0.5) are its own hyper-parameters (``mu`` is FedProx's). Run it from the repository root:

    fedalf run --algorithm examples.moon:moon --model examples.moon:model --rounds 20

Differs from the authors' code (QinbinLi/MOON) in its model (theirs: a CNN base with a two-layer projection
head); z_glob and z_prev are computed in evaluation mode (no dropout, running BatchNorm statistics).
"""

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

import fedalf_jax as fj


class ProjectedMLP(nn.Module):
    """flatten - 200 - ReLU - 200 - ReLU - projection to ``proj`` (z) - classes; returns ``(logits, z)``."""

    num_classes: int
    hidden: Sequence[int] = (200, 200)
    proj: int = 64

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = x.reshape(x.shape[0], -1)
        for h in self.hidden:
            x = nn.relu(nn.Dense(h)(x))
        z = nn.Dense(self.proj)(x)
        return nn.Dense(self.num_classes)(z), z


model = ProjectedMLP  # --model examples.moon:model


def _cos(a, b):
    """Row-wise cosine similarity (torch's CosineSimilarity, eps 1e-8)."""
    norm = lambda u: jnp.maximum(jnp.linalg.norm(u, axis=-1), 1e-8)  # noqa: E731
    return jnp.sum(a * b, axis=-1) / (norm(a) * norm(b))


def local_loss(ctx):
    """CE + μ_con · the model-contrastive loss against θ_t's (positive) and the previous model's (negative) z."""
    theta, prev, hp = ctx.theta, ctx.state, ctx.hp

    def loss(params, batch: fj.Batch):
        z, tau = batch.features, hp.own["tau"]
        pos, neg = _cos(z, batch.apply(theta)[1]) / tau, _cos(z, batch.apply(prev)[1]) / tau
        con = jnp.logaddexp(pos, neg) - pos
        mask = batch.mask.astype(con.dtype)
        return fj.cross_entropy(batch) + hp.own["mu_con"] * jnp.sum(con * mask) / jnp.maximum(jnp.sum(mask), 1.0)
    return loss


def upload(ctx, w, w_tilde):
    """FedAvg's Δ_i = θ − w̃_i; the trained w_i is the client's next previous model."""
    return jax.tree_util.tree_map(lambda t, u: t - u, ctx.theta, w_tilde), w


def moon() -> fj.Algorithm:
    return fj.Algorithm(
        "moon", server=fj.algorithms.weighted_mean_server,                       # FedAvg's server
        client=fj.local_training(local_loss=local_loss, upload=upload),
        init_client_state=lambda params: params,                                 # previous model: θ_0
        private_upload=True,                                                     # Δ_i: a function of w̃ and θ
        hparams={"mu_con": 1.0, "tau": 0.5},
        needs_features=True)  # the model must return (logits, features)
