"""The algorithm contract beyond θ and Δ_i (issue #28 items 1, 2, 3, 7, 8, 9): the server's broadcast, the
clients' auxiliary uploads and their facts (n_i, local steps), the algorithm's own metrics, one-line
errors naming the culprit, and the SCAFFOLD and FedNova examples against rounds computed by hand."""

import csv
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedalf_jax as fj

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # examples/ is not a package on the path under the console script `pytest`
from examples.fednova import fednova  # noqa: E402
from examples.scaffold import scaffold  # noqa: E402

LABELS = [0, 1, 2]       # client i's examples all have label i (so every minibatch has the same gradient)
COUNTS = [3, 2, 5]       # n_i
B = 2                    # batch size: τ_i = ⌈n_i / 2⌉ = 2, 1, 3 local steps in one epoch
TAU = [2, 1, 3]


# Bias: logits = one bias vector b for every example: f_i(b) = logsumexp(b) − b_{y_i}, ∇f_i = softmax(b) − e_{y_i}
from helpers import Bias, cli_resume_equals_one_go  # noqa: E402


def _register():
    y = np.concatenate([[c] * k for c, k in zip(LABELS, COUNTS)])
    starts = np.cumsum([0] + COUNTS)
    lists = [np.arange(starts[i], starts[i + 1]) for i in range(3)]
    fj.register_dataset("one_label_each", np.zeros((len(y), 2), np.float32), y, np.zeros((len(y), 2), np.float32), y,
                        num_classes=3, clients=(lists, lists))
    fj.register_model("bias3", Bias)


def _cfg(algorithm, **kw):
    _register()
    base = dict(algorithm=algorithm, dataset="one_label_each", partition="given", model="bias3", clients=3,
                clients_per_round=3, rounds=2, eval_every=1, local_epochs=1, batch_size=B, lr=0.5, lr_decay=1.0,
                server_lr=1.0)
    return fj.Config(**{**base, **kw})


def _softmax(b):
    e = np.exp(b - b.max())
    return e / e.sum()


def _local(theta, i, lr, correction=0.0):
    """Client i's τ_i SGD steps on f_i(w) + ⟨correction, w⟩, in float64."""
    w = theta.copy()
    for _ in range(TAU[i]):
        w -= lr * (_softmax(w) - np.eye(3)[LABELS[i]] + correction)
    return w


