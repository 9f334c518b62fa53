"""Stopping a run without losing it: Ctrl-C (SIGINT), SIGTERM (``kill``, ``timeout``, a scheduler's
pre-emption or time limit), SIGHUP (the terminal closed) and SIGUSR1 (Slurm's ``--signal=USR1@T``).

The first signal lets the round in flight finish (the run loop dispatches one round per program call);
the loop then evaluates that round, writes its metrics and a checkpoint and raises :class:`Interrupted`,
which carries the signal (the command line exits with 128 + its number: 130 for Ctrl-C, 143 for SIGTERM,
129 for SIGHUP, 138 for SIGUSR1). While data loads or programs compile, nothing is waited for: the work is
left to its daemon thread (:meth:`_Interrupt.abandon`) and the command leaves at its end with
``os._exit`` (no interpreter teardown under a running XLA compile). A second signal leaves at once (the
files on disk stay consistent, being written atomically).

This module imports nothing heavy: the ``fedalf`` command installs its handlers before JAX loads
(``fedalf_jax/__init__.py``), so a signal in its first second is kept, not raised inside one of JAX's
garbage-collection callbacks (where Python drops the ``KeyboardInterrupt``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Optional

# The signals handled like Ctrl-C (those the platform has).
SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1") if hasattr(signal, n))


def signal_name(signum: Optional[int]) -> str:
    """``Ctrl-C`` for SIGINT (and ``None``), else the signal's name (``SIGTERM``)."""
    if signum is None or signum == signal.SIGINT:
        return "Ctrl-C"
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class Interrupted(KeyboardInterrupt):
    """A signal ended the run loop after saving: ``round`` is the last completed round, checkpointed in
    each of ``dirs``; ``signum`` the signal (``signal.SIGINT`` for Ctrl-C)."""

    def __init__(self, round: int, dirs: list, saved: bool = True, signum: Optional[int] = None):
        self.signum = int(signal.SIGINT if signum is None else signum)
        super().__init__(f"interrupted by {signal_name(self.signum)} at round {round}")
        self.round, self.dirs, self.saved = round, dirs, saved  # saved: a checkpoint of ``round`` was written
        self.kept = True  # False: no round had finished and the run's files were removed (run it again as it was)
        self.checkpoints = True  # False: the run keeps none (checkpoint_every=never), so a resume starts it again

    @property
    def exit_status(self) -> int:
        """The command line's exit status: 128 + the signal's number."""
        return 128 + self.signum


def started_as_command() -> bool:
    """Whether this process is the ``fedalf`` command (its console script, or ``python -m fedalf_jax.cli``)."""
    argv = list(getattr(sys, "orig_argv", None) or [])
    if "-mfedalf_jax.cli" in argv or any(a == "-m" and b == "fedalf_jax.cli" for a, b in zip(argv, argv[1:])):
        return True
    main = sys.modules.get("__main__")
    script = getattr(main, "__file__", None)
    # (Python makes the main script's __file__ absolute, while sys.argv[0] is the path as typed: `.venv/bin/fedalf`)
    return bool(sys.argv) and script is not None and os.path.abspath(script) == os.path.abspath(sys.argv[0]) and \
        os.path.basename(sys.argv[0]) in ("fedalf", "fedalf.exe")


