"""Privacy statements that must be bounds (issue #27, items 13-16): the headline ε is at the largest
participation count a client of the run really reached; LDP-FL's float32 probabilities keep their ratio
within e^ε below the cut-off (and the run says "does not hold" above it); the central accountant's inputs
are bounded and its sampling is the simulator's; a user's private_upload is recorded as its own claim."""

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
from fedalf_jax.experiment.config import Config
from fedalf_jax.experiment.guarantee import privacy_guarantee
from fedalf_jax.sim import privacy as P

TINY = dict(dataset="synthetic", model="mlp", clients=6, clients_per_round=2, rounds=6, eval_every=3,
            synthetic_train=240, synthetic_test=60, batch_size=20)


# ---- item 13: the headline ε is at the busiest client's count ------------------------------------

def counting_fedavg():
    """FedAvg whose per-client state counts the client's uploads inside the compiled round: an independent
    record of who was sampled (read back from the checkpoint)."""
    def upload(theta, w, w_tilde, count, hp, lr_t):
        return jax.tree_util.tree_map(lambda t, u: t - u, theta, w_tilde), count + 1

    def server(s: fj.ServerIn):
        step = jax.tree_util.tree_map(lambda d: jnp.tensordot(s.weights, d, axes=1), s.deltas)
        return jax.tree_util.tree_map(lambda t, d: t - s.server_lr_t * d, s.theta, step), s.sstate, {}

    return fj.Algorithm("counting_fedavg", server=server, upload=upload,
                        init_client_state=lambda params: jnp.zeros((), jnp.int32), private_upload=True)


def test_headline_epsilon_is_at_the_largest_realised_participation_count(tmp_path):
    """Pure ε-LDP composes linearly: the busiest client, with K uploads, has spent K·ε. K is counted by the
    algorithm's own client state inside the run; the expected ⌈qT⌉ = ⌈2·6/6⌉ = 2 is only a labelled extra."""
    fj.register_algorithm("counting_fedavg", counting_fedavg)
    res = fj.run(algorithm="counting_fedavg", ldp="ldp_fl", epsilon=1.0, seed=1, progress=False,
                 out=str(tmp_path / "r"), **TINY)
    counts = np.asarray(res.client_states).tolist()  # uploads per client, counted in the compiled round
    assert sum(counts) == 6 * 2 and max(counts) > 2  # this seed has a client above the expected count
    spent = res.summary["privacy_spent"]
    assert spent["participation"]["per_client"] == counts
    assert spent["participation"]["max"] == max(counts) and spent["participation"]["min"] == min(counts)
    assert spent["participation"]["histogram"] == {str(c): counts.count(c) for c in sorted(set(counts))}
    assert spent["participations"] == max(counts)
    assert spent["basic"]["epsilon"] == 1.0 * max(counts) and spent["epsilon"] == 1.0 * max(counts)
    assert spent["participations_expected"] == 2 and spent["epsilon_expected"] == 2.0
    assert f"{max(counts)} of the 6 rounds" in spent["statement"]
    # the progress line's ε is the same bound
    assert A.epsilon_spent(Config(algorithm="counting_fedavg", ldp="ldp_fl", epsilon=1.0, seed=1, **TINY), 6) \
        == 1.0 * max(counts)


