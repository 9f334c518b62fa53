"""FedProx (Li et al., 2020): the local objective ``f_i(w) + μ/2 ‖w − θ‖²`` (``mu``), FedAvg's server."""

from __future__ import annotations

from ..sim.algorithms import Algorithm, prox_penalty, weighted_mean_server
from ..sim.default_client import local_training
from .declare import Declares, Option


def fedprox() -> Algorithm:
    """FedProx: local objective ``f_i(w) + μ/2‖w − θ‖²``, FedAvg's server."""
    return Algorithm("fedprox", server=weighted_mean_server, client=local_training(penalty=proximal),
                     private_upload=True)


def proximal(ctx):
    """``w -> μ/2 ‖w − θ‖²``."""
    return prox_penalty(ctx.theta, ctx.state, ctx.hp)


fedprox.declares = Declares(label="FedProx", options={"mu": Option(0.01)}, central_sensitivity="2/m",
                            weighted_by_n=True)
