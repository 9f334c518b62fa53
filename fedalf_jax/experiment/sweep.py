"""``fedalf sweep``: many runs, one compiled program per discrete combination.

Runs that differ only in their seed and continuous hyper-parameters (``config.CONTINUOUS``: lr, ρ,
μ, q, ε, ...; and the algorithm's own, ``Config.hp``, a grid key ``hp.NAME``) share a round spec; they
run as ``jax.vmap`` of the run loop's chunk over a leading run axis, ``chunk`` runs per program call
(``--sweep-chunk``). The data pool sits on the device once; each
run has its own index rows (its seed's partition), padded to one length, its own state and its own
hyper-parameters. Each discrete combination (algorithm, partition, model, privacy mechanism, ...) is
its own program.

Every run writes the run directory ``fedalf run`` would write, under ``out/<name>``; ``out/sweep.json``
lists them. Combinations that differ only in options their algorithm ignores are one run
(:func:`distinct`): the sweep makes and lists the first of them only, and says so in one line. With ``--run-map map`` (the CPU's default) a run of a sweep gives the metrics of the single
``fedalf run`` with the same config bit for bit (tests/test_sweep.py): the runs are computed one after
another inside the program. With ``vmap`` (the GPU's default) they are batched, the server's QPs of all
runs included, and equal their single runs up to float32 summation order (the tolerance in
tests/test_sweep.py). ``resume=True`` finishes the runs that have no ``summary.json``, each from its last checkpoint.

Memory and disk: without ``--sweep-chunk``, a new sweep sizes its program calls before it starts
(:func:`choose_chunk`: the widest call whose compiled program's planned memory, from XLA's
``memory_analysis``, fits the device's memory) and records the choice in ``sweep.json``. A sweep's runs
keep one checkpoint each (``RunDir(keep_previous=False)``): the disk holds one generation of the
runs' checkpoints plus the one being written.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import re
import sys
import time
from pathlib import Path
from typing import Iterable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ..sim.round import ClientData, init_state
from .build import check_devices, client_rows, device_data, hparams, load_pool, make_spec, pad_rows, pool_key, warn_privacy
from .config import (BOOKKEEPING, CONTINUOUS, Config, ConfigError, flat_options, from_run, identity_digest,
                     ignored_options)
from .loop import INTERRUPT, Interrupted, Program, Slot, default_run_map, say, train
from .progress import Progress
from .rundir import METRICS, RunDir, extra_columns, metric_columns, read_sweep, write_sweep
from .writers import read_csv_rows

_SHORT = {"lr": "lr", "lr_decay": "lrdecay", "server_lr": "slr", "server_lr_decay": "slrdecay", "mu": "mu",
          "rho": "rho", "q": "q", "epsilon": "eps", "delta": "delta", "clip": "clip"}
_BARE = ("algorithm", "dataset", "partition", "model")  # values readable without their key


def expand(base: dict, grid: dict[str, list], seeds: Iterable[int]) -> list[Config]:
    """Every combination of ``grid``'s values (and every seed) on top of ``base``, validated. A key
    ``hp.NAME`` varies the algorithm's own hyper-parameter ``NAME`` (``Config.hp``), over ``base``'s."""
    keys = list(grid)
    out, seen = [], set()
    for values in itertools.product(*(grid[k] for k in keys)):
        combo = dict(zip(keys, values))
        own = {k[3:]: combo.pop(k) for k in keys if k.startswith("hp.")}
        if own:
            combo["hp"] = {**(combo.get("hp", base.get("hp")) or {}), **own}
        for seed in seeds:
            cfg = Config.from_dict({**base, **combo, "seed": seed, "out": None})
            k = json.dumps(cfg.to_dict(), sort_keys=True)
            if k not in seen:
                seen.add(k)
                out.append(cfg)
    return out


def distinct(configs: list[Config]) -> tuple[list[Config], Optional[str]]:
    """The distinct runs of ``configs`` (the first of each, in order) and a one-line notice saying which
    combinations collapsed (``None`` when none did). Two configs are one run when they differ only in
    options their algorithm ignores (:func:`config.ignored_options`): their resolved identities
    (:meth:`Config.identity`) with those options normalised have one digest, and their bookkeeping
    (rounds, cadences, writers) is equal."""
    kept: list[Config] = []
    first: dict[tuple, Config] = {}
    count: dict[str, list[int]] = {}  # algorithm -> [combinations, distinct runs]
    why: dict[tuple[str, str], list[str]] = {}  # (algorithm, condition) -> the ignored options that varied
    for c in configs:
        ignored = ignored_options(c)
        ident = {**c.identity(), **{k: "<ignored>" for k in ignored}}
        key = identity_digest(ident), json.dumps({k: getattr(c, k) for k in BOOKKEEPING if k != "out"}, sort_keys=True)
        n = count.setdefault(c.algorithm, [0, 0])
        n[0] += 1
        twin = first.get(key)
        if twin is None:
            first[key] = c
            kept.append(c)
            n[1] += 1
            continue
        for k in sorted(ignored):
            if getattr(c, k) != getattr(twin, k):
                opts = why.setdefault((c.algorithm, ignored[k]), [])
                if k not in opts:
                    opts.append(k)
    if len(kept) == len(configs):
        return kept, None
    said = ", ".join(f"{a} ignores {', '.join('--' + k.replace('_', '-') for k in opts)}" + (f" ({cond})" if cond else "")
                     for (a, cond), opts in why.items())
    each = ", ".join(f"{a}'s {n} are {d}" for a, (n, d) in count.items() if n != d) if len(count) > 1 else ""
    return kept, (f"{said}: {len(configs)} combinations are {len(kept)} distinct runs{f' ({each})' if each else ''}; "
                  f"running each once")


def static_key(cfg: Config) -> str:
    """What must be equal for runs to share one program: everything but seed and continuous values."""
    d = cfg.to_dict()
    for k in (*CONTINUOUS, "seed", "out"):
        d.pop(k)
    d.pop("hp", None)  # the algorithm's own: traced too (their names are the algorithm's)
    return json.dumps(d, sort_keys=True)


def run_names(configs: list[Config]) -> list[str]:
    """Readable, unique directory names from the options that vary across ``configs``."""
    dicts = [flat_options(c.to_dict()) for c in configs]
    keys = list(dict.fromkeys(k for d in dicts for k in d))
    # an own hyper-parameter names a run only when its algorithm's runs differ in it (a grid of algorithms,
    # one declaring beta, is not varied in beta: fedavgm_seed0, not fedavgm_beta-0.9_seed0)
    varying = [k for k in keys if k not in ("out",) and len({json.dumps(d.get(k)) for d in dicts
                                                          if not (k.startswith("hp.") and d.get(k) is None)}) > 1]
    names = []
    for d in dicts:
        parts = [d["algorithm"]]
        for k in varying:
            v = d.get(k)
            if k == "algorithm" or (v is None and k.startswith("hp.")):
                continue
            if k.startswith("hp."):  # the algorithm's own: beta1-0.9
                parts.append(f"{k[3:]}-{v:g}")
            elif k == "seed":
                parts.append(f"seed{v}")
            elif k in _BARE:
                parts.append(str(v))
            elif isinstance(v, bool) or v is None:
                parts.append(f"{k}-{'default' if v is None else ('on' if v else 'off')}")
            elif isinstance(v, str):
                parts.append(f"{k}-{v}")
            else:
                parts.append(f"{_SHORT.get(k, k)}{v:g}")
        names.append(re.sub(r"[^A-Za-z0-9_.+=-]", "-", "_".join(parts)))
    counts: dict[str, int] = {}
    unique = []
    for n in names:
        counts[n] = counts.get(n, 0) + 1
        unique.append(n if counts[n] == 1 else f"{n}_{counts[n]}")
    return unique


def plan(configs: list[Config], out: str | Path, meta: Optional[dict] = None, *, same: bool = False) -> None:
    """Write ``out/sweep.json`` for ``configs`` (refusing a folder that already holds a sweep, unless
    ``same`` and it is this very sweep: the slices of a sharded sweep all plan it)."""
    root = Path(out)
    if not _planned(configs, root, same=same):
        runs = [{"name": n, "dir": n, "config": c.to_dict()} for n, c in zip(run_names(configs), configs)]
        write_sweep(root, runs, {"created": time.strftime("%Y-%m-%d %H:%M:%S"), **(meta or {})})


def _planned(configs: list[Config], root: Path, *, same: bool) -> bool:
    """Whether ``root`` already holds this very sweep (``same``: the slices of a sharded sweep); raises one
    line when it holds another sweep or a run."""
    runs = [{"name": n, "dir": n, "config": c.to_dict()} for n, c in zip(run_names(configs), configs)]
    if (root / "sweep.json").exists():
        if same and read_sweep(root)["runs"] == runs:
            return True  # another slice of the same sweep planned it
        raise ConfigError(f"{root} already holds a sweep; finish it with fedalf sweep --resume --out {root}, "
                          f"or choose another --out")
    if RunDir(root).holds_run():
        raise ConfigError(f"{root} holds a run (config.json); a sweep needs a folder of its own: choose another --out")
    taken = [n for n in run_names(configs) if RunDir(root / n).holds_run()]
    if taken:
        raise ConfigError(f"{root / taken[0]} already holds a run that is not part of a sweep.json; "
                          f"choose another --out")
    return False


def sweep(configs: list[Config], out: str | Path, *, chunk: Optional[int] = None, progress: bool = True,
          meta: Optional[dict] = None, shard: Optional[tuple[int, int]] = None, memory_limit: Optional[int] = None,
          compress_checkpoints: Optional[bool] = None) -> list[dict]:
    """Plan and run a sweep of ``configs`` under ``out`` (only slice ``shard`` of its program calls, if
    given); returns one result dict per run.

    ``chunk``: the most runs per program call. ``None``: chosen by :func:`choose_chunk` (within
    ``memory_limit`` bytes, default :func:`memory_limit`) when the sweep is planned, and recorded in
    ``sweep.json`` with the plan, so that a resume and every slice of a sharded sweep make the same calls.
    ``compress_checkpoints``: the runs' checkpoints written with ``np.savez_compressed`` (default: the
    environment's ``FEDALF_COMPRESS_CHECKPOINTS``; recorded too).
    """
    if not configs:
        raise ConfigError("the sweep has no runs")
    _check_chunk(chunk)
    configs, notice = distinct(configs)
    if notice:
        print(f"fedalf sweep: {notice}", file=sys.stderr, flush=True)
    root = Path(out)
    RunDir(root).create()
    bar = Progress(None, enabled=progress, desc="fedalf sweep")  # its stages show from the start
    announce = lambda msg: bar.write(f"fedalf: {msg}")  # noqa: E731
    try:
        with _held(root, shard):
            programs: dict = {}
            chosen = chunk
            with bar.stage(f"planning {len(configs)} run{'s' if len(configs) != 1 else ''}"):
                if chunk is None and not _planned(configs, root, same=shard is not None):
                    with bar.stage("planning memory"):
                        chosen = choose_chunk(configs, limit=memory_limit, progress=progress, programs=programs,
                                              announce=announce, bar=bar)
                compress = RunDir(root).compress if compress_checkpoints is None else bool(compress_checkpoints)
                plan(configs, root, {**(meta or {}), "chunk": chosen, "compress_checkpoints": compress},
                     same=shard is not None)
                check_disk(configs, root, compressed=compress, announce=announce)
            # chunk None: the one sweep.json records (this process's choice, or that of the slice that planned it)
            return _resume(root, chunk=chunk, progress=progress, shard=shard, rounds=None, programs=programs,
                           compress=compress_checkpoints, bar=bar)
    finally:
        bar.close()


def checkpoint_bytes(configs: list[Config]) -> tuple[int, int]:
    """``(bytes of all the runs' checkpoints, bytes of the largest one)``, uncompressed: each run's state
    (its shapes from ``jax.eval_shape``: nothing is computed)."""
    total, largest, sizes = 0, 0, {}
    for c in configs:
        key = static_key(c)
        if key not in sizes:
            spec = make_spec(c, load_pool(c))
            sizes[key] = _nbytes(jax.eval_shape(lambda: init_state(spec, c.seed)))
        total, largest = total + sizes[key], max(largest, sizes[key])
    return total, largest


def check_disk(configs: list[Config], root: Path, *, compressed: bool = False, announce=say) -> Optional[int]:
    """Before a sweep starts: when its checkpoints (one per run, plus the one being written) need more
    than the free space under ``root`` (``shutil.disk_usage``), say so in one line; returns the bytes
    needed then, else ``None``. Compressed checkpoints are smaller by an amount not known in advance
    (float weights compress little), so the line says the uncompressed size."""
    import shutil
    total, largest = checkpoint_bytes(configs)
    need = total + largest
    free = shutil.disk_usage(root).free
    if need <= free:
        return None
    n = len(configs)
    announce(f"warning: this sweep's checkpoints need ~{_gb(need)} (one per run: {n} run{'s' if n != 1 else ''}, "
             f"~{_gb(total)}, plus one being written{', uncompressed' if compressed else ''}), more than the "
             f"{_gb(free)} free in {root}; free space or choose --out on a larger disk, or the sweep stops at the "
             f"first checkpoint that does not fit (--resume continues it)")
    return need


def _check_chunk(chunk) -> None:
    if chunk is not None and (not isinstance(chunk, int) or chunk < 1):
        raise ConfigError(f"--sweep-chunk must be a positive integer, got {chunk!r}")


@contextlib.contextmanager
def _held(root: Path, shard):
    """The sweep's folder locked for this process (shared by the slices of a sharded sweep, each of
    whose runs is locked alone while it runs), with Ctrl-C handled."""
    with RunDir(root).lock(shared=shard is not None), INTERRUPT.active():
        yield


def resume(out: str | Path, *, chunk: Optional[int] = None, progress: bool = True,
           shard: Optional[tuple[int, int]] = None, rounds: Optional[int] = None,
           compress_checkpoints: Optional[bool] = None) -> list[dict]:
    """Run every run of the sweep in ``out`` that has not ended (from its checkpoint, if any).

    ``rounds``: extend every run to this many rounds (not fewer than it has): the finished runs go on
    from their final checkpoint, exactly as runs of ``rounds`` rounds (the learning-rate schedules
    depend on the round only), e.g. a 200-round sweep continued to 500.

    ``chunk`` defaults to the sweep's own; each program call keeps the width it had (a combination's
    run count, or ``chunk``), so a resumed run computes exactly what it would have computed.
    ``compress_checkpoints`` defaults to the sweep's own choice.
    ``shard=(i, k)``: only the program calls ``c`` with ``c % k == i`` (calls are numbered over the
    whole sweep, combination by combination): ``k`` processes or jobs run disjoint slices of one sweep
    into the same folder, each call exactly as the unsliced sweep would run it.
    """
    _check_chunk(chunk)
    root = Path(out)
    if not (root / "sweep.json").is_file():
        read_sweep(root)  # the one-line "not a sweep directory"
    RunDir(root).create()  # the folder only: its temporaries go once it is held (RunDir.lock)
    with _held(root, shard):
        return _resume(root, chunk=chunk, progress=progress, shard=shard, rounds=rounds,
                       compress=compress_checkpoints)


def remove_sweep(out: str | Path) -> None:
    """Remove the sweep in ``out`` (``fj.sweep(..., overwrite=True)``): every run's files
    (:meth:`RunDir.remove_run_files`, each under its run's lock), each run folder left empty, then
    ``sweep.json``; a user's other files stay. Refused, changing nothing, while a process writes it."""
    root = Path(out)
    info = read_sweep(root)
    with RunDir(root).lock():
        held = [RunDir(root / e["dir"]) for e in info["runs"] if (root / e["dir"]).is_dir()]
        locks = []
        try:
            for rd in held:  # every run held first: one being written refuses the whole removal
                locks.append(rd.lock())
            for rd in held:
                rd.remove_run_files()
        finally:
            for lock in locks:
                lock.release()
        for rd in held:
            rd.remove_if_unused()
        (root / "sweep.json").unlink()


def _resume(root: Path, *, chunk, progress, shard, rounds, programs=None, compress=None,
            bar: Optional[Progress] = None) -> list[dict]:
    own = bar is None  # else sweep()'s, which showed its planning stages
    if own:
        read_sweep(root)  # a damaged or hostile sweep.json is refused in one line, before any bar is drawn
    bar = Progress(None, enabled=progress, desc="fedalf sweep") if own else bar  # stages shown from the start
    failed = True
    try:
        with bar.stage("loading the runs"):
            plans, entries, total = _plan_calls(root, chunk=chunk, shard=shard, rounds=rounds, programs=programs,
                                                compress=compress)
        state = {"done": total - sum(len(g.members) for g in plans), "best": -math.inf, "total": total}
        _best_of_finished(entries, root, state)
        bar.set_total(sum(g.remaining for g in plans))
        for group in plans:
            group.run(bar, state)
        failed = False
    finally:
        if own:
            bar.close(failed=failed)
    return results(root)


def _plan_calls(root: Path, *, chunk, shard, rounds, programs, compress) -> tuple[list, list, int]:
    """The pending runs of the sweep in ``root`` as ``_Group`` s (this slice's program calls), its
    entries and this slice's run count."""
    info = read_sweep(root)
    if any("config" not in e for e in info["runs"]):
        raise ConfigError(f"{root / 'sweep.json'} lists runs without their config; restore the file")
    entries = info["runs"]
    if rounds is not None:
        entries = _extend(root, info, rounds)
    chunk = chunk if chunk is not None else info.get("chunk")
    compress = compress if compress is not None else info.get("compress_checkpoints")  # None: RunDir's default
    members: dict[str, list] = {}
    for e in entries:
        # one checkpoint per run: one generation of the sweep's checkpoints on disk (RunDir.save_checkpoint)
        rd = RunDir(root / e["dir"], keep_previous=False, compress=compress)
        cfg = Config.from_dict({**from_run(e["config"]), "out": str(rd.path)})
        members.setdefault(static_key(cfg), []).append((cfg, rd))
    calls = 0
    plans, total = [], 0
    for key, runs in members.items():
        devices = runs[0][0].devices
        width = min(chunk or len(runs), len(runs))
        width = -(-width // devices) * devices  # the run axis is sharded over the devices
        mine = []
        for c in range(0, len(runs), width):  # the program calls of this combination
            if shard is None or calls % shard[1] == shard[0]:
                mine += runs[c:c + width]
                total += min(width, len(runs) - c)
            calls += 1
        todo = [(cfg, rd) for cfg, rd in mine if not _ended(cfg, rd)]
        if todo:
            plans.append(_Group(todo, width=width, ready=(programs or {}).get((key, width))))
    if entries != info["runs"]:  # --rounds N: written once every run it changes is checked (_Group)
        write_sweep(root, entries, {k: v for k, v in info.items() if k != "runs"})
    return plans, entries, total


def _check_interrupt(where: int) -> None:
    if INTERRUPT.requested:
        raise Interrupted(where, [], saved=False, signum=INTERRUPT.signum)


def _extend(root: Path, info: dict, rounds: int) -> list[dict]:
    """Every run of ``sweep.json`` with its ``rounds`` set to ``rounds`` (written by :func:`_resume` once
    the runs are checked; the run directories' ``config.json`` follow when each run starts again).
    Refused before anything is written when a started run cannot go on to ``rounds`` (``--dp central``:
    its noise is calibrated to the run's length)."""
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
        raise ConfigError(f"--rounds must be a positive integer, got {rounds!r}")
    most = max(e["config"]["rounds"] for e in info["runs"])
    if rounds < most:
        raise ConfigError(f"--resume --rounds {rounds}: the sweep in {root} already has runs of {most} rounds; "
                          f"a sweep can be extended, not shortened")
    entries = [{**e, "config": {**e["config"], "rounds": rounds}} for e in info["runs"]]
    for e in info["runs"]:
        was = e["config"]["rounds"]
        if was != rounds and from_run(e["config"]).get("dp") == "central" and RunDir(root / e["dir"]).checkpoint_files():
            raise ConfigError(f"--resume --rounds {rounds}: {root / e['dir']} is a --dp central run whose noise is "
                              f"calibrated to its {was} rounds, so it cannot go on to {rounds}; {root / 'sweep.json'} "
                              f"is unchanged: resume without --rounds, or start a new sweep with --rounds {rounds} "
                              f"in another --out")
    return entries


def _ended(cfg: Config, rd: RunDir) -> bool:
    """Diverged, or done with all of ``cfg.rounds`` (a done run of an extended sweep goes on)."""
    s = rd.summary()
    if s is None:
        return False
    return s.get("status", "done") == "diverged" or s.get("round", cfg.rounds) >= cfg.rounds


def parse_shard(text: Optional[str], environ=None) -> Optional[tuple[int, int]]:
    """``"i/k"`` → ``(i, k)``; ``"k"`` alone takes ``i`` from a Slurm job array
    (``SLURM_ARRAY_TASK_ID`` minus ``SLURM_ARRAY_TASK_MIN``)."""
    import os
    if text is None:
        return None
    env = os.environ if environ is None else environ
    parts = text.split("/")
    try:
        if len(parts) == 2:
            i, k = int(parts[0]), int(parts[1])
        elif len(parts) == 1 and "SLURM_ARRAY_TASK_ID" in env:
            k = int(parts[0])
            i = int(env["SLURM_ARRAY_TASK_ID"]) - int(env.get("SLURM_ARRAY_TASK_MIN", 0))
        else:
            raise ValueError
    except ValueError:
        raise ConfigError(f"--shard takes i/k (slice i of k, from 0), or k inside a Slurm job array; got {text!r}") from None
    if not (k >= 1 and 0 <= i < k):
        raise ConfigError(f"--shard {text}: need 0 <= i < k")
    return i, k


def _best_of_finished(entries, root, state) -> None:
    for e in entries:
        s = RunDir(root / e["dir"]).summary()
        if s is not None and s.get("status") == "done":
            state["best"] = max(state["best"], s["final"]["mean_acc"])


def results(out: str | Path) -> list[dict]:
    """Name, directory, status and final metrics of every run of the sweep in ``out``."""
    root = Path(out)
    res = []
    for e in read_sweep(root)["runs"]:
        rd = RunDir(root / e["dir"])
        s = rd.summary() or {}
        res.append({"name": e["name"], "dir": str(rd.path), "status": rd.status(), "final": s.get("final")})
    return res


# ---- sizing the program calls to the device's memory ------------------------------------------------

MEMORY_ENV = "FEDALF_MEMORY_LIMIT"  # bytes a program call may plan ("40GB", "512MiB", "2e9"): overrides the device's
GPU_SHARE = 0.9   # of the accelerator's free memory pool (XLA's allocator, fragmentation)
HOST_SHARE = 0.8  # of the host's available memory (the CPU backend: data, the host copies, Python)
_UNITS = {"": 1, "b": 1, "k": 10 ** 3, "kb": 10 ** 3, "m": 10 ** 6, "mb": 10 ** 6, "g": 10 ** 9, "gb": 10 ** 9,
          "t": 10 ** 12, "tb": 10 ** 12, "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40}


def parse_bytes(text: str, what: str = MEMORY_ENV) -> int:
    """``"40GB"``, ``"512MiB"``, ``"2e9"`` → bytes."""
    m = re.fullmatch(r"\s*([0-9.]+(?:e[0-9]+)?)\s*([a-z]*)\s*", str(text).lower())
    try:
        value = float(m.group(1)) * _UNITS[m.group(2)]
    except (AttributeError, KeyError, ValueError):
        value = -1.0
    if not value > 0:
        raise ConfigError(f"{what} must be a memory size such as 40GB, 512MiB or 2e9 bytes, got {text!r}")
    return int(value)


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def _mem_available() -> Optional[int]:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def memory_limit(given: Optional[int] = None, environ=None) -> tuple[Optional[int], str]:
    """``(bytes, where from)``: the memory one program call of a sweep may plan. ``given`` (bytes), else
    ``FEDALF_MEMORY_LIMIT``, else the first device's free memory pool (``memory_stats()['bytes_limit']``
    less what is in use) × ``GPU_SHARE``, else (the CPU backend) ``MemAvailable`` × ``HOST_SHARE``;
    ``(None, why)`` when none is known."""
    env = os.environ if environ is None else environ
    if given is not None:
        return int(given), "the given limit"
    if env.get(MEMORY_ENV):
        return parse_bytes(env[MEMORY_ENV]), MEMORY_ENV
    dev = jax.devices()[0]
    try:
        stats = dev.memory_stats()
    except Exception:  # noqa: BLE001 - a backend without memory statistics
        stats = None
    if stats and stats.get("bytes_limit"):
        free = stats["bytes_limit"] - stats.get("bytes_in_use", 0)
        return int(GPU_SHARE * free), f"{dev.platform} memory pool {_gb(stats['bytes_limit'])} × {GPU_SHARE}"
    if dev.platform == "cpu":
        avail = _mem_available()
        if avail:
            return int(HOST_SHARE * avail), f"available host memory {_gb(avail)} × {HOST_SHARE}"
    return None, f"no memory limit known for {dev.platform}"


class _LateBar:
    """The progress of a program compiled before the sweep's bar exists (when the sweep is sized): its
    compile state goes to ``bar`` once set."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.bar: Optional[Progress] = None

    def compiling(self, on: bool) -> None:
        if self.bar is not None:
            self.bar.compiling(on)


def _sds(shape, dtype):
    return jax.ShapeDtypeStruct(tuple(shape), jax.dtypes.canonicalize_dtype(dtype))


def _avals(tree):
    """Structure, shapes and dtypes of ``tree`` (arrays or shapes): equal for inputs a compiled program takes."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    return treedef, tuple((tuple(x.shape), jnp.dtype(x.dtype)) for x in leaves)


def _nbytes(tree) -> int:
    return sum(math.prod(x.shape) * jnp.dtype(x.dtype).itemsize for x in jax.tree_util.tree_leaves(tree))


class NoEstimate(Exception):
    """XLA gives no memory analysis for this backend's programs."""


def program_bytes(compiled, inputs_bytes: int = 0) -> int:
    """The device memory a compiled program plans (XLA's ``memory_analysis``): its arguments, its
    outputs that do not reuse a donated argument, and its temporaries. ``inputs_bytes``: the arguments
    to count instead of the program's own (the train-loss program reads part of the inputs that stay
    alive while it runs)."""
    try:
        m = compiled.memory_analysis()
    except Exception as e:  # noqa: BLE001 - not implemented on this backend
        raise NoEstimate(str(e)) from None
    if m is None:
        raise NoEstimate("no memory analysis")
    args = max(int(m.argument_size_in_bytes), inputs_bytes)
    return args + int(m.output_size_in_bytes) - int(m.alias_size_in_bytes) + int(m.temp_size_in_bytes)


class _Sizer:
    """The planned memory of a program call of ``width`` runs of ``group`` (compiled with abstract inputs:
    nothing is allocated): the larger of the chunk program's (``min(eval_every, rounds)`` rounds and
    the evaluation) and the train-loss program's with the call's inputs alive; on the CPU backend
    plus the host copy of the state a checkpoint takes while the next call runs. The programs are kept
    in ``programs[(key, width)]`` for the sweep to run (see :meth:`_Group.run`)."""

    def __init__(self, group: "_Group", key: str, progress: bool, programs: Optional[dict],
                 bar: Optional[Progress] = None):
        self.group, self.key, self.progress, self.programs, self.bar = group, key, progress, programs, bar
        cfg = group.members[0][0]
        self.length = min(cfg.eval_every, cfg.rounds)
        self.cpu = jax.default_backend() == "cpu"

    def args_bytes(self, width: int) -> int:
        return _nbytes(self.group.abstract_inputs(width))

    def __call__(self, width: int) -> int:
        g = self.group
        args = g.abstract_inputs(width)
        late = _LateBar(self.progress)
        late.bar = self.bar  # the sweep's bar says "compiling" while it compiles
        program = Program(g.spec, batched=True, data_axes=g.axes, progress=late, devices=g.devices, run_map=g.run_map)
        chunk = program_bytes(program.compiled(self.length, *args))
        loss = program_bytes(program.compiled_train_loss(*args), inputs_bytes=_nbytes(args))
        if self.programs is not None:
            self.programs[(self.key, width)] = (program, late, _avals(args))
        return max(chunk, loss) + (_nbytes(args[0]) if self.cpu else 0)


def fit_width(estimate, runs: int, devices: int, limit: int, args_bytes=None, tries: int = 4) -> tuple[int, dict]:
    """The widest program call (a multiple of ``devices``, at most ``runs`` rounded up to one) whose
    ``estimate(width)`` (bytes; each call compiles a program) is within ``limit``, and the estimates made.

    Calls wider than ``args_bytes`` allows cannot fit (their arguments alone exceed the limit) and are
    not compiled. The widest candidate is compiled first (the sweep runs that program if it fits: no
    compile is wasted); else the width is interpolated between it and a narrow call (two runs per
    device: one per device may compile to another program) and checked, at most ``tries`` times. When
    not even one run per device fits, that is the answer (the sweep says so)."""
    seen: dict[int, int] = {}

    def est(w: int) -> int:
        if w not in seen:
            seen[w] = estimate(w)
        return seen[w]

    hi = -(-runs // devices) * devices
    if args_bytes is not None:
        while hi > devices and args_bytes(hi) > limit:
            hi -= devices
    if est(hi) <= limit:
        return hi, seen
    lo = 2 * devices if hi > 2 * devices else devices
    if est(lo) > limit:
        if lo != devices:
            est(devices)
        return devices, seen
    for _ in range(tries):  # lo fits, hi does not
        if hi - lo <= devices:
            break
        slope = (est(hi) - est(lo)) / (hi - lo)
        w = lo + int((limit - est(lo)) / slope) // devices * devices if slope > 0 else hi - devices
        w = max(lo + devices, min(hi - devices, w))
        if est(w) <= limit:
            lo = w
            break
        hi = w
    return lo, seen


def choose_chunk(configs: list[Config], *, limit: Optional[int] = None, progress: bool = False,
                 programs: Optional[dict] = None, announce=say, bar: Optional[Progress] = None) -> Optional[int]:
    """The most runs per program call for a sweep of ``configs``: for each discrete combination, the widest
    call whose planned memory (:class:`_Sizer`, :func:`fit_width`) fits :func:`memory_limit`; the
    smallest of these over the combinations, or ``None`` when every combination fits whole. Says in one
    line (``announce``) what it chose and why. ``programs`` receives the compiled programs (the sweep
    runs those of the widths it uses)."""
    lim, source = memory_limit(limit)
    groups: dict[str, list[Config]] = {}
    for c in configs:
        groups.setdefault(static_key(c), []).append(c)
    if lim is None:
        announce(f"sweep chunk: all runs of a combination in one program call ({source}; --sweep-chunk N bounds it)")
        return None
    chosen: Optional[int] = None
    worst = None  # (width, runs, bytes at width, bytes of the whole combination, label)
    fits_all = []  # (bytes, runs) of the combinations that fit whole
    for key, cfgs in groups.items():
        group = _Group([(c, None) for c in cfgs])
        sizer = _Sizer(group, key, progress, programs, bar)
        try:
            width, seen = fit_width(sizer, len(cfgs), group.devices, lim, args_bytes=sizer.args_bytes)
        except NoEstimate as e:
            announce(f"sweep chunk: all runs of a combination in one program call (XLA gives no memory estimate "
                     f"on {jax.default_backend()}: {e}; --sweep-chunk N bounds it)")
            return None
        full = -(-len(cfgs) // group.devices) * group.devices
        if width >= full:
            fits_all.append((seen[width], len(cfgs)))
            continue
        if chosen is None or width < chosen:
            chosen = width
            worst = (width, len(cfgs), seen[width], _extrapolate(seen, full), f"{cfgs[0].algorithm}/{cfgs[0].model}")
    several = len(groups) > 1
    if chosen is None:
        b, n = max(fits_all)
        what = (f"all {n} runs in one program call, ~{_gb(b)}" if not several else
                f"all runs of each of the {len(groups)} combinations in one program call, ~{_gb(b)} for the largest")
        announce(f"sweep chunk {max(n for _, n in fits_all)}: {what}; memory limit {_gb(lim)} ({source})")
    else:
        width, n, b, whole, label = worst
        over = " (more than the limit: it may not run)" if b > lim else ""
        announce(f"sweep chunk {width} of {n} runs: ~{_gb(b)} per {width}-run program call{over}, ~{_gb(whole)} for "
                 f"all {n}{' of ' + label if several else ''}; memory limit {_gb(lim)} ({source}); "
                 f"--sweep-chunk N overrides")
    if programs is not None:  # keep only the programs of the widths the sweep will run
        used = {(k, -(-min(chosen or len(cs), len(cs)) // cs[0].devices) * cs[0].devices) for k, cs in groups.items()}
        for k in [k for k in programs if k not in used]:
            del programs[k]
    return chosen


def _extrapolate(seen: dict, width: int) -> float:
    """The estimate at ``width`` (measured, or on the line through the two widest measured)."""
    if width in seen:
        return seen[width]
    (w0, b0), (w1, b1) = sorted(seen.items())[-2:] if len(seen) > 1 else (sorted(seen.items())[0],) * 2
    return b1 if w1 == w0 else b1 + (b1 - b0) / (w1 - w0) * (width - w1)


def _start_rounds(rundirs) -> list[int]:
    """Where each pending run of a group resumes. A sweep runs one program call at a time, so the runs
    with checkpoints and no summary are those of the call a kill interrupted; its checkpoints may have
    been half written (some runs at round g, others still at an earlier round g'). A run resumes from
    g' when it has a checkpoint of g' (run directories written before sweeps kept one checkpoint per
    run also kept the one before), so the runs run together as before; else from its own last
    checkpoint: the runs of each start round make program calls of their own, of the same width (a
    run computes the same whatever the other runs of its call)."""
    avail = [rd.checkpoint_rounds() if rd is not None else {} for rd in rundirs]
    started = [max(a) for a in avail if a]
    if not started:
        return [0] * len(rundirs)
    common = min(started)
    return [(common if common in a else max(a)) if a else 0 for a in avail]


class _Group:
    """The pending runs of one discrete combination: one spec, one program, calls of ``chunk`` runs.

    ``members``: ``(config, RunDir or None)`` pairs that share :func:`static_key`.
    """

    def __init__(self, members: list, width: Optional[int] = None, ready=None):
        self.members = members
        self.ready = ready  # (Program, _LateBar, avals) compiled when the sweep was sized, or None
        self.width = width or len(members)
        cfg0 = members[0][0]
        warn_privacy(cfg0)
        check_devices(cfg0)
        self.devices = cfg0.devices
        self.run_map = default_run_map() if cfg0.run_map == "auto" else cfg0.run_map
        self.pools = [load_pool(c) for c, _ in members]
        self.shared_pool = len({pool_key(c) for c, _ in members}) == 1
        self.spec = make_spec(cfg0, self.pools[0])
        self.rows = [client_rows(c, p) for (c, _), p in zip(members, self.pools)]
        self.train_len = max(r.train_idx.shape[1] for r in self.rows)
        self.test_len = max(r.test_idx.shape[1] for r in self.rows)
        self.axes = ClientData(None if self.shared_pool else 0, None if self.shared_pool else 0, 0, 0, 0, 0)
        self.starts = _start_rounds([rd for _, rd in members])
        for _, rd in members:  # a run whose checkpoints are all damaged never silently starts again
            if rd is not None and rd.checkpoint_files() and not rd.checkpoint_rounds():
                why = "; ".join(f"{n}: {m}" for n, m in rd.damaged_checkpoints().items())
                raise ConfigError(f"no usable checkpoint in {rd.path} ({why}); remove "
                                  f"{', '.join(p.name for p in rd.checkpoint_files())} there to run it again "
                                  f"from round 0")
        for (cfg, rd), start in zip(members, self.starts):  # a damaged metrics.csv, before any run writes
            if rd is not None and start and (rd.path / METRICS).is_file():
                read_csv_rows(rd.path / METRICS, columns=metric_columns(cfg.clients, extra_columns(self.spec.algorithm)))
        self.remaining = sum(c.rounds - s for (c, _), s in zip(members, self.starts))
        self._one = None  # one run's abstract (state, hp), for abstract_inputs

    def run(self, bar: Progress, state: dict) -> None:
        by_start: dict[int, list[int]] = {}
        for i, s in enumerate(self.starts):
            by_start.setdefault(s, []).append(i)
        width = self.width
        program = None
        if self.ready is not None and self.ready[2] == _avals(self.abstract_inputs(width)):
            program, late, _ = self.ready  # compiled when the sweep was sized: its compile state goes to bar
            late.bar, program.progress = bar, bar
        self.ready = None
        if program is None:
            program = Program(self.spec, batched=True, data_axes=self.axes, progress=bar, devices=self.devices,
                              run_map=self.run_map)

        def on_row(slot, row):
            if row["round"] == slot.cfg.rounds and math.isfinite(row["mean_acc"]):
                state["best"] = max(state["best"], row["mean_acc"])
                state["done"] += 1
            bar.postfix(runs=f"{state['done']}/{state['total']}",
                        best=f"{state['best']:.4f}" if state["best"] > -math.inf else "-")

        for start, idx in sorted(by_start.items()):
            for k in range(0, len(idx), width):
                _check_interrupt(start)
                part = idx[k:k + width]
                slots_idx = part + [part[0]] * (width - len(part))  # padding slots repeat a run
                with contextlib.ExitStack() as held:
                    for i in part:  # each run's folder is this process's while its call runs
                        self.members[i][1].create()
                        held.enter_context(self.members[i][1].lock())
                    inputs = self.inputs(slots_idx)  # checkpoints checked before anything is written
                    slots = [self._slot(i) for i in part] + [None] * (width - len(part))
                    train(program, slots, *inputs, start=start, progress=bar, on_row=on_row)
                    inputs = None  # this call's data freed before the next call's is made
                for s in slots:
                    if s is not None and s.status == "diverged":
                        state["done"] += 1

    def inputs(self, idx: list[int]):
        """The stacked ``(state, hp, data)`` of the runs ``idx`` (a program call's slots)."""
        return (self._stack([self._state(i) for i in idx]), self._stack([hparams(self.members[i][0]) for i in idx]),
                self._data(idx))

    def abstract_inputs(self, width: int):
        """The shapes and dtypes of :meth:`inputs` for a call of ``width`` runs (nothing computed)."""
        cfg = self.members[0][0]
        if self._one is None:
            self._one = (jax.eval_shape(lambda: init_state(self.spec, cfg.seed)), jax.eval_shape(lambda: hparams(cfg)))
        state, hp = (jax.tree_util.tree_map(lambda a: _sds((width, *a.shape), a.dtype), t) for t in self._one)
        pool, rows = self.pools[0], self.rows[0]
        lead = () if self.shared_pool else (width,)
        n = rows.train_n.shape[0]
        data = ClientData(_sds((*lead, *pool.x.shape), pool.x.dtype), _sds((*lead, *pool.y.shape), pool.y.dtype),
                          _sds((width, n, self.train_len), rows.train_idx.dtype), _sds((width, n), rows.train_n.dtype),
                          _sds((width, n, self.test_len), rows.test_idx.dtype), _sds((width, n), rows.test_n.dtype))
        return state, hp, data

    def single_inputs(self, i: int):
        """``(state, hp, data)`` of run ``i`` alone, as ``fedalf run`` would build them (rows padded to the
        group's lengths)."""
        cfg = self.members[i][0]
        return self._state(i), hparams(cfg), device_data(self.pools[i], self.rows[i], train_len=self.train_len,
                                                         test_len=self.test_len)

    def _state(self, i: int):
        cfg, rd = self.members[i]
        if self.starts[i]:
            return rd.load_checkpoint(jax.eval_shape(lambda: init_state(self.spec, cfg.seed)), round=self.starts[i],
                                      cfg=cfg)
        return init_state(self.spec, cfg.seed)

    def _slot(self, i: int) -> Slot:
        cfg, rd = self.members[i]
        start = self.starts[i]
        rd.create()
        writers = rd.writers(cfg, keep_upto=start if start else None,  # reads metrics.csv before any change
                             extra=extra_columns(self.spec.algorithm))
        rd.clear_summary()
        rd.write_config(cfg)
        rd.write_clients(self.pools[i].source, self.rows[i].partition.summary(self.pools[i].y))
        return Slot(cfg, rd, writers=writers)

    @staticmethod
    def _stack(trees):
        return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *trees)

    def _data(self, idx: list[int]) -> ClientData:
        rows = [self.rows[i] for i in idx]
        tr = np.stack([pad_rows(r.train_idx, self.train_len) for r in rows])
        te = np.stack([pad_rows(r.test_idx, self.test_len) for r in rows])
        if self.shared_pool:
            x, y = self.pools[0].x, self.pools[0].y
        else:
            x = np.stack([self.pools[i].x for i in idx])
            y = np.stack([self.pools[i].y for i in idx])
        return ClientData(*(jnp.asarray(a) for a in (x, y, tr, np.stack([r.train_n for r in rows]), te,
                                                       np.stack([r.test_n for r in rows]))))
