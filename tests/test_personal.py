"""Local training the algorithm controls and personalised evaluation (issue #28 items 4, 5 and the Ditto
example of 9): the local start point, the local optimiser (optax momentum, Adam), a second local model per
client (Ditto's v_i) and its evaluation in metrics.csv, TensorBoard and the report, each against rounds
computed by hand in float64 on the one-bias problem of test_contract; and the clients' index lists."""

import dataclasses
import json
import sys
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedalf_jax as fj

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from examples.ditto import ditto  # noqa: E402
from test_contract import COUNTS, LABELS, TAU, _base, _cfg, _metrics_csv, _softmax  # noqa: E402

P = np.asarray(COUNTS) / sum(COUNTS)  # FedAvg's p_i


def _grad(w, i):
    return _softmax(w) - np.eye(3)[LABELS[i]]


def _loss(w, i):
    return np.log(np.sum(np.exp(w - w.max()))) + w.max() - w[LABELS[i]]


# ---- Ditto --------------------------------------------------------------------------------------------

def _ditto_by_hand(rounds, lr, glr, lam):
    """θ: FedAvg; v_i: τ_i steps from v_i on f_i(v) + λ/2‖v − θ_t‖², all three clients every round."""
    theta, v = np.zeros(3), [np.zeros(3) for _ in range(3)]
    out = [(theta.copy(), [x.copy() for x in v])]
    for _ in range(rounds):
        deltas = []
        for i in range(3):
            w = theta.copy()
            for _ in range(TAU[i]):
                w -= lr * _grad(w, i)
                v[i] = v[i] - lr * (_grad(v[i], i) + lam * (v[i] - theta))
            deltas.append(theta - w)
        theta = theta - glr * sum(P[i] * deltas[i] for i in range(3))
        out.append((theta.copy(), [x.copy() for x in v]))
    return out


def _personal_row(v):
    acc = np.asarray([float(np.argmax(v[i]) == LABELS[i]) for i in range(3)])
    return acc, np.mean([_loss(v[i], i) for i in range(3)])


def test_ditto_example_matches_two_rounds_computed_by_hand(tmp_path):
    lr, glr, lam = 0.5, 0.8, 0.3
    out = tmp_path / "d"
    res = fj.run(_cfg("examples.ditto:ditto", lr=lr, server_lr=glr, hp={"lam": lam}, out=str(out), log="tensorboard"),
                 progress=False)
    want = _ditto_by_hand(2, lr, glr, lam)
    theta, v = want[-1]
    np.testing.assert_allclose(np.asarray(res.model["params"]["b"]), theta, rtol=0, atol=2e-6)
    chex.assert_trees_all_close(res.client_states, {"b": np.stack(v)}, atol=2e-6)   # v_i: each client's state
    assert np.abs(v[1] - theta).max() > 0.1                                          # v_i is not θ
    rows = _metrics_csv(out)
    for r, (th, vs) in zip(rows, want):  # rounds 0, 1, 2: each client's v_i on its test split
        acc, loss = _personal_row(vs)
        assert float(r["personal_test_loss"]) == pytest.approx(loss, abs=2e-6)
        assert float(r["personal_acc"]) == pytest.approx(acc.mean())
        assert float(r["personal_angle_deg"]) == pytest.approx(float(fj.fairness_angle(acc, degrees=True)), abs=1e-4)
        assert float(r["test_loss"]) == pytest.approx(np.mean([_loss(th, i) for i in range(3)]), abs=2e-6)
    # the personal models serve every client, the global one only one of them (a bias predicts one class)
    assert [float(r["personal_acc"]) for r in rows] == pytest.approx([1 / 3, 1.0, 1.0])
    assert [float(r["mean_acc"]) for r in rows] == pytest.approx([1 / 3] * 3)
    # the columns: fedalf's own, the personalised ones, the per-client accuracies
    from fedalf_jax.experiment.columns import PERSONAL_KEYS, metric_columns
    assert list(rows[0]) == metric_columns(3, PERSONAL_KEYS)
    assert res.metrics["personal_acc"].tolist() == pytest.approx([1 / 3, 1.0, 1.0])
    assert fj.load(out).metrics["personal_test_loss"].tolist() == pytest.approx(
        [_personal_row(vs)[1] for _, vs in want], abs=2e-6)
    from test_sweep import _tb_scalars
    tags = _tb_scalars(out / "tb")
    assert [v for _, v in tags["personal_acc"]] == pytest.approx([1 / 3, 1.0, 1.0])
    md = Path(fj.report(out, tmp_path / "rep")["markdown"]).read_text()
    assert "## Personalised models" in md and "## The algorithms' own metrics" not in md
    line = next(ln for ln in md.splitlines() if ln.startswith("| ") and "ditto" in ln and "°" in ln
                and "1.000 (0.0°)" in ln)
    assert "0.333 (54.7°)" in line  # the global model's, beside it


