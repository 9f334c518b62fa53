"""SCAFFOLD (Karimireddy et al., ICML 2020, Algorithm 1, option II) written against the public API.

The server keeps the control variate ``c`` and broadcasts it; each client keeps its own ``c_i``. Local
SGD follows ``g_i(w) + c − c_i``: the penalty ``⟨c − c_i, w⟩`` adds exactly that correction to the
gradient. With ``K`` the client's local step count (``facts.steps``) and ``η_l`` this round's lr,

    c_i⁺ = c_i − c + (θ − w_i) / (K η_l),      the client uploads Δ_i = θ − w_i and Δc_i = c_i⁺ − c_i,

and the server, with ``N`` clients of which ``m`` uploaded,

    θ ← θ − η_g mean_i Δ_i,      c ← c + (m/N) mean_i Δc_i.

No extra model parameters: ``c`` goes down through ``broadcast``, ``Δc_i`` up as the auxiliary upload.
Both are computed from ``w_tilde`` (the model a privacy mechanism lets out), so the privacy guarantee
covers them. Run it from the repository root:

    fedalf run --algorithm examples.scaffold:scaffold --model mlp --rounds 20
"""

import jax
import jax.numpy as jnp

import fedalf_jax as fj


def _map(f, *trees):
    return jax.tree_util.tree_map(f, *trees)


def _vdot(a, b):
    return sum(jnp.vdot(x, y) for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


def penalty(ctx):
    """⟨c − c_i, w⟩: its gradient c − c_i is SCAFFOLD's correction of every local step."""
    return lambda w: _vdot(_map(lambda c, ci: c - ci, ctx.broadcast, ctx.state), w)


def upload(ctx, w, w_tilde):
    """Δ_i = θ − w̃_i; c_i⁺ = c_i − c + Δ_i/(K η_l); aux: Δc_i = c_i⁺ − c_i."""
    theta, c_i, lr_t, broadcast = ctx.theta, ctx.state, ctx.lr, ctx.broadcast
    k = jnp.maximum(ctx.facts.steps, 1).astype(jnp.float32)
    delta = _map(lambda t, u: t - u, theta, w_tilde)
    dc = _map(lambda c, d: -c + d / (k * lr_t), broadcast, delta)
    return delta, _map(lambda ci, x: ci + x, c_i, dc), dc


def server(s: fj.ServerIn):
    """θ ← θ − η_g mean Δ_i;  c ← c + (m/N) mean Δc_i = c + Σ Δc_i / N."""
    theta = _map(lambda t, d: t - s.server_lr_t * jnp.mean(d, axis=0), s.theta, s.deltas)
    c = _map(lambda c, dc: c + jnp.sum(dc, axis=0) / s.num_clients, s.sstate, s.aux)
    c_norm = jnp.sqrt(_vdot(c, c))
    return theta, c, {"c_norm": c_norm}


def scaffold() -> fj.Algorithm:
    zeros = lambda params: _map(jnp.zeros_like, params)  # noqa: E731
    return fj.Algorithm(
        "scaffold", server=server, client=fj.local_training(penalty=penalty, upload=upload),
        init_client_state=zeros,                                   # c_i = 0
        init_server_state=lambda params, num_clients: zeros(params),  # c = 0
        broadcast=lambda c: c,                                     # every client receives c
        private_upload=True, public_aux=True,                      # functions of w̃, θ, c and K only
        metrics=("c_norm",))                                       # ‖c‖ in metrics.csv
