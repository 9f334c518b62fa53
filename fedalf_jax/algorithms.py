"""The algorithms as small pure functions plugged into the one round (DESIGN §3).

An algorithm is three choices:
  * the client's local objective (a penalty added to ``f_i``, possibly using the client's dual),
  * what the client uploads, as the pseudo-gradient ``Δ_i = θ_t − u_i`` (and the new dual),
  * the server update from the ``Δ_i``.
Privacy (LDP / DP) is applied by the round between local training and the upload, the same way
for every algorithm that uploads a model.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from . import tree as T


class HParams(NamedTuple):
    """The numeric hyper-parameters: traced values, so a run can be vmapped over them."""

    lr: Any
    lr_decay: Any
    server_lr: Any
    server_lr_decay: Any
    mu: Any
    rho: Any
    q: Any
    epsilon: Any
    delta: Any
    clip: Any

    @classmethod
    def from_config(cls, cfg) -> "HParams":
        f = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
        return cls(f(cfg.lr), f(cfg.lr_decay), f(cfg.resolved_server_lr), f(cfg.resolved_server_lr_decay),
                   f(cfg.mu), f(cfg.rho), f(cfg.q), f(cfg.epsilon), f(cfg.delta), f(cfg.clip))


class ServerIn(NamedTuple):
    theta: Any          # global params θ_t
    deltas: Any         # pseudo-gradients Δ_i, leading axis m
    weights: Any        # p_i = n_i / Σ n_j, [m]
    losses: Any         # l_i = f_i(θ_t), [m] (zeros when the algorithm does not need them)
    lr_t: Any           # local learning rate of this round
    server_lr_t: Any    # server learning rate of this round
    hp: HParams
    t: Any              # round index
    sel: Any            # sampled client ids, [m]
    sstate: Any         # server state (history rows) or ()


SERVER_INFO = ("qp_iters", "qp_residual", "qp_fallback", "qp_blocks")


def _no_info():
    return {k: jnp.zeros((), jnp.float32) for k in SERVER_INFO}


@dataclasses.dataclass(frozen=True)
class Algorithm:
    name: str
    local_train: bool          # False: the client sends ∇f_i(θ_t) (FedLF client_grad=full)
    needs_loss: bool           # the server uses l_i = f_i(θ_t)
    has_dual: bool             # ADMM: a dual per client lives in the run state
    penalty: Optional[Callable]  # (theta, dual, hp) -> (params -> scalar), or None
    upload: Callable           # (theta, w, w_tilde, dual, hp, lr_t) -> (Δ_i, new dual)
    server: Callable           # ServerIn -> (new θ, new server state, info)
    init_server_state: Callable = lambda params, num_clients: ()  # noqa: E731


# ---- local objectives ---------------------------------------------------------------------

def prox_penalty(theta, dual, hp):
    return lambda w: 0.5 * hp.mu * T.sq_norm(T.sub(w, theta))


def admm_penalty(theta, dual, hp):
    return lambda w: T.vdot(dual, T.sub(w, theta)) + 0.5 * hp.rho * T.sq_norm(T.sub(w, theta))


# ---- uploads ----------------------------------------------------------------------------------

def model_upload(theta, w, w_tilde, dual, hp, lr_t):
    """u_i = w̃_i: Δ_i = θ − w̃_i."""
    return T.sub(theta, w_tilde), dual


def scaled_model_upload(theta, w, w_tilde, dual, hp, lr_t):
    """FedLF client_grad=local: Δ_i = (θ − w̃_i)/η_l."""
    return T.scale(T.sub(theta, w_tilde), 1.0 / lr_t), dual


def make_admm_upload(server_target: str, dual_from: str):
    def upload(theta, w, w_tilde, dual, hp, lr_t):
        src = w_tilde if dual_from == "perturbed" else w
        new_dual = T.add(dual, T.scale(T.sub(src, theta), hp.rho))
        u = T.add(w_tilde, T.scale(new_dual, 1.0 / hp.rho)) if server_target == "augmented" else w_tilde
        return T.sub(theta, u), new_dual
    return upload


# ---- server updates ---------------------------------------------------------------------------

def weighted_mean_server(s: ServerIn):
    """FedAvg / FedProx: θ ← θ − η_g Σ p_i Δ_i."""
    step = T.weighted_sum(s.deltas, s.weights)
    return T.sub(s.theta, T.scale(step, s.server_lr_t)), s.sstate, _no_info()


def mean_server(s: ServerIn):
    """FedADMM: θ ← θ − η_g mean_i Δ_i."""
    m = s.weights.shape[0]
    step = T.weighted_sum(s.deltas, jnp.full((m,), 1.0 / m))
    return T.sub(s.theta, T.scale(step, s.server_lr_t)), s.sstate, _no_info()


def qfedavg_server(s: ServerIn):
    """q-FFL: Δ_i = F^q Δw_i, h_i = q F^{q−1}‖Δw_i‖² + F^q/η_l, θ ← θ − ΣΔ_i/Σh_i, Δw_i = (θ−w_i)/η_l."""
    F = s.losses + 1e-10
    q = s.hp.q
    dw = T.scale(s.deltas, 1.0 / s.lr_t)
    dw_sq = sum(jnp.sum(x.reshape(x.shape[0], -1) ** 2, axis=1) for x in jax.tree_util.tree_leaves(dw))
    fq = F ** q
    h = q * F ** (q - 1.0) * dw_sq + fq / s.lr_t
    step = T.scale(T.weighted_sum(dw, fq), 1.0 / jnp.sum(h))
    return T.sub(s.theta, step), s.sstate, _no_info()


def make_fair_server(layer_of, *, history: bool, merge_tol: float, qp_method: str):
    """FedLF / FedALF: θ ← θ − η_g d with d the layer-wise fair direction (DESIGN §3.2)."""
    from .fairness import fair_direction, update_history_gram

    def server(s: ServerIn):
        kw = dict(layer_of=layer_of, merge_tol=merge_tol, qp_method=qp_method)
        if history:
            hist, last, gram = s.sstate
            n = last.shape[0]
            m = s.sel.shape[0]
            online = jnp.zeros((n,), bool).at[s.sel].set(True)
            seen = jnp.sum((last >= 0) | online)
            tau = seen // m
            mask = (seen > m) & ~online & (last >= 0) & (last >= s.t - tau)
            d, info = fair_direction(s.deltas, s.losses, history=hist, history_mask=mask, history_gram=gram, **kw)
            sstate = (T.put(hist, s.sel, s.deltas), last.at[s.sel].set(s.t),
                      update_history_gram(gram, s.sel, info))
        else:
            d, info = fair_direction(s.deltas, s.losses, **kw)
            sstate = s.sstate
        out = {"qp_iters": info["qp_iters"], "qp_residual": info["qp_residual"],
               "qp_fallback": info["fallback"], "qp_blocks": info["num_blocks"]}
        return T.sub(s.theta, T.scale(d, s.server_lr_t)), sstate, {k: jnp.asarray(v, jnp.float32)
                                                                     for k, v in out.items()}

    def init_state(params, num_clients):
        """History rows of all N clients, the round each was last online, and their per-layer Gram."""
        if not history:
            return ()
        k = max(jax.tree_util.tree_leaves(layer_of)) + 1
        return (T.zeros_stacked(params, num_clients), jnp.full((num_clients,), -1, jnp.int32),
                jnp.zeros((k, num_clients, num_clients), jnp.float32))

    return server, init_state


def make_algorithm(cfg, layer_of) -> Algorithm:
    """The :class:`Algorithm` for ``cfg.algorithm`` (static choices resolved from the config)."""
    name = cfg.algorithm
    if name == "fedavg":
        return Algorithm(name, True, False, False, None, model_upload, weighted_mean_server)
    if name == "fedprox":
        return Algorithm(name, True, False, False, prox_penalty, model_upload, weighted_mean_server)
    if name == "qfedavg":
        return Algorithm(name, True, True, False, None, model_upload, qfedavg_server)
    admm_upload = make_admm_upload(cfg.server_target, cfg.dual_from)
    if name == "fedadmm":
        return Algorithm(name, True, False, True, admm_penalty, admm_upload, mean_server)
    server, init_state = make_fair_server(layer_of, history=cfg.resolved_history, merge_tol=cfg.merge_tol,
                                          qp_method=cfg.qp_method)
    if name == "fedlf":
        local = cfg.client_grad == "local"
        return Algorithm(name, local, True, False, None, scaled_model_upload, server, init_state)
    if name == "fedalf":
        return Algorithm(name, True, True, True, admm_penalty, admm_upload, server, init_state)
    raise ValueError(f"unknown algorithm {name!r}")
