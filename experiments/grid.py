"""Run a grid of experiments (one run directory each) and print the paper-style table.

    python experiments/grid.py --out runs/table --algorithms fedavg qfedavg fedlf fedalf \
        --partitions pat1 pat2 --models mlp --lrs 0.01 0.05 0.1 --rounds 200

Each run is ``fedalf run`` with the named options; a run whose ``summary.json`` exists is skipped,
so the script can be stopped and restarted. ``--lrs`` is the step size η the FedLF authors tuned
over {0.01, 0.05, 0.1}: the local learning rate, and for ``fedlf`` with ``client_grad=full`` (no
local training) the server's. ``--table-only`` prints the table of what is there: for each
algorithm × partition × model, the η with the best final mean accuracy.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from fedalf_jax.config import Config


def run_name(alg: str, part: str, model: str, lr: float, extra: str = "") -> str:
    return f"{alg}{extra}_{part}_{model}_lr{lr:g}"


def config_for(alg, part, model, lr, rounds, out, extra_kw) -> Config:
    kw = dict(algorithm=alg, partition=part, model=model, rounds=rounds, out=str(out), lr=lr, **extra_kw)
    if alg == "fedlf" and extra_kw.get("client_grad", "full") == "full":
        kw["server_lr"] = lr
    return Config(**kw).validated()


def table(root: Path) -> str:
    rows = {}
    for s in sorted(root.glob("*/summary.json")):
        cfg = json.loads((s.parent / "config.json").read_text())
        fin = json.loads(s.read_text())["final"]
        key = (s.parent.name.split("_")[0], cfg["partition"], cfg["model"])
        lr = cfg["server_lr"] if cfg["algorithm"] == "fedlf" and cfg["client_grad"] == "full" else cfg["lr"]
        best = rows.get(key)
        if best is None or fin["mean_acc"] > best[1]["mean_acc"]:
            rows[key] = (lr, fin, cfg["rounds"])
    lines = ["| algorithm | partition | model | η | rounds | mean acc | angle (deg) | worst 10% |",
             "|---|---|---|---|---|---|---|---|"]
    for (alg, part, model), (lr, fin, rounds) in sorted(rows.items(), key=lambda kv: (kv[0][2], kv[0][1])):
        lines.append(f"| {alg} | {part} | {model} | {lr:g} | {rounds} | {fin['mean_acc']:.4f} | "
                     f"{fin['angle_deg']:.2f} | {fin['worst10_acc']:.4f} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--algorithms", nargs="+", default=["fedavg", "qfedavg", "fedlf", "fedalf"])
    p.add_argument("--partitions", nargs="+", default=["pat1", "pat2"])
    p.add_argument("--models", nargs="+", default=["mlp"])
    p.add_argument("--lrs", nargs="+", type=float, default=[0.01, 0.05, 0.1])
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=JSON",
                   help="extra config values for every run, e.g. ldp='\"adaptive\"' eval_every=20")
    p.add_argument("--tag", default="", help="suffix of the algorithm part of each run name, without '_'; "
                                              "one starting with '-' must be written --tag=-x")
    p.add_argument("--table-only", action="store_true")
    a = p.parse_args()
    root = Path(a.out)
    extra = {k: json.loads(v) for k, v in (s.split("=", 1) for s in a.set)}
    if not a.table_only:
        from fedalf_jax.run import run
        for model in a.models:
            for part in a.partitions:
                for alg in a.algorithms:
                    for lr in a.lrs:
                        out = root / run_name(alg, part, model, lr, a.tag)
                        if (out / "summary.json").exists() or (out / "diverged.txt").exists():
                            continue
                        t0 = time.time()
                        try:
                            rows = run(config_for(alg, part, model, lr, a.rounds, out, extra), progress=False)
                        except FloatingPointError as e:
                            (out / "diverged.txt").write_text(str(e) + "\n")
                            print(f"{out.name}: {e}", flush=True)
                            continue
                        last = rows[-1]
                        print(f"{out.name}: acc {last['mean_acc']:.4f} angle {last['angle_deg']:.2f}° "
                              f"({time.time() - t0:.0f} s)", flush=True)
    print(table(root))


if __name__ == "__main__":
    main()
