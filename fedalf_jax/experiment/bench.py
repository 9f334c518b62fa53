"""Round throughput (``fedalf bench``): the compiled vmapped round against a sequential
per-client loop of the same math (the same ``client_step`` jitted for one client, called in a
Python loop, then the same ``server_step``), measured in one process. Medians after compile.
Opt-in (``--pytorch PYTHON``): FedAvg's CNN round against a lean PyTorch loop of the same round
(``experiments/torch_round.py``, run by that interpreter in a subprocess).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from ..problem.models import default_conv_impl
from ..sim.client import steps_per_epoch
from ..sim.round import client_phase, client_step, init_state, round_keys, run_rounds, sample_clients, server_step
from .build import build
from .config import Config, ConfigError


def sequential_round(spec, client_j, server_j, sel_j, state, hp, data):
    """One round as a Python loop over the sampled clients (same functions as the compiled round)."""
    m = spec.clients_per_round
    k_sel, ckeys = round_keys(state, m)
    sel = sel_j(k_sel)
    outs = []
    for i in range(m):
        c = sel[i]
        dual = jax.tree_util.tree_map(lambda a: a[c], state.duals) if spec.algorithm.has_client_state else ()
        outs.append(client_j(state.variables, dual, data.train_idx[c], data.train_n[c], ckeys[i], hp,
                             state.round, data.x, data.y))
    stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *outs)
    return server_j(state, sel, data.train_n[sel], stacked, hp)


def make_sequential(spec):
    client_j = jax.jit(lambda *a: client_step(spec, *a))
    server_j = jax.jit(lambda *a: server_step(spec, *a))
    sel_j = jax.jit(lambda k: sample_clients(spec, k))
    return lambda state, hp, data: sequential_round(spec, client_j, server_j, sel_j, state, hp, data)


def bench(cfg: Config, *, repeats: int = 5, sequential: bool = True, depth_widths=(), depth_rounds: int = 12,
          progress=None, partial: dict | None = None, pytorch: str | None = None) -> dict:
    """Round time of ``cfg``'s compiled round (and the sequential loop), the server step's time, and
    with ``depth_widths`` (FedLF/FedALF) the server's sequential depth (:func:`server_depth`). With
    ``pytorch`` (an interpreter that has torch; ``cfg`` a FedAvg CNN round, :func:`check_pytorch_config`),
    the same round as a lean PyTorch loop (:func:`pytorch_round`) and ``fedalf_over_pytorch``, the
    compiled round's time over the PyTorch loop's.

    ``progress``: called with one line per measurement, with its expected duration once the first timed
    round gives one (``fedalf bench`` prints them on stderr). ``partial``: the result dict, filled as
    each figure is measured (a Ctrl-C keeps what is in it)."""
    say = progress or (lambda line: None)
    res = {} if partial is None else partial
    if pytorch is not None:  # before anything slow: one line and no measurement when it cannot run
        check_pytorch_config(cfg)
        torch_version = check_pytorch(pytorch)
    say(f"loading the data and building the {cfg.algorithm} round (model {cfg.model}, {cfg.dataset} data)")
    exp = build(cfg)
    spec, hp, data = exp.spec, exp.hp, exp.data
    steps = cfg.local_epochs * steps_per_epoch(int(data.train_idx.shape[1]), cfg.batch_size)
    res.update({
        "backend": jax.default_backend(),
        "device": str(jax.devices()[0]),
        "algorithm": cfg.algorithm, "model": cfg.model, "dataset": cfg.dataset,
        "client_map": spec.client_map,
        "conv_impl": default_conv_impl() if cfg.conv_impl == "auto" else cfg.conv_impl,
        "clients_per_round": cfg.clients_per_round, "steps_per_client": steps})
    state = init_state(spec, cfg.seed)
    say("compiling the round (once per program; seconds to minutes) ...")
    t0 = time.perf_counter()
    compiled = jax.jit(lambda s, h, d: run_rounds(spec, s, h, d, 1)).lower(state, hp, data).compile()
    compile_s = time.perf_counter() - t0
    res["compile_s"] = round(compile_s, 3)
    box = {"compiled": state, "sequential": state}
    seq = make_sequential(spec) if sequential else None
    variants = {"compiled": lambda s: compiled(s, hp, data)[0]}
    if seq is not None:
        say("compiling the sequential loop (one jitted call per client) ...")
        variants["sequential"] = lambda s: seq(s, hp, data)[0]
        box["sequential"] = jax.block_until_ready(variants["sequential"](state))  # compile it
    times = {k: [] for k in variants}
    for r in range(repeats):  # interleaved, so that both see the same machine load
        for name, fn in variants.items():
            t0 = time.perf_counter()
            box[name] = jax.block_until_ready(fn(box[name]))
            times[name].append(time.perf_counter() - t0)
        if r == 0:
            one = sum(t[0] for t in times.values())
            say(f"timing {repeats} round{'s' if repeats != 1 else ''} of the "
                f"{' and the '.join(f'{k} round' if k == 'compiled' else f'{k} loop' for k in variants)}: "
                f"~{duration(one * (repeats - 1))} more (one of each took {duration(one)})")
    client_steps = cfg.clients_per_round * steps
    res["compiled_s_per_round"] = statistics.median(times["compiled"])
    res["compiled_times"] = times["compiled"]
    res["rounds_per_s"] = 1.0 / res["compiled_s_per_round"]
    res["client_steps_per_s"] = client_steps / res["compiled_s_per_round"]
    if seq is not None:
        res["sequential_s_per_round"] = statistics.median(times["sequential"])
        res["sequential_times"] = times["sequential"]
        res["speedup"] = res["sequential_s_per_round"] / res["compiled_s_per_round"]
    if pytorch is not None:
        guess = (repeats + 1) * 2 * res["compiled_s_per_round"]
        say(f"timing a lean PyTorch {torch_version} loop of the same round ({TORCH_SCRIPT.name} run by {pytorch}): "
            f"a warm-up round and {repeats} timed, ~{duration(guess)} if it takes twice the compiled round")
        data_dir = exp.source if cfg.dataset == "fmnist" and os.path.isdir(exp.source) else None
        res["pytorch"] = pytorch_round(pytorch, pytorch_args(cfg, int(data.train_idx.shape[1]), repeats, data_dir))
        res["pytorch_s_per_round"] = res["pytorch"]["s_per_round"]
        res["fedalf_over_pytorch"] = res["compiled_s_per_round"] / res["pytorch_s_per_round"]
    say(f"timing the server step alone: compiling, then {repeats} calls of "
        f"< {duration(res['compiled_s_per_round'])} each")
    res["server_s"] = server_seconds(spec, state, hp, data, repeats)
    res["server_share"] = res["server_s"] / res["compiled_s_per_round"]
    if depth_widths:
        res["server_depth"] = server_depth(cfg, widths=tuple(depth_widths), rounds=depth_rounds, progress=say,
                                           round_s=res["compiled_s_per_round"])
    res["peak_memory_mb"] = _peak_memory_mb()
    return res


# ---- the PyTorch yardstick (fedalf bench --pytorch PYTHON) --------------------------------------------------

TORCH_SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "torch_round.py"
MAKE_PYTORCH = "make one with: python -m venv X && X/bin/pip install torch numpy, then pass --pytorch X/bin/python"
_CHILDREN: set = set()  # the PyTorch subprocesses running, killed when Ctrl-C abandons a measurement


def check_pytorch_config(cfg: Config) -> None:
    """The PyTorch loop is FedAvg's CNN on Fashion-MNIST-shaped data: a one-line :class:`ConfigError` otherwise."""
    from ..problem.data import DataError, dataset_info
    if cfg.algorithm != "fedavg" or cfg.model != "cnn":
        raise ConfigError(f"--pytorch compares FedAvg's CNN round; this is {cfg.algorithm} with model {cfg.model} "
                          f"(drop --algorithm/--model, or give --algorithm fedavg --model cnn)")
    try:
        info = dataset_info(cfg.dataset, synthetic_like=cfg.synthetic_like)
    except DataError:
        info = None
    if cfg.dataset not in ("fmnist", "synthetic") or info != ((28, 28, 1), 10):
        raise ConfigError(f"--pytorch: the PyTorch loop reads Fashion-MNIST or random data of its shape (28x28x1, "
                          f"10 classes); {cfg.dataset} data is not that")
    if not TORCH_SCRIPT.is_file():
        raise ConfigError(f"--pytorch needs {TORCH_SCRIPT} (in a checkout of the repository, not in an installed "
                          f"package)")


