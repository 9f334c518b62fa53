"""Issue #15, items 1-3: where the noise goes (--ldp-on), a server that knows the noise (--fair-norm
denoised, from the per-value variances the clients' uploads imply), and the guarantee-holding defaults
of a private run. Each against a hand-computed or statistical expectation."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedalf_jax.experiment.config import Config
from fedalf_jax.experiment.guarantee import privacy_guarantee
from fedalf_jax.experiment.identity import from_run
from fedalf_jax.sim.algorithms import make_admm_upload, model_upload, scaled_model_upload
from fedalf_jax.sim.fairness import fair_direction
from fedalf_jax.sim.round import RoundSpec, privatise, upload_noise
from test_client import _hp

EPS = 2.0
K = 1.0 / math.tanh(EPS / 2)  # (e^ε + 1)/(e^ε − 1)


def _spec(**kw):
    return RoundSpec(model=None, algorithm=None, num_clients=1, clients_per_round=1, epochs=1, batch_size=1,
                     layer_of=None, **kw)


THETA = {"a": jnp.array([0.50, -0.20, 0.10, 0.30]), "b": jnp.array([[1.0, 2.0], [3.0, 4.0]])}
W = {"a": jnp.array([0.52, -0.23, 0.10, 0.36]), "b": jnp.array([[1.01, 1.98], [3.00, 4.05]])}


def _by_hand(src):
    """Per leaf: the centre c and the offsets δ = src − c of the tensor (float64)."""
    out = {}
    for name, x in src.items():
        x = np.asarray(x, np.float64)
        c = (x.max() + x.min()) / 2
        out[name] = (c, x - c)
    return out


@pytest.mark.parametrize("on", ["weights", "update"])
def test_ldp_on_perturbs_the_weights_or_the_update_and_reports_the_exact_variance(on):
    spec = _spec(ldp="adaptive", ldp_on=on)
    src = W if on == "weights" else {k: W[k] - THETA[k] for k in W}
    want = _by_hand(src)
    keys = jax.random.split(jax.random.PRNGKey(0), 4000)
    draws = jax.vmap(lambda k: privatise(spec, k, THETA, W, _hp(epsilon=EPS), with_variance=True))(keys)
    w_tilde, var = draws
    for name in W:
        c, d = want[name]
        released = np.asarray(w_tilde[name], np.float64) - (0 if on == "weights" else np.asarray(THETA[name]))
        # every released value is c ± kδ of its own tensor: the weights' or the update's
        plus, minus = c + K * d, c - K * d
        ok = np.isclose(released, plus, atol=2e-6) | np.isclose(released, minus, atol=2e-6)
        assert ok.all(), name
        # the variance the server computes is (k² − 1)δ², exactly, whichever sign was released
        np.testing.assert_allclose(np.asarray(var[name][0], np.float64), (K * K - 1) * d ** 2, rtol=1e-4, atol=1e-12)
        # unbiased: the mean of the draws is w, within 5 standard errors
        se = np.sqrt((K * K - 1) * d ** 2 / len(keys))
        assert np.all(np.abs(np.asarray(w_tilde[name], np.float64).mean(0) - np.asarray(W[name])) <= 5 * se + 1e-6)
        # and the empirical variance matches the reported one (values with a non-negligible offset)
        nz = np.abs(d) > 1e-3
        s2 = np.asarray(w_tilde[name], np.float64).var(0, ddof=1)
        np.testing.assert_allclose(s2[nz], ((K * K - 1) * d ** 2)[nz], rtol=0.12)


def test_noise_on_the_update_is_the_size_of_the_update_not_of_the_weights():
    # The point of --ldp-on update: the per-value noise std is 0.85·|update offset| (at ε = 2), not
    # 0.85·|weight offset|; here the weights' offsets make ~28× the update's total noise.
    std = {}
    for on in ("weights", "update"):
        _, var = privatise(_spec(ldp="adaptive", ldp_on=on), jax.random.PRNGKey(1), THETA, W, _hp(epsilon=EPS),
                           with_variance=True)
        std[on] = math.sqrt(sum(float(jnp.sum(v)) for v in jax.tree_util.tree_leaves(var)))
    update = {k: np.asarray(W[k] - THETA[k], np.float64) for k in W}
    by_hand = math.sqrt(sum(((K * K - 1) * (u - (u.max() + u.min()) / 2) ** 2).sum() for u in update.values()))
    assert std["update"] == pytest.approx(by_hand, rel=1e-4)
    assert std["weights"] > 20 * std["update"]


def test_gaussian_variance_is_sigma_squared_per_value():
    hp = _hp(epsilon=2.0, delta=1e-5, clip=1.0)
    _, var = privatise(_spec(dp="gaussian"), jax.random.PRNGKey(0), THETA, W, hp, with_variance=True)
    sigma = math.sqrt(2 * math.log(1.25 / 1e-5)) / 2.0  # clip 1, add/remove
    for v in jax.tree_util.tree_leaves(var):
        np.testing.assert_allclose(np.asarray(v), sigma ** 2, rtol=1e-5)


@pytest.mark.parametrize("upload, coef", [
    (model_upload, 1.0),                                   # Δ = θ − w̃
    (scaled_model_upload, 1.0 / 0.1),                      # Δ = (θ − w̃)/η_l, η_l = 0.1
    (make_admm_upload("increment", "perturbed"), 2.0),     # Δ = θ − w̃ − (w̃ − θ)
    (make_admm_upload("increment", "local"), 1.0),         # Δ = θ − w̃ − (w − θ)
    (make_admm_upload("model", "local"), 1.0),
])
def test_upload_noise_scales_the_variance_by_the_uploads_coefficient_squared(upload, coef):
    hp = _hp(rho=0.01)
    dual = jax.tree_util.tree_map(jnp.zeros_like, THETA)
    var = {"a": jnp.array([1.0, 2.0, 3.0, 4.0]), "b": jnp.array([[0.5, 0.5], [0.5, 0.5]])}  # Σ = 12
    got = upload_noise(lambda wt: upload(THETA, W, wt, dual, hp, jnp.float32(0.1)), W, var)
    assert float(got) == pytest.approx(coef ** 2 * 12.0, rel=1e-5)


def _rows(m=6, d=40, seed=0):
    r = np.random.default_rng(seed)
    return {"w": jnp.asarray(r.normal(0.3, 1.0, (m, d)), jnp.float32)}


def test_denoised_fair_norm_is_the_received_norm_with_the_noise_removed():
    rows = _rows()
    losses = jnp.linspace(1.0, 2.0, 6)
    mean_sq = float(np.square(np.asarray(rows["w"], np.float64).sum(0)).sum())  # ‖Σ Δ_i‖²
    for noise in (0.0, 0.3 * mean_sq, 0.99 * mean_sq, 2.0 * mean_sq):
        d, _ = fair_direction(rows, losses, noise_sq=noise)
        want = math.sqrt(max(mean_sq - noise, 0.0)) / 6
        assert float(jnp.linalg.norm(d["w"])) == pytest.approx(want, rel=1e-4, abs=1e-6)
    d0, _ = fair_direction(rows, losses)
    d1, _ = fair_direction(rows, losses, noise_sq=0.0)
    np.testing.assert_array_equal(np.asarray(d0["w"]), np.asarray(d1["w"]))  # no noise: bit for bit


def test_denoised_norm_estimates_the_noise_free_length():
    # rows Δ_i + noise of known variance: the squared denoised length is unbiased for ‖mean Δ‖², the
    # raw one is inflated by Σ Var/m²
    clean = np.asarray(_rows(seed=1)["w"], np.float64)
    m, D = clean.shape
    sd = 1.5
    truth = np.square(clean.mean(0)).sum()
    r = np.random.default_rng(2)
    raw, den = [], []
    for _ in range(300):
        noisy = clean + r.normal(0, sd, clean.shape)
        s = np.square(noisy.sum(0)).sum()
        raw.append(s / m ** 2)
        den.append((s - m * D * sd ** 2) / m ** 2)
    se = np.std(den) / math.sqrt(len(den))
    assert abs(np.mean(den) - truth) <= 5 * se
    assert np.mean(raw) - truth > 50 * se  # the noise's share, D·sd²/m = 10 here


def test_a_private_run_gets_the_guarantee_holding_variant_and_says_so():
    for mech in (dict(ldp="adaptive"), dict(ldp="ldp_fl"), dict(dp="gaussian")):
        cfg = Config(algorithm="fedalf", **mech).validated()
        ident = cfg.identity()
        assert (ident["ldp_on"], ident["fair_norm"], ident["server_target"], ident["dual_from"]) == \
            ("update", "denoised", "model", "local")
        assert ident["server_lr"] == 1.0  # the study's step, not the paper's 0.5
        assert privacy_guarantee(cfg)[0] and cfg.privacy["guarantee"] == "holds"
    plain = Config(algorithm="fedalf").identity()
    assert (plain["ldp_on"], plain["fair_norm"], plain["server_target"], plain["dual_from"]) == \
        ("weights", "raw", "increment", "local")
    # asked to be non-private in a part: kept, and the record says so
    cfg = Config(algorithm="fedalf", ldp="adaptive", server_target="increment").validated()
    assert cfg.identity()["ldp_on"] == "update" and cfg.privacy["guarantee"] == "does not hold"


def test_a_run_from_before_these_options_resumes_as_it_ran():
    # config.json of an LDP-FedALF run written before ldp_on existed: the defaults it resolved then
    old = {**Config(algorithm="fedalf", ldp="adaptive").to_dict(), "server_target": None, "server_lr": None,
           "server_lr_decay": None, "dual_from": "local"}
    for k in ("ldp_on", "fair_norm"):
        old.pop(k)
    then = Config.from_dict(from_run(old))
    ident = then.identity()
    assert (ident["ldp_on"], ident["fair_norm"], ident["server_target"], ident["server_lr"]) == \
        ("weights", "raw", "increment", 0.5)
    new = Config.from_dict({**old, "ldp_on": None})  # a user's file without the new keys: today's defaults
    assert new.identity()["ldp_on"] == "update"
    assert json.dumps(from_run(dict(old, ldp_on="update"))) == json.dumps(dict(old, ldp_on="update"))


def test_the_round_carries_each_clients_noise_variance_to_the_fair_server():
    from fedalf_jax.experiment.build import build
    from fedalf_jax.sim.round import client_phase, init_state, server_step
    small = dict(dataset="synthetic", model="mlp", clients=6, clients_per_round=3, synthetic_train=300,
                 synthetic_test=60, batch_size=20, algorithm="fedalf")
    exp = build(Config(**small, ldp="adaptive"))
    state = init_state(exp.spec, 0)
    sel, n, outs = jax.jit(lambda s: client_phase(exp.spec, s, exp.hp, exp.data))(state)
    v = np.asarray(outs.noise_var)
    assert v.shape == (3,) and np.all(np.isfinite(v)) and np.all(v > 0)
    step = jax.jit(lambda s, o: server_step(exp.spec, s, sel, n, o, exp.hp)[0].variables["params"])
    theta = state.variables["params"]
    moved = lambda new: max(float(jnp.max(jnp.abs(a - b))) for a, b in  # noqa: E731
                            zip(jax.tree_util.tree_leaves(new), jax.tree_util.tree_leaves(theta)))
    assert moved(step(state, outs)) > 0
    # noise larger than the received length: the denoised length is 0, so the server takes no step
    assert moved(step(state, outs._replace(noise_var=jnp.full((3,), 1e30, jnp.float32)))) == 0
    # where the server does not ask (fair_norm raw; likewise without a mechanism) nothing is computed: zeros
    e = build(Config(**small, ldp="adaptive", fair_norm="raw"))
    _, _, o = jax.jit(lambda s: client_phase(e.spec, s, e.hp, e.data))(init_state(e.spec, 0))
    np.testing.assert_array_equal(np.asarray(o.noise_var), 0.0)
