"""FedGKD (Yao et al., 2021, "Local-Global Knowledge Distillation in Heterogeneous Federated Learning")
written against the public API, as a user would.

The server keeps the last ``K`` global models and broadcasts their average, the teacher
``θ̄_t = mean(θ_{t−K+1}, …, θ_t)`` (fewer in the first rounds: the models there are so far). Each client
trains from θ_t on every minibatch's

    CE(w) + (γ/2) · KL(softmax(teacher logits) ‖ softmax(student logits)),

the teacher's logits those of θ̄_t on the same examples (evaluation mode, no gradient). The server is
FedAvg's, θ ← θ − η_g Σ p_i Δ_i, then pushes the new θ into its buffer.

``K`` is a factory argument (the buffer's length: a different K is a different program), given from the CLI
with ``--alg-arg K=2`` or ``fj.Config(alg_args={"K": 2})``; γ is the algorithm's own hyper-parameter
(``--hp gamma=0.2``, traced: a sweep varies it in one program). Run it:

    fedalf run --algorithm examples.fedgkd:fedgkd --alg-arg K=2 --hp gamma=0.2 --model mlp --rounds 20      # from the repo root

or in Python: ``fj.run(algorithm="examples.fedgkd:fedgkd", alg_args={"K": 2}, hp={"gamma": 0.2}, ...)``.
"""

import jax
import jax.numpy as jnp

import fedalf_jax as fj


def _teacher(sstate):
    """The average of the buffer's filled slots (``count`` models so far, at most K)."""
    buf, count = sstate
    k = jax.tree_util.tree_leaves(buf)[0].shape[0]
    filled = (jnp.arange(k) < count).astype(jnp.float32)
    n = jnp.minimum(count, k).astype(jnp.float32)
    return jax.tree_util.tree_map(lambda b: jnp.tensordot(filled, b, axes=1) / n, buf)


def local_loss(ctx):
    """CE + (γ/2) KL(teacher ‖ student) over the batch's real examples."""
    hp, broadcast = ctx.hp, ctx.broadcast

    def loss(params, batch: fj.Batch):
        t_logits = jax.lax.stop_gradient(batch.apply(broadcast)[0])
        log_t, log_s = jax.nn.log_softmax(t_logits), jax.nn.log_softmax(batch.logits)
        kl = jnp.sum(jnp.exp(log_t) * (log_t - log_s), axis=-1)
        w = batch.mask.astype(kl.dtype)
        return fj.cross_entropy(batch) + 0.5 * hp.own["gamma"] * jnp.sum(kl * w) / jnp.maximum(jnp.sum(w), 1.0)
    return loss


def server(s: fj.ServerIn):
    """FedAvg's step, then θ_{t+1} into the buffer's next slot (the oldest model leaves)."""
    theta, _, info = fj.algorithms.weighted_mean_server(s)
    buf, count = s.sstate
    k = jax.tree_util.tree_leaves(buf)[0].shape[0]
    buf = jax.tree_util.tree_map(lambda b, t: b.at[count % k].set(t), buf, theta)
    return theta, (buf, count + 1), info


def fedgkd(K=5) -> fj.Algorithm:
    """FedGKD with a teacher of the last ``K`` global models (the paper's default buffer: 5)."""
    if isinstance(K, bool) or not isinstance(K, int) or K < 1:
        raise fj.ConfigError(f"fedgkd: K (the number of past global models averaged) must be a positive "
                             f"integer, got {K!r}; e.g. --alg-arg K=2")

    def init_server_state(params, num_clients):
        buf = jax.tree_util.tree_map(lambda p: jnp.zeros((K, *p.shape), p.dtype).at[0].set(p), params)
        return buf, jnp.ones((), jnp.int32)   # θ_0 in slot 0

    return fj.Algorithm(
        "fedgkd", server=server, client=fj.local_training(local_loss=local_loss),  # FedAvg's Δ_i = θ − w̃_i
        init_server_state=init_server_state, broadcast=_teacher, hparams={"gamma": 0.2},
        private_upload=True)   # Δ_i = θ − w̃_i; the teacher is public (the server's models)
