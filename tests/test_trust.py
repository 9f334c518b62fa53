"""Run directories a researcher can trust (issue 13, items 1-8): a checkpoint knows which config made
it, a finished run is never overwritten silently, one writer per folder, damaged files fall back or
stop in one line, a failed write stops the run at once, only the project's own temporary files are
removed, sweep files cannot point outside their folder, Ctrl-C keeps the finished rounds, and a run
without --out still keeps what it computes.

Each expectation is independent of the code under test: file bytes before and after, literal round
lists, the exact set of files in a folder, a process's exit status."""

import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from fedalf_jax.cli import main
from fedalf_jax.experiment.rundir import RunDir
from helpers import cli as _cli, hashes as _hashes, one_line_error as _one_line_error, rounds as _rounds, wait_for

TINY = ["--dataset", "synthetic", "--model", "mlp", "--clients", "4", "--clients-per-round", "2",
        "--synthetic-train", "200", "--synthetic-test", "80", "--rounds", "2", "--eval-every", "1",
        "--algorithm", "fedavg", "--no-progress"]
REPO = Path(__file__).resolve().parents[1]


# ---- 1. a run directory knows whose it is -----------------------------------------------------------

@pytest.mark.parametrize("edit, field", [({"lr": 0.5}, "lr"), ({"seed": 3}, "seed"), ({"clients": 6}, "clients")])
def test_resume_refuses_a_config_json_edited_since_the_checkpoint(tmp_path, capsys, edit, field):
    a = tmp_path / "a"
    assert main(["run", *TINY, "--out", str(a)]) == 0
    cfg = json.loads((a / "config.json").read_text())
    (a / "config.json").write_text(json.dumps({**cfg, **edit}))
    before = _hashes(a)
    code, err = _cli(capsys, ["run", "--resume", "--out", str(a), "--rounds", "4"])
    _one_line_error(code, err, "written by another configuration", f"{field} ")
    assert _hashes(a) == before  # nothing written: the rows still belong to the run that made them


def test_resume_may_change_rounds_and_cadences(tmp_path, capsys):
    a = tmp_path / "a"
    assert main(["run", *TINY, "--out", str(a)]) == 0
    assert main(["run", "--resume", "--out", str(a), "--rounds", "4", "--eval-every", "2",
                 "--checkpoint-every", "1", "--no-progress"]) == 0
    assert _rounds(a) == [0, 1, 2, 4]


def test_sweep_resume_refuses_a_sweep_json_edited_since_the_checkpoints(tmp_path, capsys):
    sw = tmp_path / "sw"
    assert main(["sweep", *TINY, "--seeds", "0", "1", "--out", str(sw)]) == 0
    info = json.loads((sw / "sweep.json").read_text())
    info["runs"][1]["config"]["lr"] = 0.5
    (sw / "sweep.json").write_text(json.dumps(info))
    before = _hashes(sw)
    code, err = _cli(capsys, ["sweep", "--resume", "--out", str(sw), "--rounds", "4"])
    assert code == 2 and "written by another configuration (lr 0.05 -> 0.5)" in err, err
    assert {k: v for k, v in _hashes(sw).items() if k != "sweep.json"} == {
        k: v for k, v in before.items() if k != "sweep.json"}  # no run was touched


def test_a_new_run_into_a_folder_that_holds_one_is_refused_unless_overwrite(tmp_path, capsys):
    a = tmp_path / "a"
    assert main(["run", *TINY, "--checkpoint-every", "1", "--out", str(a)]) == 0
    assert (a / "checkpoint.prev.npz").is_file()
    before = _hashes(a)
    code, err = _cli(capsys, ["run", *TINY, "--lr", "0.2", "--out", str(a)])
    _one_line_error(code, err, "already holds a run (done at round 2)", "--overwrite", "--resume")
    assert _hashes(a) == before
    # --overwrite removes every old file first: the old run's previous checkpoint cannot be resumed later
    (a / "tb").mkdir()
    (a / "tb" / "events.out.tfevents.1.old").write_text("x")  # an event file of the old run's
    (a / "notes.txt").write_text("mine")
    assert main(["run", *TINY, "--lr", "0.2", "--rounds", "1", "--out", str(a), "--overwrite"]) == 0
    assert sorted(_hashes(a)) == ["checkpoint.npz", "clients.json", "config.json", "metrics.csv", "notes.txt",
                                  "summary.json"]
    assert _rounds(a) == [0, 1] and json.loads((a / "config.json").read_text())["lr"] == 0.2
    code, err = _cli(capsys, ["run", *TINY, "--out", str(a), "--resume", "--overwrite"])
    _one_line_error(code, err, "choose one")


