"""Time one client epoch of the CNN alone: 12 SGD steps of B = 50 in a ``lax.scan`` (the README main job's
local training, without the round around it), median of 7 after compiling; and, with ``--hash``, hash the
parameters after those steps (to check that a change leaves the arithmetic bit for bit alone).

    .venv/bin/python experiments/probes/cnn_step.py                      # the model's defaults
    .venv/bin/python experiments/probes/cnn_step.py --pool lax           # flax's nn.max_pool instead
    XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=dot .venv/bin/python experiments/probes/cnn_step.py

docs/lab/benchmarks.md, "The pooling's backward pass": 171/163 ms before the pool's written-out backward pass,
131/131 ms after, on the 2-core CPU.
"""

import argparse
import hashlib
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from fedalf_jax.problem.models import make_model

GFLOP_PER_STEP = 1.3  # forward ≈ 0.43 GFLOP at B = 50 (conv2 164 M MACs, conv1 23 M, dense 26 M), ×3 with backward


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pool", default="reshape", choices=["reshape", "lax"], help="pool_impl (default: %(default)s)")
    p.add_argument("--conv", default="auto", help="conv_impl (default: %(default)s)")
    p.add_argument("--hash", action="store_true", help="also print a hash of the parameters after the 12 steps")
    args = p.parse_args()
    m = make_model("cnn", num_classes=10, input_shape=(28, 28, 1), conv_impl=args.conv, pool_impl=args.pool)
    v = m.init(jax.random.PRNGKey(0))
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((12, 50, 28, 28, 1)).astype(np.float32))
    y = jnp.asarray(rng.integers(0, 10, (12, 50)))

    def loss(params, xb, yb):
        logits, _ = m.apply(params, xb)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), yb[:, None], 1))

    @jax.jit
    def epoch(params):
        def step(params, batch):
            g = jax.grad(loss)(params, *batch)
            return jax.tree.map(lambda a, b: a - 0.01 * b, params, g), None
        return jax.lax.scan(step, params, (x, y))[0]

    out = jax.block_until_ready(epoch(v))
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        jax.block_until_ready(epoch(v))
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(f"cnn, pool {args.pool}, conv {args.conv}, XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}: 12 steps "
          f"median {med * 1e3:.0f} ms ({', '.join(f'{t * 1e3:.0f}' for t in times)}), "
          f"≈ {12 * GFLOP_PER_STEP / med:.0f} GFLOP/s")
    if args.hash:
        h = hashlib.sha256()
        for a in jax.tree.leaves(out):
            h.update(np.asarray(a).tobytes())
        print(f"parameters after 12 steps: {h.hexdigest()[:16]}")


if __name__ == "__main__":
    main()
