"""The report's numbers and text (:mod:`fedalf_jax.reporting`): a cell's row (mean ± std over seeds of
the final and last-K accuracy and angle and of the final worst-10% accuracy, guarantee, ε spent, the
algorithm's own and personalised metrics), ``report.md`` (:func:`write_markdown`) and ``table.csv``
(:func:`write_csv`)."""

from __future__ import annotations

import contextlib
import csv
from pathlib import Path
from typing import Iterable, Optional

import numpy as np

from ..config.config import ALGORITHMS, DATASETS, MODELS, PARTITIONS, ConfigError
from ..runner.columns import PERSONAL_KEYS
from .runs import STATUS_WORDS, Cell, Run, _index, _plural, _shorten, cell_guarantee, cell_spent

CSV_COLUMNS = ("model", "dataset", "partition", "algorithm", "eta_option", "eta", "ranked_by", "seeds", "rounds",
               "last_k", "final_acc_mean", "final_acc_std", "final_angle_mean", "final_angle_std", "final_worst10_mean",
               "final_worst10_std", "final_best10_mean", "final_best10_std", "final_variance_mean",
               "final_variance_std", "final_worst_client_mean", "final_worst_client_std", "lastK_acc_mean",
               "lastK_acc_std", "lastK_angle_mean", "lastK_angle_std", "personal_acc_mean", "personal_acc_std",
               "personal_angle_mean", "personal_angle_std", "guarantee", "eps_spent", "eps_spent_delta")
FAIR_KEYS = ("worst10", "best10", "variance", "worst_client")  # the fair-FL numbers of the final evaluation


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
           "rounds": _rounds(runs), "last_k": last, "ranked_by": cell.ranked_by}
    series = {"final_acc": [r.acc[-1] for r in runs], "final_angle": [r.angle[-1] for r in runs],
              "lastK_acc": [_last_k(r, r.acc, last).mean() for r in runs],
              "lastK_angle": [_last_k(r, r.angle, last).mean() for r in runs]}
    for k, vals in series.items():
        row[f"{k}_mean"], row[f"{k}_std"] = mean_std(vals)
    worst = [float(r.worst10[-1]) for r in runs if r.worst10 is not None and np.isfinite(r.worst10[-1])]
    row["final_worst10_mean"], row["final_worst10_std"] = mean_std(worst) if len(worst) == len(runs) else (None, None)
    for k, vals in fair_numbers(runs).items():  # best 10%, variance and the worst client (worst 10%: above)
        row[f"final_{k}_mean"], row[f"final_{k}_std"] = mean_std(vals) if vals is not None else (None, None)
    row["guarantee"] = cell_guarantee(cell)
    row["eps_spent"], row["eps_spent_delta"] = cell_spent(cell)
    names = list(dict.fromkeys(k for r in runs for k in r.own))
    row["own_metrics"] = {k: mean_std([r.own[k][-1] for r in runs if k in r.own]) for k in names}  # not in the CSV
    if all(r.personal for r in runs):  # each client's own model: final values, beside the global model's
        row["personal"] = {k: mean_std([r.personal[k][-1] for r in runs]) for k in PERSONAL_KEYS}
    personal = row.get("personal", {})  # the CSV's personal_* columns: blank without a personal model
    row["personal_acc_mean"], row["personal_acc_std"] = personal.get("personal_acc", (None, None))
    row["personal_angle_mean"], row["personal_angle_std"] = personal.get("personal_angle_deg", (None, None))
    if cell.personal:  # the deployed model's last-K numbers, for the headline tables (not in the CSV)
        row["personal_lastK"] = {k: mean_std([_last_k(r, r.personal[k], last).mean() for r in runs])
                                 for k in ("personal_acc", "personal_angle_deg")}
    return row


def fair_numbers(runs: list[Run]) -> dict:
    """Per run, from its final evaluation's client accuracies ``a`` (N of them): the mean of the best
    ``ceil(N / 10)`` (``best10``, the rule of ``worst10_acc``), the variance across clients (``variance``,
    ``mean((a − mean a)²)``) and the worst client's accuracy (``worst_client``, ``min a``); ``None`` for a name
    when a run has no finite client accuracies."""
    out = {"best10": [], "variance": [], "worst_client": []}
    for r in runs:
        a = None if r.clients is None or not len(r.clients) else np.asarray(r.clients[-1], np.float64)
        if a is None or not a.size or not np.all(np.isfinite(a)):
            return dict.fromkeys(out)
        k = max(1, int(np.ceil(0.1 * a.size)))
        out["best10"].append(float(np.sort(a)[-k:].mean()))
        out["variance"].append(float(a.var()))
        out["worst_client"].append(float(a.min()))
    return out


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


