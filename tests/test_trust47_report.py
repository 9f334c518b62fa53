"""Issue 47 items 3, 4 and 13: what ``fedalf report`` makes of a user's algorithm, model or data set.

3. runs of a user's algorithm that differ in ``mu`` (FedDyn's α) were one row ("counted once"): a user's
   algorithm reads ``HParams`` as it likes, so every option that differs names its variant;
4. a personal model that diverged (``personal_test_loss`` NaN) ended ``done`` and its ``personal_acc`` (the
   argmax of NaN logits) was shown as an accuracy: the run is ``diverged`` now, and the report counts an older
   such run as diverged;
13. a user module with a SyntaxError or an import-time NameError stopped the report with a traceback, and runs
   of a model or data set registered in another process were skipped as unreadable: they are read from their
   config.json and metrics.csv, with one line saying so.

The run directories are hand-built (``test_report.make_run``: known numbers), but for item 4's Ditto runs,
which train 4 rounds on the one-bias problem of test_contract."""

import csv
import importlib
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

import fedalf_jax as fj
from fedalf_jax.cli import main
from fedalf_jax.experiment import registry
from fedalf_jax.experiment.rundir import RunDir

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from test_contract import _cfg  # noqa: E402
from test_report import make_run  # noqa: E402


def _table(path: Path) -> list[dict]:
    with open(path / "table.csv", newline="") as f:
        return list(csv.DictReader(f))


def _forget(monkeypatch, kind: str, name: str) -> None:
    """As in a new process: ``name`` is no longer registered (nor imported)."""
    monkeypatch.delitem(registry._REGISTERED[kind], name)
    monkeypatch.setitem(registry._VERSION, "n", registry._VERSION["n"] + 1)


# ---- item 3: a user's algorithm, every differing option names its variant -----------------------------------

def test_a_user_algorithms_runs_differing_in_mu_are_two_variants(tmp_path, capsys):
    """FedDyn (α = hp.mu) at mu 0.01 and 0.5, one seed each: two rows (the numbers of each run), no "counted
    once"; FedAvg's two runs differing in mu (which FedAvg never reads) stay one row of 1 seed."""
    runs = tmp_path / "runs"
    make_run(runs, "dyn_mu0.01", final_acc=0.6, final_angle=30.0, algorithm="examples.feddyn:feddyn", mu=0.01)
    make_run(runs, "dyn_mu0.5", final_acc=0.8, final_angle=20.0, algorithm="examples.feddyn:feddyn", mu=0.5)
    make_run(runs, "avg_mu0.01", final_acc=0.5, final_angle=25.0, algorithm="fedavg", mu=0.01)
    make_run(runs, "avg_mu0.5", final_acc=0.7, final_angle=25.0, algorithm="fedavg", mu=0.5)
    res = fj.report(runs, tmp_path / "rep")
    rows = {r["algorithm"]: r for r in _table(tmp_path / "rep")}
    assert set(rows) == {"examples.feddyn:feddyn (mu=0.01)", "examples.feddyn:feddyn (mu=0.5)", "FedAvg"}, rows
    assert float(rows["examples.feddyn:feddyn (mu=0.01)"]["final_acc_mean"]) == pytest.approx(0.6)
    assert float(rows["examples.feddyn:feddyn (mu=0.5)"]["final_acc_mean"]) == pytest.approx(0.8)
    assert rows["FedAvg"]["seeds"] == "1" and float(rows["FedAvg"]["final_acc_mean"]) == pytest.approx(0.5)
    said = [m for m in res["messages"] if "counted once" in m]
    assert len(said) == 1 and "avg_mu0.5" in said[0] and "feddyn" not in said[0], said


# ---- item 4: a personal model that diverges ---------------------------------------------------------------

DITTO_NAN = dict(lr=1.0, hp={"lam": 1e4}, rounds=4)  # personal_test_loss: 1.1, 3.3e3, 3.3e19, 3.3e19, NaN


@pytest.fixture(scope="module")
def ditto_nan(tmp_path_factory):
    """Ditto at λ = 1e4, η = 1: its v_i blow up; the global model (FedAvg's) stays finite. The run folder and
    what the run raised (``None`` when it returned)."""
    out = tmp_path_factory.mktemp("ditto47") / "ditto"
    try:
        fj.run(_cfg("examples.ditto:ditto", out=str(out), **DITTO_NAN), progress=False)
    except FloatingPointError as e:
        return out, str(e)
    return out, None


