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


def _ref_markov(p_on, p_off, seed_key, t, n):
    """``[t + 1, N]``: the chains of rounds 0..t simulated forwards in numpy, from the uniforms the round draws:
    round 0 from the stationary law, then each round an independent refresh (probability r) to a fresh state (on
    with probability q), else the state kept (P_ON + P_OFF ≤ 1) or flipped (> 1); r, q solved by hand from
    P(on | off) = P_ON, P(off | on) = P_OFF."""
    pi = p_on / (p_on + p_off)
    if p_on + p_off <= 1:
        r, q, flip = p_on + p_off, pi, False
    else:
        r, q, flip = 2 - p_on - p_off, (1 - p_off) / (2 - p_on - p_off), True
    out = []
    for s in range(t + 1):
        v, w = np.asarray(jax.random.uniform(jax.random.fold_in(seed_key, s), (2, n)))
        if s == 0:
            x = w < np.float32(pi)
        else:
            x = np.where(v < np.float32(r), w < np.float32(q), x ^ flip)
        out.append(x)
    return np.array(out)


def _ref_masks(av, p_drop, seed, t, n_all, m, classes=None):
    """Which clients round ``t`` finds available, samples and hears from, in numpy (the uniforms from the
    round's own keys)."""
    run_key = seed_keys(seed)[1]
    rk = jax.random.fold_in(run_key, t)
    k_sel, _ = jax.random.split(rk)
    k_av, k_pick = jax.random.split(k_sel)
    seed_key = jax.random.fold_in(run_key, AVAIL_KEY)
    N = len(n_all)
    kind = av.split(":")[0]
    if kind == "markov":
        avail = _ref_markov(*(float(x) for x in av.split(":")[1].split(",")), seed_key, t, N)[-1]
    elif kind == "trace":
        avail = np.load(av.split(":", 1)[1])["avail"][:, t].astype(bool)
    elif kind == "cyclic":
        period = int(av.split(":")[1])
        phase = np.asarray(jax.random.randint(seed_key, (N,), 0, period))
        avail = (t + phase) % period < -(-period // 2)
    else:
        if kind == "beta":
            a, b = (float(x) for x in av.split(":")[1].split(","))
            p = np.asarray(jax.random.beta(seed_key, a, b, (N,), jnp.float32), np.float64)
        elif kind == "size":
            p = n_all / n_all.max()
        elif kind == "labels":
            p = classes / classes.max()
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
    classes = np.array([len(c) for c in exp.partition.classes], np.float64)  # the partition's own record
    state = init_state(exp.spec, seed)
    phase = jax.jit(lambda s: _client_phase(exp.spec, s, exp.hp, exp.data))
    step = jax.jit(lambda s, a, b, c, f: server_step(exp.spec, s, a, b, c, exp.hp, f))
    seen = []
    for t in range(2):
        sel, n, outs, fed = phase(state)
        ids, valid, arrived, n_av = _ref_masks(av, p_drop, seed, t, n_all, 4, classes)
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
    (dict(availability="size", dp="central", epsilon=8.0), "privacy mechanism"),
    (dict(availability="labels", dropout=0.1, ldp="adaptive"), "privacy mechanism"),
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
    for alg in ("fedlf", "fedalf"):
        with pytest.raises(ConfigError, match="does not weigh the clients by ServerIn.weights"):
            Config(**{**SMALL, "algorithm": alg}, dropout=0.1)
    for alg in ("fedprox", "qfedavg", "fedadmm"):  # their servers count only ServerIn.arrived (issue 58)
        Config(**{**SMALL, "algorithm": alg}, dropout=0.1)


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


# ---- issue 58, second slice (labels "fed58b"): markov, trace and labels availability; participation --------------

def test_markov_availability_two_rounds_match_numpy():
    _two_rounds_against_numpy("markov:0.3,0.2", 0.2, seed=5)


def test_markov_anticorrelated_availability_two_rounds_match_numpy():
    _two_rounds_against_numpy("markov:0.9,0.8", 0.0, seed=6)


@pytest.mark.parametrize("p_on, p_off", [(0.3, 0.1), (0.05, 0.02), (0.9, 0.7)])
def test_markov_chain_has_its_transition_probabilities(p_on, p_off):
    """Over 2,000 clients and 40 rounds the chain's frequencies are the hand-computed ones: the stationary
    P(on) = P_ON / (P_ON + P_OFF) in every round, P(on | off) = P_ON, P(off | on) = P_OFF, and two rounds apart
    P(on | on) = 1 − P_OFF (1 − P_OFF) − P_OFF P_ON... by the matrix squared; and round t's states are those of the
    chain simulated forwards from round 0 (the round carries no state: a resumed run's round t is the same)."""
    from fedalf_jax.sim.federation import available
    n, rounds = 2000, 40
    run_key = seed_keys(7)[1]
    tn = jnp.ones((n,), jnp.int32)
    x = np.asarray(jax.jit(jax.vmap(lambda t: available(("markov", p_on, p_off), run_key, t, run_key, tn)))(
        jnp.arange(rounds)))
    pi = p_on / (p_on + p_off)
    np.testing.assert_allclose(x.mean(axis=1), pi, atol=5 * np.sqrt(pi * (1 - pi) / n))
    a, b = x[:-1], x[1:]
    np.testing.assert_allclose((b & ~a).sum() / (~a).sum(), p_on, atol=0.01)
    np.testing.assert_allclose((~b & a).sum() / a.sum(), p_off, atol=0.01)
    P = np.array([[1 - p_on, p_on], [p_off, 1 - p_off]])
    P2 = P @ P
    a2, b2 = x[:-2], x[2:]
    np.testing.assert_allclose((b2 & a2).sum() / a2.sum(), P2[1, 1], atol=0.012)
    ref = _ref_markov(p_on, p_off, jax.random.fold_in(run_key, AVAIL_KEY), rounds - 1, n)
    np.testing.assert_array_equal(x, ref)


def test_markov_resumed_run_equals_the_uninterrupted_one(tmp_path):
    cfg = fj.Config(**{**SMALL, "rounds": 4}, availability="markov:0.2,0.3", dropout=0.1)
    whole = fj.run(cfg, progress=False)
    part = cfg.replace(rounds=2, out=str(tmp_path / "r"), checkpoint_every="1")
    fj.run(part, progress=False)
    resumed = fj.run(part.replace(rounds=4), progress=False, resume=True)
    cols = [c for c in whole.metrics if "second" not in c and c != "train_loss"]  # the 2-round run's end: a train loss
    np.testing.assert_array_equal(whole.metrics[cols].to_numpy(float),
                                  fj.load(resumed.run_dir).metrics[cols].to_numpy(float))
    assert resumed.summary["participation"] == whole.participation.tolist()


def _trace(tmp_path, avail, name="t.npz"):
    path = tmp_path / name
    np.savez(path, avail=avail)
    return f"trace:{path}"


def test_trace_replay_is_exact(tmp_path):
    rng = np.random.default_rng(3)
    avail = rng.random((12, 6)) < 0.4
    avail[:, 2] = False  # a round with nobody available: recorded, every slot masked
    avail[:3, 4] = True
    av = _trace(tmp_path, avail)
    _two_rounds_against_numpy(av, 0.0)
    r = fj.run(fj.Config(**{**SMALL, "rounds": 6}, availability=av, out=str(tmp_path / "run")), progress=False)
    sel = r.sampled_clients
    for t in range(6):
        got = sel[t][sel[t] >= 0]
        assert set(got.tolist()) <= set(np.flatnonzero(avail[:, t]).tolist())
        assert len(got) == min(4, avail[:, t].sum())
    assert r.metrics["available"].dropna().tolist() == avail.sum(axis=0).astype(float).tolist()
    assert r.metrics.set_index("round")["arrived"][3] == 0.0
    want = np.zeros(12, np.int64)
    for row in sel:
        want[row[row >= 0]] += 1
    assert r.participation.tolist() == want.tolist() == r.summary["participation"]
    assert fj.load(r.run_dir).config.availability == av  # the path as given, recorded


def test_trace_file_is_part_of_the_identity_and_a_changed_one_is_refused_on_resume(tmp_path):
    avail = np.ones((12, 4), bool)
    av = _trace(tmp_path, avail)
    before = Config(**SMALL, availability=av).identity()
    base = Config(**SMALL).identity()
    assert "availability_digest" in before and "availability_digest" not in base
    run = fj.Config(**SMALL, availability=av, out=str(tmp_path / "r"), checkpoint_every="1")
    fj.run(run, progress=False)
    avail[0, 3] = False
    _trace(tmp_path, avail)
    assert identity_diff(before, Config(**SMALL, availability=av).identity()) == ["availability_digest"]
    with pytest.raises(ConfigError, match="availability_digest"):
        fj.run(run.replace(rounds=4), progress=False, resume=True)


@pytest.mark.parametrize("arr, says", [
    (np.ones((11, 4), bool), "not [clients=12, T]"),
    (np.ones((12,), bool), "not [clients=12, T]"),
    (np.ones((12, 1), bool), "covers 1 rounds, fewer than the run's 2"),
    (np.full((12, 4), 0.5), "non-boolean values"),
    (np.full((12, 4), 2), "non-boolean values"),
])
def test_bad_trace_is_one_line_naming_the_fix(tmp_path, arr, says):
    with pytest.raises(ConfigError) as e:
        Config(**SMALL, availability=_trace(tmp_path, arr))
    msg = str(e.value)
    assert says in msg and "\n" not in msg and ("savez" in msg or "--rounds" in msg)
    Config(**SMALL, availability=_trace(tmp_path, np.ones((12, 2), np.int8), "ints.npz"))  # 0/1 integers: fine


def test_missing_or_keyless_trace_is_one_line(tmp_path):
    for av, says in ((f"trace:{tmp_path / 'none.npz'}", "cannot read"), ("trace:", "trace takes the file")):
        with pytest.raises(ConfigError, match=says):
            Config(**SMALL, availability=av)
    np.savez(tmp_path / "k.npz", other=np.ones((12, 4), bool))
    with pytest.raises(ConfigError, match="no array 'avail'"):
        Config(**SMALL, availability=f"trace:{tmp_path / 'k.npz'}")


def test_labels_availability_two_rounds_match_numpy():
    seen, exp = _two_rounds_against_numpy("labels", 0.0, seed=1)
    k = np.array([len(c) for c in exp.partition.classes])
    assert k.min() < k.max()  # the Dirichlet split's clients differ in how many classes they hold


def test_classes_held_counts_each_clients_classes():
    from fedalf_jax.sim.federation import classes_held
    exp = build(Config(**SMALL, availability="labels"))
    got = np.asarray(classes_held(exp.data.y, exp.data.train_idx, exp.data.train_n, exp.spec.model.num_classes))
    y = np.asarray(exp.data.y)
    want = [len(set(y[np.asarray(exp.data.train_idx)[i, :int(exp.data.train_n[i])]].tolist())) for i in range(12)]
    assert got.tolist() == want == [len(c) for c in exp.partition.classes]


def test_labels_and_size_replay_from_the_run_folder(tmp_path):
    for av in ("labels", "size"):
        r = fj.run(fj.Config(**{**SMALL, "rounds": 3}, availability=av, out=str(tmp_path / av)), progress=False)
        assert fj.load(r.run_dir).participation.tolist() == r.summary["participation"]
        assert sum(r.summary["participation"]) == r.metrics["arrived"].dropna().sum()
    with pytest.raises(ValueError, match="classes="):
        federated_sampled(12, 4, 0, 2, "labels", 0.0)


def test_every_run_records_its_participation(tmp_path):
    r = fj.run(fj.Config(**{**SMALL, "rounds": 3}, out=str(tmp_path / "u")), progress=False)
    sel = r.sampled_clients
    assert r.summary["participation"] == np.bincount(sel.ravel(), minlength=12).tolist()
    assert sum(r.summary["participation"]) == 3 * 4


@pytest.mark.parametrize("kw, says", [
    (dict(availability="markov:0,0.5"), "P_ON must be in (0, 1]"),
    (dict(availability="markov:0.5,1.5"), "P_OFF in [0, 1]"),
    (dict(availability="markov:0.5"), "two probabilities"),
    (dict(availability="labels:2"), "unknown availability"),
])
def test_bad_new_modes_are_one_line_naming_the_fix(kw, says):
    with pytest.raises(ConfigError) as e:
        Config(**{**SMALL, **kw})
    assert says in str(e.value) and "\n" not in str(e.value)


def test_new_modes_are_recorded_canonically():
    assert Config(**SMALL, availability=" Markov:0.50,0.2").availability == "markov:0.5,0.2"
    assert Config(**SMALL, availability="LABELS").availability == "labels"


def test_csv_trace_of_intervals_is_replayed(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("client,start,end\n0,0,2\n3,1,3\n5,0,1\n7,1,2\n0,3,4\n\n")
    want = np.zeros((12, 5), bool)  # by hand: rounds start <= t < end; round 4 (past every interval): nobody
    want[0, 0:2] = want[3, 1:3] = want[5, 0] = want[7, 1] = want[0, 3] = True
    r = fj.run(fj.Config(**{**SMALL, "rounds": 5}, availability=f"trace:{path}", out=str(tmp_path / "r")),
               progress=False)
    assert r.metrics["available"].dropna().tolist() == want.sum(axis=0).astype(float).tolist()
    sel = r.sampled_clients
    for t in range(5):
        assert sorted(sel[t][sel[t] >= 0].tolist()) == np.flatnonzero(want[:, t]).tolist()  # fewer than m: all
    assert r.summary["participation"] == want.sum(axis=1).tolist()


@pytest.mark.parametrize("text, says", [
    ("client,start,end\n12,0,2\n", "names client 12, not one of the run's clients 0 .. 11"),
    ("client,start,end\n1,2,2\n", "is not 0 ≤ start < end"),
    ("client,start,end\n1,x,2\n", "is not three whole numbers"),
    ("id,from,to\n1,0,2\n", "header client,start,end"),
])
def test_bad_csv_trace_is_one_line_naming_the_fix(tmp_path, text, says):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        Config(**SMALL, availability=f"trace:{path}")
    assert says in str(e.value) and "\n" not in str(e.value)
