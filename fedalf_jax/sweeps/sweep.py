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
(:func:`.sweep_plan.distinct`): the sweep makes and lists the first of them only, and says so in one line. With ``--run-map map`` (the CPU's default) a run of a sweep gives the metrics of the single
``fedalf run`` with the same config bit for bit (tests/test_sweep.py): the runs are computed one after
another inside the program. With ``vmap`` (the GPU's default) they are batched, the server's QPs of all
runs included, and equal their single runs up to float32 summation order (the tolerance in
tests/test_sweep.py). ``resume=True`` finishes the runs that have no ``summary.json``, each from its last checkpoint.

Memory and disk: without ``--sweep-chunk``, a new sweep sizes its program calls before it starts
(:func:`.sweep_memory.choose_chunk`: the widest call whose compiled program's planned memory, from XLA's
``memory_analysis``, fits the device's memory) and records the choice in ``sweep.json``. A sweep's runs
keep one checkpoint each (``RunDir(keep_previous=False)``): the disk holds one generation of the
runs' checkpoints plus the one being written.

This module runs a sweep (its program calls, run directories, resume, shards); what it runs is planned by
:mod:`.sweep_plan` (the grid's configs, one run per distinct configuration, run names, ``sweep.json``) and
:mod:`.sweep_memory` (the program calls sized to the device's memory, the checkpoints to the disk).
"""

from __future__ import annotations

import contextlib
import math
import sys
from pathlib import Path
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from ..sim.round import ClientData, init_state
from ..runner.build import check_devices, client_rows, device_data, hparams, load_pool, make_spec, pad_rows, pool_key, warn_privacy
from ..config.config import Config, ConfigError
from ..config.identity import from_run
from ..runner.loop import INTERRUPT, Interrupted, Program, Slot, default_run_map, train
from ..runner.progress import Progress
from ..runner.columns import extra_columns, metric_columns
from ..runner.rundir import METRICS, RunDir
from .sweep_memory import _avals, _sds, check_disk, choose_chunk
from .sweep_plan import _planned, distinct, plan, static_key
from .sweep_plan import expand  # noqa: F401 - public: notebooks/explore_runs.ipynb calls sweep.expand
from .sweepdir import read_sweep, write_sweep
from ..runner.writers import read_csv_rows

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
                        chosen = choose_chunk(configs, make_group=_Group, limit=memory_limit, progress=progress,
                                              programs=programs, announce=announce, bar=bar)
                compress = RunDir(root).compress if compress_checkpoints is None else bool(compress_checkpoints)
                plan(configs, root, {**(meta or {}), "chunk": chosen, "compress_checkpoints": compress},
                     same=shard is not None)
                check_disk(configs, root, compressed=compress, announce=announce)
            # chunk None: the one sweep.json records (this process's choice, or that of the slice that planned it)
            return _resume(root, chunk=chunk, progress=progress, shard=shard, rounds=None, programs=programs,
                           compress=compress_checkpoints, bar=bar)
    finally:
        bar.close()


def _check_chunk(chunk) -> None:
    if chunk is not None and (not isinstance(chunk, int) or chunk < 1):
        raise ConfigError(f"--sweep-chunk must be a positive integer, got {chunk!r}")


@contextlib.contextmanager
def _held(root: Path, shard):
    """The sweep's folder locked for this process (shared by the slices of a sharded sweep, each of
    whose runs is locked alone while it runs: its holder line names the slice, which a refusal says), with
    Ctrl-C handled."""
    with RunDir(root).lock(shared=shard is not None, slice=None if shard is None else f"{shard[0]}/{shard[1]}"), \
            INTERRUPT.active():
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


def deployed_score(final: dict) -> tuple[str, Optional[float]]:
    """``(metric, value)`` a run is ranked by, from its final evaluation row (``summary.json``'s ``final``): the
    clients' own models' mean accuracy ``personal_acc`` for an algorithm with a personal model (what it
    deploys), else the global model's ``mean_acc``; the value is ``None`` when it is not finite or the personal
    models diverged (a ``personal_test_loss`` that is not finite: their accuracy is the argmax of NaN logits)."""
    key = "personal_acc" if "personal_acc" in final else "mean_acc"
    value = final.get(key)
    if not isinstance(value, (int, float, np.floating)) or not math.isfinite(value):
        return key, None
    loss = final.get("personal_test_loss", math.nan)
    if key == "personal_acc" and not (isinstance(loss, (int, float, np.floating)) and math.isfinite(loss)):
        return key, None
    return key, float(value)


def _record_best(state: dict, final: dict) -> None:
    """Keep the sweep's best deployed score (:func:`deployed_score`) and the metric it is by in ``state``."""
    key, value = deployed_score(final)
    if value is not None and value > state["best"]:
        state["best"], state["best_by"] = value, key


def _best_text(state: dict) -> str:
    """The progress line's ``best=``: ``0.8100 by personal_acc`` (or ``by mean_acc``), ``-`` before any."""
    return f"{state['best']:.4f} by {state['best_by']}" if state["best"] > -math.inf else "-"


def _best_of_finished(entries, root, state) -> None:
    for e in entries:
        s = RunDir(root / e["dir"]).summary()
        if s is not None and s.get("status") == "done" and s.get("final"):  # final null: eval_every=never
            _record_best(state, s["final"])


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
                read_csv_rows(rd.path / METRICS, columns=metric_columns(cfg.clients, extra_columns(self.spec.algorithm, cfg)))
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
                _record_best(state, row)
                state["done"] += 1
            bar.postfix(runs=f"{state['done']}/{state['total']}", best=_best_text(state))

        for start, idx in sorted(by_start.items()):
            for k in range(0, len(idx), width):
                _check_interrupt(start)
                part = idx[k:k + width]
                slots_idx = part + [part[0]] * (width - len(part))  # padding slots repeat a run
                with contextlib.ExitStack() as held:
                    for i in part:  # each run's folder is this process's while its call runs
                        self.members[i][1].create()
                        held.enter_context(self.members[i][1].lock())
                    with bar.stage("placing runs"):  # their checkpoints read, their inputs stacked
                        inputs = self.inputs(slots_idx)  # checkpoints checked before anything is written
                        _check_interrupt(start)
                        slots = [self._slot(i) for i in part] + [None] * (width - len(part))
                    train(program, slots, *inputs, start=start, progress=bar, on_row=on_row)
                    inputs = None  # this call's data freed before the next call's is made
                for s in slots:
                    if s is not None and s.status == "diverged":
                        state["done"] += 1
                    elif s is not None and s.status == "done" and not s.cfg.evaluates:  # eval_every=never: no row
                        state["done"] += 1  # counted it (on_row)
                        bar.postfix(runs=f"{state['done']}/{state['total']}", eval="never")

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
                             extra=extra_columns(self.spec.algorithm, cfg))
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
        # jax.device_put: the CPU backend keeps a shared (aligned, read-only) pool as it is, no copy (build.device_data)
        return ClientData(*(jax.device_put(a) for a in (x, y, tr, np.stack([r.train_n for r in rows]), te,
                                                        np.stack([r.test_n for r in rows]))))
