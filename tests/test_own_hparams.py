"""An algorithm's own hyper-parameters (issue #28 item 6) and the FedAdam / FedYogi example (item 9):
``Algorithm(hparams={name: default})`` reaches the round traced as ``hp.own[name]``, is set by
``Config(hp=...)`` / ``--hp``, swept in one program, recorded resolved in ``config.json`` and the run's
identity, and shown by the sweep's table, its run names and the report. The expectations are computed
here independently: FedAdam's and FedYogi's two rounds by hand in float64 on the tiny problem of
tests/test_contract.py."""

import json
import sys
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedalf_jax as fj

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # examples/ is not a package on the path under the console script `pytest`
from test_contract import _cfg, _local  # noqa: E402  (helpers only: no test of test_contract runs twice)

ADAM, YOGI = "examples.fedadam:fedadam", "examples.fedadam:fedyogi"
LR, GLR = 0.5, 0.1


def _by_hand(rule, rounds, beta1=0.9, beta2=0.99, tau=1e-3, lr=LR, glr=GLR):
    """Reddi et al.'s Algorithm 2 in float64: every client of 3 each round, Δ = mean_i (θ − w_i), v_0 = τ²."""
    theta, m, v = np.zeros(3), np.zeros(3), np.full(3, tau * tau)
    for _ in range(rounds):
        d = np.mean([theta - _local(theta, i, lr) for i in range(3)], axis=0)
        m = beta1 * m + (1 - beta1) * d
        if rule == "adam":
            v = beta2 * v + (1 - beta2) * d * d
        else:
            v = v - (1 - beta2) * d * d * np.sign(v - d * d)
        theta = theta - glr * m / (np.sqrt(v) + tau)
    return theta, m, v


def _b(res):
    return np.asarray(res.model["params"]["b"], np.float64)


# ---- the FedAdam / FedYogi example against two rounds by hand ----------------------------------------

@pytest.mark.parametrize("name, rule", [(ADAM, "adam"), (YOGI, "yogi")])
def test_fedadam_and_fedyogi_match_two_rounds_computed_by_hand(tmp_path, name, rule):
    own = dict(beta1=0.7, beta2=0.8, tau=0.05)
    res = fj.run(_cfg(name, lr=LR, server_lr=GLR, hp=own, out=str(tmp_path / "r")), progress=False)
    theta, m, v = _by_hand(rule, 2, **own)
    np.testing.assert_allclose(_b(res), theta, rtol=0, atol=2e-6)
    chex.assert_trees_all_close(res.server_state, ({"b": m}, {"b": v}), atol=2e-6)  # the server state (m, v)
    # the values given reach the round: the declared defaults give another model
    assert np.abs(_by_hand(rule, 2)[0] - theta).max() > 1e-2
    default = fj.run(_cfg(name, lr=LR, server_lr=GLR), progress=False)
    np.testing.assert_allclose(_b(default), _by_hand(rule, 2)[0], rtol=0, atol=2e-6)


def test_fedyogi_differs_from_fedadam_where_the_second_moment_falls():
    """Yogi's v − (1−β2)Δ² sign(v − Δ²) against Adam's β2 v + (1−β2)Δ²: the by-hand rules differ here,
    so the test above tells the two servers apart."""
    a, y = _by_hand("adam", 2, beta1=0.7, beta2=0.8, tau=0.05), _by_hand("yogi", 2, beta1=0.7, beta2=0.8, tau=0.05)
    assert np.abs(a[0] - y[0]).max() > 1e-3


# ---- traced: one program for a sweep over an own hyper-parameter --------------------------------------

