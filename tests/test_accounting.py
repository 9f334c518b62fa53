"""Privacy accounting over rounds (fedalf_jax.experiment.accounting): against a published value, hand-computed
compositions, the project's own analytic Gaussian, calibration round trips, monotonicity, and the
``privacy_spent`` record of a tiny private run."""

import json
import math
import types

import pytest

from fedalf_jax.experiment import accounting as A


def _cfg(**kw):
    """A stand-in with Config's privacy attributes (dp="central" is not yet a Config value)."""
    base = dict(ldp="none", dp="none", epsilon=2.0, delta=1e-5, clip=1.0, neighbouring="add_remove",
                clients=100, clients_per_round=10, rounds=200, seed=0)
    return types.SimpleNamespace(**{**base, **kw})


# ---- a published value ---------------------------------------------------------------------------

def test_rdp_accountant_reproduces_the_tf_privacy_mnist_tutorial():
    """TensorFlow Privacy's MNIST DP-SGD tutorial (github.com/tensorflow/privacy, tutorials/README.md,
    "Expected Output" and the first row of "Select Parameters"): noise multiplier 1.12, batch 256 of
    60000 (q = 256/60000), 60 epochs of 60000 // 256 = 234 steps, "For delta=1e-5, the current epsilon
    is: 2.92". tutorials/mnist_dpsgd_tutorial.py computes it with the RDP orders
    [1 + x/10 for x in 1..99] + [12..63] and the conversion ε = min_α rdp(α) − ln δ/(α − 1) (Mironov
    2017, Prop. 3). The same event (our central DP-FedAvg event: Poisson-sampled Gaussian composed
    per step) through dp_accounting's RDP accountant, converted the same way, must give 2.92 to the
    published two decimals (tolerance 0.005). Our own headline uses dp_accounting's improved conversion
    and the PLD accountant, so it may only be smaller."""
    from dp_accounting.rdp import rdp_privacy_accountant as rdp
    q, z, steps, delta = 256 / 60000, 1.12, 60 * (60000 // 256), 1e-5
    orders = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))
    acc = rdp.RdpAccountant(orders).compose(A._sampled_gaussian(z, q, steps))
    classic = min(r - math.log(delta) / (a - 1) for a, r in zip(acc.orders, acc.rdp))
    assert classic == pytest.approx(2.92, abs=0.005)
    ours_rdp = A.central_epsilon(z, q, steps, delta, accountant="rdp")
    ours = A.central_epsilon(z, q, steps, delta)
    assert 2.0 < ours <= ours_rdp <= 2.92 + 0.005


# ---- local Gaussian ------------------------------------------------------------------------------

def test_local_gaussian_matches_the_analytic_gaussian():
    """One upload: the exact ε of privacy.gaussian_epsilon (Balle & Wang, bisection on our own δ(ε)),
    1.61 at ε = 2, δ = 1e-5. k uploads: exactly the Gaussian mechanism with noise z/√k, so our own
    gaussian_delta at the accounted ε gives back δ (PLD is pessimistic: never below)."""
    from fedalf_jax.sim.privacy import gaussian_delta, gaussian_epsilon
    one = A.gaussian_local(2.0, 1e-5, 1)
    assert one["epsilon"] == pytest.approx(gaussian_epsilon(2.0, 1e-5), abs=1e-3)
    assert one["epsilon"] == pytest.approx(1.61, abs=0.005)
    assert one["epsilon_pld"] <= one["epsilon_rdp"] and one["epsilon"] == min(one["epsilon_pld"], one["epsilon_rdp"])
    z = math.sqrt(2 * math.log(1.25 / 1e-5)) / 2.0
    assert one["noise_multiplier"] == pytest.approx(z, rel=1e-12)
    for k in (4, 20, 100):
        eps = A.gaussian_local(2.0, 1e-5, k)["epsilon"]
        assert gaussian_delta(eps, z / math.sqrt(k)) == pytest.approx(1e-5, rel=2e-2)
        assert gaussian_delta(eps, z / math.sqrt(k)) <= 1e-5 * (1 + 1e-9)
    assert A.gaussian_local(2.0, 1e-5, 0)["epsilon"] == 0.0
    # the relation is recorded; z (σ over the relation's own sensitivity) and so ε do not depend on it
    rep = A.gaussian_local(2.0, 1e-5, 20, neighbouring="replace")
    assert rep["neighbouring"] == "replace" and rep["epsilon"] == A.gaussian_local(2.0, 1e-5, 20)["epsilon"]


