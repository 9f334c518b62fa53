"""PropFair (Zhang, Malekmohammadi, Chen, Yu, "Proportional Fairness in Federated Learning", TMLR 2023,
arXiv 2202.01666) written against the public API.

PropFair maximises Σ_i log(M − f_i(θ)), the proportional-fairness objective: each client's local SGD steps
minimise, on each minibatch with cross-entropy ``f``,

    −log(M − f)                                        where M − f ≥ ε,
    −log ε + (ε − (M − f))/ε + (ε − (M − f))²/(2ε²)    below (−log's second-order Taylor expansion at ε),

so the loss stays finite and its gradient continuous when a batch's loss nears M. The server is FedAvg's
(``θ ← θ − η_g Σ p_i Δ_i``). ``M`` and ``eps`` are its own hyper-parameters (``--hp M=5 eps=0.2``, swept in
one program like ``lr``). Run it from the repository root:

    fedalf run --algorithm examples.propfair:propfair --model mlp --rounds 20

Differs from FL-in-PyTorch's PropfairClient (vaseline555), which uses ``f/M`` where ``M − f < 0.2`` (a jump
in value and gradient at the threshold) where we continue ``−log`` by its quadratic expansion.
"""

import jax.numpy as jnp

import fedalf_jax as fj


def local_loss(ctx):
    """Each step's loss: −log(M − f) on the minibatch's cross-entropy f, quadratic below M − f = ε."""
    hp = ctx.hp

    def loss(params, batch: fj.Batch):
        m, eps = hp.own["M"], hp.own["eps"]
        gap = m - fj.cross_entropy(batch)
        below = (eps - gap) / eps
        return jnp.where(gap >= eps, -jnp.log(jnp.maximum(gap, eps)), -jnp.log(eps) + below + 0.5 * below ** 2)
    return loss


def propfair() -> fj.Algorithm:
    return fj.Algorithm("propfair", server=fj.algorithms.weighted_mean_server,  # FedAvg
                        client=fj.local_training(local_loss=local_loss), private_upload=True,   # Δ_i is a function of w̃ and θ
                        hparams={"M": 5.0, "eps": 0.2})
