"""The progress bar of ``fedalf run`` and ``fedalf sweep``: one bar, moved from inside the compiled
program after every round (``jax.debug.callback``), saying when it is compiling."""

from __future__ import annotations

import threading
from typing import Optional


class Progress:
    """Rounds done of ``total`` (run-rounds for a sweep), with a postfix set by the loop.

    ``tick`` is called by the compiled program once per round and run in the current program call;
    ``begin_call(live, width)`` tells it how many of the call's ``width`` slots are real runs.
    """

    def __init__(self, total: int, *, initial: int = 0, enabled: bool = True, desc: str = "fedalf"):
        self._lock = threading.Lock()
        self._desc = desc
        self._bar = None
        if enabled:
            from tqdm.auto import tqdm
            self._bar = tqdm(total=total, initial=initial, unit="round", dynamic_ncols=True, desc=desc)
        self._base = initial
        self._calls = 0
        self._live, self._width = 1, 1
        self._stop: Optional[threading.Event] = None

    @property
    def enabled(self) -> bool:
        return self._bar is not None

    def begin_call(self, live: int, width: int) -> None:
        with self._lock:
            self._calls = 0
            self._live, self._width = live, width

    def tick(self, _round) -> None:
        if self._bar is None:
            return
        with self._lock:
            self._calls += 1
            n = self._base + (self._calls * self._live) // self._width
            if n > self._bar.n:
                self._bar.update(n - self._bar.n)

    def end_call(self, rounds_done: int) -> None:
        """The call finished ``rounds_done`` rounds for each of its live runs."""
        with self._lock:
            self._base += rounds_done * self._live
            if self._bar is not None and self._base != self._bar.n:
                self._bar.update(self._base - self._bar.n)

    def advance(self, n: int) -> None:
        """Count ``n`` run-rounds that no call will run (a diverged run's remaining rounds)."""
        with self._lock:
            self._base += n
            if self._bar is not None:
                self._bar.update(n)

    def postfix(self, **kw) -> None:
        if self._bar is not None:
            with self._lock:
                self._bar.set_postfix(kw, refresh=True)

    def compiling(self, on: bool) -> None:
        """Say "compiling" (and keep the elapsed time moving) while XLA compiles a program."""
        if self._bar is None:
            return
        if on:
            self._bar.set_description(f"{self._desc} (compiling)")
            self._stop = threading.Event()
            threading.Thread(target=self._refresh, args=(self._stop,), daemon=True).start()
        else:
            if self._stop is not None:
                self._stop.set()
            self._bar.set_description(self._desc)

    def _refresh(self, stop: threading.Event) -> None:
        while not stop.wait(1.0):
            with self._lock:
                self._bar.refresh()

    def close(self) -> None:
        if self._stop is not None:
            self._stop.set()
        if self._bar is not None:
            self._bar.close()
