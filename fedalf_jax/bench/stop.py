"""Ctrl-C (or SIGTERM, SIGHUP, SIGUSR1) in ``fedalf bench``: stop the measurement in flight at once and keep
what was measured (:class:`BenchStopped`, :func:`ctrl_c_stops`, :func:`stoppable`), killing a PyTorch loop it
started; the command exits with 128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM)."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading

from ..runtime.interrupt import INTERRUPT, SIGNALS, signal_name

_CHILDREN: set = set()  # the PyTorch subprocesses running, killed when Ctrl-C abandons a measurement


def _kill(proc) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    _CHILDREN.discard(proc)


class BenchStopped(KeyboardInterrupt):
    """Ctrl-C (or another of the run loop's signals: SIGTERM, SIGHUP, SIGUSR1) stopped a measurement.
    ``records``: a suite's records so far; ``worker``: the thread still computing the abandoned
    measurement (the command line leaves with ``os._exit``, never tearing the interpreter down under a
    running XLA computation); ``signum``: the signal (default: the one the run loop's ``INTERRUPT`` got,
    else SIGINT)."""

    def __init__(self, records=None, worker=None, signum=None):
        if signum is None:
            signum = INTERRUPT.signum
        self.signum = int(signal.SIGINT if signum is None else signum)
        super().__init__(f"fedalf bench: interrupted by {signal_name(self.signum)}")
        self.records, self.worker = records, worker

    @property
    def exit_status(self) -> int:
        """The command line's exit status: 128 + the signal's number."""
        return 128 + self.signum


def say(line: str) -> None:
    """A progress line of ``fedalf bench`` (stderr, so that stdout keeps only the table)."""
    print(f"fedalf bench: {line}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def ctrl_c_stops():
    """While active, Ctrl-C -- and SIGTERM, SIGHUP, SIGUSR1 where the run loop's :data:`INTERRUPT` handles
    them (not where ``nohup`` or the caller set their own) -- sets ``INTERRUPT.requested`` and
    ``INTERRUPT.signum`` (which :func:`stoppable` polls) with bench's own message; a second signal leaves at
    once (``os._exit(128 + signum)`` on the command line). The previous handlers come back at the end."""
    with INTERRUPT.active():
        previous = {}
        if threading.current_thread() is threading.main_thread():
            def handle(signum, frame):
                name = signal_name(signum)
                if not INTERRUPT.requested:
                    INTERRUPT.requested, INTERRUPT.signum = True, signum
                    print(f"\nfedalf bench: {name}: stopping the measurement in flight; what was measured follows "
                          f"({name} again to leave now)", file=sys.stderr, flush=True)
                    return
                if INTERRUPT.hard_exit:
                    import os
                    os._exit(128 + signum)
                raise KeyboardInterrupt
            for s in SIGNALS:
                if s == signal.SIGINT or signal.getsignal(s) == INTERRUPT._handle:
                    previous[s] = signal.signal(s, handle)
        try:
            yield
        finally:
            for s, h in previous.items():
                signal.signal(s, signal.SIG_DFL if h is None else h)


def stoppable(fn, *args, **kw):
    """``fn(*args, **kw)`` on a worker thread while this thread waits in short slices (the run loop's
    ``_interruptible`` pattern), raising :class:`BenchStopped` as soon as a Ctrl-C is requested, without
    waiting for the computation in flight (which may take minutes: a measurement is only a timing)."""
    box: dict = {}

    def work():
        try:
            box["out"] = fn(*args, **kw)
        except BaseException as e:  # noqa: BLE001 -- re-raised in the caller
            box["err"] = e

    t = threading.Thread(target=work, daemon=True, name="fedalf-bench")
    t.start()
    while t.is_alive():
        if INTERRUPT.requested:
            for proc in list(_CHILDREN):  # a PyTorch loop in flight ends with the measurement
                _kill(proc)
            raise BenchStopped(worker=t)
        t.join(0.1)
    if "err" in box:
        raise box["err"]
    return box["out"]