def check_pytorch(python: str) -> str:
    """``python``'s torch version; a one-line :class:`ConfigError` saying how to make one when ``python`` is
    missing, cannot run, or has no torch."""
    exe = shutil.which(python)
    if exe is None:
        raise ConfigError(f"--pytorch {python}: no such interpreter; {MAKE_PYTORCH}")
    try:
        r = subprocess.run([exe, "-c", "import numpy, torch; print(torch.__version__)"], capture_output=True,
                           text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as e:
        raise ConfigError(f"--pytorch {python}: cannot run it ({type(e).__name__}: {e}); {MAKE_PYTORCH}") from None
    if r.returncode != 0 or not r.stdout.strip():
        last = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
        raise ConfigError(f"--pytorch {python}: it cannot import torch ({last}); {MAKE_PYTORCH}")
    return r.stdout.strip().splitlines()[-1]


def pytorch_args(cfg: Config, examples_per_client: int, rounds: int, data_dir: str | None) -> list[str]:
    """experiments/torch_round.py's flags for ``cfg``'s round: its clients, clients per round, examples per
    client (the padded length the compiled round steps through), batch size, epochs, step size and seed;
    ``data_dir`` (Fashion-MNIST's folder) or random data of the same shape."""
    args = ["--clients", str(cfg.clients), "--clients-per-round", str(cfg.clients_per_round),
            "--examples-per-client", str(examples_per_client), "--batch-size", str(cfg.batch_size),
            "--epochs", str(cfg.local_epochs), "--lr", repr(float(cfg.lr)), "--rounds", str(rounds),
            "--seed", str(cfg.seed)]
    return args + (["--data-dir", data_dir] if data_dir else ["--synthetic"])


def pytorch_round(python: str, args: list[str]) -> dict:
    """Run experiments/torch_round.py with ``python`` and ``args``; its JSON line (``s_per_round``, ``times``,
    ``torch``, ``threads``, ...) with ``python`` added. A run that fails: a one-line :class:`ConfigError`.
    A Ctrl-C (the run loop's ``INTERRUPT``) kills it and raises :class:`BenchStopped`."""
    from .loop import INTERRUPT
    cmd = [shutil.which(python) or python, str(TORCH_SCRIPT), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _CHILDREN.add(proc)
    try:
        while True:
            try:
                out, err = proc.communicate(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                if INTERRUPT.requested:
                    raise BenchStopped() from None
    finally:
        _kill(proc)
    if INTERRUPT.requested:  # the Ctrl-C reached the subprocess first
        raise BenchStopped()
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    try:
        res = json.loads(lines[-1])
        float(res["s_per_round"])
    except (IndexError, ValueError, KeyError, TypeError):
        last = (err.strip().splitlines() or out.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        raise ConfigError(f"--pytorch: {TORCH_SCRIPT.name} run by {python} gave no result "
                          f"(exit status {proc.returncode}): {last}") from None
    return {**res, "python": python}


def _kill(proc) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    _CHILDREN.discard(proc)


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


def bench_sweep(cfg: Config, *, widths, repeats: int = 3, progress=None, partial: dict | None = None) -> dict:
    """A vmapped sweep of ``W`` runs (seeds ``seed .. seed+W−1``) against the same ``W`` runs as separate
    single-run programs, one chunk of ``eval_every`` rounds with its evaluation per call, in one process
    (medians). ``speedup`` > 1: the sweep is faster than its runs one after another.

    Every program's first call is an untimed warm-up (the sweep's, and each single run's). Then the
    sweep makes ``repeats`` timed calls, and the single runs, one after another, ``repeats`` timed calls
    each; the sweep's calls are spread among the single runs, so that both see the same machine load.
    A single run's inputs and state are built just before its calls and dropped after them: beside the
    sweep's ``W`` states, at most one single run's lives (not ``W``: issue 14). The separate time of
    repeat ``r`` is the sum of the runs' ``r``-th calls, which compute the same rounds as the sweep's.

    ``progress``: called with one line per width, with its predicted duration (:func:`predict_width_s`,
    from the widths already measured), and the time left once its first calls are timed. ``partial``:
    the result dict, each width's figures added as soon as they are measured."""
    from .loop import Program, default_run_map
    from .sweep import _Group
    say = progress or (lambda line: None)
    length = min(cfg.eval_every, cfg.rounds)
    res = {} if partial is None else partial
    res.update({"backend": jax.default_backend(), "device": str(jax.devices()[0]), "algorithm": cfg.algorithm,
                "model": cfg.model, "dataset": cfg.dataset, "rounds_per_call": length, "widths": {},
                "run_map": default_run_map() if cfg.run_map == "auto" else cfg.run_map})
    measured = []  # (width, wall seconds, compile seconds) of the widths done
    for width in widths:
        w0 = time.perf_counter()
        predicted = predict_width_s(width, measured)
        say(f"sweep of W={width} run{'s' if width != 1 else ''} against {width} separate run"
            f"{'s' if width != 1 else ''}: " + (f"~{duration(predicted)} predicted (from W={measured[-1][0]} "
                                                 f"without its compilation), compiling ..." if predicted is not None
                                                 else "compiling ..."))
        group = _Group([(cfg.replace(seed=cfg.seed + i, out=None), None) for i in range(width)])
        swept = group.inputs(list(range(width)))
        t0 = time.perf_counter()
        f_sweep = Program(group.spec, batched=True, data_axes=group.axes, run_map=group.run_map).compiled(length, *swept)
        compile_sweep = time.perf_counter() - t0
        state, rest = swept[0], swept[1:]
        del swept
        t0 = time.perf_counter()
        state = jax.block_until_ready(f_sweep(state, *rest)[0])  # warm-up (its state buffers are donated)
        t_call = time.perf_counter() - t0
        one, f_one, compile_one = Program(group.spec), None, 0.0
        sweep_before = [r * width // repeats for r in range(repeats)]  # the single run the sweep's r-th call precedes
        t_sweep, t_sep = [], [0.0] * repeats
        for i in range(width):
            ins = group.single_inputs(i)
            if f_one is None:
                t0 = time.perf_counter()
                f_one = one.compiled(length, *ins)
                compile_one = time.perf_counter() - t0
            t0 = time.perf_counter()
            s = jax.block_until_ready(f_one(ins[0], *ins[1:])[0])  # this run's warm-up
            if i == 0:  # the sweep's and a single run's calls are timed: the rest of this width
                t_one = time.perf_counter() - t0
                say(f"  W={width}: timing {repeats} call{'s' if repeats != 1 else ''} of the sweep and of each run: "
                    f"~{duration(repeats * t_call + (width * (repeats + 1) - 1) * t_one)} more")
            for r in range(repeats):
                if sweep_before[r] == i:
                    t0 = time.perf_counter()
                    state = jax.block_until_ready(f_sweep(state, *rest)[0])
                    t_sweep.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                s = jax.block_until_ready(f_one(s, *ins[1:])[0])
                t_sep[r] += time.perf_counter() - t0
            del ins, s  # this single run is done: only its timings are kept
        del state, rest
        sw, sep = statistics.median(t_sweep), statistics.median(t_sep)
        res["widths"][str(width)] = {
            "sweep_s_per_call": sw, "separate_s_per_call": sep, "speedup": sep / sw,
            "sweep_s_per_run_round": sw / (width * length), "separate_s_per_run_round": sep / (width * length),
            "compile_sweep_s": round(compile_sweep, 3), "compile_single_s": round(compile_one, 3),
            "sweep_times": t_sweep, "separate_times": t_sep}
        measured.append((width, time.perf_counter() - w0, compile_sweep + compile_one))
    res["peak_memory_mb"] = _peak_memory_mb()
    return res


def predict_width_s(width: int, measured) -> float | None:
    """Seconds the sweep-width measurement of ``width`` will take, from the last width measured:
    ``measured`` holds ``(width, wall seconds, compile seconds)``. Its compile-free time (the timed and
    warm-up calls: the sweep's and its runs', each ∝ the width) scales with the width; the compilation
    (about the same for every width) is added once, not scaled: a W = 1 that took 61 s of which 60 s
    compiling predicts 68 s for W = 8, not 488 s. ``None`` before any width is measured."""
    if not measured:
        return None
    w, wall, compile_s = measured[-1]
    compile_s = min(max(compile_s, 0.0), wall)
    return compile_s + (wall - compile_s) * width / w


# ---- Ctrl-C: stop now, keep what was measured -------------------------------------------------------------

class BenchStopped(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, where the run loop's :data:`~fedalf_jax.experiment.loop.INTERRUPT` catches it)
    stopped a measurement. ``records``: a suite's records so far; ``worker``: the thread still computing
    the abandoned measurement (the command line leaves with ``os._exit``, never tearing the interpreter
    down under a running XLA computation)."""

    def __init__(self, records=None, worker=None):
        super().__init__("fedalf bench: interrupted")
        self.records, self.worker = records, worker


def say(line: str) -> None:
    """A progress line of ``fedalf bench`` (stderr, so that stdout keeps only the table)."""
    print(f"fedalf bench: {line}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def ctrl_c_stops():
    """While active, Ctrl-C sets the run loop's ``INTERRUPT.requested`` (which :func:`stoppable` polls)
    with bench's own message; a second Ctrl-C leaves at once (``os._exit(130)`` on the command line).
    The loop's :data:`INTERRUPT` installs and restores the handlers (SIGTERM too, where it does)."""
    from .loop import INTERRUPT
    with INTERRUPT.active():
        if threading.current_thread() is threading.main_thread():
            def handle(signum, frame):
                if not INTERRUPT.requested:
                    INTERRUPT.requested = True
                    print("\nfedalf bench: Ctrl-C: stopping the measurement in flight; what was measured follows "
                          "(Ctrl-C again to leave now)", file=sys.stderr, flush=True)
                    return
                if INTERRUPT.hard_exit:
                    import os
                    os._exit(130)
                raise KeyboardInterrupt
            signal.signal(signal.SIGINT, handle)
        yield


def stoppable(fn, *args, **kw):
    """``fn(*args, **kw)`` on a worker thread while this thread waits in short slices (the run loop's
    ``_interruptible`` pattern), raising :class:`BenchStopped` as soon as a Ctrl-C is requested, without
    waiting for the computation in flight (which may take minutes: a measurement is only a timing)."""
    from .loop import INTERRUPT
    box: dict = {}

    def work():
        try:
            box["out"] = fn(*args, **kw)
        except BaseException as e:  # noqa: BLE001 -- re-raised in the caller
            box["err"] = e

    t = threading.Thread(target=work, daemon=True, name="fedalf-bench")
    t.start()
    while t.is_alive():
        if INTERRUPT.requested:
            for proc in list(_CHILDREN):  # a PyTorch loop in flight ends with the measurement
                _kill(proc)
            raise BenchStopped(worker=t)
        t.join(0.1)
    if "err" in box:
        raise box["err"]
    return box["out"]


# ---- suites: a fixed list of measurements, one JSON each, written as soon as it is measured ---------------

# Each suite: the round-time measurements (model, algorithm; ``bench``) and the sweep-width scaling (one
# ``bench_sweep`` call per width, in increasing order, stopping at the first width that runs out of memory).
# ``base`` options apply to every measurement; the options a user gives (``overrides``) replace them.
# The CNN first: a step cut short by its time limit keeps the measurement docs/benchmarks.md lacks most.
# ``peak_memory_mb`` is the process's peak so far (the measurements share one process).
SUITES = {
    "gpu": dict(base={}, rounds=(("cnn", "fedavg"), ("cnn", "fedalf"), ("mlp", "fedavg"), ("mlp", "fedalf")),
                round_repeats=10, sweep={"model": "cnn", "algorithm": "fedalf", "eval_every": 5},
                widths=(1, 8, 32, 64), sweep_repeats=2),
    # the same code path in seconds on a CPU (tests, a dry run before a GPU session)
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
    from .config import ConfigError
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
                rec["note"] = "interrupted (Ctrl-C)"
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
    if cfg.algorithm not in ("fedlf", "fedalf"):
        return {}
    from ..sim.qp import resolve_method
    from .loop import Program, default_run_map, to_host
    from .sweep import _Group
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


# ---- the printed table (the JSON keeps every figure as measured) ----------------------------------------

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


def _memory(mb: float, backend: str) -> tuple[str, str]:
    text = f"{sig(mb / 1024)} GiB" if mb >= 1024 else f"{sig(mb)} MiB"
    where = ("the process's peak resident host memory" if backend == "cpu"
             else f"the {backend} device's peak memory in use")
    return text, where


def _rows(rows: list[tuple[str, str, str]]) -> list[str]:
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    return [f"  {a:<{w0}}  {b:>{w1}}  {c}".rstrip() for a, b, c in rows]


# what the server step computes, per algorithm (the rest: a weighted mean of the uploads and the update)
_SERVER_WORK = {"fedlf": "the fair direction's per-layer Grams and QPs, and the model update",
                "fedalf": "the fair direction's per-layer Grams and QPs, and the model update",
                "qfedavg": "qFedAvg's weighted update", "fedadmm": "the mean of the uploads and the model update"}


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
    if "sequential_s_per_round" in res:
        rows.append(("sequential loop", duration(res["sequential_s_per_round"]) + "/round",
                     "the same math, one jitted call per client, then the server step"))
        rows.append(("speedup", f"{sig(res['speedup'])}×", "sequential loop / compiled round"))
    work = _SERVER_WORK.get(algo, "the weighted mean of the uploads and the model update")
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
