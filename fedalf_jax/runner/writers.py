"""Metric writers: one small interface, ``write_scalars(step, scalars)`` and ``close()``.

``metrics.csv`` (:class:`CsvWriter`) is always written: the run directory, ``--resume``, ``fedalf
report`` and the notebooks read it. ``--log tensorboard`` adds :class:`TensorBoardWriter`
(tensorboardX, the ``tensorboard`` extra). Another backend (W&B, MLflow) is a class with the same two
methods. Per-client accuracies (``acc_<i>`` keys) go to the CSV only.
"""

from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path
from typing import Iterable, Protocol

from ..config.config import ConfigError

PER_CLIENT_PREFIX = "acc_"


def tmp_name(name: str) -> str:
    """The temporary name an atomic write of ``name`` goes through (the only names ever cleaned up)."""
    return name + ".tmp"


def discard(path: Path) -> None:
    """Remove ``path`` if it is there, ignoring a failure (a temporary file after a failed write)."""
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # 0 where the OS has no such flag


def open_new(path: Path, mode: str = "w", **kw):
    """``path`` opened for writing as a new file: whatever has that name is removed first (a temporary
    file a killed write left, or a symbolic link planted there) and the file is created exclusively
    (``O_EXCL``: a link is never followed), so a write never lands outside the folder. Used for the
    temporary names of the atomic writes, which are this project's own."""
    discard(path)
    return open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o666), mode, **kw)


def _no_follow(path, flags):
    """An ``opener`` for ``open``: a symbolic link at ``path`` is refused (``ELOOP``), never followed."""
    return os.open(path, flags | NOFOLLOW, 0o666)


class WriteError(ConfigError):
    """A file of a run or sweep directory could not be written: the run stops at once."""

    def __init__(self, path, err: OSError):
        self.path = Path(path)
        super().__init__(f"cannot write {path} ({err.strerror or err})")


class MetricWriter(Protocol):
    def write_scalars(self, step: int, scalars: dict) -> None: ...

    def close(self) -> None: ...


