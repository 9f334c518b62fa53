"""The compiled round and the run loop: vmap == sequential loop, reproducibility, resume, run directory."""

import csv
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedalf_jax.bench import make_sequential
from fedalf_jax.experiment.config import Config
from fedalf_jax.sim.fairness import module_layers
from fedalf_jax.sim.round import client_phase, init_state, run_rounds
from fedalf_jax.experiment.build import build
from fedalf_jax.experiment.loop import run

SMALL = dict(dataset="synthetic", model="mlp", clients=8, clients_per_round=3, synthetic_train=600,
             synthetic_test=160, batch_size=20, rounds=4, eval_every=2)


@pytest.mark.parametrize("algorithm, client_map", [("fedadmm", "vmap"), ("fedprox", "map")])
def test_compiled_round_equals_sequential_client_loop(algorithm, client_map):
    cfg = Config(algorithm=algorithm, client_map=client_map, **SMALL)
    exp = build(cfg)
    state = init_state(exp.spec, cfg.seed)
    seq = make_sequential(exp.spec)
    s_seq, s_vec = state, state
    for _ in range(2):  # two rounds: the second uses the duals scattered by the first
        s_seq, _ = seq(s_seq, exp.hp, exp.data)
    s_vec, _ = jax.jit(lambda s, h, d: run_rounds(exp.spec, s, h, d, 2))(s_vec, exp.hp, exp.data)
    for a, b in zip(jax.tree_util.tree_leaves(s_seq), jax.tree_util.tree_leaves(s_vec)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)
    if algorithm == "fedadmm":  # exactly the sampled clients' duals moved
        moved = np.asarray(jax.tree_util.tree_leaves(s_vec.client_states)[0]).reshape(cfg.clients, -1)
        assert 3 <= int(np.sum(np.abs(moved).sum(1) > 0)) <= 6
        assert s_vec.duals is s_vec.client_states  # the 0.1 name still reads the same rows


