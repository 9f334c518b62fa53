"""``fedalf report``: a paper-style table (Markdown and CSV) and figures from run and sweep directories.

Runs are read only through :mod:`fedalf_jax.experiment.rundir`. The rules:

**Which runs count.** Only runs whose status is ``done``. ``running`` and ``new`` runs (a sweep in
progress or killed) and ``diverged`` runs are skipped; each kind is listed (count and names) in the
messages and in ``report.md``. A done run whose ``metrics.csv`` holds no evaluation is skipped too.

**Rows: algorithm variants.** A run's base label comes from its config: FedAvg, FedProx, qFedAvg,
FedADMM, FedLF, FedALF; ``ldp="adaptive"`` prefixes ``LDP-`` (so ``LDP-FedALF``), ``ldp="ldp_fl"``
prefixes ``LDP-FL-``, ``dp="gaussian"`` prefixes ``DP-`` and ``dp="central"`` ``CDP-``. Among all runs of a base label (every
run with a config, finished or not, so names stay the same while a sweep progresses), the options
whose values differ name the variant, alphabetically: ``FedLF (client_grad=local)``,
``FedALF (history=True, rho=0.1)``. Never naming a variant:

* the table's axes and the seed: ``model``, ``dataset``, ``partition``, ``seed``, ``out``;
* the bookkeeping options: ``data_dir``, ``data_source``, ``client_map``, ``conv_impl``,
  ``eval_every``, ``train_loss_every``, ``checkpoint_every``, ``log``, ``synthetic_*``;
* η (below), and options the run does not use: ``lr`` for FedLF with ``client_grad="full"`` (no local
  training), ``server_lr`` for qFedAvg (its step is set by its h_i), ``mu`` outside FedProx, ``q``
  outside qFedAvg, ``rho``/``server_target``/``dual_from`` outside FedADMM/FedALF, ``client_grad``
  outside FedLF, ``history``/``merge_tol``/``qp_method`` outside FedLF/FedALF, ``epsilon`` without a
  privacy mechanism, ``delta``/``clip`` without ``dp="gaussian"``. (``server_lr`` does name a
  variant of the other algorithms when it differs, e.g. FedALF with η_g 0.5 and 0.2.)

Options left at ``None`` (``history``, ``server_lr``, ``server_lr_decay``) are compared at their
resolved values (``Config.resolved_*``).

**Run length.** ``rounds`` names a variant like any other option, so a cell only ever averages runs of
one length: runs of a 2-round and a 20-round sweep in one folder become ``FedALF (rounds=2)`` and
``FedALF (rounds=20)``, never one ``FedALF`` mean over both, and one note per base label says which
runs were set apart by their length. (A sweep extended with ``--resume --rounds N`` rewrites a run's
``config.json`` when the run starts again: until then its finished runs of the old length are a
variant of their own.)

**η, chosen per cell as FedLF's authors did** (best mean over {0.01, 0.05, 0.1}). η is ``lr``,
except for FedLF with ``client_grad="full"``, where it is ``server_lr``, and for a user's algorithm whose
runs (of one base label) sweep ``server_lr`` at one ``lr``: there η is ``server_lr`` (:func:`swept_eta`). In each cell (model,
variant, dataset × partition) the done runs are grouped by η; a group's score is the mean over its
seeds of the final mean accuracy, and the best score wins (ties: the smaller η). An η with any
diverged seed in the cell is not eligible. Two done runs of one cell, η and seed (they differ only
in options that name no variant, e.g. ``eval_every``) count once: the first by directory name.

**Numbers.** Per cell, over the winning η's seeds: the mean accuracy and the fairness angle (degrees,
``angle_deg``) at the final evaluation, and the same averaged over each run's last ``last``
evaluations after round 0 (FedAvg-like curves swing between evaluations; round 0 evaluates the
untrained model and never counts). A run with fewer than ``last`` evaluations after round 0 is
averaged over those it has, and a note says so. Each is ``mean ± std`` over seeds with
the sample std (``ddof=1``); with one seed only the mean is shown (the CSV's std is blank).

**Privacy.** A private cell says whether its runs' formal privacy guarantee holds: ``summary.json``'s
``privacy.guarantee``, else ``config.json``'s, else computed from the options
(:func:`fedalf_jax.experiment.config.privacy_guarantee`); ``mixed`` if its seeds disagree. The
``guarantee`` column of ``table.csv`` holds it (blank without a mechanism), and ``report.md`` lists
each private variant's reason under "Privacy guarantee".

**Privacy spent.** A private cell also shows the ε its runs spent (``summary.json``'s
``privacy_spent``, :mod:`fedalf_jax.experiment.accounting`): the largest over its seeds, with its δ, in
the ``eps_spent`` and ``eps_spent_delta`` columns of ``table.csv`` and in the final-evaluation table;
``report.md`` says per variant what one ε protects under "Privacy spent". Runs recorded before the
accounting existed have none: blank.

**Outputs** (in ``out``, created if missing): ``report.md`` (per model: the final-evaluation table
with η and seeds, the last-evaluations table, the η choice with every candidate's score, figures),
``table.csv`` (one row per cell), and ``figures/``: per (model, dataset, partition) accuracy and angle
vs round (seed mean ± std band, one line per variant at its η), a per-client accuracy heatmap at the
final evaluation (every client, ranked worst to best within each run, then the mean over seeds at each
rank: :func:`heatmap_data`; cf. Fig. 9 of the FedALF paper), when FedALF and a
private FedALF are both present, the privacy comparison (accuracy vs round), and, when a private variant
ran at two or more ε, the privacy–utility frontier (``*_frontier.png``, :func:`frontier_data`): the final
mean accuracy and fairness angle (mean ± std over seeds, each cell at its chosen η) against the config's
``epsilon`` (the mechanism's budget per round, log scale), one line per private variant (its cells that
differ only in ``epsilon``), with non-private FedALF (dashed) and FedAvg (dotted) as horizontal lines.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import math
import shlex
from collections import defaultdict
from pathlib import Path
from typing import Iterable, NamedTuple, Optional

import numpy as np

from .config import (ALGORITHMS, DATASETS, MODELS, PARTITIONS, USED_BY, Config, ConfigError, flat_options,
                     partition_ignores, privacy_guarantee)
from .rundir import METRICS, PERSONAL_KEYS, RunDir, columns_of_file, find_runs, metric_columns
from .writers import DamagedFile, read_csv_rows

LABELS = {"fedavg": "FedAvg", "fedprox": "FedProx", "qfedavg": "qFedAvg", "fedadmm": "FedADMM",
          "fedlf": "FedLF", "fedalf": "FedALF"}
_PRIVACY_ORDER = ("none", "adaptive", "ldp_fl", "gaussian", "central")

# Options that never name a variant: the base label's, the table's axes, the seed, lr (η, or unused
# by FedLF client_grad=full) and the bookkeeping. server_lr: see _unused.
NOT_NAMING = frozenset({
    "algorithm", "ldp", "dp",
    "seed", "out", "lr", "dataset", "partition", "model",
    "data_dir", "data_source", "client_map", "conv_impl", "eval_every", "train_loss_every",
    "checkpoint_every", "log"})  # not rounds: runs of different lengths are never averaged together
_NOT_NAMING_PREFIXES = ("synthetic_",)
_USED_BY = USED_BY  # option -> the algorithms that use it (elsewhere it names no variant)
CSV_COLUMNS = ("model", "dataset", "partition", "algorithm", "eta_option", "eta", "seeds", "rounds", "last_k",
               "final_acc_mean", "final_acc_std", "final_angle_mean", "final_angle_std",
               "lastK_acc_mean", "lastK_acc_std", "lastK_angle_mean", "lastK_angle_std", "guarantee",
               "eps_spent", "eps_spent_delta")
_SHOW_NAMES = 5
_DPI = 100


# ---- runs ---------------------------------------------------------------------------------------

@dataclasses.dataclass
class Run:
    """One run directory, read once: its resolved config, labels, η and (if done) its curves."""

    name: str
    status: str
    cfg: dict
    label: str = ""
    order: tuple = ()
    eta_option: str = "lr"
    eta: float = math.nan
    variant: str = ""
    rounds: Optional[np.ndarray] = None   # evaluation rounds
    acc: Optional[np.ndarray] = None      # mean accuracy per evaluation
    angle: Optional[np.ndarray] = None    # fairness angle (degrees) per evaluation
    clients: Optional[np.ndarray] = None  # [evaluations, N] per-client accuracy
    guarantee: Optional[dict] = None      # private runs: {"guarantee": "holds" | "does not hold", "why"}
    spent: Optional[dict] = None          # summary.json's privacy_spent (runs from before it: None)
    named_by: dict = dataclasses.field(default_factory=dict)  # the options naming the variant: {option: value}
    own: dict = dataclasses.field(default_factory=dict)  # the algorithm's own metrics (Algorithm.metrics) per evaluation
    personal: dict = dataclasses.field(default_factory=dict)  # each client's own model (PERSONAL_KEYS) per evaluation

    @property
    def cell_key(self) -> tuple:
        return self.cfg["model"], self.cfg["dataset"], self.cfg["partition"], self.variant


def resolved_config(d: dict) -> dict:
    """The config dict with ``None`` options replaced by their resolved values (``Config.resolved_*``), and
    the algorithm's own hyper-parameters as one ``hp.NAME`` entry each (``config.flat_options``)."""
    cfg = Config.from_dict(d)
    out = cfg.to_dict()
    for k, v in out.items():
        if v is None and hasattr(Config, f"resolved_{k}"):
            out[k] = getattr(cfg, f"resolved_{k}")
    return flat_options(out)