def test_config_never_inherits_out_and_a_run_without_out_gets_a_folder(tmp_path, capsys, monkeypatch):
    sweep_run = tmp_path / "sw" / "r0"
    assert main(["run", *TINY, "--out", str(sweep_run)]) == 0
    before = _hashes(sweep_run)
    monkeypatch.chdir(tmp_path)
    code, err = _cli(capsys, ["run", "--config", str(sweep_run / "config.json"), "--lr", "0.1", "--no-progress"])
    assert code == 0, err
    made = sorted((tmp_path / "runs").iterdir())
    assert len(made) == 1 and made[0].name.startswith("fedavg-mlp-"), made
    assert f"writing the run to {Path('runs') / made[0].name}" in err
    assert _rounds(made[0]) == [0, 1, 2] and json.loads((made[0] / "config.json").read_text())["lr"] == 0.1
    assert _hashes(sweep_run) == before  # the sweep's own run directory is untouched


def test_a_run_that_fails_at_once_leaves_no_empty_folder(tmp_path, capsys):
    out = tmp_path / "new" / "run"
    code, err = _cli(capsys, ["run", *TINY, "--dataset", "fmnist", "--data-dir", str(tmp_path / "nothing"),
                              "--out", str(out)])
    assert code == 2, err
    assert not (tmp_path / "new").exists()


# ---- 2. one writer per folder ---------------------------------------------------------------------

def test_a_second_writer_is_refused_in_one_line_naming_the_holder(tmp_path, capsys):
    a = tmp_path / "a"
    a.mkdir()
    with RunDir(a).lock():  # another writer holds the folder (flock: per open file, so also in-process)
        code, err = _cli(capsys, ["run", *TINY, "--out", str(a)])
        _one_line_error(code, err, "is being written by", f"pid {os.getpid()}")
        assert not (a / "config.json").exists()
        code, err = _cli(capsys, ["sweep", *TINY, "--out", str(a)])
        _one_line_error(code, err, "is being written by")
    assert main(["run", *TINY, "--out", str(a)]) == 0  # released with its holder


def test_two_processes_into_one_folder_one_wins(tmp_path):
    a = tmp_path / "a"
    first = _start(a, "--eval-every", "5")
    _wait_for(lambda: (a / "config.json").exists(), first)
    try:
        second = subprocess.run([sys.executable, "-m", "fedalf_jax.cli", "run", *TINY, "--lr", "0.2", "--overwrite",
                                 "--out", str(a)], cwd=REPO, capture_output=True, text=True, timeout=300)
    finally:
        first.send_signal(signal.SIGINT)
    assert second.returncode == 2 and f"is being written by pid {first.pid}" in second.stderr, second.stderr
    assert len(second.stderr.strip().splitlines()) == 1
    _, err = first.communicate(timeout=180)
    assert first.returncode == 130, err
    assert json.loads((a / "config.json").read_text())["lr"] == 0.05  # the first writer's run, whole


# ---- 3. damaged files -------------------------------------------------------------------------------

def _two_generations(tmp_path):
    """A finished 4-round run with checkpoints of rounds 2 (previous) and 4 (last)."""
    a = tmp_path / "a"
    assert main(["run", *TINY, "--rounds", "4", "--checkpoint-every", "2", "--out", str(a)]) == 0
    assert sorted(RunDir(a).checkpoint_rounds()) == [2, 4]
    return a


