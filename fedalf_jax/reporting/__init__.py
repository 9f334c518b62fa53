"""``fedalf report``: a paper-style table (Markdown and CSV) and figures from run and sweep directories.

Modules: :mod:`.runs` (reading runs, naming variants, cells and η), :mod:`.tables` (the numbers,
``report.md``, ``table.csv``), :mod:`.figures`; :func:`report` ties them together. Runs are read only
through :mod:`fedalf_jax.experiment.rundir` (found by :mod:`fedalf_jax.experiment.sweepdir`). The rules:

**Which runs count.** Only runs whose status is ``done``. ``running`` and ``new`` runs (a sweep in
progress or killed) and ``diverged`` runs are skipped; each kind is listed (count and names) in the
messages and in ``report.md``. A done run whose ``metrics.csv`` holds no evaluation is skipped too. A done
run whose clients' personal models diverged (a ``personal_test_loss`` that is not finite, recorded before the
run loop marked such a run ``diverged``) counts as diverged, with a note: its personal accuracies (the argmax
of NaN logits) are never shown.

**A user's names of another process.** A run whose algorithm, model or data set this process cannot
resolve (registered with ``fj.register_*`` in a notebook, or a ``module:attribute`` whose import fails,
whatever it raises: an ImportError, a SyntaxError, a NameError) is read from its ``config.json`` and
``metrics.csv`` alone, unchecked, and one line per name says so.

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
  variant of the other algorithms when it differs, e.g. FedALF with η_g 0.5 and 0.2.) These are the
  built-in algorithms' rules: a user's algorithm reads ``HParams`` as it likes (FedDyn's α is ``mu``), so
  every option of its runs that differs names its variant, but for η and the partition's ``alpha``/``assign``
  (as a sweep's de-duplication, :func:`fedalf_jax.experiment.identity.ignored_options`).

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

**A method is ranked by what it deploys.** For an algorithm with a personal model (``personal_model``:
every done run of the cell has the ``personal_*`` columns) the deployed model is each client's own, so
the accuracy of η's score is ``personal_acc`` (the clients' own models' mean accuracy), and the
final-evaluation, worst-10% and last-evaluations tables show the personal model's numbers, marked
``(personal)``, with the global model's beside them (``table.csv``: ``ranked_by`` is ``personal_acc``;
``final_*`` stay the global model's, ``personal_*`` the personal one's). Other algorithms are ranked by the
global model's ``mean_acc`` (``ranked_by`` ``mean_acc``). A personal model that diverged counts its run
diverged (above), so its accuracy is never a score.

**Numbers.** Per cell, over the winning η's seeds: the mean accuracy and the fairness angle (degrees,
``angle_deg``) at the final evaluation, and the same averaged over each run's last ``last``
evaluations after round 0 (FedAvg-like curves swing between evaluations; round 0 evaluates the
untrained model and never counts). A run with fewer than ``last`` evaluations after round 0 is
averaged over those it has, and a note says so. Each is ``mean ± std`` over seeds with
the sample std (``ddof=1``); with one seed only the mean is shown (the CSV's std is blank).

**Privacy.** A private cell says whether its runs' formal privacy guarantee holds: ``summary.json``'s
``privacy.guarantee``, else ``config.json``'s, else computed from the options
(:func:`fedalf_jax.experiment.guarantee.privacy_guarantee`); ``mixed`` if its seeds disagree. The
``guarantee`` column of ``table.csv`` holds it (blank without a mechanism), and ``report.md`` lists
each private variant's reason under "Privacy guarantee".

**Privacy spent.** A private cell also shows the ε its runs spent (``summary.json``'s
``privacy_spent``, :mod:`fedalf_jax.experiment.accounting`): the largest over its seeds, with its δ, in
the ``eps_spent`` and ``eps_spent_delta`` columns of ``table.csv`` and in the final-evaluation table;
``report.md`` says per variant what one ε protects under "Privacy spent". Runs recorded before the
accounting existed have none: blank.

**Outputs** (in ``out``, created if missing): ``report.md`` (per model: the final-evaluation table
with η and seeds, the last-evaluations table, the η choice with every candidate's score, figures),
``table.csv`` (one row per cell; for an algorithm with a personal model, ``personal_acc_*`` and
``personal_angle_*``: each client's own model at the final evaluation, mean and std over seeds, blank
for the other cells; ``ranked_by``: the accuracy η was chosen by), and ``figures/``: per (model, dataset,
partition) accuracy and angle vs round (seed mean ± std band, one line per variant at its η; the global model's curves, also for a
personalised algorithm), a per-client accuracy heatmap at the
final evaluation (every client, ranked worst to best within each run, then the mean over seeds at each
rank: :func:`heatmap_data`; cf. Fig. 9 of the FedALF paper), when FedALF and a
private FedALF are both present, the privacy comparison (accuracy vs round), and, when a private variant
ran at two or more ε, the privacy–utility frontier (``*_frontier.png``, :func:`frontier_data`): the final
mean accuracy and fairness angle (mean ± std over seeds, each cell at its chosen η) against the config's
``epsilon`` (the mechanism's budget per round, log scale), one line per private variant (its cells that
differ only in ``epsilon``), with non-private FedALF (dashed) and FedAvg (dotted) as horizontal lines.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from ..config.config import ConfigError
from ..runner.rundir import RunDir
from ..sweeps.sweepdir import find_runs
from .figures import (Baseline, FrontierPoint, curves_figure, frontier_data, heatmap_data, participation_notes,
                      write_figures)
from .runs import (LABELS, NOT_NAMING, Cell, Run, base_label, build_cells, cell_guarantee, cell_spent, choose_eta,
                   STATUS_WORDS, eta_option, length_notes, load_runs, name_variants, naming_options, resolved_config,
                   run_guarantee, run_spent, swept_eta)
from .tables import (CSV_COLUMNS, FRONTIER_NOTE, RULES, cell_row, format_cell, last_k_notes, mean_std, write_csv,
                     write_markdown)

__all__ = [
    "report", "resume_hint", "find_runs", "Run", "Cell", "LABELS", "NOT_NAMING", "load_runs", "resolved_config",
    "base_label", "eta_option", "swept_eta", "naming_options", "name_variants", "length_notes", "run_guarantee",
    "run_spent", "cell_guarantee", "cell_spent", "build_cells", "choose_eta", "CSV_COLUMNS", "FRONTIER_NOTE", "RULES",
    "mean_std", "cell_row", "last_k_notes", "format_cell", "write_markdown", "write_csv", "curves_figure",
    "heatmap_data", "FrontierPoint", "Baseline", "frontier_data", "write_figures",
]


def _make_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create the report folder {path} ({e.strerror or e}); pass another --out") from None


def resume_hint(rundirs: list[RunDir], skipped: dict) -> str:
    """The commands that finish the unfinished runs: ``fedalf sweep --resume --out SWEEP`` for a sweep's run,
    ``fedalf run --resume --out RUN`` for a run of its own."""
    names = set(skipped.get("running", [])) | set(skipped.get("new", [])) | set(skipped.get("ended", []))
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
    if not any(c.done for c in cells) and set(skipped) == {"unevaluated"}:  # nothing but eval_every=never runs
        raise ConfigError(f"none of the {len(rundirs)} runs in {', '.join(map(str, paths))} was evaluated (run with "
                          f"--eval-every never): nothing to report; run them with --eval-every N, or pass other "
                          f"directories")
    if not any(c.done for c in cells):
        counts = ", ".join(f"{len(v)} {STATUS_WORDS.get(k, k)}" for k, v in skipped.items())
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
    messages += participation_notes(cells)
    counts = {"done": sum(r.status == "done" for r in runs)}
    counts.update({k: len(v) for k, v in skipped.items()})
    md, table = out_dir / "report.md", out_dir / "table.csv"
    write_markdown(md, cells, rows, last, figures, messages, counts)
    row_list = [rows[id(c)] for c in chosen]
    write_csv(table, row_list)
    return {"markdown": str(md), "csv": str(table), "figures": [str(p) for fs in figures.values() for p in fs],
            "messages": messages, "rows": row_list, "skipped": skipped}
