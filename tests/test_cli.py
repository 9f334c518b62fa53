"""The command line: bad input is one line on stderr and a non-zero exit, never a traceback."""

import json
import subprocess
import sys

import pytest

from fedalf_jax.cli import main

TINY = ["--dataset", "synthetic", "--model", "mlp", "--clients", "4", "--clients-per-round", "2",
        "--synthetic-train", "200", "--synthetic-test", "80", "--rounds", "2", "--eval-every", "1",
        "--algorithm", "fedavg", "--no-progress"]


def _err(capsys, argv):
    try:
        code = main(argv)
    except SystemExit as e:  # argparse
        code = e.code
    err = capsys.readouterr().err
    return code, err


@pytest.mark.parametrize("argv, needle", [
    (["run", "--algorithm", "fedsgd"], "unknown algorithm 'fedsgd'"),
    (["run", "--rounds", "-3"], "rounds must be a positive integer"),
    (["run", "--rounds", "ten"], "invalid int value"),
    (["run", "--clients", "5", "--clients-per-round", "10"], "exceeds clients"),
    (["run", "--lr", "-0.1"], "lr must be a positive"),
    (["run", "--lr", "nan"], "lr must be a positive"),
    (["run", "--config", "/nonexistent/cfg.json"], "does not exist"),
    (["run", "--ldp", "adaptive", "--epsilon", "0"], "epsilon"),
    (["run", "--dp", "gaussian", "--delta", "1.5"], "delta"),
    (["run", "--algorithm", "fedlf", "--ldp", "adaptive"], "client_grad"),
    (["run", "--dataset", "fmnist", "--data-dir", "/nonexistent/dir", "--rounds", "1"], "not found"),
    (["run", *TINY, "--clients", "500", "--clients-per-round", "2"], "client"),
    (["run", "--resume"], "--resume needs --out"),
])
def test_bad_input_is_one_line(capsys, argv, needle):
    code, err = _err(capsys, argv)
    assert code != 0
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert needle in err


def test_bad_config_files(capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, err = _err(capsys, ["run", "--config", str(bad)])
    assert code == 2 and "not valid JSON" in err and len(err.strip().splitlines()) == 1
    unk = tmp_path / "unk.json"
    unk.write_text(json.dumps({"algorithm": "fedavg", "learning_rate": 0.1}))
    code, err = _err(capsys, ["run", "--config", str(unk)])
    assert code == 2 and "learning_rate" in err


def test_config_file_and_flag_override(capsys, tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"algorithm": "fedprox", "mu": 0.1, "rounds": 5}))
    out = tmp_path / "run"
    assert main(["run", "--config", str(cfg), *TINY, "--out", str(out)]) == 0
    saved = json.loads((out / "config.json").read_text())
    assert saved["algorithm"] == "fedavg" and saved["mu"] == 0.1 and saved["rounds"] == 2
    assert "mean_acc" in capsys.readouterr().out


def test_console_script_bad_input_no_traceback():
    p = subprocess.run([sys.executable, "-m", "fedalf_jax.cli", "run", "--partition", "pat9"],
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_ldp_with_local_dual_warns_in_one_line(capsys, tmp_path):
    import warnings
    with warnings.catch_warnings():  # independent of the environment's filters (PYTHONWARNINGS=ignore)
        warnings.simplefilter("default")
        assert main(["run", *TINY, "--algorithm", "fedalf", "--ldp", "adaptive", "--server-target", "increment",
                     "--rounds", "1", "--out", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert "fedalf: warning: the privacy guarantee does not hold" in err and "dual_from=local" in err
    assert "Traceback" not in err
