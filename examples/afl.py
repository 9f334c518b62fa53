"""AFL, Agnostic Federated Learning (Mohri, Sivek and Suresh, ICML 2019) written against the public API.

The model minimises the worst mixture of the clients' losses, ``min_θ max_{λ ∈ Δ_N} Σ_k λ_k f_k(θ)``, by
simultaneous gradient descent on θ and projected gradient ascent on λ (the paper's stochastic-mirror
algorithm with Euclidean mirror maps). The server keeps ``λ`` over all ``N`` clients (starting uniform);
each round, with ``l_i = f_i(θ_t)`` the sampled clients' losses and ``Δ_i = θ_t − w_i`` their updates,

    θ ← θ − η_g Σ_i (λ_i / Σ_{j ∈ sel} λ_j) Δ_i                  (the old λ; Σ_k λ_k Δ_k when all N take part)
    λ ← Proj_{Δ_N}(λ + γ_λ ℓ),       ℓ_k = l_k for a sampled client, 0 otherwise,

and no θ step in a round whose sampled clients all have λ_i = 0 (the ratio is 0/0 there: with few clients
per round the projection sets every other client's λ to 0, so this happens from round 2 on; the paper has
every client in every round),

``γ_λ`` being its own hyper-parameter ``lam_lr`` (``--hp lam_lr=0.1``). The projection onto the simplex
is ``fj.solve_simplex_qp`` on the Gram of the points ``e_k − v`` (``‖λ − v‖² = ‖Σ_k λ_k (e_k − v)‖²`` on
the simplex), inside the compiled server. Run it from the repository root:

    fedalf run --algorithm examples.afl:afl --model mlp --rounds 20 --hp lam_lr=0.1

Unlike FLGo's and easyFL's AFL, which evaluate the running average of the iterates θ̄ (the paper's
output), this evaluates the last θ like every other algorithm here.
"""

import jax
import jax.numpy as jnp

import fedalf_jax as fj


def project_simplex(v):
    """Euclidean projection of ``v [N]`` onto the probability simplex, by the package's QP solver."""
    n = v.shape[0]
    pts = jnp.eye(n, dtype=v.dtype) - v[None, :]     # the points e_k − v
    return fj.solve_simplex_qp(pts @ pts.T)


def server(s: fj.ServerIn):
    lam = s.sstate
    tot = jnp.sum(lam[s.sel])
    w = jnp.where(tot > 0, lam[s.sel] / jnp.where(tot > 0, tot, 1.0), 0.0)  # no step when every λ_i = 0
    theta = jax.tree_util.tree_map(lambda t, d: t - s.server_lr_t * jnp.tensordot(w, d, axes=1), s.theta, s.deltas)
    grad = jnp.zeros_like(lam).at[s.sel].set(s.losses.astype(lam.dtype))
    lam = project_simplex(lam + s.hp.own["lam_lr"] * grad)
    return theta, lam, {"lambda_max": jnp.max(lam)}


def afl() -> fj.Algorithm:
    return fj.Algorithm(
        "afl", server=server, client=fj.local_training(), needs_loss=True, private_upload=True,
        init_server_state=lambda params, num_clients: jnp.full((num_clients,), 1.0 / num_clients, jnp.float32),
        hparams={"lam_lr": 0.1}, metrics=("lambda_max",))