def base_label(cfg: dict) -> str:
    """FedAvg, ..., FedALF, with the privacy prefix: LDP-, LDP-FL- or DP-."""
    label = LABELS.get(cfg["algorithm"], cfg["algorithm"])
    if cfg.get("ldp") == "adaptive":
        return "LDP-" + label
    if cfg.get("ldp") == "ldp_fl":
        return "LDP-FL-" + label
    if cfg.get("dp") == "gaussian":
        return "DP-" + label
    if cfg.get("dp") == "central":
        return "CDP-" + label
    return label


def eta_option(cfg: dict) -> str:
    """The option tuned as η: ``server_lr`` for FedLF without local training, else ``lr``."""
    return "server_lr" if cfg["algorithm"] == "fedlf" and cfg.get("client_grad") == "full" else "lr"


def _privacy(cfg: dict) -> str:
    return cfg.get("dp") if cfg.get("dp", "none") != "none" else cfg.get("ldp", "none")


def swept_eta(runs: list["Run"]) -> None:
    """A user's algorithm (not built in) whose runs of one base label sweep ``server_lr`` at one ``lr``:
    η is ``server_lr`` for them (its value chosen per cell and shown as η), not the fixed ``lr``."""
    by_label: dict[str, list[Run]] = defaultdict(list)
    for r in runs:
        if r.cfg["algorithm"] not in ALGORITHMS:
            by_label[r.label].append(r)
    for group in by_label.values():
        if len({r.cfg["lr"] for r in group}) == 1 and len({r.cfg["server_lr"] for r in group}) > 1:
            for r in group:
                r.eta_option, r.eta = "server_lr", float(r.cfg["server_lr"])


def _unused(cfg: dict, eta: Optional[str] = None) -> set:
    """Options this run's algorithm and privacy mechanism do not read (so they name no variant); ``eta``:
    the run's η option (default :func:`eta_option`)."""
    algo = cfg["algorithm"]
    out = {k for k, users in _USED_BY.items() if algo not in users}
    out |= set(partition_ignores(cfg.get("partition", "pat1")))  # alpha outside dirichlet, assign outside pat*
    out.add(eta or eta_option(cfg))
    if algo == "qfedavg":
        out.add("server_lr")
    if _privacy(cfg) == "none":
        out.add("epsilon")
    if cfg.get("dp") not in ("gaussian", "central"):
        out |= {"delta", "clip"}
    return out


def naming_options(cfg: dict, eta: Optional[str] = None) -> dict:
    """The options of ``cfg`` that may name its variant (see the module docstring)."""
    skip = NOT_NAMING | _unused(cfg, eta)
    return {k: v for k, v in cfg.items() if k not in skip and not k.startswith(_NOT_NAMING_PREFIXES)}