def test_a_diverged_personal_model_marks_the_run_diverged(ditto_nan):
    """The run raises as a diverged run does, and its summary.json says diverged (it said done), at round 4,
    the first NaN personal loss; the global model's test loss is finite there."""
    ditto_nan, raised = ditto_nan
    assert raised is not None and raised.startswith("the clients' personal models diverged by round 4"), raised
    summary = json.loads((ditto_nan / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["round"] == 4, summary
    assert "personal" in summary["message"] and "--hp" in summary["message"]
    m = RunDir(ditto_nan).metrics()
    assert math.isfinite(m["test_loss"][-1]) and not math.isfinite(m["personal_test_loss"][-1])
    assert np.all(np.isfinite(m["personal_test_loss"][:-1]))  # it went on while the loss was finite


def test_a_done_run_with_a_nan_personal_loss_is_counted_diverged(ditto_nan, tmp_path):
    """A run recorded before the fix (summary.json "done" with a NaN personal_test_loss): the report counts
    it diverged and never shows its personal accuracy (0 at round 4) as one; FedAvg's cell is reported."""
    ditto_nan = ditto_nan[0]
    runs = tmp_path / "runs"
    old = runs / "ditto_old"
    old.mkdir(parents=True)
    for p in ditto_nan.iterdir():
        if p.is_file() and not p.name.startswith("."):
            (old / p.name).write_bytes(p.read_bytes())
    summary = json.loads((old / "summary.json").read_text())
    summary["status"] = "done"
    summary.pop("message", None)
    (old / "summary.json").write_text(json.dumps(summary))
    assert RunDir(old).status() == "done"
    fj.run(_cfg("fedavg", out=str(runs / "fedavg_0"), rounds=1), progress=False)
    res = fj.report(runs, tmp_path / "rep")
    assert res["skipped"] == {"diverged": ["ditto_old"]}, res["skipped"]
    assert any(m.startswith("ditto_old: its clients' personal models diverged by round 4") for m in res["messages"])
    rows = _table(tmp_path / "rep")
    assert [r["algorithm"] for r in rows] == ["FedAvg"] and rows[0]["personal_acc_mean"] == ""
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "Personalised" not in md and "ditto_old: its clients' personal models diverged" in md


# ---- item 13: user modules and names of another process ------------------------------------------------------

def _module_runs(tmp_path, monkeypatch, body: str) -> Path:
    """Two runs (seeds 0, 1; final accuracy 0.6, 0.7) of the algorithm ``t47mod_<test>:alg``, whose module is
    then rewritten to ``body`` (as if edited after the runs) and forgotten."""
    mod = f"t47mod_{abs(hash(str(tmp_path))) % 10**8}"
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / f"{mod}.py").write_text("from examples.fedadam import fedadam as alg\n")
    name = f"{mod}:alg"
    for seed, acc in ((0, 0.6), (1, 0.7)):
        make_run(tmp_path / "runs", f"s{seed}", final_acc=acc, final_angle=30.0, algorithm=name, seed=seed)
    (tmp_path / f"{mod}.py").write_text(body)
    _forget(monkeypatch, "algorithm", name)
    monkeypatch.delitem(sys.modules, mod)
    importlib.invalidate_caches()
    return tmp_path / "runs"


@pytest.mark.parametrize("body, raised", [
    ("from examples.fedadam import fedadam as alg\nx = = 1\n", "SyntaxError: invalid syntax"),
    ("from examples.fedadam import fedadam as alg\nundefined_name_47 + 1\n",
     "NameError: name 'undefined_name_47' is not defined"),
])
def test_a_user_module_that_fails_to_import_is_one_line_and_its_runs_read(tmp_path, monkeypatch, capsys, body, raised):
    """A SyntaxError or NameError in the run's module (edited after the runs): exit 0, no traceback, the runs
    read from their metrics (one row of 2 seeds, mean 0.65) with one line naming what the import raised."""
    runs = _module_runs(tmp_path, monkeypatch, body)
    capsys.readouterr()
    assert main(["report", str(runs), "--out", str(tmp_path / "rep")]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    said = [line for line in out.splitlines() if "from their config.json and metrics.csv only" in line]
    assert len(said) == 1 and f"cannot be imported here ({raised}" in said[0] and said[0].endswith(": s0, s1"), out
    (row,) = _table(tmp_path / "rep")
    assert row["seeds"] == "2" and float(row["final_acc_mean"]) == pytest.approx(0.65)


def test_runs_of_a_model_registered_in_another_process_are_read_from_their_metrics(tmp_path, monkeypatch, capsys):
    """A model registered in a notebook: its runs were "2 unreadable" in another process."""
    from helpers import Bias
    fj.register_model("bias47", lambda num_classes: Bias(num_classes))
    for seed, acc in ((0, 0.6), (1, 0.8)):
        make_run(tmp_path / "runs", f"m{seed}", final_acc=acc, final_angle=30.0, model="bias47", seed=seed)
    _forget(monkeypatch, "model", "bias47")
    capsys.readouterr()
    assert main(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "rep")]) == 0
    out = capsys.readouterr().out
    assert ("read 2 runs of model 'bias47' from their config.json and metrics.csv only: it is not registered in "
            "this process (fj.register_model it before report(), or name it module:attribute), so their options "
            "were not checked: m0, m1") in out.splitlines(), out
    assert "unreadable" not in out
    (row,) = _table(tmp_path / "rep")
    assert row["model"] == "bias47" and row["seeds"] == "2" and float(row["final_acc_mean"]) == pytest.approx(0.7)


def test_runs_of_a_data_set_registered_in_another_process_are_read_from_their_metrics(tmp_path, monkeypatch, capsys):
    """A data set registered in a notebook (and private runs of it: their guarantee is still read)."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(40, 3)).astype(np.float32), np.arange(40) % 2
    fj.register_dataset("data47", x, y, x[:20], y[:20], num_classes=2)
    for seed, acc in ((0, 0.5), (1, 0.7)):
        make_run(tmp_path / "runs", f"d{seed}", final_acc=acc, final_angle=30.0, dataset="data47", seed=seed,
                 ldp="adaptive", epsilon=2.0)
    _forget(monkeypatch, "dataset", "data47")
    capsys.readouterr()
    assert main(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "rep")]) == 0
    out = capsys.readouterr().out
    assert any(line.startswith("read 2 runs of dataset 'data47' from their config.json and metrics.csv only: it is "
                               "not registered in this process") for line in out.splitlines()), out
    (row,) = _table(tmp_path / "rep")
    assert row["dataset"] == "data47" and row["seeds"] == "2" and float(row["final_acc_mean"]) == pytest.approx(0.6)
    assert row["guarantee"] in ("holds", "does not hold")
