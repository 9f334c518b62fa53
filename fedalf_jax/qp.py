"""Public name kept for users (``fedalf_jax.qp.solve_simplex_qp``); the code is in
:mod:`fedalf_jax.sim.qp`."""

from .sim.qp import simplex_gap, solve_simplex_qp, solve_simplex_qp_info  # noqa: F401

__all__ = ["simplex_gap", "solve_simplex_qp", "solve_simplex_qp_info"]
