"""FedALF (the seed paper, 2026): FedADMM's clients (the augmented-Lagrangian objective and dual, the ADMM upload)
and FedLF's layer-wise fair server; LDP-FedALF is FedALF under a local mechanism (``--ldp``)."""

from __future__ import annotations

from ..sim.algorithms import Algorithm, make_fair_server, zeros_like_params
from .declare import Declares, Option
from .fedadmm import ADMM_OPTIONS, admm_client, upload_privacy
from .fedlf import FAIR_OPTIONS, FAIR_WORK


def fedalf(layer_of, *, server_target: str = "increment", dual_from: str = "local", history: bool = True,
           merge_tol: float = 1e-6, qp_method: str = "auto", fair_norm: str = "raw", history_tau=None) -> Algorithm:
    """FedALF: FedADMM's clients and upload, FedLF's fair server."""
    server, init_state = make_fair_server(layer_of, history=history, merge_tol=merge_tol, qp_method=qp_method,
                                          fair_norm=fair_norm, history_tau=history_tau)
    return Algorithm("fedalf", server=server, client=admm_client(server_target, dual_from),
                     needs_loss=True, init_client_state=zeros_like_params,
                     init_server_state=init_state,
                     needs_noise_var=fair_norm == "denoised")


# ρ and the increment upload: docs/lab/results.md's multi-seed ablation (MLP, pat1 and pat2, 200 rounds, 3 seeds); a
# private run uploads the model alone (the mechanism's output), at η_g 1.0 (it beat the paper's 0.5, §5)
fedalf.declares = Declares(
    label="FedALF",
    options={**ADMM_OPTIONS, "rho": Option(0.01), "server_target": Option("increment", private="model"),
             **FAIR_OPTIONS},
    defaults={"server_lr": Option(0.5, private=1.0), "server_lr_decay": Option(0.999, private=0.999)},
    factory_options=("server_target", "dual_from", "history", "merge_tol", "qp_method", "fair_norm", "history_tau"),
    needs_layers=True, central_sensitivity="2", sends_loss=True, upload_privacy=upload_privacy,
    server_work=FAIR_WORK, fair_server=True, frontier_line="--")
