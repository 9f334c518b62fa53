"""Issue #13, item 10: the glue between the pieces, each behaviour checked against an independent
expectation (a hand-computed value, a count, a set), not against a second path through the same helper.

Every test here was seen to fail under a plausible one-line slip of the code it pins; the slips are
applied, one at a time to a copy of the tree, by tests/wiring_mutations.sh.
"""

import itertools
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from fedalf_jax.experiment.build import build
from fedalf_jax.experiment.config import Config
from fedalf_jax.experiment.loop import run
from fedalf_jax.reporting import report
from fedalf_jax.experiment.rundir import RunDir
from fedalf_jax.sim.fairness import fair_direction
from fedalf_jax.problem.partitions import make_partition
from fedalf_jax.sim.algorithms import ServerIn, fedadmm, make_admm_upload
from fedalf_jax.sim.privacy import clip_global_norm
from fedalf_jax.sim.round import RoundSpec, client_phase, init_state, privatise, run_rounds
from test_client import _hp
from test_report import ACC_SWING, ANGLE_SWING, make_run

SMALL = dict(dataset="synthetic", model="mlp", clients=8, clients_per_round=3, synthetic_train=600,
             synthetic_test=160, batch_size=20, rounds=2, eval_every=1)


# ---- client sampling (sim/round.py) -----------------------------------------------------------

def test_sampled_clients_are_distinct_change_every_round_and_are_uniform():
    # The selection of T rounds, taken from client_phase itself (its training outputs are unused, so
    # jit drops them): N = 8 clients, m = 3 per round.
    N, m, T = 8, 3, 2000
    exp = build(Config(algorithm="fedavg", partition="iid", **{**SMALL, "clients": N, "clients_per_round": m}))
    state = init_state(exp.spec, 0)
    sel_of = jax.jit(lambda rs: jax.lax.map(
        lambda r: client_phase(exp.spec, state._replace(round=r), exp.hp, exp.data)[0], rs))
    sel = np.asarray(sel_of(jnp.arange(T, dtype=jnp.int32)))
    assert sel.shape == (T, m) and sel.min() >= 0 and sel.max() < N
    # distinct within every round
    assert all(len(set(s.tolist())) == m for s in sel)
    # a new draw every round: two consecutive rounds share their set with probability 1/C(8,3) = 1/56
    sets = [frozenset(s.tolist()) for s in sel]
    repeats = sum(a == b for a, b in zip(sets, sets[1:]))
    # repeats ~ Binomial(T−1, 1/56) (mean 35.7, sd 5.9); P(repeats > 100) = 1.1e-19
    assert repeats <= 100, repeats
    # every subset turns up: one is missed with probability ≤ 56 · (55/56)^2000 = 1.3e-14
    assert len(set(sets)) == math.comb(N, m)
    # uniform over clients: each client's count is Binomial(T, m/N) (mean 750, sd 21.7). With a two-sided
    # bound of z = 5.5 sd per client and a union bound over the 8 clients, a correct sampler fails this
    # with probability < 8 · 3.8e-8 = 3e-7.
    counts = np.bincount(sel.ravel(), minlength=N)
    p = m / N
    z = 5.5
    assert 2 * stats.norm.sf(z) * N < 1e-6
    assert np.all(np.abs(counts - T * p) <= z * math.sqrt(T * p * (1 - p))), counts
    # uniform over the 56 subsets: Pearson's chi-square, df = 55, rejected at false-failure probability 1e-6
    freq = np.array([sum(s == frozenset(c) for s in sets) for c in itertools.combinations(range(N), m)])
    expected = T / math.comb(N, m)
    chi2 = float(((freq - expected) ** 2 / expected).sum())
    assert chi2 < stats.chi2.isf(1e-6, math.comb(N, m) - 1), chi2


# ---- ADMM upload, FedADMM's server, Gaussian clipping (sim/algorithms.py, privacy/mechanisms.py) -----