def test_ditto_resumes_exactly_and_runs_in_a_sweep(tmp_path):
    """One round then --resume: the personal metrics of two rounds in one go; a sweep's runs give the
    same rows as their single runs."""
    kw = dict(lr=0.5, server_lr=0.8, hp={"lam": 0.3})
    fj.run(_cfg("examples.ditto:ditto", rounds=1, out=str(tmp_path / "r"), **kw), progress=False)
    fj.run(_cfg("examples.ditto:ditto", out=str(tmp_path / "r"), **kw), progress=False, resume=True)
    resumed = fj.load(tmp_path / "r")
    whole = fj.run(_cfg("examples.ditto:ditto", **kw), progress=False)
    cols = [c for c in whole.metrics.columns if c.startswith("personal_")]
    assert len(cols) == 5
    np.testing.assert_array_equal(resumed.metrics[cols].to_numpy(), whole.metrics[cols].to_numpy())
    sw = fj.sweep(_cfg("examples.ditto:ditto", **kw), out=tmp_path / "s", grid={"hp.lam": [0.3, 0.0]}, progress=False)
    np.testing.assert_allclose(sw[0].metrics[cols].to_numpy(), whole.metrics[cols].to_numpy(), atol=1e-6)
    assert sw[1].metrics["personal_test_loss"].iloc[-1] < sw[0].metrics["personal_test_loss"].iloc[-1]  # λ = 0: fits f_i
    assert sw.table["personal_acc"].tolist() == [1.0, 1.0] and "personal_angle_deg" in sw.table


def test_ditto_with_bfloat16_states_evaluates_them_in_float32():
    lr, glr, lam = 0.5, 0.8, 0.3
    res = fj.run(_cfg("examples.ditto:ditto", lr=lr, server_lr=glr, hp={"lam": lam}, state_dtype="bfloat16"), progress=False)
    want = _ditto_by_hand(2, lr, glr, lam)
    got = res.metrics["personal_test_loss"].to_numpy()
    np.testing.assert_allclose(got, [_personal_row(vs)[1] for _, vs in want], atol=3e-2)
    assert res.metrics["personal_acc"].tolist() == pytest.approx([1 / 3, 1.0, 1.0])


def test_builtins_have_no_personal_columns(tmp_path):
    from fedalf_jax.experiment.columns import metric_columns
    res = fj.run(_cfg("fedavg", rounds=1, out=str(tmp_path / "a")), progress=False)
    assert list(_metrics_csv(tmp_path / "a")[0]) == metric_columns(3)
    assert not any(c.startswith("personal") for c in res.metrics.columns)


# ---- local start and local optimiser --------------------------------------------------------------

def _fedavg_by_hand(rounds, lr, glr, step, start=lambda theta: theta, epochs=1):
    """FedAvg with client i's epochs·τ_i local steps ``step(w, g, state, k) -> (w, state)`` from ``start(θ)``."""
    theta = np.zeros(3)
    for _ in range(rounds):
        ws = []
        for i in range(3):
            w, st = start(theta).copy(), None
            for k in range(1, epochs * TAU[i] + 1):
                w, st = step(w, _grad(w, i), st, k)
            ws.append(w)
        theta = theta - glr * sum(P[i] * (theta - ws[i]) for i in range(3))
    return theta


def _momentum(lr, beta):
    def step(w, g, t, k):
        t = g if t is None else g + beta * t
        return w - lr * t, t
    return step


def _adam(lr, b1=0.9, b2=0.999, eps=1e-8):
    def step(w, g, st, k):
        m, v = (np.zeros(3), np.zeros(3)) if st is None else st
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        mh, vh = m / (1 - b1 ** k), v / (1 - b2 ** k)
        return w - lr * mh / (np.sqrt(vh) + eps), (m, v)
    return step


