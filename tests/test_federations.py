"""Issue 58's first slice (docs/federations.md): availability, dropped uploads, their records and refusals, each
against a numpy / float64 reference of the same masked round (the masks from the same keys, the aggregate by
hand), and ``always`` bit-equal to the default round."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedalf_jax as fj
from fedalf_jax.config.identity import identity_diff
from fedalf_jax.experiment.build import build
from fedalf_jax.experiment.config import Config, ConfigError
from fedalf_jax.sim.federation import AVAIL_KEY, DROP_KEY
from fedalf_jax.sim.round import _client_phase, federated_sampled, init_state, seed_keys, server_step

SMALL = dict(dataset="synthetic", clients=12, clients_per_round=4, synthetic_train=480, synthetic_test=120,
             batch_size=20, rounds=2, eval_every=1, algorithm="fedavg", model="mlp", partition="dirichlet", alpha=0.3)


def _ref_masks(av, p_drop, seed, t, n_all, m):
    """Which clients round ``t`` finds available, samples and hears from, in numpy (the uniforms from the
    round's own keys)."""
    run_key = seed_keys(seed)[1]
    rk = jax.random.fold_in(run_key, t)
    k_sel, _ = jax.random.split(rk)
    k_av, k_pick = jax.random.split(k_sel)
    seed_key = jax.random.fold_in(run_key, AVAIL_KEY)
    N = len(n_all)
    kind = av.split(":")[0]
    if kind == "cyclic":
        period = int(av.split(":")[1])
        phase = np.asarray(jax.random.randint(seed_key, (N,), 0, period))
        avail = (t + phase) % period < -(-period // 2)
    else:
        if kind == "beta":
            a, b = (float(x) for x in av.split(":")[1].split(","))
            p = np.asarray(jax.random.beta(seed_key, a, b, (N,), jnp.float32), np.float64)
        elif kind == "size":
            p = n_all / n_all.max()
        else:
            p = np.ones(N)
        avail = np.asarray(jax.random.uniform(k_av, (N,)), np.float64) < p
    u = np.asarray(jax.random.uniform(k_pick, (N,)))
    ids = [i for i in np.argsort(u, kind="stable") if avail[i]][:m]
    valid = np.zeros(m, bool)
    valid[:len(ids)] = True
    ud = np.asarray(jax.random.uniform(jax.random.fold_in(rk, DROP_KEY), (m,)))
    arrived = valid & (ud >= p_drop) if p_drop > 0 else valid
    return np.array(ids, np.int64), valid, arrived, int(avail.sum())


def _two_rounds_against_numpy(av, p_drop, seed=0):
    exp = build(Config(**SMALL, availability=av, dropout=p_drop, seed=seed))
    n_all = np.asarray(exp.data.train_n).astype(np.float64)
    state = init_state(exp.spec, seed)
    phase = jax.jit(lambda s: _client_phase(exp.spec, s, exp.hp, exp.data))
    step = jax.jit(lambda s, a, b, c, f: server_step(exp.spec, s, a, b, c, exp.hp, f))
    seen = []
    for t in range(2):
        sel, n, outs, fed = phase(state)
        ids, valid, arrived, n_av = _ref_masks(av, p_drop, seed, t, n_all, 4)
        sel, valid_got, arrived_got = np.asarray(sel), np.asarray(fed["valid"]), np.asarray(fed["arrived"])
        np.testing.assert_array_equal(valid_got, valid)
        np.testing.assert_array_equal(arrived_got, arrived)
        np.testing.assert_array_equal(sel[valid], ids)
        assert int(fed["available"]) == n_av
        new, met = step(state, jnp.asarray(sel), n, outs, fed)
        assert float(met["arrived"]) == arrived.sum() and float(met["available"]) == n_av
        w = np.where(arrived, n_all[sel], 0.0)
        for th, dl, nw in zip(jax.tree_util.tree_leaves(state.variables["params"]),
                              jax.tree_util.tree_leaves(outs.delta), jax.tree_util.tree_leaves(new.variables["params"])):
            want = np.asarray(th, np.float64)
            if w.sum() > 0:
                want = want - np.tensordot(w / w.sum(), np.asarray(dl, np.float64), axes=1)
            np.testing.assert_allclose(np.asarray(nw), want, rtol=1e-5, atol=1e-6)
        seen.append((valid.sum(), arrived.sum()))
        state = new
    return seen, exp


def test_beta_availability_with_dropout_two_rounds_match_numpy():
    seen, _ = _two_rounds_against_numpy("beta:0.5,2", 0.3)
    assert any(v < 4 for v, _ in seen)  # a round found fewer available clients than m: masked slots


def test_beta_availability_alone_two_rounds_match_numpy():
    _two_rounds_against_numpy("beta:2,1", 0.0, seed=3)


def test_size_availability_two_rounds_match_numpy():
    _two_rounds_against_numpy("size", 0.0, seed=1)


def test_cyclic_availability_two_rounds_match_numpy():
    _two_rounds_against_numpy("cyclic:4", 0.0, seed=2)


def test_dropout_alone_two_rounds_match_numpy():
    seen, _ = _two_rounds_against_numpy("always", 0.5, seed=4)
    assert all(v == 4 for v, _ in seen)


def test_a_round_where_nothing_arrives_keeps_theta_and_says_so():
    seen, _ = _two_rounds_against_numpy("always", 1.0)  # the numpy reference keeps θ when no weight arrived
    assert seen == [(4, 0), (4, 0)]
    r = fj.run(fj.Config(**{**SMALL, "rounds": 2}, dropout=1.0))
    assert r.metrics["arrived"].dropna().tolist() == [0.0, 0.0]
    assert r.participation.tolist() == [0] * 12


def test_always_is_the_default_round_bit_for_bit():
    a = fj.run(fj.Config(**SMALL))
    b = fj.run(fj.Config(**SMALL, availability="always", dropout=0.0))
    assert list(a.metrics.columns) == list(b.metrics.columns) and "arrived" not in a.metrics.columns
    np.testing.assert_array_equal(a.metrics.drop(columns=[c for c in a.metrics if "second" in c]).to_numpy(float),
                                  b.metrics.drop(columns=[c for c in b.metrics if "second" in c]).to_numpy(float))
    for x, y in zip(jax.tree_util.tree_leaves(a.model), jax.tree_util.tree_leaves(b.model)):
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes()


def test_participation_replay_is_the_rounds_own():
    cfg = fj.Config(**{**SMALL, "rounds": 3}, availability="beta:0.5,2", dropout=0.3)
    r = fj.run(cfg)
    sel = r.sampled_clients
    want = [_ref_masks("beta:0.5,2", 0.3, 0, t, np.ones(12), 4) for t in range(3)]
    for t, (ids, valid, arrived, _) in enumerate(want):
        got = sel[t]
        assert sorted(got[got >= 0].tolist()) == sorted(ids[arrived[:len(ids)]].tolist())
    assert r.participation.sum() == sum(a.sum() for _, _, a, _ in want)
    assert r.metrics["arrived"].dropna().sum() == pytest.approx(r.participation.sum())  # eval_every=1: one a row
    with pytest.raises(ValueError, match="train_n"):
        federated_sampled(12, 4, 0, 2, "size", 0.0)


def test_changing_availability_or_dropout_is_an_identity_change():
    base = Config(**SMALL).identity()
    assert identity_diff(base, Config(**SMALL, availability="cyclic:6").identity()) == ["availability"]
    assert identity_diff(base, Config(**SMALL, dropout=0.2).identity()) == ["dropout"]
    assert identity_diff(base, Config(**SMALL, availability=" Always ").identity()) == []
    assert Config(**SMALL, availability="beta:2.0,5").availability == "beta:2,5"


@pytest.mark.parametrize("kw, says", [
    (dict(availability="sometimes"), "unknown availability"),
    (dict(availability="beta:2"), "two numbers"),
    (dict(availability="beta:0,1"), "positive"),
    (dict(availability="beta:nan,1"), "positive"),
    (dict(availability="cyclic:1"), "at least 2"),
    (dict(availability="cyclic:x"), "whole number"),
    (dict(availability="size:3"), "unknown availability"),
    (dict(availability=3), "must be a string"),
    (dict(dropout=1.5), "dropout must be a probability in [0, 1]"),
    (dict(dropout=-0.1), "dropout must be a probability in [0, 1]"),
    (dict(dropout=True), "dropout must be a probability"),
    (dict(availability="beta:2,5", dp="central", epsilon=8.0), "privacy mechanism"),
    (dict(dropout=0.1, ldp="adaptive"), "privacy mechanism"),
])
def test_bad_input_is_one_line_naming_the_fix(kw, says):
    with pytest.raises(ConfigError) as e:
        Config(**{**SMALL, **kw})
    msg = str(e.value)
    assert says in msg and "\n" not in msg


def _past_validation(cfg, **kw):
    """``cfg`` with federation options its algorithm refuses (a server that does not weigh by ServerIn.weights):
    the round's own bookkeeping of states is tested on them all the same."""
    for k, v in kw.items():
        object.__setattr__(cfg, k, v)
    return cfg


def test_unweighted_builtin_servers_are_refused():
    for alg in ("qfedavg", "fedadmm", "fedlf", "fedalf"):
        with pytest.raises(ConfigError, match="does not weigh the clients by ServerIn.weights"):
            Config(**{**SMALL, "algorithm": alg}, dropout=0.1)
    Config(**{**SMALL, "algorithm": "fedprox"}, dropout=0.1)


def test_a_client_whose_upload_is_lost_keeps_its_state():
    exp = build(_past_validation(Config(**{**SMALL, "algorithm": "fedadmm"}), availability="beta:0.5,2", dropout=0.4))
    assert exp.spec.algorithm.has_client_state
    state = init_state(exp.spec, 0)
    state = state._replace(client_states=jax.tree_util.tree_map(lambda x: x + 0.25, state.client_states))  # not the new rows' zeros
    sel, n, outs, fed = jax.jit(lambda s: _client_phase(exp.spec, s, exp.hp, exp.data))(state)
    new, _ = jax.jit(lambda s, a, b, c, f: server_step(exp.spec, s, a, b, c, exp.hp, f))(state, sel, n, outs, fed)
    arrived, sel = np.asarray(fed["arrived"]), np.asarray(sel)
    assert arrived.any() and not arrived.all()
    for old, nw, out in zip(jax.tree_util.tree_leaves(state.client_states), jax.tree_util.tree_leaves(new.client_states),
                            jax.tree_util.tree_leaves(outs.state)):
        old, nw, out = np.asarray(old), np.asarray(nw), np.asarray(out)
        for j, i in enumerate(sel):
            np.testing.assert_array_equal(nw[i], out[j].astype(nw.dtype) if arrived[j] else old[i])
        others = np.setdiff1d(np.arange(12), sel)
        np.testing.assert_array_equal(nw[others], old[others])


def test_a_round_where_nothing_arrives_keeps_the_server_state():
    """FedLF's history rows would store the (zero) deltas of the sampled and their round: none arrived, none kept."""
    exp = build(_past_validation(Config(**{**SMALL, "algorithm": "fedlf", "partition": "iid"}), dropout=1.0))
    state = init_state(exp.spec, 0)
    sel, n, outs, fed = jax.jit(lambda s: _client_phase(exp.spec, s, exp.hp, exp.data))(state)
    new, met = jax.jit(lambda s, a, b, c, f: server_step(exp.spec, s, a, b, c, exp.hp, f))(state, sel, n, outs, fed)
    assert float(met["arrived"]) == 0 and float(met["available"]) == 12
    for a, b in zip(jax.tree_util.tree_leaves((state.sstate, state.variables)),
                    jax.tree_util.tree_leaves((new.sstate, new.variables))):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
