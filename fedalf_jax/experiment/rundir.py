"""Run directories: the one module that writes them and reads them back.

A run directory (what ``fedalf run --out DIR`` writes, and what ``fedalf sweep`` writes per run)::

    config.json      every option of the run (``fedalf run --config DIR/config.json`` reruns it)
    clients.json     the data source and each client's classes and sample counts
    metrics.csv      one row per evaluation: round, mean_acc, angle, ..., acc_0 .. acc_{N-1}
    checkpoint.npz   the run state at the last checkpoint (``--resume`` continues from it)
    checkpoint.prev.npz   the one before (a sweep killed while writing its runs' checkpoints resumes
                     every run of the interrupted program call from the same round)
    summary.json     written when the run ends: status ("done" or "diverged"), the final row, times
    tb/              TensorBoard scalars (``--log tensorboard`` only)

A sweep directory holds ``sweep.json`` (the list of its runs) and one run directory per run.
``fedalf report``, ``fedalf sweep --resume``, the notebooks and the experiment scripts read these
files only through this module. Files other than ``metrics.csv`` are replaced atomically (written to
a temporary name, then renamed), so a killed process never leaves half a JSON or checkpoint behind
(a stale temporary file is removed when the directory is opened for writing again); a line of
``metrics.csv`` cut short by a kill is dropped when the run resumes (and skipped by readers).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Iterable, Optional

import jax
import numpy as np

from ..sim.round import METRIC_KEYS
from .config import Config, ConfigError
from .writers import PER_CLIENT_PREFIX, CsvWriter, TensorBoardWriter, read_csv_rows

CONFIG, CLIENTS, METRICS, SUMMARY, CHECKPOINT, SWEEP = (
    "config.json", "clients.json", "metrics.csv", "summary.json", "checkpoint.npz", "sweep.json")
PREV_CHECKPOINT = "checkpoint.prev.npz"

SUMMARY_KEYS = ("mean_acc", "angle", "angle_deg", "std_acc", "worst10_acc", "best10_acc")
EVAL_KEYS = SUMMARY_KEYS + ("test_loss", "train_loss", "seconds_per_round")


def metric_columns(num_clients: int) -> list[str]:
    """The columns of ``metrics.csv``."""
    return ["round", *EVAL_KEYS, *METRIC_KEYS] + [f"{PER_CLIENT_PREFIX}{i}" for i in range(num_clients)]


def scalars_of(row: dict) -> dict:
    """A loop row (with an ``acc`` vector) as flat scalars for the metric writers."""
    out = {k: float(v) for k, v in row.items() if k not in ("acc", "round")}
    out.update({f"{PER_CLIENT_PREFIX}{i}": float(a) for i, a in enumerate(row["acc"])})
    return out


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_json(path: Path, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, indent=2, default=_json_default) + "\n")


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _read_json(path: Path) -> Optional[Any]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path} is not valid JSON ({e.msg}); remove it or rerun the run") from None


class RunDir:
    """One run directory (it need not exist yet)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    @property
    def name(self) -> str:
        return self.path.name

    # ---- writing --------------------------------------------------------------------------------
    def create(self) -> None:
        """Make the directory (with its parents) and remove temporary files a killed write left."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"cannot create the run directory {self.path} ({e.strerror}); "
                              f"pass another --out") from None
        if not os.access(self.path, os.W_OK):
            raise ConfigError(f"the run directory {self.path} is not writable; pass another --out")
        for tmp in self.path.glob("*.tmp*"):
            tmp.unlink(missing_ok=True)

    def write_config(self, cfg: Config) -> None:
        write_json(self.path / CONFIG, cfg.to_dict())

    def write_clients(self, source: str, clients: list) -> None:
        write_json(self.path / CLIENTS, {"source": source, "clients": clients})

    def writers(self, cfg: Config, *, keep_upto: Optional[int] = None) -> list:
        """The run's metric writers: ``metrics.csv`` (continued up to ``keep_upto`` on resume), and
        TensorBoard's when ``cfg.log == "tensorboard"``."""
        out = [CsvWriter(self.path / METRICS, metric_columns(cfg.clients), keep_upto=keep_upto)]
        if cfg.log == "tensorboard":
            out.append(TensorBoardWriter(self.path / "tb"))
        return out

    def write_summary(self, summary: dict) -> None:
        write_json(self.path / SUMMARY, summary)

    def clear_summary(self) -> None:
        (self.path / SUMMARY).unlink(missing_ok=True)

    def save_checkpoint(self, state) -> None:
        """``state`` (a :class:`RunState`) as ``checkpoint.npz``: its leaves in tree order, and its round.
        The previous checkpoint becomes ``checkpoint.prev.npz``."""
        leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.device_get(state))]
        tmp = self.path / (CHECKPOINT + ".tmp.npz")
        with open(tmp, "wb") as f:
            np.savez(f, *leaves, round=np.asarray(jax.device_get(state.round)))
            f.flush()
            os.fsync(f.fileno())
        if (self.path / CHECKPOINT).exists():
            os.replace(self.path / CHECKPOINT, self.path / PREV_CHECKPOINT)
        os.replace(tmp, self.path / CHECKPOINT)

    # ---- reading --------------------------------------------------------------------------------
    def has_config(self) -> bool:
        return (self.path / CONFIG).is_file()

    def has_checkpoint(self) -> bool:
        return bool(self.checkpoint_rounds())

    def checkpoint_rounds(self) -> dict[int, Path]:
        """The rounds of the available checkpoints (the last one and the one before), to their files."""
        out = {}
        for name in (PREV_CHECKPOINT, CHECKPOINT):
            p = self.path / name
            if p.is_file():
                try:
                    with np.load(p) as f:
                        out[int(f["round"])] = p
                except (OSError, ValueError, KeyError):
                    continue  # unreadable: ignored
        return out

    def config_dict(self) -> dict:
        d = _read_json(self.path / CONFIG)
        if d is None:
            raise ConfigError(f"{self.path / CONFIG} not found; is {self.path} a run directory?")
        return d

    def config(self) -> Config:
        return Config.from_dict(self.config_dict())

    def clients(self) -> Optional[dict]:
        return _read_json(self.path / CLIENTS)

    def summary(self) -> Optional[dict]:
        return _read_json(self.path / SUMMARY)

    def status(self) -> str:
        """``done``, ``diverged``, ``running`` (started, not ended: in progress or killed) or ``new``."""
        s = self.summary()
        if s is not None:
            return s.get("status", "done")
        return "running" if self.has_config() else "new"

    def metrics(self) -> dict[str, np.ndarray]:
        """``metrics.csv`` as columns of floats (``round`` as int); empty columns when there are no rows."""
        path = self.path / METRICS
        if not path.is_file():
            return {}
        with open(path) as f:
            header = f.readline().strip().split(",")
        rows = read_csv_rows(path, len(header))
        cols = {c: np.array([_num(r[j]) for r in rows], dtype=np.float64) for j, c in enumerate(header)}
        if "round" in cols:
            cols["round"] = cols["round"].astype(np.int64)
        return cols

    def client_accuracies(self, metrics: Optional[dict] = None) -> np.ndarray:
        """``[evaluations, N]`` per-client accuracies from ``metrics.csv``."""
        m = self.metrics() if metrics is None else metrics
        keys = sorted((k for k in m if k.startswith(PER_CLIENT_PREFIX)), key=lambda k: int(k[len(PER_CLIENT_PREFIX):]))
        return np.stack([m[k] for k in keys], axis=1) if keys else np.zeros((0, 0))

    def checkpoint_round(self) -> int:
        """The round of the last checkpoint (read without loading the state)."""
        return max(self.checkpoint_rounds())

    def load_checkpoint(self, like, round: Optional[int] = None):
        """The checkpointed state (the last one, or the one taken after ``round``), with the structure
        and shapes of ``like`` (arrays or ``eval_shape``)."""
        avail = self.checkpoint_rounds()
        path = avail[max(avail) if round is None else round]
        treedef = jax.tree_util.tree_structure(like)
        with np.load(path) as f:
            leaves = [f[f"arr_{i}"] for i in range(len(f.files) - 1)]
        want = jax.tree_util.tree_leaves(like)
        if len(leaves) != treedef.num_leaves or [x.shape for x in leaves] != [tuple(x.shape) for x in want]:
            raise ConfigError(f"checkpoint {path} does not match this config's "
                              f"model/algorithm; resume with the run directory's own config.json")
        # NumPy stores bfloat16 as raw 2-byte values: view them as the state's dtype again
        leaves = [x.view(w.dtype) if x.dtype.kind == "V" and x.dtype.itemsize == np.dtype(w.dtype).itemsize else x
                  for x, w in zip(leaves, want)]
        if any(x.dtype != w.dtype for x, w in zip(leaves, want)):
            raise ConfigError(f"checkpoint {path} holds other dtypes than this config (state_dtype?); resume "
                              f"with the run directory's own config.json")
        return jax.tree_util.tree_unflatten(treedef, [jax.numpy.asarray(x) for x in leaves])


