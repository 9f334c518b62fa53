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

``--protocol qffl`` runs the setting as q-FFL's official code (litian96/fair_flearn, its AFL comparison) runs
it instead: pixels standardised with the Fashion-MNIST training set's per-pixel mean and std (all 60,000
images, as fair_flearn's data/fmnist/create_dataset.py; a pixel with std 0 is only centred), one minibatch
step of B = 10 per client per round (``local_steps=1``), η_l = 0.1, AFL's γ_λ = 0.1, every client every
round, and the averaged iterate θ̄ (``eval_average``) evaluated, for uniform weights (FedAvg with one step),
AFL and q-FFL (q = 5, fair_flearn's README's value for its AFL comparison, and q = 1). The seeds of each
algorithm run as one sweep (``fj.sweep``); both the averaged and the last iterate's tables are printed.
``--batch-size 6000`` makes the one step a full-gradient step (fair_flearn's trainers' actual batch):

    nice -n 10 .venv/bin/python experiments/afl_setting.py --protocol qffl --rounds 600 --seeds 5 [--batch-size 6000]
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


def standardise(x_train, x_test):
    """fair_flearn's preprocessing: (x − μ)/σ per pixel, μ and σ over the training set; σ = 0: only centred."""
    x_train, x_test = x_train.astype(np.float32), x_test.astype(np.float32)
    mu, sd = x_train.mean(0), x_train.std(0)
    sd = np.where(sd > 0, sd, 1.0).astype(np.float32)
    return (x_train - mu) / sd, (x_test - mu) / sd


def register(standardised=False):
    d = load_dataset("fmnist")
    x_train, x_test = standardise(d.x_train, d.x_test) if standardised else (d.x_train, d.x_test)
    tr, te = np.flatnonzero(np.isin(d.y_train, CLASSES)), np.flatnonzero(np.isin(d.y_test, CLASSES))
    relabel = np.full(10, -1)
    relabel[list(CLASSES)] = np.arange(3)
    y_tr, y_te = relabel[d.y_train[tr]], relabel[d.y_test[te]]
    lists = ([np.flatnonzero(y_tr == k) for k in range(3)], [np.flatnonzero(y_te == k) for k in range(3)])
    fj.register_dataset("fmnist3", x_train[tr], y_tr, x_test[te], y_te, num_classes=3, clients=lists)
    fj.register_model("logreg", LogReg)
    return [len(a) for a in lists[0]], [len(a) for a in lists[1]]


ALGORITHMS = {                                        # name -> the Config's options
    "FedAvg": dict(algorithm="fedavg"),
    "AFL (γ_λ = 0.1)": dict(algorithm="examples.afl:afl", hp={"lam_lr": 0.1}),
    "q-FFL (q = 5)": dict(algorithm="qfedavg", q=5.0),
    "q-FFL (q = 1)": dict(algorithm="qfedavg", q=1.0),
}


QFFL_ALGORITHMS = {                                   # --protocol qffl: name -> the Config's options
    "uniform (FedAvg, 1 step)": dict(algorithm="fedavg"),
    "AFL (γ_λ = 0.1)": dict(algorithm="examples.afl:afl", hp={"lam_lr": 0.1}),
    "q-FFL (q = 5)": dict(algorithm="qfedavg", q=5.0),
    "q-FFL (q = 1)": dict(algorithm="qfedavg", q=1.0),
}


def base_options(protocol, rounds, batch_size=None):
    """The options every algorithm's runs share under ``protocol`` (``current`` or ``qffl``). No ``server_lr``:
    1 is already FedAvg's and AFL's η_g, and q-FFL's step is its own (given, it has no effect and is said so)."""
    if protocol == "qffl":
        return dict(dataset="fmnist3", partition="given", clients=3, clients_per_round=3, model="logreg",
                    rounds=rounds, eval_every=rounds, local_steps=1, batch_size=batch_size or 10, lr=0.1,
                    lr_decay=1.0, eval_average=True, checkpoint_every="never")
    return dict(dataset="fmnist3", partition="given", clients=3, clients_per_round=3, model="logreg",
                rounds=rounds, eval_every=rounds, local_epochs=1, batch_size=batch_size or 100, lr=0.1,
                lr_decay=1.0)


def table(rows):
    print(f"| algorithm | {' | '.join(NAMES)} | mean | worst client |")
    print("|---|" + "---|" * 5)
    for label, m, s, mean, worst in rows:
        cells = " | ".join(f"{100 * x:.1f} ± {100 * y:.1f}" for x, y in zip(m, s))
        print(f"| {label} | {cells} | {100 * mean:.1f} | {100 * worst:.1f} |")


def row(label, accs):
    a = np.asarray(accs)
    print(label, np.round(a, 4).tolist(), flush=True)
    return label, a.mean(0), a.std(0, ddof=1) if len(a) > 1 else np.zeros(3), a.mean(1).mean(), a.min(1).mean()


def main_qffl(args):
    """The papers' protocol: each algorithm's seeds as one sweep; the averaged iterate's and the last
    iterate's final per-client accuracies."""
    n_train, n_test = register(standardised=True)
    print(f"clients' examples: train {n_train}, test {n_test}")
    base = base_options("qffl", args.rounds, args.batch_size)
    avg_rows, last_rows = [], []
    for label, opts in QFFL_ALGORITHMS.items():
        out = Path(args.out) / f"qffl-b{base['batch_size']}-{opts['algorithm'].split(':')[-1]}{opts.get('q', '')}"
        res = fj.sweep(fj.Config(**base, **opts), out=str(out), seeds=range(args.seeds), progress=False,
                       overwrite=True)
        finals = [r.metrics.iloc[-1] for r in res.runs]
        avg_rows.append(row(label + " θ̄", [[float(f[f"avg_acc_{i}"]) for i in range(3)] for f in finals]))
        last_rows.append(row(label + " last", [[float(f[f"acc_{i}"]) for i in range(3)] for f in finals]))
    print("\nthe averaged iterate θ̄:")
    table(avg_rows)
    print("\nthe last iterate (same runs):")
    table(last_rows)


def main():
    ap = argparse.ArgumentParser(description="AFL's three-class Fashion-MNIST setting (docs/afl.md)")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--out", default="runs/afl-setting")
    ap.add_argument("--protocol", choices=("current", "qffl"), default="current",
                    help="current: docs/afl.md's first table (1 epoch of B=100, last iterate); qffl: q-FFL's "
                         "official code's (standardised pixels, 1 step of B=10, averaged iterate evaluated)")
    ap.add_argument("--batch-size", type=int, default=None,
                    help="B (default: 100 for current, 10 for qffl; 6000 = a client's whole class: one full-gradient "
                         "step, what fair_flearn's afl and qffedsgd trainers take, whose batch is the client's data)")
    args = ap.parse_args()
    if args.protocol == "qffl":
        return main_qffl(args)
    n_train, n_test = register()
    print(f"clients' examples: train {n_train}, test {n_test}")
    base = base_options("current", args.rounds, args.batch_size)
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
