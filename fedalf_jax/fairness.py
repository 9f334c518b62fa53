"""Public name kept for users (``fedalf_jax.fairness.fair_direction``); the code is in
:mod:`fedalf_jax.sim.fairness`."""

from .sim.fairness import fair_direction, fair_weights, module_layers, tensor_layers  # noqa: F401

__all__ = ["fair_direction", "fair_weights", "module_layers", "tensor_layers"]
