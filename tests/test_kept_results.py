"""docs/lab/results.md's kept tables are what their kept runs say: ``fedalf report docs/ablation-runs`` regenerates
every cell of §1's ablation table and ``fedalf report docs/cnn-runs`` every accuracy cell of §7's CNN table,
and one cell of each matches its runs' metrics.csv read by hand."""

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest

from fedalf_jax.reporting import report

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "docs" / "ablation-runs"


def _doc_table() -> dict:
    """(upload, history, ρ) -> the four cells of §1's FedALF table, as written."""
    text = (REPO / "docs" / "lab" / "results.md").read_text()
    table = {}
    for line in text.splitlines():
        m = re.match(r"\|\s*\**(increment|model|augmented), (on|off), ([\d.]+)[^|]*\|(.*)\|\s*$", line)
        if m:
            cells = [c.strip().strip("*") for c in m.group(4).split("|")]
            table[(m.group(1), m.group(2) == "on", m.group(3))] = cells
    return table


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    out = report([str(RUNS)], str(tmp_path_factory.mktemp("ablation")))
    found = {}
    for r in out["rows"]:
        a = r["algorithm"]
        key = (re.search(r"server_target=(\w+)", a).group(1), re.search(r"history=(\w+)", a).group(1) == "True",
               re.search(r"rho=([\d.]+)", a).group(1))
        found[key, r["partition"]] = r
    return found


def _fmt(r, k):
    return (f"{r[k + '_acc_mean']:.3f} ± {r[k + '_acc_std']:.3f} "
            f"({r[k + '_angle_mean']:.1f} ± {r[k + '_angle_std']:.1f}°)")


def test_the_kept_runs_are_the_whole_grid():
    want = {f"fedalf_rho{r}_history-{h}_server_target-{t}_seed{s}" for r in ("0.01", "0.1", "1")
            for h in ("on", "off") for t in ("increment", "augmented", "model") for s in (0, 1, 2)}
    assert len(want) == 54  # 3 × 2 × 3 × 3 per partition
    for part in ("pat1", "pat2"):
        assert {d.name for d in (RUNS / part).iterdir()} == want, part
        for d in (RUNS / part).iterdir():
            assert sorted(p.name for p in d.iterdir()) == ["config.json", "metrics.csv", "summary.json"], d


def test_the_report_regenerates_every_cell_of_the_table(rows):
    doc = _doc_table()
    assert len(doc) == 18 and len(rows) == 36
    for key, cells in doc.items():
        a, b = rows[key, "pat1"], rows[key, "pat2"]
        assert cells == [_fmt(a, "final"), _fmt(a, "lastK"), _fmt(b, "final"), _fmt(b, "lastK")], key


def _check_read_by_hand(row, run_dirs):
    """The report's row agrees with the runs' metrics.csv read with csv and numpy alone."""
    final, last5 = [], []
    for d in run_dirs:
        with open(d / "metrics.csv") as f:
            got = [(int(r["round"]), float(r["mean_acc"])) for r in csv.DictReader(f)]
        assert [g[0] for g in got] == list(range(0, 201, 10))  # every 10 rounds, round 0 to 200
        final.append(got[-1][1])
        last5.append(np.mean([acc for _, acc in got[-5:]]))  # rounds 160-200
    assert row["seeds"] == len(run_dirs)
    assert row["final_acc_mean"] == pytest.approx(np.mean(final), abs=1e-12)
    assert row["final_acc_std"] == pytest.approx(np.std(final, ddof=1), abs=1e-12)
    assert row["lastK_acc_mean"] == pytest.approx(np.mean(last5), abs=1e-12)


def test_the_defaults_cell_read_by_hand(rows):
    runs = [RUNS / "pat1" / f"fedalf_rho0.01_history-on_server_target-increment_seed{s}" for s in range(3)]
    _check_read_by_hand(rows[("increment", True, "0.01"), "pat1"], runs)


# ---- The CNN, 200 rounds: docs/lab/results.md §7's table and docs/cnn-runs ---------------------------------

