"""The Python API (``import fedalf_jax as fj``) and its extension points, as a user uses them: a user-written
FedAvg equals the built-in bit for bit; examples/feddyn.py (per-client and server state) against a round
computed by hand in float64; a user's flax module and arrays with explicit client lists; clear errors
for bad shapes; run → load round trip; the CLI with ``module:attribute``."""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedalf_jax as fj

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # examples/ is not a package on the path under the console script `pytest`
from examples.feddyn import feddyn  # noqa: E402
TINY = dict(dataset="synthetic", model="mlp", clients=6, clients_per_round=3, rounds=2, eval_every=1,
            synthetic_train=240, synthetic_test=60, batch_size=20)


# ---- a FedAvg written by a user, from the public names only ------------------------------------------

def user_fedavg():
    def upload(theta, w, w_tilde, state, hp, lr_t):
        return jax.tree_util.tree_map(lambda t, u: t - u, theta, w_tilde), state

    def server(s: fj.ServerIn):
        step = jax.tree_util.tree_map(lambda d: jnp.tensordot(s.weights, d, axes=1), s.deltas)
        return jax.tree_util.tree_map(lambda t, d: t - s.server_lr_t * d, s.theta, step), s.sstate, {}

    return fj.Algorithm("my_fedavg", server=server, upload=upload, private_upload=True)


def test_public_names_are_the_api():
    for name in ("Config", "run", "sweep", "load", "report", "register_algorithm", "register_model",
                 "register_dataset", "Algorithm", "ServerIn", "fair_direction", "fairness_angle"):
        assert name in fj.__all__ and getattr(fj, name).__doc__
    for shim in ("fairness", "qp", "metrics", "privacy"):  # replaced by the API
        assert not (ROOT / "fedalf_jax" / f"{shim}.py").exists()


def test_user_fedavg_equals_the_builtin_bit_for_bit(tmp_path):
    fj.register_algorithm("my_fedavg", user_fedavg)
    mine = fj.run(algorithm="my_fedavg", progress=False, out=str(tmp_path / "mine"), **TINY)
    builtin = fj.run(algorithm="fedavg", progress=False, **TINY)
    cols = [c for c in builtin.metrics.columns if c != "seconds_per_round"]
    assert mine.metrics[cols].equals(builtin.metrics[cols])
    for a, b in zip(jax.tree_util.tree_leaves(mine.model), jax.tree_util.tree_leaves(builtin.model)):
        np.testing.assert_array_equal(a, b)
    saved = json.loads((tmp_path / "mine" / "config.json").read_text())
    assert saved["algorithm"] == "my_fedavg"
    # the run reads back: same metrics, and the model from its checkpoint
    back = fj.load(tmp_path / "mine")
    assert back.status == "done" and back.metrics[cols].equals(mine.metrics[cols])
    for a, b in zip(jax.tree_util.tree_leaves(back.model), jax.tree_util.tree_leaves(mine.model)):
        np.testing.assert_array_equal(a, b)


# ---- FedDyn against a hand-computed round -------------------------------------------------------------

from helpers import Bias  # noqa: E402 - logits = one bias vector b for every example (a user's plain module)


TRAIN_LABELS = [[0, 0, 1], [1, 2], [2, 2, 2, 0]]
TEST_LABELS = [[0, 1], [2], [2, 0, 0]]


def _register_bias_data(name="three_clients"):
    y_train = np.concatenate(TRAIN_LABELS)
    y_test = np.concatenate(TEST_LABELS)
    starts = np.cumsum([0] + [len(t) for t in TRAIN_LABELS])
    tstarts = np.cumsum([0] + [len(t) for t in TEST_LABELS])
    clients = ([np.arange(starts[i], starts[i + 1]) for i in range(3)],
               [np.arange(tstarts[i], tstarts[i + 1]) for i in range(3)])
    x_train = np.zeros((len(y_train), 2), np.float32)
    x_test = np.zeros((len(y_test), 2), np.float32)
    fj.register_dataset(name, x_train, y_train, x_test, y_test, num_classes=3, clients=clients)
    fj.register_model("bias", Bias)


def _feddyn_by_hand(rounds, lr, alpha):
    """Every client sampled, one full-batch SGD step each: w_i = θ − η(softmax θ − p_i − g_i)."""
    p = [np.bincount(t, minlength=3) / len(t) for t in TRAIN_LABELS]
    theta, h, g = np.zeros(3), np.zeros(3), [np.zeros(3) for _ in range(3)]
    n = 3
    for _ in range(rounds):
        sm = np.exp(theta) / np.exp(theta).sum()
        deltas = [lr * (sm - p[i] - g[i]) for i in range(3)]   # Δ_i = θ − w_i
        g = [g[i] + alpha * deltas[i] for i in range(3)]         # g_i − α(w_i − θ)
        h = h + alpha / n * sum(deltas)
        theta = theta - sum(deltas) / 3 - h / alpha
    return theta, g, h


