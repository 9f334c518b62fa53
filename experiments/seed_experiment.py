"""The seed paper's experiment (docs/lab/results.md), as ``fedalf sweep`` calls.

For each algorithm, the step size η is tuned over {0.01, 0.05, 0.1} as FedLF's authors did (the value
whose seed-mean final accuracy is best, per partition) on ``--tune-seeds``; the ``--extra-seeds`` then
run at the chosen η only. The private variants of FedALF run at FedALF's chosen η on every seed, at
ε = 2: LDP-FedALF as users run it (``--ldp adaptive`` with its guarantee-holding defaults, docs/privacy.md)
and DP-FedALF (local Gaussian DP, the paper's). Every sweep writes ``OUT/<name>/``; ``fedalf report
OUT/*`` makes the tables. Each sweep resumes where a killed one stopped, and ``--rounds`` larger than
a finished sweep's extends its runs (``fedalf sweep --resume --rounds``).

    python experiments/seed_experiment.py --model mlp --rounds 200 --out runs/seed-mlp
    python experiments/seed_experiment.py --model cnn --rounds 200 --tune-seeds 0 1 --extra-seeds \\
        --only fedavg fedlf-local fedalf ldp-fedalf --out runs/seed-cnn
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ETAS = ("0.01", "0.05", "0.1")
# name -> (sweep options, the option that carries η)
TUNED = {
    "fedalf": (["--algorithm", "fedalf"], "--lr"),
    "fedavg": (["--algorithm", "fedavg"], "--lr"),
    "qfedavg": (["--algorithm", "qfedavg"], "--lr"),
    "fedlf-full": (["--algorithm", "fedlf", "--client-grad", "full"], "--server-lr"),
    "fedlf-local": (["--algorithm", "fedlf", "--client-grad", "local"], "--lr"),
}
PRIVATE = {  # at FedALF's η
    "ldp-fedalf": ["--algorithm", "fedalf", "--ldp", "adaptive", "--epsilon", "2"],
    "dp-fedalf": ["--algorithm", "fedalf", "--dp", "gaussian", "--epsilon", "2"],
}


def sweep(out: Path, options: list[str], rounds: int, seeds: list[str]) -> None:
    """Start, finish or extend the sweep in ``out``."""
    if (out / "sweep.json").is_file():
        have = json.loads((out / "sweep.json").read_text())["runs"][0]["config"]["rounds"]
        extra = ["--rounds", str(rounds)] if rounds > have else []
        cmd = ["fedalf", "sweep", "--resume", "--out", str(out), *extra, "--no-progress"]
    else:
        cmd = ["fedalf", "sweep", *options, "--rounds", str(rounds), "--seeds", *seeds, "--out", str(out),
               "--no-progress"]
    print("$", " ".join(cmd), flush=True)
    subprocess.run([sys.executable, "-m", "fedalf_jax.cli", *cmd[1:]], check=True)


def best_eta(out: Path, key: str) -> dict[str, str]:
    """Per partition, the η (config ``key``) with the best seed-mean final accuracy."""
    runs = json.loads((out / "sweep.json").read_text())["runs"]
    acc: dict[tuple[str, float], list[float]] = {}
    for r in runs:
        s = out / r["dir"] / "summary.json"
        final = json.loads(s.read_text()).get("final", {}) if s.is_file() else {}
        a = final.get("mean_acc", float("nan"))
        acc.setdefault((r["config"]["partition"], r["config"][key]), []).append(a if a == a else 0.0)
    best: dict[str, tuple[float, float]] = {}
    for (part, eta), v in acc.items():
        m = sum(v) / len(v)
        if part not in best or m > best[part][1]:
            best[part] = (eta, m)
    return {p: f"{e:g}" for p, (e, _) in best.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="mlp")
    p.add_argument("--partition", nargs="+", default=["pat1", "pat2"])
    p.add_argument("--rounds", type=int, default=500)
    p.add_argument("--tune-seeds", nargs="+", default=["0", "1", "2"])
    p.add_argument("--extra-seeds", nargs="*", default=["3", "4"])
    p.add_argument("--only", nargs="+", default=[*TUNED, *PRIVATE], choices=[*TUNED, *PRIVATE])
    p.add_argument("--out", default="runs/seed-mlp")
    p.add_argument("--sweep-chunk", default=None)
    a = p.parse_args(argv)
    root = Path(a.out)
    common = ["--model", a.model] + (["--sweep-chunk", a.sweep_chunk] if a.sweep_chunk else [])
    chosen: dict[str, dict[str, str]] = {}
    for name in [n for n in TUNED if n in a.only or (n == "fedalf" and set(a.only) & set(PRIVATE))]:
        opts, flag = TUNED[name]
        key = flag[2:].replace("-", "_")
        sweep(root / name, [*opts, *common, "--partition", *a.partition, flag, *ETAS], a.rounds, a.tune_seeds)
        chosen[name] = best_eta(root / name, key)
        print(f"{name}: η by partition {chosen[name]}", flush=True)
    for name, etas in chosen.items():
        opts, flag = TUNED[name]
        if name not in a.only or not a.extra_seeds:
            continue
        for part, eta in etas.items():
            sweep(root / f"{name}-{part}-extra", [*opts, *common, "--partition", part, flag, eta], a.rounds,
                  a.extra_seeds)
    for name in [n for n in PRIVATE if n in a.only]:
        for part, eta in chosen["fedalf"].items():
            sweep(root / f"{name}-{part}", [*PRIVATE[name], *common, "--partition", part, "--lr", eta], a.rounds,
                  [*a.tune_seeds, *a.extra_seeds])
    path = root / "chosen_eta.json"  # merged with another invocation's (--only splits the work)
    merged = {**(json.loads(path.read_text()) if path.is_file() else {}), **chosen}
    path.write_text(json.dumps(merged, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
