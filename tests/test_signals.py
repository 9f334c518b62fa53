"""Issue 27, items 2, 12 and 17: SIGTERM (and SIGHUP, SIGUSR1) stop a run as the first Ctrl-C does, a
signal in the command's first instant is kept, the resume hint can be pasted as printed, ``fedalf report``
names the command that finishes a run, and the integrity notices reach stderr whatever the warnings filter.

Expectations are independent of the code: exit statuses (128 + the signal's number), the rounds in
metrics.csv and the checkpoint, the printed resume command run as printed by a shell."""

import json
import os
import shlex
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from fedalf_jax.cli import main
from fedalf_jax.experiment.rundir import RunDir
from helpers import wait_for

TINY = ["--dataset", "synthetic", "--model", "mlp", "--clients", "4", "--clients-per-round", "2",
        "--synthetic-train", "200", "--synthetic-test", "80", "--rounds", "2", "--eval-every", "1",
        "--algorithm", "fedavg", "--no-progress"]
REPO = Path(__file__).resolve().parents[1]
FEDALF = Path(sys.executable).parent / "fedalf"  # the console script of the environment running the tests


def _env():
    """This tree first on the path; a PATH on which no ``fedalf`` is found (a hint must work as printed)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
            "PATH": "/usr/bin:/bin"}


def _rounds(folder: Path) -> list:
    return [int(r) for r in RunDir(folder).metrics()["round"]]


def _wait_for(cond, proc, timeout=180):
    wait_for(cond, proc, timeout=timeout, poll=0.005)


def _rows(csv: Path) -> int:
    return len(csv.read_text().splitlines()) - 1 if csv.exists() else 0


def _hint(err: str) -> str:
    """The one line naming the resume command, and the command."""
    lines = [line for line in err.splitlines() if "continue with: " in line]
    assert len(lines) == 1, err
    return lines[0].rpartition("continue with: ")[2]


def _paste(command: str, *extra, cwd) -> subprocess.CompletedProcess:
    """``command`` run by a shell exactly as printed (plus ``extra``)."""
    line = command + "".join(" " + shlex.quote(x) for x in extra)
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=300)


# ---- item 2: SIGTERM saves the finished rounds ---------------------------------------------------------

@pytest.mark.skipif(not FEDALF.exists(), reason="no fedalf console script next to the interpreter")
def test_sigterm_saves_the_last_round_exits_143_and_the_printed_command_resumes(tmp_path, compile_cache):
    (tmp_path / ".venv").symlink_to(FEDALF.parent.parent)  # the README's set-up: .venv/bin/fedalf, not on PATH
    cmd = [".venv/bin/fedalf", "run", *TINY, "--rounds", "100000", "--checkpoint-every", "1h", "--out", "a"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    a = tmp_path / "a"
    _wait_for(lambda: _rows(a / "metrics.csv") >= 4, proc)  # rounds 0..3 at least: no checkpoint yet (1 h)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    last = _rounds(a)[-1]
    assert last >= 3 and RunDir(a).checkpoint_round() == last, err  # every finished round is kept
    assert "fedalf: SIGTERM: finishing round " in err, err
    hint = _hint(err)
    assert f"interrupted by SIGTERM after round {last}: the metrics and a checkpoint of round {last} are saved" in err
    assert hint == ".venv/bin/fedalf run --resume --out a", err  # as invoked, not a bare `fedalf`
    assert "Traceback" not in err
    again = _paste(hint, "--rounds", str(last + 2), "--no-progress", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert _rounds(a)[-3:] == [last, last + 1, last + 2] and _rounds(a)[0] == 0  # continued, not restarted


def test_sigterm_in_a_sweep_saves_every_run_and_exits_143(tmp_path, compile_cache):
    sw = tmp_path / "sw"
    cmd = [sys.executable, "-m", "fedalf_jax.cli", "sweep", *TINY, "--rounds", "100000", "--seeds", "0", "1",
           "--out", str(sw)]
    proc = subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: _rows(sw / "fedavg_seed0" / "metrics.csv") >= 4, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "fedalf sweep: interrupted by SIGTERM: every finished round of its runs is saved" in err, err
    assert _hint(err) == f"{shlex.quote(sys.executable)} -m fedalf_jax.cli sweep --resume --out {sw}", err
    for name in ("fedavg_seed0", "fedavg_seed1"):
        last = _rounds(sw / name)[-1]
        assert last >= 3 and RunDir(sw / name).checkpoint_round() == last, name


# ---- item 12a: a signal in the first instant is kept --------------------------------------------------

def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (/proc/PID/status, SigCgt)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = int(next(line for line in status.splitlines() if line.startswith("SigCgt:")).split()[1], 16)
    return bool(mask >> (signum - 1) & 1)


def _default_signals():
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
        signal.signal(s, signal.SIG_DFL)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1"])
def test_a_signal_while_the_command_loads_stops_it_before_anything_is_written(tmp_path, sig):
    signum = getattr(signal, sig)
    a = tmp_path / "a"
    cmd = [sys.executable, "-m", "fedalf_jax.cli", "run", *TINY, "--rounds", "50", "--out", str(a)]
    proc = subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_signals)  # not ignored as under nohup (the command respects that)
    # The command catches SIGTERM from its first instant: the signal lands while JAX is still loading. Its
    # handlers go in one after another (SIGINT, SIGTERM, SIGHUP, SIGUSR1): wait for this signal's own too
    # (a SIGUSR1 sent once SIGTERM was caught landed before its handler, once, with the machine loaded).
    _wait_for(lambda: _catches(proc.pid, signal.SIGTERM) and _catches(proc.pid, signum), proc, timeout=60)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, err  # 130, 143, 129, 138
    name = "Ctrl-C" if signum == signal.SIGINT else sig
    assert err.strip().splitlines()[-1] == f"fedalf run: interrupted by {name} before it started: nothing was written"
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert not a.exists()  # nothing ran, nothing was written


# ---- item 12c: fedalf report names the command that finishes the run ---------------------------------------

def test_report_of_an_interrupted_run_says_fedalf_run_resume(tmp_path, capsys):
    a = tmp_path / "my run"
    assert main(["run", *TINY, "--out", str(a)]) == 0
    (a / "summary.json").unlink()  # as a run interrupted before its end leaves it
    capsys.readouterr()
    assert main(["report", str(a), "--out", str(tmp_path / "rep")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert f"finish them (fedalf run --resume --out '{a}')" in err and "sweep" not in err, err


# ---- item 17: integrity notices whatever the warnings filter ------------------------------------------------

def test_a_damaged_checkpoint_notice_reaches_stderr_under_pythonwarnings_ignore(tmp_path, capsys, compile_cache):
    a = tmp_path / "a"
    assert main(["run", *TINY, "--rounds", "4", "--checkpoint-every", "2", "--out", str(a)]) == 0
    ck = a / "checkpoint.npz"
    ck.write_bytes(ck.read_bytes()[: ck.stat().st_size // 2])  # the last generation damaged
    cfg_json = json.loads((a / "config.json").read_text())
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # what PYTHONWARNINGS=ignore installs
        code = main(["run", "--resume", "--out", str(a), "--rounds", "6"])
        err = capsys.readouterr().err
        assert code == 0, err
        lines = [line for line in err.splitlines() if "damaged checkpoint" in line]
        assert len(lines) == 1 and lines[0].startswith("fedalf: warning: ") and "(round 2)" in lines[0], err
    assert _rounds(a) == [0, 1, 2, 3, 4, 5, 6]
    # A Python caller keeps the warnings' semantics: its own filter decides.
    from fedalf_jax.experiment.config import Config
    ck.write_bytes(ck.read_bytes()[: ck.stat().st_size // 2])
    cfg = Config.from_dict({**cfg_json, "rounds": 6, "out": str(a)})
    with pytest.warns(UserWarning, match="damaged checkpoint"):
        RunDir(a).usable_checkpoint(cfg)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("ignore")
        RunDir(a).usable_checkpoint(cfg)
    assert rec == []


def test_pythonwarnings_ignore_in_the_environment_still_shows_the_notice(tmp_path, compile_cache):
    a = tmp_path / "a"
    assert main(["run", *TINY, "--rounds", "4", "--checkpoint-every", "2", "--out", str(a)]) == 0
    ck = a / "checkpoint.npz"
    ck.write_bytes(ck.read_bytes()[:100])
    res = subprocess.run([sys.executable, "-m", "fedalf_jax.cli", "run", "--resume", "--out", str(a), "--rounds", "5",
                          "--no-progress"], cwd=REPO, env={**_env(), "PYTHONWARNINGS": "ignore"},
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "fedalf: warning: " in res.stderr and "damaged checkpoint" in res.stderr, res.stderr
    assert _rounds(a) == [0, 1, 2, 3, 4, 5]


# ---- issue 36, items 3 and 4: a signal is answered after the round in flight, not after the chunk ----------

class _Stderr:
    """A subprocess's stderr read as it comes (the progress bar writes ``\\r``, not lines), on a thread."""

    def __init__(self, proc):
        import threading
        self.text = ""
        self._t = threading.Thread(target=self._read, args=(proc.stderr,), daemon=True)
        self._t.start()

    def _read(self, f):
        while True:
            b = os.read(f.fileno(), 4096)
            if not b:
                return
            self.text += b.decode(errors="replace")

    def done(self) -> str:
        self._t.join(30)
        return self.text


