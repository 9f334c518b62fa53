"""Time the FMNIST ``cnn`` local-training round per convolution / pooling implementation.

One round = C=10 clients x S=12 plain-SGD steps (lr 0.05, cross-entropy) of B=50 examples, all
clients starting from the same global parameters, returning every client's final parameters.
Client layouts:

* ``vmap``  jit(vmap over clients of lax.scan over steps)  -- the round layout of docs/algorithms.md §1
* ``map``   jit(lax.map over clients of lax.scan over steps)
* ``seq``   Python loop over clients and steps calling one jitted SGD step

Each variant is compiled (first call, reported separately) and then timed ``--repeats`` times
with ``jax.block_until_ready``; the median is printed, in seconds per round. Variants that are
known to be catastrophically slow (``lax`` / ``patches`` convolutions inside vmap/map + scan)
run with ``--slow-steps`` steps instead of 12 and are scaled to 12 steps (marked ``*``).

    .venv/bin/python experiments/probes/bench_conv.py            # all variants (from the checkout's root)
    .venv/bin/python experiments/probes/bench_conv.py --only vmap:im2col:reshape map:im2col:reshape
    XLA_FLAGS=--xla_cpu_enable_fast_math=true .venv/bin/python experiments/probes/bench_conv.py --only ...
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import optax
from jax import lax

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from fedalf_jax.problem.models import make_model  # noqa: E402

C, S, B, LR = 10, 12, 50, 0.05

# (layout, conv impl, pool impl); slow ones get --slow-steps steps and are extrapolated.
VARIANTS = [
    ("vmap", "im2col", "reshape"),
    ("vmap", "im2col", "lax"),
    ("vmap", "patches", "reshape"),
    ("vmap", "lax", "reshape"),
    ("map", "im2col", "reshape"),
    ("map", "im2col", "lax"),
    ("map", "lax", "reshape"),
    ("seq", "im2col", "reshape"),
    ("seq", "lax", "reshape"),
    ("seq", "lax", "lax"),
]
SLOW = {("vmap", "lax"), ("vmap", "patches"), ("map", "lax"), ("map", "patches")}


def build(layout: str, conv: str, pool: str):
    model = make_model("cnn", num_classes=10, input_shape=(28, 28, 1), conv_impl=conv, pool_impl=pool)

    def loss(p, xb, yb):
        logits, _ = model.apply({"params": p}, xb)
        return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()

    def step(p, xb, yb):
        g = jax.grad(loss)(p, xb, yb)
        return jax.tree.map(lambda a, b: a - LR * b, p, g)

    def client(p, xc, yc):
        return lax.scan(lambda q, b: (step(q, *b), None), p, (xc, yc))[0]

    if layout == "vmap":
        return model, jax.jit(jax.vmap(client, in_axes=(None, 0, 0)))
    if layout == "map":
        return model, jax.jit(lambda p, x, y: lax.map(lambda a: client(p, *a), (x, y)))
    if layout == "seq":
        jstep = jax.jit(step)

        def run(p, xs, ys):  # xs, ys: lists (clients) of lists (steps) of device arrays
            out = []
            for xc, yc in zip(xs, ys):
                q = p
                for xb, yb in zip(xc, yc):
                    q = jstep(q, xb, yb)
                out.append(q)
            return out

        return model, run
    raise ValueError(layout)


def time_variant(layout, conv, pool, steps, repeats):
    model, fn = build(layout, conv, pool)
    params = model.init(jax.random.key(0))["params"]
    x = jax.random.normal(jax.random.key(1), (C, steps, B, 28, 28, 1), jnp.float32)
    y = jax.random.randint(jax.random.key(2), (C, steps, B), 0, 10)
    if layout == "seq":
        x = [[x[c, s] for s in range(steps)] for c in range(C)]
        y = [[y[c, s] for s in range(steps)] for c in range(C)]
    jax.block_until_ready((x, y))
    t0 = time.perf_counter()
    jax.block_until_ready(fn(params, x, y))
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(params, x, y))
        times.append(time.perf_counter() - t0)
    return first, times


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--slow-steps", type=int, default=2, help="steps used for the slow variants")
    ap.add_argument("--only", nargs="*", help="layout:conv:pool entries, e.g. vmap:im2col:reshape")
    ap.add_argument("--skip-slow", action="store_true", help="skip the lax/patches-in-scan variants")
    args = ap.parse_args(argv)

    variants = VARIANTS
    if args.only:
        variants = [tuple(v.split(":")) for v in args.only]
    if args.skip_slow:
        variants = [v for v in variants if (v[0], v[1]) not in SLOW]
    print(f"jax {jax.__version__} backend={jax.default_backend()} devices={jax.devices()} "
          f"cpus={os.cpu_count()} XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
    print(f"round: {C} clients x {S} SGD steps x B={B}; median of {args.repeats} calls after compile")
    print("| layout | conv | pool | s/round (median) | min | first call (compile+run) |")
    print("|---|---|---|---|---|---|")
    for layout, conv, pool in variants:
        steps = args.slow_steps if (layout, conv) in SLOW else S
        first, times = time_variant(layout, conv, pool, steps, args.repeats)
        scale = S / steps
        mark = f" * ({steps} steps x{scale:g})" if steps != S else ""
        print(f"| {layout} | {conv} | {pool} | {statistics.median(times) * scale:.2f}{mark} "
              f"| {min(times) * scale:.2f} | {first:.1f} |", flush=True)
    try:
        print("load average:", os.getloadavg())
    except OSError:
        pass


if __name__ == "__main__":
    main()
