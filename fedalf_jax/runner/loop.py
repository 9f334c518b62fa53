"""The run loop: compiled rounds and evaluations, run directories, checkpoints, signals.

One loop serves ``fedalf run`` (one run) and ``fedalf sweep`` (``jax.vmap`` or ``lax.map`` of the same
programs over a leading run axis). Each round is one program call (a ``lax.scan`` of one round,
:func:`fedalf_jax.sim.round.run_rounds`), dispatched when the previous one has finished; every
``eval_every`` rounds the evaluation-only program (:func:`fedalf_jax.sim.train.make_chunk` of length 0)
evaluates every client. Round ``t`` draws its randomness from ``fold_in(run_key, t)``, so a run is
reproducible from its ``config.json`` and resumable from any checkpoint with identical metrics. Checkpoints
are written by a background thread, so they never hold up the rounds. (A round per call costs nothing
measurable against a scan of ``eval_every`` rounds, and computes the same bits:
``experiments/probes/round_dispatch.py``.)

Nothing computed is lost silently: Ctrl-C (SIGINT), SIGTERM, SIGHUP or SIGUSR1 lets the round in flight
finish, evaluates it, writes the metrics and a checkpoint of that round and raises :class:`Interrupted`
carrying the signal; while the data loads or the programs compile it raises at once, leaving the work to
its daemon thread (a second signal leaves at once: everything on disk stays consistent, being written
atomically; :mod:`fedalf_jax.interrupt`). A run that finished no round leaves none of its files
(:func:`run`). The first write that fails (a full disk, a folder made read-only) stops the run with
:class:`RunStopped`, naming what is kept.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import queue
import sys
import threading
import time
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ..runtime.interrupt import INTERRUPT, Interrupted  # noqa: F401 - Interrupted: raised here, imported from here
from ..runtime.interrupt import Abandoned as _Abandoned, interruptible as _interruptible_bare
from ..sim.round import RunState, init_state
from ..privacy import accounting
from . import metrics as M
from .build import build
from ..config.config import Config, ConfigError
from .progress import Progress, stage
from .columns import PERSONAL_KEYS, extra_columns, scalars_of
from .rundir import RunDir
from .writers import WriteError
from .summary import _param_sizes, _participation, _privacy_spent  # noqa: F401 - imported from here too
# the compiled programs (runner/programs.py); their names are imported from here too
from .programs import (_PROGRAMS, _TRACE_OPTIONS, Program, default_run_map, map_runs,  # noqa: F401
                       to_host)


def _interruptible(fn, *args, **kw):
    """:func:`fedalf_jax.interrupt.interruptible` with this thread's trace options carried to its worker
    thread: ``with jax.default_matmul_precision("highest"): fj.run(cfg)`` traces the run's programs at
    "highest" although they are traced there (a thread-local context is not seen by another thread; issue
    47 item 11). Each option whose value here differs from the worker's is set there by JAX's own context
    manager for it, for the call only."""
    values = [(name, getattr(jax.config, name)) for name in _TRACE_OPTIONS if hasattr(jax.config, name)]

    def carried(*a):
        with contextlib.ExitStack() as stack:
            for name, value in values:
                manager = getattr(jax, name.removeprefix("jax_"), None)  # jax.default_matmul_precision, ...
                if manager is not None and getattr(jax.config, name) != value:
                    stack.enter_context(manager(value))
            return fn(*a)

    return _interruptible_bare(carried, *args, **kw)


class RunStopped(ConfigError):
    """A write failed: the loop stopped at once (``message`` says what was kept and how to resume)."""


def abandonable(what: str, progress, fn, *args):
    """``fn(*args)`` under the stage ``what`` of ``progress``, left to finish alone on a signal
    (:class:`_Abandoned`): for loading and compiling, which compute nothing a run keeps."""
    with stage(progress, what):
        return _interruptible(fn, *args, abandon=True)


class Checkpointer:
    """Writes checkpoints on a background thread (one at a time, in order). A failed write is raised by
    the next :meth:`check` or :meth:`wait`; the jobs queued after it are dropped."""

    def __init__(self):
        self._q: queue.Queue = queue.Queue()
        self._err: Optional[BaseException] = None
        self._t = threading.Thread(target=self._work, daemon=True)
        self._t.start()

    def _work(self):
        while True:
            job = self._q.get()
            if job is None:
                self._q.task_done()
                return
            if self._err is None:
                try:
                    job()
                except BaseException as e:  # reported by check() / wait()
                    self._err = e
            self._q.task_done()

    def submit(self, job) -> None:
        self._q.put(job)

    def check(self) -> None:
        """Raise the error of a failed write, if any (without waiting)."""
        if self._err is not None:
            raise self._err

    def busy(self) -> bool:
        """Whether a checkpoint is being written or waits to be."""
        return self._q.unfinished_tasks > 0

    def wait(self) -> None:
        self._q.join()
        self.check()

    def close(self) -> None:
        self._q.put(None)
        self._t.join()


class Schedule:
    """The run loop's decisions after each round, in one place: whether to go on (:meth:`goes_on`), to evaluate
    (:meth:`evaluates`) and compute the train loss (:meth:`train_loss`), and to checkpoint (:meth:`due`: every N
    rounds or every S seconds, ``checkpoint_every``, and at the end)."""

    def __init__(self, cfg: Config, start: int):
        self.cfg, self.start = cfg, start
        self.kind, self.every = cfg.checkpoint_policy
        self.last_round, self.last_time = start, time.monotonic()

    def goes_on(self, t: int, live: bool, interrupted: bool) -> bool:
        """Another round after ``t`` rounds: rounds left, a run live, no signal."""
        return t < self.cfg.rounds and live and not interrupted

    def evaluates(self, t: int, interrupted: bool) -> bool:
        """Evaluate after round ``t``: every ``eval_every`` rounds, the last, and the round a signal cut at
        (never with ``eval_every="never"``)."""
        return self.cfg.evaluates and (t % self.cfg.eval_every == 0 or t == self.cfg.rounds or interrupted)

    def train_loss(self, t: int) -> bool:
        """With an evaluation after round ``t``, also each client's train loss (every ``train_loss_every``
        rounds and the last)."""
        return t % self.cfg.train_loss_every == 0 or t == self.cfg.rounds

    def due(self, t: int, final: bool, interrupted: bool = False) -> bool:
        if self.kind == "never":  # a throw-away run: not at its end, nor after a signal
            return False
        if final or interrupted:
            return True
        if self.kind == "rounds":
            return t - self.last_round >= self.every
        return time.monotonic() - self.last_time >= self.every

    def done(self, t: int) -> None:
        self.last_round, self.last_time = t, time.monotonic()


@dataclasses.dataclass
class Slot:
    """One run in a program call: its config, directory, writers and what it has produced."""

    cfg: Config
    rundir: Optional[RunDir] = None
    writers: list = dataclasses.field(default_factory=list)
    rows: list = dataclasses.field(default_factory=list)
    status: str = "running"
    message: str = ""
    retired: bool = False  # a diverged run whose slot no longer counts
    checkpointed: Optional[int] = None  # the round of the last checkpoint written to disk by this call
    variables: Any = None  # the final global model (host arrays), once the run has ended
    average: Any = None  # the final averaged iterate θ̄ (host arrays) of an eval_average run, once it has ended
    reached: Optional[int] = None  # the last round trained by this call (an eval_every=never run has no rows to say it)
    t0: float = dataclasses.field(default_factory=time.perf_counter)

    @property
    def live(self) -> bool:
        return self.status == "running"


def eval_row(t: int, out, train_loss, sec: float) -> dict:
    """One evaluation row from a chunk's output and the train losses (or None), host arrays of one run."""
    rounds, ev = out
    acc = np.asarray(ev.acc, np.float64)
    row = {"round": t, **M.summarize(acc), "test_loss": float(np.mean(ev.test_loss)),
           "train_loss": math.nan if train_loss is None else float(np.mean(train_loss)), "seconds_per_round": sec}
    if ev.personal_acc is not None:  # each client's own model (Algorithm.personal_model) on its test split
        p = M.summarize(np.asarray(ev.personal_acc, np.float64))
        row.update(zip(PERSONAL_KEYS, (p["mean_acc"], p["std_acc"], p["angle_deg"], p["worst10_acc"],
                                       float(np.mean(ev.personal_loss)))))
    row.update({k: float(np.mean(v)) if np.size(v) else math.nan for k, v in rounds.items()})
    if ev.avg_acc is not None:  # the averaged iterate (--eval-average): columns.average_columns
        a = np.asarray(ev.avg_acc, np.float64)
        row.update({f"avg_{k}": v for k, v in M.summarize(a).items()}, avg_test_loss=float(np.mean(ev.avg_test_loss)))
        row.update({f"avg_acc_{i}": float(x) for i, x in enumerate(a)})
    row["acc"] = acc
    return row


