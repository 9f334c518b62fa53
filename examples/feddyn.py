"""FedDyn (Acar et al., ICLR 2021, Algorithm 1) written against the public API, as a user would.

Each client keeps its own state, the gradient of its last local objective ``g_i`` (a pytree like the
params), and trains on

    f_i(w) − ⟨g_i, w − θ⟩ + α/2 ‖w − θ‖²,      then      g_i ← g_i − α (w_i − θ).

The server keeps ``h`` and, with ``N`` clients of which the sampled set ``S`` uploaded ``Δ_i = θ − w_i``,

    h ← h − (α/N) Σ_{i∈S} (w_i − θ) = h + (α/N) Σ_{i∈S} Δ_i,      θ ← mean_{i∈S} w_i − h/α.

α is the config's ``mu`` (traced, so a sweep can vary it). Run it:

    fedalf run --algorithm examples.feddyn:feddyn --model mlp --mu 0.01 --rounds 20      # from the repo root

or in Python: ``fj.register_algorithm("feddyn", feddyn)``, then ``fj.run(algorithm="feddyn", ...)``.
"""

import jax
import jax.numpy as jnp

import fedalf_jax as fj


def _sub(a, b):
    return jax.tree_util.tree_map(lambda x, y: x - y, a, b)


def _vdot(a, b):
    return sum(jnp.vdot(x, y) for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


def penalty(ctx):
    """The client's extra objective: −⟨g_i, w − θ⟩ + α/2 ‖w − θ‖² (α = hp.mu)."""
    theta, g, hp = ctx.theta, ctx.state, ctx.hp
    return lambda w: -_vdot(g, _sub(w, theta)) + 0.5 * hp.mu * _vdot(_sub(w, theta), _sub(w, theta))


def upload(ctx, w, w_tilde):
    """Δ_i = θ − w̃_i, and the client's new state g_i − α (w_i − θ)."""
    theta, g, hp = ctx.theta, ctx.state, ctx.hp
    new_g = jax.tree_util.tree_map(lambda gi, wi, t: gi - hp.mu * (wi - t), g, w, theta)
    return _sub(theta, w_tilde), new_g


def server(s: fj.ServerIn):
    """h ← h + (α/N) Σ Δ_i;  θ ← θ − mean Δ_i − h/α."""
    m = jax.tree_util.tree_leaves(s.deltas)[0].shape[0]  # clients this round
    alpha = s.hp.mu
    total = jax.tree_util.tree_map(lambda d: jnp.sum(d, axis=0), s.deltas)
    h = jax.tree_util.tree_map(lambda h, t: h + alpha / s.num_clients * t, s.sstate, total)
    theta = jax.tree_util.tree_map(lambda th, t, hh: th - t / m - hh / alpha, s.theta, total, h)
    return theta, h, {}


def feddyn() -> fj.Algorithm:
    return fj.Algorithm(
        "feddyn", server=server, client=fj.local_training(penalty=penalty, upload=upload),
        init_client_state=lambda params: jax.tree_util.tree_map(jnp.zeros_like, params),   # g_i = 0
        init_server_state=lambda params, num_clients: jax.tree_util.tree_map(jnp.zeros_like, params),  # h = 0
        private_upload=True)   # Δ_i is a function of w̃_i and θ only
