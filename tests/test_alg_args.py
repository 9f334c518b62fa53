"""Issue 48 item 5: an algorithm factory's arguments from the CLI and configs (``--alg-arg K=2``,
``Config.alg_args``), and examples/fedgkd.py, whose K (the number of past global models averaged into the
teacher) is one.

Before, a factory was called with no arguments (or ``layer_of``): FedGKD's K could be given only by
writing another factory, ``--alg-arg`` did not exist and ``Config(alg_args=...)`` was an unknown option.
Now the arguments are the factory's keywords, recorded in config.json, part of the run's identity (a resume
with another value is refused in one line), swept as a static option (one program per value), named in the
report's variant, refused by a built-in algorithm and, when the factory does not take them, in one line
naming the factory, the argument and its parameters."""

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import fedalf_jax as fj
from fedalf_jax.cli import _alg_arg_value, main
from fedalf_jax.experiment.sweep_plan import static_key

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import cli, one_line_error  # noqa: E402
from test_examples_client import (_backward, _cfg, _close_tree, _fedavg, _flax, _forward, _rows,  # noqa: E402
                                  _softmax, _theta0)

GKD = "examples.fedgkd:fedgkd"
SYNTH = ["--dataset", "synthetic", "--model", "mlp", "--clients", "4", "--clients-per-round", "2",
         "--synthetic-train", "80", "--synthetic-test", "40", "--batch-size", "20", "--eval-every", "1",
         "--no-progress"]


# ---- FedGKD against two rounds by hand in float64 ------------------------------------------------------------

def _fedgkd_by_hand(K, gamma, rounds=2, lr=0.3, steps=2):
    """Each client: ``steps`` full-batch steps on CE + (γ/2) KL(p_T ‖ p_S), the teacher the mean of the last
    K global models (θ_0 … θ_t, fewer at first); the server FedAvg's (η_g 0.8)."""
    theta = _theta0()
    past = [theta]
    for _ in range(rounds):
        teacher = {k: np.mean([p[k] for p in past[-K:]], axis=0) for k in theta}
        ws = []
        for i in range(3):
            x, y = _rows(i)
            p_t = _softmax(_forward(teacher, x)[0])
            w = dict(theta)
            for _ in range(steps):
                logits, _, cache = _forward(w, x, train=True)
                p_s = _softmax(logits)
                dlogits = (p_s - np.eye(3)[y]) / len(y) + 0.5 * gamma * (p_s - p_t) / len(y)
                g = _backward(w, cache, dlogits)
                w = {k: w[k] - lr * g[k] for k in w}
            ws.append(w)
        theta = _fedavg(theta, ws)
        past.append(theta)
    return theta


@pytest.mark.parametrize("K", [1, 2])
def test_fedgkd_matches_two_rounds_by_hand(K):
    """K = 1: the teacher is θ_t; K = 2: in round 2 it is (θ_0 + θ_1)/2, so the two runs differ."""
    res = fj.run(_cfg(GKD, alg_args={"K": K}, hp={"gamma": 0.7}), progress=False)
    theta = _fedgkd_by_hand(K, 0.7)
    _close_tree(res.model["params"], _flax(theta))
    other = _fedgkd_by_hand(3 - K, 0.7)
    assert max(np.abs(theta[k] - other[k]).max() for k in theta) > 1e-4  # K is read
    plain = _fedgkd_by_hand(K, 0.0)  # and the distillation term is
    assert max(np.abs(theta[k] - plain[k]).max() for k in theta) > 1e-4


def test_fedgkd_runs_from_its_docstring_line(tmp_path):
    """The docstring's ``fedalf run`` line, on small synthetic data and two rounds."""
    import examples.fedgkd as ex
    line = next(l.strip() for l in ex.__doc__.splitlines() if l.strip().startswith("fedalf run"))
    argv = re.split(r"\s+#", line)[0].split()[1:]
    assert argv[argv.index("--alg-arg") + 1] == "K=2" and "--hp" in argv
    argv[argv.index("--rounds") + 1] = "2"
    assert main([*argv, *[a for a in SYNTH if a != "--model" and a != "mlp"], "--out", str(tmp_path / "r")]) == 0
    res = fj.load(tmp_path / "r")
    assert res.status == "done" and res.config.alg_args == {"K": 2} and np.isfinite(res.metrics["test_loss"]).all()


# ---- recorded, part of the identity, refused on resume ------------------------------------------------------