def _take(tree, i: int):
    return jax.tree_util.tree_map(lambda x: x[i], tree)


def _copy_slot(tree, dst: int, src: int):
    return jax.tree_util.tree_map(lambda x: x.at[dst].set(x[src]), tree)


def _record(slots, batched: bool, t: int, out, tl, sec: float, on_row=None) -> None:
    """Round ``t``'s evaluation ``out`` (and train loss ``tl``) as every live slot's row: kept, written by its
    writers, checked for divergence, passed to ``on_row(slot, row)``."""
    for i, slot in enumerate(slots):
        if slot is None or not slot.live:
            continue
        one = (lambda x: _take(x, i)) if batched else (lambda x: x)
        row = eval_row(t, one(out), None if tl is None else one(tl), sec)
        slot.rows.append(row)
        for w in slot.writers:
            w.write_scalars(t, scalars_of(row))
        _check_diverged(slot, row)
        if on_row is not None:
            on_row(slot, row)


def _initial(state, personal: bool):
    """A copy of the initial variables (and of the client states, server state and round, for an algorithm that
    evaluates each client's own model from them): the programs donate the state, round 0 is evaluated later."""
    rest = (state.client_states, state.clients, state.sstate, state.round) if personal else None
    return jax.tree_util.tree_map(jnp.copy, (state.variables, rest))


