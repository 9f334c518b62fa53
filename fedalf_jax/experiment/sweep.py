"""``fedalf sweep``: many runs, one compiled program per discrete combination.

Runs that differ only in their seed and continuous hyper-parameters (``config.CONTINUOUS``: lr, ρ,
μ, q, ε, ...) share a round spec; they run as ``jax.vmap`` of the run loop's chunk over a leading run
axis, ``chunk`` runs per program call (``--sweep-chunk``). The data pool sits on the device once; each
run has its own index rows (its seed's partition), padded to one length, its own state and its own
hyper-parameters. Each discrete combination (algorithm, partition, model, privacy mechanism, ...) is
its own program.

Every run writes the run directory ``fedalf run`` would write, under ``out/<name>``; ``out/sweep.json``
lists them. A run of a sweep gives the metrics of the single ``fedalf run`` with the same config bit
for bit (tests/test_sweep.py): each run's clients, server QPs and evaluations are computed with the
shapes of a single run (:func:`fedalf_jax.sim.batching.per_run`), only exact batched matmuls are
shared. ``resume=True`` finishes the runs that have no ``summary.json``, each from its last checkpoint.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import re
import time
from pathlib import Path
from typing import Iterable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ..sim.round import ClientData, init_state
from .build import check_devices, client_rows, device_data, hparams, load_pool, make_spec, pad_rows, pool_key, warn_privacy
from .config import CONTINUOUS, Config, ConfigError
from .loop import INTERRUPT, Interrupted, Program, Slot, default_run_map, train
from .progress import Progress
from .rundir import RunDir, read_sweep, write_sweep

_SHORT = {"lr": "lr", "lr_decay": "lrdecay", "server_lr": "slr", "server_lr_decay": "slrdecay", "mu": "mu",
          "rho": "rho", "q": "q", "epsilon": "eps", "delta": "delta", "clip": "clip"}
_BARE = ("algorithm", "dataset", "partition", "model")  # values readable without their key


def expand(base: dict, grid: dict[str, list], seeds: Iterable[int]) -> list[Config]:
    """Every combination of ``grid``'s values (and every seed) on top of ``base``, validated."""
    keys = list(grid)
    out, seen = [], set()
    for values in itertools.product(*(grid[k] for k in keys)):
        for seed in seeds:
            cfg = Config.from_dict({**base, **dict(zip(keys, values)), "seed": seed, "out": None})
            k = json.dumps(cfg.to_dict(), sort_keys=True)
            if k not in seen:
                seen.add(k)
                out.append(cfg)
    return out


def static_key(cfg: Config) -> str:
    """What must be equal for runs to share one program: everything but seed and continuous values."""
    d = cfg.to_dict()
    for k in (*CONTINUOUS, "seed", "out"):
        d.pop(k)
    return json.dumps(d, sort_keys=True)


def run_names(configs: list[Config]) -> list[str]:
    """Readable, unique directory names from the options that vary across ``configs``."""
    dicts = [c.to_dict() for c in configs]
    varying = [k for k in dicts[0] if k not in ("out",) and len({json.dumps(d[k]) for d in dicts}) > 1]
    names = []
    for d in dicts:
        parts = [d["algorithm"]]
        for k in varying:
            v = d[k]
            if k == "algorithm":
                continue
            if k == "seed":
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
    runs = [{"name": n, "dir": n, "config": c.to_dict()} for n, c in zip(run_names(configs), configs)]
    if (root / "sweep.json").exists():
        if same and read_sweep(root)["runs"] == runs:
            return  # another slice of the same sweep planned it
        raise ConfigError(f"{root} already holds a sweep; finish it with fedalf sweep --resume --out {root}, "
                          f"or choose another --out")
    if RunDir(root).holds_run():
        raise ConfigError(f"{root} holds a run (config.json); a sweep needs a folder of its own: choose another --out")
    taken = [n for n in run_names(configs) if RunDir(root / n).holds_run()]
    if taken:
        raise ConfigError(f"{root / taken[0]} already holds a run that is not part of a sweep.json; "
                          f"choose another --out")
    write_sweep(root, runs, {"created": time.strftime("%Y-%m-%d %H:%M:%S"), **(meta or {})})


