"""docs/reproductions.md's cells are what its kept runs say: each finished row recomputed from the kept
metrics.csv files (the last row of each seed's run: mean ± sample std over the seeds; FedFV's FMNIST-3 rows
mean ± np.std, ddof 0, as its authors' table script)."""

import csv
import json
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


TABLE1_ROWS = {"FedLF": "fedlf", "FedAvg": "fedavg", "qFedAvg": "qfedavg", "FedMDFG": "fedmdfg", "FedALF": "fedalf",
               "LDP-FedALF": "ldp-fedalf"}  # the doc's row -> experiments/fedlf_table1.sh's job name


def test_fedlf_table1_rows_are_their_kept_runs():
    """Every cell of FedLF's Table 1 with numbers equals its kept runs' (pat1 then pat2); the others say why
    they have none; FedLF's pat1 row is there."""
    text = (REPO / "docs" / "reproductions.md").read_text()
    section = text[text.index("## FedLF's Table 1"):text.index("**The published values**")]  # ours, not theirs
    done = []
    for line in section.splitlines():
        label = line.strip("| ").split(" ")[0] if line.startswith("| ") else ""
        if label not in TABLE1_ROWS:
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        for part, (acc, angle) in zip(("pat1", "pat2"), (cells[1:3], cells[3:5])):
            if acc in ("running", "queued", "not run yet"):
                assert angle == "", line
                continue
            assert (acc, angle) == _cells(f"{TABLE1_ROWS[label]}-{part}"), (label, part)
            done.append(f"{TABLE1_ROWS[label]}-{part}")
    assert "fedlf-pat1" in done
    assert sorted(done) == sorted(p.name for p in RUNS.iterdir() if p.is_dir()), "a kept row missing in the doc"
    assert re.search(r"3,000 rounds, 5 seeds", text)


# ---- FedFV's FMNIST-3 comparison (experiments/fedfv_fmnist3.py) ----------------------------------------------

FEDFV_RUNS = REPO / "docs" / "reproductions-runs" / "fedfv-fmnist3"
FEDFV_SEEDS = (0, 12, 37, 119, 568)  # the authors' records' seeds


def _fedfv_cells(tag: str) -> list[str]:
    """One kept row's six cells: shirt, pullover, T-shirt/top, the mean, the three clients' std and the worst
    client (%), each mean ± np.std (ddof 0, as easyFL's table_fmnist) over the 5 seeds' last rows."""
    accs = []
    for seed in FEDFV_SEEDS:
        run = FEDFV_RUNS / tag / f"seed{seed}"
        cfg = json.loads((run / "config.json").read_text())
        assert (cfg["rounds"], cfg["clients"], cfg["clients_per_round"], cfg["batch_size"], cfg["local_epochs"],
                cfg["lr"], cfg["lr_decay"], cfg["seed"], cfg["dataset"]) == \
               (201, 3, 3, 5600, 1, 0.1, 1.0, seed, f"fmnist3-easyfl-s{seed}"), (tag, seed)
        last = list(csv.DictReader(open(run / "metrics.csv")))[-1]
        assert int(last["round"]) == 201
        prefix = "avg_acc" if cfg.get("eval_average") else "acc"  # AFL: the averaged iterate, as the authors'
        accs.append([100 * float(last[f"{prefix}_{i}"]) for i in range(3)])
    a = np.array(accs)
    cols = np.stack([a[:, 2], a[:, 1], a[:, 0], a.mean(1), a.std(1), a.min(1)], axis=1)
    return [f"{m:.2f} ± {s:.2f}" for m, s in zip(cols.mean(0), cols.std(0))]


def test_fedfv_fmnist3_rows_are_their_kept_runs():
    text = (REPO / "docs" / "reproductions.md").read_text()
    section = text.split("## FedFV's FMNIST-3 comparison", 1)[1]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| ") and "| ours |" in line]
    tags = [re.search(r"`([^`]+)`", r[0]).group(1) for r in rows]
    assert sorted(tags) == sorted(p.name for p in FEDFV_RUNS.iterdir() if p.is_dir())  # every kept sweep, once
    for tag, r in zip(tags, rows):
        assert r[2:8] == _fedfv_cells(tag), tag