def _metrics_csv(path):
    with open(path / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


# ---- item 9: SCAFFOLD and FedNova against rounds computed by hand -------------------------------------

def _scaffold_by_hand(rounds, lr, glr):
    theta, c, ci = np.zeros(3), np.zeros(3), [np.zeros(3) for _ in range(3)]
    norms = []
    for _ in range(rounds):
        deltas, dcs = [], []
        for i in range(3):
            w = _local(theta, i, lr, c - ci[i])
            d = theta - w
            dc = -c + d / (TAU[i] * lr)             # c_i⁺ − c_i, option II
            ci[i] = ci[i] + dc
            deltas.append(d)
            dcs.append(dc)
        theta = theta - glr * np.mean(deltas, axis=0)
        c = c + np.sum(dcs, axis=0) / 3             # (m/N) mean Δc_i, m = N = 3
        norms.append(np.linalg.norm(c))
    return theta, c, ci, norms


def test_scaffold_example_matches_two_rounds_computed_by_hand(tmp_path):
    lr, glr = 0.5, 0.8
    cfg = _cfg("examples.scaffold:scaffold", lr=lr, server_lr=glr, out=str(tmp_path / "s"))
    res = fj.run(cfg, progress=False)
    theta, c, ci, norms = _scaffold_by_hand(2, lr, glr)
    assert np.abs(c).max() > 0.02 and np.abs(ci[1] - ci[2]).max() > 0.02  # the control variates do something
    np.testing.assert_allclose(np.asarray(res.model["params"]["b"]), theta, rtol=0, atol=2e-6)
    chex.assert_trees_all_close(res.server_state, {"b": c}, atol=2e-6)             # c: the server state
    chex.assert_trees_all_close(res.client_states, {"b": np.stack(ci)}, atol=2e-6)  # c_i: each client's state
    rows = _metrics_csv(tmp_path / "s")   # its own metric, ‖c‖ after each round (round 0: none)
    assert rows[0]["c_norm"] == "nan"
    np.testing.assert_allclose([float(r["c_norm"]) for r in rows[1:]], norms, rtol=1e-5)
    # no extra model parameters: the model is the bias alone
    assert list(res.model["params"]) == ["b"]


def _fednova_by_hand(rounds, lr, glr):
    theta = np.zeros(3)
    p = np.asarray(COUNTS) / sum(COUNTS)
    tau_eff = float(np.dot(p, TAU))
    for _ in range(rounds):
        d = [(theta - _local(theta, i, lr)) / TAU[i] for i in range(3)]
        theta = theta - glr * tau_eff * sum(p[i] * d[i] for i in range(3))
    return theta, tau_eff


def test_fednova_example_matches_two_rounds_computed_by_hand(tmp_path):
    lr, glr = 0.5, 1.0
    res = fj.run(_cfg("examples.fednova:fednova", lr=lr, server_lr=glr, out=str(tmp_path / "n")), progress=False)
    theta, tau_eff = _fednova_by_hand(2, lr, glr)
    np.testing.assert_allclose(np.asarray(res.model["params"]["b"]), theta, rtol=0, atol=2e-6)
    fedavg = fj.run(_cfg("fedavg", lr=lr), progress=False)  # FedNova differs from FedAvg here (τ_i unequal)
    assert np.abs(np.asarray(fedavg.model["params"]["b"]) - theta).max() > 1e-2
    assert tau_eff == pytest.approx(2.3)
    assert [float(r["tau_eff"]) for r in _metrics_csv(tmp_path / "n")[1:]] == pytest.approx([2.3, 2.3])
    assert res.metrics["tau_eff"].iloc[1:].tolist() == pytest.approx([2.3, 2.3])


@pytest.mark.parametrize("name", ["scaffold", "fednova", "ditto"])
def test_example_runs_by_the_cli_and_resumes_exactly(tmp_path, name):
    """Two rounds by the CLI as one round then --resume for the second: the same model and metrics as
    two rounds in one go (the client and server states checkpoint)."""
    cli_resume_equals_one_go(tmp_path, f"examples.{name}:{name}")


# ---- items 1, 3, 7: broadcast, client facts, the server's n_i, own metrics ------------------------------

def _probe():
    """The server state counts rounds and is broadcast; clients report what they received and their facts
    as client metrics; the server reports Σ n_i as its own metric."""
    def upload(theta, w, w_tilde, state, hp, lr_t, broadcast, facts):
        delta = jax.tree_util.tree_map(lambda t, u: t - u, theta, w_tilde)
        return delta, state, {"metrics": {"seen": broadcast.astype(jnp.float32), "steps": facts.steps,
                                          "n": facts.n}}

    def server(s):
        theta = jax.tree_util.tree_map(lambda t, d: t - jnp.tensordot(s.weights, d, axes=1), s.theta, s.deltas)
        return theta, s.sstate + 1, {"n_sum": jnp.sum(s.n).astype(jnp.float32), "qp_iters": jnp.float32(7)}

    return fj.Algorithm("probe", server=server, upload=upload, init_server_state=lambda p, n: jnp.zeros((), jnp.int32),
                        broadcast=lambda count: count, public_aux=True,
                        metrics=("seen", "steps", "n", "n_sum"))


def test_broadcast_facts_and_own_metrics_reach_metrics_csv_tensorboard_and_the_report(tmp_path):
    fj.register_algorithm("probe", _probe)
    out = tmp_path / "p"
    res = fj.run(_cfg("probe", out=str(out), log="tensorboard"), progress=False)
    rows = _metrics_csv(out)
    assert list(rows[0])[:1] == ["round"] and list(rows[0])[-3:] == ["acc_0", "acc_1", "acc_2"]
    got = {k: [float(r[k]) for r in rows[1:]] for k in ("seen", "steps", "n", "n_sum", "qp_iters")}
    want = {"seen": [0.0, 1.0],                 # the server state of each round, broadcast
            "steps": [2.0, 2.0],                # mean τ_i = (2 + 1 + 3) / 3
            "n": [10 / 3, 10 / 3],              # mean n_i
            "n_sum": [10.0, 10.0],              # ServerIn.n: the absolute counts
            "qp_iters": [7.0, 7.0]}
    assert got.keys() == want.keys() and all(got[k] == pytest.approx(want[k], rel=1e-6) for k in want)
    assert res.metrics["n_sum"].tolist()[1:] == [10.0, 10.0]
    from test_sweep import _tb_scalars
    tags = _tb_scalars(out / "tb")
    assert [v for _, v in tags["n_sum"]] == [10.0, 10.0] and [s for s, _ in tags["seen"]] == [1, 2]
    rep = fj.report(out, tmp_path / "rep")
    md = Path(rep["markdown"]).read_text()
    assert "## The algorithms' own metrics" in md and "| probe |" in md and "n_sum 10" in md
    assert fj.load(out).metrics["seen"].tolist()[1:] == [0.0, 1.0]


def test_a_server_state_holding_one_array_twice_runs(tmp_path):
    """init_server_state may return the same array in two places (m and v both zeros): the run donates its
    state to the compiled round, and one buffer given twice made XLA refuse it in a traceback."""
    def server(s):
        a, b = s.sstate
        return s.theta, (a + 1.0, b + 2.0), {}

    alg = lambda: fj.Algorithm("twice", server=server, upload=lambda th, w, wt, st, hp, lr: (  # noqa: E731
        jax.tree_util.tree_map(jnp.subtract, th, wt), st),
        init_server_state=lambda params, n: (lambda z: (z, z))(jnp.zeros(3)))
    fj.register_algorithm("twice", alg)
    res = fj.run(_cfg("twice", rounds=3), progress=False, out=str(tmp_path / "r"))
    assert res.status == "done"


def test_old_signatures_and_builtins_keep_their_columns(tmp_path):
    """An algorithm written for the old contract (six positional arguments, two results) runs as before,
    and a built-in's metrics.csv has today's columns."""
    from fedalf_jax.experiment.columns import metric_columns
    res = fj.run(_cfg("fedavg", rounds=1, out=str(tmp_path / "a")), progress=False)
    with open(tmp_path / "a" / "metrics.csv") as f:
        assert f.readline().strip().split(",") == metric_columns(3)
    assert res.status == "done"


# ---- item 2: the privacy record of an auxiliary upload ---------------------------------------------------

def test_privacy_record_says_a_non_public_aux_is_not_covered():
    fj.register_algorithm("nova_priv", fednova)
    p = fj.Config(algorithm="nova_priv", ldp="adaptive").privacy
    assert p["guarantee"] == "does not hold"  # τ_i leaves each client un-noised (issue 47 item 10)
    assert "the auxiliary upload ServerIn.aux (the algorithm declares public_aux=False)" in p["not_covered"]
    fj.register_algorithm("scaffold_priv", scaffold)
    p = fj.Config(algorithm="scaffold_priv", ldp="adaptive").privacy
    assert not any("aux" in x for x in p["not_covered"])


# ---- item 8: errors that name the culprit ------------------------------------------------------------

def _base():
    def upload(theta, w, w_tilde, state, hp, lr_t):
        return jax.tree_util.tree_map(lambda t, u: t - u, theta, w_tilde), state

    def server(s):
        return jax.tree_util.tree_map(lambda t, d: t - jnp.mean(d, 0), s.theta, s.deltas), s.sstate, {}
    return fj.Algorithm("bad", server=server, upload=upload)


def _bad(kind):
    a = _base()
    zeros = lambda p: jax.tree_util.tree_map(jnp.zeros_like, p)  # noqa: E731
    if kind == "delta_shape":
        return dataclasses.replace(a, upload=lambda th, w, wt, st, hp, lr: ({"b": jnp.zeros((4,))}, st))
    if kind == "delta_tree":
        return dataclasses.replace(a, upload=lambda th, w, wt, st, hp, lr: ([th["b"]], st))
    if kind == "not_a_tuple":
        return dataclasses.replace(a, upload=lambda th, w, wt, st, hp, lr: th)
    if kind == "state_dtype":
        return dataclasses.replace(a, init_client_state=zeros,
                                   upload=lambda th, w, wt, st, hp, lr: (th, {"b": st["b"].astype(jnp.bfloat16)}))
    if kind == "server_theta":
        return dataclasses.replace(a, server=lambda s: ({"w": s.theta["b"]}, s.sstate, {}))
    if kind == "server_state":
        return dataclasses.replace(a, init_server_state=lambda p, n: jnp.zeros(3),
                                   server=lambda s: (s.theta, jnp.zeros(4), {}))
    if kind == "server_info":
        return dataclasses.replace(a, server=lambda s: (s.theta, s.sstate, {"loss_gap": jnp.float32(0)}))
    if kind == "penalty":
        return dataclasses.replace(a, penalty=lambda th, st, hp: (lambda w: w["b"]))
    if kind == "init_state":
        return dataclasses.replace(a, init_client_state=lambda p: {"name": "c_i"})
    if kind == "aux_undeclared":
        return dataclasses.replace(a, upload=lambda th, w, wt, st, hp, lr: (th, st, jnp.zeros(2)))
    if kind == "aux_metric_undeclared":  # a client metric the Algorithm's metrics do not name
        return dataclasses.replace(a, public_aux=True,
                                   upload=lambda th, w, wt, st, hp, lr: (th, st, {"metrics": {"gap": jnp.float32(0)}}))
    if kind == "aux_metric_vector":
        return dataclasses.replace(a, public_aux=True, metrics=("gap",),
                                   upload=lambda th, w, wt, st, hp, lr: (th, st, {"metrics": {"gap": jnp.zeros(2)}}))
    raise AssertionError(kind)


@pytest.mark.parametrize("kind, match", [
    ("delta_shape", r"upload returned Δ_i \{\['b'\]: float32\[4\]\}; expected \{\['b'\]: float32\[3\]\} .*shape \(4,\), "
                    r"not \(3,\)"),
    ("delta_tree", r"upload returned Δ_i \{\[0\]: float32\[3\]\}; .*another tree structure"),
    ("not_a_tuple", r"upload returned dict; expected \(Δ_i, new state\) or \(Δ_i, new state, aux\)"),
    ("state_dtype", r"upload returned the new client state .*\['b'\] is bfloat16, not float32 .*not cast"),
    ("server_theta", r"server returned the new θ \{\['w'\]: float32\[3\]\}; .*another tree structure"),
    ("server_state", r"server returned the new server state \{value: float32\[4\]\}; .*shape \(4,\), not \(3,\)"),
    ("server_info", r"server returned info 'loss_gap'.*add 'loss_gap' to metrics="),
    ("penalty", r"penalty's function returned \{value: float32\[3\]\}; expected a float scalar"),
    ("init_state", r"init_client_state returned \[.name.\] as a str \(.c_i.\); expected a pytree of arrays"),
    ("aux_undeclared", r"upload returned an auxiliary upload .*public_aux=True .*or public_aux=False"),
    ("aux_metric_undeclared", r"upload returned the client metric 'gap' in aux\['metrics'\].*add 'gap' to metrics="),
    ("aux_metric_vector", r"upload returned the client metric 'gap' of shape \(2,\); expected a scalar"),
])
def test_a_contract_mistake_is_one_line_naming_the_function(kind, match):
    fj.register_algorithm("bad", lambda: _bad(kind))
    with pytest.raises(fj.ConfigError, match=r"algorithm 'bad': " + match) as e:
        fj.run(_cfg("bad", rounds=1), progress=False)
    assert "\n" not in str(e.value)


def test_the_cli_prints_a_contract_mistake_as_one_line(tmp_path):
    (tmp_path / "my_bad.py").write_text(
        "import jax.numpy as jnp\nimport fedalf_jax as fj\n"
        "def alg():\n"
        "    return fj.Algorithm('mine', server=lambda s: (s.theta, s.sstate, {}),\n"
        "                        upload=lambda th, w, wt, st, hp, lr: ({'x': jnp.zeros(2)}, st))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    p = subprocess.run([sys.executable, "-m", "fedalf_jax.cli", "run", "--algorithm", "my_bad:alg", "--dataset",
                        "synthetic", "--model", "mlp", "--clients", "4", "--clients-per-round", "2", "--rounds", "1",
                        "--synthetic-train", "80", "--synthetic-test", "40", "--no-progress", "--out",
                        str(tmp_path / "r")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 2
    from helpers import without_deprecation
    lines = [ln for ln in without_deprecation(p.stderr).splitlines() if ln.strip()]
    # the start's line of what the code digest covers (issue 36), then the error alone
    assert len(lines) == 2 and lines[0].startswith("fedalf: warning: code digest of algorithm 'my_bad:alg' covers"), \
        p.stderr
    assert "upload returned Δ_i {['x']: float32[2]}" in lines[1], p.stderr
    assert "Traceback" not in p.stderr
