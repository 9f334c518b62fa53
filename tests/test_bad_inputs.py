"""Every public entry point and flag tried with bad values: a clear one-line error, never a traceback
from deep inside JAX, never a silently wrong number; and --resume on a run killed before its first
checkpoint."""

import json
import os
import pickle

import jax.numpy as jnp
import numpy as np
import pytest

from fedalf_jax.cli import main
from fedalf_jax.experiment.rundir import RunDir
from fedalf_jax.sim.fairness import fair_direction
from fedalf_jax.experiment.metrics import fairness_angle
from fedalf_jax.sim.qp import solve_simplex_qp

TINY = ["--dataset", "synthetic", "--model", "mlp", "--clients", "4", "--clients-per-round", "2",
        "--synthetic-train", "200", "--synthetic-test", "80", "--rounds", "2", "--eval-every", "1",
        "--algorithm", "fedavg", "--no-progress"]


@pytest.mark.parametrize("call, needle", [
    (lambda: solve_simplex_qp(jnp.ones((3, 4))), "square"),
    (lambda: solve_simplex_qp(jnp.ones((3,))), "square"),
    (lambda: solve_simplex_qp(jnp.full((3, 3), jnp.nan)), "NaN"),
    (lambda: fairness_angle(jnp.zeros((0,))), "at least one"),
    (lambda: fairness_angle(jnp.array([0.5, jnp.nan])), "finite"),
    (lambda: fairness_angle(jnp.array([-0.5, 0.5])), "non-negative"),
    (lambda: fair_direction({"w": jnp.ones((3, 4))}, jnp.ones((2,))), "losses must have shape"),
    (lambda: fair_direction({"w": jnp.ones((3, 4)), "b": jnp.ones((2,))}, jnp.ones((3,))), "leading client axis"),
    (lambda: fair_direction({"w": jnp.ones((3, 4))}, jnp.ones((3,)), history={"w": jnp.ones((5, 3))}), "history"),
])
def test_public_functions_refuse_bad_input(call, needle):
    with pytest.raises(ValueError, match=needle):
        call()


def _cli(capsys, argv):
    try:
        code = main(argv)
    except SystemExit as e:  # argparse
        code = e.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize("extra, needle", [
    (["--clients", "0"], "clients must be a positive integer"),
    (["--clients-per-round", "0"], "clients_per_round must be a positive integer"),
    (["--local-epochs", "0"], "local_epochs"),
    (["--batch-size", "-5"], "batch_size"),
    (["--rounds", "0"], "rounds"),
    (["--eval-every", "0"], "eval_every"),
    (["--train-loss-every", "0"], "train_loss_every"),
    (["--checkpoint-every", "soon"], "checkpoint_every"),
    (["--checkpoint-every", "0s"], "checkpoint_every"),
    (["--lr", "inf"], "lr must be a positive"),
    (["--lr-decay", "1.5"], "lr_decay must be in (0, 1]"),
    (["--server-lr", "-1"], "server_lr"),
    (["--server-lr-decay", "0"], "server_lr_decay"),
    (["--mu", "-1"], "mu must be a non-negative"),
    (["--rho", "0"], "rho must be a positive"),
    (["--q", "nan"], "q must be a non-negative"),
    (["--alpha", "0", "--partition", "dirichlet"], "alpha"),
    (["--merge-tol", "-1"], "merge_tol"),
    (["--seed", "-1"], "seed must be a non-negative"),
    (["--synthetic-train", "0"], "synthetic_train"),
    (["--ldp", "adaptive", "--epsilon", "-1"], "epsilon"),
    (["--ldp", "adaptive", "--epsilon", "1e-45"], "epsilon"),
    (["--dp", "gaussian", "--delta", "1.25"], "delta"),
    (["--dp", "gaussian", "--clip", "-1"], "clip"),
    (["--dp", "gaussian", "--ldp", "adaptive"], "both on"),
    (["--model", "cnn_bn", "--ldp", "adaptive"], "batch-norm"),
    (["--neighbouring", "other"], "invalid choice"),
    (["--history", "maybe"], "expected on/off"),
    (["--out", "/proc/fedalf-cannot/x"], "cannot create"),
    (["--data-dir", "/x"], "data-dir has no meaning"),
])
def test_every_run_flag_refuses_bad_values_in_one_line(capsys, extra, needle):
    code, err = _cli(capsys, ["run", *TINY, *extra])
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert needle in err, err