CNN = REPO / "docs" / "cnn-runs"
CNN_SWEEPS = {  # sweep name (experiments/seed_cnn.sh) -> its one run: 4 methods × 2 partitions × seeds 0, 1
    f"{m}_{p}{s}": r for m, r in (("fedavg", "fedavg"), ("fedlf-local", "fedlf"), ("fedalf", "fedalf"),
                                  ("ldp-fedalf", "fedalf")) for p in ("pat1", "pat2") for s in ("", ".s1")
}
CNN_ROWS = {"FedAvg (η 0.1)": "FedAvg", "FedLF, local SGD (η 0.1)": "FedLF", "FedALF (η 0.05)": "FedALF",
            "LDP-FedALF, ε 2 (η 0.05)": "LDP-FedALF"}


def _cnn_doc_table() -> dict:
    """Row label -> the four accuracy cells of §7's 200-round table, as written."""
    text = (REPO / "docs" / "lab" / "results.md").read_text()
    section = text[text.index("\n## 7."):text.index("\n## 8.")]
    table = {}
    for line in section.splitlines():
        cells = [c.strip().strip("*").strip() for c in line.strip().strip("|").split("|")]
        if cells[0] in CNN_ROWS:
            table[cells[0]] = cells[1:5]
    return table


def _cell(r, k):
    if r[k + "_acc_std"] is None:  # one seed: the mean alone
        return f"{r[k + '_acc_mean']:.3f} ({r[k + '_angle_mean']:.1f}°)"
    return _fmt(r, k)


@pytest.fixture(scope="module")
def cnn_rows(tmp_path_factory):
    out = report([str(CNN)], str(tmp_path_factory.mktemp("cnn")))
    assert out["skipped"] == {"diverged": ["fedlf"]}, out["skipped"]  # FedLF-local's seed 1 on pat2, below
    rows = {(r["algorithm"], r["partition"]): r for r in out["rows"]}
    one = report([str(CNN / "fedlf-local_pat2")], str(tmp_path_factory.mktemp("seed0")))
    rows["FedLF", "pat2", "seed 0"] = one["rows"][0]
    return rows


def test_the_kept_cnn_runs_are_the_whole_study():
    assert len(CNN_SWEEPS) == 16
    assert {d.name for d in CNN.iterdir()} == set(CNN_SWEEPS)
    for sweep, run in CNN_SWEEPS.items():
        assert [d.name for d in (CNN / sweep).iterdir()] == [run], sweep
        assert sorted(p.name for p in (CNN / sweep / run).iterdir()) == ["config.json", "metrics.csv",
                                                                          "summary.json"], sweep


def test_the_report_regenerates_the_cnn_table(cnn_rows):
    doc = _cnn_doc_table()
    assert set(doc) == set(CNN_ROWS) and len(cnn_rows) == 8  # 7 cells, FedLF-local's pat2 seed 0 alone
    assert ("FedLF", "pat2") not in cnn_rows  # a diverged seed leaves the cell empty
    for label, cells in doc.items():
        a = cnn_rows[CNN_ROWS[label], "pat1"]
        if CNN_ROWS[label] == "FedLF":
            b = cnn_rows["FedLF", "pat2", "seed 0"]
            want = [f"seed 1 diverged (round 70); seed 0: {_cell(b, 'final')}", f"seed 0: {_cell(b, 'lastK')}"]
        else:
            b = cnn_rows[CNN_ROWS[label], "pat2"]
            want = [_cell(b, "final"), _cell(b, "lastK")]
        assert cells == [_cell(a, "final"), _cell(a, "lastK"), *want], label


def test_the_one_diverged_cnn_run_is_fedlf_local_pat2_seed_1():
    status = {s: json.loads((CNN / s / r / "summary.json").read_text())["status"] for s, r in CNN_SWEEPS.items()}
    assert {s for s, v in status.items() if v != "done"} == {"fedlf-local_pat2.s1"}
    assert status["fedlf-local_pat2.s1"] == "diverged"
    with open(CNN / "fedlf-local_pat2.s1" / "fedlf" / "metrics.csv") as f:
        got = [(int(r["round"]), float(r["test_loss"])) for r in csv.DictReader(f)]
    assert [r for r, loss in got if not np.isfinite(loss)][0] == 70  # "seed 1 diverged (round 70)"


def test_cnn_fedalf_pat1_read_by_hand(cnn_rows):
    _check_read_by_hand(cnn_rows["FedALF", "pat1"], [CNN / s / "fedalf" for s in ("fedalf_pat1", "fedalf_pat1.s1")])
