"""FedFV, federated fair averaging (Wang, Fan, Qu, Zhao and Chen, IJCAI 2021) written against the public
API: the clients' conflicting updates are projected onto each other's normal planes, the highest-loss
clients' directions prevailing.

With ``Δ_i = θ − w_i`` the sampled clients' updates and ``l_i = f_i(θ_t)`` their losses, order the
clients by ascending loss; the ``⌈α m⌉``-ish fraction with the highest losses (FLGo's rule: the ranks
``≥ ⌈(m − 1)(1 − α)⌉``, none at ``α = 0``) keep their update; every other ``g_i`` (starting as ``Δ_i``) is
projected, against each other client ``j`` in ascending loss order, off the original ``Δ_j`` it
conflicts with:

    g_i ← g_i − min(⟨g_i, Δ_j⟩, 0) / ‖Δ_j‖² · Δ_j,
    g = mean_i g_i rescaled to ‖mean_i Δ_i‖,      θ ← θ − η_g g,

``α`` being its own hyper-parameter ``alpha`` (``--hp alpha=0.1``). This is FedFV without its τ rounds of
history (the paper's "external conflicts" with the updates of clients not sampled recently): ``τ = 0``.
Run it from the repository root:

    fedalf run --algorithm examples.fedfv:fedfv --model mlp --rounds 20 --hp alpha=0.1

The order follows FLGo's fedfv (ties broken by the clients' order in the round); FLGo orders by the losses
the clients report from local training, this by l_i = f_i(θ_t) before it.
"""

import jax
import jax.numpy as jnp

import fedalf_jax as fj


def project_conflicts(G, losses, alpha):
    """FedFV's projected updates: ``G [m, D]`` the flat Δ_i, ``losses [m]``; returns the new ``[m, D]``."""
    m = G.shape[0]
    order = jnp.argsort(losses)                                  # ascending loss, stable
    rank = jnp.zeros((m,), jnp.int32).at[order].set(jnp.arange(m, dtype=jnp.int32))
    keep = (alpha > 0) & (rank >= jnp.ceil((m - 1) * (1.0 - alpha)))
    sq = jnp.sum(G * G, axis=1)

    def one(i, g):
        def step(k, g):
            j = order[k]
            dot = jnp.vdot(g, G[j])
            hit = (j != i) & (dot < 0) & (sq[j] > 0)
            return g - jnp.where(hit, dot / jnp.where(sq[j] > 0, sq[j], 1.0), 0.0) * G[j]
        return jnp.where(keep[i], g, jax.lax.fori_loop(0, m, step, g))

    return jax.vmap(one)(jnp.arange(m), G)


def server(s: fj.ServerIn):
    leaves, tree = jax.tree_util.tree_flatten(s.deltas)
    G = jnp.concatenate([x.reshape(x.shape[0], -1) for x in leaves], axis=1)
    g = jnp.mean(project_conflicts(G, s.losses, s.hp.own["alpha"]), axis=0)
    gn, target = jnp.linalg.norm(g), jnp.linalg.norm(jnp.mean(G, axis=0))
    g = g * jnp.where(gn > 0, target / jnp.where(gn > 0, gn, 1.0), 0.0)
    sizes = [x[0].size for x in leaves]
    parts = jnp.split(g, [sum(sizes[:k + 1]) for k in range(len(sizes) - 1)])
    step = jax.tree_util.tree_unflatten(tree, [p.reshape(x.shape[1:]) for p, x in zip(parts, leaves)])
    return jax.tree_util.tree_map(lambda t, d: t - s.server_lr_t * d, s.theta, step), s.sstate, {}


def fedfv() -> fj.Algorithm:
    return fj.Algorithm("fedfv", server=server, client=fj.local_training(), needs_loss=True, private_upload=True,
                        hparams={"alpha": 0.1})
