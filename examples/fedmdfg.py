"""FedMDFG (Pan, Wang, Li, Zhang, Wang and Wang, "FedMDFG: Federated Learning with Multi-Gradient Descent
and Fair Guidance", AAAI 2023) written against the public API, after its authors' code (the ``FedMDFG``
algorithm and ``get_fedmdfg_d`` of FedLF's platform, zibinpan/FedLF and zibinpan/FedMDFG).

The clients run FedAvg's local SGD and send ``g_i = Δ_i = θ − w̃_i``; the server also gets their losses
``l_i = f_i(θ_t)``. Clients with ``‖g_i‖ ≤ 1e-6`` are dropped for the round (the authors' ``live_idx``); the
others' ``g_i`` are rescaled to the mean norm, ``g_i ← g_i / ‖g_i‖ · mean_j ‖g_j‖``. With ``e = 1/√m`` and
``l̂ = l / ‖l‖``, the loss vector's angle to the all-ones direction is ``φ = arccos(l̂·e)`` (degrees). Fair
guidance is on when ``φ > θ_fair`` (``--hp theta=11.25``, the authors' default, ``0 < θ_fair < 90``) or when
forced (below); it adds one more vector to the QP, the gradients combined along the direction that turns
the loss vector towards ``e``:

    h = (e·l̂) l̂ − e,   h ← h / ‖h‖,   g_fair = Σ_i h_i g_i,
    λ* = argmin ‖Σ_k λ_k v_k‖²  over the simplex,  v = (g_1 … g_m[, g_fair]),   d = Σ_k λ*_k v_k,

then ``d ← d / ‖d‖ · ‖mean_i g_i‖`` (the authors' rescaling; if that ``d`` is not a descent direction of
every ``v_k``, ``max_k −v_k·d > 1e-6``, it is halved while ``‖d‖ > 2‖d_QP‖``, else ``d_QP`` is taken back:
their loop, kept as it is) and ``θ ← θ − η_g d``.

Forced guidance (the authors' ``force_active``) uses the server state, per client ``i`` an expected loss
``E_i`` and a count ``c_i``: at a client's first participation ``E_i = l_i``; later, ``l_i ≤ E_i`` updates
``E_i ← (c_i E_i + l_i)/(c_i + 1)``, ``l_i > E_i`` counts as an increase; ``c_i`` grows by one each time.
Guidance is forced when ``0 < #increases < N`` (N, the federation's size, as in the authors' code).

Run it from the repository root:

    fedalf run --algorithm examples.fedmdfg:fedmdfg --model mlp --rounds 20 --server-lr 1.0 --hp theta=11.25

The line search. The authors' server steps ``θ − η d`` for ``η = 2^s η_l, 2^(s−1) η_l, …`` down to
``0.5^s η_l / scale`` (``s = 5``; ``η_l`` the decayed client learning rate; ``scale = ‖d‖/‖d_QP‖``; with a
changed client set it starts at ``η_l``), evaluating every client's loss at each trial point, and takes the
first ``η`` whose losses ``l'`` satisfy ``l − l' ≥ η·1e-4·(−g_i·d)`` for every client and turn the loss vector
towards ``e`` (``cos(l', e) > cos(l, e)``; the authors' code always applies this second test, fair guidance
on or not); failing both, the first tried ``η`` that lowers ``Σ l``, else the one with the smallest ``Σ l``.
One compiled round cannot evaluate the clients' losses after the server's step, so this example has NO line
search: the step is the fixed ``η_g`` (``--server-lr``, decayed by ``--server-lr-decay``), ``θ ← θ − η_g d``.
``d`` already has the length of the clients' mean normalised update, so ``η_g = 1`` is a FedAvg-sized step.

Every deviation from the authors' code:
* no line search (above): a fixed step ``η_g`` instead of the backtracked ``η`` in ``[0.5^s/scale, 2^s] η_l``;
  there is no ``s``;
* ``g_i`` is the local-SGD update ``Δ_i`` (from ``--local-epochs`` steps), and the step is scaled by ``η_g``, not
  the client learning rate;
* the gradients of last round's clients missing from this round (the authors' ``add_grads``, added to the QP
  rows; with full participation there are none) are not kept or added;
* the normalisation is ``g_i/‖g_i‖·μ`` exactly, without the authors' second pass ``‖g_i‖ g_i / (‖g_i‖ + 1e-6)``
  (a relative change of ``1e-6/‖g_i‖``);
* the QP is ``fj.solve_simplex_qp`` in float32 inside the compiled server (theirs: cvxopt in float64);
* a round whose clients all have ``‖g_i‖ ≤ 1e-6`` takes no step (as theirs) and its state is still updated.
``metrics.csv`` gets ``fair_active`` (1 when the guidance vector was in the QP) and ``loss_angle`` (φ, degrees).
"""