def test_config_json_records_it_and_resume_with_another_value_is_refused(tmp_path, capsys):
    out = str(tmp_path / "r")
    code, _ = cli(capsys, ["run", "--algorithm", GKD, "--alg-arg", "K=2", "--rounds", "2", *SYNTH, "--out", out])
    assert code == 0
    assert json.loads((tmp_path / "r" / "config.json").read_text())["alg_args"] == {"K": 2}
    code, err = cli(capsys, ["run", "--resume", "--out", out, "--rounds", "3", "--alg-arg", "K=3"])
    one_line_error(code, err, "--resume", "--alg-arg K (2 there, 3 given)")
    code, _ = cli(capsys, ["run", "--resume", "--out", out, "--rounds", "3", "--alg-arg", "K=2"])  # the same: goes on
    assert code == 0 and fj.load(out).metrics["round"].tolist() == [0, 1, 2, 3]
    a, b = fj.Config(algorithm=GKD, alg_args={"K": 2}), fj.Config(algorithm=GKD, alg_args={"K": 3})
    assert a.identity()["alg_args"] == {"K": 2} and b.identity()["alg_args"] == {"K": 3}
    assert "alg_args" not in fj.Config(algorithm=GKD).to_dict()  # none given: config.json as before
    assert static_key(a) != static_key(b)  # a different program


# ---- swept: one program per value, each equal to its single run ------------------------------------------------

def test_a_sweep_over_K_equals_the_single_runs_and_the_report_names_K(tmp_path, capsys):
    out = tmp_path / "sw"
    code, _ = cli(capsys, ["sweep", "--algorithm", GKD, "--alg-arg", "K=1,2", "--hp", "gamma=0.5", "--rounds", "2",
                           *SYNTH, "--out", str(out)])
    assert code == 0
    runs = json.loads((out / "sweep.json").read_text())["runs"]
    assert sorted(r["config"]["alg_args"]["K"] for r in runs) == [1, 2]
    assert sorted(r["name"] for r in runs) == ["examples.fedgkd-fedgkd_K-1", "examples.fedgkd-fedgkd_K-2"]
    finals = []
    for r in runs:
        K = r["config"]["alg_args"]["K"]
        single = tmp_path / f"single{K}"
        code, _ = cli(capsys, ["run", "--algorithm", GKD, "--alg-arg", f"K={K}", "--hp", "gamma=0.5", "--rounds", "2",
                               *SYNTH, "--out", str(single)])
        assert code == 0
        swept, one = fj.load(out / r["dir"]), fj.load(single)
        for col in ("mean_acc", "test_loss"):
            np.testing.assert_array_equal(swept.metrics[col].to_numpy(), one.metrics[col].to_numpy())
        finals.append(float(one.metrics["test_loss"].iloc[-1]))
    assert finals[0] != finals[1]  # K is read: two different trajectories
    from fedalf_jax.experiment.explore import run_row
    from fedalf_jax.experiment.rundir import RunDir
    assert sorted(run_row(RunDir(out / r["dir"]))["arg.K"] for r in runs) == [1, 2]  # the notebook's run table
    rep = fj.report([out], out=tmp_path / "rep")
    md = Path(rep["markdown"]).read_text()
    assert f"{GKD} (K=1)" in md and f"{GKD} (K=2)" in md


# ---- the refusals: one line each ----------------------------------------------------------------------------

def test_an_argument_the_factory_does_not_take_is_one_line(capsys):
    code, err = cli(capsys, ["run", "--algorithm", GKD, "--alg-arg", "Q=2", "--rounds", "1", *SYNTH])
    one_line_error(code, err, GKD, "fedgkd(K=5)", "'Q'", "it takes K")
    code, err = cli(capsys, ["run", "--algorithm", "examples.feddyn:feddyn", "--alg-arg", "K=2", *SYNTH])
    one_line_error(code, err, "feddyn()", "'K'", "takes no arguments")
    with pytest.raises(fj.ConfigError, match=r"fedgkd\(K=5\) has no parameter 'Q'"):
        fj.Config(algorithm=GKD, alg_args={"Q": 2})
    with pytest.raises(fj.ConfigError, match="must be an int, a finite float, a bool or a string"):
        fj.Config(algorithm=GKD, alg_args={"K": [1, 2]})
    code, err = cli(capsys, ["run", "--algorithm", GKD, "--alg-arg", "K=2", "--alg-arg", "K=3", *SYNTH])
    one_line_error(code, err, "--alg-arg K is given twice")


