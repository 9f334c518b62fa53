"""The tables ``fedalf bench`` prints (:func:`format_bench`, :func:`format_bench_sweep`): times with units
to 3 significant digits and what each line measures; the JSON keeps every figure as measured."""

from __future__ import annotations

import resource

import jax
import numpy as np

from ..algorithms import declared


def sig(v, digits: int = 3) -> str:
    """``v`` to ``digits`` significant digits, never in exponent form: 0.0123, 81.3, 976, 1,230."""
    if not isinstance(v, (int, float)) or not np.isfinite(v):
        return str(v)
    if v == 0:
        return "0"
    r = float(f"{v:.{digits}g}")
    places = digits - 1 - int(np.floor(np.log10(abs(r))))
    return f"{r:,.{max(places, 0)}f}"


def duration(s: float) -> str:
    """Seconds with a unit: ``1.23 s``, ``45.6 ms``, ``789 µs``."""
    if s >= 1:
        return f"{sig(s)} s"
    if s >= 1e-3:
        return f"{sig(s * 1e3)} ms"
    return f"{sig(s * 1e6)} µs"


def _peak_memory_mb() -> float:
    """The first device's peak memory in use (MiB), or on CPU the process's peak resident host memory."""
    dev = jax.devices()[0]
    stats = dev.memory_stats() if hasattr(dev, "memory_stats") else None
    if stats and "peak_bytes_in_use" in stats:
        return stats["peak_bytes_in_use"] / 2 ** 20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # host RSS on CPU (KiB on Linux)


def _memory(mb: float, backend: str) -> tuple[str, str]:
    text = f"{sig(mb / 1024)} GiB" if mb >= 1024 else f"{sig(mb)} MiB"
    where = ("the process's peak resident host memory" if backend == "cpu"
             else f"the {backend} device's peak memory in use")
    return text, where


def _rows(rows: list[tuple[str, str, str]]) -> list[str]:
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    return [f"  {a:<{w0}}  {b:>{w1}}  {c}".rstrip() for a, b, c in rows]


