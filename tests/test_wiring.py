"""The glue between the numerical pieces, checked against independent computations (not against a
second path through the same helpers): the history window, per-client keys, FedAvg's weights, and
the per-client evaluation."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedalf_jax.experiment.build import build
from fedalf_jax.experiment.config import Config
from fedalf_jax.sim.algorithms import history_rows
from fedalf_jax.sim.client import evaluate_clients
from fedalf_jax.sim.round import ClientData, client_phase, init_state, round_keys, server_step

SMALL = dict(dataset="synthetic", model="mlp", clients=8, clients_per_round=3, synthetic_train=600,
             synthetic_test=160, batch_size=20, rounds=2, eval_every=1)


def _history_reference(last, sel, t):
    """FedLF's rule written out in plain Python."""
    online = set(int(i) for i in sel)
    seen = sum(1 for i, r in enumerate(last) if r >= 0 or i in online)
    m = len(sel)
    if seen <= m:
        return [False] * len(last)
    tau = seen // m
    return [i not in online and r >= 0 and r >= t - tau for i, r in enumerate(last)]


def test_history_window_includes_its_boundary_round():
    # 10 clients seen, m = 2 → τ = 5; at t = 20 the window is rounds ≥ 15: 15 is in, 14 is out
    last = np.array([19, 15, 14, 10, -1, 18, 16, 17, 13, 12, -1, -1])
    sel = np.array([5, 11])  # 5 was seen before, 11 is new: seen = 10 + 1 (client 11) = 11 → τ = 5
    t = 20
    got = np.asarray(history_rows(jnp.asarray(last), jnp.asarray(sel), t))
    want = _history_reference(last, sel, t)
    assert got.tolist() == want
    assert got[1] and not got[2]  # the boundary: last == t − τ joins, last == t − τ − 1 does not
    assert not got[5] and not got[4]  # online now; never seen
    # the first round: nothing stored yet
    assert not np.any(np.asarray(history_rows(jnp.full((4,), -1), jnp.asarray([2, 3]), 0)))


def test_history_tau_sets_the_window():
    """--history-tau T: τ = T instead of ⌊M/m⌋, written out by hand for the example above (τ = 5 there)."""
    last = jnp.asarray([19, 15, 14, 10, -1, 18, 16, 17, 13, 12, -1, -1])
    sel = jnp.asarray([5, 11])
    rows = lambda tau: np.flatnonzero(np.asarray(history_rows(last, sel, 20, tau))).tolist()  # noqa: E731
    assert rows(None) == rows(5) == [0, 1, 6, 7]  # last ≥ 15, not online
    assert rows(2) == [0]  # last ≥ 18: client 5 (18) is online
    assert rows(4) == [0, 6, 7]  # last ≥ 16
    assert rows(9) == [0, 1, 2, 6, 7, 8, 9]  # last ≥ 11: longer than FedLF's window
    assert rows(0) == []  # every stored row is older than this round


def test_history_tau_refuses_what_it_cannot_mean():
    import pytest
    from fedalf_jax.experiment.config import ConfigError
    for bad in (-1, 2.5, True):
        with pytest.raises(ConfigError, match="history_tau must be a non-negative integer"):
            Config(algorithm="fedalf", history_tau=bad)
    for kw in (dict(algorithm="fedavg"), dict(algorithm="fedalf", history=False)):
        with pytest.raises(ConfigError, match="drop --history-tau or use --history on"):
            Config(history_tau=3, **kw)
    assert Config(algorithm="fedlf", history_tau=0).history_tau == 0


