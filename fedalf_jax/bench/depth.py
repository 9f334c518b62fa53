"""The server step's sequential depth (``fedalf bench --depth-width``): its loop trips per round from the
solvers' own counters, and every loop trip and the QP's operations read from the compiled programs' HLO
(:mod:`.hlo`)."""

from __future__ import annotations

import jax
import numpy as np

from ..config.config import Config
from .table import duration


def server_depth(cfg: Config, *, widths=(1, 8), rounds: int = 12, progress=None, round_s=None) -> dict:
    """The server step's sequential depth: its loop trips per round, counted from the solvers' own
    iteration counters (the metric ``qp_iters``: per merge step one trip plus the slowest layer's QP
    iterations), for a sweep of ``W`` runs (seeds ``seed .. seed+W−1``) in one program, per width.

    How a width's runs share the server decides its depth per program round: batched (``run_map``
    ``vmap`` with a per-problem solver: ``active``/``pgd``), the runs' QPs run side by side and the
    depth is the slowest run's (``max``; exact when no run merges blocks, a lower bound otherwise);
    one after another (``run_map`` ``map``, or the ``osqp`` solver, whose batch shares one ADMM loop
    and so runs once per run), it is the sum over the runs. ``trips_per_run_round`` divides by ``W``.
    ``progress``: called with one line per width (its expected time from ``round_s``, one round's seconds).
    For ``osqp`` the count is its ADMM steps and polish steps; each ADMM step also runs an inner CG
    loop that jaxopt does not count, so it is a lower bound. ``{}`` for algorithms without a QP.
    """
    if not cfg.declares.fair_server:  # an algorithm whose server solves no per-layer QP
        return {}
    from ..sim.qp import resolve_method
    from ..runner.loop import Program, default_run_map, to_host
    from ..sweeps.sweep import _Group
    run_map = default_run_map() if cfg.run_map == "auto" else cfg.run_map
    res = {"rounds": rounds, "run_map": run_map, "widths": {}}
    for width in widths:
        if progress is not None:
            rest = (f", then ≤ ~{duration(rounds * width * round_s)} ({rounds} rounds × {width} run"
                    f"{'s' if width != 1 else ''} × {duration(round_s)}, and an evaluation)" if round_s else "")
            progress(f"counting the server's loop trips over {rounds} rounds of W={width}: compiling{rest}")
        group = _Group([(cfg.replace(seed=cfg.seed + i, out=None), None) for i in range(width)])
        state, hp, data = group.inputs(list(range(width)))
        program = Program(group.spec, batched=True, data_axes=group.axes, run_map=group.run_map)
        texts = {"chunk": program.compiled(rounds, state, hp, data).as_text(),
                 "eval": program.compiled(0, state, hp, data).as_text(),
                 "train_loss": program.compiled_train_loss(state, hp, data).as_text()}
        _, out = program(state, hp, data, rounds)
        del state
        trips = np.asarray(to_host(out.rounds["qp_iters"]), np.int64).reshape(width, rounds)
        blocks = np.asarray(to_host(out.rounds["qp_blocks"]), np.int64).reshape(width, rounds)
        qp_rows = cfg.clients_per_round + 1 + (cfg.clients if cfg.resolved_history else 0)
        method = resolve_method(cfg.qp_method, qp_rows)
        side_by_side = run_map == "vmap" and method != "osqp"
        per_round = trips.max(0) if side_by_side else trips.sum(0)
        res["qp_method"] = method
        res["widths"][str(width)] = {
            "runs_share": "side by side (max over runs)" if side_by_side else "one after another (sum over runs)",
            "trips_per_round": float(np.median(per_round)), "trips_per_round_max": int(per_round.max()),
            "trips_per_run_round": float(np.median(per_round)) / width,
            "single_run_trips_median": float(np.median(trips)), "single_run_trips_max": int(trips.max()),
            "blocks_min": int(blocks.min()), "per_round": per_round.tolist(), "per_run": trips.tolist()}
        res["widths"][str(width)].update(all_loops(texts, cfg, rounds, float(np.median(per_round)),
                                                   K=_layers(group.spec), blocks=blocks, side_by_side=side_by_side))
    return res


def _layers(spec) -> int:
    """``K``: the layers of the fair direction (one QP each per merge step)."""
    return max(int(i) for i in jax.tree_util.tree_leaves(spec.layer_of)) + 1


def all_loops(texts: dict, cfg: Config, rounds: int, server_trips: float, *, K: int, blocks,
              side_by_side: bool) -> dict:
    """Every loop trip of a program round, read from the compiled programs' HLO (``texts``: the chunk of
    ``rounds`` rounds with its evaluation, the evaluation alone, the train loss; :mod:`.hlo`), and the
    QP's operations per active-set step and per round.

    Loops of known trip count (``lax.scan``/``lax.map``: local SGD, the clients mapped, the runs mapped,
    the evaluation's client chunks, the RNG's rolled rounds on CPU) are counted from the programs; the
    fair direction's data-dependent loops (merge steps and QP solvers) by the program's own counter
    (``server_trips`` per program round), each trip with the known-trip loops nested in it (the LU's
    pivot permutation on CPU). The evaluation runs every ``eval_every`` rounds and the train loss every
    ``train_loss_every``: their trips are spread over those rounds. ``qp_ops_per_round``: per round
    the QP trips (``server_trips`` less the merge steps, ``1 + K − blocks`` per run) times the
    active-set step's operations, plus each merge step's own operations (the QPs' set-up and checks).
    """
    from . import hlo
    parsed = {k: hlo.computations(t) for k, t in texts.items()}
    static = {k: hlo.static_trips(c, e) for k, (c, e) in parsed.items()}
    comps, entry = parsed["chunk"]
    dyn = hlo.dynamic_loops(comps, entry)
    inner = max((hlo.inner_static_per_trip(comps, lp) for lp, _ in dyn), default=0)
    round_static = (static["chunk"] - static["eval"]) / rounds
    eval_every = max(1, min(cfg.eval_every, cfg.rounds))
    per_round = (round_static + server_trips * (1 + inner) + static["eval"] / eval_every
                 + static["train_loss"] / max(1, cfg.train_loss_every))
    out = {"all_trips_per_round": per_round, "round_static_trips": round_static,
           "server_inner_trips_per_trip": inner, "eval_trips": static["eval"], "eval_every": eval_every,
           "train_loss_trips": static["train_loss"], "train_loss_every": cfg.train_loss_every}
    active = hlo.find_loops(comps, entry, "qp_active_set")
    if active:
        step = max(hlo.ops(comps, lp.body) + hlo.ops(comps, lp.cond) for lp in active)
        merge = [lp for lp, _ in dyn if hlo.find_loops(comps, lp.body, "qp_active_set")]
        merge_ops = max((hlo.ops(comps, lp.body) + hlo.ops(comps, lp.cond) for lp in merge), default=0)
        steps = 1 + K - np.asarray(blocks)  # [W, rounds]
        steps = float(np.median(steps.max(0) if side_by_side else steps.sum(0)))
        out.update({"qp_ops_per_step": step, "qp_merge_step_ops": merge_ops, "qp_merge_steps_per_round": steps,
                    "qp_ops_per_round": (server_trips - steps) * step + steps * merge_ops})
    return out
