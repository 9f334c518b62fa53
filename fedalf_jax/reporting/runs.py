"""The runs of a report (:mod:`fedalf_jax.reporting`): each run directory read once (:class:`Run`: its
resolved config, base label, η, guarantee, ε spent and curves), the variants named by the options that
differ, and the cells (model, dataset, partition, variant) with their η chosen (:func:`choose_eta`).
The rules are in :mod:`fedalf_jax.reporting`'s docstring."""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from typing import Optional

import numpy as np

from ..algorithms import BUILTINS, declared
from ..plugins import registry
from ..config.config import ALGORITHMS, DATASETS, MODELS, PARTITIONS, Config, ConfigError
from ..privacy.guarantee import privacy_guarantee, recorded_guarantee
from ..config.identity import USED_BY, flat_options, partition_ignores
from ..runner.columns import PERSONAL_KEYS, columns_of_file, metric_columns
from ..runner.rundir import METRICS, RunDir
from ..runner.writers import DamagedFile, read_csv_rows

LABELS = {name: factory.declares.label for name, factory in BUILTINS.items()}  # each built-in's own label
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
_SHOW_NAMES = 5


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
    worst10: Optional[np.ndarray] = None  # mean accuracy of the worst 10% of clients per evaluation (if written)
    clients: Optional[np.ndarray] = None  # [evaluations, N] per-client accuracy
    guarantee: Optional[dict] = None      # private runs: {"guarantee": "holds" | "does not hold", "why"}
    spent: Optional[dict] = None          # summary.json's privacy_spent (runs from before it: None)
    participation: Optional[np.ndarray] = None  # [N] summary.json's participation (arrived rounds; older runs: None)
    named_by: dict = dataclasses.field(default_factory=dict)  # the options naming the variant: {option: value}
    own: dict = dataclasses.field(default_factory=dict)  # the algorithm's own metrics (Algorithm.metrics) per evaluation
    personal: dict = dataclasses.field(default_factory=dict)  # each client's own model (PERSONAL_KEYS) per evaluation
    note: str = ""  # one line on how the report reads this run (a done run counted as diverged)

    @property
    def cell_key(self) -> tuple:
        return self.cfg["model"], self.cfg["dataset"], self.cfg["partition"], self.variant

    @property
    def deploys_personal(self) -> bool:
        """Whether the run's algorithm deploys each client's own model (it has a ``personal_model``: its
        ``metrics.csv`` has the ``personal_*`` columns); such a run is ranked by ``personal_acc``."""
        return "personal_acc" in self.personal

    @property
    def deployed_acc(self) -> np.ndarray:
        """The mean accuracy per evaluation of the model the algorithm deploys: the clients' own models'
        (``personal_acc``) for an algorithm with a personal model, else the global model's (``mean_acc``)."""
        return self.personal["personal_acc"] if self.deploys_personal else self.acc


def resolved_config(d: dict) -> dict:
    """The config dict with ``None`` options replaced by their resolved values (``Config.resolved_*``), and
    the algorithm's own hyper-parameters as one ``hp.NAME`` entry each (``identity.flat_options``)."""
    # a name this process cannot resolve: its metrics are all a report needs (not validated, and no user module
    # imported again by Config's checks)
    cfg = _unchecked_config(d) if unresolved_names(d) else Config.from_dict(d)
    out = cfg.to_dict()
    for k, v in out.items():
        if v is None and hasattr(Config, f"resolved_{k}"):
            out[k] = getattr(cfg, f"resolved_{k}")
    return flat_options(out)


_USER_KINDS = (("algorithm", ALGORITHMS), ("model", MODELS), ("dataset", DATASETS))
_UNREGISTERED = "is not registered in this process"
_LOOKED_UP: Optional[dict] = None  # (kind, name) -> why, while load_runs reads the runs (each module imported once)


