"""Issue 48 item 6: a personalised method is ranked by what it deploys.

Before, the report's headline (the final-evaluation table) and η's choice used the global model of an algorithm
with a personal model (Ditto, FedPer, APFL, FedProto: their global θ can be near-useless, 0.05 beside 0.81), and a
sweep's ``best=`` was the best global ``mean_acc``. Now a cell whose runs record the ``personal_*`` columns is
scored and shown by ``personal_acc`` (marked "(personal)", the global model's beside it), and ``best=`` says which
accuracy it is by. The run directories are hand-built with known numbers (as tests/test_report.py's); the
expected values are computed here from the numbers written. The sweep's ``best=`` is checked on a two-round
sweep of FedAvg and Ditto on test_contract's one-bias problem, against the runs' own metrics.csv."""

import csv
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from fedalf_jax.cli import main
from fedalf_jax.experiment import progress as P
from fedalf_jax.experiment import sweep as S
from fedalf_jax.experiment.config import Config
from fedalf_jax.experiment.columns import PERSONAL_KEYS
from fedalf_jax.experiment.rundir import RunDir
from fedalf_jax.reporting import report

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # examples/ (Ditto)
from test_contract import _register  # noqa: E402

DITTO = "examples.ditto:ditto"
EVAL_ROUNDS = np.array([0, 5, 10])
SWING = np.array([-0.04, -0.02, 0.0])  # acc - final acc per evaluation
LAST = 2

# algorithm -> {lr: [(global final acc, personal final acc) per seed]}: Ditto's global model is best at 0.05,
# its personal models at 0.01 (where global and personal disagree); 0.1 has a seed whose personal models diverged
DITTO_RUNS = {0.01: [(0.05, 0.80), (0.05, 0.82)], 0.05: [(0.30, 0.60), (0.34, 0.62)]}
FEDAVG_RUNS = {0.01: [0.70, 0.72], 0.05: [0.60, 0.62]}


def _angle(acc: float) -> float:
    return 40.0 - 30.0 * acc


def make_run(root: Path, name: str, *, acc: float, personal=None, personal_loss=1.0, **options) -> None:
    """A done run of 10 rounds, 3 evaluations ending at global mean accuracy ``acc``; ``personal``: the clients'
    own models' final mean accuracy (the ``personal_*`` columns written, as a personal_model's run writes them)."""
    cfg = Config(**{"dataset": "fmnist", "partition": "pat1", "model": "mlp", "clients": 4, "clients_per_round": 2,
                    "rounds": 10, "eval_every": 5, **options})
    rd = RunDir(root / name)
    rd.create()
    rd.write_config(cfg)
    w = rd.writers(cfg, extra=PERSONAL_KEYS if personal is not None else ())[0]
    last = {}
    for t, s in zip(EVAL_ROUNDS, SWING):
        a = acc + s
        last = {"mean_acc": a, "angle": math.radians(_angle(a)), "angle_deg": _angle(a), "worst10_acc": a / 2,
                "test_loss": 1.0, **{f"acc_{i}": a for i in range(4)}}
        if personal is not None:
            p = personal + s
            last.update(personal_acc=p, personal_std_acc=0.01, personal_angle_deg=_angle(p),
                        personal_worst10_acc=p - 0.2, personal_test_loss=personal_loss if t == 10 else 1.0)
        w.write_scalars(int(t), last)
    w.close()
    rd.write_summary({"status": "done", "rounds": 10, "round": 10, "final": last})


@pytest.fixture(scope="module")
def rep(tmp_path_factory):
    root = tmp_path_factory.mktemp("deployed")
    for lr, seeds in DITTO_RUNS.items():
        for seed, (g, p) in enumerate(seeds):
            make_run(root, f"ditto_lr{lr}_s{seed}", acc=g, personal=p, algorithm=DITTO, lr=lr, seed=seed)
    # η = 0.1: the best personal accuracy of all (0.99), but one seed's personal models diverged (NaN test loss,
    # an older run that ended "done"): never chosen, never shown
    make_run(root, "ditto_lr0.1_s0", acc=0.2, personal=0.99, algorithm=DITTO, lr=0.1, seed=0)
    make_run(root, "ditto_lr0.1_s1", acc=0.2, personal=0.99, personal_loss=math.nan, algorithm=DITTO, lr=0.1, seed=1)
    for lr, seeds in FEDAVG_RUNS.items():
        for seed, a in enumerate(seeds):
            make_run(root, f"fedavg_lr{lr}_s{seed}", acc=a, algorithm="fedavg", lr=lr, seed=seed)
    out = tmp_path_factory.mktemp("deployed_report")
    return report([str(root)], str(out), last=LAST), out


