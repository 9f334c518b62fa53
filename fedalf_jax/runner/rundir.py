"""Run directories: the one module that writes them and reads them back.

A run directory (what ``fedalf run --out DIR`` writes, and what ``fedalf sweep`` writes per run)::

    config.json      every option of the run (``fedalf run --config DIR/config.json`` reruns it)
    clients.json     the data source and each client's classes and sample counts
    metrics.csv      one row per evaluation: round, mean_acc, angle, ..., acc_0 .. acc_{N-1} (the columns
                     and their order: :mod:`.columns`)
    checkpoint.npz   the run state at the last checkpoint (``--resume`` continues from it)
    checkpoint.prev.npz   the one before (``fedalf run``: the fallback when the last one is damaged;
                     a sweep's runs keep only their last checkpoint, see :meth:`RunDir.save_checkpoint`)
    summary.json     written when the run ends: status ("done" or "diverged"), the final row, times
                     (``--resume`` rebuilds a lost one from metrics.csv and the final checkpoint)
    tb/              TensorBoard scalars (``--log tensorboard`` only): ``events.out.tfevents.*`` files, the
                     only ones ``--overwrite`` removes there (a user's own files in ``tb/`` stay)

A sweep directory holds ``sweep.json`` (the list of its runs: :mod:`.sweepdir`, which also finds the run
directories that paths name) and one run directory per run; the folder's lock, the names of the files a
folder may hold and the removal of their stale temporary files (a sweep's too) are this module's.
``fedalf report``, ``fedalf sweep --resume``, the notebooks and the experiment scripts read these
files only through this module. Files other than ``metrics.csv`` are replaced atomically (written to
a temporary name, then renamed), so a killed process never leaves half a JSON or checkpoint behind
(a stale temporary file, by its exact name, is removed once the next writer holds the folder's
lock); the last line of ``metrics.csv``, cut short by a kill, is dropped when the run resumes (and
skipped by readers), and any other damage there is refused in one line (``writers.read_csv_rows``).

Trust: a checkpoint records what produced it (:func:`run_identity`: every option but the bookkeeping
ones, ``config.BOOKKEEPING``, the loaded data's digest and a user's code's) and is checked whole before it is used (a damaged one
falls back to the previous generation, with a warning; a sweep's runs keep one generation, each
read back whole before it replaces the one before); one process writes a folder at a time
(``.fedalf.lock``, an OS lock released on any exit), and nothing in a folder is removed or written
before its lock is held (a command refused because another process writes the folder changes nothing
in it); a failed write raises :class:`WriteError` at once; every path read from ``sweep.json`` must lie
inside the sweep's folder (:func:`.sweepdir.read_sweep`); no write follows a symbolic link planted in a
folder (a run folder received as a tarball): the lock is opened with ``O_NOFOLLOW`` (a link there is
refused in one line), the temporary files are created anew (``O_EXCL``) and renamed over the name, which
replaces a link there rather than writing through it, and a ``tb`` link is refused for ``--log tensorboard``.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import warnings
from pathlib import Path
from typing import Any, Iterable, Optional

import jax
import numpy as np

from ..runtime.notices import Notice
from .columns import metric_columns
from ..config.config import DATASETS, Config, ConfigError
from ..config.identity import check_code, from_run, identity_diff, identity_digest, say_code
from .writers import (NOFOLLOW, PER_CLIENT_PREFIX, CsvWriter, TensorBoardWriter, WriteError, discard, open_new,
                      read_csv_rows, tmp_name)
from .dirlock import (LOCK, DirLock, _HOLDER, _flock_shared, _holders_alive, _json_default, _json_text,  # noqa: F401
                      _read_json, _refusal, pid_alive, write_atomic, write_json, writer_ended)

CONFIG, CLIENTS, METRICS, SUMMARY, CHECKPOINT, SWEEP = (
    "config.json", "clients.json", "metrics.csv", "summary.json", "checkpoint.npz", "sweep.json")
PREV_CHECKPOINT = "checkpoint.prev.npz"
COMPRESS_ENV = "FEDALF_COMPRESS_CHECKPOINTS"  # "1": checkpoints written with np.savez_compressed
TB = "tb"
TB_EVENTS = "events.out.tfevents.*"  # the event files TensorBoardWriter (tensorboardX) writes in TB
# the files a run writes (``--overwrite`` removes these and TB's event files), and the exact temporary
# names of the atomic writes (removed once a writer holds the folder: nothing else is ever deleted)
RUN_FILES = (CONFIG, CLIENTS, METRICS, SUMMARY, CHECKPOINT, PREV_CHECKPOINT)
TEMPORARIES = tuple(tmp_name(n) for n in (*RUN_FILES, SWEEP)) + ("checkpoint.npz.tmp.npz",)  # (older name)

def run_identity(cfg: Config) -> dict:
    """What a checkpoint records of the run that wrote it: ``cfg``'s identity (:meth:`Config.identity`) and,
    for a data set read from files, the digest of the arrays loaded (``data_digest``), not the folder they
    came from: the same arrays resume from any path, other arrays are refused."""
    ident = cfg.identity()
    if cfg.dataset in DATASETS and cfg.dataset != "synthetic":  # synthetic: its options determine it
        from .build import loaded_data
        ident["data_digest"] = loaded_data(cfg)[0]
    return ident


class RunDir:
    """One run directory (it need not exist yet).

    ``keep_previous``: a new checkpoint keeps the one before as ``checkpoint.prev.npz`` (``fedalf run``);
    without it (a sweep's runs) only the last checkpoint is kept. ``compress``: write checkpoints with
    ``np.savez_compressed`` (default: the environment variable ``FEDALF_COMPRESS_CHECKPOINTS=1``); both
    kinds are read alike.
    """

    def __init__(self, path: str | os.PathLike, *, keep_previous: bool = True, compress: Optional[bool] = None):
        self.path = Path(path)
        self.keep_previous = keep_previous
        self.compress = (os.environ.get(COMPRESS_ENV, "") not in ("", "0")) if compress is None else bool(compress)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    @property
    def name(self) -> str:
        return self.path.name

    # ---- writing --------------------------------------------------------------------------------
    def create(self) -> None:
        """Make the directory (with its parents); nothing in it changes (:meth:`lock` removes the
        temporary files a killed write left, once it holds the folder)."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"cannot create the run directory {self.path} ({e.strerror}); "
                              f"pass another --out") from None
        if not os.access(self.path, os.W_OK):
            raise ConfigError(f"the run directory {self.path} is not writable; pass another --out")

    def lock(self, *, shared: bool = False, slice: Optional[str] = None) -> DirLock:
        """Hold the directory for writing (create it first); see :class:`DirLock`. Once held alone (not
        ``shared``), the temporary files a killed write left are removed (the exact names this module
        writes, nothing else): a command refused because another process holds the folder changes
        nothing in it. (Under a shared hold they stay: another holder may be writing one; each atomic
        write removes a stale one at its own name first, :func:`open_new`.)"""
        held = DirLock(self.path, shared=shared, slice=slice)
        if not shared:
            for name in TEMPORARIES:
                discard(self.path / name)  # a file or a link (never followed); a folder there stays
            for p in self.path.glob(f"{SWEEP}.*.tmp"):  # a sweep slice's own (sweepdir.write_sweep)
                if re.fullmatch(rf"{re.escape(SWEEP)}\.\d+\.tmp", p.name):
                    discard(p)
        return held

    def holds_run(self) -> bool:
        """Whether a run has written here (any of its files)."""
        return any((self.path / n).exists() for n in RUN_FILES)

    def started(self) -> bool:
        """Whether the run here finished a round: a checkpoint file (usable or not), a summary, or a row in
        ``metrics.csv``. A run stopped or killed before (its ``config.json``, ``clients.json``, the header
        of ``metrics.csv``, TensorBoard's empty event files) holds nothing computed."""
        if self.checkpoint_files() or (self.path / SUMMARY).exists():
            return True
        try:
            lines = (self.path / METRICS).read_bytes().splitlines()
        except FileNotFoundError:
            return False
        except OSError:
            return True  # unreadable: never taken for empty
        return sum(1 for line in lines if line.strip()) > 1

    def claim(self, *, resume: bool, overwrite: bool) -> DirLock:
        """Make the directory ready for a run and lock it: a folder that holds a sweep is refused; one
        that holds a run is refused unless ``resume`` (continue it) or ``overwrite`` (its run files are
        removed first). The caller releases the returned lock."""
        if resume and overwrite:
            raise ConfigError("--resume continues the run in --out and --overwrite replaces it; choose one")
        self.create()
        lock = self.lock()
        try:
            if (self.path / SWEEP).exists():
                raise ConfigError(f"{self.path} holds a sweep (sweep.json); a run needs a folder of its own: "
                                  f"choose another --out")
            if not resume and self.holds_run():
                if not overwrite and not self.started():  # killed before its first round: nothing to keep
                    print(f"fedalf: {self.path} holds the files of a run that never finished a round (killed before "
                          f"it): replacing them", file=sys.stderr, flush=True)
                elif not overwrite:
                    raise ConfigError(f"{self.path} already holds a run ({self.describe()}); continue it with "
                                      f"--resume, replace it with --overwrite, or choose another --out")
                self.remove_run_files()
        except BaseException:
            lock.release()
            raise
        return lock

    def describe(self) -> str:
        """``"done at round 200"``, ``"diverged at round 40"``, ``"stopped at round 30"``, ``"not started"``."""
        try:
            s = self.summary()
        except ConfigError:
            s = None
        if s is not None:
            return f"{s.get('status', 'done')} at round {s.get('round', '?')}"
        rounds = self.checkpoint_rounds()
        if rounds:
            return f"stopped at round {max(rounds)}"
        return "stopped before its first checkpoint" if self.started() else "not started"

    def remove_if_unused(self, upto: Optional[Path] = None) -> None:
        """Remove the directory if it holds nothing but this module's lock (a run that failed at once),
        and its parents up to ``upto`` while they are empty."""
        try:
            if {p.name for p in self.path.iterdir()} <= {LOCK}:
                (self.path / LOCK).unlink(missing_ok=True)
                self.path.rmdir()
                if upto is not None and self.path != upto:
                    for p in self.path.parents:  # the folders between it and upto, upto included
                        if not (p == upto or upto in p.parents):
                            break
                        p.rmdir()
                        if p == upto:
                            break
        except OSError:
            pass

    def remove_run_files(self) -> None:
        """Remove everything a run writes here (nothing else): its files, and in ``tb/`` the TensorBoard
        event files (``tb/`` itself once empty; a user's own files there stay, and a ``tb`` that is a
        link is left alone)."""
        tb = self.path / TB
        try:
            for name in RUN_FILES:
                (self.path / name).unlink(missing_ok=True)
            if tb.is_dir() and not tb.is_symlink():
                for p in tb.glob(TB_EVENTS):
                    if not p.is_dir() or p.is_symlink():
                        p.unlink()
                if not any(tb.iterdir()):
                    tb.rmdir()
        except OSError as e:
            raise WriteError(self.path, e) from None

    def write_config(self, cfg: Config) -> None:
        """``config.json``: every option, and the derived ``privacy`` record (ignored when read back); says in
        one line what the digest of a user's algorithm or model covers (a run's start and every resume)."""
        write_json(self.path / CONFIG, {**cfg.to_dict(), "privacy": cfg.privacy})
        say_code(cfg)

    def write_clients(self, source: str, clients: list) -> None:
        write_json(self.path / CLIENTS, {"source": source, "clients": clients})

    def writers(self, cfg: Config, *, keep_upto: Optional[int] = None, extra: Iterable[str] = ()) -> list:
        """The run's metric writers: ``metrics.csv`` (continued up to ``keep_upto`` on resume; ``extra``: the
        algorithm's own metric columns), and TensorBoard's when ``cfg.log == "tensorboard"``."""
        if cfg.log == "tensorboard" and (self.path / TB).is_symlink():  # its event files would go elsewhere
            raise ConfigError(f"{self.path / TB} is a symbolic link, and fedalf writes only inside the run folder: "
                              f"remove the link, or choose another --out")
        out = [CsvWriter(self.path / METRICS, metric_columns(cfg.clients, extra), keep_upto=keep_upto)]
        if cfg.log == "tensorboard":
            out.append(TensorBoardWriter(self.path / TB))
        return out

    def write_summary(self, summary: dict) -> None:
        write_json(self.path / SUMMARY, summary)

    def clear_summary(self) -> None:
        try:
            (self.path / SUMMARY).unlink(missing_ok=True)
        except OSError as e:
            raise WriteError(self.path / SUMMARY, e) from None

    def save_checkpoint(self, state, cfg: Config) -> None:
        """``state`` (a :class:`RunState`) as ``checkpoint.npz``: its leaves in tree order (each in its own
        dtype), its round and the identity of ``cfg``, the config that produced it. :class:`WriteError`
        (the temporary file removed, the checkpoints on disk as they were) when the folder cannot be
        written.

        ``keep_previous``: the previous checkpoint becomes ``checkpoint.prev.npz``. Without it (a
        sweep), the new file is read back whole (every member's CRC) before it replaces the previous
        one, and a ``checkpoint.prev.npz`` left from earlier is removed after: a run always has one
        usable checkpoint, and a sweep whose checkpoint thread writes one file at a time holds one
        checkpoint per run plus the one being written (a sweep killed between its runs' writes resumes
        each run from its own checkpoint: sweep._start_rounds)."""
        leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.device_get(state))]
        ident = run_identity(cfg)
        tmp = self.path / tmp_name(CHECKPOINT)
        save = np.savez_compressed if self.compress else np.savez
        try:
            with open_new(tmp, "wb") as f:
                save(f, *leaves, round=np.asarray(jax.device_get(state.round)),
                     identity=np.asarray(json.dumps(ident, sort_keys=True)),
                     digest=np.asarray(identity_digest(ident)))
                f.flush()
                os.fsync(f.fileno())
            if self.keep_previous:
                if (self.path / CHECKPOINT).exists():
                    os.replace(self.path / CHECKPOINT, self.path / PREV_CHECKPOINT)
                os.replace(tmp, self.path / CHECKPOINT)
                return
            bad = _read_meta(tmp)
            if isinstance(bad, str):  # written but not readable back: keep the checkpoint there is
                raise OSError(f"the new checkpoint does not read back ({bad})")
            os.replace(tmp, self.path / CHECKPOINT)
            (self.path / PREV_CHECKPOINT).unlink(missing_ok=True)
        except OSError as e:
            discard(tmp)
            raise WriteError(self.path / CHECKPOINT, e) from None

    # ---- reading --------------------------------------------------------------------------------
    def has_config(self) -> bool:
        return (self.path / CONFIG).is_file()

    def has_checkpoint(self) -> bool:
        return bool(self.checkpoint_rounds())

    def checkpoint_files(self) -> list[Path]:
        """The checkpoint files present, usable or not."""
        return [self.path / n for n in (PREV_CHECKPOINT, CHECKPOINT) if (self.path / n).is_file()]

    def checkpoint_rounds(self) -> dict[int, Path]:
        """The rounds of the usable checkpoints (the last one and the one before), to their files. Each
        file is read whole first (the zip's CRCs); a damaged one is left out (:meth:`usable_checkpoint`
        says so), so a resume falls back to the other generation."""
        out = {}
        for p in self.checkpoint_files():
            meta = _checkpoint_meta(p)
            if not isinstance(meta, str):
                out[meta[0]] = p
        return out

    def damaged_checkpoints(self) -> dict[str, str]:
        """The checkpoint files that cannot be used, to why."""
        return {p.name: m for p in self.checkpoint_files() if isinstance(m := _checkpoint_meta(p), str)}

    def checkpoint_identity(self, path: Path) -> Optional[dict]:
        """The identity recorded in a (usable) checkpoint file; ``None`` for one written before identities."""
        meta = _checkpoint_meta(path)
        return None if isinstance(meta, str) else meta[1]

    def usable_checkpoint(self, cfg: Config, round: Optional[int] = None) -> Optional[tuple[int, Path]]:
        """``(round, file)`` of the checkpoint to resume ``cfg`` from (the last usable one, or the one of
        ``round``), after checking that ``cfg`` produced it; ``None`` when there are no checkpoint files.
        Raises one line when files exist but none is usable, or when the checkpoint's identity differs
        from ``cfg``'s (naming the differing options)."""
        if not self.checkpoint_files():
            return None
        avail, damaged = self.checkpoint_rounds(), self.damaged_checkpoints()
        why = "; ".join(f"{n}: {m}" for n, m in damaged.items())
        if not avail:
            raise ConfigError(f"no usable checkpoint in {self.path} ({why}); start the run again with --overwrite")
        if round is None:
            round = max(avail)
        elif round not in avail:
            raise ConfigError(f"{self.path} has no usable checkpoint of round {round} (it has rounds "
                              f"{sorted(avail)}{'; ' + why if why else ''})")
        path = avail[round]
        if damaged:
            warnings.warn(f"{self.path}: damaged checkpoint ({why}); resuming from {path.name} (round {round})",
                          Notice, stacklevel=2)
        elif not (self.path / CHECKPOINT).is_file():  # gone (deleted, or a kill between the two renames)
            warnings.warn(f"{self.path}: {CHECKPOINT} is missing; resuming from {path.name} (round {round})",
                          Notice, stacklevel=2)
        ident = self.checkpoint_identity(path)
        if ident is None:
            warnings.warn(f"{path} was written before checkpoints recorded their config; it is not checked "
                          f"against {CONFIG}", Notice, stacklevel=2)
        else:
            now = run_identity(cfg)
            diff = identity_diff(ident, now)
            if diff == ["central_rounds"]:  # only --rounds changed, but the noise was calibrated to them
                a, b = ident["central_rounds"], now["central_rounds"]
                raise ConfigError(f"the checkpoint in {self.path} is of a --dp central run whose noise is calibrated "
                                  f"to its {a} rounds, so it cannot go on to {b}: resume it with --rounds {a}, or "
                                  f"start a run of {b} rounds with --overwrite or another --out")
            if diff:
                shown = ", ".join(f"{k} {ident.get(k)!r} -> {now.get(k)!r}" for k in diff[:4])
                more = f" and {len(diff) - 4} more" if len(diff) > 4 else ""
                raise ConfigError(f"the checkpoint in {self.path} was written by another configuration ({shown}"
                                  f"{more}); only rounds, cadences and out may change on --resume: restore "
                                  f"{CONFIG}, or start a new run with --overwrite or another --out")
            self._check_content(cfg, ident, now)
        return round, path

    def _check_content(self, cfg: Config, ident: dict, now: dict) -> None:
        """The checkpoint's data and user-code digests (config.CONTENT) against this process's: a changed
        one is refused in one line; one that cannot be checked (not recorded yet, or uncheckable) is said."""
        new = now.get("data_digest")
        if new is not None:
            from .build import loaded_data
            source = loaded_data(cfg)[1]
            old = ident.get("data_digest")
            if old is None:
                warnings.warn(f"{self.path}: the checkpoint was written before runs recorded their data's digest, "
                              f"so the data loaded now ({source}) is not checked against the run's", Notice,
                              stacklevel=3)
            elif old != new:
                try:
                    then = (self.clients() or {}).get("source") or self.config_dict().get("data_dir")
                except ConfigError:  # clients.json or config.json unreadable: the digest still names it
                    then = None
                then = then or "source not recorded"
                raise ConfigError(f"the data loaded now ({source}, digest {new}) is not the data the run in "
                                  f"{self.path} was trained on ({then}, digest {old}); point --data-dir (or "
                                  f"$FEDALF_DATA_DIR) at the run's data, or start a new run with --overwrite or "
                                  f"another --out")
        for kind in ("algorithm", "model"):
            new = now.get(f"{kind}_code")
            if new is None:  # built in: the package's code
                continue
            check_code(kind, getattr(cfg, kind), ident.get(f"{kind}_code"), new, self.path,
                       ident.get(f"{kind}_code_files"))

    def config_dict(self) -> dict:
        """The run's config.json, with the values it ran with for options added since (:func:`from_run`)."""
        d = _read_json(self.path / CONFIG)
        if d is None:
            raise ConfigError(f"{self.path / CONFIG} not found; is {self.path} a run directory?")
        return from_run(d)

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
        """The round of the last usable checkpoint (read without loading the state)."""
        return max(self.checkpoint_rounds())

    def load_checkpoint(self, like, round: Optional[int] = None, cfg: Optional[Config] = None):
        """The checkpointed state (the last usable one, or the one taken after ``round``), with the
        structure and shapes of ``like`` (arrays or ``eval_shape``). With ``cfg``, the checkpoint must
        have been written by a config of the same identity (:meth:`usable_checkpoint`)."""
        if cfg is not None:
            found = self.usable_checkpoint(cfg, round)
            if found is None:
                raise ConfigError(f"{self.path} has no checkpoint")
            path = found[1]
        else:
            avail = self.checkpoint_rounds()
            if not avail or (round is not None and round not in avail):
                raise ConfigError(f"{self.path} has no usable checkpoint" + (f" of round {round}" if round is not None else ""))
            path = avail[max(avail) if round is None else round]
        treedef = jax.tree_util.tree_structure(like)
        with np.load(path) as f:
            n = sum(1 for k in f.files if k.startswith("arr_"))
            leaves = [f[f"arr_{i}"] for i in range(n)]
        want = jax.tree_util.tree_leaves(like)
        if _without_seen(like, leaves, want):  # written before the round kept which clients were sampled
            leaves = leaves + [self._seen_at(int(leaves[-2]), want[-1].shape[0], cfg)]
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


    def _seen_at(self, rnd: int, num_clients: int, cfg: Optional[Config]) -> np.ndarray:
        """``[N]`` bool: the clients the run's first ``rnd`` rounds sampled, replayed from its seed (the sampling
        depends on nothing else), for a checkpoint of a ``personal_model`` algorithm written before the round
        kept them (``RunState.clients["seen"]``)."""
        from ..sim.round import participation_counts
        cfg = cfg if cfg is not None else self.config()
        return participation_counts(num_clients, cfg.clients_per_round, cfg.seed, rnd) > 0


