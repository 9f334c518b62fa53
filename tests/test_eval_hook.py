"""Evaluation belongs to the client program (issue 56 item 2): ``ClientProgram.evaluate(ctx) -> params``, run at
every evaluation for every client with the round's ``ctx`` (θ, the state, ``t``, ``lr``, the data pass), is the
model each client is evaluated with, beside the global one (FedBABU's fine-tune-then-test, Per-FedAvg's adaptation
from the current θ). Checked against FedAvg and the fine-tune computed by hand in float64 on the tiny problem of
tests/test_examples_client.py, at every evaluation, round 0 included."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedalf_jax as fj
from test_examples_client import COUNTS, _acc_at, _ce_grad, _cfg, _close, _fedavg, _loss_at, _rows, _rows_of, _sub, \
    _theta0


def _full_gradient(ctx, params):
    """∇f_i(params): the mean cross-entropy over the client's training examples, by the data pass."""
    def add(acc, batch):
        total = lambda p: fj.cross_entropy(batch, ctx.apply(p, batch.x)[0]) * jnp.sum(batch.mask)  # noqa: E731
        return jax.tree_util.tree_map(jnp.add, acc, jax.grad(total)(params))
    s = ctx.data.fold(add, jax.tree_util.tree_map(jnp.zeros_like, params))
    return jax.tree_util.tree_map(lambda x: x / ctx.facts.n.astype(x.dtype), s)


def fine_tune(ctx):
    """One full-gradient step from the current θ, of size lr · (t + 1) (t: the rounds done, so the step says
    which evaluation it is)."""
    g = _full_gradient(ctx, ctx.theta)
    step = ctx.lr * (ctx.t + 1).astype(jnp.float32)
    return jax.tree_util.tree_map(lambda p, d: p - step * d, ctx.theta, g)


def _by_hand(rounds=2, lr=0.3, steps=2):
    """FedAvg's θ_t by hand (every local step one full batch), and at every evaluation t = 0 … rounds the mean
    accuracy and loss of each client's θ_t − lr (t + 1) ∇f_i(θ_t)."""
    theta, acc, loss = _theta0(), [], []
    for t in range(rounds + 1):
        tuned = [_sub(theta, _ce_grad(theta, *_rows(i))[1], lr * (t + 1)) for i in range(3)]
        acc.append(np.mean([_acc_at(tuned[i], i) for i in range(3)]))
        loss.append(np.mean([_loss_at(tuned[i], i) for i in range(3)]))
        if t == rounds:
            break
        ws = []
        for i in range(3):
            w = dict(theta)
            for _ in range(steps):
                w = _sub(w, _ce_grad(w, *_rows(i))[1], lr)
            ws.append(w)
        theta = _fedavg(theta, ws, COUNTS)
    return np.array(acc), np.array(loss)


@pytest.mark.parametrize("client_map", ["vmap", "map"])
def test_evaluate_is_the_model_each_client_is_evaluated_with(client_map):
    fj.register_algorithm("hook56", lambda: fj.Algorithm(
        "hook56", server=fj.algorithms.weighted_mean_server, client=fj.local_training(evaluate=fine_tune)))
    res = fj.run(_cfg("hook56", client_map=client_map), progress=False)
    acc, loss = _by_hand()
    assert res.metrics["round"].tolist() == [0, 1, 2]
    _close(_rows_of(res, "personal_acc"), acc, atol=1e-6)
    _close(_rows_of(res, "personal_test_loss"), loss, atol=2e-5)
    plain = fj.run(_cfg("fedavg", client_map=client_map), progress=False)
    assert res.metrics["mean_acc"].tolist() == plain.metrics["mean_acc"].tolist()  # the global model is FedAvg's


def test_a_hand_written_program_evaluates_too():
    """The same hook on a hand-written program (FedAvg's three functions)."""
    def init(ctx):
        return ctx.theta

    def step(w, batch, ctx):
        loss = lambda p: fj.cross_entropy(batch, ctx.apply(p, batch.x, train=True, key=batch.key)[0])  # noqa: E731
        return jax.tree_util.tree_map(lambda p, g: p - ctx.lr * g, w, jax.grad(loss)(w))

    def final(w, ctx):
        return fj.Reveal(w, ctx.state)

    fj.register_algorithm("hook56_prog", lambda: fj.Algorithm(
        "hook56_prog", server=fj.algorithms.weighted_mean_server,
        client=fj.ClientProgram(init, step, final, evaluate=fine_tune)))
    res = fj.run(_cfg("hook56_prog"), progress=False)
    _close(_rows_of(res, "personal_acc"), _by_hand()[0], atol=1e-6)


def test_evaluate_mistakes_are_one_line():
    with pytest.raises(fj.ConfigError, match="both client.evaluate and personal_model"):
        fj.Algorithm("both56", server=fj.algorithms.weighted_mean_server, client=fj.local_training(evaluate=fine_tune),
                     personal_model=lambda s: s)
    with pytest.raises(fj.ConfigError, match="evaluate is a int; expected a function of ctx"):
        fj.local_training(evaluate=3)
    fj.register_algorithm("hook56_bad", lambda: fj.Algorithm(
        "hook56_bad", server=fj.algorithms.weighted_mean_server,
        client=fj.local_training(evaluate=lambda ctx: {"x": jnp.zeros(2)})))
    with pytest.raises(fj.ConfigError) as e:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fj.run(_cfg("hook56_bad"), progress=False)
    assert "\n" not in str(e.value) and "client.evaluate" in str(e.value) and "shaped like the params" in str(e.value)