def test_a_beta1_sweep_is_one_program_and_each_run_equals_its_single_run(tmp_path, monkeypatch):
    from fedalf_jax.experiment import loop
    compiled = []
    real = loop.Program._compile

    def counting(self, key, make, args):
        if key not in self._compiled:
            compiled.append((id(self), key))
        return real(self, key, make, args)

    monkeypatch.setattr(loop.Program, "_compile", counting)
    base = _cfg(YOGI, lr=LR, server_lr=GLR, hp={"tau": 0.05})
    sw = fj.sweep(base, out=tmp_path / "s", grid={"hp.beta1": [0.7, 0.95]}, chunk=2, progress=False)
    assert len(sw) == 2 and [r.status for r in sw.runs] == ["done", "done"]
    programs = {p for p, key in compiled if key[0] in ("round", "chunk")}
    assert len(programs) == 1, compiled            # one set of programs (the two runs their run axis)...
    # ...compiled once each: the round and the evaluation (a chunk of length 0)
    assert sorted(k for p, k in compiled if k[0] in ("round", "chunk")) == [("chunk", 0), ("round",)]
    compiled.clear()
    for beta1, run in zip([0.7, 0.95], sw.runs):
        assert run.config.hp == {"beta1": beta1, "beta2": 0.99, "tau": 0.05}
        single = fj.run(_cfg(YOGI, lr=LR, server_lr=GLR, hp={"beta1": beta1, "tau": 0.05}), progress=False)
        chex.assert_trees_all_equal(dict(run.model), dict(single.model))  # map on the CPU: bit for bit
        np.testing.assert_allclose(_b(run), _by_hand("yogi", 2, beta1=beta1, tau=0.05)[0], rtol=0, atol=2e-6)
    assert np.abs(_b(sw.runs[0]) - _b(sw.runs[1])).max() > 1e-3
    # the table and the run names show the varied own hyper-parameter
    table = sw.table
    assert "hp.beta1" in table.columns and table["hp.beta1"].tolist() == [0.7, 0.95]
    assert "hp.tau" not in table.columns  # the same in both runs
    assert [n.split("_")[-1] for n in sw.names] == ["beta1-0.7", "beta1-0.95"]
    # the report names its variants by the hyper-parameter
    md = Path(fj.report(tmp_path / "s", tmp_path / "rep")["markdown"]).read_text()
    assert f"| {YOGI} (beta1=0.7) |" in md and f"| {YOGI} (beta1=0.95) |" in md


def test_hp_is_traced_the_same_shapes_whatever_its_value():
    from fedalf_jax.experiment.build import hparams
    from fedalf_jax.experiment.sweep_plan import static_key
    a, b = _cfg(ADAM, hp={"beta1": 0.5}), _cfg(ADAM, hp={"beta1": 0.6, "tau": 1.0})
    assert static_key(a) == static_key(b)
    ha, hb = hparams(a), hparams(b)
    assert jax.tree_util.tree_structure(ha) == jax.tree_util.tree_structure(hb)
    assert float(ha.own["beta1"]) == pytest.approx(0.5) and float(hb.own["tau"]) == 1.0
    assert float(ha.own["tau"]) == pytest.approx(1e-3)  # the declared default filled in
    assert all(jnp.asarray(x).dtype == jnp.float32 for x in jax.tree_util.tree_leaves(ha.own))


# ---- recorded: config.json, the identity, --resume ---------------------------------------------------

def test_config_json_and_the_identity_record_the_resolved_values(tmp_path):
    cfg = _cfg(ADAM, rounds=1, hp={"beta1": 0.5}, out=str(tmp_path / "r"))
    want = {"beta1": 0.5, "beta2": 0.99, "tau": 0.001}
    assert cfg.resolved_hp == want and cfg.identity()["hp"] == want
    fj.run(cfg, progress=False)
    assert json.loads((tmp_path / "r" / "config.json").read_text())["hp"] == want
    assert fj.load(tmp_path / "r").config.resolved_hp == want
    # spelling a default is the same run; another value is another one
    same = _cfg(ADAM, rounds=1, hp={"beta1": 0.5, "tau": 0.001})
    assert same.identity() == _cfg(ADAM, rounds=1, hp={"beta1": 0.5}).identity()
    assert _cfg(ADAM, rounds=1).identity()["hp"] == {"beta1": 0.9, "beta2": 0.99, "tau": 0.001}
    assert hash(same) == hash(_cfg(ADAM, rounds=1, hp={"tau": 0.001, "beta1": 0.5}))  # a Config stays hashable


