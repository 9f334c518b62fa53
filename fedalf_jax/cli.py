"""The ``fedalf`` command line: ``fedalf run``, ``fedalf sweep``, ``fedalf report`` and ``fedalf bench``.

Every user error (bad flag, bad value, missing data or config file) ends in one line on stderr and
a non-zero exit, never a traceback. Set ``FEDALF_DEBUG=1`` to see the traceback anyway.

The commands are here; their flags, help texts and parser, and the config the flags describe, are in
:mod:`fedalf_jax.cli_options` (its names that code and tests import from here are re-exported).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import sys
import time
import warnings
from pathlib import Path

from .cli_declared import expand as expand_declared
from .cli_options import (  # noqa: F401 - re-exported: fedalf_jax.cli's names before the split
    _HELP, FLAG_GROUPS, SWEEP_SINGLE, _alg_arg_value, _given, build_parser, config_from_args, version_text)
from .config import config as C
from .config.config import CONTINUOUS, Config, ConfigError
from .config.identity import from_run
from .runtime.interrupt import INTERRUPT, PARENT_ENV, Interrupted, signal_name
from .runtime.notices import shown as shown_notices


def default_out(cfg: Config) -> str:
    """``runs/<algorithm>-<model>-<timestamp>`` (a run without --out still keeps what it computes); a
    ``module:attribute`` name's ``:`` and ``/`` become ``_`` (no colon or extra folder in the name)."""
    def plain(name: str) -> str:
        return name.replace(":", "_").replace("/", "_").replace("\\", "_")
    stem = Path("runs") / f"{plain(cfg.algorithm)}-{plain(cfg.model)}-{time.strftime('%Y%m%d-%H%M%S')}"
    out, k = stem, 1
    while out.exists():
        k += 1
        out = stem.with_name(f"{stem.name}-{k}")
    return str(out)


def init_distributed(args) -> None:
    """``jax.distributed.initialize`` from the flags, with CPU collectives over gloo (before any JAX work)."""
    explicit = (args.coordinator, args.num_processes, args.process_id)
    if not getattr(args, "distributed", False) and all(v is None for v in explicit):
        return
    if not args.distributed and any(v is None for v in explicit):
        raise ConfigError("--coordinator, --num-processes and --process-id go together (or use --distributed)")
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    kw = {} if args.distributed else dict(coordinator_address=args.coordinator, num_processes=args.num_processes,
                                           process_id=args.process_id)
    jax.distributed.initialize(**kw)


def _explicit(args) -> set:
    """The options given explicitly: the flags, and a ``--config`` file's values other than the defaults (a run's
    config.json records every option: re-running it says nothing of the defaults it holds)."""
    from .sweeps.sweep_plan import non_default
    return set(_given(args)) | (non_default(Config.load(args.config).to_dict()) if args.config else set())


def _cmd_run(args) -> int:
    from .runner.loop import run
    from .runner.rundir import RunDir
    from .sweeps.sweep_plan import say_unread
    cfg = config_from_args(args)
    if not (args.resume and args.out and RunDir(args.out).has_config()):  # a resumed run said it when it started
        say_unread([cfg], _explicit(args))
    announce = cfg.out is None
    if announce:
        cfg = cfg.replace(out=default_out(cfg))
    init_distributed(args)
    rows = run(cfg, progress=not args.no_progress, resume=args.resume, overwrite=args.overwrite, announce=announce)
    where = f" -> {cfg.out}" if cfg.out else ""
    if not cfg.evaluates:  # --eval-every never: nothing evaluated to print
        print(f"round {cfg.rounds}: not evaluated (--eval-every never){where}")
        return 0
    if not rows:  # an ended run whose metrics.csv lost its rows (a run that computes writes at least one)
        raise ConfigError(f"the run in {cfg.out} has ended but its metrics.csv holds no evaluation; restore it, "
                          f"or run it again with --overwrite")
    last = rows[-1]
    print(f"round {last['round']}: mean_acc {last['mean_acc']:.4f}  angle {last['angle']:.4f} rad "
          f"({last['angle_deg']:.2f}°){where}")
    return 0


