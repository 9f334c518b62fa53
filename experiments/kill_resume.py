"""Kill a sweep with SIGKILL at random moments, resume it, and compare with an uninterrupted sweep.

    python experiments/kill_resume.py --kills 5 --seed 0 [--rounds 12] [--out /tmp/kill_resume]

Each trial starts the same small sweep (synthetic data; FedALF with history rows and FedAvg, seeds
× learning rates, a checkpoint every 2 rounds, 3 runs per program call) in a subprocess, kills it
with SIGKILL after a random number of its evaluation rows have been written (plus a random fraction
of a second), then runs ``fedalf sweep ... --resume`` with the same options to
completion. It checks that every run's metrics.csv equals the uninterrupted sweep's (every column but
seconds_per_round), that every run is done, and that no temporary file is left behind.
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

SWEEP = ["--dataset", "synthetic", "--model", "mlp", "--clients", "8", "--clients-per-round", "3",
         "--synthetic-train", "600", "--synthetic-test", "160", "--batch-size", "20", "--rounds", "12",
         "--eval-every", "2", "--checkpoint-every", "2", "--algorithm", "fedalf", "fedavg", "--history", "on",
         "--seeds", "0", "1", "--lr", "0.02", "0.1", "--sweep-chunk", "3", "--no-progress"]


ROUNDS = SWEEP.index("--rounds") + 1  # --rounds N replaces SWEEP[ROUNDS]


def fedalf(*args, rounds=None, **kw):
    sweep = SWEEP if rounds is None else [*SWEEP[:ROUNDS], str(rounds), *SWEEP[ROUNDS + 1:]]
    return subprocess.Popen([sys.executable, "-m", "fedalf_jax.cli", "sweep", *sweep, *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)


def rows(root: Path) -> int:
    """Evaluation rows written so far over all the sweep's runs."""
    n = 0
    for m in root.glob("*/metrics.csv"):
        try:
            n += max(0, sum(1 for _ in open(m)) - 1)
        except OSError:
            pass
    return n


def metrics(root: Path) -> dict:
    out = {}
    for m in sorted(root.glob("*/metrics.csv")):
        with open(m) as f:
            rows = list(csv.DictReader(f))
        out[m.parent.name] = [{k: v for k, v in r.items() if k != "seconds_per_round"} for r in rows]
    return out


def check(root: Path, ref: dict) -> list[str]:
    problems = []
    got = metrics(root)
    if got != ref:
        bad = [k for k in ref if got.get(k) != ref[k]]
        problems.append(f"metrics differ in {bad}")
    for d in root.iterdir():
        if d.is_dir() and not (d / "summary.json").is_file():
            problems.append(f"{d.name} has no summary.json")
    tmp = [str(p.relative_to(root)) for p in root.rglob("*.tmp*")]
    if tmp:
        problems.append(f"temporary files left: {tmp}")
    return problems


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kills", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="/tmp/kill_resume")
    p.add_argument("--rounds", type=int, default=None, help="the sweep's rounds (default 12; at least 4)")
    a = p.parse_args()
    if a.rounds is not None and a.rounds < 4:
        p.error("--rounds must be at least 4 (the kill lands before the sweep's last 8 evaluation rows)")
    root = Path(a.out)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    t0 = time.time()
    if fedalf("--out", str(root / "reference"), rounds=a.rounds).wait() != 0:
        print("the reference sweep failed")
        return 1
    duration = time.time() - t0
    ref = metrics(root / "reference")
    print(f"reference sweep: {len(ref)} runs in {duration:.1f} s")
    rng = random.Random(a.seed)
    failures = 0
    for k in range(a.kills):
        d = root / f"trial{k}"
        # the kill lands after a random number of the sweep's evaluation rows (so it falls inside the
        # sweep whatever the machine's load), plus up to 0.2 s (anywhere in the code)
        target = rng.randint(1, rows(root / "reference") - 8)  # rows arrive a program call at a time
        extra = rng.uniform(0.0, 0.2)
        t_start = time.time()
        proc = fedalf("--out", str(d), rounds=a.rounds)
        while rows(d) < target and proc.poll() is None:
            time.sleep(0.02)
        time.sleep(extra)
        delay = time.time() - t_start
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        at = rows(d)
        ckpts = len(list(d.glob("*/checkpoint.npz"))) if d.exists() else 0
        done = len(list(d.glob("*/summary.json"))) if d.exists() else 0
        if fedalf("--resume", "--out", str(d), rounds=a.rounds).wait() != 0:
            print(f"trial {k}: the resume failed")
            failures += 1
            continue
        problems = check(d, ref)
        failures += bool(problems)
        print(f"trial {k}: killed after {delay:.1f} s, at {at} of {rows(root / 'reference')} rows ({done} runs done, {ckpts} with a checkpoint) -> "
              f"{'identical metrics, all done, no temporary files' if not problems else '; '.join(problems)}")
    return 1 if failures else 0


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.exit(main())