def test_builtins_have_no_own_hyperparameters_and_unchanged_files():
    """A built-in's config.json, sweep.json and identity carry no ``hp`` (so its old checkpoints' identities
    are today's), and its HParams have today's 11 leaves."""
    from fedalf_jax.experiment.build import hparams
    cfg = fj.Config(algorithm="fedalf", dataset="synthetic", model="mlp")
    assert "hp" not in cfg.to_dict() and "hp" not in cfg.identity() and cfg.resolved_hp == {}
    hp = hparams(cfg)
    assert len(jax.tree_util.tree_leaves(hp)) == 11 and len(hp.own) == 0
    assert jax.tree_util.tree_leaves(hp) == jax.tree_util.tree_leaves(hp._replace(own={}))


def test_resume_refuses_a_changed_value_and_accepts_the_same_one(tmp_path):
    out = tmp_path / "r"
    fj.run(_cfg(ADAM, rounds=1, hp={"beta1": 0.5}, out=str(out)), progress=False)
    with pytest.raises(fj.ConfigError, match=r"written by another configuration \(hp .*'beta1': 0\.5.* -> "
                                             r".*'beta1': 0\.6") as e:
        fj.run(_cfg(ADAM, rounds=2, hp={"beta1": 0.6}, out=str(out)), progress=False, resume=True)
    assert "\n" not in str(e.value)
    res = fj.run(_cfg(ADAM, rounds=2, hp={"beta1": 0.5, "beta2": 0.99}, out=str(out)), progress=False, resume=True)
    whole = fj.run(_cfg(ADAM, rounds=2, hp={"beta1": 0.5}), progress=False)
    chex.assert_trees_all_equal(dict(res.model), dict(whole.model))


def _cli(*args):
    """``fedalf ARGS`` by the CLI's main in this process (examples/ is on the path): its exit status, stdout, stderr."""
    import contextlib
    import io
    import types
    from fedalf_jax.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as e:  # argparse's own errors exit, as the process would
            code = e.code
    return types.SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


_SMALL = ["--dataset", "synthetic", "--model", "mlp", "--clients", "4", "--clients-per-round", "2",
          "--synthetic-train", "80", "--synthetic-test", "40", "--eval-every", "1", "--no-progress"]


def test_the_cli_sets_records_and_guards_an_own_hyperparameter(tmp_path):
    out = str(tmp_path / "r")
    p = _cli("run", "--algorithm", ADAM, *_SMALL, "--rounds", "1", "--hp", "beta1=0.5", "tau=0.01", "--out", out)
    assert p.returncode == 0, p.stderr
    assert json.loads(Path(out, "config.json").read_text())["hp"] == {"beta1": 0.5, "beta2": 0.99, "tau": 0.01}
    p = _cli("run", "--algorithm", ADAM, *_SMALL, "--rounds", "2", "--resume", "--hp", "beta1=0.6", "--out", out)
    assert p.returncode == 2 and p.stderr.strip().splitlines() == [
        f"fedalf run: error: --resume continues the run in {out} as configured there; only --rounds, the cadences, "
        f"--log and --data-dir may change, not --hp beta1 (0.5 there, 0.6 given)"]
    # the value it ran with, and a default spelled out (beta2), are the same run: accepted
    p = _cli("run", "--algorithm", ADAM, *_SMALL, "--rounds", "2", "--resume", "--hp", "beta1=0.5", "--hp",
             "beta2=0.99", "--out", out)
    assert p.returncode == 0, p.stderr
    assert list(fj.load(out).metrics["round"]) == [0, 1, 2]


