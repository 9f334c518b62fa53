"""Round throughput (``fedalf bench``): the compiled vmapped round against a sequential
per-client loop of the same math (the same ``client_step`` jitted for one client, called in a
Python loop, then the same ``server_step``), measured in one process. Medians after compile. A
vmapped sweep of W runs against the same runs one after another (``--sweep-width``: :func:`bench_sweep`).
Opt-in (``--pytorch PYTHON``): FedAvg's CNN round against a lean PyTorch loop of the same round
(``experiments/torch_round.py``, run by that interpreter in a subprocess, one round of it after each
compiled round).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from ..runner.build import build
from ..config.config import Config, ConfigError
from ..runtime.interrupt import INTERRUPT, SIGNALS
from ..problem.models import default_conv_impl
from ..sim.client import steps_per_epoch
from ..sim.round import client_phase, client_step, init_state, round_keys, run_rounds, sample_clients, server_step
from .depth import server_depth
from .stop import _CHILDREN, BenchStopped, _kill
from .table import _peak_memory_mb, duration


def sequential_round(spec, client_j, server_j, sel_j, state, hp, data):
    """One round as a Python loop over the sampled clients (same functions as the compiled round)."""
    m = spec.clients_per_round
    k_sel, ckeys = round_keys(state, m)
    sel = sel_j(k_sel)
    outs = []
    for i in range(m):
        c = sel[i]
        cstate = jax.tree_util.tree_map(lambda a: a[c], state.client_states) if spec.algorithm.has_client_state else ()
        outs.append(client_j(state.variables, cstate, data.train_idx[c], data.train_n[c], ckeys[i], hp,
                             state.round, data.x, data.y))
    stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *outs)
    return server_j(state, sel, data.train_n[sel], stacked, hp)


def make_sequential(spec):
    client_j = jax.jit(lambda *a: client_step(spec, *a))
    server_j = jax.jit(lambda *a: server_step(spec, *a))
    sel_j = jax.jit(lambda k: sample_clients(spec, k))
    return lambda state, hp, data: sequential_round(spec, client_j, server_j, sel_j, state, hp, data)


def _compiled_round(spec, state, hp, data):
    """One round of ``spec`` compiled ahead of time for these arguments' shapes: ``(state, hp, data) ->
    (state, metrics)``. The state is donated, as the run loop donates it (its rows are updated in place;
    undonated, a fair server's H x D history rows were copied every round): pass it a copy (:func:`_fresh`)
    and thread the returned state."""
    return jax.jit(lambda s, h, d: run_rounds(spec, s, h, d, 1), donate_argnums=(0,)).lower(state, hp, data).compile()


def _fresh(state):
    """A copy of ``state`` to donate (the caller's stays valid)."""
    return jax.tree_util.tree_map(jnp.copy, state)


_VARIANT_NAMES = {"compiled": "compiled round", "sequential": "sequential loop", "against": "{against} round",
                  "pytorch": "PyTorch loop"}


def _time_rounds(res: dict, variants: dict, box: dict, repeats: int, client_steps: int, against, loop, say) -> None:
    """``repeats`` rounds of each variant, interleaved (one of each per repeat, so that all see the same
    machine load; ``variants["pytorch"]``: a round of ``loop``, a :class:`PytorchLoop`), with their medians
    and ratios in ``res`` after every repeat (a Ctrl-C keeps the whole repeats timed so far)."""
    times = {k: [] for k in variants}

    def medians():
        res["compiled_s_per_round"] = statistics.median(times["compiled"])
        res["compiled_times"] = list(times["compiled"])
        res["rounds_per_s"] = 1.0 / res["compiled_s_per_round"]
        res["client_steps_per_s"] = client_steps / res["compiled_s_per_round"]
        if against is not None:
            res["against"] = against
            res["against_s_per_round"] = statistics.median(times["against"])
            res["against_times"] = list(times["against"])
            res["over_against"] = res["compiled_s_per_round"] / res["against_s_per_round"]
        if loop is not None:
            res["pytorch"] = {**loop.about, "python": loop.python, "times": list(times["pytorch"]),
                              "s_per_round": statistics.median(times["pytorch"])}
            res["pytorch_s_per_round"] = res["pytorch"]["s_per_round"]
            res["fedalf_over_pytorch"] = res["compiled_s_per_round"] / res["pytorch_s_per_round"]
        if "sequential" in variants:
            res["sequential_s_per_round"] = statistics.median(times["sequential"])
            res["sequential_times"] = list(times["sequential"])
            res["speedup"] = res["sequential_s_per_round"] / res["compiled_s_per_round"]

    for r in range(repeats):
        for name, fn in variants.items():
            if name == "pytorch":
                times[name].append(loop.round())  # as the script timed it
                continue
            t0 = time.perf_counter()
            box[name] = jax.block_until_ready(fn(box[name]))
            times[name].append(time.perf_counter() - t0)
        medians()
        if r == 0:
            one = sum(t[0] for t in times.values())
            say(f"timing {repeats} round{'s' if repeats != 1 else ''} of the "
                f"{' and the '.join(_VARIANT_NAMES.get(k, k).format(against=against) for k in variants)}"
                f"{', interleaved' if len(variants) > 1 else ''}: ~{duration(one * (repeats - 1))} more "
                f"(one of each took {duration(one)})")


def bench(cfg: Config, *, repeats: int = 5, sequential: bool = True, depth_widths=(), depth_rounds: int = 12,
          progress=None, partial: dict | None = None, pytorch: str | None = None, against: str | None = None) -> dict:
    """Round time of ``cfg``'s compiled round (and the sequential loop), the server step's time, and
    with ``depth_widths`` (FedLF/FedALF) the server's sequential depth (:func:`server_depth`). With
    ``pytorch`` (an interpreter that has torch; ``cfg`` a FedAvg CNN round, :func:`check_pytorch_config`),
    the same round as a lean PyTorch loop (:class:`PytorchLoop`), its rounds interleaved with the compiled
    round's, and ``fedalf_over_pytorch``, the compiled round's median time over the PyTorch loop's. With
    ``against`` (an algorithm's name, e.g. ``"fedavg"``), that algorithm's compiled round on the same config,
    timed interleaved with ``cfg``'s (both see the same machine load), and ``over_against``, ``cfg``'s round
    time over it.

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
    steps = (cfg.local_steps if cfg.local_steps is not None else  # the compiled steps per client (--local-steps K)
             cfg.local_epochs * steps_per_epoch(int(data.train_idx.shape[1]), cfg.batch_size))
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
    compiled = _compiled_round(spec, state, hp, data)
    compile_s = time.perf_counter() - t0
    res["compile_s"] = round(compile_s, 3)
    box = {"compiled": _fresh(state), "sequential": state}
    seq = make_sequential(spec) if sequential else None
    variants = {"compiled": lambda s: compiled(s, hp, data)[0]}
    if seq is not None:
        say("compiling the sequential loop (one jitted call per client) ...")
        variants["sequential"] = lambda s: seq(s, hp, data)[0]
        box["sequential"] = jax.block_until_ready(variants["sequential"](state))  # compile it
    if against is not None:
        other = cfg.replace(algorithm=against)
        say(f"building and compiling the {against} round to time against (same config) ...")
        o_exp = build(other)
        o_state = init_state(o_exp.spec, cfg.seed)
        o_compiled = _compiled_round(o_exp.spec, o_state, o_exp.hp, o_exp.data)
        variants["against"] = lambda s: o_compiled(s, o_exp.hp, o_exp.data)[0]
        box["against"] = o_state
    with contextlib.ExitStack() as stack:
        loop = None
        if pytorch is not None:  # its rounds interleaved with the compiled round's: both see the same load
            say(f"starting a lean PyTorch {torch_version} loop of the same round ({TORCH_SCRIPT.name} run by "
                f"{pytorch}): loading its data and a warm-up round ...")
            data_dir = exp.source if cfg.dataset == "fmnist" and os.path.isdir(exp.source) else None
            loop = stack.enter_context(PytorchLoop(pytorch, pytorch_args(cfg, int(data.train_idx.shape[1]),
                                                                         data_dir)))
            variants["pytorch"] = None
        _time_rounds(res, variants, box, repeats, cfg.clients_per_round * steps, against, loop, say)
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


def check_pytorch_config(cfg: Config) -> None:
    """The PyTorch loop is FedAvg's CNN on Fashion-MNIST-shaped data: a one-line :class:`ConfigError` otherwise."""
    from ..problem.data import DataError, dataset_info
    if cfg.algorithm != "fedavg" or cfg.model != "cnn":
        raise ConfigError(f"--pytorch compares FedAvg's CNN round; this is {cfg.algorithm} with model {cfg.model} "
                          f"(drop --algorithm/--model, or give --algorithm fedavg --model cnn)")
    if cfg.local_steps is not None:  # the PyTorch loop trains epochs (--epochs): it would time other work
        raise ConfigError(f"--pytorch times local epochs; --local-steps {cfg.local_steps} has no PyTorch "
                          f"counterpart: drop --local-steps (use --local-epochs)")
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


def pytorch_args(cfg: Config, examples_per_client: int, data_dir: str | None) -> list[str]:
    """experiments/torch_round.py's flags for ``cfg``'s round, served one round at a time (``--serve``, one
    warm-up round): its clients, clients per round, examples per client (the padded length the compiled round
    steps through), batch size, epochs, step size and seed; ``data_dir`` (Fashion-MNIST's folder) or random
    data of the same shape."""
    args = ["--clients", str(cfg.clients), "--clients-per-round", str(cfg.clients_per_round),
            "--examples-per-client", str(examples_per_client), "--batch-size", str(cfg.batch_size),
            "--epochs", str(cfg.local_epochs), "--lr", repr(float(cfg.lr)), "--warmup", "1",
            "--seed", str(cfg.seed)]
    return args + (["--data-dir", data_dir] if data_dir else ["--synthetic"]) + ["--serve"]


# the exit statuses of a script ended by one of the signals fedalf handles (killed, or exiting 128 + signum)
_BY_A_SIGNAL = frozenset(x for sig in SIGNALS for x in (-int(sig), 128 + int(sig)))


class PytorchLoop:
    """experiments/torch_round.py run by ``python`` with ``args`` (:func:`pytorch_args`), serving rounds:
    built and warmed up on construction (``about``: its ``ready`` line: torch version, threads, ...), then
    :meth:`round` runs one round and returns its seconds as the script timed it, so that ``fedalf bench``
    interleaves them with its own rounds. A script that fails: a one-line :class:`ConfigError`; a Ctrl-C
    (the run loop's ``INTERRUPT``) kills it (:func:`~fedalf_jax.bench.stop.stoppable`) and raises
    :class:`BenchStopped`. Use as a context manager (it is killed on leaving)."""

    def __init__(self, python: str, args: list[str]):
        import tempfile
        self.python = python
        self._err = tempfile.TemporaryFile(mode="w+")  # a file, not a pipe: its warnings never block it
        self._proc = subprocess.Popen([shutil.which(python) or python, str(TORCH_SCRIPT), *args],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err, text=True,
                                      bufsize=1)
        _CHILDREN.add(self._proc)
        try:
            self.about = self._read("ready")
        except BaseException:
            self._err.close()
            raise

    def _read(self, key: str) -> dict:
        for line in self._proc.stdout:  # lines that are not its JSON (a library's notice) are skipped
            if line.startswith("{"):
                try:
                    got = json.loads(line)
                except ValueError:
                    continue
                if key in got:
                    return got
        self.close()
        if self._proc.returncode in _BY_A_SIGNAL:  # a terminal's Ctrl-C reaches this bench too: wait for it
            deadline = time.monotonic() + 2.0
            while not INTERRUPT.requested and time.monotonic() < deadline:
                time.sleep(0.02)
        if INTERRUPT.requested:  # killed by a Ctrl-C (or SIGTERM, ...)
            raise BenchStopped()
        self._err.seek(0)
        last = (self._err.read().strip().splitlines() or [""])[-1]
        raise ConfigError(f"--pytorch: {TORCH_SCRIPT.name} run by {self.python} stopped without a result "
                          f"(exit status {self._proc.returncode})" + (f": {last}" if last else ""))

    def round(self) -> float:
        """Run one round; its seconds as the script timed them."""
        try:
            self._proc.stdin.write("round\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it has died: _read says why
        return float(self._read("s")["s"])

    def close(self) -> None:
        _kill(self._proc)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        self._err.close()


def server_seconds(spec, state, hp, data, repeats: int) -> float:
    """Median time of the server step alone (Grams, QPs, update) on one round's client outputs, its state
    donated as in the run loop (each call is given the state the previous one returned)."""
    sel, n, outs = jax.jit(lambda s: client_phase(spec, s, hp, data))(state)
    server_j = jax.jit(lambda s, *a: server_step(spec, s, *a)[0], donate_argnums=(0,))
    s = jax.block_until_ready(server_j(_fresh(state), sel, n, outs, hp))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        s = jax.block_until_ready(server_j(s, sel, n, outs, hp))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_sweep(cfg: Config, *, widths, repeats: int = 3, progress=None, partial: dict | None = None) -> dict:
    """A vmapped sweep of ``W`` runs (seeds ``seed .. seed+W−1``) against the same ``W`` runs as separate
    single-run programs, one chunk of ``eval_every`` rounds with its evaluation per call, in one process
    (medians). ``speedup`` > 1: the sweep is faster than its runs one after another.

    Every program's first call is an untimed warm-up (the sweep's, and each single run's). Then the
    sweep makes ``repeats`` timed calls, and the single runs, one after another, ``repeats`` timed calls
    each; the sweep's calls are spread among the single runs, so that both see the same machine load.
    A single run's inputs and state are built just before its calls and dropped after them: beside the
    sweep's ``W`` states, at most one single run's lives (not ``W``). The separate time of
    repeat ``r`` is the sum of the runs' ``r``-th calls, which compute the same rounds as the sweep's.

    ``progress``: called with one line per width, with its predicted duration (:func:`predict_width_s`,
    from the widths already measured), and the time left once its first calls are timed. ``partial``:
    the result dict, each width's figures added as soon as they are measured."""
    from ..runner.loop import Program, default_run_map
    from ..sweeps.sweep import _Group
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
