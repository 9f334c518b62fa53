"""The algorithm contract for the fair and personalised field's baselines (issue #37 items 1-6): a
per-batch local objective (``local_loss`` with ``fj.Batch``: the minibatch, the model's logits and
features, the model at other params), ``local_optimizer`` reading ``hp``/``facts``, the server's PRNG key,
``personal_model(state, theta)`` with the rule for clients never sampled, and a function whose signature
does not fit being one line naming it. Each checked against rounds computed by hand in float64 on the
three one-label clients of tests/test_contract.py (every minibatch of client i has the same gradient)."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import fedalf_jax as fj
from fedalf_jax.sim.algorithms import weighted_mean_server

from test_contract import COUNTS, LABELS, TAU, _cfg, _local, _metrics_csv, _softmax

P = np.asarray(COUNTS, np.float64) / sum(COUNTS)


def _fedavg_by_hand(grad, lr, glr, rounds=2, lr_of=None):
    """FedAvg's rounds with client i's step ``w ← w − lr_i · grad(w, i, θ)``, in float64."""
    theta = np.zeros(3)
    for _ in range(rounds):
        ws = []
        for i in range(3):
            w = theta.copy()
            for _ in range(TAU[i]):
                w = w - (lr if lr_of is None else lr_of(i)) * grad(w, i, theta)
            ws.append(w)
        theta = theta - glr * sum(P[i] * (theta - ws[i]) for i in range(3))
    return theta


def _ce(w, i):
    return np.log(np.exp(w - w.max()).sum()) + w.max() - w[LABELS[i]]


def _alg(name, **kw):
    base = dict(server=weighted_mean_server, upload=fj.algorithms.model_upload)
    return fj.Algorithm(name, **{**base, **kw})


class BiasFeat(nn.Module):
    """tests/test_contract.py's bias model, also returning the bias as each example's features."""
    num_classes: int

    @nn.compact
    def __call__(self, x):
        b = self.param("b", nn.initializers.zeros, (self.num_classes,))
        logits = jnp.broadcast_to(b, (x.shape[0], self.num_classes))
        return logits, 2.0 * logits


def test_local_loss_transforms_the_minibatch_loss_as_propfair_does():
    """``-log(M − CE)``: each step's gradient is ∇CE / (M − CE(w)), not ∇CE."""
    m_, lr, glr = 3.0, 0.4, 1.0

    def local_loss(theta, state, hp):
        return lambda w, b: -jnp.log(hp.own["big_m"] - fj.cross_entropy(b))
    fj.register_algorithm("propfair_t", lambda: _alg("propfair_t", local_loss=local_loss, hparams={"big_m": m_}))
    res = fj.run(_cfg("propfair_t", lr=lr, server_lr=glr), progress=False)
    want = _fedavg_by_hand(lambda w, i, th: (_softmax(w) - np.eye(3)[LABELS[i]]) / (m_ - _ce(w, i)), lr, glr)
    plain = _fedavg_by_hand(lambda w, i, th: _softmax(w) - np.eye(3)[LABELS[i]], lr, glr)
    assert np.abs(want - plain).max() > 1e-2  # the transform matters here
    np.testing.assert_allclose(np.asarray(res.model["params"]["b"]), want, rtol=0, atol=2e-6)


def test_local_loss_sees_the_models_features_and_the_model_at_theta():
    """MOON-like: CE + λ · mean ‖z(w) − z(θ)‖², z = 2b: the gradient adds 8λ(w − θ); the features come from
    the model's ``(logits, features)`` and the global model's from ``batch.apply(theta)``."""
    lam, lr, glr = 0.3, 0.4, 0.9
    fj.register_model("biasfeat3", BiasFeat)

    def local_loss(theta, state, hp):
        def f(w, b):
            zg = b.apply(theta)[1]
            d = jnp.sum((b.features - zg) ** 2, axis=-1)
            return fj.cross_entropy(b) + hp.own["lam"] * jnp.sum(d * b.mask) / jnp.maximum(jnp.sum(b.mask), 1)
        return f
    fj.register_algorithm("feat_t", lambda: _alg("feat_t", local_loss=local_loss, hparams={"lam": lam}))
    res = fj.run(_cfg("feat_t", model="biasfeat3", lr=lr, server_lr=glr), progress=False)
    want = _fedavg_by_hand(lambda w, i, th: _softmax(w) - np.eye(3)[LABELS[i]] + 8 * lam * (w - th), lr, glr)
    np.testing.assert_allclose(np.asarray(res.model["params"]["b"]), want, rtol=0, atol=2e-6)
    # the evaluation takes the logits of a model that also returns features
    assert np.isfinite(res.metrics["mean_acc"]).all()