def test_a_builtin_algorithm_refuses_it(tmp_path, capsys):
    code, err = cli(capsys, ["run", "--algorithm", "fedavg", "--alg-arg", "K=2", *SYNTH])
    one_line_error(code, err, "--alg-arg K=2", "fedavg is a built-in algorithm")
    code, err = cli(capsys, ["sweep", "--algorithm", "fedavg", "fedprox", "--alg-arg", "K=1,2", *SYNTH,
                             "--out", str(tmp_path / "s")])
    one_line_error(code, err, "--alg-arg K", "built-in algorithms")
    with pytest.raises(fj.ConfigError, match="built-in algorithm"):
        fj.Config(algorithm="fedalf", alg_args={"K": 2})


def test_a_factory_needing_an_argument_says_which(capsys):
    def needs(K):
        return fj.algorithms.fedavg()
    fj.register_algorithm("needs_k48", needs)
    with pytest.raises(fj.ConfigError, match=r"its factory needs\(K\) needs K; give --alg-arg K=VALUE"):
        fj.run(algorithm="needs_k48", dataset="synthetic", model="mlp", clients=4, clients_per_round=2, rounds=1,
               synthetic_train=80, synthetic_test=40, progress=False)
    assert fj.Config(algorithm="needs_k48", alg_args={"K": 1}).alg_args == {"K": 1}


def test_values_are_read_as_json_scalars():
    assert _alg_arg_value("K=2", many=False) == ("K", 2) and isinstance(_alg_arg_value("K=2", many=False)[1], int)
    assert _alg_arg_value("x=0.5", many=False) == ("x", 0.5)
    assert _alg_arg_value("on=true", many=False) == ("on", True)
    assert _alg_arg_value("name=abc", many=False) == ("name", "abc")
    assert _alg_arg_value('name="2"', many=False) == ("name", "2")
    assert _alg_arg_value("K=1,2", many=True) == ("K", [1, 2])
    import argparse
    for bad in ("K", "K=null", "K=[1]", "2=3"):
        with pytest.raises(argparse.ArgumentTypeError):
            _alg_arg_value(bad, many=False)


# ---- what a factory declares is read with its arguments ---------------------------------------------------------

def test_the_declarations_are_read_from_the_factory_called_with_the_arguments():
    """The algorithm built to read its declarations (hparams) is cached per name: the key includes the
    arguments, so K=2 declares w2 and K=3 w3 (before, the first one read served every K)."""
    def make(K=1):
        return fj.Algorithm(f"w{K}", server=fj.algorithms.weighted_mean_server, upload=fj.algorithms.model_upload,
                            hparams={f"w{K}": float(K)})
    fj.register_algorithm("declares_k48", make)
    assert fj.Config(algorithm="declares_k48").resolved_hp == {"w1": 1.0}
    assert fj.Config(algorithm="declares_k48", alg_args={"K": 2}).resolved_hp == {"w2": 2.0}
    assert fj.Config(algorithm="declares_k48", alg_args={"K": 3}, hp={"w3": 0.5}).resolved_hp == {"w3": 0.5}
    res = fj.run(algorithm="declares_k48", alg_args={"K": 2}, dataset="synthetic", model="mlp", clients=4,
                 clients_per_round=2, rounds=1, synthetic_train=80, synthetic_test=40, eval_every=1, progress=False)
    assert res.config.resolved_hp == {"w2": 2.0}


def test_fj_sweep_grids_arg_K_and_a_builtin_beside_takes_none(tmp_path):
    """``fj.sweep(grid={"arg.K": [1, 2]})`` (before: 'not config options'); a grid of algorithms with
    ``alg_args`` given: the user's runs get them, the built-in's none (before: the built-in refused them)."""
    from fedalf_jax.experiment.sweep_plan import expand
    small = dict(dataset="synthetic", model="mlp", clients=4, clients_per_round=2, rounds=1, synthetic_train=80,
                 synthetic_test=40, eval_every=1)
    fj.sweep(algorithm=GKD, grid={"arg.K": [1, 2]}, out=tmp_path / "s", progress=False, **small)
    runs = json.loads((tmp_path / "s" / "sweep.json").read_text())["runs"]
    assert [r["config"]["alg_args"] for r in runs] == [{"K": 1}, {"K": 2}]
    cfgs = expand({**small, "alg_args": {"K": 2}}, {"algorithm": ["fedavg", GKD]}, [0])
    assert [(c.algorithm, c.alg_args) for c in cfgs] == [("fedavg", {}), (GKD, {"K": 2})]
