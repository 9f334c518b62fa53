"""The report's figures (:mod:`fedalf_jax.reporting`), per (model, dataset, partition): accuracy and
angle vs round, the per-client accuracy heatmap, the privacy comparison and the privacy–utility
frontier. matplotlib is imported only when a figure is drawn."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple, Optional

import numpy as np

from ..algorithms import declared
from .runs import Cell, Run, _fmt_value, _privacy, _variant_name, cell_spent
from .tables import _writing, mean_std, setting

_DPI = 100


# ---- figures ------------------------------------------------------------------------------------

def _curve(runs: list[Run], attr: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rounds evaluated by every run, and the seed mean and std (ddof=1; 0 for one seed) there."""
    common = runs[0].rounds
    for r in runs[1:]:
        common = np.intersect1d(common, r.rounds)
    vals = np.stack([getattr(r, attr)[np.searchsorted(r.rounds, common)] for r in runs])
    std = vals.std(axis=0, ddof=1) if len(runs) > 1 else np.zeros(len(common))
    return common, vals.mean(axis=0), std


FEW_POINTS = 20  # a curve of at most this many evaluations shows each as a marker


_LINESTYLES = ("-", "--", ":", "-.")


def line_styles(n: int) -> list[tuple[str, str]]:
    """``n`` distinct (colour, line style) pairs, one per curve of a figure: matplotlib's ten default
    colours (``tab10``), solid, for the first 10 curves; then ``tab20``'s ten lighter shades of them, dashed
    (the fair benchmark draws 14 methods: with ten colours, four pairs of methods shared one); past 20 the
    colours again with the next line styles."""
    from matplotlib import colormaps
    from matplotlib.colors import to_hex
    dark, light = colormaps["tab10"], colormaps["tab20"]
    out = []
    for i in range(n):
        k, lap = i % 10, i // 10
        colour = dark(k) if lap % 2 == 0 else light(2 * k + 1)
        out.append((to_hex(colour), _LINESTYLES[lap % len(_LINESTYLES)]))
    return out


def _band(ax, cell: Cell, attr: str, style: Optional[tuple[str, str]] = None) -> None:
    x, mean, std = _curve(cell.runs, attr)
    marker = {"marker": "o", "ms": 4} if len(x) <= FEW_POINTS else {}  # 3 points are not a line to read
    given = {} if style is None else {"color": style[0], "ls": style[1]}
    (line,) = ax.plot(x, mean, label=f"{cell.variant} (η={cell.eta:g})", lw=1.2, **given, **marker)
    ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.2, lw=0)


def _legend_beside(fig, ax, title: str) -> None:
    """The legend to the right of the figure's last axes, outside every plot (inside the accuracy axes it
    covered the curves of a 14-method figure)."""
    handles, labels = ax.get_legend_handles_labels()
    ncol = 1 if len(labels) <= 16 else 2
    fig.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.0, 0.95), fontsize=7, title=title,
               title_fontsize=7, ncol=ncol, frameon=False)


def _round_axis(ax) -> None:
    """Rounds are whole: ticks at integers only (matplotlib put them at 2.5 rounds on a short run)."""
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


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
    for c, style in zip(cells, line_styles(len(cells))):  # one colour and style per variant, in both panels
        _band(ax_acc, c, "acc", style)
        _band(ax_ang, c, "angle", style)
    ax_acc.set(xlabel="round", ylabel="mean accuracy", title=f"accuracy ({title})")
    ax_ang.set(xlabel="round", ylabel="fairness angle (°)", title=f"angle ({title})")
    _round_axis(ax_acc)
    _round_axis(ax_ang)
    fig.tight_layout()
    _legend_beside(fig, ax_acc, "seed mean ± std")
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
    """Accuracy vs round of every algorithm that ran both with and without privacy (the paper's: FedALF and its
    private variants), its cells of both kinds; ``None`` when no algorithm did."""
    from matplotlib.figure import Figure
    kinds = defaultdict(set)
    for c in cells:
        kinds[c.runs[0].cfg["algorithm"]].add(_privacy(c.runs[0].cfg) != "none")
    both = [c for c in cells if kinds[c.runs[0].cfg["algorithm"]] == {True, False}]
    if not both:
        return None
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    for c in both:
        _band(ax, c, "acc")
    ax.set(xlabel="round", ylabel="mean accuracy", title=f"privacy ({title})")
    _round_axis(ax)
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
    """A non-private cell's final mean accuracy and angle (mean, std over seeds), of an algorithm that declares a
    ``frontier_line`` (FedALF, FedAvg)."""

    algorithm: str
    acc: float
    acc_std: Optional[float]
    angle: float
    angle_std: Optional[float]


def _frontier_line(algorithm: str) -> Optional[str]:
    """The line style an algorithm's non-private level is drawn with on the frontier (its declaration)."""
    return declared(algorithm).frontier_line


def _final(cell: Cell) -> tuple[float, Optional[float], float, Optional[float]]:
    acc, acc_std = mean_std(r.acc[-1] for r in cell.runs)
    angle, angle_std = mean_std(r.angle[-1] for r in cell.runs)
    return acc, acc_std, angle, angle_std