def format_personal(row: dict, which: str) -> str:
    """The clients' own models' ``0.810 ± 0.004 (3.1 ± 0.4°) (personal)`` for ``which`` in ``final``,
    ``lastK`` (a cell whose algorithm deploys a personal model: :attr:`Cell.ranked_by`)."""
    p = row["personal"] if which == "final" else row["personal_lastK"]
    return f"{_pm(*p['personal_acc'], 3)} ({_pm(*p['personal_angle_deg'], 1)}°) (personal)"


def _headline(cell: Cell, row: dict, which: str) -> str:
    """What a table shows for a cell: the deployed model's numbers (the personal model's, marked, with the
    global model's beside them, or the global model's)."""
    if cell.personal:
        return f"{format_personal(row, which)}<br>global: {format_cell(row, which)}"
    return format_cell(row, which)


# ---- Markdown and CSV ---------------------------------------------------------------------------

def _column(dataset: str, partition: str, cells: list[Cell] = ()) -> str:
    return f"{dataset} {partition}{setting(cells)}"


def setting(cells: list[Cell]) -> str:
    """What a table column's (or a figure's) runs ran on beyond the data set and partition, as
    `` (α=0.1, 100 clients)``: the Dirichlet α of a ``dirichlet`` partition and the number of clients, each
    with every value the runs have (``α=0.1/0.5``); ``""`` for no runs (no report said
    either)."""
    runs = [r for c in cells for g in (c.done, c.diverged) for rs in g.values() for r in rs]
    alphas = sorted({float(r.cfg["alpha"]) for r in runs
                     if r.cfg.get("partition") == "dirichlet" and r.cfg.get("alpha") is not None})
    clients = sorted({int(r.cfg["clients"]) for r in runs if r.cfg.get("clients") is not None})
    parts = ["α=" + "/".join(f"{a:g}" for a in alphas)] if alphas else []
    parts += ["/".join(map(str, clients)) + " clients"] if clients else []
    return f" ({', '.join(parts)})" if parts else ""


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
    return ("by personal_acc: " if cell.personal else "") + "; ".join(parts)


