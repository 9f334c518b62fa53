"""FedMGDA+ (Hu, Wang, Gong, Shi and Yu, "Federated Learning Meets Multi-objective Optimization", IEEE TNSE
2022) written against the public API.

The clients run FedAvg's local SGD. The server normalises their updates, ``g_i = Δ_i / ‖Δ_i‖``, and steps
along the minimum-norm point of their convex hull, its weights kept within ``ε`` of the clients' weights
``λ₀ = p_i`` (the ε-box that keeps the step near FedAvg's):

    λ* = argmin ‖Σ_i λ_i g_i‖²  over  λ ≥ 0, Σλ = 1, ‖λ − λ₀‖∞ ≤ ε,      θ ← θ − η_g Σ_i λ*_i g_i,

``ε`` being its own hyper-parameter ``eps`` (``--hp eps=0.1``; ``ε ≥ 1`` is the plain MGDA direction; ``ε < 0``
is refused, or, traced in the compiled server, stops the run as diverged). The
QP is ``fj.solve_simplex_qp`` with ``lower=λ₀ − ε, upper=λ₀ + ε``, solved inside the compiled server. Run
it from the repository root:

    fedalf run --algorithm examples.fedmgda:fedmgda --model mlp --rounds 20 --server-lr 1.0 --hp eps=0.1

Like FLGo's fedmgda+ (the same QP solved by cvxopt in float64 outside the training step), the step has
length ≤ η_g: with normalised updates η_g is the step's length scale, not FedAvg's η_g = 1.
"""

import jax
import jax.numpy as jnp

import fedalf_jax as fj


def check_eps(eps):
    """ε ≥ 0: a concrete ε < 0 is one line; a traced one (``--hp eps=-0.05``: the server is compiled) becomes NaN,
    so λ is NaN and the run's divergence check stops it (ε < 0 is an empty box: ``λ₀ + ε < λ₀ − ε``)."""
    if not isinstance(eps, jax.core.Tracer) and not float(eps) >= 0:
        raise fj.ConfigError(f"fedmgda: hp eps = {float(eps):g} must be ≥ 0 (the box ‖λ − λ₀‖∞ ≤ ε); "
                             f"use e.g. --hp eps=0.1 (eps ≥ 1: plain MGDA)")
    return jnp.where(eps >= 0, eps, jnp.nan)


def server(s: fj.ServerIn):
    flat = jnp.concatenate([x.reshape(x.shape[0], -1) for x in jax.tree_util.tree_leaves(s.deltas)], axis=1)
    norms = jnp.sqrt(jnp.sum(flat * flat, axis=1))
    inv = 1.0 / jnp.where(norms > 0, norms, 1.0)                 # g_i = Δ_i / ‖Δ_i‖ (a zero Δ_i stays 0)
    gram = jnp.matmul(flat, flat.T, precision=jax.lax.Precision.HIGHEST) * inv[:, None] * inv[None, :]
    eps = check_eps(s.hp.own["eps"])
    lam = fj.solve_simplex_qp(gram, lower=s.weights - eps, upper=s.weights + eps)
    coef = lam * inv                                             # Σ λ_i g_i = Σ (λ_i / ‖Δ_i‖) Δ_i
    theta = jax.tree_util.tree_map(lambda t, d: t - s.server_lr_t * jnp.tensordot(coef, d, axes=1), s.theta,
                                   s.deltas)
    return theta, s.sstate, {"lambda_shift": jnp.max(jnp.abs(lam - s.weights))}


def fedmgda() -> fj.Algorithm:
    return fj.Algorithm("fedmgda", server=server, client=fj.local_training(), private_upload=True, hparams={"eps": 0.1},
                        metrics=("lambda_shift",))