def _round0(program: Program, state, initial, hp, data):
    """``(state, out, train loss)``: round 0's evaluation of the ``initial`` copy (:func:`_initial`), made after
    the first evaluation so that the first rounds show up sooner (its train loss is a pass over every training
    sample: most of the start-up's time on a CPU); the evaluation-only program returns the rest of the state as
    it was given, and the returned state is ``state`` again."""
    variables0, rest0 = initial
    at0 = state._replace(variables=variables0)
    if rest0 is not None:
        at0 = at0._replace(client_states=rest0[0], clients=rest0[1], sstate=rest0[2], round=rest0[3])
    if program.spec.eval_average:  # the averaged iterate of no round yet: θ_0 (its own buffers: donated)
        at0 = at0._replace(average=jax.tree_util.tree_map(jnp.copy, variables0))
    st, out = program(at0, hp, data, 0)
    tl = program.train_loss(st, hp, data)
    st = st._replace(variables=state.variables, average=state.average)
    if rest0 is not None:
        st = st._replace(client_states=state.client_states, clients=state.clients, sstate=state.sstate,
                         round=state.round)
    return st, to_host(out), to_host(tl)


def train(program: Program, slots: list[Optional[Slot]], state, hp, data, *, start: int,
          progress: Optional[Progress] = None, on_row=None) -> None:
    """Run every slot's rounds from ``start`` to its config's ``rounds`` (all slots share the static
    options), one program call per round, evaluating every ``eval_every`` rounds. ``slots[i] is None``
    marks a padding slot of a batch (its results are dropped). A run whose test loss stops being finite
    is marked diverged; in a batch its slot then recomputes a live run (results dropped) so that no NaN
    loop slows the others. ``on_row(slot, row)`` is called after each evaluation.

    A signal (:mod:`fedalf_jax.interrupt`) while the programs compile raises :class:`Interrupted` at once
    (the compile left to its daemon thread, nothing written); later, the round in flight finishes and the
    chunk is cut there: that round is evaluated (without the train loss, unless due), recorded and
    checkpointed. A resume from it evaluates at the usual rounds again (round ``t``'s randomness is
    ``fold_in(key, t)``: every round computes the same whatever the rounds around it).

    ``eval_every="never"`` (:attr:`Config.evaluates` false): no evaluation at all (no round-0 row, no train
    loss, no rows; a diverged model goes undetected); the checkpoints follow ``checkpoint_every`` round by
    round, the last round's and a signal's included, and the evaluation programs are not compiled."""
    batched = program.batched
    cfg = next(s for s in slots if s is not None).cfg
    schedule = Schedule(cfg, start)
    dirs = [s.rundir.path for s in slots if s is not None and s.rundir is not None]

    def record(t, out, tl, sec):
        _record(slots, batched, t, out, tl, sec, on_row)

    def row0(state, variables0):
        with stage(progress, "evaluating round 0"):
            st, out, tl = _interruptible(lambda: _round0(program, state, variables0, hp, data))
        record(0, out, tl, math.nan)
        return st

    def one_round(state):
        state, metrics = program.compiled_round(state, hp, data)(state, hp, data)
        return jax.block_until_ready(state), (to_host(metrics) if evaluates else None)  # only rows need them

    def evaluate(state):
        state, out = program.compiled(0, state, hp, data)(state, hp, data)
        return state, to_host(out.eval)

    def stopping():
        if progress is not None:
            progress.stopping(INTERRUPT.until)

    def checkpoint_if_due(t, state, say_stopping=False):
        if schedule.due(t, t == cfg.rounds, INTERRUPT.requested):
            if say_stopping and INTERRUPT.requested:
                stopping()
            ckpt.wait()  # the previous one written (or its failure raised) before the next is queued
            _checkpoint(ckpt, slots, state, batched)
            schedule.done(t)

    keeps = cfg.keeps_checkpoints  # False: a throw-away run (checkpoint_every=never)

    def stopped(saved: bool) -> Interrupted:
        e = Interrupted(t, dirs, saved=saved and keeps, signum=INTERRUPT.signum)
        e.checkpoints = keeps  # the command's last line says what a resume does
        return e

    sizes = _param_sizes(state.variables, batched)  # the tensors a mechanism perturbs: privacy_spent
    evaluates = cfg.evaluates  # False: eval_every=never, a run that only trains (and checkpoints)
    ckpt = Checkpointer()
    t = start
    try:
        with INTERRUPT.active():
            INTERRUPT.until = None  # no round in flight (a sweep's previous call may have left its last)
            INTERRUPT.checkpoints = keeps  # what the signal's line promises
            try:  # nothing computed yet: a signal leaves now, the compile left to its thread
                state, hp, data = _interruptible(program.place, state, hp, data, abandon=True)
                _interruptible(program.loop_programs, state, hp, data, evaluates, abandon=True)
            except _Abandoned:
                raise stopped(saved=False) from None
            # The initial variables, evaluated as round 0 after the first evaluation (``row0``).
            personal = program.spec.algorithm.evaluates_own  # round 0 also evaluates the initial states
            variables0 = _initial(state, personal) if start == 0 and evaluates else None
            if progress is not None:
                progress.start_rounds()  # the rate (and ETA) counts rounds from here: not the compile
            pending, t0 = [], time.perf_counter()  # the rounds' metrics since the last evaluation
            while schedule.goes_on(t, any(s is not None and s.live for s in slots), INTERRUPT.requested):
                live = sum(1 for s in slots if s is not None and s.live)
                if progress is not None:
                    progress.begin_call(live, t + 1, t + 1)
                INTERRUPT.until = t + 1
                state, metrics = _interruptible(one_round, state, on_signal=stopping)
                t += 1
                for slot in slots:
                    if slot is not None and slot.live:
                        slot.reached = t
                if progress is not None:
                    progress.end_call(1)
                if not evaluates:  # eval_every=never: a checkpoint when due (at the end, after a signal), no rows
                    ckpt.check()
                    checkpoint_if_due(t, state, say_stopping=True)
                    continue
                pending.append(metrics)
                if not schedule.evaluates(t, INTERRUPT.requested):
                    continue
                if INTERRUPT.requested:
                    stopping()  # the signal came between two rounds
                with stage(progress, f"evaluating round {t}"):
                    state, ev = _interruptible(evaluate, state)
                    sec = (time.perf_counter() - t0) / len(pending)
                    want_tl = schedule.train_loss(t)
                    tl = _interruptible(lambda s: to_host(program.train_loss(s, hp, data)), state) if want_tl else None
                rounds = {k: np.concatenate([m[k] for m in pending], axis=-1) for k in pending[0]}
                if variables0 is not None:
                    state, variables0 = row0(state, variables0), None
                record(t, (rounds, ev), tl, sec)
                state = _retire_diverged(slots, state, hp, data, batched, progress, t)
                ckpt.check()  # a checkpoint that failed stops the run now, not at its end
                checkpoint_if_due(t, state)
                pending, t0 = [], time.perf_counter()
            if variables0 is not None and not (INTERRUPT.requested and t < cfg.rounds):  # no round ran: zero rounds
                state, variables0 = row0(state, variables0), None  # (a signal before the first: nothing to evaluate)
            saving = ("saving the checkpoint" if INTERRUPT.requested else  # the final one said too
                      "writing the checkpoint" if ckpt.busy() else None)
            with stage(progress, saving) if saving else contextlib.nullcontext():
                ckpt.wait()
            _hand_back(slots, state, batched, program.spec.eval_average, evaluates)
            if INTERRUPT.requested and t < cfg.rounds:
                raise stopped(saved=t > start)
    except WriteError as e:
        raise RunStopped(_stopped_message(e, slots, t)) from None
    finally:
        ckpt.close()
        for slot in slots:
            if slot is not None:
                _finish(slot, program.compile_s, sizes)