def test_admm_increment_upload_with_rho_not_one():
    # θ = (1, 2), w = (1.5, 1), w̃ = (1.4, 1.2), λ⁻ = (0.1, −0.2), ρ = 0.5
    theta = {"w": jnp.array([1.0, 2.0])}
    w = {"w": jnp.array([1.5, 1.0])}
    w_tilde = {"w": jnp.array([1.4, 1.2])}
    dual = {"w": jnp.array([0.1, -0.2])}
    hp = _hp(rho=0.5)
    # dual_from=local: λ = λ⁻ + ρ(w − θ) = (0.35, −0.7); u = w̃ + (λ − λ⁻)/ρ = (1.4 + 0.5, 1.2 − 1) = (1.9, 0.2)
    delta, new_dual = make_admm_upload("increment", "local")(theta, w, w_tilde, dual, hp, 0.1)
    np.testing.assert_allclose(np.asarray(new_dual["w"]), [0.35, -0.7], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(delta["w"]), [1.0 - 1.9, 2.0 - 0.2], rtol=1e-6)
    # dual_from=perturbed: λ = λ⁻ + ρ(w̃ − θ) = (0.3, −0.6); u = w̃ + (w̃ − θ) = (1.8, 0.4)
    delta, new_dual = make_admm_upload("increment", "perturbed")(theta, w, w_tilde, dual, hp, 0.1)
    np.testing.assert_allclose(np.asarray(new_dual["w"]), [0.3, -0.6], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(delta["w"]), [1.0 - 1.8, 2.0 - 0.4], rtol=1e-6)


def test_fedadmm_server_ignores_unequal_client_weights():
    # FedADMM: θ ← θ − η_g (1/m) Σ Δ_i, whatever p_i (docs/algorithms.md §3); here p = (0.2, 0.8)
    theta = {"w": jnp.array([1.0, 1.0])}
    deltas = {"w": jnp.array([[1.0, 0.0], [0.0, 3.0]])}
    s_in = ServerIn(theta, deltas, jnp.array([0.2, 0.8]), jnp.zeros(2), jnp.float32(0.1), jnp.float32(0.5),
                    _hp(), 0, jnp.arange(2), ())
    new, _, _ = fedadmm().server(s_in)
    np.testing.assert_allclose(np.asarray(new["w"]), [1 - 0.5 * 0.5, 1 - 0.5 * 1.5], rtol=1e-6)


def test_gaussian_clipping_with_clip_not_one():
    clip = 4.0
    short = {"a": jnp.array([1.2, 0.0]), "b": jnp.array([[0.0, 1.6]])}  # ‖u‖ = 2 < 4: unchanged
    long = {"a": jnp.array([6.0, 0.0]), "b": jnp.array([[0.0, 8.0]])}   # ‖u‖ = 10: scaled by 0.4
    out = clip_global_norm(short, clip)
    np.testing.assert_allclose(np.asarray(out["a"]), [1.2, 0.0], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(out["b"]), [[0.0, 1.6]], rtol=1e-6)
    out = clip_global_norm(long, clip)
    np.testing.assert_allclose(np.asarray(out["a"]), [2.4, 0.0], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(out["b"]), [[0.0, 3.2]], rtol=1e-6)
    # the round's mechanism (w̃ = θ + clip(w − θ) + noise) with the clip from the hyper-parameters;
    # ε = 1e6: σ = 4·sqrt(2 ln(1.25e5))/1e6 ≈ 2e-5
    spec = RoundSpec(model=None, algorithm=None, num_clients=1, clients_per_round=1, epochs=1, batch_size=1,
                     layer_of=None, dp="gaussian")
    hp = _hp(clip=clip, epsilon=1e6)
    theta = {"a": jnp.array([1.0, 1.0]), "b": jnp.array([[1.0, 1.0]])}
    for u, want in ((short, [1.2, 0.0, 0.0, 1.6]), (long, [2.4, 0.0, 0.0, 3.2])):
        w = jax.tree_util.tree_map(jnp.add, theta, u)
        w_tilde = privatise(spec, jax.random.PRNGKey(0), theta, w, hp)
        got = np.concatenate([np.ravel(w_tilde["a"]), np.ravel(w_tilde["b"])]) - 1.0
        np.testing.assert_allclose(got, want, atol=2e-4)


