"""Per-FedAvg, first-order (Fallah, Mokhtari, Ozdaglar, NeurIPS 2020, "Personalized Federated Learning with
Theoretical Guarantees: A Model-Agnostic Meta-Learning Approach", Algorithm 1 with the FO approximation) as a
client program. Each local update is MAML's first-order step over two consecutive minibatches D, D':

    w̃ = w − α ∇f(w; D),   then   w ← w − β ∇f(w̃; D'),

β this round's local learning rate η_l (``--lr``), α its own hyper-parameter ``alpha`` (default 0.01). The
carry holds ``w``, ``w̃`` and which half comes next; a local step past the client's examples leaves it as it
was, so the halves alternate over the real minibatches. With an odd number of local steps the last α-step
has no β-step to finish it and is dropped (use an even ``--local-steps`` or an even count of batches). The
client uploads ``Δ_i = θ_t − w_i``; the server takes the plain mean over the sampled clients (the paper's
``1/(rn) Σ``), ``θ ← θ − η_g mean_i Δ_i``.

Evaluation after one fine-tuning step: after training, a data pass over the client's own training examples
computes ``∇f_i(θ_t)`` (the full batch, exact whatever the order), and the client keeps
``θ_t − α ∇f_i(θ_t)`` in its state; that is its personal model (``personal_model``, evaluated on its own
test examples beside θ; a client never sampled is evaluated with the global θ). It is adapted from the θ_t
**of the client's last sampled round**, not from the θ being evaluated: the paper fine-tunes the current
global model, and ``personal_model(state, theta)`` sees neither the model's ``apply`` nor the client's
examples, so a gradient at the current θ cannot be taken there. (Fine-tuning is one full-batch step, not
one minibatch.) Run it from the repository root:

    fedalf run --algorithm examples.perfedavg:perfedavg --model mlp --rounds 20 --lr 0.05 --hp alpha=0.01
"""

import jax
import jax.numpy as jnp

import fedalf_jax as fj


def _map(f, *trees):
    return jax.tree_util.tree_map(f, *trees)


def _ce(ctx, batch, train):
    """f(p; batch): the batch's mean cross-entropy (``train``: in training mode, with the step's key)."""
    return lambda p: fj.cross_entropy(batch, ctx.apply(p, batch.x, train=train, key=batch.key if train else None)[0])


def init(ctx):
    return {"w": ctx.theta, "adapted": ctx.theta, "half": jnp.zeros((), jnp.int32)}


def step(c, batch, ctx):
    first = c["half"] == 0                                  # the α-step on D, else the β-step on D'
    g = jax.grad(_ce(ctx, batch, True))(_map(lambda w, a: jnp.where(first, w, a), c["w"], c["adapted"]))
    adapted = _map(lambda w, a, x: jnp.where(first, w - ctx.hp.own["alpha"] * x, a), c["w"], c["adapted"], g)
    w = _map(lambda w, x: jnp.where(first, w, w - ctx.lr * x), c["w"], g)
    return {"w": w, "adapted": adapted, "half": 1 - c["half"]}


def final(c, ctx):
    """Δ_i = θ_t − w_i; the new state θ_t − α ∇f_i(θ_t), the gradient over all its training examples."""
    def add(acc, batch):  # Σ over the batch's real examples of ∇ℓ(θ_t)
        g = jax.grad(lambda p: _ce(ctx, batch, False)(p) * jnp.sum(batch.mask))(ctx.theta)
        return _map(jnp.add, acc, g)
    total = ctx.data.fold(add, _map(jnp.zeros_like, ctx.theta))
    personal = _map(lambda t, s: t - ctx.hp.own["alpha"] * s / ctx.facts.n, ctx.theta, total)
    return _map(lambda t, w: t - w, ctx.theta, c["w"]), personal


def perfedavg() -> fj.Algorithm:
    return fj.Algorithm(
        "perfedavg", server=fj.algorithms.mean_server, client=fj.ClientProgram(init, step, final),
        init_client_state=lambda params: params,   # until sampled: evaluated with θ (the rule for the unsampled)
        personal_model=lambda adapted: adapted,    # θ_t − α ∇f_i(θ_t), from the client's last round
        hparams={"alpha": 0.01})