def unresolved_names(d: dict) -> dict[str, tuple[str, str]]:
    """``{kind: (name, why)}`` for each user name of config dict ``d`` (its algorithm, model, data set) that
    this process cannot resolve: a name registered with ``fj.register_*`` in another process, or a
    ``module:attribute`` whose import fails, whatever it raises (a SyntaxError, a NameError at import time). ``why`` is one line: ``is not registered in this process``, or what the import raised."""
    out = {}
    for kind, builtin in _USER_KINDS:
        name = d.get(kind)
        if not isinstance(name, str) or name in builtin:
            continue
        key = (kind, name)
        if _LOOKED_UP is not None and key in _LOOKED_UP:
            why = _LOOKED_UP[key]
        else:
            why = None
            try:
                registry.lookup(kind, name, builtin)
            except registry.RegistryError as e:
                why = f"cannot be imported here ({_one_line(e)})" if registry.is_path(name) else _UNREGISTERED
            except Exception as e:  # noqa: BLE001 - a user's module: whatever its import raises, the report goes on
                why = f"cannot be imported here ({type(e).__name__}: {_one_line(e)})"
            if _LOOKED_UP is not None:
                _LOOKED_UP[key] = why
        if why is not None:
            out[kind] = (name, why)
    return out


def unresolved_algorithm(d: dict) -> Optional[str]:
    """The algorithm of config dict ``d`` when this process cannot resolve it (:func:`unresolved_names`), else
    ``None``."""
    return unresolved_names(d).get("algorithm", (None,))[0]


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= 200 else text[:197] + "..."


def _unchecked_config(d: dict) -> Config:
    """``d``'s options (the defaults for those it lacks) as a :class:`Config`, not validated: the algorithm
    cannot be built here, so its own checks cannot run; its resolved defaults are a user algorithm's."""
    cfg = object.__new__(Config)
    for f in dataclasses.fields(Config):
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        object.__setattr__(cfg, f.name, d.get(f.name, default))
    return cfg


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
    """The option tuned as η, as the algorithm declares it (``server_lr`` for FedLF without local training;
    ``lr`` for the others and a user's algorithm: :func:`swept_eta` may choose ``server_lr`` for one)."""
    return declared(cfg["algorithm"]).eta(cfg)


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
    the run's η option (default :func:`eta_option`). A user's algorithm reads ``HParams`` as it likes: of
    its options only the partition's are known unread (as :func:`.identity.ignored_options` says for a
    sweep), so every other option that differs names its variant (``mu`` of FedDyn's α, ...)."""
    algo = cfg["algorithm"]
    if algo not in ALGORITHMS:
        return set(partition_ignores(cfg.get("partition", "pat1"))) | {eta or eta_option(cfg)}
    out = {k for k, users in _USED_BY.items() if algo not in users}
    out |= set(partition_ignores(cfg.get("partition", "pat1")))  # alpha outside dirichlet, assign outside pat*
    out.add(eta or eta_option(cfg))
    out |= set(declared(algo).ignores(cfg))  # what else it declares it never reads (qFedAvg: server_lr)
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
    # an algorithm's own hyper-parameter by its name: FedAdam (beta1=0.9); a factory argument too: fedgkd (K=2)
    parts = [f"{k.partition('.')[2] if k.startswith(('hp.', 'arg.')) else k}={_fmt_value(v)}"
             for k, v in named_by.items()]
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
    run.worst10 = np.asarray(m["worst10_acc"], np.float64)[order] if "worst10_acc" in m else None
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
        "ended": "their metrics reach their last round but summary.json is missing; fedalf sweep --resume or "
                 "fedalf run --resume writes it",
        "new": "not started", "diverged": "they make their η ineligible in their cell",
        "empty": "metrics.csv holds no evaluation",
        "unevaluated": "run with --eval-every never: nothing was evaluated to report"}


STATUS_WORDS = {"ended": "ended (no summary.json)"}  # a status as the report's counts say it