# ---- the fair direction's merge (sim/fairness.py) ---------------------------------------------

@pytest.mark.parametrize("eps, merged", [(1e-3, True), (3e-2, False)])
def test_fair_direction_merges_a_nearly_zero_layer(eps, merged):
    # Layer 0: client rows (1, ε) and (−3, 3ε) = 3·(−1, ε): rescaled to their common norm μ, their hull's
    # minimum-norm point is μ·(0, ε)/sqrt(1+ε²), of norm about ε·μ. The docstring promises that float32 merges
    # blocks below about 3e-3·μ: ε = 1e-3 merges with layer 1, ε = 3e-2 stays a block of its own.
    # Layer 1: two rows 44° apart, far from the origin. Equal losses: no fair row (it is undefined).
    deltas = {"a": jnp.array([[1.0, eps], [-3.0, 3 * eps]], jnp.float32),
              "b": jnp.array([[1.0, 0.5, 0.0], [0.8, 0.0, 0.6]], jnp.float32)}
    d, info = fair_direction(deltas, jnp.array([1.0, 1.0]), layer_of={"a": 0, "b": 1})
    assert np.asarray(info["block_of_layer"]).tolist() == ([0, 0] if merged else [0, 1])
    assert int(info["num_blocks"]) == (1 if merged else 2)
    assert int(info["model_conflicts"]) == 0


# ---- local train/test split (problem/partitions.py) -------------------------------------------

def test_local_split_rounds_a_fraction_of_one_half_or_more_up():
    # iid and dirichlet (stratified split): 2 clients of 11 samples, train_frac 0.7: 7.7 → 8 train, 3 test
    y_train, y_test = np.arange(18) % 2, np.arange(4) % 2
    p = make_partition(y_train, y_test, 2, "iid", train_frac=0.7, seed=0)
    assert [len(t) for t in p.train_idx] == [8, 8] and [len(t) for t in p.test_idx] == [3, 3]
    # 7 samples, train_frac 0.5: 3.5 → 4 (round half up and half to even agree here)
    p = make_partition(np.arange(10) % 2, np.arange(4) % 2, 2, "iid", train_frac=0.5, seed=0)
    assert [len(t) for t in p.train_idx] == [4, 4] and [len(t) for t in p.test_idx] == [3, 3]
    # pat2 (FedLF's per-class split): each client holds one class of 11 samples: 7.7 → 8 train
    y_train, y_test = np.repeat([0, 1], 9), np.repeat([0, 1], 2)
    p = make_partition(y_train, y_test, 2, "pat2", train_frac=0.7, seed=0)
    assert [len(t) for t in p.train_idx] == [8, 8] and [len(t) for t in p.test_idx] == [3, 3]


# ---- full participation --------------------------------------------------------------------

def test_full_participation_runs(tmp_path):
    # clients_per_round == clients, through the command line (its validation) and the whole run loop
    from fedalf_jax.cli import main
    out = tmp_path / "full"
    assert main(["run", "--dataset", "synthetic", "--model", "mlp", "--clients", "4", "--clients-per-round", "4",
                 "--synthetic-train", "300", "--synthetic-test", "80", "--batch-size", "25", "--rounds", "2",
                 "--eval-every", "2", "--algorithm", "fedadmm", "--no-progress", "--out", str(out)]) == 0
    m = RunDir(out).metrics()
    assert list(m["round"]) == [0, 2] and np.all(np.isfinite(m["mean_acc"])) and np.all(np.isfinite(m["test_loss"]))
    assert m["mean_acc"][-1] != m["mean_acc"][0]  # the model moved
    assert RunDir(out).status() == "done"
    # every round samples every client, once
    exp = build(Config(algorithm="fedadmm", dataset="synthetic", model="mlp", clients=4, clients_per_round=4,
                       synthetic_train=300, synthetic_test=80, batch_size=25))
    state = init_state(exp.spec, 0)
    sel_of = jax.jit(lambda r: client_phase(exp.spec, state._replace(round=r), exp.hp, exp.data)[0])
    for r in range(3):
        assert sorted(np.asarray(sel_of(jnp.int32(r))).tolist()) == [0, 1, 2, 3]