def test_feddyn_example_matches_a_round_computed_by_hand(tmp_path):
    _register_bias_data()
    fj.register_algorithm("feddyn", feddyn)
    lr, alpha = 0.5, 0.25
    cfg = fj.Config(algorithm="feddyn", dataset="three_clients", partition="given", model="bias", clients=3,
                    clients_per_round=3, rounds=2, eval_every=1, local_epochs=1, batch_size=4, lr=lr, lr_decay=1.0,
                    mu=alpha, out=str(tmp_path / "dyn"))
    res = fj.run(cfg, progress=False)
    theta, g, h = _feddyn_by_hand(2, lr, alpha)
    np.testing.assert_allclose(np.asarray(res.model["params"]["b"]), theta, rtol=0, atol=1e-6)
    assert not np.allclose(theta, 0)
    # each client's accuracy: its test labels equal to argmax θ
    want = [np.mean(np.asarray(t) == np.argmax(theta)) for t in TEST_LABELS]
    np.testing.assert_allclose(res.metrics[["acc_0", "acc_1", "acc_2"]].iloc[-1].to_numpy(), want)
    # the per-client state (g_i) lives in the checkpoint's client_states, row per client
    from fedalf_jax.experiment.build import load_pool, make_spec
    from fedalf_jax.experiment.rundir import RunDir
    from fedalf_jax.sim.round import init_state
    state = RunDir(tmp_path / "dyn").load_checkpoint(init_state(make_spec(cfg, load_pool(cfg)), 0))
    np.testing.assert_allclose(np.asarray(state.client_states["b"]), np.stack(g), rtol=0, atol=1e-6)
    np.testing.assert_allclose(np.asarray(state.sstate["b"]), h, rtol=0, atol=1e-6)


# ---- a user's data: one clear error per mismatch ----------------------------------------------------

@pytest.mark.parametrize("change, match", [
    (dict(y_train=np.zeros(5, int)), "x_train has 6 examples but y_train has 5 labels"),
    (dict(x_test=np.zeros((3, 4), np.float32)), r"x_train's examples have shape \(2,\) but x_test's have \(4,\)"),
    (dict(y_test=np.array([0, 1, 3])), "y_test has the label 3 but num_classes is 3"),
    (dict(clients=([[0, 1, 6]], [[0]])), r"client 0's train rows index 0..5 \(x_train has 6 examples\), got 0..6"),
    (dict(clients=([[0, 1]], [[0], [1]])), "1 train lists but 2 test lists"),
])
def test_bad_user_data_says_what_does_not_match(change, match):
    args = dict(x_train=np.zeros((6, 2), np.float32), y_train=np.array([0, 1, 2, 0, 1, 2]),
                x_test=np.zeros((3, 2), np.float32), y_test=np.array([0, 1, 2]), num_classes=3)
    args.update(change)
    with pytest.raises(ValueError, match=match):
        fj.register_dataset("bad", **args)


def test_user_model_of_the_wrong_width_and_wrong_client_count_are_config_errors():
    _register_bias_data()
    fj.register_model("four_logits", lambda: Bias(num_classes=4))
    cfg = fj.Config(algorithm="fedavg", dataset="three_clients", partition="given", model="four_logits", clients=3,
                    clients_per_round=3, rounds=1)
    with pytest.raises(fj.ConfigError, match=r"maps a batch of 2 examples to \(2, 4\).*3 classes"):
        fj.run(cfg, progress=False)
    with pytest.raises(fj.ConfigError, match="gives 3 clients' lists but clients is 5; set clients=3"):
        fj.Config(dataset="three_clients", partition="given", model="bias", clients=5, clients_per_round=3)
    with pytest.raises(fj.ConfigError, match="unknown algorithm 'nope'.*register_algorithm"):
        fj.Config(algorithm="nope")
    with pytest.raises(fj.ConfigError, match="cannot import module 'no_such_module'"):
        fj.Config(algorithm="no_such_module:alg")


def test_a_user_algorithms_privacy_statement():
    """config.json's privacy block for a user's algorithm follows what it declares (written out by hand)."""
    import dataclasses
    mech = ["|δ| = |w − c| of every weight", "each tensor's centre c and radius r"]
    n_i = "the sample count n_i, if its server uses ServerIn.weights or ServerIn.n"
    fj.register_algorithm("declared_private", user_fedavg)
    p = fj.Config(algorithm="declared_private", ldp="adaptive").privacy
    assert p["guarantee"] == "holds" and p["not_covered"] == [*mech, n_i]
    undeclared = dataclasses.replace(user_fedavg(), private_upload=False, needs_loss=True)
    fj.register_algorithm("undeclared", undeclared)
    p = fj.Config(algorithm="undeclared", ldp="adaptive").privacy
    assert p["guarantee"] == "does not hold" and "private_upload=True" in p["why"]
    assert p["not_covered"] == [*mech, "the loss l_i = f_i(θ_t)", n_i]

    def needs_layers(layer_of):  # cannot be built before the model is: nothing is claimed for it
        if layer_of is None:
            raise ValueError("needs the model's layers")
        return user_fedavg()
    fj.register_algorithm("needs_layers", needs_layers)
    p = fj.Config(algorithm="needs_layers", ldp="adaptive").privacy
    assert p["guarantee"] == "does not hold"
    assert p["not_covered"] == [*mech, "the loss l_i = f_i(θ_t), if its server uses it", n_i]
    fj.register_algorithm("declared_private", undeclared)  # registered again: the new one is read
    assert fj.Config(algorithm="declared_private", ldp="adaptive").privacy["guarantee"] == "does not hold"


