"""Issue 58: qFedAvg's and FedADMM's servers count only the arrived clients (``ServerIn.arrived``)."""
import jax
import jax.numpy as jnp
import numpy as np

from fedalf_jax.experiment.build import build
from fedalf_jax.experiment.config import Config
from fedalf_jax.sim.algorithms import ServerIn
from fedalf_jax.sim.round import _client_phase, init_state, server_step

SMALL = dict(dataset="synthetic", clients=12, clients_per_round=4, synthetic_train=480, synthetic_test=120,
             rounds=2, seed=0)


def _round(alg, mask):
    """One federated round of ``alg`` with the arrivals forced to ``mask``; (θ_t, θ_{t+1}, ServerIn pieces)."""
    exp = build(Config(**{**SMALL, "algorithm": alg}, dropout=0.3))
    state = init_state(exp.spec, 0)
    sel, n, outs, fed = jax.jit(lambda s: _client_phase(exp.spec, s, exp.hp, exp.data))(state)
    fed = dict(fed, arrived=jnp.asarray(mask))
    new, _ = jax.jit(lambda s, a, b, c, f: server_step(exp.spec, s, a, b, c, exp.hp, f))(state, sel, n, outs, fed)
    return exp, state, new, sel, n, outs


def _leaves(x):
    return [np.asarray(a, np.float64) for a in jax.tree_util.tree_leaves(x)]


MASK = np.array([True, False, True, False])


def test_qfedavg_sums_over_the_arrived_clients_only():
    exp, state, new, sel, n, outs = _round("qfedavg", MASK)
    theta = _leaves(state.variables["params"])
    deltas = _leaves(outs.delta)
    loss = np.asarray(outs.loss, np.float64)
    q, lr = float(exp.hp.q), float(exp.hp.lr)
    keep = np.flatnonzero(MASK)
    F = loss[keep] + 1e-10
    dw = [d[keep] / lr for d in deltas]
    dw_sq = sum((x.reshape(len(keep), -1) ** 2).sum(1) for x in dw)
    h = q * F ** (q - 1) * dw_sq + F ** q / lr
    want = [t - np.tensordot(F ** q, x, 1) / h.sum() for t, x in zip(theta, dw)]
    for w, g in zip(want, _leaves(new.variables["params"])):
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=1e-6)


def test_fedadmm_means_over_the_arrived_clients_only():
    exp, state, new, sel, n, outs = _round("fedadmm", MASK)
    keep = np.flatnonzero(MASK)
    sliced = jax.tree_util.tree_map(lambda x: x[keep], outs.delta)
    s = ServerIn(state.variables["params"], sliced, jnp.full((len(keep),), 1.0 / len(keep)), outs.loss[keep],
                 exp.hp.lr, exp.hp.server_lr, exp.hp, 0, sel[keep], state.sstate)
    want, _, _ = exp.spec.algorithm.server(s)
    for w, g in zip(_leaves(want), _leaves(new.variables["params"])):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_nothing_arrived_keeps_theta():
    for alg in ("qfedavg", "fedadmm"):
        _, state, new, *_ = _round(alg, np.zeros(4, bool))
        for a, b in zip(_leaves(state.variables["params"]), _leaves(new.variables["params"])):
            np.testing.assert_array_equal(a, b)
            assert np.isfinite(b).all()


def test_the_servers_ignore_a_missing_rows_values_and_an_empty_round_is_finite():
    """Called directly (a user's wrapper may not zero the missing rows): a missing row's Δ_i and l_i change
    nothing, and the result equals the server on the arrived rows alone; nothing arrived: a finite θ."""
    exp, state, _, sel, n, outs = _round("qfedavg", MASK)
    from fedalf_jax.sim.algorithms import mean_server, qfedavg_server
    keep = np.flatnonzero(MASK)
    junk = jax.tree_util.tree_map(lambda x: x + 3.0, outs.delta)  # every row nonzero, the missing ones too
    theta = state.variables["params"]
    for server in (qfedavg_server, mean_server):
        def call(d, loss, s_sel, arrived):
            m = s_sel.shape[0]
            return server(ServerIn(theta, d, jnp.full((m,), 1.0 / m), loss, exp.hp.lr, exp.hp.server_lr, exp.hp,
                                   0, s_sel, (), arrived=arrived))[0]
        got = call(junk, outs.loss + 1.0, sel, jnp.asarray(MASK))
        want = call(jax.tree_util.tree_map(lambda x: x[keep], junk), (outs.loss + 1.0)[keep], sel[keep], None)
        for w, g in zip(_leaves(want), _leaves(got)):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        empty = call(junk, outs.loss + 1.0, sel, jnp.zeros(4, bool))
        for b in _leaves(empty):
            assert np.isfinite(b).all()