class _Interrupt:
    """The signals of :data:`SIGNALS` while a run loop is :meth:`active` (or, on the command line, from its
    start: :meth:`command`). The first sets :attr:`requested` and :attr:`signum`; the loop saves after the
    chunk in flight (before a loop, the command stops before its first chunk). The second leaves now:
    ``os._exit(128 + signum)`` when :attr:`hard_exit` (the command line: no interpreter teardown under a
    running XLA computation), else ``KeyboardInterrupt``."""

    def __init__(self):
        self.requested = False
        self.signum: Optional[int] = None
        self.hard_exit = False
        self.until: Optional[int] = None  # the round in flight
        self.checkpoints = True  # the loop's runs keep checkpoints (False: checkpoint_every=never)
        self.abandoned: Optional[threading.Thread] = None  # work left running after a signal (abandon)
        self.running = False  # the command's main() is running (outside a loop a signal raises there)
        self._cli = False  # handlers installed for the whole command
        self.parent: Optional[int] = None  # a ``sweep --processes`` child: its parent's pid (watch_parent)
        self._orphaned = False  # the parent's end was seen (its signal counted once)
        self._depth = 0
        self._previous: dict = {}

    def _install(self) -> None:
        for s in SIGNALS:  # SIGTERM, SIGHUP, SIGUSR1 only where nothing else handles or ignores them (nohup)
            if s == signal.SIGINT or signal.getsignal(s) == signal.SIG_DFL:
                self._previous[s] = signal.signal(s, self._handle)

    def _restore(self) -> None:
        for s, h in self._previous.items():
            signal.signal(s, signal.SIG_DFL if h is None else h)
        self._previous = {}

    def install_for_command(self) -> None:
        """The ``fedalf`` command's handlers, for the rest of the process (before JAX loads)."""
        if threading.current_thread() is threading.main_thread() and not self._cli:
            self._install()
            self._cli, self.hard_exit = True, True

    @contextlib.contextmanager
    def command(self):
        """The command line's ``main()``: the handlers on for its whole length (installed now unless the
        process installed them at its start), a second signal leaving at once."""
        mine = threading.current_thread() is threading.main_thread() and not self._cli
        if mine:
            self.requested, self.signum = False, None
            self._install()
            self._cli = True
        hard, self.hard_exit, self.running = self.hard_exit, True, True
        try:
            yield self
        finally:
            self.running, self.hard_exit = False, hard
            if self.abandoned is not None and self.abandoned.is_alive():
                self._leave_now()  # what the command printed is its last word; its status is the signal's
            if mine:
                self._restore()
                self._cli, self.requested, self.signum, self.until = False, False, None, None
                self.abandoned = None

    @contextlib.contextmanager
    def active(self):
        main = threading.current_thread() is threading.main_thread()
        if main and self._depth == 0 and not self._cli:
            self.requested, self.signum = False, None
            self._install()
        self._depth += main
        try:
            yield self
        finally:
            self._depth -= main
            if main and self._depth == 0:
                if not self._cli:  # a signal is kept for the command's end (it exits with its status)
                    self._restore()
                    self.requested, self.signum = False, None
                self.until = None

    def _orphan_signal(self, signum) -> bool:
        """Whether ``signum`` is the one that says this child's parent has ended (watch_parent), seen now."""
        if self.parent is None or self._orphaned or signum != signal.SIGTERM or os.getppid() == self.parent:
            return False
        self._orphaned = True
        return True

    def _handle(self, signum, frame):
        name = signal_name(signum)
        if self._orphan_signal(signum) and self.requested:  # stopping already: not a second signal
            print(f"\nfedalf: the --processes parent (pid {self.parent}) has ended; this slice is stopping already",
                  file=sys.stderr, flush=True)
            return
        if not self.requested:
            self.requested, self.signum = True, signum
            if self._depth == 0 and self.running:  # the command is running, but no run loop: stop now
                raise KeyboardInterrupt
            if self._depth == 0:  # the command's modules are still loading
                print(f"\nfedalf: {name}: stopping before the command starts ({name} again to leave now)",
                      file=sys.stderr, flush=True)
                return
            if self.until is None:  # no round in flight (loading, compiling): the loop leaves without waiting
                print(f"\nfedalf: {name}: stopping before the next round starts ({name} again to leave now)",
                      file=sys.stderr, flush=True)
                return
            saving = (f"its metrics and a checkpoint ({name} again to leave now, losing the rounds since the last "
                      f"checkpoint)" if self.checkpoints else
                      f"its metrics (no checkpoint: --checkpoint-every never; {name} again to leave now)")
            print(f"\nfedalf: {name}: finishing round {self.until} (in flight), then saving {saving}",
                  file=sys.stderr, flush=True)
            return
        again = f"{name} again" if signum == self.signum else name
        print(f"\nfedalf: {again}: leaving now; the files on disk are intact (resume with --resume)",
              file=sys.stderr, flush=True)
        if self.hard_exit:
            os._exit(128 + signum)
        raise KeyboardInterrupt

    @property
    def exit_status(self) -> int:
        return 128 + (signal.SIGINT if self.signum is None else self.signum)

    def abandon(self, worker: threading.Thread) -> None:
        """``worker`` (a daemon thread loading data or compiling) is left running after a signal: the
        command leaves with ``os._exit`` at its end instead of tearing the interpreter down under it."""
        self.abandoned = worker

    def _leave_now(self) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(self.exit_status)