def _hand_back(slots, state, batched: bool, average: bool, evaluates: bool) -> None:
    """Every slot's final variables (and averaged iterate) on the host; without rows (``eval_every=never``) a
    finished run's final model is checked for being finite instead."""
    for i, slot in enumerate(slots):
        if slot is not None:
            slot.variables = to_host(_take(state.variables, i) if batched else state.variables)
            if average:
                slot.average = to_host(_take(state.average, i) if batched else state.average)
            if not evaluates and slot.live and slot.reached == slot.cfg.rounds:
                _check_finite(slot)  # no row to say it diverged: the final model itself


def _check_diverged(slot: Slot, row: dict) -> None:
    """Mark ``slot`` diverged when the evaluation ``row`` has a test loss that is not finite, the global
    model's or, for an algorithm with a personal model, the clients' own models' (``personal_test_loss``:
    their accuracies would be the argmax of NaN logits)."""
    if not math.isfinite(row["test_loss"]):
        slot.status = "diverged"
        own = f" or check the algorithm's own hyper-parameters ({', '.join(f'--hp {k}={v:g}' for k, v in slot.cfg.hp.items())})" \
            if slot.cfg.hp else ""  # FedMGDA+'s --hp eps=-0.05: an empty QP box, NaN weights by design
        slot.message = (f"the global model diverged by round {row['round']} (test loss not finite); "
                        f"lower --lr or --server-lr{own}")
    elif not math.isfinite(row.get("personal_test_loss", 0.0)):
        slot.status = "diverged"
        slot.message = (f"the clients' personal models diverged by round {row['round']} (personal test loss "
                        f"not finite); lower --lr or the algorithm's own hyper-parameters (--hp)")


