"""Ditto (Li, Hu, Beirami, Smith, ICML 2021, "Ditto: Fair and Robust Federated Learning through
Personalization", Algorithm 1) written against the public API.

The global model θ is trained as FedAvg: each sampled client runs its local SGD steps from θ_t on ``f_i``
and uploads ``Δ_i = θ_t − w_i``; the server takes ``θ ← θ − η_g Σ p_i Δ_i``. Each client also keeps its
personal model ``v_i`` (its client state, initialised to θ_0) and, in the same round, over the same
minibatches and steps, trains it from ``v_i`` on

    h_i(v) = f_i(v) + λ/2 ‖v − θ_t‖²,

λ being the algorithm's own hyper-parameter ``lam`` (default 0.1; ``--hp lam=1``, ``fj.Config(hp={"lam":
1.0})``, swept in one program like ``lr``). ``v_i`` never leaves the client: only ``Δ_i`` is uploaded
(and privatised, under a privacy mechanism). The evaluation tests each client's ``v_i`` on its own test
split beside the global model: ``personal_acc``, ``personal_angle_deg``, ... in metrics.csv. Run it from
the repository root:

    fedalf run --algorithm examples.ditto:ditto --model mlp --rounds 20 --hp lam=0.1
"""

import jax

import fedalf_jax as fj


def _map(f, *trees):
    return jax.tree_util.tree_map(f, *trees)


def personal_start(ctx):
    """v_i trains from where the client left it."""
    return ctx.state


def personal_penalty(ctx):
    """λ/2 ‖v − θ_t‖²: the pull of the personal model towards this round's global model."""
    theta, hp = ctx.theta, ctx.hp
    return lambda v: 0.5 * hp.own["lam"] * sum(jax.numpy.vdot(a - b, a - b) for a, b in
                                       zip(jax.tree_util.tree_leaves(v), jax.tree_util.tree_leaves(theta)))


def upload(ctx, w, w_tilde, personal):
    """FedAvg's upload Δ_i = θ − w̃_i; the trained personal model becomes the client's new state."""
    return _map(lambda t, u: t - u, ctx.theta, w_tilde), personal


def ditto() -> fj.Algorithm:
    return fj.Algorithm(
        "ditto", server=fj.algorithms.weighted_mean_server,                  # FedAvg's server
        client=fj.local_training(upload=upload,
                                 personal=fj.Personal(start=personal_start, penalty=personal_penalty)),
        init_client_state=lambda params: params,                             # v_i = θ_0
        personal_model=lambda v_i: v_i,                                      # evaluate v_i
        private_upload=True,                                                 # Δ_i is a function of w̃ and θ
        hparams={"lam": 0.1})                                                # λ, read as hp.own["lam"]
