"""FedFV's FMNIST-3 comparison (Wang et al., "Federated Learning with Fair Averaging", IJCAI 2021), run with
its authors' own protocol: their code and records, github.com/WwZzz/easyFL, branch ``easyFL_v1.0`` (commit
b721564), ``task/fmnist/`` and ``method/{fedavg,afl,qfedavg,fedmgda+,fedfv}.py``; docs/reproductions.md
"FedFV's FMNIST-3 comparison" states the protocol and every difference.

What the authors' code does, and this script with it:

* **Data.** Fashion-MNIST's classes T-shirt/top (0), pullover (2) and shirt (6), one client each, pixels on
  the 0-255 scale standardised as ``(x − μ)/(σ + 0.001)`` per pixel, μ and σ over all 60,000 training images
  (``task/fmnist/data/create_dataset.py``). Each client then pools its class's 6,000 training and 1,000 test
  images, shuffles the 7,000 with NumPy's global generator seeded ``21 + seed`` (``utils/tools.setup_seed``;
  the clients in the order T-shirt, pullover, shirt, each shuffle advancing the generator) and keeps
  80 % / 10 % / 10 % as train / test / validation (5,600 / 700 / 700; ``method/fedbase.BaseClient``,
  ``partition=True``). :func:`easyfl_rows` replays that shuffle, so each seed's clients hold exactly the
  authors' rows; each seed is its own registered data set ``fmnist3-easyfl-s{seed}`` (``partition="given"``).
* **Model.** ``task/fmnist/lr.py``: one ``Linear(784, 3)`` (weights U(±1/28), PyTorch's default; bias 0)
  followed by a softmax, trained with ``CrossEntropyLoss`` on those probabilities: a softmax applied twice.
  :class:`LogRegSoftmax` returns the probabilities, so this package's cross-entropy is the same loss (and
  every ``f_i`` the algorithms read, AFL's λ step, q-FedAvg's ``F^q``, FedFV's order, is the same number).
* **Training.** Every client every round (proportion 1.0), one full-batch gradient step (batch ``-1``, one
  epoch: here ``batch_size=5600, local_epochs=1``), η_l = 0.1, no decay, plain SGD; 201 server updates
  (``BaseServer.run`` loops ``range(num_rounds + 1)`` with ``--num_rounds 200``), then the last evaluation:
  each client's accuracy on its 700 test images.
* **Algorithms**, every value the authors' records hold at η = 0.1: FedAvg (uniform average); AFL with
  γ_λ ∈ {0.01, 0.1, 0.5}, the averaged iterate evaluated (``eval_average``; the authors' ``result_modeldict``,
  the mean of θ_1..θ_t); q-FedAvg with q ∈ {5, 15} and L = 1/η_l, ``F_i`` taken as the authors' code takes it,
  the loss of the client's *locally updated* model on its training data (:func:`qfedavg_easyfl`; the
  built-in ``qfedavg``'s ``F_i = f_i(θ_t)`` is also run, its own rows); FedMGDA+ with ε ∈ {0.05, 0.1, 1} and
  the global step ``θ ← θ − η Σλ_i g_i`` of unit-norm ``g_i`` with η = 0.1 (``server_lr=0.1``); FedFV with
  α ∈ {0, 0.334, 0.667} and τ = 0 (the authors' FMNIST records are all τ = 0), ``examples/fedfv.py``.
* **Seeds**: the authors' five, 0, 12, 37, 119, 568 (the split's shuffle and this run's initialisation).

What is reported, as the authors' ``utils/data_analysis.table_fmnist`` prints it: each client's final
accuracy, their mean, and their population std (``np.std`` of the three; the column the authors call
"var"), plus the worst client; each as mean ± ``np.std`` (ddof 0) over the 5 seeds.

Each (algorithm, seed) is one ``fj.run``: a seed's data set is its own split, and a sweep's runs share one
data set (seeds vary the initialisation only), so the five seeds cannot be one ``fj.sweep`` here.

Usage (about 18 minutes on a 2-core CPU, 14 rows × 5 seeds):

    nice -n 10 .venv/bin/python experiments/fedfv_fmnist3.py [--out runs/fedfv-fmnist3] [--keep DIR]

``--keep docs/reproductions-runs/fedfv-fmnist3`` copies each run's small files (config.json, metrics.csv,
summary.json, clients.json) there, the folder docs/reproductions.md's table is recomputed from
(tests/test_reproductions.py). ``--table DIR`` only prints the table of the runs kept in DIR.
"""

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import fedalf_jax as fj  # noqa: E402
from fedalf_jax.problem.data import load_dataset  # noqa: E402