# ---- per-value LDP ---------------------------------------------------------------------------------

def test_advanced_composition_against_a_hand_computed_value():
    # ε = 0.5, k = 100, δ' = 1e-5: ln(1e5) = 5·ln 10 = 11.512925; sqrt(2·100·11.512925) = sqrt(2302.585)
    # = 47.985259, × 0.5 = 23.992630; kε(e^ε − 1) = 50 × 0.648721 = 32.436064; total 56.428693.
    assert A.advanced_composition(0.5, 100, 1e-5) == pytest.approx(56.428693, abs=1e-5)
    v = A.ldp_per_value(0.5, 100, delta_prime=1e-5)
    assert v["advanced"] == {"epsilon": pytest.approx(56.428693, abs=1e-5), "delta": 1e-5}


def test_basic_composition_counts_and_per_tensor():
    v = A.ldp_per_value(2.0, 7, tensor_sizes={"Dense_0/kernel": 10, "Dense_0/bias": 3})
    assert v["per_round_per_value"] == 2.0 and v["participations"] == 7
    assert v["basic"] == {"epsilon": 14.0, "delta": 0.0}
    assert v["per_tensor_per_round"] == {"Dense_0/kernel": 20.0, "Dense_0/bias": 6.0}
    assert v["per_tensor_per_round_max"] == 20.0 and v["per_model_per_round"] == 26.0
    assert v["per_model_total_basic"] == 7 * 26.0
    assert A.ldp_per_value(2.0, 7, tensor_sizes=[5, 1])["per_tensor_per_round"] == {"0": 10.0, "1": 2.0}
    # at ε = 2 neither δ' bound is 1 % below kε: the headline is the pure one
    assert (v["epsilon"], v["delta"]) == (14.0, 0.0)
    # the optimal composition (PLD of randomized response) is never above basic or advanced, equals ε once,
    # and at ε = 0.1 over 1000 rounds is well below both: the headline then takes it, at δ'
    assert A.ldp_per_value(2.0, 1)["optimal"]["epsilon"] == pytest.approx(2.0, abs=1e-3)
    w = A.ldp_per_value(0.1, 1000)
    assert w["optimal"]["epsilon"] < w["advanced"]["epsilon"] < w["basic"]["epsilon"] == pytest.approx(100.0)
    assert (w["epsilon"], w["delta"]) == (w["optimal"]["epsilon"], A.DELTA_PRIME)


def test_participation_counts():
    assert A.expected_participations(10, 100, 30) == 3  # 0.1·30 = 3.0000000000000004 in floats: not 4
    assert A.expected_participations(2, 4, 2) == 1
    assert A.expected_participations(1, 3, 1) == 1  # ceil(1/3)
    assert A.expected_participations(10, 100, 0) == 0
    from scipy.stats import binom
    for q, t in ((0.1, 200), (0.01, 1000), (0.5, 2)):
        k = A.participation_bound(q, t)
        assert binom.sf(k, t, q) <= 1e-3 < binom.sf(k - 1, t, q), (q, t, k)
    assert A.participation_bound(1.0, 5) == 5 and A.participation_bound(0.3, 0) == 0
    with pytest.raises(ValueError):
        A.expected_participations(5, 4, 1)


# ---- central -------------------------------------------------------------------------------------

