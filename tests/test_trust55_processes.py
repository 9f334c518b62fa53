"""Issue 55 item 4: a ``sweep --processes`` parent killed by SIGKILL left its children computing, unseen (a
``--resume`` refused for their slices, naming the dead parent's pid, until they ended); a child killed by
SIGKILL read "exited -9: (no output)" and its run "running".

Now a child stops as a SIGTERM stops it once its parent has ended (interrupt.watch_parent: the round in
flight saved, the run stopped and resumable), a refusal by a slice still running says so, a child killed by
a signal reads "killed by SIGKILL" and a run whose lock names only ended processes "stopped (resume with
--resume)"."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fedalf_jax import interrupt as I
from fedalf_jax.cli import exit_description, main, run_status_words
from fedalf_jax.experiment import rundir as R
from fedalf_jax.experiment.rundir import DirLock, RunDir
from helpers import cli, one_line_error, wait_for

REPO = Path(__file__).resolve().parents[1]
SIGNAL = ["--dataset", "synthetic", "--clients", "8", "--clients-per-round", "3", "--synthetic-train", "240",
          "--synthetic-test", "60", "--algorithm", "fedavg", "--model", "mlp", "--checkpoint-every", "1h",
          "--no-progress"]
TINY = ["--dataset", "synthetic", "--clients", "4", "--clients-per-round", "2", "--synthetic-train", "80",
        "--synthetic-test", "40", "--algorithm", "fedavg", "--model", "mlp", "--rounds", "1", "--eval-every", "1",
        "--no-progress"]
needs_proc = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads the children's pids in /proc")


def _env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def _dead_pid() -> int:
    """The pid of a process of this host that has ended (and been reaped)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _children(pid: int) -> list:
    kids = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids.update(int(k) for k in (task / "children").read_text().split())
        except OSError:
            pass
    return [k for k in sorted(kids) if b"--shard" in Path(f"/proc/{k}/cmdline").read_bytes()]


def _rows(folder: Path) -> int:
    csv_ = folder / "metrics.csv"
    return len(csv_.read_text().splitlines()) - 1 if csv_.exists() else 0


def _start(out: Path, *flags):
    cmd = [sys.executable, "-m", "fedalf_jax.cli", "sweep", *SIGNAL, *flags, "--processes", "2", "--out", str(out)]
    return subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _parent_waiting(sw: Path, long_rounds: int):
    """A 2-process sweep whose parent's slice (the 10-round run) has ended while its child's (the long one)
    computes: ``(parent, child pid, long run's folder)``."""
    short, long_ = sw / "fedavg_rounds10", sw / f"fedavg_rounds{long_rounds}"
    proc = _start(sw, "--rounds", "10", str(long_rounds), "--eval-every", "10", "--seeds", "0")
    wait_for(lambda: RunDir(short).status() == "done" and _rows(long_) >= 3, proc, timeout=120)
    kids = _children(proc.pid)
    assert len(kids) == 1, kids
    return proc, kids[0], long_


# ---- 1. the child of a parent killed by SIGKILL stops, its round saved -------------------------------------

@needs_proc
def test_a_parent_killed_by_sigkill_leaves_its_child_to_stop_saved_and_resumable(tmp_path, compile_cache):
    # The child's run is 100000 rounds (minutes): a child that went on computing would still be at it when
    # the bounded wait below ends; one that saw its parent end stops after its round in flight.
    sw = tmp_path / "sw"
    proc, kid, long_ = _parent_waiting(sw, 100000)
    try:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        deadline = time.time() + 60
        while _alive(kid) and time.time() < deadline:
            time.sleep(0.05)
        assert not _alive(kid), "the child of a parent killed by SIGKILL went on computing"
    finally:
        for p in (kid, proc.pid):
            if _alive(p):
                os.kill(p, signal.SIGKILL)
    rd = RunDir(long_)
    last = int(rd.metrics()["round"][-1])
    # stopped as SIGTERM stops it: its last evaluated round checkpointed (none periodic: --checkpoint-every 1h)
    assert 0 < last < 100000 and rd.checkpoint_round() == last and rd.status() == "running", last
    assert R.writer_ended(long_) and R.writer_ended(sw)  # nothing writes it: both locks name ended processes
    assert run_status_words("running", long_) == "stopped (resume with --resume)"
    with DirLock(sw), DirLock(long_):  # a plain --resume is not refused: neither folder is held
        pass


