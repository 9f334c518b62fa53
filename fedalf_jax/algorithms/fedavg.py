"""FedAvg (McMahan et al., 2017): local SGD on ``f_i``; the server steps along the ``n_i``-weighted mean of the
uploads, ``θ ← θ − η_g Σ p_i Δ_i``."""

from __future__ import annotations

from ..sim.algorithms import Algorithm, weighted_mean_server
from ..sim.default_client import local_training
from .declare import Declares


def fedavg() -> Algorithm:
    """FedAvg: local SGD on ``f_i``, ``θ ← θ − η_g Σ p_i Δ_i``."""
    return Algorithm("fedavg", server=weighted_mean_server, client=local_training(), private_upload=True)  # Δ_i = θ − w̃_i


fedavg.declares = Declares(label="FedAvg", central_sensitivity="2/m", weighted_by_n=True, frontier_line=":")
