"""AFL's own setting (Mohri et al. 2019, §5; q-FFL's comparison with it, Li et al. 2020, Table 2): three
clients that are the Fashion-MNIST classes T-shirt/top (0), pullover (2) and shirt (6), each holding all the
training and test images of its class, a logistic-regression model over the three classes, every client in
every round. Runs FedAvg, AFL (examples/afl.py) and q-FFL (the built-in qfedavg) for 5 seeds and writes each
client's final test accuracy, mean ± std over the seeds, to docs/afl.md's table (printed; the runs go to
runs/afl-setting/).

The recipe, with the built-in data and nothing else: load Fashion-MNIST as the package does, keep the three
classes, relabel them 0, 1, 2, and register them with one list of row indices per client (its class's
training rows, and its class's test rows):

    d = load_dataset("fmnist")                                   # fedalf_jax.problem.data
    keep = lambda y: np.flatnonzero(np.isin(y, CLASSES))
    fj.register_dataset("fmnist3", x_tr, relabel(y_tr), x_te, relabel(y_te), num_classes=3,
                        clients=([rows of class c in x_tr for c], [rows of class c in x_te for c]))
    fj.register_model("logreg", LogReg)                          # Dense(num_classes) on the flat image
    fj.run(fj.Config(dataset="fmnist3", partition="given", clients=3, clients_per_round=3, model="logreg", ...))

Usage: nice -n 10 .venv/bin/python experiments/afl_setting.py [--rounds 200] [--seeds 5] [--out runs/afl-setting]
"""

import argparse
import sys
from pathlib import Path

import flax.linen as nn
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import fedalf_jax as fj  # noqa: E402
from fedalf_jax.problem.data import load_dataset  # noqa: E402

CLASSES = (0, 2, 6)                       # T-shirt/top, pullover, shirt
NAMES = ("T-shirt/top", "pullover", "shirt")


class LogReg(nn.Module):
    """Multinomial logistic regression: one Dense layer on the flattened image."""
    num_classes: int

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.num_classes)(x.reshape((x.shape[0], -1)))


def register():
    d = load_dataset("fmnist")
    tr, te = np.flatnonzero(np.isin(d.y_train, CLASSES)), np.flatnonzero(np.isin(d.y_test, CLASSES))
    relabel = np.full(10, -1)
    relabel[list(CLASSES)] = np.arange(3)
    y_tr, y_te = relabel[d.y_train[tr]], relabel[d.y_test[te]]
    lists = ([np.flatnonzero(y_tr == k) for k in range(3)], [np.flatnonzero(y_te == k) for k in range(3)])
    fj.register_dataset("fmnist3", d.x_train[tr], y_tr, d.x_test[te], y_te, num_classes=3, clients=lists)
    fj.register_model("logreg", LogReg)
    return [len(a) for a in lists[0]], [len(a) for a in lists[1]]


ALGORITHMS = {                                        # name -> the Config's options
    "FedAvg": dict(algorithm="fedavg"),
    "AFL (γ_λ = 0.1)": dict(algorithm="examples.afl:afl", hp={"lam_lr": 0.1}),
    "q-FFL (q = 5)": dict(algorithm="qfedavg", q=5.0),
    "q-FFL (q = 1)": dict(algorithm="qfedavg", q=1.0),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--out", default="runs/afl-setting")
    args = ap.parse_args()
    n_train, n_test = register()
    print(f"clients' examples: train {n_train}, test {n_test}")
    base = dict(dataset="fmnist3", partition="given", clients=3, clients_per_round=3, model="logreg",
                rounds=args.rounds, eval_every=args.rounds, local_epochs=1, batch_size=100, lr=0.1, lr_decay=1.0,
                server_lr=1.0)
    rows = []
    for label, opts in ALGORITHMS.items():
        accs = []
        for seed in range(args.seeds):
            out = Path(args.out) / f"{opts['algorithm'].split(':')[-1]}-{label.split('= ')[-1].rstrip(')')}-s{seed}"
            res = fj.run(fj.Config(**base, **opts, seed=seed, out=str(out)), progress=False, overwrite=True)
            last = res.metrics.iloc[-1]
            accs.append([float(last[f"acc_{i}"]) for i in range(3)])
        a = np.asarray(accs)
        rows.append((label, a.mean(0), a.std(0, ddof=1), a.mean(1).mean(), a.min(1).mean()))
        print(label, np.round(a, 4).tolist(), flush=True)
    print()
    print(f"| algorithm | {' | '.join(NAMES)} | mean | worst client |")
    print("|---|" + "---|" * 5)
    for label, m, s, mean, worst in rows:
        cells = " | ".join(f"{100 * x:.1f} ± {100 * y:.1f}" for x, y in zip(m, s))
        print(f"| {label} | {cells} | {100 * mean:.1f} | {100 * worst:.1f} |")


if __name__ == "__main__":
    main()