def _rows(res) -> dict:
    return {r["algorithm"]: r for r in res["rows"]}


def _pm(values, digits=3) -> str:
    v = np.asarray(values, np.float64)
    return f"{v.mean():.{digits}f} ± {v.std(ddof=1):.{digits}f}"


def test_a_personalised_cell_is_chosen_and_shown_by_its_personal_models(rep):
    """Ditto's η is 0.01, its personal models' best (0.81; its global model's best η is 0.05, 0.32), the
    diverged η 0.1 is not eligible; the row's numbers are the personal models' with the global model's kept."""
    res, out = rep
    row = _rows(res)[DITTO]
    assert row["eta"] == 0.01 and row["seeds"] == 2 and row["ranked_by"] == "personal_acc"
    assert row["personal_acc_mean"] == pytest.approx(0.81)
    assert row["personal_acc_std"] == pytest.approx(np.std([0.80, 0.82], ddof=1))
    assert row["personal_angle_mean"] == pytest.approx(np.mean([_angle(0.80), _angle(0.82)]))
    assert row["final_acc_mean"] == pytest.approx(0.05)  # the global model's, in its own columns
    with open(out / "table.csv", newline="") as f:
        table = {r["algorithm"]: r for r in csv.DictReader(f)}
    assert table[DITTO]["ranked_by"] == "personal_acc" and table["FedAvg"]["ranked_by"] == "mean_acc"
    assert float(table[DITTO]["eta"]) == 0.01 and float(table[DITTO]["personal_acc_mean"]) == pytest.approx(0.81)


def test_a_global_cell_beside_it_keeps_its_global_numbers(rep):
    res, _ = rep
    row = _rows(res)["FedAvg"]
    assert row["eta"] == 0.01 and row["ranked_by"] == "mean_acc"
    assert row["final_acc_mean"] == pytest.approx(0.71) and row["personal_acc_mean"] is None


def test_the_headline_tables_show_the_personal_model_marked(rep):
    """The final-evaluation table's Ditto cell is 0.810 ± 0.014 (personal), the global 0.050 below it; the worst-10%
    and last-evaluations tables are the personal models' too; FedAvg's cells are its global model's, unmarked;
    the η choice lists the personal scores; the diverged seed's 0.99 appears nowhere."""
    _, out = rep
    md = (out / "report.md").read_text()
    final = md.split("### Final evaluation")[1].split("###")[0]
    ditto = next(line for line in final.splitlines() if line.startswith(f"| {DITTO} |"))
    angles = [_angle(0.80), _angle(0.82)]
    assert f"{_pm([0.80, 0.82])} ({_pm(angles, 1)}°) (personal)<br>global: 0.050 ± 0.000" in ditto, ditto
    assert "η=0.01 (2 seeds)" in ditto
    fedavg = next(line for line in final.splitlines() if line.startswith("| FedAvg |"))
    assert f"| {_pm([0.70, 0.72])} (" in fedavg and "personal" not in fedavg, fedavg
    worst = md.split("### The worst 10% of clients")[1].split("###")[0]
    assert f"{_pm([0.60, 0.62])} (personal)<br>global: 0.025 ± 0.000" in worst, worst  # personal - 0.2; global / 2
    last_k = md.split("### Mean of the last")[1].split("###")[0]
    lastk = [p + SWING[-LAST:].mean() for p in (0.80, 0.82)]  # the last 2 evaluations after round 0
    personal_lastk = f"{_pm(lastk)} ({_pm([_angle(p) for p in lastk], 1)}°) (personal)"
    assert f"{personal_lastk}<br>global: 0.040 ± 0.000" in last_k, last_k
    eta = md.split("### η choice")[1].split("###")[0]
    ditto_eta = next(line for line in eta.splitlines() if line.startswith(f"| {DITTO} |"))
    assert "by personal_acc: **0.01: 0.810 (2)**; 0.05: 0.610 (2); 0.1: 1/2 diverged" in ditto_eta, ditto_eta
    assert "**0.01: 0.710 (2)**; 0.05: 0.610 (2)" in eta
    assert "0.99" not in md
    personalised = md.split("## Personalised models")[1]
    assert f"| {DITTO} | 0.050 ± 0.000" in personalised  # the side-by-side table still shows the global model


