"""Privacy accounted as the simulator samples (issue #27, items 15 and 14): central DP is accounted as m of N
clients sampled without replacement (dp_accounting's SampledWithoutReplacementDpEvent, replace-one, RDP), its
noise calibrated to that event with the replace-one sensitivity; the local LDP mechanisms' per-value ε is
stated at what their float32 probabilities really give, never below it."""

import math
import subprocess
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedalf_jax as fj
from fedalf_jax.experiment import accounting as A
from fedalf_jax.experiment.build import central_sensitivity, hparams
from fedalf_jax.experiment.config import Config, ConfigError
from fedalf_jax.experiment.identity import identity_diff
from fedalf_jax.sim import privacy as P


def _wor_epsilon(z, n, m, rounds, delta):
    """ε of ``rounds`` rounds of m of n sampled without replacement, Gaussian noise multiplier z: dp_accounting
    called directly, the event built here."""
    import dp_accounting as dpa
    from dp_accounting.rdp import rdp_privacy_accountant as rdp
    event = dpa.SelfComposedDpEvent(dpa.SampledWithoutReplacementDpEvent(n, m, dpa.GaussianDpEvent(z)), rounds)
    acc = rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    return acc.compose(event).get_epsilon(delta)


# ---- item 15: central DP accounted as the simulator samples ----------------------------------------

def test_central_noise_multiplier_spends_the_budget_under_sampling_without_replacement():
    """The repo's setting (ε = 2, δ = 1e-5, N = 100, m = 10, T = 200). The noise multiplier the run uses, put
    through the without-replacement event by hand, spends 2 (and 1 % less noise would overspend). The
    Poisson-calibrated z = 3.0047 of before spent 4.72 there (the fair servers, sensitivity 2·clip) and 11.9
    (the mean servers, whose std z·clip/m was half the replace-one 2·clip/m: z/2 against it)."""
    cfg = Config(algorithm="fedavg", dp="central", epsilon=2.0, delta=1e-5, clients=100, clients_per_round=10,
                 rounds=200)
    z = float(hparams(cfg).noise_multiplier)
    assert _wor_epsilon(z, 100, 10, 200, 1e-5) == pytest.approx(2.0, abs=1e-4)
    assert _wor_epsilon(z * 0.99, 100, 10, 200, 1e-5) > 2.0 + 1e-3
    assert round(z, 2) == 6.29
    assert round(_wor_epsilon(3.0047, 100, 10, 200, 1e-5), 2) == 4.72
    assert round(_wor_epsilon(3.0047 / 2, 100, 10, 200, 1e-5), 1) == 11.9
    rec = A.spent(cfg, 200)
    assert rec["epsilon"] == pytest.approx(_wor_epsilon(rec["noise_multiplier"], 100, 10, 200, 1e-5), abs=1e-9)
    assert rec["epsilon"] <= 2.0 and rec["neighbouring"] == "replace_one"
    assert "without replacement" in rec["accountant"] and "replacing any one client" in rec["statement"]
    assert A.epsilon_spent(cfg, 200) == rec["epsilon"]


def test_central_sensitivity_is_the_replace_one_one():
    """Replacing one of m clipped uploads (norm ≤ clip) moves their mean by up to 2·clip/m; the fair servers'
    direction moves by up to 2·clip whatever the relation."""
    for m, algorithm in ((4, "fedavg"), (10, "fedprox"), (5, "fedadmm")):
        cfg = Config(algorithm=algorithm, dp="central", clients=20, clients_per_round=m)
        assert central_sensitivity(cfg) == 2.0 / m
    assert central_sensitivity(Config(algorithm="fedalf", dp="central", history=False, clients=20,
                                      clients_per_round=4)) == 2.0
    assert Config(algorithm="fedavg", dp="central").privacy["sensitivity"] == "2/m x server_lr x clip"


def test_a_checkpoint_of_the_poisson_accounted_noise_is_not_resumed():
    """Its rounds ran with other noise: the identity names the accounting, so --resume refuses it (rundir
    compares identities with identity_diff)."""
    new = Config(algorithm="fedavg", dp="central").identity()
    old = {k: v for k, v in new.items() if k != "central_accounting"}  # what a checkpoint of before recorded
    assert identity_diff(old, new) == ["central_accounting"]
    assert "central_accounting" not in Config(algorithm="fedavg", dp="gaussian").identity()


def test_a_central_budget_the_accountant_cannot_reach_is_refused_in_one_line():
    """At δ = 1e-10 the RDP accountant's ε of sampling without replacement stops falling (about 0.136 at
    z = 1024): ε = 0.05 cannot be calibrated; one line, not dp_accounting's bracket error."""
    with pytest.raises(ConfigError) as e:
        Config(algorithm="fedavg", dp="central", epsilon=0.05, delta=1e-10)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("dp central: epsilon=0.05 at delta=1e-10")
    assert "needs a noise multiplier above 1024" in msg and "choose a larger epsilon or delta" in msg


