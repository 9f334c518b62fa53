"""Ctrl-C in ``fedalf bench``: stop the measurement in flight at once and keep what was measured
(:class:`BenchStopped`, :func:`ctrl_c_stops`, :func:`stoppable`), killing a PyTorch loop it started."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading

_CHILDREN: set = set()  # the PyTorch subprocesses running, killed when Ctrl-C abandons a measurement


def _kill(proc) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    _CHILDREN.discard(proc)


class BenchStopped(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, where the run loop's :data:`~fedalf_jax.experiment.loop.INTERRUPT` catches it)
    stopped a measurement. ``records``: a suite's records so far; ``worker``: the thread still computing
    the abandoned measurement (the command line leaves with ``os._exit``, never tearing the interpreter
    down under a running XLA computation)."""

    def __init__(self, records=None, worker=None):
        super().__init__("fedalf bench: interrupted")
        self.records, self.worker = records, worker


def say(line: str) -> None:
    """A progress line of ``fedalf bench`` (stderr, so that stdout keeps only the table)."""
    print(f"fedalf bench: {line}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def ctrl_c_stops():
    """While active, Ctrl-C sets the run loop's ``INTERRUPT.requested`` (which :func:`stoppable` polls)
    with bench's own message; a second Ctrl-C leaves at once (``os._exit(130)`` on the command line).
    The loop's :data:`INTERRUPT` installs and restores the handlers (SIGTERM too, where it does)."""
    from ..experiment.loop import INTERRUPT
    with INTERRUPT.active():
        if threading.current_thread() is threading.main_thread():
            def handle(signum, frame):
                if not INTERRUPT.requested:
                    INTERRUPT.requested = True
                    print("\nfedalf bench: Ctrl-C: stopping the measurement in flight; what was measured follows "
                          "(Ctrl-C again to leave now)", file=sys.stderr, flush=True)
                    return
                if INTERRUPT.hard_exit:
                    import os
                    os._exit(130)
                raise KeyboardInterrupt
            signal.signal(signal.SIGINT, handle)
        yield


def stoppable(fn, *args, **kw):
    """``fn(*args, **kw)`` on a worker thread while this thread waits in short slices (the run loop's
    ``_interruptible`` pattern), raising :class:`BenchStopped` as soon as a Ctrl-C is requested, without
    waiting for the computation in flight (which may take minutes: a measurement is only a timing)."""
    from ..experiment.loop import INTERRUPT
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