def _truncate(p: Path):
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def _flip_a_data_byte(p: Path):
    """Flip one byte inside the first array's stored data (the zip's CRC no longer matches)."""
    with zipfile.ZipFile(p) as z:
        info = z.getinfo("arr_0.npy")
    b = bytearray(p.read_bytes())
    at = info.header_offset + 30 + len(info.filename) + len(info.extra) + info.file_size - 3
    b[at] ^= 0xFF
    p.write_bytes(bytes(b))


@pytest.mark.parametrize("damage", [_truncate, _flip_a_data_byte])
def test_a_damaged_checkpoint_falls_back_to_the_previous_generation(tmp_path, capsys, damage, compile_cache):
    a = _two_generations(tmp_path)
    damage(a / "checkpoint.npz")
    code, err = _cli(capsys, ["run", "--resume", "--out", str(a), "--rounds", "6"])
    assert code == 0, err
    warning = [line for line in err.splitlines() if "damaged" in line]
    assert len(warning) == 1 and "resuming from checkpoint.prev.npz (round 2)" in warning[0], err
    assert _rounds(a) == [0, 1, 2, 3, 4, 5, 6]
    ref = tmp_path / "ref"  # the same 6 rounds uninterrupted: rounds 3 and 4 were recomputed exactly
    assert main(["run", *TINY, "--rounds", "6", "--out", str(ref)]) == 0
    np.testing.assert_array_equal(RunDir(a).metrics()["mean_acc"], RunDir(ref).metrics()["mean_acc"])


def test_no_usable_checkpoint_is_one_line_never_a_silent_restart(tmp_path, capsys):
    a = _two_generations(tmp_path)
    _truncate(a / "checkpoint.npz")
    _flip_a_data_byte(a / "checkpoint.prev.npz")
    before = _hashes(a)
    code, err = _cli(capsys, ["run", "--resume", "--out", str(a), "--rounds", "6"])
    assert code == 2 and "Traceback" not in err and "no usable checkpoint" in err, err
    assert _hashes(a) == before


def test_a_damaged_metrics_row_is_one_line_and_deletes_nothing(tmp_path, capsys):
    a = tmp_path / "a"
    assert main(["run", *TINY, "--out", str(a)]) == 0
    lines = (a / "metrics.csv").read_text().splitlines()
    lines[2] = "nan" + lines[2][lines[2].index(","):]
    (a / "metrics.csv").write_text("\n".join(lines) + "\n")
    before = _hashes(a)
    code, err = _cli(capsys, ["run", "--resume", "--out", str(a), "--rounds", "3"])
    _one_line_error(code, err, "metrics.csv line 3", "not a round number")
    assert _hashes(a) == before and (a / "summary.json").is_file()


@pytest.mark.parametrize("text, needle", [
    ("[1, 2]", "holds a JSON list"),
    ('{"dataset": "fmnist", "data_dir": {"path": "/x"}}', "data_dir must be a path"),
])
def test_a_wrongly_shaped_config_json_is_one_line(tmp_path, capsys, text, needle):
    a = tmp_path / "a"
    a.mkdir()
    (a / "config.json").write_text(text)
    code, err = _cli(capsys, ["run", "--resume", "--out", str(a)])
    _one_line_error(code, err, needle)
    code, err = _cli(capsys, ["run", "--config", str(a / "config.json"), "--out", str(tmp_path / "b")])
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


# ---- 4. a failed write stops the run at once -----------------------------------------------------------

def test_the_first_failed_checkpoint_stops_the_run_keeping_what_is_safe(tmp_path, capsys, monkeypatch):
    a = tmp_path / "a"
    real = os.replace
    calls = []

    def replace(src, dst):  # the disk fills up after the first checkpoint
        if Path(dst).name == "checkpoint.npz":
            calls.append(dst)
            if len(calls) > 1:
                raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    code, err = _cli(capsys, ["run", *TINY, "--rounds", "8", "--checkpoint-every", "1", "--out", str(a)])
    _one_line_error(code, err, "No space left on device", "checkpoint of round 1 is kept", "--resume")
    monkeypatch.setattr(os, "replace", real)
    # the round-2 checkpoint fails on its thread; the loop sees it before queuing the next one, at round 3
    assert _rounds(a) == [0, 1, 2, 3] and "stopped after round 3" in err, err
    assert sorted(RunDir(a).checkpoint_rounds()) == [1]
    assert not list(a.glob("*.tmp")) and not (a / "summary.json").exists()
    assert main(["run", "--resume", "--out", str(a), "--no-progress"]) == 0  # continues from round 1
    assert _rounds(a) == list(range(9))


