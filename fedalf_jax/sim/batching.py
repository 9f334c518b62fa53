"""Batching rules for the simulator's functions under ``jax.vmap`` (a sweep vmaps whole runs)."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def per_run(f):
    """``f`` unchanged, except that under ``jax.vmap`` it runs once per mapped element (``lax.map``).

    For the small, numerically delicate parts of a server step (the fair direction's QPs and the
    reductions around them, qFedAvg's norms): batched, XLA may change their float summation order, and
    the QP solver would share one convergence loop across the batch. Mapped, every element computes
    exactly what an unbatched call computes, so the runs of a sweep are independent of each other.
    Keep the D-sized work (Grams, sums over clients, state updates) outside: batched matmuls are exact,
    and mapping them would copy each run's slice of the per-client state.
    """
    g = jax.custom_batching.custom_vmap(f)

    @g.def_vmap
    def _rule(axis_size, in_batched, *args):
        args = jax.tree_util.tree_map(
            lambda b, x: x if b else jnp.broadcast_to(x, (axis_size,) + jnp.shape(x)), list(in_batched), list(args))
        out = jax.lax.map(lambda a: g(*a), tuple(args))
        return out, jax.tree_util.tree_map(lambda _: True, out)

    return g
