"""DP-FedAvg with adaptive clipping (Andrew, Thakkar, McMahan and Ramaswamy, NeurIPS 2021, Algorithm 1 with
the geometric update) written against the public API: the clip norm follows a quantile of the clients'
update norms, and the server adds Gaussian noise drawn from its own PRNG key (``ServerIn.key``).

The server keeps ``C_t = C_0 · f_t`` (its state is ``f``, starting at 1) and broadcasts ``f``; each sampled
client clips ``Δ_i = θ − w_i`` to norm ``C`` and uploads, beside it, the bit ``b_i = 1[‖Δ_i‖ ≤ C]`` (aux).
With ``m`` clients, noise ``ξ ~ N(0, I)`` and ``ζ ~ N(0, 1)`` from the server's key,

    θ ← θ − η_g (Σ_i clip_C(Δ_i) + z C ξ) / m,
    b̃ = (Σ_i b_i + σ_b ζ) / m,      C ← C · exp(−η_C (b̃ − γ)),

its own hyper-parameters ``clip0`` (C_0), ``quantile`` (γ), ``clip_lr`` (η_C), ``noise`` (z, the update's
noise multiplier z_Δ) and ``bit_noise`` (σ_b), e.g. ``--hp noise=1 bit_noise=5`` (the paper's σ_b = m/20
at m = 100). Run it from the repository root:

    fedalf run --algorithm examples.dp_fedavg:dp_fedavg --model mlp --rounds 20 --hp noise=1 bit_noise=0.5

What its privacy record can and cannot claim. The run's ``privacy`` record covers the package's mechanisms
only (``--ldp``, ``--dp``); it knows nothing of this example's noise, and no accountant of the package
composes it (``--dp central``, whose noise is accounted over the run, refuses a user's algorithm). Run
without ``--ldp``/``--dp``, the record therefore claims no guarantee at all, although the released models
are noised. What the mechanism gives must be computed outside: each round releases the noised clipped
sum (sensitivity C under adding or removing a client, 2C under replacing one) and the noised bit count
(sensitivity 1), together a Gaussian mechanism of multiplier z = (z_Δ⁻² + (2σ_b)⁻²)^(−1/2) for add/remove
(Andrew et al., Theorem 1), on m of N clients sampled without replacement, composed over the rounds (e.g.
``fedalf_jax.experiment.accounting.central_epsilon`` takes replace-one: give it z/2). That guarantee is
against those who see the released models, not against the server, which sees the clipped updates and
bits un-noised; and C's trajectory is public only as post-processing of the noised counts.

Unlike TensorFlow Federated's ``DifferentiallyPrivateFactory.gaussian_adaptive``, whose noise multiplier is the
overall z (it derives z_Δ from z and σ_b, σ_b = m/20 by default), ``noise`` here is z_Δ itself.
"""

import jax
import jax.numpy as jnp

import fedalf_jax as fj

HPARAMS = {"clip0": 0.1, "quantile": 0.5, "clip_lr": 0.2, "noise": 1.0, "bit_noise": 0.5}


def _norm(tree):
    return jnp.sqrt(sum(jnp.vdot(x, x) for x in jax.tree_util.tree_leaves(tree)))


def upload(ctx, w, w_tilde):
    """clip_C(θ − w̃_i) and the bit 1[‖θ − w̃_i‖ ≤ C], with C = C_0 · f (f broadcast)."""
    theta, state, hp, broadcast = ctx.theta, ctx.state, ctx.hp, ctx.broadcast
    clip = hp.own["clip0"] * broadcast
    delta = jax.tree_util.tree_map(lambda t, u: t - u, theta, w_tilde)
    norm = _norm(delta)
    scale = jnp.minimum(1.0, clip / jnp.maximum(norm, 1e-30))
    return jax.tree_util.tree_map(lambda d: d * scale, delta), state, (norm <= clip).astype(jnp.float32)


def server(s: fj.ServerIn):
    own = s.hp.own
    clip = own["clip0"] * s.sstate
    m = s.weights.shape[0]
    k_delta, k_bits = jax.random.split(s.key)
    leaves, tree = jax.tree_util.tree_flatten(s.theta)
    keys = jax.random.split(k_delta, len(leaves))
    noise = jax.tree_util.tree_unflatten(tree, [jax.random.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves)])
    step = jax.tree_util.tree_map(lambda d, z: (jnp.sum(d, axis=0) + own["noise"] * clip * z) / m, s.deltas, noise)
    theta = jax.tree_util.tree_map(lambda t, d: t - s.server_lr_t * d, s.theta, step)
    bits = (jnp.sum(s.aux) + own["bit_noise"] * jax.random.normal(k_bits, ())) / m
    factor = s.sstate * jnp.exp(-own["clip_lr"] * (bits - own["quantile"]))
    return theta, factor, {"clip": clip, "unclipped": bits}


def dp_fedavg() -> fj.Algorithm:
    return fj.Algorithm(
        "dp_fedavg", server=server, client=fj.local_training(upload=upload), broadcast=lambda f: f,
        init_server_state=lambda params, num_clients: jnp.ones((), jnp.float32),
        private_upload=True, public_aux=True,            # clip_C(Δ_i) and b_i: functions of w̃_i, θ and C
        hparams=HPARAMS, metrics=("clip", "unclipped"))