def _metrics(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_same_seed_same_metrics_and_run_directory(tmp_path, compile_cache):
    cfg = Config(algorithm="fedavg", out=str(tmp_path / "a"), **SMALL)
    rows1 = run(cfg, progress=False)
    rows2 = run(cfg.replace(out=str(tmp_path / "b")), progress=False)
    assert [r["round"] for r in rows1] == [0, 2, 4]
    for r1, r2 in zip(rows1, rows2):
        np.testing.assert_array_equal(r1["acc"], r2["acc"])
        assert r1["test_loss"] == r2["test_loss"]
        np.testing.assert_equal(r1["train_loss"], r2["train_loss"])
    # the train loss is computed on its own cadence (train_loss_every=50) and at the first and last rows
    assert np.isfinite(rows1[0]["train_loss"]) and np.isnan(rows1[1]["train_loss"])
    assert np.isfinite(rows1[-1]["train_loss"])
    other = run(cfg.replace(out=None, seed=1), progress=False)
    assert not np.array_equal(other[-1]["acc"], rows1[-1]["acc"]) or other[-1]["train_loss"] != rows1[-1]["train_loss"]
    d = tmp_path / "a"
    saved = json.loads((d / "config.json").read_text())
    assert Config.from_dict(saved) == cfg
    m = _metrics(d / "metrics.csv")
    assert list(m[0])[:3] == ["round", "mean_acc", "angle"]
    assert [f"acc_{i}" for i in range(8)] == [k for k in m[0] if k.startswith("acc_")]
    accs = np.array([float(m[-1][f"acc_{i}"]) for i in range(8)])
    assert float(m[-1]["mean_acc"]) == pytest.approx(accs.mean(), abs=1e-6)
    clients = json.loads((d / "clients.json").read_text())["clients"]
    assert len(clients) == 8 and all(len(c["classes"]) == 2 for c in clients)  # pat1


def test_resume_equals_uninterrupted(tmp_path, compile_cache):
    full = Config(algorithm="fedadmm", out=str(tmp_path / "full"), **SMALL)
    run(full, progress=False)
    part = full.replace(out=str(tmp_path / "part"), rounds=2)
    run(part, progress=False)
    run(part.replace(rounds=4), progress=False, resume=True)
    a, b = _metrics(tmp_path / "full" / "metrics.csv"), _metrics(tmp_path / "part" / "metrics.csv")
    assert [r["round"] for r in b] == ["0", "2", "4"]
    for ra, rb in zip(a, b):
        for k in ra:
            if k.startswith("acc_") or k in ("mean_acc", "angle", "test_loss"):
                assert ra[k] == rb[k], k
        # the interrupted run also took the train loss at its last round (2); where both have it, it agrees
        if ra["train_loss"] != "nan":
            assert ra["train_loss"] == rb["train_loss"]


def test_synthetic_run_learns():
    rows = run(Config(algorithm="fedavg", partition="iid", **{**SMALL, "rounds": 12, "eval_every": 12}),
               progress=False)
    assert rows[-1]["mean_acc"] > 0.5 > rows[0]["mean_acc"]


def _round_params(cfg, rounds=1):
    exp = build(cfg)
    state = init_state(exp.spec, cfg.seed)
    state, m = jax.jit(lambda s, h, d: run_rounds(exp.spec, s, h, d, rounds))(state, exp.hp, exp.data)
    return state, jax.device_get(m)


def test_fair_algorithms_run_compiled_without_conflicts():
    for alg, extra in (("fedalf", {}), ("fedlf", {"history": True})):
        state, m = _round_params(Config(algorithm=alg, **{**SMALL, **extra}), rounds=3)
        leaves = jax.tree_util.tree_leaves(state.variables)
        assert all(np.isfinite(np.asarray(x)).all() for x in leaves), alg
        # the fair direction is a convex combination in the dual: no client's Δ opposes it
        assert np.all(m["model_conflicts"] == 0), (alg, m["model_conflicts"])
        assert np.all(m["qp_blocks"] >= 1)
        assert np.all(np.isfinite(m["client_loss"]))
    hist, last, gram = state.sstate  # fedlf's history: the sampled clients' slots were filled
    last = np.asarray(last)
    assert 3 <= np.sum(last >= 0) <= 8 and last.max() == 2
    # the history Gram kept across rounds equals the one recomputed from the stored rows
    ids = jax.tree_util.tree_leaves(module_layers(state.variables["params"]))
    ref = np.zeros(gram.shape)
    for leaf, k in zip(jax.tree_util.tree_leaves(hist), ids):
        x = np.asarray(leaf, np.float64).reshape(leaf.shape[0], -1)
        ref[k] += x @ x.T
    np.testing.assert_allclose(np.asarray(gram), ref, rtol=1e-4, atol=1e-6 * np.abs(ref).max())


def test_privacy_in_the_round():
    # the paper's reading (noise on the weights, the increment upload, the raw length), which a private
    # run no longer gets by default (tests/test_private_fedalf.py)
    # (history off and the pgd QP only make the five programs quicker to compile)
    base = Config(algorithm="fedalf", ldp_on="weights", fair_norm="raw", server_target="increment", server_lr=0.5,
                  history=False, qp_method="pgd", **SMALL)
    plain, _ = _round_params(base)
    # ε → ∞: the adaptive mechanism keeps every sign and k → 1, so LDP-FedALF equals FedALF
    loose, _ = _round_params(base.replace(ldp="adaptive", epsilon=60.0))
    # ε = 2 (the dual from the local model, as the paper): the noise moves the model
    dl, _ = _round_params(base.replace(ldp="adaptive", epsilon=2.0, dual_from="local"))
    a = np.concatenate([np.ravel(x) for x in jax.tree_util.tree_leaves(plain.variables)])
    b = np.concatenate([np.ravel(x) for x in jax.tree_util.tree_leaves(loose.variables)])
    c = np.concatenate([np.ravel(x) for x in jax.tree_util.tree_leaves(dl.variables)])
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert np.abs(a - c).max() > 1e-3
    # dual_from: the local dual ignores the noise, the perturbed one includes it
    dp, _ = _round_params(base.replace(ldp="adaptive", dual_from="perturbed"))
    nl = np.abs(np.asarray(jax.tree_util.tree_leaves(dl.client_states)[0])).sum()
    npb = np.abs(np.asarray(jax.tree_util.tree_leaves(dp.client_states)[0])).sum()
    assert npb > 1.2 * nl > 0  # the LDP noise (variance δ²(k²−1)) is in the perturbed dual only
    # Gaussian DP with a huge budget and clip adds (almost) nothing
    g, _ = _round_params(base.replace(dp="gaussian", epsilon=1e8, clip=100.0, delta=0.5))  # σ ≈ 1.4e-6
    d = np.concatenate([np.ravel(x) for x in jax.tree_util.tree_leaves(g.variables)])
    np.testing.assert_allclose(a, d, rtol=1e-3, atol=1e-4)


@pytest.mark.skipif(not __import__("os").path.exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"),
                    reason="Debian's dataset-fashion-mnist is not installed")
def test_real_fashion_mnist_small_run():
    cfg = Config(algorithm="fedavg", dataset="fmnist", model="mlp", partition="iid", clients=20,
                 clients_per_round=5, rounds=2, eval_every=2, lr=0.1)
    rows = run(cfg, progress=False)
    assert rows[0]["mean_acc"] < 0.3 and rows[-1]["mean_acc"] > 0.6


def test_run_vmaps_over_hyperparameters_and_seeds():
    """Numeric hyper-parameters are traced and the state is a pytree: one program runs a sweep."""
    cfg = Config(algorithm="fedprox", **SMALL)
    exp = build(cfg)
    lrs = jnp.array([0.02, 0.2])
    hps = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (2,)),
                                 exp.hp._replace(lr=lrs, mu=jnp.array([0.0, 0.1])))
    states = jax.vmap(lambda s: init_state(exp.spec, 0)._replace(key=jax.random.PRNGKey(s)))(jnp.arange(2))
    swept, _ = jax.jit(jax.vmap(lambda s, h: run_rounds(exp.spec, s, h, exp.data, 2)))(states, hps)
    for i in range(2):
        one = init_state(exp.spec, 0)._replace(key=jax.random.PRNGKey(i))
        ref, _ = jax.jit(lambda s, h: run_rounds(exp.spec, s, h, exp.data, 2))(
            one, exp.hp._replace(lr=lrs[i], mu=jnp.array([0.0, 0.1])[i]))
        for a, b in zip(jax.tree_util.tree_leaves(ref.variables), jax.tree_util.tree_leaves(swept.variables)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b)[i], rtol=1e-4, atol=1e-5)