@pytest.mark.parametrize("name, opts, step, epochs, atol", [
    ("momentum", {"beta": 0.7}, _momentum(0.5, 0.7), 1, 3e-6),
    # two epochs: a client's steps past its examples (client 1: 2 of 3 per epoch) leave the momentum as it was
    ("momentum", {"beta": 0.7}, _momentum(0.5, 0.7), 2, 3e-6),
    ("adam", {"b1": 0.8}, _adam(0.5, b1=0.8), 1, 2e-5),  # optax: 1 − β₂ᵏ in float32 is off by 1.3e-5
    ("sgd", {}, lambda w, g, st, k: (w - 0.5 * g, None), 1, 3e-6),
])
def test_local_optimizer_steps_match_numpy(name, opts, step, epochs, atol):
    """Two rounds of FedAvg whose clients step with an optax optimiser (its state afresh each round)."""
    alg = dataclasses.replace(fj.algorithms.fedavg(), name=f"fedavg_{name}", local_optimizer=fj.local_optimizer(name, **opts))
    fj.register_algorithm(f"fedavg_{name}", lambda: alg)
    res = fj.run(_cfg(f"fedavg_{name}", lr=0.5, server_lr=0.8, local_epochs=epochs), progress=False)
    np.testing.assert_allclose(np.asarray(res.model["params"]["b"]), _fedavg_by_hand(2, 0.5, 0.8, step, epochs=epochs),
                               rtol=0, atol=atol)
    plain = _fedavg_by_hand(2, 0.5, 0.8, lambda w, g, st, k: (w - 0.5 * g, None), epochs=epochs)
    assert (name == "sgd") == bool(np.abs(plain - np.asarray(res.model["params"]["b"])).max() < 1e-5)


@pytest.mark.parametrize("name, step, atol", [
    ("nesterov", None, 3e-6),  # checked against momentum's below: Nesterov's differs from it
    ("momentum", _momentum(0.5, 0.9), 3e-6),
    ("adam", _adam(0.5), 2e-5),
])
def test_the_local_optimizer_option_steps_any_algorithm(tmp_path, name, step, atol):
    """``Config.local_optimizer`` (``--local-optimizer``): a built-in algorithm's clients step with it, as by
    hand (β 0.9, optax's Adam defaults); recorded in config.json; runs through the CLI."""
    res = fj.run(_cfg("fedavg", lr=0.5, server_lr=0.8, local_optimizer=name), out=str(tmp_path / "r"), progress=False)
    got = np.asarray(res.model["params"]["b"])
    if step is None:
        assert np.abs(got - _fedavg_by_hand(2, 0.5, 0.8, _momentum(0.5, 0.9))).max() > 1e-4
    else:
        np.testing.assert_allclose(got, _fedavg_by_hand(2, 0.5, 0.8, step), rtol=0, atol=atol)
    assert json.loads((tmp_path / "r" / "config.json").read_text())["local_optimizer"] == name


def test_the_local_optimizer_option_is_recorded_only_when_given(tmp_path):
    """Without the option a run's config.json and identity are what they were before it existed (old
    checkpoints resume); an algorithm with its own optimiser refuses it in one line; an unknown name too."""
    fj.run(_cfg("fedavg"), out=str(tmp_path / "r"), progress=False)
    assert "local_optimizer" not in json.loads((tmp_path / "r" / "config.json").read_text())
    assert "local_optimizer" not in _cfg("fedavg").identity()
    assert _cfg("fedavg", local_optimizer="adam").identity()["local_optimizer"] == "adam"
    own = dataclasses.replace(fj.algorithms.fedavg(), name="own_opt", local_optimizer=fj.local_optimizer("adam"))
    fj.register_algorithm("own_opt", lambda: own)
    with pytest.raises(fj.ConfigError, match=r"^local_optimizer 'momentum': algorithm 'own_opt' chooses its own"):
        fj.run(_cfg("own_opt", local_optimizer="momentum"), progress=False)
    with pytest.raises(fj.ConfigError, match=r"unknown local_optimizer 'rmsprop'; choose one of sgd, momentum"):
        _cfg("fedavg", local_optimizer="rmsprop")


