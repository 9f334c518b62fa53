"""A sweep's program calls sized to the device's memory, and its checkpoints to the disk.

:func:`choose_chunk` compiles a combination's program for candidate call widths with abstract inputs
(:class:`_Sizer`, :func:`fit_width`) and keeps the widest whose planned memory (XLA's ``memory_analysis``,
:func:`program_bytes`) fits :func:`memory_limit`; :func:`check_disk` says before a sweep starts when
its checkpoints will not fit the free disk. :mod:`.sweep` calls both while it plans a sweep.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Optional

import jax
import jax.numpy as jnp

from ..sim.round import init_state
from ..runner.build import load_pool, make_spec
from ..config.config import Config, ConfigError
from ..runner.loop import Program, say
from ..runner.progress import Progress
from .sweep_plan import static_key


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
    configs = [c for c in configs if c.keeps_checkpoints]  # a throw-away run (checkpoint_every=never) writes none
    if not configs:
        return None
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
    nothing is allocated): the largest of the round program's, the evaluation's (the run loop calls one
    round per program call) and the train-loss program's with the call's inputs alive; on the CPU backend
    plus the host copy of the state a checkpoint takes while the next call runs. The programs are kept
    in ``programs[(key, width)]`` for the sweep to run (see :meth:`.sweep._Group.run`)."""

    def __init__(self, group: "_Group", key: str, progress: bool, programs: Optional[dict],
                 bar: Optional[Progress] = None):
        self.group, self.key, self.progress, self.programs, self.bar = group, key, progress, programs, bar
        self.cpu = jax.default_backend() == "cpu"

    def args_bytes(self, width: int) -> int:
        return _nbytes(self.group.abstract_inputs(width))

    def __call__(self, width: int) -> int:
        g = self.group
        args = g.abstract_inputs(width)
        late = _LateBar(self.progress)
        late.bar = self.bar  # the sweep's bar says "compiling" while it compiles
        program = Program(g.spec, batched=True, data_axes=g.axes, progress=late, devices=g.devices, run_map=g.run_map)
        chunk = max(program_bytes(program.compiled_round(*args)), program_bytes(program.compiled(0, *args)))
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


def choose_chunk(configs: list[Config], *, make_group, limit: Optional[int] = None, progress: bool = False,
                 programs: Optional[dict] = None, announce=say, bar: Optional[Progress] = None) -> Optional[int]:
    """The most runs per program call for a sweep of ``configs``: for each discrete combination, the widest
    call whose planned memory (:class:`_Sizer`, :func:`fit_width`) fits :func:`memory_limit`; the
    smallest of these over the combinations, or ``None`` when every combination fits whole. Says in one
    line (``announce``) what it chose and why. ``programs`` receives the compiled programs (the sweep
    runs those of the widths it uses). ``make_group``: the runs of one combination from ``(config, None)``
    pairs, the sweep's :class:`.sweep._Group` (passed in: sweep.py imports this module, not the reverse)."""
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
        group = make_group([(c, None) for c in cfgs])
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
