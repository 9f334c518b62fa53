"""APFL (Deng, Kamani, Mahdavi, "Adaptive Personalized Federated Learning", arXiv 2003.13461, 2020,
Algorithm 1 with the adaptive α of its Section 3.2) written against the public API.

The global model θ is trained as FedAvg's: each sampled client runs its local SGD steps from θ_t on
``f_i(w)`` and uploads ``Δ_i = θ_t − w̃_i``. Each client also keeps ``v_i`` (initialised to θ_0) and its
mixing weight ``α_i`` (initialised to ``alpha0``) and, at every local step, on the same minibatch, steps
both on the loss at the mixture

    f_i(α_i v_i + (1 − α_i) w),     w the global copy at that step (its gradient stopped),

``v_i`` by its gradient ``α_i ∇f_i(mixture)``, ``α_i`` by ``⟨v_i − w, ∇f_i(mixture)⟩`` (the same η_l).
``α_i`` is clipped to [0, 1] when the round ends. ``{v_i, α_i}`` never leaves the client. The client's
personal model, evaluated beside θ, is ``α_i v_i + (1 − α_i) θ_t``; a client never sampled is evaluated with
θ_t. Run it from the repository root:

    fedalf run --algorithm examples.apfl:apfl --model mlp --rounds 20

Differs from the authors' code (MLOPTPSU/FedTorch), whose α step is ⟨v − w, α g_v + (1 − α) g_w⟩ + 0.02 α
(the two models' own gradients), clipped after every step; ours is the mixture loss's exact ∂/∂α, clipped
once per round.
"""

import jax
import jax.numpy as jnp

import fedalf_jax as fj


def _map(f, *trees):
    return jax.tree_util.tree_map(f, *trees)


def mix(alpha, v, w):
    """α v + (1 − α) w."""
    return _map(lambda a, b: alpha * a + (1 - alpha) * b, v, w)


def personal_loss(ctx):
    """The cross-entropy at the mixture α v + (1 − α) w, differentiated in v and α."""
    return lambda p, batch: fj.cross_entropy(batch, batch.apply(mix(p["alpha"], p["v"], batch.w))[0])


def upload(ctx, w, w_tilde, personal):
    """FedAvg's Δ_i = θ − w̃_i; the trained {v_i, α_i} (α clipped to [0, 1]) becomes the client's state."""
    return _map(lambda t, u: t - u, ctx.theta, w_tilde), {"v": personal["v"],
                                                      "alpha": jnp.clip(personal["alpha"], 0.0, 1.0)}


def apfl(alpha0: float = 0.5) -> fj.Algorithm:
    return fj.Algorithm(
        "apfl", server=fj.algorithms.weighted_mean_server,                       # FedAvg's server
        client=fj.local_training(upload=upload,
                                 personal=fj.Personal(start=lambda ctx: ctx.state, local_loss=personal_loss)),
        init_client_state=lambda params: {"v": params, "alpha": jnp.asarray(alpha0, jnp.float32)},
        personal_model=lambda state, theta: mix(state["alpha"], state["v"], theta),
        private_upload=True)                                                     # Δ_i: a function of w̃ and θ
