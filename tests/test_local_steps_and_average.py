"""Issue 48 items 3 and 4: ``--local-steps K`` (K minibatch steps per round instead of epochs) and
``--eval-average`` (the averaged iterate θ̄_t = mean(θ_1..θ_t) evaluated beside the last one)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedalf_jax as fj
from fedalf_jax.experiment.rundir import RunDir
from fedalf_jax.sim.client import epoch_order, local_sgd

from helpers import cli, one_line_error

TINY = dict(dataset="synthetic", model="mlp", clients=6, clients_per_round=3, synthetic_train=240, synthetic_test=60,
            batch_size=20, eval_every=1)


# ---- item 3: K local steps -------------------------------------------------------------------------------------

def _linear_loss(p, s, xb, yb, mask, rng):
    """½ (x·w − y)² averaged over the batch's real examples (a tiny linear model: its SGD is computable by hand)."""
    r = xb @ p["w"] - yb.astype(jnp.float32)
    m = mask.astype(jnp.float32)
    return jnp.sum(0.5 * r * r * m) / jnp.maximum(jnp.sum(m), 1.0), (s, 0.0)


def _hand_sgd(w0, X, Y, rows, n, key, lr, B, K, length):
    """K steps in float64, written from the rule: step k is batch j = k mod P of pass e = k div P, P = max(⌊n/B⌋, 1)
    full batches of B examples per pass (all n when n < B); pass e's order is epoch_order(fold_in(okey, e))."""
    w = np.asarray(w0, np.float64)
    if n == 0:
        return w, []
    okey, _ = jax.random.split(key)
    per = max(n // B, 1)
    sizes = []
    for k in range(K):
        e, j = divmod(k, per)
        order = np.asarray(epoch_order(jax.random.fold_in(okey, e), n, length))[:n]
        assert sorted(order.tolist()) == list(range(n))
        batch = rows[order[j * B:(j + 1) * B]]
        sizes.append(len(batch))
        xb, yb = X[batch].astype(np.float64), Y[batch].astype(np.float64)
        w = w - lr * (xb.T @ (xb @ w - yb)) / len(batch)
    return w, sizes


def test_k_steps_equal_a_float64_hand_computation():
    """Three clients vmapped as the round runs them, rows padded to 10: n=7 with B=3 (2 full batches per pass,
    the 7th example waits for the next shuffle: 5 steps cross 3 passes), n=2 < B (every step on both), n=0
    (never steps); each equals K plain-SGD steps computed by hand."""
    r = np.random.default_rng(0)
    P, d, length, B, K, lr = 40, 4, 10, 3, 5, 0.05
    X = r.normal(size=(P, d)).astype(np.float32)
    Y = r.integers(0, 3, size=P).astype(np.int32)
    counts = [7, 2, 0]
    rows = [r.choice(P, size=c, replace=False) for c in counts]
    idx = np.zeros((3, length), np.int32)
    for i, rw in enumerate(rows):
        idx[i, :len(rw)] = rw
    w0 = r.normal(size=d).astype(np.float32)
    keys = jax.random.split(jax.random.PRNGKey(3), 3)
    train = jax.jit(jax.vmap(lambda i, n, k: local_sgd(None, {"params": {"w": jnp.asarray(w0)}}, jnp.asarray(X),
                                                       jnp.asarray(Y), i, n, k, lr, epochs=1, batch_size=B,
                                                       data_loss=_linear_loss, steps=K)))
    out = np.asarray(train(jnp.asarray(idx), jnp.asarray(counts), keys)["params"]["w"], np.float64)
    for c in range(3):
        want, sizes = _hand_sgd(w0, X, Y, rows[c], counts[c], keys[c], lr, B, K, length)
        assert sizes == {7: [3] * 5, 2: [2] * 5, 0: []}[counts[c]][:K]
        np.testing.assert_allclose(out[c], want, rtol=2e-5, atol=2e-6)
    assert not np.allclose(out[0], w0)  # it trained
    np.testing.assert_array_equal(out[2], w0)  # no data: no step


def test_n_below_b_is_k_full_gradient_steps():
    """A client with fewer than B examples steps on all of them every step: K steps of gradient descent on its
    least squares, w_K = w* + (I − lr·A)^K (w_0 − w*) with A = XᵀX/n, by hand (order-free)."""
    r = np.random.default_rng(1)
    n, d, B, K, lr = 3, 3, 8, 6, 0.1
    X = r.normal(size=(n, d)).astype(np.float32)
    Y = np.array([0, 2, 1], np.int32)
    w0 = r.normal(size=d).astype(np.float32)
    out = local_sgd(None, {"params": {"w": jnp.asarray(w0)}}, jnp.asarray(X), jnp.asarray(Y), jnp.arange(n), n,
                    jax.random.PRNGKey(0), lr, epochs=1, batch_size=B, data_loss=_linear_loss, steps=K)
    A = X.astype(np.float64).T @ X / n
    b = X.astype(np.float64).T @ Y / n
    w = np.asarray(w0, np.float64)
    for _ in range(K):
        w = w - lr * (A @ w - b)
    np.testing.assert_allclose(np.asarray(out["params"]["w"], np.float64), w, rtol=2e-5, atol=2e-6)


def _shrink(theta, state, hp):
    """A local loss of the params alone, ½‖w‖²: each step takes w to (1 − lr)·w, so K steps give (1 − lr)^K θ."""
    return lambda params, batch: 0.5 * sum(jnp.sum(x * x) for x in jax.tree_util.tree_leaves(params))


def _steps_upload(theta, w, w_tilde, state, hp, lr_t, facts):
    """facts.steps, and the steps w took from θ counted from its norm: log(‖w‖/‖θ‖) / log(1 − lr)."""
    def norm(t):
        return jnp.sqrt(sum(jnp.sum(x * x) for x in jax.tree_util.tree_leaves(t)))
    taken = jnp.log(norm(w) / norm(theta)) / jnp.log(1.0 - lr_t)
    return (jax.tree_util.tree_map(lambda t, u: t - u, theta, w_tilde), state,
            {"metrics": {"steps": facts.steps.astype(jnp.float32), "taken": taken}})


def _count_final(carry, ctx):
    zero = jax.tree_util.tree_map(jnp.zeros_like, ctx.theta)
    return zero, ctx.state, {"metrics": {"steps": ctx.facts.steps.astype(jnp.float32),
                                         "taken": carry["k"].astype(jnp.float32)}}


@pytest.mark.parametrize("k", [1, 7])
def test_facts_steps_is_k_for_user_algorithms(k):
    """facts.steps is K for every client (7 is more than a client's ⌈n/B⌉ = 2-3 batches), as the default client's
    upload sees it and as a client program's ctx.facts sees it; and each took K steps: the default client's w is
    (1 − lr)^K θ under a loss ½‖w‖², the program's step ran K times."""
    fj.register_algorithm("steps48_upload", lambda: fj.Algorithm(
        "steps48_upload", server=fj.algorithms.weighted_mean_server, upload=_steps_upload, local_loss=_shrink,
        metrics=("steps", "taken"), public_aux=False))
    fj.register_algorithm("steps48_prog", lambda: fj.Algorithm(
        "steps48_prog", server=fj.algorithms.weighted_mean_server, metrics=("steps", "taken"), public_aux=False,
        client=fj.ClientProgram(lambda ctx: {"k": jnp.zeros((), jnp.int32)}, lambda c, b, ctx: {"k": c["k"] + 1},
                                _count_final)))
    for alg in ("steps48_upload", "steps48_prog"):
        res = fj.run(fj.Config(algorithm=alg, rounds=2, local_steps=k, lr=0.05, lr_decay=1.0, **TINY), progress=False)
        assert list(res.metrics["steps"][1:]) == [k, k], alg
        np.testing.assert_allclose(res.metrics["taken"][1:], [k, k], rtol=1e-3)  # the steps it took
    ep = fj.run(fj.Config(algorithm="steps48_upload", rounds=1, local_epochs=2, **TINY), progress=False)
    assert ep.metrics["steps"][1] != k  # epochs: 2·⌈n_i/20⌉ per client, as before


def test_local_steps_and_local_epochs_are_exclusive(capsys):
    with pytest.raises(fj.ConfigError, match="give one of --local-steps and --local-epochs") as e:
        fj.Config(local_steps=3, local_epochs=2)
    assert "\n" not in str(e.value)
    code, err = cli(capsys, ["run", "--local-steps", "3", "--local-epochs", "1", "--rounds", "1"])
    one_line_error(code, err, "--local-steps", "--local-epochs")
    with pytest.raises(fj.ConfigError, match="local_steps must be a positive integer"):
        fj.Config(local_steps=0)


def test_local_steps_is_recorded_and_part_of_the_identity(tmp_path):
    cfg = fj.Config(rounds=1, local_steps=2, **TINY, out=str(tmp_path / "a"))
    assert cfg.to_dict()["local_steps"] == 2 and cfg.identity()["local_steps"] == 2
    assert "local_steps" not in fj.Config().to_dict() and "eval_average" not in fj.Config().identity()
    fj.run(cfg, progress=False)
    assert RunDir(tmp_path / "a").config().local_steps == 2
    with pytest.raises(fj.ConfigError):  # another K is another run: its checkpoint is not resumed
        fj.run(cfg.replace(rounds=2, local_steps=3), progress=False, resume=True)


def test_local_steps_without_local_training_is_said():
    """FedLF's full-gradient client trains nothing: --local-steps is named as never read, not silently dropped."""
    from fedalf_jax.experiment.sweep_plan import unread_given
    line = unread_given([fj.Config(algorithm="fedlf", client_grad="full", local_steps=2)], {"local_steps"})
    assert line is not None and "--local-steps 2 has no effect with client_grad=full" in line
    assert unread_given([fj.Config(algorithm="fedlf", client_grad="local", local_steps=2)], {"local_steps"}) is None


def test_sweep_over_local_steps_equals_single_runs(tmp_path, capsys):
    argv = ["sweep", "--dataset", "synthetic", "--model", "mlp", "--clients", "6", "--clients-per-round", "3",
            "--synthetic-train", "240", "--synthetic-test", "60", "--batch-size", "20", "--eval-every", "1",
            "--rounds", "2", "--local-steps", "1", "3", "--algorithm", "fedavg", "--no-progress",
            "--out", str(tmp_path / "s")]
    code, err = cli(capsys, argv)
    assert code == 0, err
    runs = sorted(p for p in (tmp_path / "s").iterdir() if p.is_dir())
    assert len(runs) == 2
    seen = set()
    for p in runs:
        got = fj.load(p)
        k = got.config.local_steps
        seen.add(k)
        one = fj.run(fj.Config(algorithm="fedavg", rounds=2, local_steps=k, **TINY), progress=False)
        cols = [c for c in one.metrics.columns if c != "seconds_per_round"]
        np.testing.assert_array_equal(got.metrics[cols].to_numpy(), one.metrics[cols].to_numpy())
        for a, b in zip(jax.tree_util.tree_leaves(got.model), jax.tree_util.tree_leaves(one.model)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert seen == {1, 3}


# ---- item 4: the averaged iterate ------------------------------------------------------------------------------

def _state_of(out, cfg):
    from fedalf_jax.experiment.build import load_pool, make_spec
    from fedalf_jax.sim.round import init_state
    like = jax.eval_shape(lambda: init_state(make_spec(cfg, load_pool(cfg)), cfg.seed))
    return RunDir(out).load_checkpoint(like)


def test_averaged_iterate_is_the_mean_of_the_rounds_models_and_resumes_exactly(tmp_path):
    """Rounds 1, 2, 3 run one call each (each resumed from the last checkpoint): the checkpointed average after
    round 3 is the NumPy mean of the three final models; its avg_* columns are that mean evaluated (θ̄_1 = θ_1's,
    round 0's θ_0's); and the resumed run's metrics equal one uninterrupted 3-round run's, average included."""
    out = tmp_path / "r"
    cfg = fj.Config(algorithm="fedavg", rounds=1, local_steps=2, eval_average=True, **TINY, out=str(out))
    models = []
    for t in (1, 2, 3):
        res = fj.run(cfg.replace(rounds=t), progress=False, resume=t > 1)
        models.append(res.model)
    avg = _state_of(out, cfg.replace(rounds=3)).average
    mean = jax.tree_util.tree_map(lambda *xs: np.mean(np.stack([np.asarray(x, np.float64) for x in xs]), 0), *models)
    for a, b in zip(jax.tree_util.tree_leaves(avg), jax.tree_util.tree_leaves(mean)):
        np.testing.assert_allclose(np.asarray(a, np.float64), b, rtol=1e-5, atol=1e-6)
    assert not np.allclose(jax.tree_util.tree_leaves(mean)[1], jax.tree_util.tree_leaves(models[-1])[1])
    m = fj.load(out).metrics
    assert list(m["round"]) == [0, 1, 2, 3]
    for r in (0, 1):  # θ̄_0 = θ_0, θ̄_1 = θ_1: the average's columns are the last iterate's
        assert m["avg_mean_acc"][r] == pytest.approx(m["mean_acc"][r], abs=1e-6)
        assert m["avg_test_loss"][r] == pytest.approx(m["test_loss"][r], rel=1e-5)
    # the mean evaluated independently: each client's accuracy of the NumPy mean model
    from fedalf_jax.experiment.build import build
    from fedalf_jax.sim.train import evaluate
    exp = build(cfg)
    ev = evaluate(exp.spec, {"params": jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float32), mean["params"])},
                  exp.data)
    np.testing.assert_allclose([m[f"avg_acc_{i}"][3] for i in range(6)], np.asarray(ev.acc), atol=1e-6)
    assert fj.load(out).summary["final"]["avg_mean_acc"] == pytest.approx(float(np.mean(ev.acc)), abs=1e-6)
    whole = fj.run(cfg.replace(rounds=3, out=None), progress=False)
    cols = [c for c in whole.metrics.columns if c not in ("seconds_per_round", "train_loss")]
    assert "avg_angle_deg" in cols and "avg_acc_5" in cols
    np.testing.assert_array_equal(m[cols].to_numpy(), whole.metrics[cols].to_numpy())


def test_eval_average_off_writes_no_average(tmp_path):
    res = fj.run(fj.Config(algorithm="fedavg", rounds=1, **TINY), progress=False)
    assert not any(c.startswith("avg_") for c in res.metrics.columns)
