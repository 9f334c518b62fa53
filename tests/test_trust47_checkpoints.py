"""Issue 47, items 6 and 16: a checkpoint older than a run's last round is never its model, a resume with
``checkpoint_every="never"`` never leaves the older checkpoint behind, an ended run is never re-opened by a
plain ``--resume``; the progress bar's last rate counts the rounds' own time, and the final checkpoint's
write has a stage of its own.

Expectations are independent of the code: the rounds in metrics.csv, the files' bytes (hashes), the rounds
named in one line, the rate a fake clock gives by hand, the words of the bar's line."""

import json
import re

import jax
import numpy as np
import pytest
from helpers import cli, hashes, one_line_error, rounds

import fedalf_jax as fj
from fedalf_jax.experiment.config import ConfigError
from fedalf_jax.experiment.progress import Progress
from fedalf_jax.experiment.rundir import RunDir

BASE = dict(algorithm="fedavg", dataset="synthetic", model="mlp", clients=4, clients_per_round=2,
            synthetic_train=200, synthetic_test=80, eval_every=1)


def _leaves(tree) -> list:
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


def _stale(out, *, never: bool = True, check=None):
    """The folder issue 47 item 6 found: done at round 6, its newest checkpoint of round 3 (a 3-round run with
    checkpoints continued to 6 with ``never`` before that was refused): a run of 6 rounds checkpointed every 3
    whose round-3 checkpoint replaces its last, and its config.json saying ``never``."""
    res = fj.run(fj.Config(rounds=6, checkpoint_every="3", out=str(out), **BASE), progress=False)
    got = check() if check is not None else None  # (before the folder is made stale)
    (out / "checkpoint.prev.npz").replace(out / "checkpoint.npz")  # round 3's, alone, as fj.run had left it
    if never:
        d = json.loads((out / "config.json").read_text())
        (out / "config.json").write_text(json.dumps({**d, "checkpoint_every": "never"}))
    return res, got


def test_the_model_of_a_checkpoint_older_than_the_last_round_is_refused(tmp_path, compile_cache):
    out = tmp_path / "a"
    whole = _stale(out, check=lambda: fj.load(out).model)  # the newest of round 6 there: the final model
    assert all(np.array_equal(a, b) for a, b in zip(_leaves(whole[1]), _leaves(whole[0].model)))
    stale = fj.load(out)
    assert stale.status == "done" and RunDir(out).checkpoint_rounds().keys() == {3}
    for what in ("model", "client_states", "server_state"):
        with pytest.raises(ConfigError) as e:
            getattr(fj.load(out), what)
        msg = str(e.value)
        assert "\n" not in msg and "of round 3" in msg and "last round 6 (done)" in msg, msg


def test_never_on_the_resume_of_a_run_with_checkpoints_is_refused_and_changes_nothing(tmp_path, capsys,
                                                                                          compile_cache):
    out = tmp_path / "a"
    fj.run(fj.Config(rounds=3, out=str(out), **BASE), progress=False)
    before = hashes(out)
    with pytest.raises(ConfigError) as e:
        fj.run(fj.Config(rounds=6, checkpoint_every="never", out=str(out), **BASE), progress=False, resume=True)
    assert "\n" not in str(e.value) and "newest of round 3" in str(e.value) and "--checkpoint-every" in str(e.value)
    assert hashes(out) == before
    code, err = cli(capsys, ["run", "--resume", "--out", str(out), "--rounds", "6", "--checkpoint-every", "never",
                             "--no-progress"])
    one_line_error(code, err, "newest of round 3", "last round 6", "--overwrite")
    assert hashes(out) == before
    # with its own cadence it goes on from round 3, and its model is round 6's
    res = fj.run(fj.Config(rounds=6, out=str(out), **BASE), progress=False, resume=True)
    assert rounds(out) == [0, 1, 2, 3, 4, 5, 6] and res.status == "done"
    assert all(np.array_equal(a, b) for a, b in zip(_leaves(fj.load(out).model), _leaves(res.model)))


