"""Small pytree arithmetic used by the client and server steps."""

from __future__ import annotations

import jax
import jax.numpy as jnp

tmap = jax.tree_util.tree_map
_HI = jax.lax.Precision.HIGHEST  # the simulator's own sums stay full float32 (no TF32 on GPUs): --matmul-precision is the model's


def sub(a, b):
    return tmap(lambda x, y: x - y, a, b)


def add(a, b):
    return tmap(lambda x, y: x + y, a, b)


def scale(a, s):
    return tmap(lambda x: x * s, a)


def vdot(a, b):
    """Σ over leaves of ⟨a, b⟩ (unbatched pytrees)."""
    return sum(jnp.vdot(x, y, precision=_HI) for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


def sq_norm(a):
    return vdot(a, a)


def batched_vdot(stacked, b):
    """``[m]``: ⟨stacked[i], b⟩ for a pytree with a leading client axis and an unbatched ``b``."""
    return sum(jnp.einsum("i...,...->i", x, y, precision=_HI)
               for x, y in zip(jax.tree_util.tree_leaves(stacked), jax.tree_util.tree_leaves(b)))


def weighted_sum(stacked, w):
    """Σ_i w_i stacked[i] for a pytree with a leading client axis."""
    return tmap(lambda x: jnp.tensordot(w.astype(x.dtype), x, axes=1, precision=_HI), stacked)


def take(stacked, idx):
    return tmap(lambda x: x[idx], stacked)


def put(stacked, idx, values):
    """``stacked`` with rows ``idx`` replaced by ``values`` (cast to the storage dtype)."""
    return tmap(lambda x, v: x.at[idx].set(v.astype(x.dtype)), stacked, values)


def take_as(stacked, idx, like):
    """Rows ``idx`` of ``stacked``, in the dtypes of the unbatched tree ``like`` (storage → compute)."""
    return tmap(lambda x, l: x[idx].astype(l.dtype), stacked, like)


def cast(tree, dtype):
    return tmap(lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, tree)


def zeros_stacked(tree, n: int):
    return tmap(lambda x: jnp.zeros((n,) + x.shape, x.dtype), tree)