def _model_section(model: str, cells: list[Cell], rows: dict, last: int, figures: list[Path], out: Path) -> list[str]:
    columns = sorted({(c.dataset, c.partition) for c in cells},
                     key=lambda dp: (_index(DATASETS, dp[0]), _index(PARTITIONS, dp[1])))
    variants = sorted({(c.order, c.variant) for c in cells})
    by_key = {(c.variant, c.dataset, c.partition): c for c in cells}
    header = ["algorithm"] + [_column(*dp, [c for c in cells if (c.dataset, c.partition) == dp]) for dp in columns]

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
        text = f"{_headline(c, row, 'final')}<br>η={c.eta:g} ({_plural(row['seeds'], 'seed')})"
        text += f"<br>guarantee: {row['guarantee']}" if row.get("guarantee") else ""
        if row.get("eps_spent") is not None:
            text += f"<br>ε spent: {row['eps_spent']:.3g} (δ={row['eps_spent_delta']:g})"
        return text

    lines = [f"## Model `{model}`", "", "### Final evaluation", "",
             "mean accuracy ± std (fairness angle ± std) over seeds, at the chosen η; for an algorithm with a "
             "personal model, its clients' own models (marked (personal), the global model's below)", ""]
    lines += _md_table(header, body(final))

    def worst(c: Cell) -> str:
        row = rows.get(id(c), {})
        glob = "—" if c.eta is None or row.get("final_worst10_mean") is None else _pm(
            row["final_worst10_mean"], row["final_worst10_std"], 3)
        if c.eta is not None and c.personal:
            return f"{_pm(*row['personal']['personal_worst10_acc'], 3)} (personal)<br>global: {glob}"
        return glob

    lines += ["", "### The worst 10% of clients, final evaluation", "",
              "mean accuracy of the worst-scoring 10% of clients (`worst10_acc`) ± std over seeds, at the chosen η",
              ""]
    lines += _md_table(header, body(worst))

    def fair(c: Cell) -> str:
        row = rows.get(id(c), {})
        if c.eta is None or row.get("final_best10_mean") is None:
            return "—"
        parts = [f"{name} {_pm(row[f'final_{k}_mean'], row[f'final_{k}_std'], 4 if k == 'variance' else 3)}"
                 for k, name in (("worst10", "worst 10%"), ("best10", "best 10%"), ("variance", "variance"),
                                 ("worst_client", "worst client")) if row.get(f"final_{k}_mean") is not None]
        return "<br>".join(parts)

    lines += ["", "### Fairness across clients, final evaluation", "",
              "the global model's client accuracies at the last evaluation: mean of the worst and of the best 10% "
              "of clients, their variance across clients and the worst client's accuracy, each ± std over seeds, "
              "at the chosen η", ""]
    lines += _md_table(header, body(fair))
    lines += ["", f"### Mean of the last {last} evaluations of each run (after round 0)", ""]
    lines += _md_table(header, body(lambda c: _headline(c, rows[id(c)], "lastK") if c.eta is not None else "—"))
    by_server = sorted({c.variant for c in cells if c.eta_option == "server_lr" and any(
        r.cfg["algorithm"] not in ALGORITHMS for g in (c.done, c.diverged) for rs in g.values() for r in rs)})
    eta_text = "; ".join(["`server_lr` for FedLF client_grad=full"]
                         + [f"`server_lr` for {', '.join(by_server)} (its swept option)"] * bool(by_server))
    lines += ["", "### η choice", "", f"η (`lr`; {eta_text}): seed-mean final "
              "accuracy of the deployed model (seeds): the clients' own models' (`personal_acc`) for a cell "
              "marked \"by personal_acc\", else the global model's (`mean_acc`); the chosen η in bold", ""]
    lines += _md_table(header, body(_eta_candidates))
    lines += _guarantee_notes(cells)
    lines += _spent_notes(cells)
    if figures:
        lines += ["", "### Figures", ""]
        if any(f.stem.endswith("_frontier") for f in figures):
            lines += [FRONTIER_NOTE, ""]
        if any(f.stem.endswith("_participation") for f in figures):
            lines += [PARTICIPATION_NOTE, ""]
        lines += [f"![{f.stem}]({f.relative_to(out).as_posix()})" for f in figures]
    return lines + [""]


FRONTIER_NOTE = ("The privacy–utility frontier (`*_frontier.png`): x = the runs' `epsilon` option (log scale): "
                 "per round of the mechanism for LDP and local Gaussian DP, the whole run's for central DP; y = final mean accuracy (left) and final fairness angle "
                 "(right), mean ± std over seeds at each cell's chosen η; one line per private variant (the ε spent "
                 "over the run, when accounted, in its legend); dashed: FedALF without privacy, dotted: FedAvg "
                 "without privacy.")


PARTICIPATION_NOTE = ("Accuracy against participation (`*_participation.png`): one point per client and run (the "
                      "chosen η's seeds), its final accuracy against the rounds its upload arrived in (summary.json's "
                      "`participation`); one colour per variant.")


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
seed-mean final mean accuracy is chosen, and an η with a diverged seed is not eligible. A method is
ranked by what it deploys: for an algorithm with a personal model (`personal_model`) the accuracy is
its clients' own models' (`personal_acc`), for η's choice and in the tables (marked (personal), the
global model's beside it). Numbers are
mean ± sample std (ddof=1) over the chosen η's seeds; with one seed only the mean is shown. The angle
is the fairness angle in degrees. Variants are named by the options that differ between the runs of
an algorithm."""


def write_markdown(path: Path, cells: list[Cell], rows: dict, last: int, figures: dict, notes: list[str],
                   counts: dict) -> None:
    lines = ["# fedalf report", "", RULES, "",
             "Runs: " + ", ".join(f"{n} {STATUS_WORDS.get(s, s)}" for s, n in counts.items()) + ".", ""]
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
                  "mean ± std over seeds. The tables above show and rank these cells by the personalised model "
                  "(what the algorithm deploys), at the η it scores best at.", ""]
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

