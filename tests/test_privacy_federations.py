"""Issue 58 item 7 (docs/privacy.md, "Real federations"): privacy stays exact under availability and dropout.

Each expectation is computed here independently of the code under test: the unamplified ε by dp_accounting's
own accountant called on hand-given events (and bracketed by the Gaussian's closed forms), the participation
counts by running the compiled round itself, round by round, and counting its sampled slots by hand."""

import math

import jax
import numpy as np
import pytest
from scipy.stats import norm

import dp_accounting as dpa

import fedalf_jax as fj
from fedalf_jax.experiment.build import build
from fedalf_jax.experiment.config import Config, ConfigError
from fedalf_jax.privacy import accounting as A
from fedalf_jax.runner.build import hparams
from fedalf_jax.sim.round import _client_phase, init_state, server_step

NO_AMP = "no amplification by sampling: availability/dropout make sampling non-uniform"
BIG = dict(dataset="synthetic", clients=20, clients_per_round=5, rounds=30, seed=0, algorithm="fedavg")
SMALL = dict(dataset="synthetic", clients=12, clients_per_round=4, synthetic_train=480, synthetic_test=120,
             batch_size=20, rounds=2, eval_every=1, algorithm="fedavg", model="mlp", partition="dirichlet", alpha=0.3)
DELTA = 1e-5


def _gaussian_rounds_by_hand(z, rounds, delta):
    """dp_accounting's RDP accountant (replace-one), called here on the event written by hand: the Gaussian of
    noise multiplier ``z`` in every round, no sampling (q = 1)."""
    acc = dpa.rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    return acc.compose(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(z), rounds)).get_epsilon(delta)


def _gaussian_delta(mu, eps):
    """The exact δ(ε) of a Gaussian of sensitivity/σ = ``mu`` (Balle and Wang 2018): T rounds at ``z`` are one
    Gaussian at ``mu = sqrt(T)/z``."""
    return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)


def test_central_under_beta_availability_is_accounted_at_q_1():
    cfg = Config(**BIG, availability="beta:2,5", dp="central", epsilon=2.0)
    rec = A.spent(cfg, 30)
    z = rec["noise_multiplier"]
    assert rec["epsilon"] == pytest.approx(_gaussian_rounds_by_hand(z, 30, DELTA), rel=1e-9)
    assert rec["epsilon"] == pytest.approx(2.0, abs=1e-5) and rec["epsilon"] <= 2.0  # calibrated to the budget at q = 1
    # bracketed by the closed forms: above the exact Gaussian's ε (δ(ε) ≤ δ there), below RDP's classic conversion
    mu = math.sqrt(30) / z
    assert _gaussian_delta(mu, rec["epsilon"]) <= DELTA
    classic = min(30 * a / (2 * z * z) + math.log(1 / DELTA) / (a - 1) for a in np.linspace(1.01, 200, 20000))
    assert rec["epsilon"] <= classic
    # after 10 rounds: the same accountant at 10 rounds, same z
    assert A.spent(cfg, 10)["epsilon"] == pytest.approx(_gaussian_rounds_by_hand(z, 10, DELTA), rel=1e-9)
    # the round runs with that z (not the amplified one), and the progress line shows the same ε
    assert float(hparams(cfg).noise_multiplier) == pytest.approx(z, rel=1e-6)
    assert A.epsilon_spent(cfg, 30) == pytest.approx(rec["epsilon"], rel=1e-12)
    # the uniform run amplifies: less noise for the same budget, and at its noise q = 1 would spend more
    uni = A.spent(Config(**BIG, dp="central", epsilon=2.0), 30)
    assert uni["noise_multiplier"] < z
    assert _gaussian_rounds_by_hand(uni["noise_multiplier"], 30, DELTA) > 1.5 * uni["epsilon"]
    assert "amplification" not in uni and "sampling" not in uni


def test_central_under_availability_says_no_amplification():
    cfg = Config(**BIG, availability="markov:0.3,0.2", dp="central", epsilon=2.0)
    rec = A.spent(cfg, 30)
    assert rec["amplification"] == NO_AMP
    assert NO_AMP in rec["statement"] and NO_AMP in rec["accountant"] and "q = 1" in rec["statement"]
    assert "amplified by sampling" not in rec["statement"]
    p = cfg.privacy
    assert p["guarantee"] == "holds" and NO_AMP in p["why"] and "amplified" not in p["why"]
    assert "non-uniform" in rec["sampling"]


def test_central_under_dropout_alone_keeps_the_amplification():
    """Uniform sampling, then independent losses: the amplified bound still holds (docs/privacy.md), so the same
    noise and ε as the uniform run, and the record says why."""
    uni = A.spent(Config(**BIG, dp="central", epsilon=2.0), 30)
    cfg = Config(**BIG, dropout=0.3, dp="central", epsilon=2.0)
    rec = A.spent(cfg, 30)
    assert rec["noise_multiplier"] == uni["noise_multiplier"] and rec["epsilon"] == uni["epsilon"]
    assert float(hparams(cfg).noise_multiplier) == pytest.approx(uni["noise_multiplier"], rel=1e-6)
    assert rec["amplification"].startswith("amplified by sampling 5 of 20") and "releases less" in rec["amplification"]
    assert "probability 0.3" in rec["sampling"]
    assert NO_AMP not in cfg.privacy["why"] and "releases less" in cfg.privacy["why"]


