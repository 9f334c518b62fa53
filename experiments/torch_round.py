"""A lean PyTorch FedAvg round of the README main job's CNN setting, the yardstick of ``fedalf bench
--pytorch`` (issue 29). Imports only torch, numpy and the standard library (no fedalf_jax), so that it runs
with any interpreter that has torch:

    python experiments/torch_round.py                 # Fashion-MNIST from --data-dir
    python experiments/torch_round.py --synthetic     # random data of the same shape

The loop a PyTorch user writes: per sampled client, load the global weights, one plain SGD pass over
its examples in shuffled batches (zero_grad / backward / step), then the global model becomes the
clients' models averaged with weights n_i. Warm-up round(s), then ``--rounds`` timed rounds; prints one
JSON line (seconds per round: the median and every round's).

``--serve`` (what ``fedalf bench --pytorch`` uses, to interleave this loop's rounds with its own so that
both see the same machine load): after the warm-up, print ``{"ready": true, ...}``, then run and time one
round per line ``round`` read on stdin, answering each with ``{"s": seconds}``; at the end of stdin print
the JSON line of all the rounds run.
"""

import argparse
import gzip
import json
import os
import statistics
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class CNN(nn.Module):
    """fedalf_jax.problem.models.CNN in NCHW: conv5x5x32 VALID-ReLU-maxpool2, conv5x5x64 VALID-ReLU-maxpool2,
    dense 512-ReLU, dense classes."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5)
        self.conv2 = nn.Conv2d(32, 64, 5)
        self.fc1 = nn.Linear(64 * 4 * 4, 512)
        self.fc2 = nn.Linear(512, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def read_idx(path):
    if not os.path.isfile(path):  # the files as unpacked, without .gz
        path = path[:-3]
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        _, _, _, ndim = struct.unpack(">BBBB", f.read(4))
        shape = struct.unpack(">" + "I" * ndim, f.read(4 * ndim))
        return np.frombuffer(f.read(), np.uint8).reshape(shape)


def load(args):
    """The training images [n, 1, 28, 28] in [0, 1] and labels; random ones of that shape with --synthetic."""
    if args.synthetic:
        rng = np.random.default_rng(args.seed)
        n = args.clients * args.examples_per_client
        return (torch.from_numpy(rng.random((n, 1, 28, 28), np.float32)),
                torch.from_numpy(rng.integers(0, 10, n).astype(np.int64)))
    x = read_idx(os.path.join(args.data_dir, "train-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(args.data_dir, "train-labels-idx1-ubyte.gz"))
    return (torch.from_numpy(x.astype(np.float32) / 255.0).unsqueeze(1),
            torch.from_numpy(y.astype(np.int64)))


def partition(y, clients, per_client, seed):
    """Each client's example indices: sorted by label and cut into 2·clients shards, two per client (the
    pathological split; each client holds ``per_client`` examples of about 2 classes)."""
    order = np.argsort(y.numpy(), kind="stable")[: clients * per_client]
    shards = np.array_split(order, 2 * clients)
    perm = np.random.default_rng(seed).permutation(2 * clients)
    return [torch.from_numpy(np.concatenate([shards[perm[2 * i]], shards[perm[2 * i + 1]]])) for i in range(clients)]


def fedavg_round(model, global_state, x, y, parts, args, gen):
    """One FedAvg round: each sampled client trains from the global weights; the new global weights are
    the clients' weights averaged with weights n_i."""
    sampled = torch.randperm(len(parts), generator=gen)[: args.clients_per_round]
    total = sum(len(parts[c]) for c in sampled)
    new_state = {k: torch.zeros_like(v) for k, v in global_state.items()}
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    for c in sampled.tolist():
        model.load_state_dict(global_state)
        idx = parts[c]
        for _ in range(args.epochs):
            for batch in idx[torch.randperm(len(idx), generator=gen)].split(args.batch_size):
                opt.zero_grad()
                F.cross_entropy(model(x[batch]), y[batch]).backward()
                opt.step()
        with torch.no_grad():
            for k, v in model.state_dict().items():
                new_state[k] += v * (len(idx) / total)
    return new_state


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist",
                   help="folder of Fashion-MNIST's train-*-idx*-ubyte.gz (default: %(default)s)")
    p.add_argument("--synthetic", action="store_true", help="random data of Fashion-MNIST's shape instead")
    p.add_argument("--clients", type=int, default=100, help="clients in all (default: %(default)s)")
    p.add_argument("--clients-per-round", type=int, default=10, help="clients sampled per round (default: %(default)s)")
    p.add_argument("--examples-per-client", type=int, default=600, help="(default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=50, help="(default: %(default)s)")
    p.add_argument("--epochs", type=int, default=1, help="local epochs (default: %(default)s)")
    p.add_argument("--lr", type=float, default=0.05, help="SGD step size (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default: %(default)s)")
    p.add_argument("--threads", type=int, default=os.cpu_count(),
                   help="torch.set_num_threads (default: os.cpu_count() = %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="(default: %(default)s)")
    p.add_argument("--serve", action="store_true",
                   help="after the warm-up, one timed round per line 'round' on stdin (fedalf bench --pytorch)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    x, y = load(args)
    if args.clients * args.examples_per_client > len(y):
        p.error(f"{args.clients} clients x {args.examples_per_client} examples > the {len(y)} training examples")
    parts = partition(y, args.clients, args.examples_per_client, args.seed)
    model = CNN()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    about = {"torch": torch.__version__, "threads": torch.get_num_threads(),
             "data": "synthetic" if args.synthetic else args.data_dir,
             "clients_per_round": args.clients_per_round, "examples_per_client": args.examples_per_client,
             "batch_size": args.batch_size, "epochs": args.epochs, "lr": args.lr,
             "steps_per_client": args.epochs * -(-args.examples_per_client // args.batch_size)}
    times = []

    def one_round():
        nonlocal state
        t0 = time.perf_counter()
        state = fedavg_round(model, state, x, y, parts, args, gen)
        return time.perf_counter() - t0

    for _ in range(args.warmup):
        one_round()
    if args.serve:
        print(json.dumps({"ready": True, **about}), flush=True)
        for line in sys.stdin:
            if line.strip() != "round":
                break
            times.append(one_round())
            print(json.dumps({"s": times[-1]}), flush=True)
    else:
        times = [one_round() for _ in range(args.rounds)]
    print(json.dumps({"s_per_round": statistics.median(times) if times else None, "times": times, **about}),
          flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C reaches this process too under fedalf bench: no traceback
        sys.exit(130)