def test_local_start_from_a_point_the_algorithm_derives():
    alg = dataclasses.replace(fj.algorithms.fedavg(), name="shifted",
                              local_start=lambda theta, state, hp: jax.tree_util.tree_map(lambda t: t + 0.25, theta))
    fj.register_algorithm("shifted", lambda: alg)
    res = fj.run(_cfg("shifted", lr=0.5, server_lr=0.8), progress=False)
    want = _fedavg_by_hand(2, 0.5, 0.8, lambda w, g, st, k: (w - 0.5 * g, None), start=lambda th: th + 0.25)
    np.testing.assert_allclose(np.asarray(res.model["params"]["b"]), want, rtol=0, atol=2e-6)


def test_local_optimizer_refuses_unknown_names():
    with pytest.raises(ValueError, match="local_optimizer: unknown optimiser 'rmsprop'"):
        fj.local_optimizer("rmsprop")
    with pytest.raises(ValueError, match=r"takes beta="):
        fj.local_optimizer("momentum", b1=0.9)


# ---- contract mistakes ---------------------------------------------------------------------------

def _personal_bad(kind):
    a = _base()
    ident = lambda p: p  # noqa: E731
    ok_upload = lambda th, w, wt, st, hp, lr, personal: (jax.tree_util.tree_map(jnp.subtract, th, wt), personal)  # noqa: E731
    pers = fj.Personal(start=lambda th, st, hp: st)
    if kind == "no_personal_param":
        return dataclasses.replace(a, init_client_state=ident, personal=pers)
    if kind == "start_shape":
        return dataclasses.replace(a, init_client_state=ident, upload=ok_upload,
                                   personal=fj.Personal(start=lambda th, st, hp: {"b": jnp.zeros(4)}))
    if kind == "model_shape":
        return dataclasses.replace(a, init_client_state=ident, upload=ok_upload, personal=pers,
                                   personal_model=lambda st: [st["b"]])
    if kind == "model_no_state":
        return dataclasses.replace(a, personal_model=ident)
    if kind == "local_start":
        return dataclasses.replace(a, local_start=lambda th, st, hp: {"b": jnp.zeros((3, 1))})
    if kind == "personal_penalty":
        return dataclasses.replace(a, init_client_state=ident, upload=ok_upload,
                                   personal=pers._replace(penalty=lambda th, st, hp: (lambda v: v["b"])))
    if kind == "metric_name":
        return dataclasses.replace(a, metrics=("personal_acc",))
    raise AssertionError(kind)


@pytest.mark.parametrize("kind, match", [
    ("no_personal_param", r"has a personal model, but its upload has no parameter named personal"),
    ("start_shape", r"personal.start returned params \{\['b'\]: float32\[4\]\}; .*shape \(4,\), not \(3,\)"),
    ("model_shape", r"personal_model returned params \{\[0\]: float32\[3\]\}; .*another tree structure"),
    # without init_client_state the state is () (FedBN's personal model is θ with its own statistics): the
    # identity then returns no params
    ("model_no_state", r"personal_model returned params \(\); expected .*another tree structure"),
    ("local_start", r"local_start returned params .*shape \(3, 1\), not \(3,\)"),
    ("personal_penalty", r"personal.penalty's function returned \{value: float32\[3\]\}; expected a float scalar"),
])
def test_a_personal_contract_mistake_is_one_line_naming_the_function(kind, match):
    fj.register_algorithm("bad_p", lambda: _personal_bad(kind))
    with pytest.raises(fj.ConfigError, match=r"algorithm 'bad'.*" + match) as e:
        fj.run(_cfg("bad_p", rounds=1), progress=False)
    assert "\n" not in str(e.value)


def test_a_metric_named_like_a_personal_column_is_refused(tmp_path):
    fj.register_algorithm("bad_m", lambda: _personal_bad("metric_name"))
    with pytest.raises(fj.ConfigError, match=r"metric name 'personal_acc' is one of fedalf's personalised-model"):
        fj.run(_cfg("bad_m", rounds=1, out=str(tmp_path / "m")), progress=False)


# ---- each client's index lists -------------------------------------------------------------------------

