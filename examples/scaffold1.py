"""SCAFFOLD (Karimireddy et al., ICML 2020, Algorithm 1) with **option I** control variates, as a client program.

The server keeps the control variate ``c`` and broadcasts it; each client keeps its own ``c_i`` (its state).
Every local step corrects the gradient, ``w ← w − η_l (∇f_i(w; batch) − c_i + c)``, for the client's ``K``
steps, and then

    c_i⁺ = ∇f_i(θ),      the client uploads Δ_i = θ − w_i and Δc_i = c_i⁺ − c_i,

``∇f_i(θ)`` the full gradient of the client's loss (the mean cross-entropy over all its training examples)
at the global model θ it received: option I, "an additional pass over the local data". A **data pass**
(``ctx.data.fold``) sums the per-example gradients over the client's own examples, exactly, whatever the
batch size or the optimiser (option II, ``examples/scaffold.py``, estimates it from the local steps instead).
The server, with ``N`` clients of which ``m`` uploaded,

    θ ← θ − η_g mean_i Δ_i,      c ← c + (m/N) mean_i Δc_i = c + Σ_i Δc_i / N.

``final`` returns ``fj.Reveal(w, c_i⁺, Δc_i)``: the round uploads ``Δ_i = θ − w̃_i``, so under ``--ldp`` or
``--dp gaussian`` the model upload passes through the mechanism as FedAvg's does. ``Δc_i`` is a gradient of
the client's data, un-noised: ``public_aux=False``, so such a run's privacy record lists it as not covered and
says the guarantee does not hold. Run it from the repository root:

    fedalf run --algorithm examples.scaffold1:scaffold1 --model mlp --rounds 20
"""

import jax
import jax.numpy as jnp

import fedalf_jax as fj


def _map(f, *trees):
    return jax.tree_util.tree_map(f, *trees)


def _vdot(a, b):
    return sum(jnp.vdot(x, y) for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


def init(ctx):
    return ctx.theta  # the carry: the local model w, from θ


def step(w, batch, ctx):
    """w − η_l (g_i(w) − c_i + c): SGD with SCAFFOLD's correction."""
    g = jax.grad(lambda p: fj.cross_entropy(batch, ctx.apply(p, batch.x, train=True, key=batch.key)[0]))(w)
    return _map(lambda p, gi, c, ci: p - ctx.lr * (gi - ci + c), w, g, ctx.broadcast, ctx.state)


def full_gradient(ctx, params):
    """∇f_i(params): the gradient of the sum of the cross-entropies over the client's real examples, summed
    batch by batch by a data pass and divided by n_i (the mean's gradient)."""
    def add(acc, batch):
        total = lambda p: fj.cross_entropy(batch, ctx.apply(p, batch.x)[0]) * jnp.sum(batch.mask)  # noqa: E731
        return _map(jnp.add, acc, jax.grad(total)(params))
    s = ctx.data.fold(add, _map(jnp.zeros_like, params))
    return _map(lambda x: x / ctx.facts.n.astype(x.dtype), s)


def final(w, ctx):
    """Reveal w (Δ_i = θ − w̃ is the round's); c_i⁺ = ∇f_i(θ) the new state; aux Δc_i = c_i⁺ − c_i."""
    c_new = full_gradient(ctx, ctx.theta)
    return fj.Reveal(w, c_new, _map(jnp.subtract, c_new, ctx.state))


def server(s: fj.ServerIn):
    """θ ← θ − η_g mean Δ_i;  c ← c + (m/N) mean Δc_i = c + Σ Δc_i / N."""
    theta = _map(lambda t, d: t - s.server_lr_t * jnp.mean(d, axis=0), s.theta, s.deltas)
    c = _map(lambda c, dc: c + jnp.sum(dc, axis=0) / s.num_clients, s.sstate, s.aux)
    return theta, c, {"c_norm": jnp.sqrt(_vdot(c, c))}


def scaffold1() -> fj.Algorithm:
    zeros = lambda params: _map(jnp.zeros_like, params)  # noqa: E731
    return fj.Algorithm(
        "scaffold1", server=server, client=fj.ClientProgram(init, step, final),
        init_client_state=zeros,                                       # c_i = 0
        init_server_state=lambda params, num_clients: zeros(params),   # c = 0
        broadcast=lambda c: c,                                         # every client receives c
        public_aux=False,                                              # Δc_i: a gradient of the client's data
        metrics=("c_norm",))                                           # ‖c‖ in metrics.csv
