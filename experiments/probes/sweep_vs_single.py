"""A sweep against its runs one by one: wall time and the largest metric difference.

    python experiments/probes/sweep_vs_single.py --out runs/sweep-vs-single          # FedALF, MLP, 4 seeds × 3 lr, 200 rounds

Runs ``fedalf sweep`` (one process) and then each of its runs as ``fedalf run --config
<run>/config.json`` (one process each, as a user would), timing the whole processes. Then compares
every run's metrics.csv with its single run's: the number of bit-identical files, and the largest
absolute difference of each metric. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import time
from pathlib import Path


def fedalf(*args) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "fedalf_jax.cli", *args], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/sweep-vs-single")
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--extra", nargs="*", default=[], help="more options for every run, e.g. --extra --partition pat2")
    a = p.parse_args()
    root = Path(a.out)
    opts = ["--algorithm", "fedalf", "--model", "mlp", "--rounds", str(a.rounds), "--no-progress", *a.extra]
    t_sweep = fedalf("sweep", *opts, "--seeds", "0", "1", "2", "3", "--lr", "0.01", "0.05", "0.1",
                     "--out", str(root / "sweep"))
    runs = json.loads((root / "sweep" / "sweep.json").read_text())["runs"]
    t_single = 0.0
    for r in runs:
        t_single += fedalf("run", "--config", str(root / "sweep" / r["dir"] / "config.json"), "--no-progress",
                           "--out", str(root / "single" / r["dir"]))
    identical, maxdiff = 0, {}
    for r in runs:
        a_, b_ = rows(root / "sweep" / r["dir"] / "metrics.csv"), rows(root / "single" / r["dir"] / "metrics.csv")
        same = True
        for x, y in zip(a_, b_):
            for k in x:
                if k == "seconds_per_round":
                    continue
                if x[k] != y[k]:
                    same = False
                    d = abs(float(x[k]) - float(y[k]))
                    maxdiff[k] = max(maxdiff.get(k, 0.0), d)
        identical += same
    res = {"runs": len(runs), "rounds": a.rounds, "sweep_wall_s": round(t_sweep, 1),
           "single_runs_wall_s": round(t_single, 1), "speedup": round(t_single / t_sweep, 2),
           "bit_identical_runs": identical,
           "max_abs_diff": {k: v for k, v in sorted(maxdiff.items(), key=lambda kv: -kv[1])[:12]}}
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
