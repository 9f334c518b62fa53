"""FedAvgM, FedAvg with server momentum (Hsu, Qi and Brown 2019) written against the public API.

The clients run FedAvg's local SGD; the server treats the weighted mean of their pseudo-gradients as a
gradient and takes a heavy-ball step, with ``β`` its own hyper-parameter ``beta`` (``--hp beta=0.9``):

    Δ = Σ_i p_i Δ_i,      v ← β v + Δ  (v₀ = 0),      θ ← θ − η_g v.

Run it from the repository root:

    fedalf run --algorithm examples.fedavgm:fedavgm --model mlp --rounds 20 --server-lr 1.0 --hp beta=0.9

Flower's FedAvgM takes the same step (its first round sets v = Δ, the same as v₀ = 0); implementations that
damp the momentum, v ← βv + (1 − β)Δ, take steps (1 − β) times these for the same η_g.
"""

import jax
import jax.numpy as jnp

import fedalf_jax as fj


def server(s: fj.ServerIn):
    beta = s.hp.own["beta"]
    v = jax.tree_util.tree_map(lambda m, d: beta * m + jnp.tensordot(s.weights, d, axes=1), s.sstate, s.deltas)
    theta = jax.tree_util.tree_map(lambda t, m: t - s.server_lr_t * m, s.theta, v)
    return theta, v, {}


def fedavgm() -> fj.Algorithm:
    return fj.Algorithm("fedavgm", server=server, client=fj.local_training(), private_upload=True, hparams={"beta": 0.9},
                        init_server_state=lambda params, num_clients: jax.tree_util.tree_map(jnp.zeros_like, params))
