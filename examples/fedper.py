"""FedPer (Arivazhagan, Aggarwal, Singh, Choudhary, "Federated Learning with Personalization Layers",
arXiv 1912.00818, 2019) written against the public API.

The model is split into a shared body (the base layers) and a personal head: the last ``head_layers``
top-level modules of the params, in the order of their names (``Dense_2`` of the ``mlp``, ``Dense_1`` of the
``cnn``). Each client keeps its own head in its client state (initialised to θ_0's head) and, when sampled,
trains the whole model from the current global body and its own head, then uploads the body's
``Δ_i = θ_t − w̃_i`` (the head's Δ is 0: the head never leaves the client) and keeps its trained head. The
server is FedAvg's, so the global head stays θ_0's. Each client's personal model, evaluated beside θ, is the
current global body with its own head (``personal_model(state, theta)``); a client never sampled is
evaluated with θ_t. Run it from the repository root:

    fedalf run --algorithm examples.fedper:fedper --model mlp --rounds 20

The paper keeps the last one or two layers personal (``fedper(head_layers=2)``) and leaves the body's
averaging open; here it is FedAvg's p_i-weighted mean over the round's clients, as in FedRep's code.
"""

import jax
import jax.numpy as jnp

import fedalf_jax as fj


def _order(name):
    """``Dense_10`` after ``Dense_9``: flax's automatic names sorted by kind, then number."""
    kind, _, num = name.rpartition("_")
    return (kind, int(num)) if num.isdigit() else (name, -1)


def head_names(params, head_layers: int) -> list:
    """The top-level modules that make up the personal head: the last ``head_layers`` in name order."""
    return sorted(params, key=_order)[-head_layers:]


def with_head(theta, head):
    """The global body with a client's own head."""
    return {**theta, **head}


def upload(ctx, w, w_tilde):
    """Δ_i = θ − w̃_i on the body, 0 on the head; the trained head becomes the client's state."""
    theta, head = ctx.theta, ctx.state
    delta = {k: jax.tree_util.tree_map(lambda t, u: jnp.zeros_like(t) if k in head else t - u, theta[k],
                                       w_tilde[k]) for k in theta}
    return delta, {k: w[k] for k in head}


def fedper_client(local_optimizer=None):
    """Local training from the global body and the client's own head (its state), uploading the body's change."""
    return fj.local_training(local_start=lambda ctx: with_head(ctx.theta, ctx.state),  # global body + own head
                             upload=upload, local_optimizer=local_optimizer)


def fedper(head_layers: int = 1) -> fj.Algorithm:
    def init_head(params):                      # a client's state: θ_0's head
        return {k: params[k] for k in head_names(params, head_layers)}

    return fj.Algorithm(
        "fedper", server=fj.algorithms.weighted_mean_server, client=fedper_client(),  # FedAvg's server
        init_client_state=init_head,
        personal_model=lambda head, theta: with_head(theta, head),           # evaluated likewise
        private_upload=True)                                                 # Δ_i: a function of w̃ and θ