def _bar_rounds(text: str, total: int) -> int:
    """The most rounds the bar has counted (``| 12/20000``), 0 before it moves."""
    import re
    return max([int(n) for n in re.findall(rf"\| *(\d+)/{total} ", text)] or [0])


def _start(cmd, cwd):
    return subprocess.Popen(cmd, cwd=cwd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _columns(folder: Path) -> dict:
    m = RunDir(folder).metrics()
    return {k: v for k, v in m.items() if k != "seconds_per_round"}


PER_ROUND = ("model_conflicts", "layer_conflicts", "client_loss")  # means over the rounds since the last row


def test_sigterm_mid_chunk_stops_after_the_round_in_flight_and_a_resume_evaluates_as_before(tmp_path, compile_cache):
    # One chunk of 20000 rounds (today's loop answered after it: minutes); the signal once the bar has
    # counted a few rounds of it.
    total = 20000
    opts = [*TINY[:-1], "--checkpoint-every", "1h"]  # progress on: the test reads the bar
    a = tmp_path / "a"
    proc = _start([sys.executable, "-m", "fedalf_jax.cli", "run", *opts, "--rounds", str(total), "--eval-every",
                   str(total), "--out", str(a)], REPO)
    err = _Stderr(proc)
    _wait_for(lambda: _bar_rounds(err.text, total) >= 3, proc, timeout=240)
    proc.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    proc.wait(timeout=120)
    took, text = time.monotonic() - sent, err.done()
    assert proc.returncode == 143, text
    cut = _rounds(a)[-1]
    assert _rounds(a) == [0, cut] and 3 <= cut < total, text  # the chunk cut short: round 0 and the cut round
    assert RunDir(a).checkpoint_round() == cut, text  # every round computed is kept
    assert "(stopping after round " in text and "finishing round " in text, text
    assert f"interrupted by SIGTERM after round {cut}: the metrics and a checkpoint of round {cut} are saved" in text
    assert took < 60, took  # the round in flight (milliseconds here) and the cut round's evaluation
    # Resumed with another cadence (not part of a run's identity) that the cut round is not a multiple of: it
    # evaluates at its usual rounds again (multiples of ee after the cut) and ends where the uninterrupted run
    # ends, bit for bit.
    ee = next(e for e in (5, 6, 7) if cut % e)
    end = (cut // ee + 2) * ee
    again = subprocess.run([sys.executable, "-m", "fedalf_jax.cli", "run", "--resume", "--out", str(a), "--rounds",
                            str(end), "--eval-every", str(ee), "--no-progress"], cwd=REPO, env=_env(),
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    b = tmp_path / "b"
    assert main(["run", *opts, "--rounds", str(end), "--eval-every", str(ee), "--no-progress", "--out", str(b)]) == 0
    after = [r for r in _rounds(b) if r > cut]
    assert _rounds(a) == [0, cut, *after] and after[-1] == end
    ma, mb = _columns(a), _columns(b)
    ia = [_rounds(a).index(r) for r in after]
    ib = [_rounds(b).index(r) for r in after]
    for k in mb:
        same = ma[k][ia] if k not in PER_ROUND else ma[k][ia][1:]  # the first row after the cut: its means
        want = mb[k][ib] if k not in PER_ROUND else mb[k][ib][1:]  # cover the rounds since the cut only
        np.testing.assert_array_equal(same, want, err_msg=k)
    np.testing.assert_array_equal(ma["mean_acc"][:1], mb["mean_acc"][:1])  # round 0
    ca, cb = np.load(a / "checkpoint.npz"), np.load(b / "checkpoint.npz")
    for k in cb.files:
        np.testing.assert_array_equal(ca[k], cb[k], err_msg=k)


def test_sigterm_while_compiling_exits_at_once_and_leaves_nothing_that_blocks_the_same_command(tmp_path, compile_cache):
    a = tmp_path / "a"
    # FedALF's CNN, uncached: a compile of many seconds (today's loop went on to compile it and run 30 rounds)
    slow = ["--model", "cnn", "--algorithm", "fedalf", "--rounds", "30", "--eval-every", "30", "--no-compile-cache"]
    cmd = [sys.executable, "-m", "fedalf_jax.cli", "run", *TINY[:-1], *slow, "--out", str(a)]
    proc = _start(cmd, REPO)
    err = _Stderr(proc)
    _wait_for(lambda: "(compiling)" in err.text, proc, timeout=240)
    proc.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    proc.wait(timeout=120)
    took, text = time.monotonic() - sent, err.done()
    assert proc.returncode == 143, text
    assert took < 5, (took, text)  # not the rest of the compile and the 30 rounds
    assert ("interrupted by SIGTERM after round 0: no round had finished and none of its files are left: the same "
            "command starts it again") in text, text
    assert not a.exists(), list(a.iterdir())  # nothing written is left, the folder included
    # The folder does not block a run (the small MLP's, to keep the test short: a run's options are not checked
    # against a folder that holds no run).
    again = subprocess.run([sys.executable, "-m", "fedalf_jax.cli", "run", *TINY, "--out", str(a)],
                           cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert _rounds(a) == [0, 1, 2]


def test_a_folder_whose_run_never_finished_a_round_is_taken_by_the_same_command(tmp_path, capsys, compile_cache):
    # What a SIGKILL (or a second signal) while compiling leaves: config.json, clients.json, metrics.csv's header.
    a = tmp_path / "a"
    a.mkdir()
    header = "round,mean_acc\n"
    for name, text in (("config.json", "{}"), ("clients.json", "{}"), ("metrics.csv", header)):
        (a / name).write_text(text)
    assert main(["run", *TINY, "--out", str(a)]) == 0
    err = capsys.readouterr().err
    assert "holds the files of a run that never finished a round (killed before it): replacing them" in err, err
    assert _rounds(a) == [0, 1, 2]
    # A row computed is never replaced without --overwrite, even with no checkpoint.
    b = tmp_path / "b"
    b.mkdir()
    (b / "config.json").write_text("{}")
    (b / "metrics.csv").write_text(header + "0,0.5\n")
    assert main(["run", *TINY, "--out", str(b)]) == 2
    err = capsys.readouterr().err
    assert "already holds a run (stopped before its first checkpoint)" in err, err
    assert (b / "metrics.csv").read_text() == header + "0,0.5\n"


def test_a_sweep_stops_after_the_round_in_flight_too(tmp_path, compile_cache):
    total = 20000
    sw = tmp_path / "sw"
    cmd = [sys.executable, "-m", "fedalf_jax.cli", "sweep", *TINY[:-1], "--rounds", str(total), "--eval-every",
           str(total), "--seeds", "0", "1", "--out", str(sw)]  # the bar on: the test reads it
    proc = subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = _Stderr(proc)
    deadline = time.time() + 240
    while _bar_rounds(err.text, 2 * total) < 6 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    text = err.done()
    assert proc.returncode == 143, text
    cuts = {RunDir(sw / f"fedavg_seed{s}").metrics()["round"][-1] for s in (0, 1)}
    assert len(cuts) == 1 and 3 <= (cut := int(cuts.pop())) < total, text  # the two runs cut at one round
    for s in (0, 1):
        rd = RunDir(sw / f"fedavg_seed{s}")
        assert list(rd.metrics()["round"]) == [0, cut] and rd.checkpoint_round() == cut
