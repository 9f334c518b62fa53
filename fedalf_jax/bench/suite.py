"""``fedalf bench --suite NAME``: a fixed list of measurements (:data:`SUITES`), each one's JSON and table
line written as soon as it is measured, within a time budget, stopping the sweep widths at the first that
runs out of memory."""

from __future__ import annotations

import time

import jax

from ..config.config import Config
from ..runtime.interrupt import signal_name
from .stop import BenchStopped, stoppable
from .table import duration
from .timing import bench, bench_sweep, predict_width_s

# Each suite: the round-time measurements (model, algorithm; ``bench``) and the sweep-width scaling (one
# ``bench_sweep`` call per width, in increasing order, stopping at the first width that runs out of memory).
# ``base`` options apply to every measurement; the options a user gives (``overrides``) replace them.
# The CNN first: a step cut short by its time limit keeps the measurement docs/lab/benchmarks.md lacks most.
# ``peak_memory_mb`` is the process's peak so far (the measurements share one process).
SUITES = {
    "gpu": dict(base={}, rounds=(("cnn", "fedavg"), ("cnn", "fedalf"), ("mlp", "fedavg"), ("mlp", "fedalf")),
                round_repeats=10, sweep={"model": "cnn", "algorithm": "fedalf", "eval_every": 5},
                widths=(1, 8, 32, 64), sweep_repeats=2),
    # the same code path in minutes on a CPU (tests, a dry run before a GPU session; README, GPU)
    "smoke": dict(base={"dataset": "synthetic", "clients": 6, "clients_per_round": 3, "synthetic_train": 300,
                        "synthetic_test": 60, "eval_every": 1, "rounds": 2},
                  rounds=(("mlp", "fedavg"), ("mlp", "fedalf")), round_repeats=2,
                  sweep={"model": "mlp", "algorithm": "fedavg"}, widths=(1, 2), sweep_repeats=1),
}
SUITE_PARTS = ("round", "sweep")
SUITE_HEADER = (f"{'measurement':<28} {'backend':>7} {'s/round':>10} {'baseline':>10} {'speedup':>8} "
                f"{'compile_s':>9} {'peak_mb':>9} {'wall_s':>7}  note")


def suite_plan(name: str, overrides: dict | None = None, *, parts=SUITE_PARTS, widths=None, repeats=None,
               sequential: bool = True) -> list[dict]:
    """The measurements of suite ``name``: ``{"name", "kind" ("round" | "sweep"), "config", "repeats",
    ...}``, configs validated up front. ``overrides`` (the options a user gave) replace the suite's; a
    given ``model`` or ``algorithm`` keeps only the measurements of that model or algorithm."""
    from ..config.config import ConfigError
    if name not in SUITES:
        raise ConfigError(f"unknown suite {name!r}; choose one of {', '.join(SUITES)}")
    s, over = SUITES[name], dict(overrides or {})
    keep = {k: over.pop(k) for k in ("model", "algorithm") if k in over}
    over.pop("out", None)
    wanted = lambda m, a: keep.get("model", m) == m and keep.get("algorithm", a) == a  # noqa: E731
    plan = []
    if "round" in parts:
        for m, a in s["rounds"]:
            if wanted(m, a):
                cfg = Config.from_dict({**s["base"], "model": m, "algorithm": a, **over})
                plan.append({"name": f"round_{m}_{a}", "kind": "round", "config": cfg,
                             "repeats": repeats or s["round_repeats"], "sequential": sequential})
    if "sweep" in parts and wanted(s["sweep"]["model"], s["sweep"]["algorithm"]):
        cfg = Config.from_dict({**s["base"], **s["sweep"], **over})
        for w in widths or s["widths"]:
            plan.append({"name": f"sweep_{cfg.model}_{cfg.algorithm}_w{w}", "kind": "sweep", "config": cfg,
                         "width": int(w), "repeats": repeats or s["sweep_repeats"]})
    if not plan:  # a typo (--model nosuch) or a model outside the suite: an error, never "0 measurements"
        given = " ".join(f"--{k} {v}" for k, v in keep.items())
        has = [f"round {m} {a}" for m, a in s["rounds"] if "round" in parts] + \
              ([f"sweep {s['sweep']['model']} {s['sweep']['algorithm']}"] if "sweep" in parts else [])
        part = "" if tuple(parts) == SUITE_PARTS else f" with --part {' '.join(parts)}"
        raise ConfigError(f"{given} selects none of suite {name}'s measurements ({', '.join(has)}{part}): nothing "
                          f"would be measured; give one of those models and algorithms, or no --model/--algorithm")
    return plan


def is_out_of_memory(e: BaseException) -> bool:
    """An allocation failure (XLA's ``RESOURCE_EXHAUSTED``, a host ``MemoryError``)."""
    text = f"{type(e).__name__}: {e}"
    return isinstance(e, MemoryError) or "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower()


def suite_line(rec: dict) -> str:
    """One table line of a suite record (seconds per round: the compiled round against the sequential
    loop; a sweep: per run and round, the sweep against its runs one after another)."""
    res = rec.get("result") or {}
    if rec["kind"] == "round":
        t, base, speed = res.get("compiled_s_per_round"), res.get("sequential_s_per_round"), res.get("speedup")
        comp = res.get("compile_s")
    else:
        wres = (res.get("widths") or {}).get(str(rec["width"]), {})
        t, base, speed = wres.get("sweep_s_per_run_round"), wres.get("separate_s_per_run_round"), wres.get("speedup")
        comp = wres.get("compile_sweep_s")
    def f(v, width, digits, unit=""):
        return (f"{v:.{digits}f}{unit}" if isinstance(v, (int, float)) else "-").rjust(width)
    return (f"{rec['name']:<28} {res.get('backend', '-'):>7} {f(t, 10, 5)} {f(base, 10, 5)} {f(speed, 8, 2, 'x')} "
            f"{f(comp, 9, 1)} {f(res.get('peak_memory_mb'), 9, 0)} {f(rec.get('wall_s'), 7, 1)}  "
            f"{rec.get('note', '')}").rstrip()