def test_client_splits_are_the_registered_lists():
    splits = fj.client_splits(_cfg("fedavg"))
    starts = np.cumsum([0] + COUNTS)
    n_train = sum(COUNTS)
    for i, (tr, te) in enumerate(splits):  # the pool is train then test: test lists offset by n_train
        np.testing.assert_array_equal(tr, np.arange(starts[i], starts[i + 1]))
        np.testing.assert_array_equal(te, np.arange(starts[i], starts[i + 1]) + n_train)


@pytest.mark.parametrize("partition", ["pat2", "dirichlet", "iid"])
def test_client_splits_are_the_run_clients(tmp_path, partition):
    cfg = fj.Config(algorithm="fedavg", dataset="synthetic", model="mlp", clients=6, clients_per_round=3, rounds=1,
                    synthetic_train=240, synthetic_test=60, partition=partition, seed=3, out=str(tmp_path / "c"))
    splits = fj.client_splits(cfg)
    fj.run(cfg, progress=False)
    clients = json.loads((tmp_path / "c" / "clients.json").read_text())
    clients = clients["clients"] if isinstance(clients, dict) else clients
    from fedalf_jax.problem.data import load_dataset
    ds = load_dataset("synthetic", synthetic_train=240, synthetic_test=60, seed=3)
    y = np.concatenate([ds.y_train, ds.y_test])
    seen = np.concatenate([np.concatenate([tr, te]) for tr, te in splits])
    assert len(np.unique(seen)) == len(seen) and seen.max() < len(y)  # disjoint, inside the pool
    for c, (tr, te) in zip(clients, splits):
        assert (len(tr), len(te)) == (c["n_train"], c["n_test"])
        for idx, counts in ((tr, c["train_counts"]), (te, c["test_counts"])):
            got = dict(zip(*np.unique(y[idx], return_counts=True)))
            assert {str(int(k)): int(v) for k, v in got.items()} == {str(k): v for k, v in counts.items()}


def test_the_new_names_are_public_and_documented():
    for name in ("Personal", "local_optimizer", "client_splits"):
        assert name in fj.__all__ and getattr(fj, name).__doc__
    for field in ("local_start", "local_optimizer", "personal", "personal_model"):
        assert fj.Algorithm.__dataclass_fields__[field].default is None and field in fj.Algorithm.__doc__
    doc = (ROOT / "docs" / "extending.md").read_text()
    assert "examples/ditto.py" in doc and "fj.client_splits" in doc and "personal_angle_deg" in doc


def test_report_csv_has_the_personal_columns(tmp_path):
    """table.csv carries each client's own model (Ditto's v_i) at the final evaluation: personal_acc_mean/std
    and personal_angle_mean/std over the cell's seeds (sample std), read here from the runs' metrics.csv;
    blank for FedAvg's cell, which has no personal model. Two of three clients a round: a client never sampled
    keeps v_0, so the seeds differ (final personal accuracy 2/3, 1, 1 for seeds 0, 1, 2)."""
    import csv
    runs = tmp_path / "runs"
    kw = dict(lr=0.5, server_lr=0.8, hp={"lam": 0.3}, clients_per_round=2, rounds=2)
    for seed in (0, 1, 2):
        fj.run(_cfg("examples.ditto:ditto", seed=seed, out=str(runs / f"ditto_{seed}"), **kw), progress=False)
    fj.run(_cfg("fedavg", out=str(runs / "fedavg_0")), progress=False)
    fj.report(runs, tmp_path / "rep")
    with open(tmp_path / "rep" / "table.csv", newline="") as f:
        table = {r["algorithm"]: r for r in csv.DictReader(f)}
    assert set(table) == {"examples.ditto:ditto", "FedAvg"}
    last = [_metrics_csv(runs / f"ditto_{seed}")[-1] for seed in (0, 1, 2)]
    for col, key in (("personal_acc", "personal_acc"), ("personal_angle", "personal_angle_deg")):
        vals = np.array([float(r[key]) for r in last])
        assert float(table["examples.ditto:ditto"][f"{col}_mean"]) == pytest.approx(vals.mean(), abs=1e-9)
        assert float(table["examples.ditto:ditto"][f"{col}_std"]) == pytest.approx(vals.std(ddof=1), abs=1e-9)
    assert len({r["personal_acc"] for r in last}) > 1  # the seeds differ: the std is not a 0 by chance
    assert all(table["FedAvg"][f"personal_{k}"] == "" for k in ("acc_mean", "acc_std", "angle_mean", "angle_std"))