def _cmd_sweep(args) -> int:
    if args.processes != 1:
        return _sweep_in_processes(args)
    _say_sweep(_sweep(args), args.out)
    return 0


def _sweep(args) -> list:
    """The sweep (or its --shard slice) the flags describe, started or resumed; its runs' results."""
    from .sweeps import sweep as S
    from .sweeps.sweep_plan import distinct, say_unread
    if args.sweep_chunk is not None and args.sweep_chunk < 1:
        raise ConfigError(f"--sweep-chunk must be a positive integer, got {args.sweep_chunk}")
    given = _given(args)
    given.pop("out", None)  # the sweep's folder, not a run option
    given.update({k: [given[k]] for k in SWEEP_SINGLE if k in given})  # one value for every run
    given.update({f"hp.{k}": v for k, v in given.pop("hp", {}).items()})  # one grid axis per own hyper-parameter
    given.update({f"arg.{k}": v for k, v in given.pop("alg_args", {}).items()})  # one per factory argument (static)
    shard = S.parse_shard(args.shard)
    planned = (Path(args.out) / "sweep.json").is_file()
    rounds = None
    if args.resume and planned and set(given) == {"rounds"} and not (args.seeds or args.config):
        if len(given["rounds"]) != 1:
            raise ConfigError("--resume --rounds N extends every run of the sweep to N rounds: give one value")
        rounds = given.pop("rounds")[0]
    if args.resume and planned:
        if given or args.seeds or args.config:  # the flags must describe the sweep that is there
            configs = _sweep_configs(args, given)
            there = [Config.from_dict({**from_run(r["config"]), "out": None}) for r in S.read_sweep(args.out)["runs"]]
            # a sweep.json lists the distinct runs (sweep_plan.distinct); one written before lists every combination
            if all(sorted(map(_resolved, cs)) != sorted(map(_resolved, there))
                   for cs in (distinct(configs)[0], configs)):
                raise ConfigError(f"--resume: the options describe other runs than the sweep in {args.out}; "
                                  f"resume it with only --out (and --rounds N to extend it, --sweep-chunk, "
                                  f"--no-progress)")
        res = S.resume(args.out, chunk=args.sweep_chunk, progress=not args.no_progress, shard=shard, rounds=rounds,
                       compress_checkpoints=args.compress_checkpoints)
    elif args.resume and not (given or args.seeds or args.config):
        raise ConfigError(f"--resume: {Path(args.out) / 'sweep.json'} not found; give the sweep's options to start it")
    else:  # a new sweep (also --resume of a sweep killed before it wrote sweep.json)
        configs = _sweep_configs(args, given)
        say_unread(configs, _explicit(args))
        meta = {"argv": sys.argv[1:], "continuous": [k for k in given if (k in CONTINUOUS or k.startswith("hp."))
                                                     and len(given[k]) > 1]}
        res = S.sweep(configs, args.out, chunk=args.sweep_chunk, progress=not args.no_progress, meta=meta,
                      shard=shard, compress_checkpoints=args.compress_checkpoints)
    return res


def run_status_words(status: str, folder) -> str:
    """A run's status as the sweep's last line says it: a ``running`` one (no summary) whose lock names only
    processes that have ended is ``stopped (resume with --resume)`` (stopped, or killed: a child killed by
    SIGKILL), not ``running``; the others as they are."""
    from .runner.rundir import writer_ended
    return "stopped (resume with --resume)" if status == "running" and writer_ended(folder) else status


