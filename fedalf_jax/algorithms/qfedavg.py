"""q-FFL / qFedAvg (Li et al., 2020): the server weighs each client's change by ``f_i(θ_t)^q`` and sets its own
step from the clients' ``h_i`` (so ``server_lr`` is never read); ``q`` from the options."""

from __future__ import annotations

from ..sim.algorithms import Algorithm, qfedavg_server
from ..sim.default_client import local_training
from .declare import Declares, Option


def qfedavg() -> Algorithm:
    """q-FFL / qFedAvg with ``q`` from the hyper-parameters."""
    return Algorithm("qfedavg", server=qfedavg_server, client=local_training(), needs_loss=True, private_upload=True)


def _ignores(cfg) -> dict:
    """Its step is set by its ``h_i`` (dp central, whose noise reads η_g, refuses qfedavg)."""
    return {"server_lr": "", "server_lr_decay": ""}


qfedavg.declares = Declares(label="qFedAvg", options={"q": Option(0.1)}, ignores=_ignores, sends_loss=True,
                            server_work="qFedAvg's weighted update", counts_arrived=True)
