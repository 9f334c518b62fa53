"""FedBN (Li, Jiang, Zhang, Kamp, Dou, "FedBN: Federated Learning on Non-IID Features via Local Batch
Normalization", ICLR 2021) written against the public API.

FedAvg, except that every BatchNorm layer stays local: its running statistics (``batch_stats``, kept per
client by ``client_collections=("batch_stats",)``) and its scale and bias (the ``BatchNorm_*`` params, kept
in the client state, their Δ_i 0). A sampled client trains from the global model with its own BatchNorm
params and statistics and keeps what it trained; the server averages the other params as FedAvg. Each
client's personal model, evaluated beside θ, is θ_t with its own BatchNorm params and statistics; a client
never sampled is evaluated with θ_t and the global statistics. It needs a model with BatchNorm: ``cnn_bn``.
Run it from the repository root:

    fedalf run --algorithm examples.fedbn:fedbn --model cnn_bn --rounds 20

Differs from the authors' code (med-air/FedBN) in that the round also averages the sampled clients'
statistics into the global model's (used by the global model's evaluation alone, never for training).
"""

import jax
import jax.numpy as jnp

import fedalf_jax as fj


def _local(name):
    return name.startswith("BatchNorm")


def with_own(theta, own):
    """θ with the client's own BatchNorm params."""
    return {**theta, **own}


def upload(ctx, w, w_tilde):
    """Δ_i = θ − w̃_i outside the BatchNorm layers, 0 in them; their trained params become the state."""
    theta, own = ctx.theta, ctx.state
    delta = {k: jax.tree_util.tree_map(lambda t, u: jnp.zeros_like(t) if _local(k) else t - u, theta[k],
                                       w_tilde[k]) for k in theta}
    return delta, {k: w[k] for k in own}


def fedbn() -> fj.Algorithm:
    return fj.Algorithm(
        "fedbn", server=fj.algorithms.weighted_mean_server,                      # FedAvg's server
        client=fj.local_training(local_start=lambda ctx: with_own(ctx.theta, ctx.state), upload=upload,
                                 client_collections=("batch_stats",)),           # each client's own statistics
        init_client_state=lambda params: {k: v for k, v in params.items() if _local(k)},
        personal_model=lambda own, theta: with_own(theta, own),
        private_upload=True)                                                     # Δ_i: a function of w̃ and θ