# ---- 2. a resume refused by a slice of an earlier sweep still running says so -----------------------------

def test_a_resume_refused_by_a_slice_still_running_names_the_slice_not_the_dead_parent(tmp_path, capsys):
    sw = tmp_path / "sw"
    assert main(["sweep", *TINY, "--seeds", "0", "1", "--out", str(sw)]) == 0
    # A --processes sweep's parent (slice 0/2: a process here, holding the folder as a slice does), its child
    # (slice 1/2: this process; flock is per open file) beside it, then the parent killed by SIGKILL.
    holder = subprocess.Popen([sys.executable, "-c", "import sys; from fedalf_jax.experiment.rundir import DirLock; "
                               "lock = DirLock(sys.argv[1], shared=True, slice='0/2'); print('held', flush=True); "
                               "sys.stdin.readline()", str(sw)], cwd=REPO, env=_env(), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    dead = holder.pid
    with DirLock(sw, shared=True, slice="1/2"):
        holder.kill()
        holder.wait()
        text = (sw / R.LOCK).read_text()
        assert text.startswith(f"pid {dead} ") and f"pid {os.getpid()} " in text  # added beside the other line
        code, err = cli(capsys, ["sweep", "--resume", "--out", str(sw)])
    one_line_error(code, err, f"{sw}: slice 1/2 of an earlier sweep is still running (pid {os.getpid()}); wait "
                              f"for it to end or stop it (kill {os.getpid()}), then --resume")
    assert f"pid {dead}" not in err, err  # the ended parent is not named
    assert main(["sweep", "--resume", "--no-progress", "--out", str(sw)]) == 0  # released: taken


def test_slices_are_named_and_a_lone_shared_holder_writes_its_line_alone(tmp_path):
    a = tmp_path / "a"
    a.mkdir()
    dead = _dead_pid()
    (a / R.LOCK).write_text(f"pid {dead} on {os.uname().nodename} (slice 2/3 of a sweep: x, since t)\n")
    with DirLock(a, shared=True, slice="0/3"):  # no other holder: the stale line goes
        assert (a / R.LOCK).read_text().startswith(f"pid {os.getpid()} on ") and f"pid {dead}" not in \
            (a / R.LOCK).read_text()
        with DirLock(a, shared=True, slice="1/3"):
            with pytest.raises(R.ConfigError) as e:
                DirLock(a)
    me = os.getpid()
    assert str(e.value) == (f"{a}: slices 0/3, 1/3 of an earlier sweep are still running (pids {me}, {me}); wait "
                            f"for them to end or stop them (kill {me} {me}), then --resume")
    with DirLock(a):  # an exclusive holder: its line alone, the plain refusal naming it
        assert (a / R.LOCK).read_text().count("\n") == 1
        with pytest.raises(R.ConfigError) as e:
            DirLock(a, shared=True, slice="0/2")
    assert str(e.value).startswith(f"{a} is being written by pid {me} on ") and \
        str(e.value).endswith("; wait for it to end, or choose another --out")


# ---- 3. how a child ended, and a run nothing writes -------------------------------------------------------

def test_exit_descriptions_name_the_signal():
    assert exit_description(-9, "a line") == "killed by SIGKILL"
    assert exit_description(-15) == "killed by SIGTERM"
    assert exit_description(1, "fedalf sweep: error: x") == "exited 1: fedalf sweep: error: x"
    assert exit_description(2) == "exited 2: (no output)"


def test_a_running_run_whose_lock_names_an_ended_process_reads_stopped(tmp_path):
    a = tmp_path / "a"
    a.mkdir()
    assert run_status_words("running", a) == "running" and not R.writer_ended(a)  # no lock file: not known
    (a / R.LOCK).write_text(f"pid {_dead_pid()} on {os.uname().nodename} (fedalf run, since t)\n")
    assert run_status_words("running", a) == "stopped (resume with --resume)"
    assert run_status_words("done", a) == "done" and run_status_words("new", a) == "new"
    (a / R.LOCK).write_text(f"pid {os.getpid()} on {os.uname().nodename} (fedalf run, since t)\n")
    assert run_status_words("running", a) == "running"  # its writer lives
    (a / R.LOCK).write_text(f"pid {_dead_pid()} on another-host-x (fedalf run, since t)\n")
    assert run_status_words("running", a) == "running"  # another host's process: not known here


@needs_proc
def test_a_child_killed_by_sigkill_reads_killed_by_sigkill_and_its_run_stopped(tmp_path, compile_cache):
    sw = tmp_path / "sw"
    proc, kid, long_ = _parent_waiting(sw, 100000)
    try:
        os.kill(kid, signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
    finally:
        for p in (kid, proc.pid):
            if _alive(p):
                os.kill(p, signal.SIGKILL)
    assert proc.returncode == 1, err
    assert err.strip().splitlines()[-1] == "fedalf sweep: error: slice 1/2 killed by SIGKILL", err
    assert f"2 runs: 1 done, 1 stopped (resume with --resume) -> {sw}" in out, out


# ---- 1. (the watch itself) ----------------------------------------------------------------------------------

WATCH = textwrap.dedent("""
    import os, signal, sys, time
    got = []
    signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
    from fedalf_jax import interrupt as I
    if sys.argv[1] == "poll":
        I._set_pdeathsig = lambda s: False
    print(I.watch_parent({"FEDALF_PARENT_PID": sys.argv[2]}, poll=0.05), flush=True)
    deadline = time.time() + 5
    while not got and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # a second signal, if one came, in time to be counted
    print(len(got), flush=True)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl")
@pytest.mark.parametrize("how", ["prctl", "poll"])
def test_a_child_whose_parent_is_already_gone_gets_one_sigterm_at_once(how):
    # FEDALF_PARENT_PID names a process that is not this one's parent: the parent ended before the watch
    # was set. One SIGTERM (not two: a second would make it leave unsaved); without the variable, none.
    r = subprocess.run([sys.executable, "-c", WATCH, how, str(_dead_pid())], cwd=REPO, env=_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.stdout.split() == [how, "1"], r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-c", WATCH.replace("time.time() + 5", "time.time() + 0.5"), how, ""],
                       cwd=REPO, env=_env(), capture_output=True, text=True, timeout=120)
    assert r.stdout.split() == ["None", "0"], r.stdout + r.stderr


def test_the_parents_end_after_a_first_signal_is_not_a_second(capsys):
    # The parent passed a signal on (the child stopping), then left on a second one: the kernel's SIGTERM
    # for its end must not make the child leave unsaved. A real second signal still does.
    state = (I.INTERRUPT.requested, I.INTERRUPT.signum, I.INTERRUPT.parent, I.INTERRUPT._orphaned,
             I.INTERRUPT.hard_exit, I.INTERRUPT._depth)
    try:
        I.INTERRUPT.requested, I.INTERRUPT.signum, I.INTERRUPT.hard_exit = True, signal.SIGTERM, False
        I.INTERRUPT.parent, I.INTERRUPT._orphaned, I.INTERRUPT._depth = _dead_pid(), False, 1
        I.INTERRUPT._handle(signal.SIGTERM, None)  # the parent's end: said, not counted
        assert "has ended; this slice is stopping already" in capsys.readouterr().err
        with pytest.raises(KeyboardInterrupt):
            I.INTERRUPT._handle(signal.SIGTERM, None)  # a second signal: leaves now
    finally:
        (I.INTERRUPT.requested, I.INTERRUPT.signum, I.INTERRUPT.parent, I.INTERRUPT._orphaned,
         I.INTERRUPT.hard_exit, I.INTERRUPT._depth) = state
