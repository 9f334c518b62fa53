"""FedProx (Li et al., 2020): the local objective ``f_i(w) + μ/2 ‖w − θ‖²`` (``mu``), FedAvg's server."""

from __future__ import annotations

from ..sim.algorithms import Algorithm, model_upload, prox_penalty, weighted_mean_server
from .declare import Declares, Option


def fedprox() -> Algorithm:
    """FedProx: local objective ``f_i(w) + μ/2‖w − θ‖²``, FedAvg's server."""
    return Algorithm("fedprox", server=weighted_mean_server, upload=model_upload, penalty=prox_penalty,
                     private_upload=True)


fedprox.declares = Declares(label="FedProx", options={"mu": Option(0.01)}, central_sensitivity="2/m",
                            weighted_by_n=True)