def test_resume_refuses_other_arrays_under_the_same_name(tmp_path):
    _register_bias_data("swapped")
    cfg = fj.Config(algorithm="fedavg", dataset="swapped", partition="given", model="bias", clients=3,
                    clients_per_round=3, rounds=1, eval_every=1, out=str(tmp_path / "r"))
    fj.run(cfg, progress=False)
    y = np.concatenate(TRAIN_LABELS)[::-1].copy()
    tr = ([np.arange(0, 3), np.arange(3, 5), np.arange(5, 9)], [np.arange(0, 2), np.arange(2, 3), np.arange(3, 6)])
    fj.register_dataset("swapped", np.zeros((9, 2), np.float32), y, np.zeros((6, 2), np.float32),
                        np.concatenate(TEST_LABELS), num_classes=3, clients=tr)
    with pytest.raises(fj.ConfigError, match="dataset_digest"):
        fj.run(cfg.replace(rounds=2), progress=False, resume=True)


# ---- the CLI runs a module:attribute algorithm --------------------------------------------------------

def test_cli_runs_the_example_by_module_path(tmp_path):
    out = tmp_path / "cli"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cmd = [str(Path(sys.executable).parent / "fedalf"), "run", "--algorithm", "examples.feddyn:feddyn", "--dataset",
           "synthetic", "--model", "mlp", "--clients", "6", "--clients-per-round", "3", "--rounds", "2",
           "--eval-every", "1", "--synthetic-train", "240", "--synthetic-test", "60", "--batch-size", "20", "--no-progress", "--out", str(out)]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)  # as the README says
    assert p.returncode == 0, p.stderr
    assert json.loads((out / "config.json").read_text())["algorithm"] == "examples.feddyn:feddyn"
    assert json.loads((out / "summary.json").read_text())["status"] == "done"
    assert len(fj.load(out).metrics) == 3  # rounds 0, 1, 2


def test_sweep_vmaps_a_user_algorithm_as_its_single_runs(tmp_path, compile_cache):
    """fj.sweep runs a module:attribute algorithm's seeds in one vmapped program; each run equals its
    single run exactly, and fj.report tabulates it under its own name."""
    cfg = fj.Config(**{**TINY, "rounds": 2})
    s = fj.sweep(cfg, out=tmp_path / "s", grid={"algorithm": ["examples.feddyn:feddyn"]}, seeds=[0, 1],
                 progress=False)
    assert sorted(s.table["algorithm"]) == ["examples.feddyn:feddyn"] * 2
    assert set(s.table["status"]) == {"done"}
    dyn = next(r for r in s.runs if r.config.algorithm != "fedavg" and r.config.seed == 1)
    single = fj.run(cfg, algorithm="examples.feddyn:feddyn", seed=1, progress=False)
    np.testing.assert_array_equal(dyn.metrics["mean_acc"].to_numpy(), single.metrics["mean_acc"].to_numpy())
    for a, b in zip(jax.tree_util.tree_leaves(dyn.model), jax.tree_util.tree_leaves(single.model)):
        np.testing.assert_array_equal(a, b)
    rep = fj.report(tmp_path / "s", tmp_path / "rep")
    assert set(rep["table"]["algorithm"]) == {"examples.feddyn:feddyn"}


def test_feddyn_by_hand_with_fewer_clients_per_round_than_clients():
    """m = 2 of N = 4 identical clients, one round: h = (α/N)·mΔ, so θ_1 = −Δ(1 + m/N) whichever two
    are sampled (ServerIn.num_clients is N, not m)."""
    labels = [0, 0, 1, 2]
    y = np.array(labels * 4)
    lists = [np.arange(4 * i, 4 * i + 4) for i in range(4)]
    fj.register_dataset("four_same", np.zeros((16, 2), np.float32), y, np.zeros((16, 2), np.float32), y,
                        num_classes=3, clients=(lists, lists))
    fj.register_model("bias", Bias)
    fj.register_algorithm("feddyn", feddyn)
    lr, alpha = 0.5, 0.25
    res = fj.run(algorithm="feddyn", dataset="four_same", partition="given", model="bias", clients=4,
                 clients_per_round=2, rounds=1, eval_every=1, batch_size=4, lr=lr, lr_decay=1.0, mu=alpha,
                 progress=False)
    delta = lr * (np.full(3, 1 / 3) - np.bincount(labels, minlength=3) / 4)
    np.testing.assert_allclose(np.asarray(res.model["params"]["b"]), -delta * (1 + 2 / 4), rtol=0, atol=1e-7)