# ---- 5. only our own temporaries ---------------------------------------------------------------------

def test_only_the_projects_own_temporary_files_are_removed(tmp_path, capsys):
    a = tmp_path / "a"
    assert main(["run", *TINY, "--out", str(a)]) == 0
    (a / "notes.tmp.txt").write_text("keep me")
    (a / "old.tmp").mkdir()
    (a / "metrics.csv.tmp").write_text("left by a kill")
    (a / "checkpoint.npz.tmp").write_text("left by a kill")
    assert main(["run", "--resume", "--out", str(a), "--rounds", "3", "--no-progress"]) == 0
    assert (a / "notes.tmp.txt").read_text() == "keep me" and (a / "old.tmp").is_dir()
    assert not (a / "metrics.csv.tmp").exists() and not (a / "checkpoint.npz.tmp").exists()


# ---- 6. sweep files never send writes elsewhere --------------------------------------------------------

@pytest.mark.parametrize("where", ["absolute", "../escape", "."])
def test_a_sweep_run_dir_outside_its_folder_is_refused(tmp_path, capsys, where):
    sw = tmp_path / "sw"
    assert main(["sweep", *TINY, "--seeds", "0", "--out", str(sw)]) == 0
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "summary.json").write_text("{}")
    info = json.loads((sw / "sweep.json").read_text())
    info["runs"][0]["dir"] = {"absolute": str(victim), "../escape": "../victim", ".": "."}[where]
    (sw / "sweep.json").write_text(json.dumps(info))
    before, before_sw = _hashes(victim), _hashes(sw)
    code, err = _cli(capsys, ["sweep", "--resume", "--out", str(sw), "--rounds", "3"])
    _one_line_error(code, err, "is not a folder inside")
    assert _hashes(victim) == before and _hashes(sw) == before_sw
    code, err = _cli(capsys, ["report", str(sw), "--out", str(tmp_path / "rep")])
    _one_line_error(code, err, "is not a folder inside")


# ---- 7. Ctrl-C keeps the work ------------------------------------------------------------------------

def _start(out: Path, *extra):
    cmd = [sys.executable, "-m", "fedalf_jax.cli", "run", *TINY, "--rounds", "100000", *extra, "--out", str(out)]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(cond, proc, timeout=180):
    wait_for(cond, proc, timeout=timeout, poll=0.05)


