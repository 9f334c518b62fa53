"""pFedMe (T. Dinh, N. Tran, J. Nguyen, NeurIPS 2020, "Personalized Federated Learning with Moreau
Envelopes", Algorithm 1) as a client program. Each local step, on its minibatch D, first approximately
solves the personal problem

    θ̃ ≈ argmin_θ̃  f(θ̃; D) + λ/2 ‖θ̃ − w‖²

by ``K`` gradient steps of size η_p, **warm-started from the previous step's θ̃** (the carry: as the
authors' code keeps its personal model across the local steps), then moves the local copy of the global
model towards it, ``w ← w − η_l λ (w − θ̃)``. θ̃ and w start from θ_t each round. The client uploads
``Δ_i = θ_t − w_i`` and keeps θ̃ as its personal model (its state, evaluated beside θ as ``personal_*``);
the server is FedAvg's, ``θ ← θ − β Σ p_i Δ_i = (1 − β) θ + β Σ p_i w_i``, with β the server learning rate
(``--server-lr``). λ (``lam``, default 15) and η_p (``personal_lr``, default 0.01) are its own
hyper-parameters; ``K`` (default 5) is the factory's. Run it from the repository root:

    fedalf run --algorithm examples.pfedme:pfedme --model mlp --rounds 20 --server-lr 1 --hp lam=15 personal_lr=0.01
"""

import jax

import fedalf_jax as fj


def _map(f, *trees):
    return jax.tree_util.tree_map(f, *trees)


def init(ctx):
    return {"w": ctx.theta, "personal": ctx.theta}  # w and θ̃ start from θ_t


def make_step(k: int):
    def step(carry, batch, ctx):
        w, v = carry["w"], carry["personal"]
        lam, eta_p = ctx.hp.own["lam"], ctx.hp.own["personal_lr"]

        def f(p):  # f(θ̃; D): the minibatch's cross-entropy
            logits, _ = ctx.apply(p, batch.x, train=True, key=batch.key)
            return fj.cross_entropy(batch, logits)
        for _ in range(k):  # K steps on f(θ̃; D) + λ/2‖θ̃ − w‖², from the last step's θ̃
            v = _map(lambda p, g, q: p - eta_p * (g + lam * (p - q)), v, jax.grad(f)(v), w)
        w = _map(lambda q, p: q - ctx.lr * lam * (q - p), w, v)
        return {"w": w, "personal": v}
    return step


def final(carry, ctx):
    """Δ_i = θ − w_i; the client's state becomes θ̃ (its personal model)."""
    return _map(lambda t, q: t - q, ctx.theta, carry["w"]), carry["personal"]


def pfedme(k: int = 5) -> fj.Algorithm:
    return fj.Algorithm(
        "pfedme", server=fj.algorithms.weighted_mean_server,            # FedAvg's server: β = --server-lr
        client=fj.ClientProgram(init, make_step(k), final),
        init_client_state=lambda params: params,                         # θ̃_i = θ_0 until sampled
        personal_model=lambda v: v,                                      # evaluate θ̃_i
        hparams={"lam": 15.0, "personal_lr": 0.01})