def _frontier_cells(cells: list[Cell]) -> tuple[dict[str, list[Cell]], dict[str, Cell]]:
    """The private cells by line (variant name without ``epsilon``), by ascending ε, and the non-private
    cells of the algorithms declaring a ``frontier_line`` by label (``FedALF (no privacy)``); cells without a
    chosen η are left out."""
    lines: dict[str, list[Cell]] = defaultdict(list)
    baselines: dict[str, Cell] = {}
    for c in cells:
        if c.eta is None or not c.runs:
            continue
        run = c.runs[0]
        if _privacy(run.cfg) != "none":
            named = {k: v for k, v in run.named_by.items() if k != "epsilon"}
            lines[_variant_name(run.label, named)].append(c)
        elif _frontier_line(run.cfg["algorithm"]) is not None:
            parts = [f"{k}={_fmt_value(v)}" for k, v in run.named_by.items()] + ["no privacy"]
            baselines[f"{run.label} ({', '.join(parts)})"] = c
    return {name: sorted(cs, key=lambda c: float(c.runs[0].cfg["epsilon"])) for name, cs in lines.items()}, baselines


def frontier_data(cells: list[Cell]) -> tuple[dict[str, list[FrontierPoint]], dict[str, Baseline]]:
    """What the frontier figure of one (model, dataset, partition) group plots.

    Lines: per private variant, its cells that differ only in ``epsilon`` (their variant names without
    ``epsilon=…``), one :class:`FrontierPoint` per cell by ascending ε (the config's, per round of the
    mechanism). Baselines: the non-private cells of the algorithms that declare a ``frontier_line`` (FedALF,
    FedAvg), by label (``FedALF (no privacy)``; the options naming the variant first when there are some), those
    of an algorithm with a private line first. Each number is over the cell's chosen η's
    seeds, at their final evaluation."""
    lines, baselines = _frontier_cells(cells)
    points = {name: [FrontierPoint(float(c.runs[0].cfg["epsilon"]), *_final(c)) for c in cs]
              for name, cs in lines.items()}
    base = {label: Baseline(c.runs[0].cfg["algorithm"], *_final(c)) for label, c in baselines.items()}
    private = {c.runs[0].cfg["algorithm"] for cs in lines.values() for c in cs}  # the subjects' levels first
    return points, dict(sorted(base.items(), key=lambda kv: kv[1].algorithm not in private))


def frontier_figure(cells: list[Cell], path: Path, title: str) -> Optional[Path]:
    """Final accuracy and angle vs ε per private variant, the declared non-private levels as horizontal lines
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
            ax.axhline(y, ls=_frontier_line(b.algorithm), color=color, lw=1.2, label=label)
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


def participation_figure(cells: list[Cell], path: Path, title: str) -> Optional[Path]:
    """Each client's final accuracy against its participation count (the rounds its upload arrived in), one
    point per client and chosen run, one colour per variant; ``None`` when no chosen run recorded its
    participation (runs written before summary.json recorded it: :func:`participation_notes` says so)."""
    pts = [(c, [r for r in c.runs if r.participation is not None and r.clients is not None and len(r.clients)])
           for c in cells]
    pts = [(c, rs) for c, rs in pts if rs]
    if not pts:
        return None
    from matplotlib.figure import Figure
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    styles = line_styles(len(pts))
    for (c, rs), (color, _) in zip(pts, styles):
        x = np.concatenate([r.participation for r in rs]).astype(np.float64)
        y = np.concatenate([np.asarray(r.clients[-1], np.float64) for r in rs])
        ax.scatter(x, y, s=12, alpha=0.7, color=color, label=c.variant)
    ax.set(xlabel="participation (rounds the client's upload arrived in)", ylabel="final client accuracy",
           title=f"accuracy vs participation ({title})")
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    _legend_beside(fig, ax, "variant")
    return _save(fig, path)


def participation_notes(cells: list[Cell]) -> list[str]:
    """One note per (model, dataset, partition) whose chosen runs include some without a recorded
    participation: the accuracy-vs-participation figure leaves them out (or is not drawn)."""
    notes = []
    by_where = defaultdict(list)
    for c in cells:
        if c.eta is not None:
            by_where[(c.model, c.dataset, c.partition)] += [r.name for r in c.runs if r.participation is None]
    for (model, dataset, partition), names in by_where.items():
        if names:
            notes.append(f"{model}, {dataset} {partition}: {len(names)} run(s) without a recorded participation "
                         f"(summary.json written before runs recorded it), left out of the accuracy-vs-participation "
                         f"figure{' (not drawn)' if len(names) == sum(len(c.runs) for c in cells if c.eta is not None and (c.model, c.dataset, c.partition) == (model, dataset, partition)) else ''}: "
                         f"{', '.join(sorted(names)[:5])}{' and more' if len(names) > 5 else ''}")
    return notes


def write_figures(cells: list[Cell], fig_dir: Path) -> dict[str, list[Path]]:
    """All figures, by model."""
    groups: dict[tuple, list[Cell]] = defaultdict(list)
    for c in cells:
        if c.eta is not None:
            groups[(c.model, c.dataset, c.partition)].append(c)
    out: dict[str, list[Path]] = defaultdict(list)
    for (model, dataset, partition), cs in groups.items():
        stem, title = f"{model}_{dataset}_{partition}", _title(model, dataset, partition) + setting(cs)
        with np.errstate(all="ignore"):
            made = [curves_figure(cs, fig_dir / f"{stem}_curves.png", title),
                    heatmap_figure(cs, fig_dir / f"{stem}_clients.png", title),
                    privacy_figure(cs, fig_dir / f"{stem}_privacy.png", title),
                    frontier_figure(cs, fig_dir / f"{stem}_frontier.png", title),
                    participation_figure(cs, fig_dir / f"{stem}_participation.png", title)]
        out[model] += [p for p in made if p is not None]
    return dict(out)