import jax
import jax.numpy as jnp

import fedalf_jax as fj


def init_server_state(params, num_clients):
    """Per client: the expected loss E_i and the participation count c_i."""
    return jnp.zeros((num_clients,), jnp.float32), jnp.zeros((num_clients,), jnp.float32)


def check_theta(theta):
    """0 < θ_fair < 90 (the authors refuse the rest); a traced one outside becomes NaN (the run stops as diverged)."""
    if not isinstance(theta, jax.core.Tracer) and not 0 < float(theta) < 90:
        raise fj.ConfigError(f"fedmdfg: hp theta = {float(theta):g} must be in (0, 90) degrees (the fair-guidance "
                             f"angle); use e.g. --hp theta=11.25")
    return jnp.where((theta > 0) & (theta < 90), theta, jnp.nan)


def _safe(x):
    return jnp.where(x > 0, x, 1.0)


def direction(G, losses, theta_fair, force):
    """FedMDFG's direction from the flat updates ``G [m, D]`` and losses ``[m]``: ``(d [D], active, angle)``."""
    norms = jnp.sqrt(jnp.sum(G * G, axis=1))
    live = norms > 1e-6
    nl = jnp.sum(live)
    mu = jnp.sum(jnp.where(live, norms, 0.0)) / _safe(nl)
    g = jnp.where(live[:, None], G * (mu / _safe(norms))[:, None], 0.0)
    l = jnp.where(live, losses, 0.0)
    lhat = l / _safe(jnp.linalg.norm(l))
    e = jnp.where(live, 1.0, 0.0) / jnp.sqrt(_safe(nl))
    cos = jnp.clip(lhat @ e, -1.0, 1.0)
    angle = jnp.degrees(jnp.arccos(cos))
    active = (angle > theta_fair) | force
    h = cos * lhat - e
    h = h / _safe(jnp.linalg.norm(h))
    vec = jnp.concatenate([g, (h @ g)[None]], axis=0)          # [m + 1, D]; the last row only when active
    mask = jnp.concatenate([live, active[None]])
    gram = jnp.matmul(vec, vec.T, precision=jax.lax.Precision.HIGHEST)
    d_qp = fj.solve_simplex_qp(gram, mask) @ vec
    dn = jnp.linalg.norm(d_qp)
    d = d_qp * (jnp.linalg.norm(jnp.sum(g, axis=0) / _safe(nl)) / _safe(dn))

    def bad(d):
        return jnp.max(jnp.where(mask, -(vec @ d), -jnp.inf)) > 1e-6

    def body(c):                                                # the authors' loop: halve, or take d_QP back
        d, _ = c
        big = jnp.linalg.norm(d) > 2 * dn
        return jnp.where(big, d / 2, d_qp), ~big

    d, _ = jax.lax.while_loop(lambda c: ~c[1] & bad(c[0]), body, (d, jnp.asarray(False)))
    return d, active, angle


def server(s: fj.ServerIn):
    leaves, tree = jax.tree_util.tree_flatten(s.deltas)
    G = jnp.concatenate([x.reshape(x.shape[0], -1) for x in leaves], axis=1)
    exp_all, cnt_all = s.sstate
    expected, count = exp_all[s.sel], cnt_all[s.sel]
    first = count == 0
    up = s.losses > expected
    inc = jnp.sum(~first & up)
    force = (inc > 0) & (inc < s.num_clients)
    new_exp = jnp.where(first, s.losses, jnp.where(up, expected, (expected * count + s.losses) / (count + 1)))
    sstate = (exp_all.at[s.sel].set(new_exp), cnt_all.at[s.sel].set(count + 1))
    theta_fair = check_theta(s.hp.own["theta"])
    d, active, angle = direction(G, s.losses, theta_fair, force)
    d = jnp.where(jnp.isnan(theta_fair), jnp.nan, d)            # a θ_fair outside (0, 90): NaN, the run stops
    sizes = [x[0].size for x in leaves]
    parts = jnp.split(d, [sum(sizes[:k + 1]) for k in range(len(sizes) - 1)])
    step = jax.tree_util.tree_unflatten(tree, [p.reshape(x.shape[1:]) for p, x in zip(parts, leaves)])
    theta = jax.tree_util.tree_map(lambda t, u: t - s.server_lr_t * u, s.theta, step)
    return theta, sstate, {"fair_active": active.astype(jnp.float32), "loss_angle": angle.astype(jnp.float32)}


def fedmdfg() -> fj.Algorithm:
    return fj.Algorithm("fedmdfg", server=server, client=fj.local_training(), needs_loss=True, private_upload=True,
                        init_server_state=init_server_state, hparams={"theta": 11.25},
                        metrics=("fair_active", "loss_angle"))
