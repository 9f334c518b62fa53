"""Run and sweep folders, round 2 (issue 27, items 1, 7, 8, 10): a command refused because another process
writes the folder changes nothing in it; a symbolic link planted in a folder (a run folder received as a
tarball) never makes fedalf write outside it; ``--overwrite`` removes only the TensorBoard event files
fedalf wrote in ``tb/``; an ``--out`` whose name is not valid UTF-8 runs (no traceback).

Each expectation is independent of the code under test: the kind, bytes and mtime of every entry of a
folder before and after, the bytes of a file outside it, literal file names, a process's exit status."""

import os
import stat
import subprocess
import sys
from pathlib import Path

from fedalf_jax.cli import main
from fedalf_jax.experiment import rundir as R
from fedalf_jax.experiment.sweepdir import read_sweep
from fedalf_jax.experiment.writers import CsvWriter

from test_trust import REPO, TINY, _cli, _one_line_error, _rounds


def _snapshot(folder: Path) -> dict:
    """Every entry below ``folder`` and the folder itself: its kind, its bytes (a link's target) and mtime."""
    out = {}
    for p in [folder, *sorted(folder.rglob("*"))]:
        st = os.lstat(p)
        if stat.S_ISLNK(st.st_mode):
            data = os.readlink(p)
        elif stat.S_ISREG(st.st_mode):
            data = p.read_bytes()
        else:
            data = None
        out[str(p.relative_to(folder))] = (stat.S_IFMT(st.st_mode), data, st.st_mtime_ns)
    return out


def _plant_temporaries(folder: Path, names=("checkpoint.npz.tmp", "metrics.csv.tmp", "config.json.tmp")) -> None:
    """What a writer in the middle of its atomic writes has in its folder."""
    for n in names:
        (folder / n).write_bytes(b"being written by the first process")


# ---- item 1: a refused second command changes nothing ------------------------------------------------

def test_a_command_refused_by_a_run_folders_lock_changes_nothing_in_it(tmp_path, capsys):
    a = tmp_path / "a"
    assert main(["run", *TINY, "--out", str(a)]) == 0
    with R.DirLock(a):  # the first writer (flock: per open file, so it holds against this process too)
        _plant_temporaries(a)
        before = _snapshot(a)
        for argv in (["run", *TINY, "--out", str(a)],
                     ["run", *TINY, "--overwrite", "--out", str(a)],
                     ["run", "--resume", "--rounds", "3", "--no-progress", "--out", str(a)],
                     ["sweep", *TINY, "--out", str(a)]):
            code, err = _cli(capsys, argv)
            _one_line_error(code, err, f"{a} is being written by pid {os.getpid()}")
            assert _snapshot(a) == before, argv
    assert main(["run", "--resume", "--rounds", "3", "--no-progress", "--out", str(a)]) == 0  # held no more
    assert _rounds(a) == [0, 1, 2, 3]
    assert not (a / "metrics.csv.tmp").exists() and not (a / "checkpoint.npz.tmp").exists()  # removed once held


def test_a_command_refused_by_a_sweeps_locks_changes_nothing_in_its_folders(tmp_path, capsys):
    sw = tmp_path / "sw"
    assert main(["sweep", *TINY, "--seeds", "0", "1", "--out", str(sw)]) == 0
    run0 = sw / "fedavg_seed0"
    with R.DirLock(sw):  # a sweep writes the folder
        _plant_temporaries(sw, ("sweep.json.tmp",))
        _plant_temporaries(run0)
        before = _snapshot(sw)
        for argv in (["sweep", "--resume", "--out", str(sw)],
                     ["sweep", "--resume", "--rounds", "3", "--out", str(sw)],
                     ["sweep", "--resume", "--shard", "0/2", "--out", str(sw)],
                     ["sweep", *TINY, "--seeds", "0", "1", "--shard", "1/2", "--out", str(sw)],
                     ["run", *TINY, "--overwrite", "--out", str(sw)]):
            code, err = _cli(capsys, argv)
            _one_line_error(code, err, f"{sw} is being written by pid {os.getpid()}")
            assert _snapshot(sw) == before, argv
    with R.DirLock(run0):  # one of its runs is being written (by a `fedalf run --resume --out sw/run`)
        before = _snapshot(run0)
        code, err = _cli(capsys, ["sweep", "--resume", "--rounds", "3", "--no-progress", "--out", str(sw)])
        _one_line_error(code, err, f"{run0} is being written by pid {os.getpid()}")
        assert _snapshot(run0) == before


# ---- item 7: a planted link never sends a write outside the folder -------------------------------------

def test_a_symlinked_lock_is_refused_and_what_it_points_to_is_untouched(tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"a file of the user's, outside the run folder\n")
    a = tmp_path / "a"
    a.mkdir()
    (a / R.LOCK).symlink_to(victim)
    for argv in (["run", *TINY, "--out", str(a)], ["sweep", *TINY, "--out", str(a)]):
        code, err = _cli(capsys, argv)
        _one_line_error(code, err, f"{a / R.LOCK} is a symbolic link", "rm ")
    assert victim.read_bytes() == b"a file of the user's, outside the run folder\n"
    assert sorted(p.name for p in a.iterdir()) == [R.LOCK]


def test_run_files_that_are_links_are_replaced_never_written_through(tmp_path, capsys):
    a, outside = tmp_path / "a", tmp_path / "outside"
    assert main(["run", *TINY, "--out", str(a)]) == 0
    outside.mkdir()
    names = ("metrics.csv", "config.json", "clients.json", "summary.json", "checkpoint.npz")
    for n in names:  # each run file moved out of the folder, a link to it left in its place
        (a / n).rename(outside / n)
        (a / n).symlink_to(outside / n)
    before = _snapshot(outside)
    assert main(["run", "--resume", "--rounds", "3", "--no-progress", "--out", str(a)]) == 0
    assert _snapshot(outside) == before
    assert all(not (a / n).is_symlink() for n in ("metrics.csv", "config.json", "clients.json", "summary.json"))
    assert _rounds(a) == [0, 1, 2, 3]


