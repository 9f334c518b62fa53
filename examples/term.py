"""TERM at the server, client-level tilted ERM (Li, Beirami, Sanjabi and Smith, ICLR 2021) written against
the public API.

The tilted objective over the clients, ``(1/t) log((1/N) Σ_k exp(t f_k(θ)))``, has the gradient
``Σ_k w_k ∇f_k(θ)`` with ``w_k ∝ exp(t f_k(θ))``: the server averages the sampled clients' updates
``Δ_i = θ − w_i`` with those weights, from their losses ``l_i = f_i(θ_t)``,

    w_i = exp(t l_i) / Σ_j exp(t l_j),      θ ← θ − η_g Σ_i w_i Δ_i.

``t`` is its own hyper-parameter ``tilt`` (``--hp tilt=1``): ``t > 0`` leans towards the worst clients
(``t → ∞``: the max-loss client), ``t = 0`` is the plain mean, ``t < 0`` down-weights outliers. Run it from
the repository root:

    fedalf run --algorithm examples.term:term --model mlp --rounds 20 --hp tilt=1

The weights have the paper's uniform base (1/N), not FedAvg's sample shares p_i: at t = 0 this is the
unweighted mean of the updates, not FedAvg's weighted one.
"""

import jax
import jax.numpy as jnp

import fedalf_jax as fj


def server(s: fj.ServerIn):
    w = jax.nn.softmax(s.hp.own["tilt"] * s.losses)          # exp(t l_i) / Σ_j exp(t l_j), overflow-safe
    theta = jax.tree_util.tree_map(lambda t, d: t - s.server_lr_t * jnp.tensordot(w, d, axes=1), s.theta, s.deltas)
    return theta, s.sstate, {"tilt_weight_max": jnp.max(w)}


def term() -> fj.Algorithm:
    return fj.Algorithm("term", server=server, client=fj.local_training(), needs_loss=True, private_upload=True,
                        hparams={"tilt": 1.0}, metrics=("tilt_weight_max",))
