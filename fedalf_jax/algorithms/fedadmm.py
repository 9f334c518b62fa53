"""FedADMM (Wang et al., 2022; Gong et al., 2022): each client minimises the augmented Lagrangian
``f_i(w) + ⟨λ_i, w − θ⟩ + ρ/2 ‖w − θ‖²`` and updates its dual ``λ_i``; the server steps along the uniform mean
of the uploads. ``server_target`` says what a client uploads, ``dual_from`` what its dual follows
(docs/algorithms.md §3.3); :func:`upload_privacy` is what a local mechanism's guarantee covers of that upload
(FedALF's clients are these, so it declares the same)."""

from __future__ import annotations

from ..sim.algorithms import Algorithm, admm_penalty, make_admm_upload, mean_server, zeros_like_params
from ..sim.default_client import local_training
from .declare import Declares, Option


def fedadmm(*, server_target: str = "model", dual_from: str = "local") -> Algorithm:
    """FedADMM: ADMM local objective and dual, ``θ ← θ − η_g mean_i Δ_i``."""
    return Algorithm("fedadmm", server=mean_server, client=admm_client(server_target, dual_from),
                     init_client_state=zeros_like_params)


def admm_client(server_target: str, dual_from: str):
    """The ADMM client (FedADMM's and FedALF's): local training on the augmented Lagrangian
    ``f_i(w) + ⟨λ_i, w − θ⟩ + ρ/2 ‖w − θ‖²``, then the dual update and the upload of :func:`make_admm_upload`."""
    rule = make_admm_upload(server_target, dual_from)

    def lagrangian(ctx):
        return admm_penalty(ctx.theta, ctx.state, ctx.hp)

    def upload(ctx, w, w_tilde):
        return rule(ctx.theta, w, w_tilde, ctx.state, ctx.hp, ctx.lr)
    return local_training(penalty=lagrangian, upload=upload)


def upload_privacy(cfg) -> tuple[bool, str]:
    """Under a local mechanism: whether the ADMM upload is a function of the mechanism's output and public values
    (and what it is), or why not."""
    target, dual_from = cfg.resolved_server_target, cfg.resolved_dual_from
    if dual_from == "local" and target == "increment":
        return False, ("with dual_from=local the increment upload w̃_i + (λ_i − λ_i⁻)/ρ includes the dual change "
                       "(λ_i − λ_i⁻)/ρ = w_i − θ_t, computed from the un-noised local model and never clipped, so "
                       "the upload is the mechanism's output plus the un-noised local change, not a function of the "
                       "output alone (dual_from=perturbed keeps the guarantee)")
    if dual_from == "local" and target == "augmented":
        return False, ("with dual_from=local the augmented upload w̃_i + λ_i/ρ includes the dual λ_i/ρ, the sum of "
                       "the client's un-noised local changes w_i − θ_t (at its first participation exactly that "
                       "change), so the upload is not a function of the mechanism's output "
                       "(dual_from=perturbed keeps the guarantee)")
    if target == "model":
        return True, ("the model upload sends only the mechanism's output w̃_i (the dual, computed from the un-noised "
                      "model with dual_from=local, stays on the client)" if dual_from == "local" else
                      "the model upload sends only the mechanism's output w̃_i")
    return True, (f"with dual_from=perturbed the dual follows w̃_i and the {target} upload is a function of the "
                  f"client's mechanism outputs and the public θ_t")


# ρ, the upload and the dual's source (docs/lab/results.md's multi-seed ablation chose ρ = 0.1 and the model upload);
# a private run's upload is the model alone, so that it is the mechanism's output
ADMM_OPTIONS = {"rho": Option(0.1), "server_target": Option("model", private="model"),
                "dual_from": Option("local", private="local")}

fedadmm.declares = Declares(label="FedADMM", options=ADMM_OPTIONS, factory_options=("server_target", "dual_from"),
                            central_sensitivity="2/m", upload_privacy=upload_privacy,
                            server_work="the mean of the uploads and the model update", counts_arrived=True)
