"""Metric writers: one small interface, ``write_scalars(step, scalars)`` and ``close()``.

``metrics.csv`` (:class:`CsvWriter`) is always written: the run directory, ``--resume``, ``fedalf
report`` and the notebooks read it. ``--log tensorboard`` adds :class:`TensorBoardWriter`
(tensorboardX, the ``tensorboard`` extra). Another backend (W&B, MLflow) is a class with the same two
methods. Per-client accuracies (``acc_<i>`` keys) go to the CSV only.
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path
from typing import Iterable, Protocol

from .config import ConfigError

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

    ``keep_upto``: continue an existing file, keeping its well-formed rows whose step is ``≤ keep_upto``
    (a resumed run drops what was written after its checkpoint, and a line cut short by a kill).
    """

    def __init__(self, path: str | Path, columns: Iterable[str], *, keep_upto: int | None = None):
        self.path = Path(path)
        self.columns = list(columns)
        kept = []
        if keep_upto is not None and self.path.exists():
            kept = [r for r in read_csv_rows(self.path, len(self.columns)) if int(float(r[0])) <= keep_upto]
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


def read_csv_rows(path: str | Path, width: int | None = None) -> list[list[str]]:
    """The data rows of a CSV file, without the header. Rows of the wrong width are skipped (a line cut
    short by a kill); a full row whose step is not a whole number ≥ 0 is damage, refused in one line."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ConfigError(f"cannot read {path} ({getattr(e, 'strerror', None) or e})") from None
    if not rows:
        return []
    width = len(rows[0]) if width is None else width
    out = []
    for line, r in enumerate(rows[1:], start=2):
        if len(r) != width:
            continue
        try:
            step = float(r[0])
        except ValueError:
            step = math.nan
        if not (math.isfinite(step) and step >= 0 and step == int(step)):
            raise ConfigError(f"{path} line {line}: {rows[0][0] if rows[0] else 'step'} {r[0]!r} is not a round "
                              f"number; the file is damaged: restore it, or delete the line")
        out.append(r)
    return out


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
