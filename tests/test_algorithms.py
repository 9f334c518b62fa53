"""Server updates against hand computations."""

import jax.numpy as jnp
import numpy as np

from fedalf_jax.sim.algorithms import HParams, ServerIn, make_admm_upload, qfedavg_server, weighted_mean_server


def _hp(**kw):
    base = dict(lr=0.1, lr_decay=1.0, server_lr=1.0, server_lr_decay=1.0, mu=0.0, rho=1.0, q=0.1,
                epsilon=2.0, delta=1e-5, clip=1.0)
    base.update(kw)
    return HParams(**{k: jnp.float32(v) for k, v in base.items()})


def _s_in(theta, deltas, weights, losses, lr, hp, server_lr=1.0):
    return ServerIn(theta, deltas, jnp.asarray(weights, jnp.float32), jnp.asarray(losses, jnp.float32),
                    jnp.float32(lr), jnp.float32(server_lr), hp, 0, jnp.arange(len(weights)), ())


def test_qfedavg_hand_computed_step():
    # two clients, one 2-vector parameter; θ = (1, 2); w_1 = (0.9, 2.1), w_2 = (1.2, 1.8); η_l = 0.1, q = 0.5
    theta = {"w": jnp.array([1.0, 2.0])}
    deltas = {"w": jnp.array([[0.1, -0.1], [-0.2, 0.2]])}           # θ − w_i
    losses = [1.0, 4.0]
    out, _, _ = qfedavg_server(_s_in(theta, deltas, [0.5, 0.5], losses, 0.1, _hp(q=0.5)))
    # by hand: Δw_1 = (1, −1), Δw_2 = (−2, 2); F^q = (1, 2); ‖Δw‖² = (2, 8)
    # h_1 = 0.5·1^(−0.5)·2 + 1/0.1 = 11 ; h_2 = 0.5·4^(−0.5)·8 + 2/0.1 = 22
    # Σ F^q Δw = (1 − 4, −1 + 4) = (−3, 3) ; step = (−3, 3)/33 ; θ − step = (1 + 1/11, 2 − 1/11)
    np.testing.assert_allclose(np.asarray(out["w"]), [1 + 1 / 11, 2 - 1 / 11], rtol=1e-5)


def test_fedavg_weighted_step():
    theta = {"w": jnp.array([1.0, 1.0])}
    deltas = {"w": jnp.array([[1.0, 0.0], [0.0, 1.0]])}
    out, _, _ = weighted_mean_server(_s_in(theta, deltas, [0.25, 0.75], [0, 0], 0.1, _hp(), server_lr=0.5))
    np.testing.assert_allclose(np.asarray(out["w"]), [1 - 0.5 * 0.25, 1 - 0.5 * 0.75])


def test_admm_upload_and_dual_update():
    theta = {"w": jnp.array([1.0, 0.0])}
    w = {"w": jnp.array([2.0, 1.0])}
    w_tilde = {"w": jnp.array([3.0, -1.0])}
    dual = {"w": jnp.array([0.5, 0.5])}
    hp = _hp(rho=2.0)
    # dual_from=local: λ' = λ + ρ(w − θ) = (2.5, 2.5); augmented upload u = w̃ + λ'/ρ = (4.25, 0.25)
    delta, nd = make_admm_upload("augmented", "local")(theta, w, w_tilde, dual, hp, 0.1)
    np.testing.assert_allclose(np.asarray(nd["w"]), [2.5, 2.5])
    np.testing.assert_allclose(np.asarray(delta["w"]), [1 - 4.25, 0 - 0.25])
    # dual_from=perturbed: λ' = λ + ρ(w̃ − θ) = (4.5, −1.5); model upload u = w̃
    delta, nd = make_admm_upload("model", "perturbed")(theta, w, w_tilde, dual, hp, 0.1)
    np.testing.assert_allclose(np.asarray(nd["w"]), [4.5, -1.5])
    np.testing.assert_allclose(np.asarray(delta["w"]), [-2.0, 1.0])
