"""The table of experiments/ldp_study.sh: per variant, partition and server step, mean ± std over seeds of
the final accuracy and angle, and of the mean of the last 3 evaluations.  python experiments/ldp_study_table.py"""
import collections
import csv
import json
import pathlib
import statistics

import sys
root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "runs/ldp-study")
cells = collections.defaultdict(list)
for m in sorted(root.glob("*/*/metrics.csv")):
    cfg = json.loads((m.parent / "config.json").read_text())
    rows = list(csv.DictReader(m.open()))
    if not rows or int(rows[-1]["round"]) != cfg["rounds"]:
        continue  # not finished
    last3 = rows[-3:]
    tau = f" history_tau={cfg['history_tau']}" if cfg.get("history_tau") is not None else ""
    cells[(f"{m.parent.parent.name.split('.')[0]} eps={cfg['epsilon']:g}{tau}", cfg["partition"],
           "default" if cfg["server_lr"] is None else f"{cfg['server_lr']:g}")].append((
        float(rows[-1]["mean_acc"]), float(rows[-1]["angle_deg"]),
        statistics.mean(float(r["mean_acc"]) for r in last3), statistics.mean(float(r["angle_deg"]) for r in last3)))


def ms(xs, fmt):
    return fmt.format(statistics.mean(xs)) + (" ± " + fmt.format(statistics.stdev(xs)) if len(xs) > 1 else "")


print("| variant | partition | η_g | seeds | final acc | final angle (°) | last-3 acc | last-3 angle (°) |")
print("|---|---|---|---|---|---|---|---|")
for (name, part, eta), v in sorted(cells.items()):
    cols = list(zip(*v))
    print(f"| {name} | {part} | {eta} | {len(v)} | {ms(cols[0], '{:.3f}')} | {ms(cols[1], '{:.1f}')} | "
          f"{ms(cols[2], '{:.3f}')} | {ms(cols[3], '{:.1f}')} |")
