"""Round throughput (``fedalf bench``): the compiled vmapped round against a sequential
per-client loop of the same math (the same ``client_step`` jitted for one client, called in a
Python loop, then the same ``server_step``), measured in one process. Medians after compile.
"""

from __future__ import annotations

import resource
import statistics
import time

import jax
import jax.numpy as jnp

from ..problem.models import default_conv_impl
from ..sim.client import steps_per_epoch
from ..sim.round import client_phase, client_step, init_state, round_keys, run_rounds, sample_clients, server_step
from .build import build
from .config import Config


def sequential_round(spec, client_j, server_j, sel_j, state, hp, data):
    """One round as a Python loop over the sampled clients (same functions as the compiled round)."""
    m = spec.clients_per_round
    k_sel, ckeys = round_keys(state, m)
    sel = sel_j(k_sel)
    outs = []
    for i in range(m):
        c = sel[i]
        dual = jax.tree_util.tree_map(lambda a: a[c], state.duals) if spec.algorithm.has_dual else ()
        outs.append(client_j(state.variables, dual, data.train_idx[c], data.train_n[c], ckeys[i], hp,
                             state.round, data.x, data.y))
    stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *outs)
    return server_j(state, sel, data.train_n[sel], stacked, hp)


def make_sequential(spec):
    client_j = jax.jit(lambda *a: client_step(spec, *a))
    server_j = jax.jit(lambda *a: server_step(spec, *a))
    sel_j = jax.jit(lambda k: sample_clients(spec, k))
    return lambda state, hp, data: sequential_round(spec, client_j, server_j, sel_j, state, hp, data)


def bench(cfg: Config, *, repeats: int = 5, sequential: bool = True) -> dict:
    exp = build(cfg)
    spec, hp, data = exp.spec, exp.hp, exp.data
    state = init_state(spec, cfg.seed)
    t0 = time.perf_counter()
    compiled = jax.jit(lambda s, h, d: run_rounds(spec, s, h, d, 1)).lower(state, hp, data).compile()
    compile_s = time.perf_counter() - t0
    box = {"compiled": state, "sequential": state}
    seq = make_sequential(spec) if sequential else None
    variants = {"compiled": lambda s: compiled(s, hp, data)[0]}
    if seq is not None:
        variants["sequential"] = lambda s: seq(s, hp, data)[0]
        box["sequential"] = jax.block_until_ready(variants["sequential"](state))  # compile it
    times = {k: [] for k in variants}
    for _ in range(repeats):  # interleaved, so that both see the same machine load
        for name, fn in variants.items():
            t0 = time.perf_counter()
            box[name] = jax.block_until_ready(fn(box[name]))
            times[name].append(time.perf_counter() - t0)
    steps = cfg.local_epochs * steps_per_epoch(int(data.train_idx.shape[1]), cfg.batch_size)
    client_steps = cfg.clients_per_round * steps
    res = {
        "backend": jax.default_backend(),
        "device": str(jax.devices()[0]),
        "algorithm": cfg.algorithm, "model": cfg.model, "dataset": cfg.dataset,
        "client_map": spec.client_map,
        "conv_impl": default_conv_impl() if cfg.conv_impl == "auto" else cfg.conv_impl,
        "clients_per_round": cfg.clients_per_round, "steps_per_client": steps,
        "compile_s": round(compile_s, 3),
        "compiled_s_per_round": statistics.median(times["compiled"]),
        "compiled_times": times["compiled"],
    }
    res["rounds_per_s"] = 1.0 / res["compiled_s_per_round"]
    res["client_steps_per_s"] = client_steps / res["compiled_s_per_round"]
    if seq is not None:
        res["sequential_s_per_round"] = statistics.median(times["sequential"])
        res["sequential_times"] = times["sequential"]
        res["speedup"] = res["sequential_s_per_round"] / res["compiled_s_per_round"]
    res["server_s"] = server_seconds(spec, state, hp, data, repeats)
    res["server_share"] = res["server_s"] / res["compiled_s_per_round"]
    res["peak_memory_mb"] = _peak_memory_mb()
    return res


def server_seconds(spec, state, hp, data, repeats: int) -> float:
    """Median time of the server step alone (Grams, QPs, update) on one round's client outputs."""
    sel, n, outs = jax.jit(lambda s: client_phase(spec, s, hp, data))(state)
    server_j = jax.jit(lambda *a: server_step(spec, *a))
    args = (state, sel, n, outs, hp)
    jax.block_until_ready(server_j(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(server_j(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _peak_memory_mb() -> float:
    dev = jax.devices()[0]
    stats = dev.memory_stats() if hasattr(dev, "memory_stats") else None
    if stats and "peak_bytes_in_use" in stats:
        return stats["peak_bytes_in_use"] / 2 ** 20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # host RSS on CPU (KiB on Linux)


def bench_sweep(cfg: Config, *, widths, repeats: int = 3) -> dict:
    """A vmapped sweep of ``W`` runs (seeds ``seed .. seed+W−1``) against the same ``W`` runs as separate
    single-run programs, one chunk of ``eval_every`` rounds with its evaluation per call, timed
    interleaved in one process (medians). ``speedup`` > 1: the sweep is faster than its runs one after
    another."""
    from .loop import Program, default_run_map
    from .sweep import _Group
    length = min(cfg.eval_every, cfg.rounds)
    res = {"backend": jax.default_backend(), "device": str(jax.devices()[0]), "algorithm": cfg.algorithm,
           "model": cfg.model, "dataset": cfg.dataset, "rounds_per_call": length, "widths": {},
           "run_map": default_run_map() if cfg.run_map == "auto" else cfg.run_map}
    for width in widths:
        group = _Group([(cfg.replace(seed=cfg.seed + i, out=None), None) for i in range(width)])
        idx = list(range(width))
        swept = group.inputs(idx)
        singles = [group.single_inputs(i) for i in idx]
        t0 = time.perf_counter()
        f_sweep = Program(group.spec, batched=True, data_axes=group.axes, run_map=group.run_map).compiled(length, *swept)
        compile_sweep = time.perf_counter() - t0
        t0 = time.perf_counter()
        one = Program(group.spec)
        f_one = [one.compiled(length, *ins) for ins in singles]
        compile_one = time.perf_counter() - t0
        box = {"sweep": swept[0], "separate": [ins[0] for ins in singles]}
        t_sweep, t_sep = [], []
        for _ in range(repeats + 1):  # the first of each is a warm-up
            t0 = time.perf_counter()
            box["sweep"] = jax.block_until_ready(f_sweep(box["sweep"], *swept[1:])[0])
            t_sweep.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            for i, ins in enumerate(singles):
                box["separate"][i] = jax.block_until_ready(f_one[i](box["separate"][i], *ins[1:])[0])
            t_sep.append(time.perf_counter() - t0)
        sw, sep = statistics.median(t_sweep[1:]), statistics.median(t_sep[1:])
        res["widths"][str(width)] = {
            "sweep_s_per_call": sw, "separate_s_per_call": sep, "speedup": sep / sw,
            "sweep_s_per_run_round": sw / (width * length), "separate_s_per_run_round": sep / (width * length),
            "compile_sweep_s": round(compile_sweep, 3), "compile_single_s": round(compile_one, 3),
            "sweep_times": t_sweep[1:], "separate_times": t_sep[1:]}
    res["peak_memory_mb"] = _peak_memory_mb()
    return res
