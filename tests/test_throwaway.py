"""Issue 36, item 10: a throw-away run or sweep keeps no checkpoints (``--checkpoint-every never``): not one
is written, not even at the end; the summary and the metrics are; a ``--resume`` of an ended run has
nothing to do, and one of an interrupted run says that it starts again from round 0 (and does).

Expectations are independent of the code: the files in the folders (no name holding ``checkpoint``), the
rounds in metrics.csv, the summary's status, the files' modification times, the words of one line."""

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest

from fedalf_jax.cli import main
from fedalf_jax.experiment import loop
from fedalf_jax.experiment.config import Config, ConfigError
from fedalf_jax.experiment.rundir import RunDir

TINY = ["--dataset", "synthetic", "--model", "mlp", "--clients", "4", "--clients-per-round", "2",
        "--synthetic-train", "200", "--synthetic-test", "80", "--rounds", "3", "--eval-every", "1",
        "--algorithm", "fedavg", "--no-progress"]
NEVER = ["--checkpoint-every", "never"]


def _rounds(folder: Path) -> list:
    return [int(r) for r in RunDir(folder).metrics()["round"]]


def _checkpoints(root: Path) -> list:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if "checkpoint" in p.name)


def _stamps(root: Path) -> dict:
    """Each file's modification time (the lock file aside: taking the folder touches it)."""
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")
            if p.is_file() and p.name != ".fedalf.lock"}


def _sigterm_at_round_2(monkeypatch):
    """SIGTERM to this process as round 2's evaluation is recorded; returns the real ``loop.eval_row``."""
    real = loop.eval_row

    def row(t, *args, **kw):
        if t == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(t, *args, **kw)

    monkeypatch.setattr(loop, "eval_row", row)
    return real


def test_never_is_a_policy_and_a_typo_names_it():
    assert Config(checkpoint_every="never").checkpoint_policy == ("never", 0)
    assert Config(checkpoint_every="never").keeps_checkpoints is False
    assert Config().keeps_checkpoints is True
    with pytest.raises(ConfigError, match="or never"):
        Config(checkpoint_every="nevr").validated()


def test_a_run_that_keeps_none_writes_none_and_a_resume_has_nothing_to_do(tmp_path, capsys, compile_cache):
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["run", *TINY, *NEVER, "--out", str(a)]) == 0
    assert _checkpoints(a) == []  # not even at the end
    s = json.loads((a / "summary.json").read_text())
    assert s["status"] == "done" and s["round"] == 3 and _rounds(a) == [0, 1, 2, 3]
    assert main(["run", *TINY, "--out", str(b)]) == 0  # the same run, keeping its checkpoints
    assert _checkpoints(b) and np.array_equal(RunDir(a).metrics()["mean_acc"], RunDir(b).metrics()["mean_acc"])
    before = _stamps(a)
    capsys.readouterr()
    assert main(["run", "--resume", "--out", str(a), "--no-progress"]) == 0
    assert _stamps(a) == before  # ended: nothing ran, nothing was rewritten
    assert main(["run", "--resume", "--out", str(a), "--rounds", "4", "--no-progress"]) == 0  # longer: from 0
    assert "(it keeps none: checkpoint_every=never): starting from round 0" in capsys.readouterr().err
    assert _rounds(a) == [0, 1, 2, 3, 4] and _checkpoints(a) == []


def test_a_signal_to_a_run_that_keeps_none_says_a_resume_starts_it_again(tmp_path, capsys, monkeypatch,
                                                                            compile_cache):
    a = tmp_path / "a"
    real = _sigterm_at_round_2(monkeypatch)
    assert main(["run", *TINY, *NEVER, "--rounds", "6", "--out", str(a)]) == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert "then saving its metrics (no checkpoint: --checkpoint-every never; SIGTERM again to leave now)" in err, err
    assert ("interrupted by SIGTERM after round 2: the metrics up to round 2 are saved, and no checkpoint "
            "(--checkpoint-every never):") in err and "starts it again from round 0" in err, err
    assert _checkpoints(a) == [] and not (a / "summary.json").exists() and _rounds(a) == [0, 1, 2]
    monkeypatch.setattr(loop, "eval_row", real)
    assert main(["run", "--resume", "--out", str(a), "--no-progress"]) == 0
    assert _rounds(a) == [0, 1, 2, 3, 4, 5, 6] and _checkpoints(a) == []
    assert json.loads((a / "summary.json").read_text())["status"] == "done"


def test_a_sweep_that_keeps_none_writes_none_and_its_resume_has_nothing_to_do(tmp_path, compile_cache):
    sw = tmp_path / "sw"
    assert main(["sweep", *TINY, *NEVER, "--seeds", "0", "1", "--out", str(sw)]) == 0
    assert _checkpoints(sw) == []
    for name in ("fedavg_seed0", "fedavg_seed1"):
        assert json.loads((sw / name / "summary.json").read_text())["status"] == "done", name
        assert _rounds(sw / name) == [0, 1, 2, 3], name
    before = _stamps(sw)
    assert main(["sweep", "--resume", "--out", str(sw), "--no-progress"]) == 0
    assert _stamps(sw) == before


def test_a_signal_to_a_sweep_that_keeps_none_says_its_unended_runs_start_again(tmp_path, capsys, monkeypatch,
                                                                                  compile_cache):
    sw = tmp_path / "sw"
    _sigterm_at_round_2(monkeypatch)
    assert main(["sweep", *TINY, *NEVER, "--seeds", "0", "--out", str(sw)]) == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert ("fedalf sweep: interrupted by SIGTERM: its runs keep no checkpoints (--checkpoint-every never): the ended "
            "runs are kept, the others start again from round 0 with:") in err, err
    assert _checkpoints(sw) == [] and _rounds(sw / "fedavg") == [0, 1, 2]
