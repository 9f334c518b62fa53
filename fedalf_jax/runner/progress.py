"""The progress bar of ``fedalf run`` and ``fedalf sweep``: one bar of rounds, moved after every
program call (one round), that says what the command is doing meanwhile.

While a stage runs (loading data or a checkpoint, compiling a program, an evaluation, a round) the
bar's description names it with its own clock (``fedalf run (compiling) 12s``), and a ticker thread
redraws the bar so that both clocks keep moving. The compiled programs call nothing back (no
``jax.debug.callback``): JAX never writes a program with a host callback to the persistent compilation
cache (:mod:`.cache`); the loop calls one program per round instead. The rate and ETA count from the
first round (:meth:`Progress.start_rounds`), not from the start of loading and compiling, and so does the
rate of the bar's last line (the rounds over their own time, not the command's: :func:`_bar_class`).
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import time
import warnings
from typing import Optional


@functools.lru_cache(maxsize=None)  # one class: tqdm keeps its bars' positions and lock per class
def _bar_class():
    """``tqdm.auto.tqdm`` whose rate, where tqdm has no smoothed one (its last line, drawn at close, which tqdm
    makes the whole command's rounds over its whole time), counts from the first round to the last round
    counted (:meth:`Progress.start_rounds`, :meth:`Progress.end_call`): not the loading, the compile, nor the
    final checkpoint's write. Its elapsed clock stays the command's."""
    from tqdm.auto import tqdm

    class Bar(tqdm):
        rounds_from = rounds_to = None  # (time, rounds counted) at the first round's start, at the last's end

        @property
        def format_dict(self):
            d = super().format_dict
            a, b = self.rounds_from, self.rounds_to
            if d.get("rate") is None and a is not None and b is not None and b[0] > a[0] and b[1] > a[1]:
                d["rate"] = (b[1] - a[1]) / (b[0] - a[0])
            return d
    return Bar


def _clock(sec: float) -> str:
    sec = int(sec)
    return f"{sec}s" if sec < 60 else f"{sec // 60}m{sec % 60:02d}s"


class Progress:
    """Rounds done of ``total`` (run-rounds for a sweep), with a postfix set by the loop and the stage
    in progress (:meth:`stage`) in its description.

    ``refresh_s``: how often the ticker redraws the bar during a stage (default 0.5 s on a terminal,
    10 s into a file or pipe, whose every redraw is a line of the log). ``delay``: seconds before the bar
    is first drawn (a command that stops at once, with an error, leaves its one line alone).
    """

    def __init__(self, total: int, *, initial: int = 0, enabled: bool = True, desc: str = "fedalf",
                 refresh_s: Optional[float] = None, delay: float = 0.0):
        self._lock = threading.Lock()
        self._desc = desc
        self._bar = None
        if enabled:
            self._bar = _bar_class()(total=total, initial=initial, unit="round", dynamic_ncols=True, desc=desc,
                                     delay=delay)
        if refresh_s is None:
            out = getattr(self._bar, "fp", None) or sys.stderr
            refresh_s = 0.5 if getattr(out, "isatty", lambda: False)() else 10.0
        self._refresh_s = refresh_s
        self._shown_at = time.monotonic() + delay  # nothing drawn before (a command that fails at once: one line)
        self._drawn = False
        self._base = initial
        self._live, self._call = 1, (0, 0)
        self._stages: list[list] = []  # [text, since]: the top one is shown
        self._note = ""  # said before the stage from a signal on ("stopping after round 12")
        self._stop = threading.Event()
        self._ticker: Optional[threading.Thread] = None

    @property
    def enabled(self) -> bool:
        return self._bar is not None

    # -- stages: what the command is doing between two moves of the bar

    @contextlib.contextmanager
    def stage(self, text: str):
        """Say ``text`` (with the time since it began) while the block runs; stages nest, the innermost
        is shown and the one below takes over (its clock restarted) when it ends."""
        self._push(text)
        try:
            yield
        finally:
            self._pop(text)

    def compiling(self, on: bool) -> None:
        """Say "compiling" while XLA compiles a program (``on``), or stop saying it."""
        (self._push if on else self._pop)("compiling")

    def _push(self, text: str, redraw: bool = True) -> None:
        if self._bar is None:
            return
        with self._lock:
            self._stages.append([text, time.monotonic()])
            self._show(redraw)
            if self._ticker is None:
                self._ticker = threading.Thread(target=self._tick, name="fedalf-progress", daemon=True)
                self._ticker.start()

    def _pop(self, text: str, redraw: bool = True) -> None:
        if self._bar is None:
            return
        with self._lock:
            for i in range(len(self._stages) - 1, -1, -1):
                if self._stages[i][0] == text:
                    del self._stages[i]
                    break
            if self._stages:
                self._stages[-1][1] = time.monotonic()
            self._show(redraw)

    def _show(self, redraw: bool = True) -> None:
        """Set the description to the current stage and redraw (``redraw``; else the next redraw shows
        it: a round's stage is not worth a line of a log file of its own). The lock is held."""
        note = f"{self._note}: " if self._note else ""
        if self._stages:
            text, since = self._stages[-1]
            self._bar.set_description(f"{self._desc} ({note}{text}) {_clock(time.monotonic() - since)}", refresh=False)
        else:
            self._bar.set_description(f"{self._desc} ({self._note})" if self._note else self._desc, refresh=False)
        if redraw and time.monotonic() >= self._shown_at:
            self._bar.refresh()
            self._drawn = True

    def _tick(self) -> None:
        wait = self._shown_at - time.monotonic()  # the first redraw when the bar may be drawn (delay)
        while not self._stop.wait(wait if wait > 0 else self._refresh_s):
            wait = 0.0
            with self._lock:
                if self._stages and not self._stop.is_set():
                    self._show()

    def stopping(self, round: Optional[int]) -> None:
        """A signal arrived: say ``stopping after round N`` (before the stage) until the bar closes."""
        if self._bar is None or round is None:
            return
        with self._lock:
            self._note = f"stopping after round {round}"
            self._show()

    # -- counting rounds

    def set_initial(self, n: int) -> None:
        """The rounds already done when the bar was made before they were known (a resume's checkpoint)."""
        if self._bar is None:
            return
        with self._lock:
            self._base = n
            self._bar.initial = self._bar.n = self._bar.last_print_n = n
            self._show()

    def start_rounds(self) -> None:
        """The rounds begin now: the rate (and the ETA) count from here, not from the loading and the
        compile before (tqdm measures its first rate from its last redraw by an update)."""
        if self._bar is None:
            return
        with self._lock:
            self._bar.last_print_t = self._bar._time()
            self._bar.last_print_n = self._bar.n
            if self._bar.rounds_from is None:  # (a sweep's later calls: still from its first round)
                self._bar.rounds_from = (self._bar.last_print_t, self._bar.n)

    def begin_call(self, live: int, first: int, last: int) -> None:
        """A program call of rounds ``first``..``last`` for each of its ``live`` runs begins."""
        self._live, self._call = live, (first, last)
        self._push(self._rounds(first, last), redraw=False)

    def end_call(self, rounds_done: int) -> None:
        """The call finished ``rounds_done`` rounds for each of its live runs."""
        self._pop(self._rounds(*self._call), redraw=False)
        with self._lock:
            self._base += rounds_done * self._live
            if self._bar is not None and self._base != self._bar.n:
                self._bar.update(self._base - self._bar.n)
            if self._bar is not None and self._bar.rounds_from is not None:
                self._bar.rounds_to = (self._bar._time(), self._bar.n)

    @staticmethod
    def _rounds(first: int, last: int) -> str:
        return f"round {first}" if first == last else f"rounds {first}–{last}"

    def advance(self, n: int) -> None:
        """Count ``n`` run-rounds that no call will run (a diverged run's remaining rounds)."""
        with self._lock:
            self._base += n
            if self._bar is not None:
                self._bar.update(n)

    def set_total(self, total: int) -> None:
        """The bar's total, once known (a sweep's bar shows its planning stages before it knows it)."""
        if self._bar is not None:
            with self._lock:
                self._bar.total = total
                self._bar.refresh()

    def write(self, line: str) -> None:
        """``line`` on stderr, above the bar (which is redrawn below it)."""
        if self._bar is None:
            print(line, file=sys.stderr, flush=True)
            return
        with self._lock:
            self._bar.write(line, file=sys.stderr)

    @contextlib.contextmanager
    def warnings_above(self):
        """While the block runs, the warnings shown (``warnings.showwarning``, from any thread) are written
        above the bar, on lines of their own, not into its line."""
        if self._bar is None:
            yield
            return
        show = warnings.showwarning

        def above(*args, **kw):
            with self._lock, type(self._bar).external_write_mode(file=sys.stderr):
                show(*args, **kw)
        warnings.showwarning = above
        try:
            yield
        finally:
            if warnings.showwarning is above:
                warnings.showwarning = show

    def postfix(self, **kw) -> None:
        if self._bar is not None:
            with self._lock:
                self._bar.set_postfix(kw, refresh=True)

    def close(self, *, failed: bool = False) -> None:
        """End the bar; ``failed``: the command stops with an error, so the bar's line is erased (on a
        terminal) and the error is the one line left."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        if self._bar is not None:
            with self._lock:
                self._stages.clear()
                self._bar.set_description(self._desc, refresh=False)
                if failed:
                    self._bar.leave = False
                if self._drawn:  # drawn by a stage before any count: tqdm must still end (or erase) its line
                    self._bar.last_print_t = max(self._bar.last_print_t, self._bar.start_t + self._bar.delay)
                self._bar.close()


def stage(progress: Optional[Progress], text: str):
    """``progress.stage(text)``, or nothing without a bar."""
    return progress.stage(text) if progress is not None else contextlib.nullcontext()