sys.path.insert(0, str(ROOT / "experiments"))
from afl_setting import CLASSES, NAMES  # noqa: E402  (T-shirt/top, pullover, shirt: the same three classes)

SEEDS = (0, 12, 37, 119, 568)             # the authors' records' seeds
ROUNDS = 201                              # easyFL's run(): range(num_rounds + 1) updates for --num_rounds 200
N_TRAIN, N_TEST = 5600, 700               # int(0.8 · 7000), then int(0.9 · 7000) − int(0.8 · 7000)
KEEP_FILES = ("config.json", "metrics.csv", "summary.json", "clients.json")


class LogRegSoftmax(nn.Module):
    """easyFL's ``task/fmnist/lr.py``: ``softmax(W x + b)``, W ~ U(±1/√784) (PyTorch's Linear default,
    a uniform of variance 1/(3·784)), b = 0. Its output is what the cross-entropy reads as logits."""
    num_classes: int

    @nn.compact
    def __call__(self, x):
        init = nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")
        return nn.softmax(nn.Dense(self.num_classes, kernel_init=init)(x.reshape((x.shape[0], -1))))


def easyfl_rows(seed, n=7000):
    """The permutation of each client's pooled 7,000 images (its class's training images, then its test
    images, each in file order) that easyFL's ``BaseClient`` applies: ``np.random.seed(21 + seed)``, then one
    ``np.random.shuffle`` per client in the order T-shirt, pullover, shirt (the same permutation for x and y:
    the generator's state is restored between the two). Returns the three permutations."""
    rs = np.random.RandomState(21 + seed)
    perms = []
    for _ in CLASSES:
        p = np.arange(n)
        rs.shuffle(p)
        perms.append(p)
    return perms


def register(seeds=SEEDS):
    """Register ``fmnist3-easyfl-s{seed}`` for each seed and the model ``logreg_softmax``; returns the names."""
    d = load_dataset("fmnist")
    # back to the files' 0-255 values, then create_dataset.py's standardisation over the 60,000 training images
    xtr = np.round(d.x_train.reshape(len(d.x_train), -1) * 255.0).astype(np.float32)
    xte = np.round(d.x_test.reshape(len(d.x_test), -1) * 255.0).astype(np.float32)
    mu, sd = xtr.mean(0), xtr.std(0)
    xtr, xte = (xtr - mu) / (sd + 0.001), (xte - mu) / (sd + 0.001)
    pooled = [(np.concatenate([xtr[d.y_train == c], xte[d.y_test == c]]).reshape(-1, 28, 28, 1)) for c in CLASSES]
    assert all(len(p) == 7000 for p in pooled)
    names = {}
    for seed in seeds:
        perms = easyfl_rows(seed)
        x_tr = np.concatenate([p[q[:N_TRAIN]] for p, q in zip(pooled, perms)])
        x_te = np.concatenate([p[q[N_TRAIN:N_TRAIN + N_TEST]] for p, q in zip(pooled, perms)])
        y_tr, y_te = np.repeat(np.arange(3), N_TRAIN), np.repeat(np.arange(3), N_TEST)
        lists = ([np.arange(k * N_TRAIN, (k + 1) * N_TRAIN) for k in range(3)],
                 [np.arange(k * N_TEST, (k + 1) * N_TEST) for k in range(3)])
        names[seed] = f"fmnist3-easyfl-s{seed}"
        fj.register_dataset(names[seed], x_tr, y_tr, x_te, y_te, num_classes=3, clients=lists)
    fj.register_model("logreg_softmax", LogRegSoftmax)
    return names


# ---- q-FedAvg as easyFL's method/qfedavg.py computes it ---------------------------------------------------------

def _sgd_step(w, batch, ctx):
    loss = lambda p: fj.cross_entropy(batch, ctx.apply(p, batch.x, train=True, key=batch.key)[0])
    return jax.tree_util.tree_map(lambda p, g: p - ctx.lr * g, w, jax.grad(loss)(w))