def test_validating_a_central_config_checks_the_budget_without_calibrating(monkeypatch):
    """Issue 56 item 3: validation refuses what the calibration would refuse (above), at one evaluation of
    the accountant for a reachable budget (ε at Z_MAX), not the ~15 of a calibration (building calibrates:
    the tests above). Counted on a spy of dp_accounting's event composition, a count independent of the
    module's caches."""
    import dp_accounting as dpa
    calls, real = [], dpa.SampledWithoutReplacementDpEvent

    def spy(n, m, event):
        calls.append(event.noise_multiplier)
        return real(n, m, event)

    monkeypatch.setattr(dpa, "SampledWithoutReplacementDpEvent", spy)
    cfg = Config(algorithm="fedavg", dp="central", epsilon=3.25, delta=1e-5, clients=37, clients_per_round=6,
                 rounds=11)  # a budget no other test calibrates: nothing cached
    assert calls == [A.Z_MAX] and cfg.dp == "central"


def test_central_accountant_returns_at_its_range_ends():
    """Its cost does not depend on q, z or the rounds: the ends of the accepted range return (the PLD
    accounting of before hung at small q)."""
    code = ("from fedalf_jax.experiment import accounting as A\n"
            "print(A.central(0.05, 1e-5, 1, 100000, 100)['epsilon'])\n"
            "print(A.central(100.0, 1e-5, 10, 10, 1)['epsilon'])\n"
            "print(A.central_epsilon(A.Z_MIN, 1, 100000, 10**6, 1e-5), A.central_epsilon(A.Z_MAX, 10, 100, 10, 1e-5))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    lines = out.stdout.split()
    assert out.returncode == 0 and len(lines) == 4, out.stderr[-2000:]
    assert float(lines[0]) <= 0.05 and float(lines[1]) <= 100.0


# ---- item 14: the per-value ε stated is at least the float32 mechanism's ----------------------------

GRID = 2.0 ** 23  # jax.random.uniform(float32) draws k/2^23: bernoulli(p) = (u < p) has P = ceil(p·2^23)/2^23


def _sampled(p):
    return np.ceil(np.asarray(p, np.float64) * GRID) / GRID


def _adaptive_keep_probability(eps):
    """The P(keep the sign) adaptive_ldp really samples: the float32 p it hands jax.random.bernoulli."""
    seen, real = [], jax.random.bernoulli

    def spy(key, p, shape=None, **kw):
        seen.append(np.asarray(p, np.float64))
        return real(key, p, shape, **kw)

    jax.random.bernoulli = spy
    try:
        P.adaptive_ldp(jax.random.PRNGKey(0), {"w": jnp.linspace(-1.0, 1.0, 11)}, eps)
    finally:
        jax.random.bernoulli = real
    (p,) = seen
    return float(_sampled(p))


def _stated(mechanism, eps, counts=(1, 0)):
    cfg = types.SimpleNamespace(ldp=mechanism, dp="none", epsilon=eps, clients=len(counts), clients_per_round=1,
                                seed=0)
    return A.spent(cfg, max(counts), counts=list(counts))


@pytest.mark.filterwarnings("ignore:adaptive_ldp with epsilon")
def test_adaptive_float32_ratio_is_within_the_stated_epsilon():
    """Randomized response on the sign: either output's ratio is P(keep)/P(flip) as sampled. At ε = 1 the
    grid puts it at 1 + 1e-7, at 14.5 at 14.556: the record states that, not ε."""
    for eps in (0.5, 1.0, 2.0, 5.0, 8.0, 12.0, 14.5, 15.5, 16.5):
        keep = _adaptive_keep_probability(eps)
        real = math.log(keep / (1.0 - keep))
        stated = _stated("adaptive", eps)["per_round_per_value"]
        assert real <= stated <= max(eps, real), (eps, real, stated)
    rec = _stated("adaptive", 14.5, counts=(3, 1))
    assert rec["epsilon_configured"] == 14.5 and 14.55 < rec["epsilon_float32"] < 14.56
    assert rec["basic"]["epsilon"] == 3 * rec["epsilon_float32"] and "the configured 14.5 as the float32" in rec["statement"]
    keep2 = _adaptive_keep_probability(2.0)  # below ε there: the configured ε is stated
    assert math.log(keep2 / (1.0 - keep2)) < 2.0 and _stated("adaptive", 2.0)["per_round_per_value"] == 2.0


def test_ldp_fl_probability_lies_between_its_extremes_in_float32():
    """float32_epsilon takes ldp_fl's P(c + rk) over every input to lie in [σ(−ε), σ(ε)] (its values at
    t = −1 and t = 1) as float32 computes it: checked on the float32 t nearest ±1 and 0 and on a spread."""
    f = jax.jit(P._ldp_fl_p_plus)

    def near(x, n):
        bits = np.float32(abs(x)).view(np.int32) + np.arange(-n, n + 1, dtype=np.int32)
        return np.sign(x).astype(np.float32) * bits.view(np.float32) if x else bits.view(np.float32)

    t = np.concatenate([near(1.0, 4096), near(-1.0, 4096), near(0.0, 0), np.linspace(-1, 1, 20001, dtype=np.float32)])
    t = jnp.asarray(t[(t >= -1) & (t <= 1)])
    for eps in (0.001, 0.5, 1.0, 2.0, 8.0, 14.5, 16.5):
        e = jnp.float32(eps)
        p = np.asarray(f(t, jnp.float32(0.0), jnp.float32(1.0), e))
        a, b = np.float32(jax.nn.sigmoid(e)), np.float32(jax.nn.sigmoid(-e))
        assert p.max() <= a and p.min() >= b, eps
        stated = _stated("ldp_fl", eps)["per_round_per_value"]
        ga, gb = _sampled(a), _sampled(b)
        assert max(math.log(ga / gb), math.log((1 - gb) / (1 - ga))) <= stated, eps