def _ended(rd: RunDir, status: str) -> str:
    """``ended`` for a ``running`` run (no summary.json) whose metrics.csv reaches its last round: it
    finished, but its summary was lost (deleted, or its write failed); else ``status``."""
    if status != "running" or not rd.has_config():
        return status
    try:
        rounds = int(resolved_config(rd.config_dict())["rounds"])
        done = rd.metrics().get("round", ())
    except (ConfigError, ValueError, TypeError, KeyError):  # the reading below says what is wrong
        return status
    return "ended" if len(done) and int(max(done)) >= rounds else status


def _read_run(rd: RunDir, status: str) -> Run:
    """A run with a config: labels and η; the curves too when it is done (``empty`` if none)."""
    cfg = resolved_config(rd.config_dict())
    run = Run(rd.name, status, cfg, label=base_label(cfg), eta_option=eta_option(cfg))
    run.eta = float(cfg[run.eta_option])
    run.order = (_index(ALGORITHMS, cfg["algorithm"]), _index(_PRIVACY_ORDER, _privacy(cfg)))
    run.guarantee = run_guarantee(rd)
    run.spent = run_spent(rd)
    run.participation = run_participation(rd, int(cfg["clients"]))
    if status == "done" and (rd.summary() or {}).get("evaluated") is False:
        run.status = "unevaluated"  # eval_every=never: its summary says so; rows of an earlier call are not its end
    elif status == "done" and not _load_curves(run, rd):
        run.status = "empty"
    elif status == "done" and (bad := _personal_diverged(run)) is not None:
        run.status = "diverged"  # as the run loop marks it now: never shown as accuracies
        run.note = (f"{run.name}: its clients' personal models diverged by round {bad} (personal test loss not "
                    f"finite) though it ended done; counted as diverged, its personal accuracies not shown")
    return run


def _personal_diverged(run: Run) -> Optional[int]:
    """The first evaluation round whose ``personal_test_loss`` is not finite (a run that ended ``done``
    before the run loop marked such a run diverged), else ``None``."""
    loss = run.personal.get("personal_test_loss")
    if loss is None:
        return None
    bad = np.flatnonzero(~np.isfinite(loss))
    return int(run.rounds[bad[0]]) if bad.size else None


def run_guarantee(rd: RunDir) -> Optional[dict]:
    """A private run's ``{"guarantee": "holds" | "does not hold", "why": ...}``: from ``summary.json``'s
    ``privacy``, else from ``config.json``'s, else computed from its options
    (:func:`fedalf_jax.experiment.guarantee.privacy_guarantee`: runs recorded before the field existed);
    ``None`` for a run without a privacy mechanism."""
    raw = rd.config_dict()
    summary = rd.summary()
    for rec in ((summary if isinstance(summary, dict) else {}).get("privacy"), raw.get("privacy")):
        if isinstance(rec, dict) and rec.get("guarantee") in ("holds", "does not hold"):
            return recorded_guarantee(rec)  # a "holds" beside an un-noised aux recorded before 47.10 reads "does not hold"
    unresolved = unresolved_names(raw)
    if unresolved and raw.get("ldp", "none") == "none" and raw.get("dp", "none") == "none":
        return None
    if "algorithm" in unresolved:  # its declarations (private_upload, ...) cannot be read here
        name, why = unresolved["algorithm"]
        return {"guarantee": "unknown", "why": f"algorithm {name!r} {why}"}
    cfg = _unchecked_config(raw) if unresolved else Config.from_dict(raw)  # a model or data set of elsewhere
    if cfg.ldp == "none" and cfg.dp == "none":
        return None
    holds, why = privacy_guarantee(cfg)
    return {"guarantee": "holds" if holds else "does not hold", "why": why}


