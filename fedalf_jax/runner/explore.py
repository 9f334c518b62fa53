"""Which runs ``notebooks/explore_runs.ipynb`` explores: ``$FEDALF_RUNS``, resolved as the user meant it.

Jupyter starts a notebook's kernel in the notebook's folder (``notebooks/``), not in the folder the
user typed the command in, so ``FEDALF_RUNS=runs/sweep jupyter notebook notebooks/explore_runs.ipynb``
would look for ``notebooks/runs/sweep``. :func:`runs_to_explore` resolves a relative ``FEDALF_RUNS``
against the folder the command was started in, and refuses, loudly, a ``FEDALF_RUNS`` that holds no
runs: the user asked for their runs, and a synthetic demo in their place would be mistaken for them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional

from .rundir import RunDir
from ..sweeps.sweepdir import find_runs


class NoRunsError(FileNotFoundError):
    """``$FEDALF_RUNS`` names no folder, or one that holds no run directory."""


def start_folders(environ: Optional[Mapping[str, str]] = None) -> list[Path]:
    """Where a relative ``$FEDALF_RUNS`` may be meant from, most likely first: ``$FEDALF_CWD`` (set it to
    pin the folder), ``$PWD`` (the folder of the shell that started Jupyter: the kernel inherits the
    variable, though it runs elsewhere), then the kernel's own folder. Without repeats."""
    env = os.environ if environ is None else environ
    out: list[Path] = []
    for p in (env.get("FEDALF_CWD"), env.get("PWD"), os.getcwd()):
        if p and Path(p).is_absolute() and Path(p) not in out:
            out.append(Path(p))
    return out


def runs_to_explore(environ: Optional[Mapping[str, str]] = None,
                    default: str | os.PathLike = "../runs") -> tuple[Optional[Path], list[RunDir], str]:
    """``(folder, runs, why)``: the runs the notebook explores and one line saying where they came from.

    ``$FEDALF_RUNS`` set: an absolute path as it is; a relative one against the first of
    :func:`start_folders` where it exists. If it names no folder, or one without a run directory,
    :class:`NoRunsError` says what was looked at (never a silent demo in place of the user's runs).
    Unset: ``default`` (from the kernel's folder, ``notebooks/``: the checkout's ``runs/``); when that
    holds no runs, ``(None, [], why)``: the caller may make a demo."""
    env = os.environ if environ is None else environ
    given = env.get("FEDALF_RUNS", "").strip()
    if not given:
        folder = Path(default).resolve()
        runs = find_runs([folder]) if folder.is_dir() else []
        if runs:
            return folder, runs, f"{len(runs)} run directories under {folder} (FEDALF_RUNS is not set)"
        return None, [], (f"FEDALF_RUNS is not set and {folder} holds no runs: making a tiny synthetic demo sweep "
                          f"(set FEDALF_RUNS=/path/to/your/runs to explore yours)")
    path = Path(given).expanduser()
    tried = [path] if path.is_absolute() else [base / path for base in start_folders(env)]
    found = next((p for p in tried if p.exists()), None)
    if found is None:
        raise NoRunsError(f"FEDALF_RUNS={given} does not exist (looked at {', '.join(map(str, tried))}); pass "
                          f"an absolute path, e.g. FEDALF_RUNS=\"$PWD/{given}\", or unset FEDALF_RUNS for a demo")
    runs = find_runs([found])
    if not runs:
        raise NoRunsError(f"FEDALF_RUNS={given} ({found.resolve()}) holds no run directories (no config.json below "
                          f"it); pass the --out of fedalf run or fedalf sweep, or unset FEDALF_RUNS for a demo")
    return found.resolve(), runs, f"{len(runs)} run directories under {found.resolve()} (FEDALF_RUNS={given})"


def final_row(rd: RunDir, m: Optional[dict] = None) -> dict:
    """The run's last evaluation: ``summary.json``'s final row, else the last row of ``metrics.csv``
    (``m``: its columns, read if not given); ``{}`` for a run with nothing evaluated yet."""
    final = (rd.summary() or {}).get("final")
    if final:
        return final
    m = rd.metrics() if m is None else m
    if m and len(m.get("round", ())):
        return {k: v[-1] for k, v in m.items()}
    return {}


def run_row(rd: RunDir, m: Optional[dict] = None) -> dict:
    """One row of the notebook's run table: the main options, the algorithm's own hyper-parameters (one
    ``hp.NAME`` column each, as ``config.json`` records them: FedAdam's ``hp.beta1``, Ditto's ``hp.lam``), its
    factory's arguments (one ``arg.NAME`` column each: FedGKD's ``arg.K``), the status and the last evaluation."""
    cfg = rd.config_dict()
    last = final_row(rd, m)
    own = cfg.get("hp") if isinstance(cfg.get("hp"), dict) else {}
    args = cfg.get("alg_args") if isinstance(cfg.get("alg_args"), dict) else {}
    return {"name": rd.name, "algorithm": cfg["algorithm"], "partition": cfg["partition"], "model": cfg["model"],
            "lr": cfg["lr"], **{f"hp.{k}": v for k, v in own.items()},
            **{f"arg.{k}": v for k, v in args.items()}, "seed": cfg["seed"], "status": rd.status(),
            "round": last.get("round", float("nan")), "mean_acc": last.get("mean_acc", float("nan")),
            "angle_deg": last.get("angle_deg", float("nan"))}