INTERRUPT = _Interrupt()

PARENT_ENV = "FEDALF_PARENT_PID"  # a ``sweep --processes`` child's parent's pid, set by the parent (cli.py)
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def watch_parent(environ=None, poll: float = 0.5) -> Optional[str]:
    """A ``sweep --processes`` child (its parent's pid in ``FEDALF_PARENT_PID``) stops, as a SIGTERM stops it,
    when its parent ends, however it ends (a SIGKILL included): the round in flight finishes, is checkpointed
    and the run is left stopped, resumable; the child exits 143. Without this, a child of a parent killed by
    SIGKILL went on computing, unseen, and held its slice's lock (a ``--resume`` refused) until it ended.

    Linux: ``prctl(PR_SET_PDEATHSIG, SIGTERM)`` (through ctypes), which the kernel sends when the parent's
    thread that started this process ends (the parent starts its children and waits for them in one thread:
    cli._sweep_in_processes); it survives the allocator's re-exec (allocator.py: same process, no set-user-ID).
    Elsewhere (or where prctl fails) a daemon thread polls ``os.getppid()`` every ``poll`` s (the first time
    at once) and sends this process SIGTERM. Either way a parent gone before the watch was set (while this
    process started) is seen at once: after prctl, ``os.getppid()`` is checked (SIGTERM blocked meanwhile, so
    that a parent ending just then sends one signal, the kernel's, not two). The SIGTERM goes to
    :data:`INTERRUPT`'s handler (installed first, fedalf_jax/__init__.py), which counts the parent's end once:
    a child already stopping (its parent passed a signal on, then left on a second one) goes on saving
    instead of leaving at once.

    Returns how the parent is watched (``"prctl"``, ``"poll"``) or ``None`` (not a child: nothing done)."""
    env = os.environ if environ is None else environ
    try:
        parent = int(env.get(PARENT_ENV, ""))
    except ValueError:
        return None
    if parent <= 1:
        return None
    INTERRUPT.parent = parent
    blocking = hasattr(signal, "pthread_sigmask") and threading.current_thread() is threading.main_thread()
    if blocking:  # the kernel's SIGTERM, if the parent ends now, waits: one signal for the parent's end, not two
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        if _set_pdeathsig(signal.SIGTERM):
            if os.getppid() != parent and not (blocking and signal.SIGTERM in signal.sigpending()):
                _parent_gone()  # gone before the watch was set
            return "prctl"
    finally:
        if blocking:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    threading.Thread(target=_poll_parent, args=(parent, poll), daemon=True, name="fedalf-parent").start()
    return "poll"


def _set_pdeathsig(signum: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _poll_parent(parent: int, poll: float) -> None:
    import time
    while os.getppid() == parent:
        time.sleep(poll)
    _parent_gone()


def _parent_gone() -> None:
    """The parent has ended: SIGTERM to this process (its handler stops the run at the round's end)."""
    if hasattr(signal, "SIGTERM"):
        os.kill(os.getpid(), signal.SIGTERM)


class Abandoned(Exception):
    """A signal arrived while :func:`interruptible` waited for work it may leave unfinished (loading,
    compiling): the work goes on in its daemon thread, unwaited for (:meth:`_Interrupt.abandon`)."""


def interruptible(fn, *args, abandon: bool = False, on_signal=None):
    """``fn(*args)`` on a worker thread while this thread waits in short slices, so that a signal is seen
    at once even while XLA compiles or runs a round. ``abandon``: on a signal, raise :class:`Abandoned`
    now instead of waiting (work that computes nothing to keep: loading, compiling). ``on_signal()``:
    called once when a signal is first seen while waiting (the bar says what the loop waits for)."""
    box: dict = {}

    def work():
        try:
            box["out"] = fn(*args)
        except BaseException as e:  # re-raised in the caller
            box["err"] = e

    t = threading.Thread(target=work, daemon=True, name="fedalf-work")
    t.start()
    told = False
    while t.is_alive():
        t.join(0.05)
        if INTERRUPT.requested and t.is_alive():
            if abandon:
                INTERRUPT.abandon(t)
                raise Abandoned
            if on_signal is not None and not told:
                told = True
                on_signal()
    if "err" in box:
        raise box["err"]
    return box["out"]