# ---- round 0's row (experiment/loop.py) ----------------------------------------------------------

def test_round_0_row_is_the_untrained_model_though_evaluated_after_the_first_chunk(tmp_path):
    # The loop runs the first chunk before it evaluates round 0 (the round-0 train loss is a pass over
    # every training sample). Row 0 must still be the initial model's, computed here by hand: the
    # model applied to each client's own examples, plain NumPy cross-entropy and accuracy.
    cfg = Config(**{**SMALL, "algorithm": "fedadmm", "out": str(tmp_path / "r")})
    run(cfg, progress=False)
    m = RunDir(tmp_path / "r").metrics()
    assert list(m["round"]) == [0, 1, 2]
    exp = build(cfg.replace(out=None))
    variables = init_state(exp.spec, cfg.seed).variables
    x, y = np.asarray(exp.data.x), np.asarray(exp.data.y)

    def by_hand(idx, n):
        acc, loss = [], []
        for i in range(cfg.clients):
            rows = np.asarray(idx[i])[:int(n[i])]
            logits = np.asarray(exp.spec.model.apply(variables, x[rows])[0], np.float64)
            logp = logits - logits.max(1, keepdims=True)
            logp -= np.log(np.exp(logp).sum(1, keepdims=True))
            loss.append(-logp[np.arange(len(rows)), y[rows]].mean())
            acc.append(np.mean(logits.argmax(1) == y[rows]))
        return np.array(acc), np.array(loss)

    acc, test_loss = by_hand(exp.data.test_idx, exp.data.test_n)
    _, train_loss = by_hand(exp.data.train_idx, exp.data.train_n)
    got = np.array([m[f"acc_{i}"][0] for i in range(cfg.clients)])
    np.testing.assert_allclose(got, acc, atol=1e-6)
    np.testing.assert_allclose([m["test_loss"][0], m["train_loss"][0]], [test_loss.mean(), train_loss.mean()],
                               rtol=1e-5)
    assert not np.allclose([m[f"acc_{i}"][1] for i in range(cfg.clients)], acc)  # row 1: the model moved


# ---- resume and extension, checkpoints (experiment/loop.py, rundir.py) --------------------------

RESUME = dict(SMALL, algorithm="fedadmm", eval_every=2, checkpoint_every="1")


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """A run of 3 rounds with --eval-every 2 (evaluations 0, 2 and its end, 3), extended to 5 rounds."""
    root = tmp_path_factory.mktemp("resume")
    part = Config(**{**RESUME, "rounds": 3, "out": str(root / "part")})
    run(part, progress=False)
    first = list(RunDir(root / "part").metrics()["round"])
    run(part.replace(rounds=5), progress=False, resume=True)
    return part.replace(rounds=5), first, RunDir(root / "part")


def test_extension_from_a_round_off_the_eval_grid_evaluates_where_the_whole_run_does(resumed):
    _, first, part = resumed
    assert first == [0, 2, 3]
    # A 5-round run evaluates at 0, 2, 4 (the multiples of 2) and 5 (its end). The extended run keeps its
    # rows up to 3 and then evaluates where the 5-round run does: 4, not 3 + 2 = 5 only.
    assert list(part.metrics()["round"]) == [0, 2, 3, 4, 5]
    # (that the metrics of a resumed run equal the uninterrupted run's: tests/test_run.py, tests/test_sweep.py)