def _check_finite(slot: Slot) -> None:
    """Mark ``slot`` diverged when its final global model (host arrays) holds a value that is not finite: the
    check of a run that evaluates nothing (``eval_every="never"``), whose rows cannot say it."""
    leaves = jax.tree_util.tree_leaves(slot.variables)
    if all(np.isfinite(x).all() for x in leaves if np.issubdtype(np.asarray(x).dtype, np.inexact)):
        return
    slot.status = "diverged"
    slot.message = (f"the global model is not finite after round {slot.reached} (not evaluated: eval_every never, "
                    f"so the round it diverged in is unknown); lower --lr or --server-lr")


def _stopped_message(err: WriteError, slots, t: int) -> str:
    """What a failed write leaves: the rows written and the last checkpoint on disk."""
    kept = sorted({f"the checkpoint of round {max(r)}" if (r := s.rundir.checkpoint_rounds()) else "no checkpoint"
                   for s in slots if s is not None and s.rundir is not None})
    last = max((s.rows[-1]["round"] for s in slots if s is not None and s.rows), default=None)
    where = f"; metrics.csv has the rows up to round {last}" if last is not None else ""
    return (f"{err}; the run stopped after round {t}{where}, {' / '.join(kept) or 'nothing else'} is kept: make the "
            f"folder writable (or free space) and continue with --resume")


def _retire_diverged(slots, state, hp, data, batched, progress, t):
    """Slots that diverged this chunk: count their remaining rounds as done, and in a batch point
    their slot at a live run so the program keeps computing finite numbers."""
    for i, slot in enumerate(slots):
        if slot is None or slot.status != "diverged" or slot.retired:
            continue
        slot.retired = True
        if progress is not None:
            progress.advance(slot.cfg.rounds - t)
        if batched:
            src = next((j for j, s in enumerate(slots) if s is not None and s.live), None)
            if src is not None:
                state = _copy_slot(state, i, src)
    return state


def _checkpoint(ckpt: Checkpointer, slots, state, batched: bool) -> None:
    """A host copy of each live run's state now (the next chunk reuses the device buffers), written to
    disk by the checkpoint thread."""
    host = None
    for i, slot in enumerate(slots):
        if slot is None or slot.rundir is None or not slot.live:
            continue
        if host is None:
            host = jax.tree_util.tree_map(lambda x: np.array(x, copy=True), to_host(state))
        s = _take(host, i) if batched else host
        ckpt.submit(lambda slot=slot, s=s: _save_checkpoint(slot, s))