def test_links_at_the_temporary_names_never_send_a_write_outside(tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    # the writers themselves (a link planted while a folder is held): no file appears where it points
    d = tmp_path / "d"
    d.mkdir()
    for n in ("metrics.csv.tmp", "config.json.tmp"):
        (d / n).symlink_to(outside / n)
    CsvWriter(d / "metrics.csv", ["round", "x"]).close()
    R.write_json(d / "config.json", {"a": 1})
    assert list(outside.iterdir()) == []
    assert (d / "metrics.csv").read_text() == "round,x\n" and (d / "config.json").read_text() == '{\n  "a": 1\n}\n'
    # a sweep's slices share their folder's lock, so their atomic writes meet a planted link themselves
    sw = tmp_path / "sw"
    sw.mkdir()
    (sw / "sweep.json.tmp").symlink_to(outside / "sweep.json")
    assert main(["sweep", *TINY, "--seeds", "0", "--shard", "0/1", "--out", str(sw)]) == 0
    assert main(["sweep", "--resume", "--rounds", "3", "--shard", "0/1", "--no-progress", "--out", str(sw)]) == 0
    assert list(outside.iterdir()) == []
    assert read_sweep(sw)["runs"][0]["config"]["rounds"] == 3 and not (sw / "sweep.json").is_symlink()


def test_a_tb_link_gets_no_event_files_and_overwrite_leaves_it_alone(tmp_path, capsys):
    a, elsewhere = tmp_path / "a", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "events.out.tfevents.1.host").write_bytes(b"someone else's events")
    a.mkdir()
    (a / "tb").symlink_to(elsewhere, target_is_directory=True)
    before = _snapshot(elsewhere)
    code, err = _cli(capsys, ["run", *TINY, "--log", "tensorboard", "--out", str(a)])
    _one_line_error(code, err, f"{a / 'tb'} is a symbolic link")
    assert _snapshot(elsewhere) == before and not (a / "config.json").exists()
    assert main(["run", *TINY, "--out", str(a)]) == 0  # without --log tensorboard: tb is not fedalf's
    assert main(["run", *TINY, "--overwrite", "--out", str(a)]) == 0
    assert _snapshot(elsewhere) == before and (a / "tb").is_symlink()


# ---- item 8: --overwrite removes only fedalf's event files from tb/ --------------------------------------

def test_overwrite_removes_only_the_event_files_fedalf_wrote_in_tb(tmp_path, capsys):
    a = tmp_path / "a"
    assert main(["run", *TINY, "--log", "tensorboard", "--out", str(a)]) == 0
    events = sorted(p.name for p in (a / "tb").iterdir())
    assert len(events) == 1 and events[0].startswith("events.out.tfevents."), events
    (a / "tb" / "notes.md").write_text("my own notes")
    (a / "tb" / "plots").mkdir()
    (a / "tb" / "plots" / "fig.png").write_bytes(b"png")
    assert main(["run", *TINY, "--overwrite", "--out", str(a)]) == 0
    assert sorted(str(p.relative_to(a / "tb")) for p in (a / "tb").rglob("*")) == ["notes.md", "plots", "plots/fig.png"]
    assert (a / "tb" / "notes.md").read_text() == "my own notes"
    # a tb/ that holds only fedalf's event files goes with them
    b = tmp_path / "b"
    assert main(["run", *TINY, "--log", "tensorboard", "--out", str(b)]) == 0
    assert main(["run", *TINY, "--overwrite", "--out", str(b)]) == 0
    assert not (b / "tb").exists()


# ---- item 10: an --out that is not valid UTF-8 -------------------------------------------------------

def test_an_out_that_is_not_utf8_runs_and_is_refused_in_one_line(tmp_path, capsys):
    out = os.fsencode(tmp_path) + b"/run\xff"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONIOENCODING": "utf-8"}  # strict, as under a UTF-8 locale
    r = subprocess.run([sys.executable, "-m", "fedalf_jax.cli", "run", *TINY, "--out", out], cwd=REPO, env=env,
                       capture_output=True, timeout=300)
    assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr
    assert r.stdout.startswith(b"round 2: mean_acc"), r.stdout
    a = Path(os.fsdecode(out))
    assert _rounds(a) == [0, 1, 2] and b"run\xff" in (a / R.LOCK).read_bytes()
    code, err = _cli(capsys, ["run", *TINY, "--out", str(a)])  # the same name, refused: one line
    _one_line_error(code, err, "already holds a run")
    code, err = _cli(capsys, ["report", str(a), "--out", str(tmp_path / "rep\udcfe")])
    assert code == 0 and "Traceback" not in err, err
    assert b"run\xff" in (tmp_path / "rep\udcfe" / "report.md").read_bytes()
    # refused before anything is written: no folder left behind
    new = os.fsencode(tmp_path) + b"/new\xfe/run"
    r = subprocess.run([sys.executable, "-m", "fedalf_jax.cli", "run", *TINY, "--dataset", "fmnist", "--data-dir",
                        str(tmp_path / "nothing"), "--out", new], cwd=REPO, env=env, capture_output=True, timeout=300)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not os.path.exists(os.fsencode(tmp_path) + b"/new\xfe")
    assert sorted(os.listdir(os.fsencode(tmp_path))) == sorted([b"rep\xfe", b"run\xff"])
