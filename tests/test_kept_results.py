"""docs/results.md §1's ablation table is what its kept runs say: ``fedalf report docs/ablation-runs``
regenerates every cell, and the default's cell matches the runs' metrics.csv read by hand."""

import csv
import re
from pathlib import Path

import numpy as np
import pytest

from fedalf_jax.experiment.report import report

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "docs" / "ablation-runs"


def _doc_table() -> dict:
    """(upload, history, ρ) -> the four cells of §1's FedALF table, as written."""
    text = (REPO / "docs" / "results.md").read_text()
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


def test_the_defaults_cell_read_by_hand(rows):
    final, last5 = [], []
    for s in range(3):
        with open(RUNS / "pat1" / f"fedalf_rho0.01_history-on_server_target-increment_seed{s}" / "metrics.csv") as f:
            got = [(int(r["round"]), float(r["mean_acc"])) for r in csv.DictReader(f)]
        assert [g[0] for g in got] == list(range(0, 201, 10))  # every 10 rounds, round 0 to 200
        final.append(got[-1][1])
        last5.append(np.mean([acc for _, acc in got[-5:]]))  # rounds 160-200
    r = rows[("increment", True, "0.01"), "pat1"]
    assert r["final_acc_mean"] == pytest.approx(np.mean(final), abs=1e-12)
    assert r["final_acc_std"] == pytest.approx(np.std(final, ddof=1), abs=1e-12)
    assert r["lastK_acc_mean"] == pytest.approx(np.mean(last5), abs=1e-12)