def test_deployed_score_names_its_metric():
    assert S.deployed_score({"mean_acc": 0.05, "personal_acc": 0.81, "personal_test_loss": 0.4}) == (
        "personal_acc", 0.81)
    assert S.deployed_score({"mean_acc": 0.71}) == ("mean_acc", 0.71)
    assert S.deployed_score({"mean_acc": 0.05, "personal_acc": 0.9, "personal_test_loss": math.nan}) == (
        "personal_acc", None)  # diverged personal models: no score


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """``fedalf sweep`` of FedAvg and Ditto (λ = 0.3, 2 rounds) on the one-bias problem, its progress line's
    ``best=`` values and its printed lines."""
    _register()
    out = tmp_path_factory.mktemp("sweep") / "s"
    seen = []
    mp = pytest.MonkeyPatch()
    mp.setattr(P.Progress, "postfix", lambda self, **kw: seen.append(kw.get("best")))
    import contextlib
    import io
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            assert main(["sweep", "--algorithm", "fedavg", DITTO, "--dataset", "one_label_each", "--partition",
                         "given", "--model", "bias3", "--clients", "3", "--clients-per-round", "3", "--rounds", "2",
                         "--eval-every", "1", "--batch-size", "2", "--lr", "0.5", "--hp", "lam=0.3", "--no-progress",
                         "--out", str(out)]) == 0
    finally:
        mp.undo()
    return out, seen, printed.getvalue()


def _finals(out: Path) -> dict:
    res = {}
    for d in out.iterdir():
        if (d / "summary.json").is_file():
            s = json.loads((d / "summary.json").read_text())
            res[json.loads((d / "config.json").read_text())["algorithm"]] = (d.name, s["final"])
    return res


def test_the_sweeps_best_says_what_it_is_by(swept):
    """The last ``best=`` of the progress line and the closing ``best:`` line are the best deployed score:
    Ditto's personal_acc against FedAvg's mean_acc, each named, read here from the runs' summary.json."""
    out, seen, printed = swept
    finals = _finals(out)
    assert set(finals) == {"fedavg", DITTO}
    ditto_name, ditto = finals[DITTO]
    fedavg_name, fedavg = finals["fedavg"]
    assert ditto["personal_acc"] != ditto["mean_acc"]  # the two criteria differ here
    scores = {"personal_acc": ditto["personal_acc"], "mean_acc": fedavg["mean_acc"]}
    by = max(scores, key=scores.get)
    assert seen[-1] == f"{scores[by]:.4f} by {by}", seen
    name = ditto_name if by == "personal_acc" else fedavg_name
    line = next(x for x in printed.splitlines() if x.startswith("best:"))
    assert line.startswith(f"best: {name} {by} {scores[by]:.4f}") and f"(by {by}" in line, line
    # a resumed sweep starts its best= from the finished runs' summary.json: the same
    state = {"best": -math.inf}
    S._best_of_finished(S.read_sweep(out)["runs"], out, state)
    assert S._best_text(state) == seen[-1]
    # each run alone: the progress line names the criterion of each algorithm
    for final, key in ((ditto, "personal_acc"), (fedavg, "mean_acc")):
        state = {"best": -math.inf}
        S._record_best(state, final)
        assert S._best_text(state) == f"{final[key]:.4f} by {key}"