@pytest.mark.parametrize("argv, needle", [
    (["bench", *TINY[:-1], "--repeats", "0"], "--repeats"),
    (["bench", *TINY[:-1], "--sweep-width", "0"], "--sweep-width"),
    (["bench", *TINY[:-1], "--json", "/proc/fedalf-cannot/bench.json"], "cannot create its folder"),  # before
    (["bench", *TINY[:-1], "--json", "/"], "--json / is a folder"),  # the measuring, not a traceback after it
    (["report", "/nonexistent/runs", "--out", "/tmp/x"], "does not exist"),
    (["sweep", *TINY, "--out", "/proc/fedalf-cannot/x"], "cannot create"),
])
def test_other_commands_refuse_bad_values_in_one_line(capsys, argv, needle):
    code, err = _cli(capsys, argv)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert needle in err, err


class _RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_cifar_pickle_that_runs_code_is_refused_in_one_line(tmp_path, capsys):
    folder = tmp_path / "data" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        (folder / name).write_bytes(b"")
    (folder / "data_batch_1").write_bytes(pickle.dumps({b"data": _RunsCode(tmp_path / "pwned")}, protocol=2))
    code, err = _cli(capsys, ["run", "--dataset", "cifar10", "--data-dir", str(tmp_path / "data"), "--model", "mlp",
                              "--rounds", "1", "--no-progress", "--out", str(tmp_path / "out")])
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "data_batch_1 refers to posix.system" in err or "data_batch_1 refers to os.system" in err, err
    assert not (tmp_path / "pwned").exists()


def test_resume_before_anything_was_written_starts_from_round_zero(tmp_path, capsys, compile_cache):
    # killed before config.json: the job script's flags describe the run
    a = tmp_path / "a"
    assert main(["run", *TINY, "--resume", "--out", str(a)]) == 0
    assert "nothing to resume" in capsys.readouterr().err  # it says it starts from round 0
    assert RunDir(a).status() == "done" and list(RunDir(a).metrics()["round"]) == [0, 1, 2]
    # killed after config.json but before the first checkpoint
    b = tmp_path / "b"
    b.mkdir()
    (b / "config.json").write_text((a / "config.json").read_text().replace(str(a), str(b)))
    assert main(["run", *TINY, "--resume", "--out", str(b)]) == 0
    np.testing.assert_array_equal(RunDir(a).metrics()["mean_acc"], RunDir(b).metrics()["mean_acc"])
    capsys.readouterr()
    # a config in DIR that differs from the flags is still a one-line error
    code, err = _cli(capsys, ["run", *TINY, "--lr", "0.2", "--resume", "--out", str(b)])
    assert code == 2 and "may change, not lr" in err and len(err.strip().splitlines()) == 1, err
    # resuming a finished run with more rounds continues it
    assert main(["run", *TINY, "--rounds", "3", "--resume", "--out", str(b)]) == 0
    assert list(RunDir(b).metrics()["round"]) == [0, 1, 2, 3]
    assert json.loads((b / "summary.json").read_text())["round"] == 3


BIG = 10 ** 400  # a JSON integer no float holds: math.isfinite(BIG) raises OverflowError


@pytest.mark.parametrize("key, value, needle", [
    *[(k, BIG, f"{k} must be a positive finite number") for k in ("lr", "alpha", "epsilon", "clip", "rho",
                                                                  "server_lr")],
    *[(k, BIG, f"{k} must be a non-negative finite number") for k in ("mu", "q", "merge_tol")],
    ("lr_decay", BIG, "lr_decay must be a positive finite number"),
    ("delta", BIG, "delta must be in (0, 1)"),
    ("rounds", BIG, "rounds must be a positive integer"),
    ("seed", BIG, "seed must be a non-negative integer"),
    ("seed", 2 ** 32, "seed must be a non-negative integer (at most 4294967295)"),  # its key would be seed 0's
    ("hp", {"beta1": BIG}, "hp 'beta1' must be a finite number"),
], ids=lambda v: "BIG" if v is BIG else ("hp-BIG" if isinstance(v, dict) else None))
def test_config_integers_too_large_for_a_float_are_one_line(tmp_path, capsys, key, value, needle):
    """Issue 36.6: ``"epsilon": 1000…0`` (401 digits) in --config ended in OverflowError; the option is named
    and the number is not printed whole."""
    cfg = tmp_path / "c.json"
    algorithm = {"algorithm": "examples.fedadam:fedadam"} if key == "hp" else {}
    cfg.write_text(json.dumps({**algorithm, key: value}))
    code, err = _cli(capsys, ["run", "--config", str(cfg), "--dataset", "synthetic", "--out", str(tmp_path / "o")])
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert needle in err and len(err) < 300, err
    assert not (tmp_path / "o").exists()


def test_config_integer_past_python_digit_limit_is_one_line(tmp_path, capsys):
    cfg = tmp_path / "c.json"
    cfg.write_text('{"epsilon": 1' + "0" * 5000 + "}")
    code, err = _cli(capsys, ["run", "--config", str(cfg), "--dataset", "synthetic", "--out", str(tmp_path / "o")])
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "cannot be read" in err and "4300 digits" in err, err