def _init(ctx):
    return ctx.theta


def _final(w, ctx):
    """Δ_i = θ − w_i, and the loss of the *trained* w_i over the client's training examples (easyFL's
    qfedavg.communicate calls ``reply()`` (training the shared model in place) before ``test('train')``)."""
    def add(acc, batch):
        return acc + fj.cross_entropy(batch, ctx.apply(w, batch.x)[0]) * jnp.sum(batch.mask)
    total = ctx.data.fold(add, jnp.zeros((), jnp.float32))
    return (jax.tree_util.tree_map(lambda t, p: t - p, ctx.theta, w), ctx.state,
            {"loss": total / ctx.facts.n.astype(jnp.float32)})


def _qfedavg_server(s: fj.ServerIn):
    """q-FFL's step with F_i the clients' post-training losses: Δw_i = (θ − w_i)/η_l, h_i = q F^{q−1}‖Δw_i‖²
    + F^q/η_l, θ ← θ − Σ F_i^q Δw_i / Σ h_i (easyFL's L = 1/η_l; the same algebra as the built-in's)."""
    F = s.aux["loss"] + 1e-10
    q = s.hp.own["q_loss"]
    dw = jax.tree_util.tree_map(lambda d: d / s.lr_t, s.deltas)
    dw_sq = sum(jnp.sum(x.reshape(x.shape[0], -1) ** 2, axis=1) for x in jax.tree_util.tree_leaves(dw))
    fq = F ** q
    h = q * F ** (q - 1.0) * dw_sq + fq / s.lr_t
    theta = jax.tree_util.tree_map(lambda t, d: t - jnp.tensordot(fq, d, axes=1) / jnp.sum(h), s.theta, dw)
    return theta, s.sstate, {}


def qfedavg_easyfl() -> fj.Algorithm:
    return fj.Algorithm("qfedavg_easyfl", server=_qfedavg_server, client=fj.ClientProgram(_init, _sgd_step, _final),
                        public_aux=False, reads_server_lr=False, hparams={"q_loss": 5.0})


# ---- the rows -------------------------------------------------------------------------------------------------

ALGORITHMS = {                      # tag -> (label, the Config's options, the accuracy columns' prefix)
    "fedavg": ("FedAvg", dict(algorithm="fedavg"), "acc"),
    "afl-0.01": ("AFL (η_λ = 0.01)", dict(algorithm="examples.afl:afl", hp={"lam_lr": 0.01}, eval_average=True), "avg_acc"),
    "afl-0.1": ("AFL (η_λ = 0.1)", dict(algorithm="examples.afl:afl", hp={"lam_lr": 0.1}, eval_average=True), "avg_acc"),
    "afl-0.5": ("AFL (η_λ = 0.5)", dict(algorithm="examples.afl:afl", hp={"lam_lr": 0.5}, eval_average=True), "avg_acc"),
    "qfedavg-5": ("q-FedAvg (q = 5)", dict(algorithm="qfedavg_easyfl", hp={"q_loss": 5.0}), "acc"),
    "qfedavg-15": ("q-FedAvg (q = 15)", dict(algorithm="qfedavg_easyfl", hp={"q_loss": 15.0}), "acc"),
    "fedmgda-0.05": ("FedMGDA+ (ε = 0.05)", dict(algorithm="examples.fedmgda:fedmgda", hp={"eps": 0.05},
                                                 server_lr=0.1, server_lr_decay=1.0), "acc"),
    "fedmgda-0.1": ("FedMGDA+ (ε = 0.1)", dict(algorithm="examples.fedmgda:fedmgda", hp={"eps": 0.1},
                                               server_lr=0.1, server_lr_decay=1.0), "acc"),
    "fedmgda-1": ("FedMGDA+ (ε = 1)", dict(algorithm="examples.fedmgda:fedmgda", hp={"eps": 1.0},
                                           server_lr=0.1, server_lr_decay=1.0), "acc"),
    "fedfv-0": ("FedFV (α = 0, τ = 0)", dict(algorithm="examples.fedfv:fedfv", hp={"alpha": 0.0}), "acc"),
    "fedfv-0.334": ("FedFV (α = 0.334, τ = 0)", dict(algorithm="examples.fedfv:fedfv", hp={"alpha": 0.334}), "acc"),
    "fedfv-0.667": ("FedFV (α = 0.667, τ = 0)", dict(algorithm="examples.fedfv:fedfv", hp={"alpha": 0.667}), "acc"),
    "qfedavg-builtin-5": ("q-FedAvg built-in, F_i = f_i(θ_t) (q = 5)", dict(algorithm="qfedavg", q=5.0), "acc"),
    "qfedavg-builtin-15": ("q-FedAvg built-in, F_i = f_i(θ_t) (q = 15)", dict(algorithm="qfedavg", q=15.0), "acc"),
}


