"""docs/reproductions.md's cells are what its kept runs say: each finished row recomputed from the kept
metrics.csv files (the last row of each seed's run: mean ± sample std over the seeds)."""

import csv
import re
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "docs" / "reproductions-runs" / "table1"


def _cells(sweep: str) -> tuple[str, str]:
    rows = [list(csv.DictReader(open(f)))[-1] for f in sorted((RUNS / sweep).glob("*/metrics.csv"))]
    assert len(rows) == 5 and {int(r["round"]) for r in rows} == {3000}
    acc = np.array([float(r["mean_acc"]) for r in rows]) * 100
    angle = np.array([float(r["angle"]) for r in rows])
    return f"{acc.mean():.2f} ± {acc.std(ddof=1):.2f}", f"{angle.mean():.4f} ± {angle.std(ddof=1):.4f}"


def test_fedlf_table1_row_is_its_kept_runs():
    text = (REPO / "docs" / "reproductions.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| FedLF "))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert tuple(cells[1:3]) == _cells("fedlf-pat1")
    assert re.search(r"3,000 rounds, 5 seeds", text)