def _hand_counts(cfg, rounds):
    """Each client's sampled-and-available rounds and arrived rounds, from the compiled round itself."""
    exp = build(cfg)
    state = init_state(exp.spec, cfg.seed)
    phase = jax.jit(lambda s: _client_phase(exp.spec, s, exp.hp, exp.data))
    sent, got = np.zeros(cfg.clients, int), np.zeros(cfg.clients, int)
    for t in range(rounds):
        sel, _, _, fed = phase(state._replace(round=np.int32(t)))
        sel = np.asarray(sel)
        for j, i in enumerate(sel):
            sent[i] += bool(fed["valid"][j])
            got[i] += bool(fed["arrived"][j])
    return sent, got


@pytest.mark.parametrize("mech", [dict(ldp="adaptive", epsilon=1.0), dict(dp="gaussian", epsilon=2.0)])
def test_local_mechanisms_count_the_rounds_each_client_really_sent_in(mech):
    cfg = Config(**{**SMALL, "rounds": 8}, availability="beta:2,5", dropout=0.5, **mech)
    sent, got = _hand_counts(cfg, 8)
    assert (sent > got).any()  # lost uploads: they count (they left the client)
    rec = A.spent(cfg, 8)
    assert rec["participation"]["per_client"] == sent.tolist()
    k = int(sent.max())
    assert rec["participations"] == k and rec["participations_bound"] == 8 and rec["bound_exceeded_with"] == 0.0
    if "ldp" in mech:
        assert rec["basic"]["epsilon"] == pytest.approx(k * rec["per_round_per_value"])
    else:
        z = math.sqrt(2 * math.log(1.25 / DELTA)) / 2.0
        acc = dpa.rdp.RdpAccountant()
        want = acc.compose(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(z), k)).get_epsilon(DELTA)
        assert rec["epsilon_rdp"] == pytest.approx(want, rel=1e-9) and rec["epsilon"] <= want
    assert A.epsilon_spent(cfg, 8) == pytest.approx(rec["epsilon"])


def test_local_mechanism_under_dropout_alone_counts_the_sampled_rounds():
    cfg = Config(**{**SMALL, "rounds": 8}, dropout=0.5, ldp="ldp_fl", epsilon=1.0)
    sent, got = _hand_counts(cfg, 8)
    assert (sent > got).any()
    rec = A.spent(cfg, 8)
    assert rec["participation"]["per_client"] == sent.tolist()
    assert rec["participations_bound"] == A.participation_bound(4 / 12, 8)  # still Binomial(T, m/N): uniform


def test_central_round_divides_by_m_whoever_arrives(monkeypatch):
    """Under central DP the server's step is Σ_arrived Δ_i / m (the 2·clip/m sensitivity needs a fixed
    denominator), not the mean over the arrived clients; the noise set to zero to read the step by hand (so
    the calibration, ~5 s, which the tests above check, is skipped: any z gives the same step)."""
    monkeypatch.setattr(A, "central_noise_multiplier", lambda *a, **k: 1.0)
    exp = build(Config(**SMALL, dropout=0.5, dp="central", epsilon=8.0, seed=3))
    assert float(exp.hp.noise_multiplier) == 1.0
    hp = exp.hp._replace(noise_multiplier=jax.numpy.float32(0.0))
    state = init_state(exp.spec, 3)
    sel, n, outs, fed = jax.jit(lambda s: _client_phase(exp.spec, s, hp, exp.data))(state)
    new, _ = jax.jit(lambda s, a, b, c, f: server_step(exp.spec, s, a, b, c, hp, f))(state, sel, n, outs, fed)
    arrived = np.asarray(fed["arrived"])
    assert arrived.any() and not arrived.all()
    lr = float(exp.hp.server_lr)
    for th, dl, nw in zip(jax.tree_util.tree_leaves(state.variables["params"]), jax.tree_util.tree_leaves(outs.delta),
                          jax.tree_util.tree_leaves(new.variables["params"])):
        want = np.asarray(th, np.float64) - lr * np.tensordot(arrived / 4.0, np.asarray(dl, np.float64), axes=1)
        np.testing.assert_allclose(np.asarray(nw), want, rtol=1e-5, atol=1e-6)


def test_a_run_under_availability_records_no_amplification(tmp_path):
    r = fj.run(Config(**SMALL, availability="beta:2,5", dp="central", epsilon=8.0, out=str(tmp_path / "r")),
               progress=False)
    spent = r.summary["privacy_spent"]
    assert spent["amplification"] == NO_AMP and spent["epsilon"] <= 8.0
    assert spent["epsilon"] == pytest.approx(_gaussian_rounds_by_hand(spent["noise_multiplier"], 2, DELTA), rel=1e-9)


@pytest.mark.parametrize("kw", [dict(availability="size", dp="gaussian", epsilon=2.0),
                                dict(availability="labels", dp="central", epsilon=2.0),
                                dict(availability="size", dropout=0.2, ldp="adaptive", epsilon=1.0)])
def test_data_drawn_availability_under_a_mechanism_is_one_line(kw):
    with pytest.raises(ConfigError) as e:
        Config(**SMALL, **kw)
    msg = str(e.value)
    assert "\n" not in msg and "own data" in msg and "use availability beta, cyclic, markov or trace" in msg