def test_local_loss_gets_the_step_index():
    """``batch.step`` counts over the epochs: only the first local step of each client's two epochs trains (a
    stop_gradient afterwards)."""
    lr, glr = 0.5, 1.0

    def local_loss(theta, state, hp):
        def f(w, b):
            w_eff = jax.tree_util.tree_map(lambda x: jnp.where(b.step < 1, x, jax.lax.stop_gradient(x)), w)
            return fj.cross_entropy(b, b.apply(w_eff)[0])
        return f
    fj.register_algorithm("step_t", lambda: _alg("step_t", local_loss=local_loss))
    res = fj.run(_cfg("step_t", lr=lr, server_lr=glr, local_epochs=2), progress=False)
    theta = np.zeros(3)
    for _ in range(2):
        ws = [theta - lr * (_softmax(theta) - np.eye(3)[LABELS[i]]) for i in range(3)]  # one step each
        theta = theta - glr * sum(P[i] * (theta - ws[i]) for i in range(3))
    np.testing.assert_allclose(np.asarray(res.model["params"]["b"]), theta, rtol=0, atol=2e-6)


def test_local_optimizer_reads_hp_and_facts():
    """``local_optimizer(lr_t, hp, facts)``: client i steps with lr · k / τ_i."""
    k, lr, glr = 1.5, 0.5, 1.0

    def opt(lr_t, hp, facts):
        return optax.sgd(lr_t * hp.own["k"] / facts.steps.astype(jnp.float32))
    fj.register_algorithm("opt_t", lambda: _alg("opt_t", local_optimizer=opt, hparams={"k": k}))
    res = fj.run(_cfg("opt_t", lr=lr, server_lr=glr), progress=False)
    want = _fedavg_by_hand(lambda w, i, th: _softmax(w) - np.eye(3)[LABELS[i]], lr, glr,
                           lr_of=lambda i: lr * k / TAU[i])
    np.testing.assert_allclose(np.asarray(res.model["params"]["b"]), want, rtol=0, atol=2e-6)


def _noisy_server(s):
    theta = jax.tree_util.tree_map(lambda t, d: t - jnp.mean(d, 0), s.theta, s.deltas)
    return theta, s.sstate, {"z": jax.random.normal(s.key)}


def test_server_key_differs_over_rounds_and_seeds_and_resumes(tmp_path):
    fj.register_algorithm("noisy_t", lambda: _alg("noisy_t", server=_noisy_server, metrics=("z",)))
    runs = {}
    for seed in (0, 1):
        runs[seed] = [float(r["z"]) for r in _metrics_csv_of(fj.run(_cfg("noisy_t", seed=seed, rounds=3,
                                                                          out=str(tmp_path / f"s{seed}")),
                                                                     progress=False))][1:]
    for seed, zs in runs.items():  # the round's key folded with the server's constant, computed here by hand
        run_key = jax.random.split(jax.random.PRNGKey(seed))[1]
        want = [float(jax.random.normal(jax.random.fold_in(jax.random.fold_in(run_key, t), 0x5E12)))
                for t in range(3)]
        np.testing.assert_allclose(zs, want, rtol=1e-6)
    assert len(set(runs[0])) == 3 and not set(runs[0]) & set(runs[1])
    # stopped after round 1 and resumed: the same keys
    fj.run(_cfg("noisy_t", seed=0, rounds=1, out=str(tmp_path / "r")), progress=False)
    fj.run(_cfg("noisy_t", seed=0, rounds=3, out=str(tmp_path / "r")), progress=False, resume=True)
    np.testing.assert_allclose(fj.load(tmp_path / "r").metrics["z"].iloc[1:].to_numpy(), runs[0], rtol=1e-6)


def _metrics_csv_of(res):
    from pathlib import Path
    return _metrics_csv(Path(res.run_dir))


def test_personal_model_gets_theta_and_clients_never_sampled_use_the_global_model():
    """One of three clients per round, one round: the sampled client's own model is θ plus a state that
    predicts its label; the two never sampled are evaluated with θ (their global accuracy), not with their
    untouched initial state (θ + 10 e_2, which predicts label 2: accuracy 1 for client 2, 0 for the others)."""
    def upload(theta, w, w_tilde, state, hp, lr_t):
        return jax.tree_util.tree_map(lambda t, u: t - u, theta, w_tilde), {"b": 10.0 * (w["b"] - theta["b"])}

    def personal_model(state, theta):
        return {"b": theta["b"] + state["b"]}
    fj.register_algorithm("pers_t", lambda: _alg("pers_t", upload=upload, personal_model=personal_model,
                                                 server=lambda s: (s.theta, s.sstate, {}),  # θ stays θ_0 = 0
                                                 init_client_state=lambda p: {"b": 10.0 * jnp.eye(3)[2]}))
    res = fj.run(_cfg("pers_t", rounds=1, clients_per_round=1), progress=False)
    last = res.metrics.iloc[-1]
    glob = np.asarray([last[f"acc_{i}"] for i in range(3)])
    # θ stays θ_0 = 0, so the global model predicts label 0: client 0 right, the others wrong
    np.testing.assert_array_equal(glob, [1.0, 0.0, 0.0])
    # the sampled client's own model (θ + 10 (w_i − θ), w_i − θ ∝ e_{y_i} − softmax) predicts its label: 1;
    # the others take the global model's accuracy: the mean is (1 + the two others' global accuracies) / 3
    from fedalf_jax.sim.round import sampled_clients
    s = int(sampled_clients(3, 1, 0, 1)[0, 0])
    others = [glob[j] for j in range(3) if j != s]
    assert last["personal_acc"] == pytest.approx((1.0 + sum(others)) / 3)
    # and the loss: the sampled client's θ + 10 (w_s − θ) = 10 w_s, the others θ = 0 (log 3 each)
    w_s = _local(np.zeros(3), s, 0.5)
    assert last["personal_test_loss"] == pytest.approx((_ce(10 * w_s, s) + 2 * np.log(3)) / 3, rel=1e-5)
    # round 0: every client evaluated with θ_0
    assert res.metrics.iloc[0]["personal_acc"] == pytest.approx(glob.mean())