def test_gaussian_neighbouring_relation_reaches_the_round():
    # lr ≈ 0 and a clip far above the update: Δ_i = θ − w̃_i is the Gaussian noise alone (σ per entry);
    # "replace" doubles the sensitivity, hence σ
    base = Config(algorithm="fedavg", dp="gaussian", epsilon=0.5, delta=1e-5, clip=0.01, lr=1e-9, **SMALL)
    stds = {}
    for rel in ("add_remove", "replace"):
        exp = build(base.replace(neighbouring=rel))
        state = init_state(exp.spec, 0)
        _, _, outs = jax.jit(lambda s: client_phase(exp.spec, s, exp.hp, exp.data))(state)
        x = np.concatenate([np.asarray(v).ravel() for v in jax.tree_util.tree_leaves(outs.delta)])
        stds[rel] = x.std()
    sigma = 0.01 * np.sqrt(2 * np.log(1.25 / 1e-5)) / 0.5
    assert abs(stds["add_remove"] / sigma - 1) < 0.01 and abs(stds["replace"] / (2 * sigma) - 1) < 0.01


def test_private_runs_say_what_they_guarantee(tmp_path):
    import warnings as W
    from fedalf_jax.experiment.config import ConfigError
    with pytest.raises(ConfigError, match="batch-norm statistics"):
        Config(model="cnn_bn", ldp="adaptive").validated()
    # the dual leaks only where the upload carries it: not for server_target="model"
    for target, leaks in (("model", False), ("increment", True), ("augmented", True)):
        with W.catch_warnings(record=True) as rec:
            W.simplefilter("always")
            build(Config(algorithm="fedalf", ldp="adaptive", server_target=target, **SMALL))
        assert any("dual_from=local" in str(r.message) for r in rec) == leaks, target
    out = tmp_path / "dp"
    run(Config(algorithm="fedavg", dp="gaussian", epsilon=2.0, out=str(out), **{**SMALL, "rounds": 2}), progress=False)
    summary = json.loads((out / "summary.json").read_text())
    priv = summary["privacy"]
    assert priv["epsilon_nominal"] == 2.0 and priv["epsilon_exact"] == pytest.approx(1.61, abs=0.005)
    # the privacy spent over the run (privacy/accounting.py): q = 3/8, 2 rounds, so ⌈0.75⌉ = 1 upload
    # expected, but seed 0 samples clients 4 and 5 in both rounds: the headline is at 2 uploads
    spent = summary["privacy_spent"]
    assert spent["mechanism"] == "gaussian" and spent["rounds"] == 2 and spent["participation_rate"] == 3 / 8
    assert spent["participations"] == 2 and spent["participations_expected"] == 1
    assert spent["epsilon_expected"] == pytest.approx(1.61, abs=0.005) and spent["delta"] == 1e-5
    assert spent["epsilon"] > spent["epsilon_expected"]


def test_bfloat16_state_storage_halves_the_per_client_rows_and_resumes(tmp_path, compile_cache):
    cfg = Config(algorithm="fedalf", history=True, **SMALL)
    f32 = init_state(build(cfg).spec, 0)
    b16 = init_state(build(cfg.replace(state_dtype="bfloat16")).spec, 0)
    nbytes = lambda t: sum(x.nbytes for x in jax.tree_util.tree_leaves(t))  # noqa: E731
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree_util.tree_leaves((b16.client_states, b16.sstate[0])))
    assert nbytes((b16.client_states, b16.sstate[0])) * 2 == nbytes((f32.client_states, f32.sstate[0]))
    assert b16.sstate[2].dtype == jnp.float32  # the history Gram stays float32
    full = run(cfg.replace(state_dtype="bfloat16", out=str(tmp_path / "full")), progress=False)
    part = cfg.replace(state_dtype="bfloat16", out=str(tmp_path / "part"), rounds=2)
    run(part, progress=False)
    resumed = run(part.replace(rounds=4), progress=False, resume=True)
    np.testing.assert_array_equal(full[-1]["acc"], resumed[-1]["acc"])
    ref = run(cfg, progress=False)  # float32 rows: close after a few rounds (bfloat16 keeps ~3 digits)
    assert abs(ref[-1]["mean_acc"] - full[-1]["mean_acc"]) < 0.1