@pytest.mark.parametrize("flags, message", [
    (["--hp", "gamma=1"], f"fedalf run: error: hp 'gamma': algorithm '{ADAM}' has no hyper-parameter 'gamma'; it "
                          f"declares beta1, beta2, tau"),
    (["--hp", "beta1=x"], "fedalf run: error: argument --hp: beta1: 'x' is not a number"),
    (["--hp", "beta1"], "fedalf run: error: argument --hp: expected NAME=VALUE (e.g. beta1=0.9), got 'beta1'"),
    (["--hp", "beta1=0.9,0.99"], "fedalf run: error: argument --hp: beta1: '0.9,0.99' is not a number (several "
                                 "values: fedalf sweep)"),
    (["--hp", "beta1=nan"], "fedalf run: error: hp 'beta1' must be a finite number, got float nan"),
])
def test_a_wrong_hp_flag_is_one_line(tmp_path, flags, message):
    p = _cli("run", "--algorithm", ADAM, *_SMALL, "--rounds", "1", *flags, "--out", str(tmp_path / "r"))
    assert p.returncode == 2 and p.stderr.strip().splitlines() == [message], p.stderr


def test_the_cli_sweeps_an_own_hyperparameter_in_one_program(tmp_path):
    out = tmp_path / "s"
    p = _cli("sweep", "--algorithm", YOGI, *_SMALL, "--rounds", "2", "--hp", "beta1=0.7,0.95", "tau=0.05",
             "--out", str(out))
    assert p.returncode == 0, p.stderr
    plan = json.loads((out / "sweep.json").read_text())
    assert plan["continuous"] == ["hp.beta1"]
    assert [r["name"] for r in plan["runs"]] == ["examples.fedadam-fedyogi_beta1-0.7",
                                                "examples.fedadam-fedyogi_beta1-0.95"]
    assert [r["config"]["hp"] for r in plan["runs"]] == [{"beta1": b, "beta2": 0.99, "tau": 0.05} for b in (0.7, 0.95)]
    assert "sweep chunk 2:" in p.stderr  # both runs in one program call
    p = _cli("sweep", "--algorithm", YOGI, *_SMALL, "--rounds", "2", "--hp", "beta1=0.7,0.95", "tau=0.05",
             "--out", str(out), "--resume")
    assert p.returncode == 0, p.stderr
    p = _cli("sweep", "--algorithm", YOGI, *_SMALL, "--rounds", "2", "--hp", "beta1=0.7,0.9", "tau=0.05",
             "--out", str(out), "--resume")
    assert p.returncode == 2 and "the options describe other runs than the sweep" in p.stderr


# ---- the declaration: one-line errors ----------------------------------------------------------------

def _upload(theta, w, w_tilde, state, hp, lr_t):
    return jax.tree_util.tree_map(lambda t, u: t - u, theta, w_tilde), state


def _server(s):
    return jax.tree_util.tree_map(lambda t, d: t - s.hp.own["step"] * jnp.mean(d, 0), s.theta, s.deltas), s.sstate, {}


@pytest.mark.parametrize("hparams, match", [
    ({"lr": 0.1}, r"algorithm 'x': hparams: the name 'lr' is one of fj.HParams' own fields \(lr, lr_decay, .*own, fed\); "
                  r"choose another name"),
    ({"1b": 0.1}, r"algorithm 'x': hparams: the name '1b' is not a Python identifier"),
    ({"b": "0.1"}, r"algorithm 'x': hparams: the default of 'b' must be a finite number, got str '0.1'"),
    ({"b": float("inf")}, r"algorithm 'x': hparams: the default of 'b' must be a finite number, got float inf"),
    (0.1, r"algorithm 'x': hparams must be a dict of name to default value"),
])
def test_a_wrong_declaration_is_one_line(hparams, match):
    with pytest.raises(fj.ConfigError, match=match) as e:
        fj.Algorithm("x", server=_server, upload=_upload, hparams=hparams)
    assert "\n" not in str(e.value)