def _save_checkpoint(slot: Slot, state) -> None:
    """Write ``state`` to the slot's run directory (on the checkpoint thread) and note its round: the
    summary says "done" only once the last round's checkpoint is on disk (:func:`_finish`)."""
    slot.rundir.save_checkpoint(state, slot.cfg)
    slot.checkpointed = int(state.round)


def _finish(slot: Slot, compile_s: float, sizes: Optional[dict] = None, rebuilt: Optional[str] = None) -> None:
    """Close the slot's writers and, when its run has ended (all its rounds, or diverged), write its
    ``summary.json``. ``rebuilt``: the summary of a run that had ended without one (:func:`_rebuild_summary`,
    saying so in the summary; its times are unknown)."""
    for w in slot.writers:
        w.close()
    slot.writers = []
    evaluated = slot.cfg.evaluates  # eval_every=never: no rows; the rounds reached say whether it ended
    if evaluated and (not slot.rows or (slot.status == "running" and slot.rows[-1]["round"] < slot.cfg.rounds)):
        return  # interrupted (or nothing ran): no summary, so the run stays resumable
    if not evaluated and slot.status == "running" and slot.reached != slot.cfg.rounds:
        return  # (the same for a run that evaluates nothing)
    if (slot.status == "running" and slot.rundir is not None and rebuilt is None
            and slot.checkpointed != slot.cfg.rounds and slot.cfg.keeps_checkpoints):
        return  # its last checkpoint was not written (the write failed, or a second signal): --resume redoes it
    if slot.status == "running":
        slot.status = "done"
    if slot.rundir is None:
        return
    last = slot.rows[-1] if evaluated else {"round": slot.reached}
    # "evaluated": false (eval_every=never): no final row, "final" null; the run's divergence is not known
    summary = {"status": slot.status, "rounds": slot.cfg.rounds, "round": last["round"], "evaluated": evaluated,
               "final": {k: v for k, v in last.items() if k != "acc"} if evaluated else None,
               "compile_s": compile_s, "wall_s": time.perf_counter() - slot.t0}
    if rebuilt:
        summary.update(compile_s=None, wall_s=None, rebuilt=rebuilt)
    if slot.message:
        summary["message"] = slot.message
    if slot.cfg.privacy:
        summary["privacy"] = slot.cfg.privacy
    spent = _privacy_spent(slot.cfg, int(last["round"]), sizes)
    if spent:
        summary["privacy_spent"] = spent
    summary["participation"] = _participation(slot, int(last["round"]))
    try:
        slot.rundir.write_summary(summary)
    except WriteError as e:
        slot.status = "running"  # no summary: the run stays resumable
        raise RunStopped(f"{e}; the run finished, its metrics and final checkpoint are kept: make the folder "
                         f"writable and rerun with --resume to write the summary") from None


# ---- one run ------------------------------------------------------------------------------------

def rows_of(rd: RunDir) -> list[dict]:
    """The evaluation rows of a run directory, as :func:`run` returns them."""
    m = rd.metrics()
    acc = rd.client_accuracies(m)
    keys = [k for k in m if not k.startswith("acc_")]
    return [{**{k: (int(m[k][j]) if k == "round" else float(m[k][j])) for k in keys}, "acc": acc[j]}
            for j in range(len(m.get("round", [])))]


def say(msg: str) -> None:
    """A one-line notice on stderr (what the loop did that the user should know)."""
    print(f"fedalf: {msg}", file=sys.stderr, flush=True)


