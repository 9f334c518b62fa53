"""Sweep directories: ``sweep.json``, the list of a sweep's runs, and the run directories that folders name.

A sweep directory (what ``fedalf sweep --out DIR`` writes) holds ``sweep.json`` (the plan: the sweep's
options and its runs, each a name, a config and the ``dir`` of its run directory) and one run directory per
run (:mod:`.rundir`). ``fedalf sweep --resume``, ``fedalf report``, ``fj.load`` and the notebooks read the
file only through this module (:func:`read_sweep`), and the run directories that paths name through
:func:`find_runs`.

Trust: every path read from ``sweep.json`` must lie inside the sweep's folder (:func:`read_sweep`: a sweep
file never sends reads or writes elsewhere); the file is written whole through a temporary file of this
process's own, ``sweep.json.<pid>.tmp`` (created anew, ``O_EXCL``, never through a planted link), and renamed
or linked over the name (:func:`write_sweep`, :func:`write_sweep_first`); a stale one a kill left is removed
once a writer holds the folder alone (:meth:`.rundir.RunDir.lock`); a failed write raises
:class:`.writers.WriteError` at once.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from ..config.config import ConfigError
from ..runner.rundir import CONFIG, SWEEP, RunDir, _json_text, _read_json
from ..runner.writers import WriteError, discard, open_new


def write_sweep(root: Path, runs: list[dict], meta: dict) -> None:
    """``sweep.json`` written (replaced), through this process's own temporary file: the slices of a sharded
    sweep hold the folder shared and write it at once (``--resume --rounds N``). The one temporary name of
    :func:`.rundir.write_atomic` let two of them remove or rename each other's file: "cannot write sweep.json"."""
    _write_sweep(root, {**meta, "runs": runs}, first=False)


def write_sweep_first(root: Path, runs: list[dict], meta: dict) -> bool:
    """``sweep.json`` written only if no other process has written it (the slices of a sharded sweep plan at
    once): a hard link of this process's own temporary file, which fails where the name exists, so the first
    plan is every slice's. Returns whether this process's plan is the one."""
    return _write_sweep(root, {**meta, "runs": runs}, first=True)


def _write_sweep(root: Path, obj: dict, *, first: bool) -> bool:
    path = root / SWEEP
    tmp = root / f"{SWEEP}.{os.getpid()}.tmp"  # removed by an exclusive hold if a kill leaves it (RunDir.lock)
    try:
        with open_new(tmp) as f:
            f.write(_json_text(obj))
        if first:
            try:
                os.link(tmp, path)
                return True
            except FileExistsError:
                return False
            except OSError:  # a file system without hard links: replaced, as below
                pass
        os.replace(tmp, path)
        return True
    except OSError as e:
        raise WriteError(path, e) from None
    finally:
        discard(tmp)


def read_sweep(root: str | os.PathLike) -> dict:
    """``sweep.json``, checked: a list of runs, each with a name, a config object and a ``dir`` that is a
    relative path resolving inside ``root`` (a sweep file never sends reads or writes elsewhere)."""
    path = Path(root) / SWEEP
    d = _read_json(path)
    if d is None:
        raise ConfigError(f"{path} not found; is {root} a sweep directory (fedalf sweep --out)?")
    runs = d.get("runs")
    if not isinstance(runs, list):
        raise ConfigError(f"{path} has no list of runs; restore it or rerun the sweep")
    top = Path(root).resolve()
    for i, r in enumerate(runs):
        if not (isinstance(r, dict) and isinstance(r.get("dir"), str) and isinstance(r.get("config", {}), dict)
                and isinstance(r.get("name", ""), str)):
            raise ConfigError(f"{path}: run {i} is not a {{name, dir, config}} object; restore the file")
        p = Path(r["dir"])
        if p.is_absolute() or not r["dir"] or top not in (top / p).resolve().parents:
            raise ConfigError(f"{path}: run {i}'s dir {r['dir']!r} is not a folder inside {root}; a sweep's runs "
                              f"live in its own folder (restore the file)")
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
