"""Public name kept for users (``fedalf_jax.metrics.fairness_angle``); the code is in
:mod:`fedalf_jax.experiment.metrics`."""

from .experiment.metrics import fairness_angle, summarize  # noqa: F401

__all__ = ["fairness_angle", "summarize"]