def format_bench(res: dict) -> str:
    """The table ``fedalf bench`` prints for :func:`bench`'s result: times with units to 3 significant
    digits, what each line measures, and only the fields that matter for the model (the convolution only
    for a CNN)."""
    algo, model = res["algorithm"], res["model"]
    how = f"clients mapped with {res['client_map']}"
    if model.startswith("cnn"):
        how += f", convolution {res['conv_impl']}"
    head = (f"fedalf bench: {algo}, model {model}, {res['dataset']} data, on {res['backend']} ({res['device']})\n"
            f"  {res['clients_per_round']} clients per round, {res['steps_per_client']} local SGD steps each; {how}")
    rows = []
    if "compiled_s_per_round" in res:  # a result cut short by Ctrl-C lacks the figures not yet measured
        rows.append(("compiled round", duration(res["compiled_s_per_round"]) + "/round",
                     f"{sig(res['rounds_per_s'])} rounds/s, {sig(res['client_steps_per_s'])} client steps/s"))
    if "over_against" in res:
        rows.append((f"{res['against']} round", duration(res["against_s_per_round"]) + "/round",
                     "its compiled round on the same config, timed interleaved with this one"))
        rows.append((f"{algo} / {res['against']}", f"{sig(res['over_against'])}×",
                     f"this round's time over {res['against']}'s (medians of the same repeats)"))
    if "sequential_s_per_round" in res:
        rows.append(("sequential loop", duration(res["sequential_s_per_round"]) + "/round",
                     "the same math, one jitted call per client, then the server step"))
        rows.append(("speedup", f"{sig(res['speedup'])}×", "sequential loop / compiled round"))
    work = declared(algo).server_work  # what its server step computes, as it declares
    if "pytorch_s_per_round" in res:
        pt = res["pytorch"]
        rows.append(("PyTorch loop", duration(res["pytorch_s_per_round"]) + "/round",
                     f"the same round as a lean PyTorch {pt.get('torch', '?')} loop, {pt.get('threads', '?')} "
                     f"threads (experiments/torch_round.py)"))
        rows.append(("fedalf / PyTorch", f"{sig(res['fedalf_over_pytorch'])}×",
                     "compiled round / PyTorch loop (< 1: fedalf is faster)"))
    if "server_s" in res:
        rows.append(("server step", duration(res["server_s"]) + "/round",
                     f"server share {sig(100 * res['server_share'])}% of the compiled round: {work}, timed alone"))
    if "compile_s" in res:
        rows.append(("compile", duration(res["compile_s"]),
                     "once per program (a load when the compilation cache has it)"))
    if "peak_memory_mb" in res:
        mem, where = _memory(res["peak_memory_mb"], res["backend"])
        rows.append(("peak memory", mem, where))
    depth = res.get("server_depth") or {}
    for w, d in (depth.get("widths") or {}).items():
        rows.append((f"server depth, W={w}", f"{sig(d['trips_per_round'])} trips/round",
                     f"the server's sequential loop trips per round, {w} run{'s' if w != '1' else ''} in one program "
                     f"(median of {depth['rounds']} rounds, max {d['trips_per_round_max']}; "
                     f"{sig(d['trips_per_run_round'])} per run); QP solver {depth['qp_method']}, "
                     f"runs {d['runs_share']}"))
        if "all_trips_per_round" in d:
            rows.append((f"all loops, W={w}", f"{sig(d['all_trips_per_round'])} trips/round",
                         f"every loop trip of a program round from the compiled programs: the round's scans "
                         f"{sig(d['round_static_trips'])}, the server's trips "
                         f"× {1 + d['server_inner_trips_per_trip']} "
                         f"(loops inside a QP step), evaluation {d['eval_trips']} every {d['eval_every']} rounds, "
                         f"train loss {d['train_loss_trips']} every {d['train_loss_every']}"))
        if "qp_ops_per_round" in d:
            rows.append((f"QP ops, W={w}", f"{sig(d['qp_ops_per_round'])} ops/round",
                         f"XLA ops (≈ kernels) of the compiled QP: {d['qp_ops_per_step']} per active-set step "
                         f"(loops in it multiplied out), {d['qp_merge_step_ops']} per merge step"))
    return "\n".join([head] + (_rows(rows) if rows else []))


def format_bench_sweep(res: dict) -> str:
    """The table ``fedalf bench --sweep-width`` prints for :func:`bench_sweep`'s result."""
    n = res["rounds_per_call"]
    head = (f"fedalf bench --sweep-width: {res['algorithm']}, model {res['model']}, {res['dataset']} data; a call "
            f"is {n} round{'s' if n != 1 else ''} and an evaluation; the sweep's runs mapped with {res['run_map']}; "
            f"{res['backend']} ({res['device']})")
    rows = [("W runs", "sweep", "W separate runs", "speedup", "sweep", "separate", "compile sweep", "compile one run"),
            ("", "per call", "per call", "", "per run·round", "per run·round", "", "")]
    for w, d in res["widths"].items():
        rows.append((w, duration(d["sweep_s_per_call"]), duration(d["separate_s_per_call"]), f"{sig(d['speedup'])}×",
                     duration(d["sweep_s_per_run_round"]), duration(d["separate_s_per_run_round"]),
                     duration(d["compile_sweep_s"]), duration(d["compile_single_s"])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [head] + ["  " + "  ".join(c.rjust(widths[i]) for i, c in enumerate(r)).rstrip() for r in rows]
    mem, where = _memory(res["peak_memory_mb"] if "peak_memory_mb" in res else _peak_memory_mb(), res["backend"])
    lines.append(f"  speedup: the W separate runs' time / the sweep's (> 1: the sweep is faster); peak memory "
                 f"{mem} ({where})")
    return "\n".join(lines)