def _write_json(path, obj) -> None:
    """Whole or not at all: a kill mid-write leaves the previous file (or none), never half a JSON."""
    import json
    import os
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2) + "\n")
    os.replace(tmp, path)


def bench_suite(name: str, out, overrides: dict | None = None, *, parts=SUITE_PARTS, widths=None, repeats=None,
                sequential: bool = True, budget_s: float | None = None, echo=print, progress=None) -> list[dict]:
    """Run suite ``name`` (:data:`SUITES`): each measurement's JSON lands in ``out`` (``<name>.json``) and
    its table line goes to ``echo`` as soon as it is measured. The sweep widths run one ``bench_sweep``
    call each, smallest first; the first that runs out of memory is recorded (``"note": "out of
    memory"``) and ends the widths. With ``budget_s``, a measurement predicted not to finish within
    what is left of it (from the ones already measured) is recorded as skipped instead of started.
    ``progress``: one line per measurement before it starts, with its predicted seconds. Ctrl-C (under
    :func:`ctrl_c_stops`) records the measurement in flight as interrupted and raises
    :class:`BenchStopped` with the records. Returns the records."""
    import gc
    import platform
    from pathlib import Path
    plan = suite_plan(name, overrides, parts=parts, widths=widths, repeats=repeats, sequential=sequential)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    echo(SUITE_HEADER)
    with open(out / "table.txt", "a") as f:
        f.write(SUITE_HEADER + "\n")
    records, stop_sweep, fits = [], None, None
    walls = {"round": [], "sweep": []}  # (width or 1, wall seconds) of the measured ones
    say = progress or (lambda line: None)
    for k, item in enumerate(plan):
        cfg = item["config"]
        rec = {"suite": name, "name": item["name"], "kind": item["kind"], "repeats": item["repeats"],
               "jax": jax.__version__, "python": platform.python_version(), "config": cfg.to_dict()}
        if item["kind"] == "sweep":
            rec["width"] = item["width"]
        predicted = _predict(item, walls[item["kind"]])
        left = None if budget_s is None else budget_s - (time.perf_counter() - start)
        if stop_sweep and item["kind"] == "sweep":
            rec["note"] = f"not run: {stop_sweep}"
        elif left is not None and predicted is not None and predicted > left:
            rec["note"] = f"skipped: predicted {predicted:.0f} s, {max(left, 0):.0f} s of the budget left"
            if item["kind"] == "sweep":
                stop_sweep = f"width {item['width']} was skipped (budget)"
        else:
            say(f"[{k + 1}/{len(plan)}] {item['name']}: " + (f"~{duration(predicted)} predicted" if predicted is not None
                                                             else "compiling, then timing ..."))
            t0 = time.perf_counter()
            try:
                if item["kind"] == "round":
                    rec["result"] = stoppable(bench, cfg, repeats=item["repeats"], sequential=item["sequential"])
                else:
                    rec["result"] = stoppable(bench_sweep, cfg, widths=[item["width"]], repeats=item["repeats"])
                    fits = item["width"]
            except BenchStopped as e:  # Ctrl-C: this measurement is recorded as interrupted, the rest not at all
                rec["wall_s"] = time.perf_counter() - t0
                rec["note"] = f"interrupted ({signal_name(e.signum)})"
                _write_json(out / f"{item['name']}.json", rec)
                echo(suite_line(rec))
                with open(out / "table.txt", "a") as f:
                    f.write(suite_line(rec) + "\n")
                records.append(rec)
                e.records = records
                raise
            except Exception as e:  # noqa: BLE001 -- only running out of memory is a result; the rest propagates
                if not is_out_of_memory(e):
                    raise
                rec["note"] = "out of memory"
                rec["error"] = (str(e).strip().splitlines() or [type(e).__name__])[0][:500]
                if item["kind"] == "sweep":
                    rec["largest_width_that_fits"] = fits
                    stop_sweep = f"width {item['width']} ran out of memory"
            rec["wall_s"] = time.perf_counter() - t0
            if "result" in rec:
                walls[item["kind"]].append((item.get("width", 1), rec["wall_s"], _compile_s(rec)))
            gc.collect()  # the failed or finished measurement's device buffers go before the next one
        _write_json(out / f"{item['name']}.json", rec)
        line = suite_line(rec)
        echo(line)
        with open(out / "table.txt", "a") as f:
            f.write(line + "\n")
        records.append(rec)
    return records


def _predict(item: dict, measured: list) -> float | None:
    """Seconds a measurement will take, from the measured ones of its kind (``(width, wall, compile)``):
    a round, the longest of them; a sweep width, :func:`predict_width_s` (the last width's compile-free
    time scaled by the width, plus its compilation once)."""
    if not measured:
        return None
    if item["kind"] == "round":
        return max(w for _, w, _ in measured)
    return predict_width_s(item["width"], measured)


def _compile_s(rec: dict) -> float:
    """The compilation seconds of a suite record (a sweep width: the sweep's and the single run's)."""
    res = rec.get("result") or {}
    if rec["kind"] == "round":
        return float(res.get("compile_s") or 0.0)
    wres = (res.get("widths") or {}).get(str(rec["width"]), {})
    return float(wres.get("compile_sweep_s") or 0.0) + float(wres.get("compile_single_s") or 0.0)