def base_options(dataset, seed, out):
    return dict(dataset=dataset, partition="given", clients=3, clients_per_round=3, model="logreg_softmax",
                rounds=ROUNDS, eval_every=ROUNDS, train_loss_every=ROUNDS, local_epochs=1, batch_size=N_TRAIN,
                lr=0.1, lr_decay=1.0, checkpoint_every="never", seed=seed, out=str(out))


def finals(run_dir, prefix):
    """The last row's three client accuracies (%), from a run folder's metrics.csv."""
    import csv
    row = list(csv.DictReader(open(Path(run_dir) / "metrics.csv")))[-1]
    assert int(row["round"]) == ROUNDS, (run_dir, row["round"])
    return [100 * float(row[f"{prefix}_{i}"]) for i in range(3)]


def summarise(root):
    """tag -> {label, per-seed accuracies [5, 3], and each column's (mean, np.std) over the seeds}, the columns
    shirt, pullover, T-shirt (the paper's order), mean, the three clients' std, the worst client."""
    out = {}
    for tag, (label, _, prefix) in ALGORITHMS.items():
        dirs = [Path(root) / tag / f"seed{s}" for s in SEEDS]
        if not all((d / "metrics.csv").is_file() for d in dirs):
            continue
        a = np.array([finals(d, prefix) for d in dirs])                      # [seed, client] in CLASSES' order
        cols = np.stack([a[:, 2], a[:, 1], a[:, 0], a.mean(1), a.std(1), a.min(1)], axis=1)
        out[tag] = dict(label=label, accs=a.tolist(), mean=cols.mean(0).tolist(), std=cols.std(0).tolist())
    return out


def table(summary):
    lines = ["| algorithm | shirt | pullover | T-shirt/top | mean | std across clients | worst client |",
             "|---|---|---|---|---|---|---|"]
    for tag, r in summary.items():
        lines.append(f"| {r['label']} | " + " | ".join(f"{m:.2f} ± {s:.2f}" for m, s in zip(r["mean"], r["std"])) + " |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description="FedFV's FMNIST-3 comparison with its authors' protocol")
    ap.add_argument("--out", default="runs/fedfv-fmnist3")
    ap.add_argument("--keep", default=None, help="copy each run's small files here (docs/reproductions-runs/fedfv-fmnist3)")
    ap.add_argument("--only", default=None, help="comma-separated tags (default: every row)")
    ap.add_argument("--table", default=None, help="only print the table of the runs kept in this folder")
    args = ap.parse_args()
    if args.table:
        print(table(summarise(args.table)))
        return
    names = register()
    fj.register_algorithm("qfedavg_easyfl", qfedavg_easyfl)
    tags = args.only.split(",") if args.only else list(ALGORITHMS)
    t0 = time.time()
    for tag in tags:
        label, opts, _ = ALGORITHMS[tag]
        t1 = time.time()
        for seed in SEEDS:
            run_dir = Path(args.out) / tag / f"seed{seed}"
            fj.run(fj.Config(**base_options(names[seed], seed, run_dir), **opts), progress=False, overwrite=True)
            if args.keep:
                dst = Path(args.keep) / tag / f"seed{seed}"
                dst.mkdir(parents=True, exist_ok=True)
                for f in KEEP_FILES:
                    shutil.copy2(run_dir / f, dst / f)
        print(f"{label}: {time.time() - t1:.0f} s", flush=True)
    print(f"all: {time.time() - t0:.0f} s")
    summary = summarise(args.out)
    (Path(args.out) / "table.json").write_text(json.dumps(summary, indent=1))
    print(table(summary))


if __name__ == "__main__":
    main()