def _num(s: str) -> float:
    try:
        return float(s)
    except ValueError:
        return math.nan


# ---- sweeps ---------------------------------------------------------------------------------------

def write_sweep(root: Path, runs: list[dict], meta: dict) -> None:
    write_json(root / SWEEP, {**meta, "runs": runs})


def read_sweep(root: str | os.PathLike) -> dict:
    d = _read_json(Path(root) / SWEEP)
    if d is None:
        raise ConfigError(f"{Path(root) / SWEEP} not found; is {root} a sweep directory (fedalf sweep --out)?")
    return d


def find_runs(paths: Iterable[str | os.PathLike]) -> list[RunDir]:
    """Run directories named by ``paths``: run directories themselves, sweep directories (their
    ``sweep.json`` runs), or any folder (every run directory below it). Sorted, without repeats."""
    found: dict[Path, RunDir] = {}
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise ConfigError(f"{p} does not exist; pass run or sweep directories")
        if (p / CONFIG).is_file():
            cands = [p]
        elif (p / SWEEP).is_file():
            cands = [p / r["dir"] for r in read_sweep(p)["runs"]]
        else:
            cands = sorted(c.parent for c in p.rglob(CONFIG))
        for c in cands:
            found.setdefault(c.resolve(), RunDir(c))
    return [found[k] for k in sorted(found)]