def test_load_checkpoint_returns_the_round_asked_for(resumed):
    cfg, _, part = resumed
    assert set(part.checkpoint_rounds()) == {4, 5}
    exp = build(cfg.replace(out=None))
    init = init_state(exp.spec, cfg.seed)
    like = jax.eval_shape(lambda: init)
    got = part.load_checkpoint(like, round=4)
    assert int(got.round) == 4
    last = part.load_checkpoint(like)
    assert int(last.round) == 5
    # round 4's state, computed here without any checkpoint
    want, _ = jax.jit(lambda s: run_rounds(exp.spec, s, exp.hp, exp.data, 4))(init)
    for x, y, z in zip(jax.tree_util.tree_leaves((got.variables, got.client_states)),
                       jax.tree_util.tree_leaves((want.variables, want.client_states)),
                       jax.tree_util.tree_leaves((last.variables, last.client_states))):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)
    moved = [np.abs(np.asarray(x) - np.asarray(z)).max() for x, z in zip(
        jax.tree_util.tree_leaves(got.variables), jax.tree_util.tree_leaves(last.variables))]
    assert max(moved) > 1e-4  # round 5's state is another one


# ---- fedalf report (fedalf_jax/reporting/) -------------------------------------------------------

def test_report_eta_tie_goes_to_the_smaller_eta(tmp_path):
    # two η with exactly the same seed-mean final accuracy; the larger η comes first by name
    for eta, prefix in ((0.1, "a"), (0.05, "b")):
        for seed, acc in enumerate([0.80, 0.84]):
            make_run(tmp_path / "runs", f"{prefix}_lr{eta}_s{seed}", final_acc=acc, final_angle=5.0,
                     algorithm="fedavg", lr=eta, seed=seed)
    res = report([str(tmp_path / "runs")], str(tmp_path / "out"), last=2)
    (row,) = res["rows"]
    assert row["eta"] == 0.05 and row["seeds"] == 2
    assert row["final_acc_mean"] == pytest.approx(0.82, abs=1e-12)


@pytest.mark.parametrize("last", [4, 5, 6])
def test_report_last_k_mean_uses_the_last_k_evaluations(tmp_path, last):
    # 6 evaluations (rounds 0, 10, ..., 50; not 2K of them); acc = final + ACC_SWING, angle = final + ANGLE_SWING
    finals = [0.70, 0.74]
    for seed, acc in enumerate(finals):
        make_run(tmp_path / "runs", f"r{seed}", final_acc=acc, final_angle=10.0 + seed, algorithm="fedavg",
                 seed=seed)
    res = report([str(tmp_path / "runs")], str(tmp_path / "out"), last=last)
    (row,) = res["rows"]
    # by hand: the mean swing over the last K evaluations after round 0 (round 0 is the untrained model)
    acc_swing = {4: (-0.05 + 0.03 - 0.02 + 0.0) / 4, 5: (-0.2 - 0.05 + 0.03 - 0.02 + 0.0) / 5}
    angle_swing = {4: (5.0 - 1.0 + 2.0 + 0.0) / 4, 5: (10.0 + 5.0 - 1.0 + 2.0 + 0.0) / 5}
    k = min(last, 5)  # only 5 evaluations after round 0
    assert acc_swing[k] == pytest.approx(np.mean(ACC_SWING[-k:]))  # the fixture's numbers, read twice
    assert angle_swing[k] == pytest.approx(np.mean(ANGLE_SWING[-k:]))
    assert row["lastK_acc_mean"] == pytest.approx(np.mean(finals) + acc_swing[k], abs=1e-12)
    assert row["lastK_angle_mean"] == pytest.approx(10.5 + angle_swing[k], abs=1e-12)
    short = [msg for msg in res["messages"] if f"fewer than {last} evaluations" in msg]
    md = Path(res["markdown"]).read_text()
    if last <= 5:
        assert not short
    else:  # fewer than K evaluations: said so, in the messages and in report.md
        assert len(short) == 1 and "r0" in short[0] and "r1" in short[0] and "5 evaluations" in short[0], short
        assert short[0] in md