def test_paper_setting_headline_with_the_sampling_replayed_by_hand():
    """N = 100, m = 10, T = 200, seed 0, adaptive LDP at ε = 2: the clients each round samples, drawn here
    with jax.random as the round draws them (run key = split(PRNGKey(seed))[1], round t's selection key =
    split(fold_in(run key, t))[0], m of N without replacement). The busiest client takes part in 36 rounds
    (the expected 20 is exceeded by 41 clients): ε = 2·36 = 72, not 40."""
    run_key = jax.random.split(jax.random.PRNGKey(0))[1]
    counts = np.zeros(100, int)
    for t in range(200):
        k_sel = jax.random.split(jax.random.fold_in(run_key, t))[0]
        counts[np.asarray(jax.random.choice(k_sel, 100, (10,), replace=False))] += 1
    assert (counts.min(), np.median(counts), counts.max(), int(np.sum(counts > 20))) == (12, 19.5, 36, 41)
    cfg = types.SimpleNamespace(ldp="adaptive", dp="none", epsilon=2.0, delta=1e-5, clients=100,
                                clients_per_round=10, rounds=200, seed=0)
    rec = A.spent(cfg, 200)
    assert rec["participation"]["per_client"] == counts.tolist()
    assert rec["epsilon"] == 72.0 and rec["epsilon_expected"] == 40.0 and rec["participations_expected"] == 20
    assert A.epsilon_spent(cfg, 200) == 72.0
    # given counts are used as they are (pure ε-LDP: ε·max count)
    assert A.spent(cfg, 200, counts=[3] + [0] * 99)["epsilon"] == 6.0


# ---- item 14: LDP-FL's own float32 probabilities ------------------------------------------------

GRID = 2.0 ** 23  # jax.random.uniform(float32) draws k/2^23: bernoulli(p) = (u < p) has P = ceil(p·2^23)/2^23


def _mechanism_probabilities(w, eps):
    """The P(w̃ = c + rk) of each value of ``w`` as ldp_fl computes it (the float32 ``p`` it hands to
    jax.random.bernoulli, captured), turned into the sampler's exact output probability."""
    seen = []
    real = jax.random.bernoulli

    def spy(key, p, shape=None, **kw):
        seen.append(np.asarray(p, np.float64))
        return real(key, p, shape, **kw)

    jax.random.bernoulli = spy
    try:
        P.ldp_fl(jax.random.PRNGKey(0), {"w": jnp.asarray(w, jnp.float32)}, eps)
    finally:
        jax.random.bernoulli = real
    (p,) = seen
    return np.ceil(p * GRID) / GRID


def _effective_epsilon(w, eps):
    pp = _mechanism_probabilities(w, eps)
    pm = 1.0 - pp
    with np.errstate(divide="ignore"):
        return max(math.log(pp.max() / pp.min()), math.log(pm.max() / pm.min()))


TENSORS = {
    "wide": np.linspace(-1.0, 1.0, 2001, dtype=np.float32),
    # 26 consecutive float32 numbers from 0.9: max + min is odd in the last place, so the centre rounds and
    # (w − c)/r passes ±1 by 1/50 (the direct formula's probability clipped to exactly 0, at ε = 5 already)
    "narrow beside its centre": np.float32(0.9) + np.float32(2.0 ** -24) * np.arange(26, dtype=np.float32),
    "small": np.float32(0.4) + np.linspace(-2.4e-3, 2.4e-3, 2001, dtype=np.float32),
}


def test_uniform_draws_lie_on_the_grid_the_effective_epsilon_assumes():
    u = np.asarray(jax.random.uniform(jax.random.PRNGKey(3), (100000,), jnp.float32), np.float64) * GRID
    assert np.all(u == np.floor(u)) and u.min() >= 0 and u.max() < GRID


