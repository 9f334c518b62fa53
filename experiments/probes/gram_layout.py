"""The fair server's cross Gram Δ·hᵀ (10 clients against 100 history rows, the FMNIST CNN's leaves) written
three ways, jit-compiled, interleaved, medians of 7 (docs/lab/benchmarks.md, "The server's Grams as 2-D matmuls").

    python experiments/probes/gram_layout.py
"""
import time

import jax
import jax.numpy as jnp
import numpy as np

from fedalf_jax.problem.models import make_model

HI = jax.lax.Precision.HIGHEST
M, N = 10, 100
leaves = jax.tree_util.tree_leaves(make_model("cnn", num_classes=10, input_shape=(28, 28, 1)).init(
    jax.random.PRNGKey(0))["params"])
A = [jnp.full((M,) + l.shape, 0.01, jnp.float32) for l in leaves]
rows_first = [jnp.full((N,) + l.shape, 0.02, jnp.float32) for l in leaves]
rows_last = [jnp.full(l.shape + (N,), 0.02, jnp.float32) for l in leaves]
ways = {
    "einsum over the leaf's axes": (jax.jit(lambda A, H: [jnp.einsum("i...,j...->ij", a, h, precision=HI)
                                                          for a, h in zip(A, H)]), rows_first),
    "2-D matmul of [r, D] reshapes": (jax.jit(lambda A, H: [jnp.matmul(a.reshape(M, -1), h.reshape(N, -1).T,
                                                                       precision=HI) for a, h in zip(A, H)]), rows_first),
    "history rows' axis last": (jax.jit(lambda A, H: [jnp.matmul(a.reshape(M, -1), h.reshape(-1, N), precision=HI)
                                                      for a, h in zip(A, H)]), rows_last),
}
for f, H in ways.values():
    jax.block_until_ready(f(A, H))
times = {k: [] for k in ways}
for _ in range(7):
    for k, (f, H) in ways.items():
        t0 = time.perf_counter(); jax.block_until_ready(f(A, H)); times[k].append(time.perf_counter() - t0)
print(f"{sum(l.size for l in leaves)} parameters; {M} clients x {N} history rows")
for k, v in times.items():
    print(f"{k:32s} {1e3 * np.median(v):7.1f} ms")