def _bad(kind):
    up = fj.algorithms.model_upload
    if kind == "penalty_batch":
        return _alg("bad", penalty=lambda theta, state, hp, batch: (lambda w: 0.0))
    if kind == "upload_args":
        return _alg("bad", upload=lambda theta, w, w_tilde: (w, ()))
    if kind == "server_args":
        return _alg("bad", server=lambda s, extra: (s.theta, s.sstate, {}))
    if kind == "local_loss_args":
        return _alg("bad", local_loss=lambda theta, state: (lambda w, b: 0.0))
    if kind == "local_loss_value":
        return _alg("bad", local_loss=lambda theta, state, hp: 3.0)
    if kind == "optimizer_args":
        return _alg("bad", local_optimizer=lambda lr_t, beta: optax.sgd(lr_t))
    if kind == "personal_model_args":
        return _alg("bad", upload=up, init_client_state=lambda p: p, personal_model=lambda st, th: st)
    raise AssertionError(kind)


@pytest.mark.parametrize("kind,match", [
    ("penalty_batch", r"penalty\(theta, state, hp, batch\) does not fit the contract: the round calls it as "
                      r"penalty\(theta, state, hp\[, broadcast=, facts=\]\)"),
    ("upload_args", r"upload\(theta, w, w_tilde\) does not fit the contract"),
    ("server_args", r"server\(s, extra\) does not fit the contract"),
    ("local_loss_args", r"local_loss\(theta, state\) does not fit the contract"),
    ("local_loss_value", r"local_loss returned float; expected a function"),
    ("optimizer_args", r"local_optimizer\(lr_t, beta\) does not fit the contract"),
    ("personal_model_args", r"personal_model\(st, th\) does not fit the contract: the round calls it as "
                            r"personal_model\(state\[, theta\]\)"),
])
def test_a_function_that_does_not_fit_is_one_line_naming_it(kind, match):
    fj.register_algorithm("bad", lambda: _bad(kind))
    with pytest.raises(fj.ConfigError, match=r"algorithm 'bad': " + match) as e:
        fj.run(_cfg("bad", rounds=1), progress=False)
    assert "\n" not in str(e.value)


def test_a_personal_checkpoint_from_before_the_seen_clients_were_kept_resumes_exactly(tmp_path):
    """A Ditto checkpoint written before the round kept which clients were sampled (its arrays but the last)
    resumes: the sampled clients are replayed from the seed, and the run continues as if uninterrupted."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    kw = dict(dataset="synthetic", model="mlp", clients=6, clients_per_round=2, eval_every=1,
              synthetic_train=120, synthetic_test=60, batch_size=20)
    whole = fj.run(fj.Config(algorithm="examples.ditto:ditto", rounds=3, **kw), progress=False)
    out = tmp_path / "d"
    fj.run(fj.Config(algorithm="examples.ditto:ditto", rounds=2, out=str(out), **kw), progress=False)
    with np.load(out / "checkpoint.npz") as f:  # drop the last array, clients["seen"], as older code wrote it
        arrays = {k: f[k] for k in f.files}
    n = sum(1 for k in arrays if k.startswith("arr_"))
    assert arrays[f"arr_{n - 1}"].dtype == bool and arrays[f"arr_{n - 1}"].sum() > 0
    del arrays[f"arr_{n - 1}"]
    (out / "checkpoint.prev.npz").unlink(missing_ok=True)
    np.savez(out / "checkpoint.npz", **arrays)
    fj.run(fj.Config(algorithm="examples.ditto:ditto", rounds=3, out=str(out), **kw), progress=False, resume=True)
    res = fj.load(out)
    for col in ("mean_acc", "personal_acc", "personal_test_loss"):
        np.testing.assert_array_equal(res.metrics[col].to_numpy(), whole.metrics[col].to_numpy())