def test_history_tau_reaches_the_fair_server():
    """The option's wiring (config → build → server): with τ = 0 no stored row ever joins, so FedALF takes
    the steps it takes without history rows; τ = 1 drops the rows of two rounds ago that FedLF's
    τ = ⌊M/m⌋ = 2 keeps."""
    from fedalf_jax.sim.round import run_rounds

    def params(**kw):  # the pgd QP only makes the four programs quicker to compile (~1.2 s each)
        exp = build(Config(algorithm="fedalf", qp_method="pgd", **{**SMALL, **kw}))
        state = init_state(exp.spec, 0)
        state, _ = jax.jit(lambda s: run_rounds(exp.spec, s, exp.hp, exp.data, 4))(state)
        return np.concatenate([np.ravel(x) for x in jax.tree_util.tree_leaves(state.variables)])

    default, tau0, off, tau1 = params(), params(history_tau=0), params(history=False), params(history_tau=1)
    np.testing.assert_allclose(tau0, off, rtol=1e-5, atol=1e-6)
    assert np.abs(default - off).max() > 1e-4  # 4 rounds, 8 clients, m = 3: stored rows did join (τ = 2)
    assert np.abs(tau1 - default).max() > 1e-4


def test_every_client_of_a_round_gets_its_own_key_and_shuffle():
    exp = build(Config(algorithm="fedavg", partition="iid", **SMALL))
    state = init_state(exp.spec, 0)
    _, keys = round_keys(state, 3)
    keys = np.asarray(jax.random.key_data(keys) if jnp.issubdtype(keys.dtype, jax.dtypes.prng_key) else keys)
    assert len({tuple(k.ravel()) for k in keys}) == 3  # pairwise distinct
    # every client holds the same data: with distinct keys the shuffles, hence the trained models, differ
    same = exp.data._replace(train_idx=jnp.broadcast_to(exp.data.train_idx[0], exp.data.train_idx.shape),
                             train_n=jnp.broadcast_to(exp.data.train_n[0], exp.data.train_n.shape))
    _, _, outs = jax.jit(lambda s: client_phase(exp.spec, s, exp.hp, same))(state)
    d = np.concatenate([np.asarray(x).reshape(3, -1) for x in jax.tree_util.tree_leaves(outs.delta)], 1)
    for i in range(3):
        for j in range(i + 1, 3):
            assert np.abs(d[i] - d[j]).max() > 1e-4


def test_privacy_noise_is_independent_across_clients():
    # identical data and a huge step count would make the models equal; the LDP sign flips must still
    # be independent per client: the correlation of two clients' flip patterns is near 0
    exp = build(Config(algorithm="fedavg", partition="iid", ldp="adaptive", ldp_on="weights", epsilon=0.5, lr=1e-9,
                       **SMALL))
    state = init_state(exp.spec, 0)
    _, _, outs = jax.jit(lambda s: client_phase(exp.spec, s, exp.hp, exp.data))(state)
    # lr ≈ 0: w_i = θ for every client, and w̃ = c ± kδ with δ = θ − c, so Δ_i = θ − w̃_i = δ(1 ∓ k):
    # client i flipped weight j iff Δ_ij has the sign of δ_j
    theta = np.asarray(jax.tree_util.tree_leaves(state.variables["params"])[1]).ravel()
    delta = theta - (theta.max() + theta.min()) / 2
    leaf = np.asarray(jax.tree_util.tree_leaves(outs.delta)[1]).reshape(3, -1)
    flips = (leaf * delta > 0).astype(np.float64)
    n = flips.shape[1]
    p_flip = 1 / (1 + np.exp(0.5))
    assert np.all(np.abs(flips.mean(1) - p_flip) < 5 * np.sqrt(p_flip * (1 - p_flip) / n))
    for i in range(3):
        for j in range(i + 1, 3):
            c = np.corrcoef(flips[i], flips[j])[0, 1]
            assert abs(c) < 5 / np.sqrt(n), c  # independent flips: |corr| ~ 1/√n


