"""Privacy, in one package (as pfl-research's ``pfl/privacy`` holds mechanisms and accountants together): the
local and Gaussian mechanisms applied inside the compiled round (:mod:`.mechanisms`: ``adaptive_ldp``, ``ldp_fl``,
``gaussian_dp``, central DP's clipping), the accounting of what a run spends over its rounds (:mod:`.accounting`,
dp-accounting's RDP and PLD accountants), and the guarantee a run's record states, with what it covers and what
it does not (:mod:`.guarantee`, read by ``fj.Config`` and the report).

The mechanisms are pure JAX and sit on the simulation's floor (``fedalf_jax.sim`` imports them); the accounting and
the guarantee read the configuration's options. This package's ``__init__`` loads only the mechanisms.
"""

from .mechanisms import adaptive_ldp, gaussian_dp, ldp_fl

__all__ = ["adaptive_ldp", "gaussian_dp", "ldp_fl"]