class CsvWriter:
    """Rows of a fixed set of ``columns`` (the first is the step, named ``round``), flushed per row.

    ``keep_upto``: continue an existing file, keeping its rows whose step is ``≤ keep_upto`` (a resumed
    run drops what was written after its checkpoint, and a last line cut short by a kill); a damaged
    file (:func:`read_csv_rows`) is refused before anything is written.
    """

    def __init__(self, path: str | Path, columns: Iterable[str], *, keep_upto: int | None = None):
        self.path = Path(path)
        self.columns = list(columns)
        kept = []
        if keep_upto is not None and self.path.exists():
            kept = [r for r in read_csv_rows(self.path, columns=self.columns) if int(float(r[0])) <= keep_upto]
        tmp = self.path.with_name(tmp_name(self.path.name))
        try:
            with open_new(tmp, "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(self.columns)
                w.writerows(kept)
            os.replace(tmp, self.path)
            self._f = open(self.path, "a", newline="", opener=_no_follow)  # the file just renamed there
        except OSError as e:
            discard(tmp)
            raise WriteError(self.path, e) from None
        self._w = csv.writer(self._f)

    def write_scalars(self, step: int, scalars: dict) -> None:
        try:
            self._w.writerow([step] + [scalars.get(c, float("nan")) for c in self.columns[1:]])
            self._f.flush()
        except OSError as e:
            raise WriteError(self.path, e) from None

    def close(self) -> None:
        self._f.close()


class DamagedFile(ConfigError):
    """A file fedalf wrote reads back as no process of it could have left it (one line: the file, the line,
    what is wrong there and what to do)."""


def read_csv_rows(path: str | Path, width: int | None = None, *, columns: Iterable[str] | None = None) -> list[list[str]]:
    """The data rows of a ``metrics.csv``-like file (a header, then one row of numbers per step, the first
    the step), without the header, checked whole.

    ``columns``: the header the file must have (a resumed run's own :func:`.columns.metric_columns`); else the
    header's own names (unique, none empty), and ``width`` (if given) its width. Damage is refused in one
    line naming the file and line (:class:`DamagedFile`): another header, a row of the wrong width, a
    value that is not a number, a step that is not a whole number ≥ 0, steps that do not strictly
    increase (a repeated or reordered row). The one thing a kill leaves is tolerated: the last line cut
    short (no line end after it, or fewer values than the header) is dropped when it does not read whole.
    """
    try:
        with open(path, newline="") as f:
            text = f.read()
        rows = list(csv.reader(io.StringIO(text)))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ConfigError(f"cannot read {path} ({getattr(e, 'strerror', None) or e})") from None

    def damaged(line: int, what: str, fix: str = "restore it, or delete the line") -> DamagedFile:
        return DamagedFile(f"{path} line {line}: {what}; the file is damaged: {fix}")

    want = None if columns is None else list(columns)
    if not rows:
        if want is not None:
            raise damaged(1, "no header", "restore it, or start the run again with --overwrite")
        return []
    header = rows[0]
    if want is not None and header != want:
        at = next((j for j, (a, b) in enumerate(zip(header, want)) if a != b), min(len(header), len(want)))
        got = repr(header[at]) if at < len(header) else "nothing"
        raise damaged(1, f"the header has {got} where the run's columns have "
                         f"{repr(want[at]) if at < len(want) else 'no more'} (column {at + 1})",
                      "restore it, or start the run again with --overwrite")
    names = [c for c in header if c]
    if len(names) != len(header) or len(set(names)) != len(names):
        raise damaged(1, "the header has an empty or repeated column name",
                      "restore it, or start the run again with --overwrite")
    width = len(header) if width is None else width
    step_name = header[0] if header else "step"
    out: list[list[str]] = []
    last_step = -math.inf
    data = rows[1:]
    ends = text.endswith(("\n", "\r"))
    for line, r in enumerate(data, start=2):
        final = line == len(data) + 1
        cut = final and (not ends or len(r) < width)  # what a kill leaves: dropped if it does not read whole
        if len(r) != width:
            if cut:
                break
            raise damaged(line, f"{len(r)} values where the header has {width}",
                          "restore it, or start the run again with --overwrite")
        try:
            step = float(r[0])
        except ValueError:
            step = math.nan
        if not (math.isfinite(step) and step >= 0 and step == int(step)):
            if cut:
                break
            raise damaged(line, f"{step_name} {r[0]!r} is not a round number")
        bad = next((j for j, v in enumerate(r) if not _is_number(v)), None)
        if bad is not None:
            if cut:
                break
            raise damaged(line, f"{header[bad] if bad < len(header) else 'column ' + str(bad + 1)} {r[bad]!r} "
                                f"is not a number")
        if step <= last_step:
            if cut:
                break
            raise damaged(line, f"{step_name} {int(step)} comes after {step_name} {int(last_step)} (each "
                                f"{step_name} once, in increasing order)")
        last_step = step
        out.append(r)
    return out


def _is_number(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return False
    return True


class TensorBoardWriter:
    """Scalars to TensorBoard event files under ``logdir`` (needs ``pip install tensorboardX``)."""

    def __init__(self, logdir: str | Path):
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            raise ConfigError("--log tensorboard needs tensorboardX: pip install tensorboardX "
                              "(or the fedalf-jax[tensorboard] extra)") from None
        self._w = SummaryWriter(str(logdir))

    def write_scalars(self, step: int, scalars: dict) -> None:
        for k, v in scalars.items():
            if k.startswith(PER_CLIENT_PREFIX) or not isinstance(v, (int, float)) or not math.isfinite(v):
                continue
            self._w.add_scalar(k, v, step)
        self._w.flush()

    def close(self) -> None:
        self._w.close()