def test_fedavg_round_weights_clients_by_their_sample_counts():
    # unequal clients (dirichlet): θ' = θ − Σ_i (n_i / Σ n) Δ_i, computed here from the round's own Δ_i
    exp = build(Config(algorithm="fedavg", partition="dirichlet", alpha=0.3, **SMALL))
    n_all = np.asarray(exp.data.train_n)
    assert len(set(n_all.tolist())) > 1
    state = init_state(exp.spec, 0)
    sel, n, outs = jax.jit(lambda s: client_phase(exp.spec, s, exp.hp, exp.data))(state)
    new, _ = jax.jit(lambda s, a, b, c: server_step(exp.spec, s, a, b, c, exp.hp))(state, sel, n, outs)
    n_sel = n_all[np.asarray(sel)].astype(np.float64)
    p = n_sel / n_sel.sum()
    assert np.ptp(p) > 0.01
    for th, dl, nw in zip(jax.tree_util.tree_leaves(state.variables["params"]), jax.tree_util.tree_leaves(outs.delta),
                          jax.tree_util.tree_leaves(new.variables["params"])):
        want = np.asarray(th, np.float64) - np.tensordot(p, np.asarray(dl, np.float64), axes=1)
        np.testing.assert_allclose(np.asarray(nw), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("model,chunk", [("mlp", None), ("mlp", 7), ("cnn", 7)])
def test_evaluation_equals_an_unpadded_per_client_loop(model, chunk):
    """Ten clients per pass, or (``chunk``: as the CPU's round evaluates) one client at a time in passes of 7
    examples, which divides no client's split, of the model's forward module (the CNN's lax.conv on CPU)."""
    exp = build(Config(algorithm="fedavg", partition="dirichlet", alpha=0.3, **{**SMALL, "model": model}))
    d: ClientData = exp.data
    params = init_state(exp.spec, 3).variables
    acc, loss = jax.jit(lambda v: evaluate_clients(exp.spec.model, v, d.x, d.y, d.test_idx, d.test_n,
                                                   chunk=chunk))(params)
    acc, loss = np.asarray(acc), np.asarray(loss)
    x, y = np.asarray(d.x), np.asarray(d.y)
    test_n = np.asarray(d.test_n)
    assert len(set(test_n.tolist())) > 1  # rows of different real lengths, padded
    for i in range(len(test_n)):
        rows = np.asarray(d.test_idx[i])[:test_n[i]]  # the client's real test samples only
        logits, _ = exp.spec.model.apply(params, jnp.asarray(x[rows]))
        logits = np.asarray(logits, np.float64)
        want_acc = np.mean(np.argmax(logits, -1) == y[rows])
        want_loss = float(np.mean(optax.softmax_cross_entropy_with_integer_labels(jnp.asarray(logits), y[rows])))
        assert abs(float(acc[i]) - want_acc) < 1e-6, (i, acc[i], want_acc)  # counts of real samples only
        np.testing.assert_allclose(loss[i], want_loss, rtol=1e-5)
    assert np.all((acc >= 0) & (acc <= 1))


@pytest.mark.parametrize("chunk", [None, 7])
def test_the_evaluation_counts_only_real_examples(chunk):
    """Labels set to the model's own predictions: every example is right, so a padded position counted would
    show as an accuracy above 1 (above 0 for the client given no examples)."""
    exp = build(Config(algorithm="fedavg", partition="dirichlet", alpha=0.3, **SMALL))
    d: ClientData = exp.data
    params = init_state(exp.spec, 3).variables
    y = jnp.argmax(exp.spec.model.apply(params, d.x)[0], -1).astype(d.y.dtype)
    n = d.test_n.at[0].set(0)
    assert int(jnp.sum(n < d.test_idx.shape[1])) > 1  # padded rows
    acc, loss = jax.jit(lambda v: evaluate_clients(exp.spec.model, v, d.x, y, d.test_idx, n, chunk=chunk))(params)
    assert float(acc[0]) == 0.0 and float(loss[0]) == 0.0
    np.testing.assert_array_equal(np.asarray(acc[1:]), 1.0)