def _say_sweep(res: list, out) -> None:
    """The sweep's last lines: its runs counted by status, and the best run."""
    from .sweeps import sweep as S
    counts: dict[str, int] = {}
    for r in res:
        status = run_status_words(r["status"], r["dir"])
        counts[status] = counts.get(status, 0) + 1
    # ranked by what each run's algorithm deploys: its clients' own models (personal_acc) or the global model
    done = [(r, *S.deployed_score(r["final"])) for r in res if r["status"] == "done" and r["final"]]
    best = max((d for d in done if d[2] is not None), key=lambda d: d[2], default=None)
    print(f"{len(res)} runs: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) + f" -> {out}")
    if best is not None:
        r, key, value = best
        angle = r["final"]["personal_angle_deg" if key == "personal_acc" else "angle_deg"]
        beside = f"; global mean_acc {r['final']['mean_acc']:.4f}" if key == "personal_acc" else ""
        print(f"best: {r['name']} {key} {value:.4f} angle {angle:.2f}° (by {key}{beside})")


def _sweep_in_processes(args) -> int:
    """``--processes P``: the sweep as P processes, this one the slice ``0/P`` and P − 1 children (``python -m
    fedalf_jax.cli`` with the same flags, ``--shard i/P --processes 1 --no-progress``), each of one-run program
    calls (``--sweep-chunk 1`` unless given), all writing into ``--out`` (a sharded sweep's slices share it:
    the plan is made once, under its lock). A signal that stops this process, while it computes its own slice
    or once that is done and it waits for the children, is passed on to the children; this process waits for
    them to save their rounds in flight and leaves as a stopped sweep does (128 + the signal's number, the line
    that resumes every slice). The last lines count every run of the sweep once all have ended. A child that
    fails is named, with its last line, and the command exits 1."""
    import subprocess
    import tempfile
    from .sweeps import sweep as S
    p = args.processes
    if p < 1:
        raise ConfigError(f"--processes must be a positive integer, got {p}")
    if args.shard is not None:
        raise ConfigError("--processes starts its own --shard slices (i/P); give --processes or --shard, not both")
    chunk = ["--sweep-chunk", "1"] if args.sweep_chunk is None else []
    base = [*args.argv, *chunk, "--no-progress", "--processes", "1"]  # the last --processes given wins
    groups = cpu_groups(sorted(os.sched_getaffinity(0)), p) if hasattr(os, "sched_getaffinity") else None
    logs, children = [], []
    try:
        for i in range(1, p):
            log = tempfile.TemporaryFile()
            logs.append(log)
            # (its parent's pid: a child stops, its round saved, once this process has ended: interrupt.watch_parent)
            env = {**os.environ, PARENT_ENV: str(os.getpid()), **({CPUS_ENV: ",".join(map(str, groups[i]))}
                                                                   if groups else {})}
            # In a session of their own: a signal to this process's group (a terminal's Ctrl-C, `timeout`)
            # reaches them once, passed on by this process; twice, the second would make them leave unsaved.
            children.append(subprocess.Popen([sys.executable, "-m", "fedalf_jax.cli", *base, "--shard", f"{i}/{p}"],
                                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                                             start_new_session=True, env=env))
        args.shard, args.processes = f"0/{p}", 1
        args.sweep_chunk = 1 if args.sweep_chunk is None else args.sweep_chunk
        with _pinned(groups[0] if groups else None):
            _sweep(args)
    except Interrupted as e:  # pass the signal on, let the children save their rounds in flight, then say it
        _stop_children(children, e.signum)
        args.shard = None  # the line that continues it resumes every slice
        raise
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt) and INTERRUPT.requested:  # a signal outside a run loop: as above
            raise _stopped(children, INTERRUPT.signum, args) from None
        for c in children:
            if c.poll() is None:
                c.terminate()
        raise
    signum = _wait_children(children)
    if signum is not None:  # a signal while waiting: passed on, the children saved; said as above
        raise _stopped(children, signum, args)
    failed = []
    for i, (c, log) in enumerate(zip(children, logs), start=1):
        if c.wait() != 0:
            log.seek(0)
            lines = [ln for ln in log.read().decode(errors="replace").splitlines() if ln.strip()]
            failed.append(f"slice {i}/{p} {exit_description(c.returncode, lines[-1] if lines else None)}")
        log.close()
    _say_sweep(S.results(args.out), args.out)
    if failed:
        print(f"fedalf sweep: error: {'; '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def exit_description(code: int, last: str | None = None) -> str:
    """How a child process ended, for its parent's line: ``killed by SIGKILL`` (a negative status: the
    signal that ended it, its last line left out: not what ended it), else ``exited 1: LAST LINE``."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return f"exited {code}: {last if last else '(no output)'}"


CPUS_ENV = "FEDALF_CPUS"  # a --processes child's cores ("2,3"), set by its parent: it pins itself before JAX starts


def cpu_groups(cpus: list, p: int):
    """The cores of ``--processes p``, one group of consecutive ones per process (``cpus``: this process's,
    in order), or ``None`` where there are fewer cores than processes (then none is pinned). Each process pinned
    to its own cores, XLA:CPU sizes its thread pool to them: the processes' threads do not contend for the same
    cores, and a process of one core computes in one thread, without waking another at every parallel step
    (3-run FedLF MLP sweep, 2 processes on 2 cores: ~1,500 fewer futex calls a round, docs/lab/benchmarks.md)."""
    if p < 2 or len(cpus) < p:
        return None
    size, extra = divmod(len(cpus), p)
    out, at = [], 0
    for i in range(p):
        n = size + (i < extra)
        out.append(list(cpus[at:at + n]))
        at += n
    return out


@contextlib.contextmanager
def _pinned(cpus):
    """This process on ``cpus`` (``None``: as it is) while its own slice runs; as before afterwards (a caller of
    ``main`` in-process, a test's worker, keeps its cores)."""
    if not cpus:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def _pin_from_env() -> None:
    """A ``--processes`` child: pinned to the cores its parent gave it (:func:`cpu_groups`), before JAX starts."""
    given = os.environ.get(CPUS_ENV, "").strip()
    if given and hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(0, {int(c) for c in given.split(",")})
        except (ValueError, OSError):  # a core this process may not use: run where the OS puts it
            pass


def _stop_children(children, signum) -> None:
    """``signum`` passed on to every child still running, and each waited for (it saves its round in flight)."""
    for c in children:
        if c.poll() is None:
            c.send_signal(signal.SIGINT if signum is None else signum)
    for c in children:
        c.wait()


def _stopped(children, signum, args) -> Interrupted:
    """What stops a ``--processes`` sweep on a signal outside its own slice's run loop (while this process
    waits for the children, or plans): the signal passed on, the children waited for, and the command's last
    line that of a stopped sweep (main), its continue line for every slice."""
    _stop_children(children, signum)
    args.shard = None
    e = Interrupted(0, [], saved=True, signum=signum)
    e.checkpoints = _keeps_checkpoints(args.out)
    return e


def _wait_children(children):
    """Waits for every child to end: ``None`` once all have, or the signal that stopped this process meanwhile
    (its handler, :data:`INTERRUPT`, raises ``KeyboardInterrupt`` outside a run loop; a signal it only recorded
    is seen within 0.2 s)."""
    try:
        while not INTERRUPT.requested:
            if all(c.poll() is not None for c in children):
                return None
            time.sleep(0.2)
    except KeyboardInterrupt:
        if not INTERRUPT.requested:  # not a signal's (raised by hand)
            raise
    # (a signal landing between a child's reaping and Popen recording its status: poll() then says 0; that
    # child has ended, which is all the stopping path asks)
    name, live = signal_name(INTERRUPT.signum), sum(c.poll() is None for c in children)
    print(f"\nfedalf sweep: {name}: passed on to the {live} other process(es) still running; waiting for them to "
          f"save their rounds in flight ({name} again to leave now)", file=sys.stderr, flush=True)
    return INTERRUPT.signum


def _keeps_checkpoints(out) -> bool:
    """Whether the runs of the sweep in ``out`` keep checkpoints (``--checkpoint-every`` is one value for all)."""
    from .sweeps import sweep as S
    try:
        runs = S.read_sweep(out)["runs"]
    except (OSError, ConfigError, ValueError):  # stopped before the plan: the continue line starts it again
        return True
    return all(Config.from_dict({**from_run(r["config"]), "out": None}).keeps_checkpoints for r in runs)


def _resolved(cfg: Config) -> str:
    """A sweep run's options with the per-algorithm defaults resolved, as its identity has them (``--rho 0.01``
    names fedalf's default), for comparing the flags of ``sweep --resume`` with ``sweep.json``."""
    ident = {k: v for k, v in cfg.identity().items() if k in cfg.to_dict()}
    return json.dumps({**cfg.to_dict(), **ident, "out": None}, sort_keys=True)


def _sweep_configs(args, given: dict) -> list:
    from .sweeps.sweep_plan import expand
    base = Config.load(args.config).to_dict() if args.config else {}
    seeds = args.seeds if args.seeds is not None else [base.get("seed", 0)]
    return expand(base, given, seeds)


def _cmd_report(args) -> int:
    from .reporting import report
    res = report(args.paths, args.out, last=args.last)
    for line in res.get("messages", []):
        print(line)
    print(f"report: {res['markdown']}")
    return 0


def _cmd_bench(args) -> int:
    from . import bench as B
    from .bench import bench, bench_sweep, format_bench, format_bench_sweep
    if args.repeats is not None and args.repeats < 1:
        raise ConfigError(f"--repeats must be a positive integer, got {args.repeats}")
    if args.sweep_width and any(w < 1 for w in args.sweep_width):
        raise ConfigError(f"--sweep-width values must be positive integers, got {args.sweep_width}")
    for flag, v in (("--pytorch", args.pytorch), ("--against", args.against)):
        if v and (args.suite or args.sweep_width):
            other = "--suite" if args.suite else "--sweep-width"
            raise ConfigError(f"{flag} times one round; it does not go with {other}")
    if args.suite:
        return _bench_suite(args)
    for flag, v in (("--part", args.part), ("--budget", args.budget)):
        if v is not None:
            raise ConfigError(f"{flag} goes with --suite")
    if args.json:  # its folder made, and checked writable, before minutes of measuring
        _json_ready(Path(args.json))
    cfg = config_from_args(args)
    if not cfg.evaluates and args.sweep_width:  # its timed calls are --eval-every rounds and an evaluation
        raise ConfigError("fedalf bench --sweep-width times calls of --eval-every rounds and their evaluation: give "
                          "--eval-every a number of rounds, not never (a plain fedalf bench times rounds alone)")
    if args.against is not None:
        cfg.replace(algorithm=args.against)  # a wrong name: one line now, before anything is built
    if args.pytorch and "algorithm" not in _given(args) and not (args.config and "algorithm" in json.loads(
            Path(args.config).read_text())):
        cfg = cfg.replace(algorithm="fedavg")  # the PyTorch loop is FedAvg's
    if args.sweep_width and "model" not in _given(args) and not (args.config and "model" in json.loads(
            Path(args.config).read_text())):
        cfg = cfg.replace(model="mlp")  # CPU-sized: the CNN's widths only when asked (--model cnn)
    repeats = 5 if args.repeats is None else args.repeats
    partial: dict = {}
    try:
        with B.ctrl_c_stops():
            if args.sweep_width:
                res = B.stoppable(bench_sweep, cfg, widths=args.sweep_width, repeats=repeats, progress=B.say,
                                  partial=partial)
            else:
                if args.depth_rounds < 1:
                    raise ConfigError(f"--depth-rounds must be a positive integer, got {args.depth_rounds}")
                import jax
                depth = args.depth_width or ([1, 8] if jax.default_backend() != "cpu" else [0])
                if any(w < 0 for w in depth):
                    raise ConfigError(f"--depth-width values must be positive integers (0: skip), got {depth}")
                if not cfg.evaluates and any(w > 0 for w in depth):  # bench.depth spreads one over eval_every rounds
                    raise ConfigError("fedalf bench's server-depth count (--depth-width) counts an evaluation every "
                                      "--eval-every rounds: give it a number of rounds, not never, or --depth-width 0")
                res = B.stoppable(bench, cfg, repeats=repeats, sequential=not args.no_sequential,
                                  depth_widths=[w for w in depth if w > 0], depth_rounds=args.depth_rounds,
                                  progress=B.say, partial=partial, pytorch=args.pytorch, against=args.against)
    except B.BenchStopped as e:  # Ctrl-C: the table of what was measured, exit 130 (SIGTERM: 143)
        res = {**partial, "interrupted": True}
        done = bool(res.get("widths")) if args.sweep_width else "compiled_s_per_round" in res
        if done:
            print(format_bench_sweep(res) if args.sweep_width else format_bench(res))
        if args.json:
            Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
        what = "the table above holds what was measured" if done else "nothing was measured yet"
        print(f"fedalf bench: interrupted{_by(e)}: {what}" + (f" (also in {args.json})" if args.json else ""),
              file=sys.stderr)
        return _bench_exit(e)
    print(format_bench_sweep(res) if args.sweep_width else format_bench(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


def _json_ready(path: Path) -> None:
    """``--json FILE``'s folder exists (made if not) and takes a file: one line now, not a traceback after
    the measuring."""
    if path.is_dir():
        raise ConfigError(f"--json {path} is a folder; give a file name, e.g. {path / 'bench.json'}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--json {path}: cannot create its folder ({e.strerror or e})") from None
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ConfigError(f"--json {path} cannot be written (no permission); give another file")


def _by(e) -> str:
    """`` by SIGTERM`` when another signal than Ctrl-C stopped the bench, else ``""``."""
    return "" if e.signum == signal.SIGINT else f" by {signal_name(e.signum)}"


def _bench_exit(e) -> int:
    """128 + the signal's number (130 after a Ctrl-C, 143 after SIGTERM); with the abandoned measurement
    still computing on its thread, leave at once (no interpreter teardown under a running XLA computation:
    that ended in a segfault)."""
    if e.worker is not None and e.worker.is_alive():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(e.exit_status)
    return e.exit_status


def _bench_suite(args) -> int:
    """``fedalf bench --suite NAME --out DIR``: the suite's measurements, each JSON and table line as it lands."""
    from .bench import SUITE_PARTS, bench_suite
    if args.json:
        raise ConfigError("--json writes one measurement; --suite writes one JSON per measurement into --out")
    if not args.out:
        raise ConfigError("--suite needs --out DIR, the folder for its JSON files")
    if args.budget is not None and not args.budget > 0:
        raise ConfigError(f"--budget must be a positive number of seconds, got {args.budget}")
    over = {}
    if args.config:  # only the options the file sets replace the suite's
        Config.load(args.config)  # one-line errors for a missing or bad file
        over = {k: v for k, v in json.loads(Path(args.config).read_text()).items() if k not in C.DERIVED_KEYS}
    over.update(_given(args))
    over.pop("out", None)
    from . import bench as B
    try:
        with B.ctrl_c_stops():
            records = bench_suite(args.suite, args.out, over, parts=args.part or SUITE_PARTS, widths=args.sweep_width,
                                  repeats=args.repeats, sequential=not args.no_sequential, budget_s=args.budget,
                                  echo=lambda line: print(line, flush=True), progress=B.say)
    except B.BenchStopped as e:  # its lines are printed and in table.txt, each measurement's JSON written
        n = len(e.records or [])
        print(f"fedalf bench: interrupted{_by(e)}: {n - 1} measurement{'s' if n != 2 else ''} done, the one in flight "
              f"recorded as interrupted -> {args.out}", file=sys.stderr)
        return _bench_exit(e)
    print(f"{len(records)} measurements -> {args.out}")
    return 0


def _one_line_warning(message, category, filename, lineno, file=None, line=None):
    print(f"fedalf: warning: {message}", file=sys.stderr if file is None else file)


def invoked() -> str:
    """The command as this process was started, to paste into the same shell: ``fedalf`` when that name
    finds this very script, else its path as given (``.venv/bin/fedalf``), or ``PYTHON -m fedalf_jax.cli``."""
    main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if getattr(main_spec, "name", None) == "fedalf_jax.cli":
        return f"{shlex.quote(_shortest(sys.executable))} -m fedalf_jax.cli"
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) in ("fedalf", "fedalf.exe"):
        return shlex.quote(_shortest(argv0))
    return "fedalf"


def _shortest(path: str) -> str:
    """``path``'s file name when the shell's PATH finds it there (the same path: a venv's python is a link to
    an interpreter that, called by another path, is not the venv's), else ``path``."""
    found = shutil.which(os.path.basename(path))
    return os.path.basename(path) if found and os.path.abspath(found) == os.path.abspath(path) else path


def main(argv=None) -> int:
    _pin_from_env()
    # Ctrl-C, SIGTERM, SIGHUP, SIGUSR1 (fedalf_jax/interrupt.py); the integrity notices whatever PYTHONWARNINGS says
    with INTERRUPT.command(), shown_notices():
        return _main(argv)


def _main(argv) -> int:
    given = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(expand_declared(given))  # --NAME V: a user algorithm's declared hparam's flag
    args.argv = given  # the flags as given (sweep --processes passes them on)
    warnings.showwarning = _one_line_warning
    for stream in (sys.stdout, sys.stderr):  # a path that is not text (--out's bytes) prints escaped
        if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        if INTERRUPT.requested:  # a signal while the command's modules loaded: nothing started yet
            print(f"fedalf {args.command}: interrupted by {signal_name(INTERRUPT.signum)} before it started: nothing "
                  f"was written", file=sys.stderr)
            return INTERRUPT.exit_status
        return _dispatch(args)
    except Interrupted as e:
        cmd, by = invoked(), ("" if e.signum == signal.SIGINT else f" by {signal_name(e.signum)}")
        again = (_sweep_again(cmd, args, args.argv) if args.command == "sweep"
                 else f"{cmd} run --resume --out {shlex.quote(str(e.dirs[0]))}" if e.dirs else None)
        if args.command == "sweep":
            kept = (f"every finished round of its runs is saved; continue with: {again}" if e.checkpoints else
                    f"its runs keep no checkpoints (--checkpoint-every never): the ended runs are kept, the others "
                    f"start again from round 0 with: {again}")
            print(f"fedalf sweep: interrupted{by}: {kept}", file=sys.stderr)
            return e.exit_status
        if again is None:
            kept = "nothing was saved (no --out)"
        elif not e.kept:
            kept = "no round had finished and none of its files are left: the same command starts it again"
        elif not e.checkpoints:
            kept = (f"the metrics up to round {e.round} are saved, and no checkpoint (--checkpoint-every never): "
                    f"{again} starts it again from round 0")
        elif e.saved:
            kept = f"the metrics and a checkpoint of round {e.round} are saved; continue with: {again}"
        else:
            kept = f"no new round had finished; continue with: {again}"
        print(f"fedalf {args.command}: interrupted{by} after round {e.round}: {kept}", file=sys.stderr)
        return e.exit_status
    except KeyboardInterrupt:
        by = "" if INTERRUPT.signum in (None, signal.SIGINT) else f" by {signal_name(INTERRUPT.signum)}"
        print(f"fedalf {args.command}: interrupted{by}", file=sys.stderr)
        return INTERRUPT.exit_status


def _sweep_again(cmd: str, args, argv) -> str:
    """The line that continues an interrupted sweep: ``--resume --out`` and the slice (``--shard`` as given:
    ``1/2``, or ``K`` for a Slurm array's every task); before ``sweep.json`` was written, the command itself
    with ``--resume`` (its options are the plan)."""
    if not (Path(args.out) / "sweep.json").is_file():
        return " ".join([cmd, *map(shlex.quote, map(str, argv)), *([] if args.resume else ["--resume"])])
    shard = f" --shard {shlex.quote(args.shard)}" if args.shard is not None else ""
    return f"{cmd} sweep --resume --out {shlex.quote(str(args.out))}{shard}"


def _dispatch(args) -> int:
    if hasattr(args, "no_compile_cache"):  # run, sweep, bench: before anything compiles
        from .runner.cache import cache_dir, configure
        configure(cache_dir(disabled=args.no_compile_cache))
    from .problem.data import DataError
    from .problem.models import ModelError
    from .problem.partitions import PartitionError
    user_errors = (ConfigError, DataError, PartitionError, ModelError, FloatingPointError)
    commands = {"run": _cmd_run, "sweep": _cmd_sweep, "report": _cmd_report, "bench": _cmd_bench}
    try:
        return commands[args.command](args)
    except user_errors as e:
        if os.environ.get("FEDALF_DEBUG"):
            raise
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"fedalf {args.command}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