def test_ctrl_c_saves_the_last_finished_round_and_exits_130(tmp_path, compile_cache):
    a = tmp_path / "a"
    proc = _start(a, "--eval-every", "5")  # checkpoints every 300 s: none before the Ctrl-C
    _wait_for(lambda: (a / "metrics.csv").exists() and len((a / "metrics.csv").read_text().splitlines()) >= 4, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    last = _rounds(a)[-1]
    assert last >= 10  # the round in flight when the signal came: evaluated, a chunk cut short (issue 36)
    assert RunDir(a).checkpoint_round() == last  # every finished round is kept
    assert f"interrupted after round {last}" in err and f"-m fedalf_jax.cli run --resume --out {a}" in err, err
    assert "Traceback" not in err and "Segmentation" not in err
    assert main(["run", "--resume", "--out", str(a), "--rounds", str(last + 5), "--no-progress"]) == 0
    after = [*range(last // 5 * 5 + 5, last + 5, 5), last + 5]  # the usual rounds (multiples of 5) again
    assert _rounds(a)[_rounds(a).index(last):] == [last, *after]


def test_ctrl_c_in_a_sweep_saves_every_run_of_the_call_in_flight(tmp_path):
    sw = tmp_path / "sw"
    cmd = [sys.executable, "-m", "fedalf_jax.cli", "sweep", *TINY, "--rounds", "100000", "--eval-every", "5",
           "--seeds", "0", "1", "--out", str(sw)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = sw / "fedavg_seed0" / "metrics.csv"
    _wait_for(lambda: first.exists() and len(first.read_text().splitlines()) >= 4, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and f"-m fedalf_jax.cli sweep --resume --out {sw}" in err, err
    for name in ("fedavg_seed0", "fedavg_seed1"):
        last = _rounds(sw / name)[-1]
        assert last >= 10 and RunDir(sw / name).checkpoint_round() == last, name


def test_ctrl_c_during_the_first_compile_exits_130_without_a_crash(tmp_path):
    a = tmp_path / "a"
    proc = _start(a, "--eval-every", "5")
    _wait_for(lambda: (a / "config.json").exists(), proc)  # data loaded, the programs compiling
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted after round" in err, err


def test_a_second_ctrl_c_exits_at_once_and_leaves_a_resumable_folder(tmp_path, compile_cache):
    a = tmp_path / "a"
    # rounds of seconds (1000 local epochs): the first Ctrl-C waits for the round in flight, the second does not
    assert main(["run", *TINY, "--local-epochs", "1000", "--rounds", "1", "--out", str(a)]) == 0
    log = tmp_path / "stderr"
    cmd = [sys.executable, "-m", "fedalf_jax.cli", "run", "--resume", "--out", str(a), "--rounds", "100000",
           "--eval-every", "100000"]  # one long chunk, with the progress display naming its stages
    with open(log, "w") as err_file:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=err_file, text=True)
        # inside the long chunk: round 2 done (the bar counts it), round 3 just begun
        _wait_for(lambda: "| 2/100000" in log.read_text(), proc)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        t0 = time.time()
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    err = log.read_text()
    assert proc.returncode == 130 and time.time() - t0 < 10, err
    assert "Ctrl-C again" in err and "Segmentation" not in err, err
    assert _rounds(a) == [0, 1] and RunDir(a).checkpoint_round() == 1
    assert main(["run", "--resume", "--out", str(a), "--rounds", "2", "--eval-every", "1", "--no-progress"]) == 0
    assert _rounds(a) == [0, 1, 2]


def test_help_says_what_ctrl_c_does(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "Ctrl-C" in out and "130" in out and "--resume" in out


# ---- 8. nothing computed is thrown away silently --------------------------------------------------------

def test_resume_of_a_folder_that_never_ran_says_it_starts_from_round_zero(tmp_path, capsys):
    code, err = _cli(capsys, ["run", *TINY, "--resume", "--out", str(tmp_path / "a")])
    assert code == 0 and "nothing to resume" in err and "starting from round 0" in err, err


def test_a_run_from_before_a_new_option_resumes_with_that_options_default(tmp_path, capsys):
    # A run directory written before an option existed (here: matmul_precision, added with issue 14)
    # has no entry for it in config.json nor in its checkpoint's identity: it ran with the default,
    # so --resume continues it (and still refuses a non-default value).
    from fedalf_jax.experiment.identity import identity_digest
    a = tmp_path / "a"
    assert main(["run", *TINY, "--out", str(a)]) == 0
    cfg = json.loads((a / "config.json").read_text())
    assert cfg.pop("matmul_precision") == "default"
    (a / "config.json").write_text(json.dumps(cfg))
    for ck in a.glob("checkpoint*.npz"):
        with np.load(ck) as f:
            members = {k: f[k] for k in f.files}
        ident = json.loads(str(members["identity"]))
        assert ident.pop("matmul_precision") == "default"
        members["identity"] = np.asarray(json.dumps(ident, sort_keys=True))
        members["digest"] = np.asarray(identity_digest(ident))
        np.savez(ck.with_suffix(""), **members)  # savez appends .npz again
    code, err = _cli(capsys, ["run", "--resume", "--out", str(a), "--rounds", "3", "--matmul-precision", "highest"])
    _one_line_error(code, err, "matmul_precision")
    assert main(["run", "--resume", "--out", str(a), "--rounds", "3", "--no-progress"]) == 0
    assert _rounds(a) == [0, 1, 2, 3]