def sweep(configs: list[Config], out: str | Path, *, chunk: Optional[int] = None, progress: bool = True,
          meta: Optional[dict] = None, shard: Optional[tuple[int, int]] = None) -> list[dict]:
    """Plan and run a sweep of ``configs`` under ``out`` (only slice ``shard`` of its program calls, if
    given); returns one result dict per run."""
    if not configs:
        raise ConfigError("the sweep has no runs")
    _check_chunk(chunk)
    root = Path(out)
    RunDir(root).create()
    with _held(root, shard):
        plan(configs, root, {**(meta or {}), "chunk": chunk}, same=shard is not None)
        return _resume(root, chunk=chunk, progress=progress, shard=shard, rounds=None)


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
           shard: Optional[tuple[int, int]] = None, rounds: Optional[int] = None) -> list[dict]:
    """Run every run of the sweep in ``out`` that has not ended (from its checkpoint, if any).

    ``rounds``: extend every run to this many rounds (not fewer than it has): the finished runs go on
    from their final checkpoint, exactly as runs of ``rounds`` rounds (the learning-rate schedules
    depend on the round only), e.g. a 200-round sweep continued to 500.

    ``chunk`` defaults to the sweep's own; each program call keeps the width it had (a combination's
    run count, or ``chunk``), so a resumed run computes exactly what it would have computed.
    ``shard=(i, k)``: only the program calls ``c`` with ``c % k == i`` (calls are numbered over the
    whole sweep, combination by combination): ``k`` processes or jobs run disjoint slices of one sweep
    into the same folder, each call exactly as the unsliced sweep would run it.
    """
    _check_chunk(chunk)
    root = Path(out)
    if not (root / "sweep.json").is_file():
        read_sweep(root)  # the one-line "not a sweep directory"
    RunDir(root).create()  # removes a temporary file a killed write left
    with _held(root, shard):
        return _resume(root, chunk=chunk, progress=progress, shard=shard, rounds=rounds)


def _resume(root: Path, *, chunk, progress, shard, rounds) -> list[dict]:
    info = read_sweep(root)
    if any("config" not in e for e in info["runs"]):
        raise ConfigError(f"{root / 'sweep.json'} lists runs without their config; restore the file")
    entries = info["runs"]
    if rounds is not None:
        entries = _extend(root, info, rounds)
    chunk = chunk if chunk is not None else info.get("chunk")
    members: dict[str, list] = {}
    for e in entries:
        rd = RunDir(root / e["dir"])
        cfg = Config.from_dict({**e["config"], "out": str(rd.path)})
        members.setdefault(static_key(cfg), []).append((cfg, rd))
    calls = 0
    plans, total = [], 0
    for runs in members.values():
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
            plans.append(_Group(todo, width=width))
    state = {"done": total - sum(len(g.members) for g in plans), "best": -math.inf, "total": total}
    _best_of_finished(entries, root, state)
    bar = Progress(sum(g.remaining for g in plans), enabled=progress, desc="fedalf sweep")
    try:
        for group in plans:
            group.run(bar, state)
    finally:
        bar.close()
    return results(root)


def _check_interrupt(where: int) -> None:
    if INTERRUPT.requested:
        raise Interrupted(where, [], saved=False)


def _extend(root: Path, info: dict, rounds: int) -> list[dict]:
    """Set every run's ``rounds`` to ``rounds`` in ``sweep.json`` (the run directories' ``config.json``
    follow when each run starts again)."""
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
        raise ConfigError(f"--rounds must be a positive integer, got {rounds!r}")
    most = max(e["config"]["rounds"] for e in info["runs"])
    if rounds < most:
        raise ConfigError(f"--resume --rounds {rounds}: the sweep in {root} already has runs of {most} rounds; "
                          f"a sweep can be extended, not shortened")
    entries = [{**e, "config": {**e["config"], "rounds": rounds}} for e in info["runs"]]
    write_sweep(root, entries, {k: v for k, v in info.items() if k != "runs"})
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


def _start_rounds(rundirs) -> list[int]:
    """Where each pending run of a group resumes. A sweep runs one program call at a time, so the runs
    with checkpoints and no summary are those of the call a kill interrupted; its checkpoints may have
    been half written (some runs at round g, others still at g−1). They all resume from the earliest
    of their last checkpoints (each run keeps its previous one), so they run together as before."""
    avail = [rd.checkpoint_rounds() if rd is not None else {} for rd in rundirs]
    started = [max(a) for a in avail if a]
    if not started:
        return [0] * len(rundirs)
    common = min(started)
    return [common if common in a else (max(r for r in a if r < common) if any(r < common for r in a) else 0)
            if a else 0 for a in avail]


class _Group:
    """The pending runs of one discrete combination: one spec, one program, calls of ``chunk`` runs.

    ``members``: ``(config, RunDir or None)`` pairs that share :func:`static_key`.
    """

    def __init__(self, members: list, width: Optional[int] = None):
        self.members = members
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
        self.remaining = sum(c.rounds - s for (c, _), s in zip(members, self.starts))

    def run(self, bar: Progress, state: dict) -> None:
        by_start: dict[int, list[int]] = {}
        for i, s in enumerate(self.starts):
            by_start.setdefault(s, []).append(i)
        width = self.width
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
                for s in slots:
                    if s is not None and s.status == "diverged":
                        state["done"] += 1

    def inputs(self, idx: list[int]):
        """The stacked ``(state, hp, data)`` of the runs ``idx`` (a program call's slots)."""
        return (self._stack([self._state(i) for i in idx]), self._stack([hparams(self.members[i][0]) for i in idx]),
                self._data(idx))

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
        writers = rd.writers(cfg, keep_upto=start if start else None)  # reads metrics.csv before any change
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
