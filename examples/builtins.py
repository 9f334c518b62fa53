"""FedAvg, FedProx and FedADMM written only against the public API: the built-ins as a user would write them.

Each equals its built-in bit for bit (tests/test_reexpressed.py), so they are also the shortest complete
examples of the contract: an upload and a server (FedAvg); a penalty (FedProx); a per-client state, the ADMM
dual, with its own update (FedADMM). Sums are written as the built-ins write them (``jnp.vdot`` and
``jnp.tensordot`` at ``HIGHEST`` precision), which is what makes them equal to the last bit
(docs/extending.md, "Bit for bit"). Run one from the repository root:

    fedalf run --algorithm examples.builtins:fedadmm --model mlp --rounds 20 --rho 0.1
"""

import jax
import jax.numpy as jnp

import fedalf_jax as fj

HI = jax.lax.Precision.HIGHEST


def _map(f, *trees):
    return jax.tree_util.tree_map(f, *trees)


def _vdot(a, b):
    return sum(jnp.vdot(x, y, precision=HI) for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


def _step(theta, deltas, weights, lr):
    """θ − η_g Σ_i w_i Δ_i."""
    return _map(lambda t, d: t - jnp.tensordot(weights.astype(d.dtype), d, axes=1, precision=HI) * lr, theta, deltas)


def model_upload(ctx, w, w_tilde):
    """Δ_i = θ − w̃_i: the model the client lets out (so a privacy mechanism's guarantee covers it)."""
    return _map(lambda t, u: t - u, ctx.theta, w_tilde), ctx.state


def weighted_server(s: fj.ServerIn):
    """θ ← θ − η_g Σ p_i Δ_i, p_i = n_i / Σ n_j."""
    return _step(s.theta, s.deltas, s.weights, s.server_lr_t), s.sstate, {}


def fedavg() -> fj.Algorithm:
    return fj.Algorithm("fedavg_api", server=weighted_server, client=fj.local_training(upload=model_upload),
                        private_upload=True)


def prox_penalty(ctx):
    """μ/2 ‖w − θ‖²."""
    theta, hp = ctx.theta, ctx.hp
    return lambda w: 0.5 * hp.mu * _vdot(_map(jnp.subtract, w, theta), _map(jnp.subtract, w, theta))


def fedprox() -> fj.Algorithm:
    return fj.Algorithm("fedprox_api", server=weighted_server,
                        client=fj.local_training(penalty=prox_penalty, upload=model_upload), private_upload=True)


def admm_penalty(ctx):
    """⟨λ_i, w − θ⟩ + ρ/2 ‖w − θ‖²: the augmented Lagrangian's local terms."""
    theta, dual, hp = ctx.theta, ctx.state, ctx.hp

    def pen(w):
        d = _map(jnp.subtract, w, theta)
        return _vdot(dual, d) + 0.5 * hp.rho * _vdot(d, d)
    return pen


def admm_upload(ctx, w, w_tilde):
    """λ_i ← λ_i + ρ(w_i − θ) (from the trained w: the dual stays on the client); Δ_i = θ − w̃_i."""
    theta, dual, hp = ctx.theta, ctx.state, ctx.hp
    new_dual = _map(lambda l, x, t: l + (x - t) * hp.rho, dual, w, theta)
    return _map(lambda t, u: t - u, theta, w_tilde), new_dual


def mean_server(s: fj.ServerIn):
    """θ ← θ − η_g mean_i Δ_i (uniform over the round's clients, as FedADMM averages)."""
    m = s.weights.shape[0]
    return _step(s.theta, s.deltas, jnp.full((m,), 1.0 / m), s.server_lr_t), s.sstate, {}


def fedadmm() -> fj.Algorithm:
    return fj.Algorithm("fedadmm_api", server=mean_server,
                        client=fj.local_training(penalty=admm_penalty, upload=admm_upload),
                        init_client_state=lambda params: _map(jnp.zeros_like, params),  # λ_i = 0
                        private_upload=True)  # Δ_i = θ − w̃_i: the dual from w stays on the client
