"""Small pytree arithmetic used by the client and server steps."""

from __future__ import annotations

import jax
import jax.numpy as jnp

tmap = jax.tree_util.tree_map


def sub(a, b):
    return tmap(lambda x, y: x - y, a, b)


def add(a, b):
    return tmap(lambda x, y: x + y, a, b)


def scale(a, s):
    return tmap(lambda x: x * s, a)


def vdot(a, b):
    """Σ over leaves of ⟨a, b⟩ (unbatched pytrees)."""
    return sum(jnp.vdot(x, y) for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


def sq_norm(a):
    return vdot(a, a)


def batched_vdot(stacked, b):
    """``[m]``: ⟨stacked[i], b⟩ for a pytree with a leading client axis and an unbatched ``b``."""
    return sum(jnp.einsum("i...,...->i", x, y)
               for x, y in zip(jax.tree_util.tree_leaves(stacked), jax.tree_util.tree_leaves(b)))


def weighted_sum(stacked, w):
    """Σ_i w_i stacked[i] for a pytree with a leading client axis."""
    return tmap(lambda x: jnp.tensordot(w.astype(x.dtype), x, axes=1), stacked)


def take(stacked, idx):
    return tmap(lambda x: x[idx], stacked)


def put(stacked, idx, values):
    return tmap(lambda x, v: x.at[idx].set(v), stacked, values)


def zeros_stacked(tree, n: int):
    return tmap(lambda x: jnp.zeros((n,) + x.shape, x.dtype), tree)