def test_central_calibration_round_trip():
    for eps, q, rounds in ((2.0, 0.1, 200), (0.5, 0.05, 50), (8.0, 1.0, 10)):
        z = A.central_noise_multiplier(eps, 1e-5, q, rounds)
        assert A.central_epsilon(z, q, rounds, 1e-5) == pytest.approx(eps, abs=1e-3), (eps, q, rounds)
    rec = A.central(2.0, 1e-5, 0.1, 200)
    assert rec["epsilon"] == pytest.approx(2.0, abs=1e-3) and rec["epsilon_pld"] <= rec["epsilon_rdp"]
    # q = 1: no sampling, T Gaussians = one with z/√T, whose exact ε is dp_accounting's analytic Gaussian
    import dp_accounting as dpa
    z = A.central_noise_multiplier(2.0, 1e-5, 1.0, 16)
    assert dpa.get_epsilon_gaussian(z / 4.0, 1e-5) == pytest.approx(2.0, abs=1e-3)


def test_more_rounds_spend_more():
    """ε spent grows with the rounds run, for every mechanism; more noise or rarer sampling spends less."""
    for kw in (dict(dp="gaussian"), dict(ldp="adaptive"), dict(ldp="ldp_fl"), dict(dp="central")):
        eps = [A.spent(_cfg(**kw), t)["epsilon"] for t in (0, 10, 50, 200)]
        assert eps[0] == 0.0 and all(a < b for a, b in zip(eps, eps[1:])), (kw, eps)
        assert [A.epsilon_spent(_cfg(**kw), t) for t in (0, 10, 50, 200)] == eps
    assert A.central_epsilon(2.0, 0.1, 100, 1e-5) < A.central_epsilon(1.5, 0.1, 100, 1e-5)
    assert A.central_epsilon(2.0, 0.05, 100, 1e-5) < A.central_epsilon(2.0, 0.1, 100, 1e-5)
    # the whole central run spends its configured budget
    assert A.spent(_cfg(dp="central"), 200)["epsilon"] == pytest.approx(2.0, abs=1e-3)


def test_spent_records_say_what_they_mean():
    assert A.spent(_cfg(), 100) == {} and A.epsilon_spent(_cfg(), 100) is None
    g = A.spent(_cfg(dp="gaussian"), 200)
    # seed 0's sampling: the busiest client took part in 36 of the 200 rounds (tests/test_privacy_bounds.py)
    assert g["participations"] == 36 and g["participations_bound"] == A.participation_bound(0.1, 200)
    assert g["epsilon"] == A.gaussian_local(2.0, 1e-5, 36)["epsilon"] and g["delta"] == 1e-5
    assert g["participations_expected"] == 20 and g["epsilon_expected"] == A.gaussian_local(2.0, 1e-5, 20)["epsilon"]
    assert g["epsilon_at_bound"] < g["epsilon"] and "no amplification" in g["accountant"]
    assert "client" in g["per"] and "36 of the 200 rounds" in g["statement"]
    v = A.spent(_cfg(ldp="ldp_fl"), 200, tensor_sizes={"k": 100, "b": 10})
    assert v["basic"]["epsilon"] == 72.0 and v["per_tensor_per_round"] == {"k": 200.0, "b": 20.0}
    assert "weight" in v["per"] and "nε" in v["statement"]
    c = A.spent(_cfg(dp="central"), 100)
    assert c["noise_multiplier"] == pytest.approx(A.central_noise_multiplier(2.0, 1e-5, 0.1, 200))
    assert c["epsilon"] < 2.0 and "Poisson" in c["accountant"] and "participations" not in c
    for rec in (g, v, c):
        assert json.loads(json.dumps(rec)) == rec  # JSON-ready


def test_param_sizes_of_a_batch_drop_the_run_axis():
    import numpy as np
    from fedalf_jax.experiment.loop import _param_sizes
    variables = {"params": {"Dense_0": {"kernel": np.zeros((3, 4)), "bias": np.zeros(4)}}}
    assert _param_sizes(variables) == {"Dense_0/kernel": 12, "Dense_0/bias": 4}
    batched = {"params": {"Dense_0": {"kernel": np.zeros((5, 3, 4)), "bias": np.zeros((5, 4))}}}
    assert _param_sizes(batched, batched=True) == {"Dense_0/kernel": 12, "Dense_0/bias": 4}


# (privacy_spent in a real run's summary.json: tests/test_run.py::test_private_runs_say_what_they_guarantee)