def run(cfg: Config, *, progress: bool = True, resume: bool = False, overwrite: bool = False,
        announce: bool = False, full: bool = False):
    """Run ``cfg`` (writing a run directory when ``cfg.out`` is set); returns one dict per evaluation.

    ``resume``: continue from the checkpoint in ``cfg.out``, which must have been written by a config
    of the same identity (:meth:`Config.identity`; rounds, cadences and out may differ), or from round
    0 when there is none yet (it says so). Without ``resume``, a folder that already holds a run is
    refused unless ``overwrite`` (its run files are removed first). The folder is locked while the run
    writes it. Raises ``FloatingPointError`` if the model diverges (after writing ``summary.json``),
    :class:`Interrupted` after a Ctrl-C (once the metrics and a checkpoint are saved) and
    :class:`RunStopped` when a write fails. ``announce``: say where the run goes once its data loaded.
    A run that fails or is stopped before its first round finished leaves none of its files (and the
    folder is removed again if this call created it), so the same command starts it again.
    ``full``: return the run's :class:`Slot` (its rows and its final model, ``variables``; ``None`` when
    nothing was left to run) instead of the rows.
    """
    rd = RunDir(cfg.out) if cfg.out else None
    writer = jax.process_index() == 0  # under jax.distributed every process runs the loop; one writes
    if rd is None or not writer:
        with INTERRUPT.active():
            slot = _run(cfg, rd, writer, progress=progress, resume=resume, announce=announce)
        return slot if full else slot.rows
    created = [p for p in (rd.path, *rd.path.parents) if not p.exists()]  # the folders this call makes
    with rd.claim(resume=resume, overwrite=overwrite), INTERRUPT.active():
        had = rd.holds_run()  # a --resume of a folder with files (else claim left none)
        try:
            slot = _run(cfg, rd, writer, progress=progress, resume=resume, announce=announce)
            return slot if full else slot.rows
        except BaseException as e:
            if not had and not rd.started():  # no round finished: nothing of this call's run is left behind
                with contextlib.suppress(WriteError):  # (the error in flight is the one to report)
                    rd.remove_run_files()
                if isinstance(e, Interrupted):
                    e.kept = False
            if created:
                rd.remove_if_unused(upto=created[-1])
            raise


def _rebuild_summary(cfg: Config, rd: RunDir, state, writer: bool) -> Slot:
    """A run whose checkpoint is at its last round but whose ``summary.json`` is gone (deleted, or its
    write failed): the summary its end wrote (:func:`_finish`: status, final row, privacy spent), rebuilt
    from ``metrics.csv`` and the checkpoint, saying so in one line; one line saying what to do when
    ``metrics.csv`` has no row of the last round. Raises ``FloatingPointError`` for a diverged run, as
    its end did."""
    rows = rows_of(rd)
    if cfg.evaluates and (not rows or rows[-1]["round"] != cfg.rounds):
        have = f"its last row is of round {rows[-1]['round']}" if rows else "it has no rows"
        raise ConfigError(f"{rd.path} has the checkpoint of its last round ({cfg.rounds}) but no summary.json, and "
                          f"its metrics.csv cannot rebuild it ({have}): restore summary.json or metrics.csv, or "
                          f"run it again with --overwrite")
    slot = Slot(cfg, rd if writer else None, rows=rows, variables=to_host(state.variables), reached=cfg.rounds)
    for row in rows if cfg.evaluates else ():  # eval_every=never: no row to say it diverged
        _check_diverged(slot, row)
        if slot.status == "diverged":
            break
    if not cfg.evaluates:
        _check_finite(slot)  # (the final model's values say it)
    if writer:
        _finish(slot, 0.0, _param_sizes(state.variables),
                rebuilt=f"from metrics.csv and the checkpoint of round {cfg.rounds} (summary.json was missing)")
        say(f"{rd.path} had ended ({slot.status}, round {cfg.rounds}) without its summary.json: rebuilt it from "
            f"metrics.csv and the checkpoint")
    if slot.status == "diverged":
        raise FloatingPointError(slot.message)
    return slot


