"""FedNova (Wang et al., NeurIPS 2020) with plain local SGD, written against the public API.

Clients take different numbers of local steps ``τ_i = epochs · ⌈n_i / B⌉`` (``facts.steps``); FedNova
normalises each update by its steps before averaging, and rescales by the effective step count:

    d_i = Δ_i / τ_i,      τ_eff = Σ p_i τ_i,      θ ← θ − η_g τ_eff Σ p_i d_i,

with ``Δ_i = θ − w_i`` and ``p_i = n_i / Σ n_j``. ``τ_i`` reaches the server as the auxiliary upload. It
reveals n_i (as p_i already does), not a function of w̃: ``public_aux=False``, and the privacy record
says so. Run it from the repository root:

    fedalf run --algorithm examples.fednova:fednova --model mlp --rounds 20
"""

import jax
import jax.numpy as jnp

import fedalf_jax as fj


def upload(ctx, w, w_tilde):
    """Δ_i = θ − w̃_i, and τ_i as the auxiliary upload."""
    return jax.tree_util.tree_map(lambda t, u: t - u, ctx.theta, w_tilde), ctx.state, {"tau": ctx.facts.steps}


def server(s: fj.ServerIn):
    tau = jnp.maximum(s.aux["tau"], 1).astype(jnp.float32)     # [m]
    p = s.weights                                               # [m]
    tau_eff = jnp.sum(p * tau)
    coef = p / tau                                              # Σ p_i d_i = Σ (p_i/τ_i) Δ_i
    step = jax.tree_util.tree_map(lambda d: jnp.tensordot(coef, d, axes=1), s.deltas)
    theta = jax.tree_util.tree_map(lambda t, d: t - s.server_lr_t * tau_eff * d, s.theta, step)
    return theta, s.sstate, {"tau_eff": tau_eff}


def fednova() -> fj.Algorithm:
    return fj.Algorithm("fednova", server=server, client=fj.local_training(upload=upload),
                        private_upload=True, public_aux=False, metrics=("tau_eff",))