@pytest.mark.parametrize("name", sorted(TENSORS))
@pytest.mark.filterwarnings("ignore:ldp_fl with epsilon")
def test_ldp_fl_float32_probabilities_are_eps_ldp_below_the_cut_off(name):
    """Over the tensor's values, the ratio of either output's probability (as the mechanism computes and
    samples it, in float32) is finite and at most e^ε' below ADAPTIVE_EXACT_EPSILON, ε' the per-value ε the
    run's privacy_spent states (the configured ε, or the float32 mechanism's where the sampler's grid puts it
    above: 14.5 -> 14.556; never more than 0.5 % above), and unbounded a little above it; from it on the run
    records that the guarantee does not hold."""
    w = TENSORS[name]
    for eps in (1.0, 2.0, 5.0, 8.0, 10.0, 12.0, 14.0, 14.5, 15.0, 15.5, 16.0, 16.5):
        assert eps < P.ADAPTIVE_EXACT_EPSILON
        eff = _effective_epsilon(w, eps)
        cfg = types.SimpleNamespace(ldp="ldp_fl", dp="none", epsilon=eps, clients=2, clients_per_round=1, seed=0)
        stated = A.spent(cfg, 1, counts=[1, 0])["per_round_per_value"]
        assert math.isfinite(eff) and eff <= stated <= eps * 1.005, (name, eps, eff, stated)
    for eps in (17.0, 20.0):  # σ(ε) rounds to 1 in float32 from ε ≈ 16.64 (the cut-off, 16.6, is below)
        assert _effective_epsilon(w, eps) == math.inf, (name, eps)
    for eps in (P.ADAPTIVE_EXACT_EPSILON, 17.0, 20.0):
        holds, why = privacy_guarantee(Config(algorithm="fedavg", ldp="ldp_fl", epsilon=eps))
        assert not holds and "ldp_fl" in why and "rounds to 0" in why
    holds, _ = privacy_guarantee(Config(algorithm="fedavg", ldp="ldp_fl", epsilon=16.5))
    assert holds


# ---- item 16: a user's declaration is recorded as such --------------------------------------------

def test_a_declared_private_upload_is_recorded_as_the_algorithms_own_claim():
    fj.register_algorithm("counting_fedavg", counting_fedavg)
    holds, why = privacy_guarantee(Config(algorithm="counting_fedavg", ldp="adaptive"))
    assert holds
    assert why.startswith("this rests on the algorithm's own declaration, not on a check")
    assert "private_upload=True" in why and "if that declaration is true, by post-processing" in why
    rec = Config(algorithm="counting_fedavg", ldp="adaptive").privacy
    assert rec["guarantee"] == "holds" and rec["why"] == why
    builtin = privacy_guarantee(Config(algorithm="fedavg", ldp="adaptive"))[1]
    assert "declaration" not in builtin and "by post-processing the mechanism's guarantee holds" in builtin


# ---- item 15: the accountant's inputs are bounded -------------------------------------------------

ACCOUNTANT_CALLS = [
    ("A.central(2.0, 1e-5, 1, 10**9, 10)", "q=1e-09 is outside the accountant's range [1e-05, 1]"),
    ("A.gaussian_local(1e9, 1e-5, 3)", "epsilon=1e+09 is outside the accountant's range [0, 100]"),
    ("A.central(500.0, 1e-5, 10, 100, 10)", "epsilon=500 is outside the accountant's range [0.05, 100]"),
    ("A.central_epsilon(1e-3, 10, 100, 10, 1e-5)", "noise_multiplier=0.001 is outside the accountant's range"),
]


@pytest.mark.parametrize("call, message", ACCOUNTANT_CALLS)
def test_accountant_refuses_inputs_it_cannot_account_in_one_line(call, message):
    """In a subprocess with a timeout: these calls hung (q = 1e-9: over 10 minutes) or failed deep inside
    dp-accounting's PLD (an allocation of hundreds of GiB)."""
    code = (f"from fedalf_jax.experiment import accounting as A\ntry:\n    {call}\nexcept ValueError as e:\n"
            f"    print('refused:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    lines = [line for line in out.stdout.splitlines() if line.startswith("refused:")]
    assert len(lines) == 1 and message in lines[0], (out.stdout, out.stderr[-2000:])


def test_config_refuses_a_central_run_the_accountant_cannot_account():
    from fedalf_jax.experiment.config import ConfigError
    with pytest.raises(ConfigError, match=r"epsilon 500 is outside the privacy accountant's range for dp central"):
        Config(dp="central", epsilon=500.0, algorithm="fedavg").validated()
    with pytest.raises(ConfigError, match=r"clients_per_round/clients = 1e-06 is below"):
        Config(dp="central", epsilon=2.0, algorithm="fedavg", clients=1000000, clients_per_round=1).validated()
    Config(dp="gaussian", epsilon=1000.0, algorithm="fedavg").validated()  # runs; its summary records the refusal
