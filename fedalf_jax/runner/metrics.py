"""Evaluation metrics (docs/algorithms.md §7): mean accuracy and the fairness angle of the client-accuracy vector."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np


def fairness_angle(acc, *, degrees: bool = False) -> jnp.ndarray:
    """Angle between the per-client accuracy vector ``acc`` and the all-ones vector, in **radians**
    (``degrees=True``: in degrees, the unit of ``angle_deg`` in ``metrics.csv``, ``Result.metrics``, the
    sweep table and the report).

    ``arccos(A·1 / (‖A‖ √N))``; 0 means every client has the same accuracy. An all-zero vector
    (nothing learnt anywhere) is defined as angle 0: all clients are equally (un)served.
    Concrete input that is empty, non-finite or negative is refused (``ValueError``); traced input
    with a NaN gives NaN.
    """
    a = jnp.asarray(acc, dtype=jnp.float32)
    if a.ndim < 1 or a.shape[-1] == 0:
        raise ValueError(f"fairness_angle needs at least one client accuracy; got shape {a.shape}")
    if not isinstance(a, jax.core.Tracer) and not bool(jnp.all(jnp.isfinite(a) & (a >= 0))):
        raise ValueError("client accuracies must be finite and non-negative")
    n = a.shape[-1]
    norm = jnp.linalg.norm(a, axis=-1)
    cos = jnp.sum(a, axis=-1) / jnp.maximum(norm * math.sqrt(n), 1e-30)
    cos = jnp.where(norm == 0, 1.0, cos)
    angle = jnp.arccos(jnp.clip(cos, -1.0, 1.0))
    return jnp.degrees(angle) if degrees else angle


def summarize(acc: np.ndarray) -> dict:
    """Summary statistics of one evaluation's per-client accuracy vector (NumPy, host side)."""
    a = np.asarray(acc, dtype=np.float64)
    n = a.size
    k = max(1, int(math.ceil(0.1 * n)))
    srt = np.sort(a)
    angle = float(fairness_angle(a))
    return {
        "mean_acc": float(a.mean()),
        "angle": angle,
        "angle_deg": math.degrees(angle),
        "std_acc": float(a.std()),
        "worst10_acc": float(srt[:k].mean()),
        "best10_acc": float(srt[-k:].mean()),
    }