def test_a_declared_default_is_normalised_and_the_algorithm_stays_hashable():
    a = fj.Algorithm("x", server=_server, upload=_upload, hparams={"step": 1, "other": np.float32(0.5)})
    assert a.hparams == (("step", 1.0), ("other", 0.5)) and a.hparam_defaults == {"step": 1.0, "other": 0.5}
    hash(a)


def test_reading_an_undeclared_name_is_one_line():
    fj.register_algorithm("own_undeclared", lambda: fj.Algorithm("own_undeclared", server=_server, upload=_upload,
                                                                 hparams={"stride": 1.0}))
    with pytest.raises(fj.ConfigError, match=r"hp.own\['step'\]: the algorithm declares no hyper-parameter 'step' "
                                             r"\(it declares: stride;") as e:
        fj.run(_cfg("own_undeclared", rounds=1), progress=False)
    assert "\n" not in str(e.value)


def test_a_user_algorithm_reads_its_own_value():
    fj.register_algorithm("own_step", lambda: fj.Algorithm("own_step", server=_server, upload=_upload,
                                                           hparams={"step": 1.0}))
    half = fj.run(_cfg("own_step", rounds=1, hp={"step": 0.5}), progress=False)
    whole = fj.run(_cfg("own_step", rounds=1), progress=False)
    b = np.zeros(3)
    d = np.mean([b - _local(b, i, 0.5) for i in range(3)], axis=0)
    np.testing.assert_allclose(_b(half), -0.5 * d, rtol=0, atol=1e-6)
    np.testing.assert_allclose(_b(whole), -1.0 * d, rtol=0, atol=1e-6)


def test_a_factory_that_needs_the_layers_to_declare_is_refused_in_one_line():
    def factory(layer_of):
        if layer_of is None:
            raise TypeError("needs the layers")
        return fj.Algorithm("own_layers", server=_server, upload=_upload, hparams={"step": 1.0})
    fj.register_algorithm("own_layers", factory)
    with pytest.raises(fj.ConfigError, match=r"algorithm 'own_layers' declares the hyper-parameters step when built "
                                             r"for the model, but none when its factory is called with layer_of=None"):
        fj.run(_cfg("own_layers", rounds=1), progress=False)


def test_a_grid_over_algorithms_fills_in_each_ones_own_defaults(tmp_path):
    """``fj.sweep`` from a FedAdam config over ``algorithm``: FedAvg gets no ``hp`` (FedAdam's defaults are
    not carried over), FedYogi its own defaults."""
    from fedalf_jax.experiment.sweep_plan import expand
    cfg = _cfg(ADAM)
    base = {k: v for k, v in cfg.to_dict().items() if k not in ("seed", "out")}
    base["hp"] = dict(cfg.hp)
    got = expand(base, {"algorithm": ["fedavg", YOGI]}, [0])
    assert [c.to_dict().get("hp") for c in got] == [None, {"beta1": 0.9, "beta2": 0.99, "tau": 0.001}]
    # the run names: only options the runs differ in, an own hyper-parameter only among runs that have it
    from fedalf_jax.experiment.sweep_plan import run_names
    assert run_names(got) == ["fedavg", "examples.fedadam-fedyogi"]
    yogi = expand({**base, "algorithm": YOGI, "hp": None}, {"hp.beta1": [0.5, 0.9]}, [0])
    assert run_names([got[0], *yogi]) == ["fedavg", "examples.fedadam-fedyogi_beta1-0.5", "examples.fedadam-fedyogi_beta1-0.9"]
    with pytest.raises(fj.ConfigError, match="grid option"):
        fj.sweep(cfg, out=tmp_path / "s", grid={"beta1": [0.9]}, progress=False)