def run_participation(rd: RunDir, clients: int) -> Optional[np.ndarray]:
    """``summary.json``'s ``participation`` (each client's arrived rounds) when it is ``clients`` whole numbers;
    ``None`` for a run written before runs recorded it (or a failed replay, recorded as an error)."""
    summary = rd.summary()
    rec = summary.get("participation") if isinstance(summary, dict) else None
    if (not isinstance(rec, list) or len(rec) != clients
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in rec)):
        return None
    return np.asarray(rec, np.int64)


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
    global _LOOKED_UP
    _LOOKED_UP = {}
    try:
        return _load_runs(rundirs)
    finally:
        _LOOKED_UP = None


def _load_runs(rundirs: list[RunDir]) -> tuple[list[Run], dict[str, list[str]], list[str]]:
    runs, skipped, unreadable, unknown = [], defaultdict(list), [], defaultdict(list)
    notes = []
    for rd in rundirs:
        try:
            status = _ended(rd, rd.status())
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
        for kind, (name, why) in unresolved_names(rd.config_dict()).items():
            unknown[kind, name, why].append(run.name)
        if run.note:
            notes.append(run.note)
        if run.status != "done":
            skipped[run.status].append(run.name)
    messages = [f"skipped {_plural(len(names), f'{status} run')}"
                + (f" ({_WHY[status]})" if status in _WHY else "") + f": {_shorten(sorted(names))}"
                for status, names in skipped.items() if status != "unreadable"]
    fallback = [f"read {_plural(len(names), 'run')} of {kind} {name!r} from their config.json and metrics.csv "
                f"only: it {why}"
                + (f" (fj.register_{kind} it before report(), or name it module:attribute)" if why == _UNREGISTERED
                   else "") + f", so their options were not checked: {_shorten(sorted(names))}"
                for (kind, name, why), names in unknown.items()]
    return runs, dict(skipped), fallback + notes + messages + unreadable


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
    personal: bool = False  # every done run deploys a personal model: η chosen by, and the table shows, personal_acc

    @property
    def where(self) -> str:
        return f"{self.model} {self.dataset} {self.partition} {self.variant}"

    @property
    def runs(self) -> list[Run]:
        return self.done[self.eta] if self.eta is not None else []

    def etas(self) -> list[float]:
        return sorted(set(self.done) | set(self.diverged))

    @property
    def ranked_by(self) -> str:
        """The metric the cell's η is chosen by and its headline shows: ``personal_acc`` (the clients' own
        models, what a personalised algorithm deploys) or ``mean_acc`` (the global model)."""
        return "personal_acc" if self.personal else "mean_acc"


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
    """Pick the eligible η with the best seed-mean final accuracy of the deployed model (ties: the smaller η):
    the clients' own models' (``personal_acc``) when every done run of the cell has a personal model, else
    the global model's; messages."""
    messages = []
    done_runs = [r for rs in cell.done.values() for r in rs]
    cell.personal = bool(done_runs) and all(r.deploys_personal for r in done_runs)
    if not cell.personal and any(r.deploys_personal for r in done_runs):
        some = sorted(r.name for r in done_runs if r.deploys_personal)
        messages.append(f"{cell.where}: only {len(some)} of {len(done_runs)} runs record personal models "
                        f"(personal_acc): ranked and shown by the global model's mean_acc: {_shorten(some)}")
    for eta in cell.etas():
        done, bad = cell.done.get(eta, []), cell.diverged.get(eta, [])
        if bad:
            messages.append(f"{cell.where}: η={eta:g} not eligible ({len(bad)} of {len(done) + len(bad)} "
                            f"seeds diverged: {_shorten(sorted(r.name for r in bad))})")
            continue
        score = float(np.mean([(r.deployed_acc if cell.personal else r.acc)[-1] for r in done]))
        if math.isfinite(score):
            cell.scores[eta] = score
        else:
            messages.append(f"{cell.where}: η={eta:g} not eligible (non-finite final accuracy)")
    if cell.scores:
        cell.eta = max(sorted(cell.scores), key=lambda e: cell.scores[e])
    else:
        messages.append(f"{cell.where}: no eligible η; the cell is left empty")
    return messages

