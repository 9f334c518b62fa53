"""FedLF (Pan et al., AAAI 2024): the server steps along the layer-wise fair direction of the clients' full
gradients (``client_grad="full"``, no local training) or of their scaled local-SGD changes ``(θ − w_i)/η_l``
(``"local"``): per layer, the min-norm point of the convex hull of the clients' fragments, its length the mean
upload's (docs/algorithms.md §3.2), with the history rows of recently seen clients."""

from __future__ import annotations

from ..sim.algorithms import Algorithm, make_fair_server, scaled_model_upload
from ..sim.default_client import local_training
from .declare import Declares, Option, option


def fedlf(layer_of, *, client_grad: str = "full", history: bool = True, merge_tol: float = 1e-6,
          qp_method: str = "auto", fair_norm: str = "raw", history_tau=None) -> Algorithm:
    """FedLF: the layer-wise fair direction of the clients' full gradients (``client_grad="full"``)
    or of their scaled local-SGD changes ``(θ − w_i)/η_l`` (``"local"``)."""
    if client_grad not in ("full", "local"):
        raise ValueError(f"unknown client_grad {client_grad!r}; use 'full' or 'local'")
    server, init_state = make_fair_server(layer_of, history=history, merge_tol=merge_tol, qp_method=qp_method,
                                          fair_norm=fair_norm, history_tau=history_tau)
    client = local_training(full_gradient=True) if client_grad == "full" else local_training(upload=scaled_upload)
    return Algorithm("fedlf", server=server, client=client, needs_loss=True, init_server_state=init_state, needs_noise_var=fair_norm == "denoised")


def scaled_upload(ctx, w, w_tilde):
    """``Δ_i = (θ − w̃_i)/η_l``, the client's state unchanged."""
    return scaled_model_upload(ctx.theta, w, w_tilde, ctx.state, ctx.hp, ctx.lr)


# the fair server's options (FedALF's server is this one: it declares the same)
FAIR_OPTIONS = {"history": Option(True), "history_tau": Option(None), "merge_tol": Option(1e-6),
                "qp_method": Option("auto"), "fair_norm": Option("raw", private="denoised")}
FAIR_WORK = "the fair direction's per-layer Grams and QPs, and the model update"


def _ignores(cfg) -> dict:
    """Without local training (``client_grad=full``) the client sends ``∇f_i(θ_t)``: no local step is read."""
    if option(cfg, "client_grad") == "full":
        return dict(lr="client_grad=full", lr_decay="client_grad=full", local_optimizer="client_grad=full",
                    local_steps="client_grad=full")
    return {}


def _eta(cfg) -> str:
    """The option a report tunes as η: the server's step when the clients send gradients."""
    return "server_lr" if option(cfg, "client_grad") == "full" else "lr"


def _upload_privacy(cfg) -> tuple[bool, str]:
    if cfg.client_grad == "full":
        return False, ("FedLF with client_grad=full uploads the client's full-batch gradient, which no mechanism "
                       "perturbs (the mechanisms perturb an uploaded model: use client_grad=local)")
    return True, "the upload (θ_t − w̃_i)/η_l is a function of the mechanism's output w̃_i and public values"


def _privacy_refusal(option_name: str, value: str, client_grad: str):
    if client_grad != "local":
        return (f"{option_name}={value!r} cannot be used with algorithm='fedlf' and client_grad={client_grad!r}: "
                f"that client uploads its full-batch gradient, not a model, and {option_name} perturbs an "
                f"uploaded model; use client_grad='local' or {option_name}='none'")
    return None


# η_g is a step size here: Δ_i is a gradient (client_grad=full) or (θ − w_i)/η_l
fedlf.declares = Declares(label="FedLF", options={"client_grad": Option("full"), **FAIR_OPTIONS},
                          defaults={"server_lr": Option(0.05), "server_lr_decay": Option(0.999)},
                          factory_options=("client_grad", "history", "merge_tol", "qp_method", "fair_norm",
                                           "history_tau"),
                          needs_layers=True, ignores=_ignores, eta=_eta, central_sensitivity="2", sends_loss=True,
                          upload_privacy=_upload_privacy, privacy_refusal=_privacy_refusal, server_work=FAIR_WORK,
                          fair_server=True)