def _run(cfg: Config, rd: Optional[RunDir], writer: bool, *, progress: bool, resume: bool,
         announce: bool = False) -> Slot:
    """The run: its bar from the start, so that loading the data and a checkpoint show with their clocks;
    a signal while they load stops it at once (nothing computed is lost: :class:`Interrupted`)."""
    bar = Progress(cfg.rounds, enabled=progress and writer, desc="fedalf run", delay=1.0)  # a stage of > 1 s shows
    kept = False  # the bar's line stays once rounds ran (else it is erased: the command's last line says why)
    try:
        with bar.warnings_above():  # e.g. a resume's notice about a damaged checkpoint: a line of its own
            try:
                exp, state = abandonable("loading data", bar, _prepare, cfg)
            except _Abandoned:
                raise Interrupted(0, [rd.path] if rd is not None else [], saved=False,
                                  signum=INTERRUPT.signum) from None
            if announce and rd is not None and writer:
                bar.write(f"fedalf: writing the run to {rd.path}")
            start = 0
            slot = Slot(cfg, rd if writer else None)
            if rd is not None:
                found = None
                if resume:
                    try:
                        found = abandonable("loading checkpoint", bar, _load, cfg, rd, state)
                    except _Abandoned:
                        raise Interrupted(0, [rd.path], saved=False, signum=INTERRUPT.signum) from None
                if found is not None:
                    state = found  # checked against cfg's identity
                    start = int(state.round)
                    if start > cfg.rounds:
                        raise ConfigError(f"the checkpoint is at round {start}, past --rounds {cfg.rounds}")
                    if start == cfg.rounds and rd.status() == "running":  # it ended, but its summary.json is gone
                        return _rebuild_summary(cfg, rd, state, writer)
                if resume and (ended := _ended(cfg, rd)) is not None:  # its checkpoint, if any, may be older
                    if writer and (ended.rows or ended.reached):  # (a plain --resume never
                        # re-opens an ended run; without rows, the command's error says what is wrong)
                        at = ended.reached or ended.rows[-1]["round"]  # reached: an unevaluated run's (never)
                        more = " (--rounds N continues it)" if ended.status == "done" else ""
                        bar.write(f"fedalf: the run in {rd.path} has already ended ({ended.status} at round {at}): "
                                  f"nothing to run, nothing rewritten{more}")
                    if ended.status == "diverged":
                        raise FloatingPointError(ended.message or f"the run in {rd.path} diverged")
                    return ended
                if found is not None and start < cfg.rounds and not cfg.keeps_checkpoints:
                    raise ConfigError(f"the run in {rd.path} keeps checkpoints (its newest of round {start}), and "
                                      f"checkpoint_every=never on its resume would leave that one as its model, "
                                      f"older than its last round {cfg.rounds}: continue it with --checkpoint-every "
                                      f"N (rounds) or Ns (seconds), or start a throw-away run with --overwrite or "
                                      f"another --out")
                if found is None and resume and writer:
                    why = ("it keeps none: checkpoint_every=never" if not cfg.keeps_checkpoints else
                           "no checkpoint yet")
                    bar.write(f"fedalf: nothing to resume in {rd.path} ({why}): starting from round 0")
                if writer:
                    slot.writers = rd.writers(cfg, keep_upto=start if start else None,  # reads metrics.csv first
                                              extra=extra_columns(exp.spec.algorithm, cfg))
                    rd.clear_summary()
                    rd.write_config(cfg)
                    rd.write_clients(exp.source, exp.partition.summary(exp.labels))
            bar.set_initial(start)
            prog = Program(exp.spec, progress=bar)

            def show(slot, row):
                try:
                    eps = accounting.epsilon_spent(cfg, int(row["round"]))
                except Exception:  # noqa: BLE001 - the progress line never stops a run (summary.json says why)
                    eps = None
                bar.postfix(acc=f"{row['mean_acc']:.4f}", angle=f"{row['angle_deg']:.2f}°",
                            s_round=f"{row['seconds_per_round']:.3f}", **({} if eps is None else {"eps": f"{eps:.3g}"}))

            if not cfg.evaluates:
                bar.postfix(eval="never")  # no accuracy will show: say why
            try:
                train(prog, [slot], state, exp.hp, exp.data, start=start, progress=bar, on_row=show)
            finally:
                kept = bool(slot.rows) or slot.reached is not None
    finally:
        bar.close(failed=not kept)
    if slot.status == "diverged":
        raise FloatingPointError(slot.message)
    return slot


def _ended(cfg: Config, rd: RunDir) -> Optional[Slot]:
    """The ended run of ``rd`` (done or diverged, its summary.json of ``cfg.rounds`` rounds), whatever
    checkpoint it has (none: ``checkpoint_every=never``; or one older than its end, written before a
    resume with ``never``): nothing to run; ``None`` otherwise."""
    s = rd.summary()
    if s is None or s.get("rounds") != cfg.rounds or s.get("status") not in ("done", "diverged"):
        return None
    return Slot(cfg, rd, rows=rows_of(rd), status=s["status"], message=s.get("message", ""),
                reached=s.get("round") if s.get("evaluated") is False else None)  # eval_every=never: no rows


def _prepare(cfg: Config):
    """The experiment of ``cfg`` (its data on the device) and its initial state."""
    exp = build(cfg)
    return exp, init_state(exp.spec, cfg.seed)


def _load(cfg: Config, rd: RunDir, state):
    """The state of ``rd``'s usable checkpoint (``state``: its shapes), or ``None`` when it has none."""
    found = rd.usable_checkpoint(cfg)
    return None if found is None else rd.load_checkpoint(state, round=found[0])
