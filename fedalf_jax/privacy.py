"""Public name kept for users (``fedalf_jax.privacy.adaptive_ldp``, ``ldp_fl``); the code is in
:mod:`fedalf_jax.sim.privacy`."""

from .sim.privacy import adaptive_ldp, clip_global_norm, gaussian_dp, gaussian_sigma, ldp_fl, mechanism  # noqa: F401

__all__ = ["adaptive_ldp", "clip_global_norm", "gaussian_dp", "gaussian_sigma", "ldp_fl", "mechanism"]
