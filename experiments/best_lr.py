"""Print the η with the best final mean accuracy for one algorithm/partition/model in a grid folder."""

import json
import sys
from pathlib import Path

root, alg, part, model = sys.argv[1:5]
best = None
for s in Path(root).glob(f"{alg}_{part}_{model}_lr*/summary.json"):
    acc = json.loads(s.read_text())["final"]["mean_acc"]
    lr = float(s.parent.name.rsplit("_lr", 1)[1])
    if best is None or acc > best[0]:
        best = (acc, lr)
print(best[1] if best else 0.05)