def _fmt_value(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def name_variants(runs: list[Run]) -> None:
    """Set each run's ``variant``: its base label and the options that differ within that label (and its
    η option: :func:`swept_eta`)."""
    swept_eta(runs)
    by_label: dict[str, list[Run]] = defaultdict(list)
    for r in runs:
        by_label[r.label].append(r)
    for label, group in by_label.items():
        opts = [naming_options(r.cfg, r.eta_option) for r in group]
        keys = sorted(set().union(*opts))
        differing = [k for k in keys if len({o[k] for o in opts if k in o}) > 1]
        for r, o in zip(group, opts):
            r.named_by = {k: o[k] for k in differing if k in o}
            r.variant = _variant_name(label, r.named_by)


def _variant_name(label: str, named_by: dict) -> str:
    # an algorithm's own hyper-parameter by its name: FedAdam (beta1=0.9)
    parts = [f"{k[3:] if k.startswith('hp.') else k}={_fmt_value(v)}" for k, v in named_by.items()]
    return f"{label} ({', '.join(parts)})" if parts else label


def length_notes(runs: list[Run]) -> list[str]:
    """One note per base label whose runs have different lengths (``rounds``): which finished runs were set
    apart, by length (their variants carry ``rounds=N``, so no cell averages runs of two lengths)."""
    by_label: dict[str, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        by_label[r.label][int(r.cfg["rounds"])].append(r.name)
    notes = []
    for label, lengths in by_label.items():
        if len(lengths) > 1:
            parts = [f"{_plural(n, 'round')}: {_shorten(sorted(names))}" for n, names in sorted(lengths.items())]
            notes.append(f"{label}: runs of {len(lengths)} different lengths are reported apart, never averaged "
                         f"together (rounds=N in the variant's name): " + "; ".join(parts))
    return notes


def _load_curves(run: Run, rd: RunDir) -> bool:
    """Read the run's evaluations; False when ``metrics.csv`` has none. A damaged one (another header
    than the run's columns, a row of the wrong width, a repeated or reordered round, ...) is refused."""
    if (rd.path / METRICS).is_file():
        read_csv_rows(rd.path / METRICS, columns=columns_of_file(rd.path / METRICS, int(run.cfg["clients"])))
    m = rd.metrics()
    if not m or len(m.get("round", ())) == 0 or "mean_acc" not in m or "angle_deg" not in m:
        return False
    order = np.argsort(m["round"], kind="stable")
    run.rounds = m["round"][order]
    run.acc, run.angle = m["mean_acc"][order], m["angle_deg"][order]
    run.clients = rd.client_accuracies(m)[order]
    standard = set(metric_columns(int(run.cfg["clients"])))
    run.own = {k: np.asarray(v, np.float64)[order] for k, v in m.items() if k not in standard
               and not k.startswith("acc_") and k not in PERSONAL_KEYS}
    run.personal = {k: np.asarray(m[k], np.float64)[order] for k in PERSONAL_KEYS if k in m}
    return True


def _shorten(names: list[str]) -> str:
    shown = ", ".join(names[:_SHOW_NAMES])
    return shown + (f" and {len(names) - _SHOW_NAMES} more" if len(names) > _SHOW_NAMES else "")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


_WHY = {"running": "not finished; fedalf sweep --resume or fedalf run --resume finishes them",
        "new": "not started", "diverged": "they make their η ineligible in their cell",
        "empty": "metrics.csv holds no evaluation"}


def _read_run(rd: RunDir, status: str) -> Run:
    """A run with a config: labels and η; the curves too when it is done (``empty`` if none)."""
    cfg = resolved_config(rd.config_dict())
    run = Run(rd.name, status, cfg, label=base_label(cfg), eta_option=eta_option(cfg))
    run.eta = float(cfg[run.eta_option])
    run.order = (_index(ALGORITHMS, cfg["algorithm"]), _index(_PRIVACY_ORDER, _privacy(cfg)))
    run.guarantee = run_guarantee(rd)
    run.spent = run_spent(rd)
    if status == "done" and not _load_curves(run, rd):
        run.status = "empty"
    return run


def run_guarantee(rd: RunDir) -> Optional[dict]:
    """A private run's ``{"guarantee": "holds" | "does not hold", "why": ...}``: from ``summary.json``'s
    ``privacy``, else from ``config.json``'s, else computed from its options
    (:func:`fedalf_jax.experiment.config.privacy_guarantee`: runs recorded before the field existed);
    ``None`` for a run without a privacy mechanism."""
    raw = rd.config_dict()
    summary = rd.summary()
    for rec in ((summary if isinstance(summary, dict) else {}).get("privacy"), raw.get("privacy")):
        if isinstance(rec, dict) and rec.get("guarantee") in ("holds", "does not hold"):
            return {"guarantee": rec["guarantee"], "why": str(rec.get("why", ""))}
    cfg = Config.from_dict(raw)
    if cfg.ldp == "none" and cfg.dp == "none":
        return None
    holds, why = privacy_guarantee(cfg)
    return {"guarantee": "holds" if holds else "does not hold", "why": why}


def run_spent(rd: RunDir) -> Optional[dict]:
    """``summary.json``'s ``privacy_spent`` when it holds a numeric ``epsilon`` (else ``None``: no
    mechanism, a run from before the accounting, or an accountant that failed)."""
    summary = rd.summary()
    rec = summary.get("privacy_spent") if isinstance(summary, dict) else None
    if not isinstance(rec, dict):
        return None
    eps, delta = rec.get("epsilon"), rec.get("delta", 0.0)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (eps, delta)):
        return None
    return {**rec, "epsilon": float(eps), "delta": float(delta)}


def cell_spent(cell: "Cell") -> tuple[Optional[float], Optional[float]]:
    """The largest ε spent over a cell's chosen runs and the largest δ with it; ``(None, None)`` when no
    run records one."""
    recs = [r.spent for r in cell.runs if r.spent is not None]
    if not recs:
        return None, None
    return max(r["epsilon"] for r in recs), max(r["delta"] for r in recs)


def cell_guarantee(cell: "Cell") -> str:
    """The privacy guarantee of a cell's chosen runs: ``holds``, ``does not hold``, ``mixed`` (its
    seeds disagree) or ``""`` (no privacy mechanism)."""
    found = {r.guarantee["guarantee"] for r in cell.runs if r.guarantee is not None}
    if not found:
        return ""
    return found.pop() if len(found) == 1 else "mixed"


def load_runs(rundirs: list[RunDir]) -> tuple[list[Run], dict[str, list[str]], list[str]]:
    """Every run with a config (curves read for the done ones), the skipped run names by status
    (``running``, ``new``, ``diverged``, ``empty``: done without evaluations, ``unreadable``: a bad
    config.json), and the messages saying so. A damaged ``metrics.csv`` of a done run is refused
    (:class:`DamagedFile`, one line naming the file and line): its rows would skew the table."""
    runs, skipped, unreadable = [], defaultdict(list), []
    for rd in rundirs:
        try:
            status = rd.status()
            if not rd.has_config():
                skipped[status].append(rd.name)
                continue
            run = _read_run(rd, status)
        except DamagedFile:  # a damaged metrics.csv would skew the table: refused, naming file and line
            raise
        except ConfigError as e:  # a bad config.json or summary.json
            skipped["unreadable"].append(rd.name)
            unreadable.append(f"skipped {rd.name}: {e}")
            continue
        runs.append(run)
        if run.status != "done":
            skipped[run.status].append(run.name)
    messages = [f"skipped {_plural(len(names), f'{status} run')}"
                + (f" ({_WHY[status]})" if status in _WHY else "") + f": {_shorten(sorted(names))}"
                for status, names in skipped.items() if status != "unreadable"]
    return runs, dict(skipped), messages + unreadable


# ---- cells and η --------------------------------------------------------------------------------

@dataclasses.dataclass
class Cell:
    """The runs of one (model, dataset, partition, variant), by η; ``eta`` is the chosen one."""

    model: str
    dataset: str
    partition: str
    variant: str
    order: tuple
    eta_option: str
    done: dict = dataclasses.field(default_factory=lambda: defaultdict(list))      # η -> [Run]
    diverged: dict = dataclasses.field(default_factory=lambda: defaultdict(list))  # η -> [Run]
    scores: dict = dataclasses.field(default_factory=dict)                          # η -> seed-mean final acc
    eta: Optional[float] = None

    @property
    def where(self) -> str:
        return f"{self.model} {self.dataset} {self.partition} {self.variant}"

    @property
    def runs(self) -> list[Run]:
        return self.done[self.eta] if self.eta is not None else []

    def etas(self) -> list[float]:
        return sorted(set(self.done) | set(self.diverged))


def build_cells(runs: list[Run]) -> tuple[list[Cell], list[str]]:
    """Group done and diverged runs into cells and η groups, one run per seed; messages on repeats."""
    cells: dict[tuple, Cell] = {}
    messages = []
    for r in runs:
        if r.status not in ("done", "diverged"):
            continue
        key = r.cell_key
        if key not in cells:
            cells[key] = Cell(*key, order=r.order, eta_option=r.eta_option)
        group = (cells[key].done if r.status == "done" else cells[key].diverged)[r.eta]
        twin = next((o for o in group if o.cfg["seed"] == r.cfg["seed"]), None)
        if twin is not None:
            changed = ", ".join(k for k in r.cfg if k != "out" and r.cfg[k] != twin.cfg[k]) or "nothing"
            messages.append(f"{cells[key].where} η={r.eta:g}: {r.name} repeats seed {r.cfg['seed']} of "
                            f"{twin.name} and differs only in options that name no variant ({changed}); counted once")
            continue
        group.append(r)
    ordered = sorted(cells.values(), key=lambda c: (_index(MODELS, c.model), _index(DATASETS, c.dataset),
                                                    _index(PARTITIONS, c.partition), c.order, c.variant))
    return ordered, messages


def _index(options: tuple, value) -> int:
    return options.index(value) if value in options else len(options)


def choose_eta(cell: Cell) -> list[str]:
    """Pick the eligible η with the best seed-mean final accuracy (ties: the smaller η); messages."""
    messages = []
    for eta in cell.etas():
        done, bad = cell.done.get(eta, []), cell.diverged.get(eta, [])
        if bad:
            messages.append(f"{cell.where}: η={eta:g} not eligible ({len(bad)} of {len(done) + len(bad)} "
                            f"seeds diverged: {_shorten(sorted(r.name for r in bad))})")
            continue
        score = float(np.mean([r.acc[-1] for r in done]))
        if math.isfinite(score):
            cell.scores[eta] = score
        else:
            messages.append(f"{cell.where}: η={eta:g} not eligible (non-finite final accuracy)")
    if cell.scores:
        cell.eta = max(sorted(cell.scores), key=lambda e: cell.scores[e])
    else:
        messages.append(f"{cell.where}: no eligible η; the cell is left empty")
    return messages


# ---- numbers ------------------------------------------------------------------------------------

def mean_std(values: Iterable[float]) -> tuple[float, Optional[float]]:
    """Mean and sample std (``ddof=1``) over seeds; the std is ``None`` for one seed."""
    v = np.asarray(list(values), dtype=np.float64)
    return float(v.mean()), (float(v.std(ddof=1)) if v.size >= 2 else None)


def _rounds(runs: list[Run]):
    rs = sorted({int(r.rounds[-1]) for r in runs})
    return rs[0] if len(rs) == 1 else "/".join(map(str, rs))


def cell_row(cell: Cell, last: int) -> dict:
    """The table numbers of a cell whose η is chosen (one CSV row)."""
    runs = cell.runs
    row = {"model": cell.model, "dataset": cell.dataset, "partition": cell.partition,
           "algorithm": cell.variant, "eta_option": cell.eta_option, "eta": cell.eta, "seeds": len(runs),
           "rounds": _rounds(runs), "last_k": last}
    series = {"final_acc": [r.acc[-1] for r in runs], "final_angle": [r.angle[-1] for r in runs],
              "lastK_acc": [_last_k(r, r.acc, last).mean() for r in runs],
              "lastK_angle": [_last_k(r, r.angle, last).mean() for r in runs]}
    for k, vals in series.items():
        row[f"{k}_mean"], row[f"{k}_std"] = mean_std(vals)
    row["guarantee"] = cell_guarantee(cell)
    row["eps_spent"], row["eps_spent_delta"] = cell_spent(cell)
    names = list(dict.fromkeys(k for r in runs for k in r.own))
    row["own_metrics"] = {k: mean_std([r.own[k][-1] for r in runs if k in r.own]) for k in names}  # not in the CSV
    if all(r.personal for r in runs):  # each client's own model: final values, beside the global model's (not in the CSV)
        row["personal"] = {k: mean_std([r.personal[k][-1] for r in runs]) for k in PERSONAL_KEYS}
    return row


def _last_k(run: Run, values: np.ndarray, last: int) -> np.ndarray:
    """``values`` (one per evaluation) at the run's last ``last`` evaluations after round 0 (the untrained
    model's), fewer if it has fewer (:func:`last_k_notes` says so); round 0's only if it has no other."""
    trained = values[run.rounds > 0]
    return trained[-last:] if trained.size else values[-last:]


def last_k_notes(cells: list[Cell], last: int) -> list[str]:
    """One note per cell whose chosen runs include runs with fewer than ``last`` evaluations after round 0."""
    notes = []
    for c in cells:
        short = [(r.name, int(np.sum(r.rounds > 0))) for r in c.runs if np.sum(r.rounds > 0) < last]
        if short:
            runs = _shorten([f"{name} ({_plural(n, 'evaluation')})" for name, n in sorted(short)])
            notes.append(f"{c.where} η={c.eta:g}: {_plural(len(short), 'run')} with fewer than {last} evaluations "
                         f"after round 0, averaged over the evaluations they have (round 0 left out): {runs}")
    return notes


def _pm(mean: float, std: Optional[float], digits: int) -> str:
    return f"{mean:.{digits}f}" if std is None else f"{mean:.{digits}f} ± {std:.{digits}f}"


def format_cell(row: dict, which: str) -> str:
    """``0.851 ± 0.004 (3.1 ± 0.4°)`` for ``which`` in ``final``, ``lastK``."""
    acc = _pm(row[f"{which}_acc_mean"], row[f"{which}_acc_std"], 3)
    return f"{acc} ({_pm(row[f'{which}_angle_mean'], row[f'{which}_angle_std'], 1)}°)"


# ---- Markdown and CSV ---------------------------------------------------------------------------

def _column(dataset: str, partition: str) -> str:
    return f"{dataset} {partition}"


def _md_table(header: list[str], body: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(r) + " |" for r in body]


def _eta_candidates(cell: Cell) -> str:
    parts = []
    for eta in cell.etas():
        n_done, n_bad = len(cell.done.get(eta, [])), len(cell.diverged.get(eta, []))
        if n_bad:
            parts.append(f"{eta:g}: {n_bad}/{n_done + n_bad} diverged")
        elif eta in cell.scores:
            text = f"{eta:g}: {cell.scores[eta]:.3f} ({n_done})"
            parts.append(f"**{text}**" if eta == cell.eta else text)
        else:
            parts.append(f"{eta:g}: non-finite")
    return "; ".join(parts)


def _model_section(model: str, cells: list[Cell], rows: dict, last: int, figures: list[Path], out: Path) -> list[str]:
    columns = sorted({(c.dataset, c.partition) for c in cells},
                     key=lambda dp: (_index(DATASETS, dp[0]), _index(PARTITIONS, dp[1])))
    variants = sorted({(c.order, c.variant) for c in cells})
    by_key = {(c.variant, c.dataset, c.partition): c for c in cells}
    header = ["algorithm"] + [_column(*dp) for dp in columns]

    def body(render) -> list[list[str]]:
        out_rows = []
        for _, v in variants:
            cs = [by_key.get((v, *dp)) for dp in columns]
            out_rows.append([v] + [render(c) if c is not None else "" for c in cs])
        return out_rows

    def final(c: Cell) -> str:
        if c.eta is None:
            return "— (no eligible η)"
        row = rows[id(c)]
        text = f"{format_cell(row, 'final')}<br>η={c.eta:g} ({_plural(row['seeds'], 'seed')})"
        text += f"<br>guarantee: {row['guarantee']}" if row.get("guarantee") else ""
        if row.get("eps_spent") is not None:
            text += f"<br>ε spent: {row['eps_spent']:.3g} (δ={row['eps_spent_delta']:g})"
        return text

    lines = [f"## Model `{model}`", "", "### Final evaluation", "",
             "mean accuracy ± std (fairness angle ± std) over seeds, at the chosen η", ""]
    lines += _md_table(header, body(final))
    lines += ["", f"### Mean of the last {last} evaluations of each run (after round 0)", ""]
    lines += _md_table(header, body(lambda c: format_cell(rows[id(c)], "lastK") if c.eta is not None else "—"))
    by_server = sorted({c.variant for c in cells if c.eta_option == "server_lr" and any(
        r.cfg["algorithm"] not in ALGORITHMS for g in (c.done, c.diverged) for rs in g.values() for r in rs)})
    eta_text = "; ".join(["`server_lr` for FedLF client_grad=full"]
                         + [f"`server_lr` for {', '.join(by_server)} (its swept option)"] * bool(by_server))
    lines += ["", "### η choice", "", f"η (`lr`; {eta_text}): seed-mean final "
              "accuracy (seeds); the chosen η in bold", ""]
    lines += _md_table(header, body(_eta_candidates))
    lines += _guarantee_notes(cells)
    lines += _spent_notes(cells)
    if figures:
        lines += ["", "### Figures", ""]
        if any(f.stem.endswith("_frontier") for f in figures):
            lines += [FRONTIER_NOTE, ""]
        lines += [f"![{f.stem}]({f.relative_to(out).as_posix()})" for f in figures]
    return lines + [""]


FRONTIER_NOTE = ("The privacy–utility frontier (`*_frontier.png`): x = the runs' `epsilon` option (log scale): "
                 "per round of the mechanism for LDP and local Gaussian DP, the whole run's for central DP; y = final mean accuracy (left) and final fairness angle "
                 "(right), mean ± std over seeds at each cell's chosen η; one line per private variant (the ε spent "
                 "over the run, when accounted, in its legend); dashed: FedALF without privacy, dotted: FedAvg "
                 "without privacy.")


def _guarantee_notes(cells: list[Cell]) -> list[str]:
    """The "Privacy guarantee" subsection: each private variant's guarantee and why (docs/privacy.md)."""
    seen = {}
    for c in sorted(cells, key=lambda c: (c.order, c.variant)):
        for r in c.runs:
            if r.guarantee is not None:
                seen.setdefault((c.variant, r.guarantee["guarantee"], r.guarantee["why"]), None)
    if not seen:
        return []
    lines = ["", "### Privacy guarantee", "",
             "Whether the privacy mechanism's formal guarantee covers what the clients upload (docs/privacy.md, "
             "\"The guarantee field\"):", ""]
    return lines + [f"- {variant}: **{status}**: {why}" for variant, status, why in seen]


def _spent_notes(cells: list[Cell]) -> list[str]:
    """The "Privacy spent" subsection: per private variant, what one ε protects and how it was accounted
    (from one of its runs' ``privacy_spent``; docs/privacy.md, "Accounting over rounds")."""
    seen = {}
    for c in sorted(cells, key=lambda c: (c.order, c.variant)):
        for r in c.runs:
            if r.spent is not None:
                seen.setdefault(c.variant, r.spent)
    if not seen:
        return []
    lines = ["", "### Privacy spent", "",
             "ε spent by each run (the largest over a cell's seeds in the table), accounted over the rounds it ran "
             "(docs/privacy.md, \"Accounting over rounds\"):", ""]
    return lines + [f"- {variant}: per {rec.get('per', '?')}; {rec.get('accountant', '')}. Example: "
                    f"{rec.get('statement', '')}" for variant, rec in seen.items()]


RULES = """\
Only finished runs (status `done`) count. Per cell (model, algorithm variant, dataset × partition) the
runs are grouped by η (`lr`; `server_lr` for FedLF with `client_grad=full`); the η with the best
seed-mean final mean accuracy is chosen, and an η with a diverged seed is not eligible. Numbers are
mean ± sample std (ddof=1) over the chosen η's seeds; with one seed only the mean is shown. The angle
is the fairness angle in degrees. Variants are named by the options that differ between the runs of
an algorithm."""


def write_markdown(path: Path, cells: list[Cell], rows: dict, last: int, figures: dict, notes: list[str],
                   counts: dict) -> None:
    lines = ["# fedalf report", "", RULES, "",
             "Runs: " + ", ".join(f"{n} {s}" for s, n in counts.items()) + ".", ""]
    if notes:
        lines += ["## Skipped runs and notes", ""] + [f"- {m}" for m in notes] + [""]
    for model in sorted({c.model for c in cells}, key=lambda m: _index(MODELS, m)):
        mine = [c for c in cells if c.model == model]
        lines += _model_section(model, mine, rows, last, figures.get(model, []), path.parent)
    own = [(c, rows[id(c)]["own_metrics"]) for c in cells if id(c) in rows and rows[id(c)].get("own_metrics")]
    if own:  # the metrics a user's algorithm declares (Algorithm.metrics): final value, mean ± std over seeds
        lines += ["", "## The algorithms' own metrics", "", "At the last evaluation, mean ± std over seeds.", ""]
        lines += _md_table(["cell", "algorithm", "metrics"], [
            [c.where, c.variant, "; ".join(f"{k} {_pm(mu, sd, 4 if abs(mu) < 100 else 1)}" for k, (mu, sd) in m.items())]
            for c, m in own])
    mine = [(c, rows[id(c)]) for c in cells if id(c) in rows and rows[id(c)].get("personal")]
    if mine:  # an algorithm with a personal_model: each client's own model beside the global model
        lines += ["", "## Personalised models", "",
                  "Each client's own model (the algorithm's personal_model) on its own test split, beside the global "
                  "model, at the last evaluation: mean accuracy (fairness angle), worst 10% of clients' accuracy; "
                  "mean ± std over seeds.", ""]
        lines += _md_table(["cell", "algorithm", "global model", "personalised", "personalised worst 10%"], [
            [c.where, c.variant, format_cell(row, "final"),
             f"{_pm(*row['personal']['personal_acc'], 3)} ({_pm(*row['personal']['personal_angle_deg'], 1)}°)",
             _pm(*row["personal"]["personal_worst10_acc"], 3)] for c, row in mine])
    with _writing(path):
        path.write_text("\n".join(lines), errors="surrogateescape")  # a path's bytes as the OS gave them


def write_csv(path: Path, rows: list[dict]) -> None:
    with _writing(path), open(path, "w", newline="", errors="surrogateescape") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        w.writerows({k: ("" if r[k] is None else r[k]) for k in CSV_COLUMNS} for r in rows)


@contextlib.contextmanager
def _writing(path: Path):
    """Turn a failed write of ``path`` into a one-line :class:`ConfigError`."""
    try:
        yield
    except OSError as e:
        raise ConfigError(f"cannot write {path} ({e.strerror or e}); pass another --out") from None


# ---- figures ------------------------------------------------------------------------------------

def _curve(runs: list[Run], attr: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rounds evaluated by every run, and the seed mean and std (ddof=1; 0 for one seed) there."""
    common = runs[0].rounds
    for r in runs[1:]:
        common = np.intersect1d(common, r.rounds)
    vals = np.stack([getattr(r, attr)[np.searchsorted(r.rounds, common)] for r in runs])
    std = vals.std(axis=0, ddof=1) if len(runs) > 1 else np.zeros(len(common))
    return common, vals.mean(axis=0), std


def _band(ax, cell: Cell, attr: str) -> None:
    x, mean, std = _curve(cell.runs, attr)
    (line,) = ax.plot(x, mean, label=f"{cell.variant} (η={cell.eta:g})", lw=1.2)
    ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.2, lw=0)


def _save(fig, path: Path) -> Path:
    with _writing(path):
        fig.savefig(path, dpi=_DPI, bbox_inches="tight")
    return path


def _title(model: str, dataset: str, partition: str) -> str:
    return f"{model}, {dataset} {partition}"


def curves_figure(cells: list[Cell], path: Path, title: str) -> Path:
    """Accuracy and angle vs round, one line (seed mean ± std band) per variant."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(11, 4))
    ax_acc, ax_ang = fig.subplots(1, 2)
    for c in cells:
        _band(ax_acc, c, "acc")
        _band(ax_ang, c, "angle")
    ax_acc.set(xlabel="round", ylabel="mean accuracy", title=f"accuracy ({title})")
    ax_ang.set(xlabel="round", ylabel="fairness angle (°)", title=f"angle ({title})")
    ax_acc.legend(fontsize=7, title="seed mean ± std", title_fontsize=7)
    return _save(fig, path)


def heatmap_data(cells: list[Cell]) -> tuple[np.ndarray, bool]:
    """``[variants, N]``: every client's accuracy at the final evaluation, ranked worst to best within each
    run, then the mean over the cell's seeds at each rank (column ``k``: the ``k+1``-th worst client).

    Ranks, not client ids: a client id holds other data under another seed (``assign="shards"``,
    ``dirichlet``) and the clients 0..9 of a 100-client ``pat1`` run all hold the same two classes, so
    the first ids say nothing of the variant. Each row's mean is the cell's mean accuracy. ``N`` is the
    most clients of any run; a run with fewer is resampled to ``N`` ranks by its quantiles (``True``
    when any was)."""
    n = max(r.clients.shape[1] for c in cells for r in c.runs)
    resampled = False
    rows = []
    for c in cells:
        profiles = []
        for r in c.runs:
            p = np.sort(np.asarray(r.clients[-1], np.float64))
            if p.size != n:
                resampled = True
                p = np.interp((np.arange(n) + 0.5) / n, (np.arange(p.size) + 0.5) / p.size, p)
            profiles.append(p)
        rows.append(np.mean(profiles, axis=0))
    return np.array(rows).reshape(len(cells), n), resampled


def heatmap_figure(cells: list[Cell], path: Path, title: str) -> Optional[Path]:
    """Per-client accuracy at the final evaluation, every client (:func:`heatmap_data`): rows = variants
    (labelled with their mean and worst-10% accuracy), columns = client ranks, worst to best."""
    from matplotlib.figure import Figure
    if min(r.clients.shape[1] for c in cells for r in c.runs) == 0:  # no per-client columns in metrics.csv
        return None
    data, resampled = heatmap_data(cells)
    n = data.shape[1]
    worst = max(1, math.ceil(0.1 * n))
    labels = [f"{c.variant} (η={c.eta:g})\nmean {row.mean():.3f}, worst {worst}: {row[:worst].mean():.3f}"
              for c, row in zip(cells, data)]
    width = (0.6 * n if n <= 20 else min(12.0, 4.0 + 0.08 * n)) + 1.5 + 0.07 * max(len(s) for s in labels)
    fig = Figure(figsize=(width, 1.2 + 0.6 * len(cells)))
    ax = fig.subplots()
    im = ax.imshow(data, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto", interpolation="nearest")
    if n <= 20:
        for (i, j), v in np.ndenumerate(data):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="white" if v < 0.6 else "black")
        ticks = list(range(n))
    else:
        step = max(1, round(n / 5))
        ticks = [0] + [k - 1 for k in range(step, n + 1, step) if n - k >= step / 2] + [n - 1]  # ranks 1, 20, ..., n
    ax.set_xticks(ticks, [str(t + 1) for t in ticks])
    ax.set_yticks(range(len(cells)), labels, fontsize=7)
    ax.set(xlabel=f"client rank by final accuracy, 1 = worst … {n} = best: all {n} clients, ranked within each "
                  f"run, mean over seeds" + (" (runs with fewer clients resampled)" if resampled else ""),
           title=f"per-client accuracy at the final evaluation, worst to best ({title})")
    fig.colorbar(im, ax=ax, label="accuracy")
    return _save(fig, path)


def privacy_figure(cells: list[Cell], path: Path, title: str) -> Optional[Path]:
    """Accuracy vs round of FedALF and its private variants, when both kinds are present."""
    from matplotlib.figure import Figure
    fedalf = [c for c in cells if c.runs[0].cfg["algorithm"] == "fedalf"]
    private = [c for c in fedalf if _privacy(c.runs[0].cfg) != "none"]
    if len(private) in (0, len(fedalf)):
        return None
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    for c in fedalf:
        _band(ax, c, "acc")
    ax.set(xlabel="round", ylabel="mean accuracy", title=f"privacy ({title})")
    ax.legend(fontsize=7, title="seed mean ± std", title_fontsize=7)
    return _save(fig, path)


class FrontierPoint(NamedTuple):
    """One private cell on the frontier: the config's ε (per round of the mechanism) and the final mean
    accuracy and fairness angle (degrees), mean and sample std over seeds (std ``None`` for one seed), as
    in the table's final-evaluation columns (:func:`cell_row`)."""

    eps: float
    acc: float
    acc_std: Optional[float]
    angle: float
    angle_std: Optional[float]


class Baseline(NamedTuple):
    """A non-private FedALF or FedAvg cell's final mean accuracy and angle (mean, std over seeds)."""

    algorithm: str
    acc: float
    acc_std: Optional[float]
    angle: float
    angle_std: Optional[float]


_BASELINE_STYLE = {"fedalf": "--", "fedavg": ":"}  # non-private levels on the frontier


def _final(cell: Cell) -> tuple[float, Optional[float], float, Optional[float]]:
    acc, acc_std = mean_std(r.acc[-1] for r in cell.runs)
    angle, angle_std = mean_std(r.angle[-1] for r in cell.runs)
    return acc, acc_std, angle, angle_std


def _frontier_cells(cells: list[Cell]) -> tuple[dict[str, list[Cell]], dict[str, Cell]]:
    """The private cells by line (variant name without ``epsilon``), by ascending ε, and the non-private
    FedALF / FedAvg cells by label (``FedALF (no privacy)``); cells without a chosen η are left out."""
    lines: dict[str, list[Cell]] = defaultdict(list)
    baselines: dict[str, Cell] = {}
    for c in cells:
        if c.eta is None or not c.runs:
            continue
        run = c.runs[0]
        if _privacy(run.cfg) != "none":
            named = {k: v for k, v in run.named_by.items() if k != "epsilon"}
            lines[_variant_name(run.label, named)].append(c)
        elif run.cfg["algorithm"] in _BASELINE_STYLE:
            parts = [f"{k}={_fmt_value(v)}" for k, v in run.named_by.items()] + ["no privacy"]
            baselines[f"{run.label} ({', '.join(parts)})"] = c
    return {name: sorted(cs, key=lambda c: float(c.runs[0].cfg["epsilon"])) for name, cs in lines.items()}, baselines


def frontier_data(cells: list[Cell]) -> tuple[dict[str, list[FrontierPoint]], dict[str, Baseline]]:
    """What the frontier figure of one (model, dataset, partition) group plots.

    Lines: per private variant, its cells that differ only in ``epsilon`` (their variant names without
    ``epsilon=…``), one :class:`FrontierPoint` per cell by ascending ε (the config's, per round of the
    mechanism). Baselines: the non-private FedALF and FedAvg cells, by label (``FedALF (no privacy)``;
    the options naming the variant first when there are some). Each number is over the cell's chosen η's
    seeds, at their final evaluation."""
    lines, baselines = _frontier_cells(cells)
    points = {name: [FrontierPoint(float(c.runs[0].cfg["epsilon"]), *_final(c)) for c in cs]
              for name, cs in lines.items()}
    base = {label: Baseline(c.runs[0].cfg["algorithm"], *_final(c)) for label, c in baselines.items()}
    return points, dict(sorted(base.items(), key=lambda kv: list(_BASELINE_STYLE).index(kv[1].algorithm)))


def frontier_figure(cells: list[Cell], path: Path, title: str) -> Optional[Path]:
    """Final accuracy and angle vs ε per private variant, non-private FedALF / FedAvg as horizontal lines
    (:func:`frontier_data`); only when some private variant ran at two or more ε."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullLocator
    lines, baselines = frontier_data(cells)
    if not any(len({p.eps for p in pts}) >= 2 for pts in lines.values()):
        return None
    line_cells, _ = _frontier_cells(cells)
    fig = Figure(figsize=(11, 4))
    ax_acc, ax_ang = fig.subplots(1, 2)
    for name, pts in lines.items():
        spent = [cell_spent(c)[0] for c in line_cells[name]]
        label = name
        if any(s is not None for s in spent):
            label += " (ε spent: " + ", ".join("—" if s is None else f"{s:.3g}" for s in spent) + ")"
        eps = [p.eps for p in pts]
        for ax, ys, stds in ((ax_acc, [p.acc for p in pts], [p.acc_std for p in pts]),
                             (ax_ang, [p.angle for p in pts], [p.angle_std for p in pts])):
            ax.errorbar(eps, ys, yerr=[0.0 if s is None else s for s in stds], marker="o", ms=4, capsize=3,
                        lw=1.2, label=label)
    grays = ("k", "0.45", "0.7")
    for i, (label, b) in enumerate(baselines.items()):
        color = grays[i % len(grays)]
        for ax, y, std in ((ax_acc, b.acc, b.acc_std), (ax_ang, b.angle, b.angle_std)):
            ax.axhline(y, ls=_BASELINE_STYLE[b.algorithm], color=color, lw=1.2, label=label)
            if std:
                ax.axhspan(y - std, y + std, color=color, alpha=0.08, lw=0)
    ticks = sorted({p.eps for pts in lines.values() for p in pts})
    for ax in (ax_acc, ax_ang):
        if ticks[0] > 0:
            ax.set_xscale("log")
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticks(ticks, [f"{e:g}" for e in ticks])
    xlabel = "--epsilon (log scale; report.md says per what)"
    ax_acc.set(xlabel=xlabel, ylabel="final mean accuracy", title=f"privacy–utility frontier ({title})")
    ax_ang.set(xlabel=xlabel, ylabel="final fairness angle (°)", title=f"angle vs privacy ({title})")
    ax_acc.legend(fontsize=7, title="mean ± std over seeds", title_fontsize=7)
    return _save(fig, path)


def write_figures(cells: list[Cell], fig_dir: Path) -> dict[str, list[Path]]:
    """All figures, by model."""
    groups: dict[tuple, list[Cell]] = defaultdict(list)
    for c in cells:
        if c.eta is not None:
            groups[(c.model, c.dataset, c.partition)].append(c)
    out: dict[str, list[Path]] = defaultdict(list)
    for (model, dataset, partition), cs in groups.items():
        stem, title = f"{model}_{dataset}_{partition}", _title(model, dataset, partition)
        with np.errstate(all="ignore"):
            made = [curves_figure(cs, fig_dir / f"{stem}_curves.png", title),
                    heatmap_figure(cs, fig_dir / f"{stem}_clients.png", title),
                    privacy_figure(cs, fig_dir / f"{stem}_privacy.png", title),
                    frontier_figure(cs, fig_dir / f"{stem}_frontier.png", title)]
        out[model] += [p for p in made if p is not None]
    return dict(out)


# ---- the report ---------------------------------------------------------------------------------

def _make_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create the report folder {path} ({e.strerror or e}); pass another --out") from None


def resume_hint(rundirs: list[RunDir], skipped: dict) -> str:
    """The commands that finish the unfinished runs: ``fedalf sweep --resume --out SWEEP`` for a sweep's run,
    ``fedalf run --resume --out RUN`` for a run of its own."""
    names = set(skipped.get("running", [])) | set(skipped.get("new", []))
    cmds = list(dict.fromkeys(
        f"fedalf sweep --resume --out {shlex.quote(str(rd.path.parent))}" if (rd.path.parent / "sweep.json").is_file()
        else f"fedalf run --resume --out {shlex.quote(str(rd.path))}" for rd in rundirs if rd.name in names))
    if not cmds:
        return "fedalf run --resume or fedalf sweep --resume"
    return "; ".join(cmds[:2]) + (f"; and {len(cmds) - 2} more" if len(cmds) > 2 else "")


def report(paths: list[str], out: str, *, last: int = 5) -> dict:
    """Write ``report.md``, ``table.csv`` and ``figures/*.png`` into ``out`` from the runs in ``paths``.

    Returns ``{"markdown", "csv", "figures", "messages", "rows", "skipped"}``: the paths written, the
    one-line notes (what was skipped and why), the table rows (as in the CSV; a one-seed std is
    ``None``) and the skipped run names by reason. Raises :class:`ConfigError` on user errors.
    """
    if isinstance(last, bool) or not isinstance(last, int) or last < 1:
        raise ConfigError(f"--last must be a positive integer, got {last!r}")
    rundirs = find_runs(paths)
    if not rundirs:
        raise ConfigError(f"no run directories (config.json) in {', '.join(map(str, paths))}; pass the "
                          f"--out of fedalf run or fedalf sweep")
    runs, skipped, messages = load_runs(rundirs)
    name_variants(runs)
    cells, notes = build_cells(runs)
    if not any(c.done for c in cells):
        counts = ", ".join(f"{len(v)} {k}" for k, v in skipped.items())
        raise ConfigError(f"none of the {len(rundirs)} runs in {', '.join(map(str, paths))} has finished "
                          f"({counts}); finish them ({resume_hint(rundirs, skipped)}) or pass other directories")
    messages += length_notes(runs) + notes
    for c in cells:
        messages += choose_eta(c)
    chosen = [c for c in cells if c.eta is not None]
    rows = {id(c): cell_row(c, last) for c in chosen}
    messages += last_k_notes(chosen, last)
    messages = list(dict.fromkeys(messages))  # each note once (printed, and in report.md)

    out_dir = Path(out)
    fig_dir = out_dir / "figures"
    _make_dir(fig_dir)
    figures = write_figures(cells, fig_dir)
    counts = {"done": sum(r.status == "done" for r in runs)}
    counts.update({k: len(v) for k, v in skipped.items()})
    md, table = out_dir / "report.md", out_dir / "table.csv"
    write_markdown(md, cells, rows, last, figures, messages, counts)
    row_list = [rows[id(c)] for c in chosen]
    write_csv(table, row_list)
    return {"markdown": str(md), "csv": str(table), "figures": [str(p) for fs in figures.values() for p in fs],
            "messages": messages, "rows": row_list, "skipped": skipped}
