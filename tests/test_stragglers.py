"""Stragglers (docs/federations.md): per-client speeds, a round deadline in local steps, and a late client's
partial work kept or its upload dropped, inside the one compiled round; against independent expectations (a run
with fewer local steps, counts from the clients' sizes by hand, the speeds' law over many clients)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedalf_jax as fj
from fedalf_jax.experiment.config import ConfigError
from fedalf_jax.sim.round import seed_keys
from fedalf_jax.sim.stragglers import SPEED_KEY, speeds, steps_done

SMALL = dict(dataset="synthetic", clients=12, clients_per_round=4, synthetic_train=480, synthetic_test=120,
             batch_size=20, rounds=3, eval_every=1, algorithm="fedavg", model="mlp", lr=0.1)


def _leaves(r):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(r.model)]


def test_a_partial_client_is_the_same_client_with_fewer_steps(tmp_path):
    """Every client at speed 1 (lognormal:0) with a deadline of 3 steps, out of --local-steps 5: each completes
    exactly 3, so the run equals --local-steps 3 bit for bit (the same minibatches for steps 0, 1, 2), and every
    round records 4 late clients and 3/5 of the work."""
    part = fj.run(fj.Config(**SMALL, local_steps=5, stragglers="lognormal:0", deadline=3.9),
                  out=tmp_path / "p", progress=False)
    three = fj.run(fj.Config(**SMALL, local_steps=3), out=tmp_path / "t", progress=False)
    five = fj.run(fj.Config(**SMALL, local_steps=5), out=tmp_path / "f", progress=False)
    for a, b in zip(_leaves(part), _leaves(three)):
        np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(a, b) for a, b in zip(_leaves(part), _leaves(five)))
    rows = part.metrics.dropna(subset=["late"])
    assert rows["late"].tolist() == [4.0] * 3 and rows["work"].tolist() == pytest.approx([0.6] * 3)
    assert "late" not in three.metrics.columns  # a plain run's metrics.csv is unchanged


def test_facts_steps_count_the_completed_steps(tmp_path):
    """A program records ctx.facts.steps and the steps it was called for in its state: under a deadline of 7 steps
    at speed 1, a client of n examples (epochs 2, B 20: K = 2·⌈n/20⌉ steps) reports min(K, 7) and took that many,
    its sizes read from clients.json."""
    def final(count, ctx):
        return jax.tree_util.tree_map(jnp.zeros_like, ctx.theta), jnp.stack([ctx.facts.steps, count])
    fj.register_algorithm("steps_seen", lambda: fj.Algorithm(
        "steps_seen", server=fj.algorithms.weighted_mean_server,
        client=fj.ClientProgram(lambda ctx: jnp.zeros((), jnp.int32), lambda c, b, ctx: c + 1, final),
        init_client_state=lambda p: jnp.full((2,), -1, jnp.int32)))
    kw = {**SMALL, "algorithm": "steps_seen", "clients_per_round": 12, "rounds": 1, "local_epochs": 2,
          "partition": "dirichlet", "alpha": 0.3}
    r = fj.run(fj.Config(**kw, stragglers="lognormal:0", deadline=7), out=tmp_path / "s", progress=False)
    import json
    n = np.array([c["n_train"] for c in json.load(open(f"{r.run_dir}/clients.json"))["clients"]])
    k = 2 * (-(-n // 20))
    assert np.asarray(r.client_states).tolist() == np.stack([np.minimum(k, 7)] * 2, axis=1).tolist()
    assert (k > 7).any() and (k <= 7).any()  # some late, some not
    assert r.metrics["late"].dropna().tolist() == [float((k > 7).sum())]


def test_dropped_stragglers_send_nothing_and_the_replay_says_who(tmp_path):
    """Policy drop: with every client at speed 1 and a deadline below every client's steps, nothing arrives: θ is
    θ_0, every round records arrived 0 and late m; with a random law, participation (replayed) counts exactly the
    arrived uploads of metrics.csv."""
    none = fj.run(fj.Config(**SMALL, local_steps=5, stragglers="lognormal:0", deadline=2, straggler_policy="drop"),
                  out=tmp_path / "n", progress=False)
    from fedalf_jax.experiment.build import build
    from fedalf_jax.sim.round import init_state
    cfg = fj.Config(**SMALL)
    theta0 = init_state(build(cfg).spec, cfg.seed).variables
    for a, b in zip(_leaves(none), jax.tree_util.tree_leaves(theta0)):
        np.testing.assert_array_equal(a, np.asarray(b))
    rows = none.metrics.dropna(subset=["late"])
    assert rows["arrived"].tolist() == [0.0] * 3 and rows["late"].tolist() == [4.0] * 3
    assert none.participation.tolist() == [0] * 12 == none.summary["participation"]
    some = fj.run(fj.Config(**SMALL, stragglers="lognormal:1", deadline=12, straggler_policy="drop"),
                  out=tmp_path / "s", progress=False)
    arrived = some.metrics["arrived"].dropna()
    assert 0 < arrived.sum() < 3 * 4 and some.participation.sum() == arrived.sum()
    assert some.summary["participation"] == some.participation.tolist()
    assert set(np.unique(some.sampled_clients)) - {-1} <= set(range(12)) and (some.sampled_clients == -1).any()


def test_speeds_follow_their_law_and_stay_per_client():
    """lognormal:0.5: log-speeds over 4,000 clients have mean 0 and std 0.5 (±4 standard errors); without jitter a
    client's speed is the same every round, with jitter 0.3 the log-speed's std across rounds is 0.3; the
    completed steps are floor(v · D) capped at K."""
    key = seed_keys(0)[1]
    sel = jnp.arange(4000)
    logv = np.log(np.asarray(speeds(("lognormal", 0.5, 0.0), key, 0, sel)))
    assert abs(logv.mean()) < 4 * 0.5 / np.sqrt(4000) and abs(logv.std() - 0.5) < 4 * 0.5 / np.sqrt(2 * 4000)
    again = np.log(np.asarray(speeds(("lognormal", 0.5, 0.0), key, 7, sel)))
    np.testing.assert_array_equal(logv, again)
    z = np.asarray(jax.vmap(lambda i: jax.random.normal(jax.random.fold_in(jax.random.fold_in(key, SPEED_KEY), i)))(sel))
    np.testing.assert_allclose(logv, 0.5 * z, rtol=1e-6, atol=1e-6)
    jit = np.stack([np.log(np.asarray(speeds(("lognormal", 0.5, 0.3), key, t, sel[:50]))) for t in range(400)])
    assert abs(jit.std(axis=0).mean() - 0.3) < 0.02
    full = jnp.full((4000,), 10, jnp.int32)
    done = np.asarray(steps_done(("lognormal", 0.5, 0.0), 8.0, key, 0, sel, full))
    np.testing.assert_array_equal(done, np.minimum(10, np.floor(np.exp(logv) * 8.0)).astype(np.int32))


@pytest.mark.parametrize("kw, needle", [
    (dict(stragglers="lognormal:0.5"), "needs a deadline"),
    (dict(deadline=3), "deadline has no meaning without stragglers"),
    (dict(straggler_policy="drop"), "straggler_policy has no meaning without stragglers"),
    (dict(stragglers="gamma:2", deadline=3), "unknown stragglers"),
    (dict(stragglers="lognormal:-1", deadline=3), "finite numbers ≥ 0"),
    (dict(stragglers="lognormal:1", deadline=0), "deadline must be a positive number"),
    (dict(stragglers="lognormal:1", deadline=3, straggler_policy="late"), "straggler_policy must be one of"),
    (dict(stragglers="lognormal:1", deadline=3, straggler_policy="drop", ldp="adaptive"), "privacy mechanism"),
    (dict(stragglers="lognormal:1", deadline=3, straggler_policy="drop", algorithm="fedlf"), "ServerIn.weights"),
])
def test_bad_straggler_options_are_one_line(kw, needle):
    with pytest.raises(ConfigError, match=needle) as e:
        fj.Config(**{**SMALL, **kw})
    assert "\n" not in str(e.value)


def test_partial_work_runs_under_privacy_and_is_recorded_in_one_spelling(tmp_path):
    """partial keeps uniform sampling and every sampled upload, so a mechanism's accounting still holds: the run
    is accepted under --ldp; the spelling is normalised in config.json."""
    cfg = fj.Config(**SMALL, stragglers="LogNormal:0.50,0", deadline=4, ldp="adaptive", epsilon=2.0)
    assert cfg.stragglers == "lognormal:0.5" and cfg.deadline == 4.0
    r = fj.run(cfg, out=tmp_path / "l", progress=False)
    assert r.metrics["late"].dropna().size == 3


def test_a_sweep_over_dropout_and_deadline_is_one_program_equal_to_its_runs(tmp_path):
    """P and D are traced (HParams.fed): the four runs of --dropout 0.1 0.4 × --deadline 2 6 share one static key
    (one compiled program); each run's model equals its single run's, and the runs differ from each other."""
    from fedalf_jax.experiment.sweep_plan import static_key
    base = dict(SMALL, stragglers="lognormal:0.5", straggler_policy="partial")
    grid = {"dropout": [0.1, 0.4], "deadline": [2.0, 6.0]}
    cfgs = [fj.Config(**base, dropout=p, deadline=d) for p in grid["dropout"] for d in grid["deadline"]]
    assert len({static_key(c) for c in cfgs}) == 1
    assert static_key(fj.Config(**base, dropout=0.0, deadline=2.0)) != static_key(cfgs[0])  # P = 0: no masks
    s = fj.sweep(fj.Config(**base, dropout=0.1, deadline=2.0), out=tmp_path / "s", grid=grid, progress=False)
    models = {}
    for r in s.runs:
        single = fj.run(r.config, out=tmp_path / f"one_{r.config.dropout}_{r.config.deadline}", progress=False)
        for a, b in zip(_leaves(r), _leaves(single)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        models[(r.config.dropout, r.config.deadline)] = _leaves(r)
    assert len(models) == 4
    first = models[(0.1, 2.0)]
    assert all(any(not np.allclose(a, b) for a, b in zip(first, m)) for k, m in models.items() if k != (0.1, 2.0))