def _without_seen(like, leaves, want) -> bool:
    """``leaves`` are ``like``'s (a run state) but for its last leaf, ``clients["seen"]``, the only thing the
    round keeps per client for this algorithm (a checkpoint from before it was kept)."""
    clients = getattr(like, "clients", None)
    return (isinstance(clients, dict) and list(clients) == ["seen"] and len(leaves) == len(want) - 1
            and [x.shape for x in leaves] == [tuple(x.shape) for x in want[:-1]])


_META_CACHE: dict = {}


def _checkpoint_meta(path: Path):
    """``(round, identity or None)`` of a checkpoint file after reading all of it (every member's CRC),
    or a string saying why it is unusable. Cached per file version (size, mtime)."""
    try:
        st = path.stat()
    except OSError as e:
        return e.strerror or "unreadable"
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _META_CACHE:
        _META_CACHE[key] = _read_meta(path)
    return _META_CACHE[key]


def _read_meta(path: Path):
    try:
        with np.load(path, allow_pickle=False) as f:
            for k in f.files:  # reading each member checks its CRC
                f[k]
            rnd = int(f["round"])
            ident = json.loads(str(f["identity"])) if "identity" in f.files else None
    except Exception as e:  # noqa: BLE001 - any defect (truncation, bit flips, not a zip) means unusable
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'unreadable'}"[:200]
    return rnd, ident


def _num(s: str) -> float:
    try:
        return float(s)
    except ValueError:
        return math.nan