def test_a_plain_resume_never_reopens_an_ended_run_whose_checkpoint_is_older(tmp_path, capsys, compile_cache):
    out = tmp_path / "a"
    _stale(out)
    before = hashes(out)
    code, err = cli(capsys, ["run", "--resume", "--out", str(out), "--no-progress"])
    assert code == 0 and "has already ended (done at round 6): nothing to run" in err, err
    assert hashes(out) == before and rounds(out) == [0, 1, 2, 3, 4, 5, 6]
    # the same folder killed before its end (no summary): refused in one line, never "from round 0"
    (out / "summary.json").unlink()
    before = hashes(out)
    code, err = cli(capsys, ["run", "--resume", "--out", str(out), "--no-progress"])
    one_line_error(code, err, "newest of round 3", "last round 6")
    assert "round 0" not in err and hashes(out) == before


def test_a_plain_resume_of_an_ended_run_with_its_own_cadence_says_so(tmp_path, capsys, compile_cache):
    out = tmp_path / "a"
    _stale(out, never=False)  # config.json keeps "3": the resume would have redone rounds 4-6
    before = hashes(out)
    code, err = cli(capsys, ["run", "--resume", "--out", str(out), "--no-progress"])
    assert code == 0 and "already ended (done at round 6)" in err and hashes(out) == before, err


def test_a_diverged_run_is_not_run_again_by_a_resume_nor_its_older_checkpoint_its_model(tmp_path, capsys,
                                                                                         compile_cache):
    out = tmp_path / "d"
    cfg = fj.Config(rounds=4, lr=1e6, checkpoint_every="1", out=str(out), **BASE)
    with pytest.raises(FloatingPointError, match="diverged by round 2"):
        fj.run(cfg, progress=False)
    before = hashes(out)
    capsys.readouterr()
    with pytest.raises(FloatingPointError, match="diverged by round 2"):
        fj.run(cfg, progress=False, resume=True)
    assert hashes(out) == before and "already ended (diverged at round 2)" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"of round 1, older than the run's last round 2 \(diverged\)"):
        fj.load(out).model


def test_the_last_line_rate_counts_the_rounds_not_the_command(capsys):
    """A fake clock: the bar made at 0, 100 s of loading and compiling, three rounds of 2 s each (ending at 102,
    104, 106), the final checkpoint's write until 110. By hand: 3 rounds / 6 s = 2.00 s/round (the whole
    command's 110 s / 3 = 36.67 s/round is what tqdm's last line said)."""
    clock = [0.0]
    bar = Progress(3, desc="fedalf run", refresh_s=60)
    bar._bar._time = lambda: clock[0]
    bar._bar.start_t = bar._bar.last_print_t = 0.0
    clock[0] = 100.0
    bar.start_rounds()
    for r in range(1, 4):
        bar.begin_call(1, r, r)
        clock[0] += 2.0
        bar.end_call(1)
    clock[0] = 110.0
    bar.close()
    last = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert "3/3" in last and "2.00s/round" in last and "01:50" in last, last  # elapsed: still the command's


def test_the_final_checkpoint_write_has_its_stage(tmp_path, capsys, monkeypatch, compile_cache):
    real = RunDir.save_checkpoint

    def slow(self, state, cfg):
        import time
        time.sleep(1.5)  # past the bar's first draw (1 s), so that the stage shows
        return real(self, state, cfg)

    monkeypatch.setattr(RunDir, "save_checkpoint", slow)
    capsys.readouterr()
    fj.run(fj.Config(rounds=2, out=str(tmp_path / "a"), **BASE), progress=True)
    err = capsys.readouterr().err
    assert re.search(r"fedalf run \(writing the checkpoint\) \d+s", err), err[-2000:]
    fj.run(fj.Config(rounds=2, checkpoint_every="never", out=str(tmp_path / "b"), **BASE), progress=True)
    assert "writing the checkpoint" not in capsys.readouterr().err  # a throw-away run writes none
