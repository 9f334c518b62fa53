import os
import shutil
import sys
import tempfile
from pathlib import Path

# Tests run on the CPU with small synthetic data; keep XLA from grabbing every core's worth of threads
# beyond what the 2-core CI machine has.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# No decoded data set kept on disk by the tests (fedalf_jax/problem/data_cache.py): they load small fake files
# from temporary folders, which would fill the user's ~/.cache/fedalf_jax/data with entries nobody reads again.
# tests/test_data_cache.py turns it on in folders of its own.
os.environ["FEDALF_DATA_CACHE"] = "off"  # whatever the caller set: the fake files of a test are not the data

# One compilation cache for the tests, shared by every process of the session and KEPT between sessions on
# this machine (issue 49, item 4): `$XDG_CACHE_HOME/fedalf_jax/tests` or `~/.cache/fedalf_jax/tests`, never
# the user's own ~/.cache/fedalf_jax/jax. The tests build the same tiny programs again and again (every
# loop.run, sweep and `fedalf` subprocess compiles its programs afresh), and most of the suite's CPU is XLA
# compiling them (docs/lab/suite_time.md): kept, a second run of the suite loads them instead. A program loaded
# from the cache is the one compiled, so results are bit for bit those without it; JAX keys each entry on the
# program, its compile options, the backend and the versions of jax and jaxlib, so no test loads another's
# program, and an edit to the code only adds the entries of the programs it changed.
# FEDALF_TEST_CACHE chooses the folder: unset, the kept one above; `session`, a temporary folder removed at the
# session's end (the old behaviour: a cold run that still shares programs between its processes); any other
# value, that folder (kept). `rm -rf ~/.cache/fedalf_jax/tests` clears the kept one. FEDALF_COMPILE_CACHE set
# by the caller wins over all of these (`off`: no cache at all; a folder: shared by every worker, kept).
# The xdist workers inherit the controller's choice (set below before they start), and so do the CLI
# subprocesses a test starts, so a program compiled by one worker is loaded by the other. JAX writes an
# entry in place, so a reader could get an entry another process (or another pytest session on the same
# machine) is still writing (a warning on stderr, which tests read, and a compile): with `filelock`
# installed (the test extra) JAX_COMPILATION_CACHE_MAX_SIZE turns on JAX's own file lock around every
# read and write of the folder, and its LRU cap (_KEPT_MAX below) bounds the kept folder; without
# `filelock`, each worker gets a folder of its own in a temporary session folder. tests/test_startup.py
# and tests/test_program_cache.py test the cache in folders of their own.
_SESSION_ROOT = "FEDALF_TEST_COMPILE_CACHE_ROOT"  # chosen by the first process (the xdist controller)
_PREFIX = "fedalf-test-compile-cache-"
_TEST_CACHE = "FEDALF_TEST_CACHE"
_KEPT_MAX = 8 << 30  # the kept folder's LRU cap: a cold session writes ~1 GB (docs/lab/suite_time.md)
_MADE_HERE = None


def kept_cache_root(env=os.environ) -> Path:
    """The kept folder of the tests' compilation cache (see above): ``FEDALF_TEST_CACHE`` when it names a
    folder, else ``$XDG_CACHE_HOME/fedalf_jax/tests`` (an absolute XDG_CACHE_HOME) or ``~/.cache/fedalf_jax/tests``."""
    given = env.get(_TEST_CACHE, "").strip()
    if given and given != "session":
        return Path(given).expanduser()
    xdg = env.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else (Path(env["HOME"]) if env.get("HOME") else Path.home()) / ".cache"
    return base / "fedalf_jax" / "tests"


def _remove_stale_folders():
    """The folders of sessions that were killed before they could remove their own (named by their pid)."""
    if os.name != "posix":
        return
    for d in Path(tempfile.gettempdir()).glob(_PREFIX + "*-*"):
        pid = d.name[len(_PREFIX):].split("-")[0]
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except (ValueError, OSError):
            pass


try:
    import filelock  # noqa: F401
    _LOCKED = True
except ImportError:
    _LOCKED = False
if _SESSION_ROOT not in os.environ:
    _remove_stale_folders()
    _kept = None
    if _LOCKED and os.environ.get(_TEST_CACHE, "").strip() != "session":
        _kept = kept_cache_root()
        try:
            _kept.mkdir(parents=True, exist_ok=True)
            if not os.access(_kept, os.W_OK | os.X_OK):
                raise PermissionError("not writable")
        except OSError:
            _kept = None  # a read-only home: the session's temporary folder, as before
    if _kept is not None:
        os.environ[_SESSION_ROOT] = str(_kept)
    else:
        _MADE_HERE = tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-")
        os.environ[_SESSION_ROOT] = _MADE_HERE
if _LOCKED:
    os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(_KEPT_MAX))  # the lock, and the LRU cap
    _FOLDER = "shared"
else:
    _FOLDER = os.environ.get("PYTEST_XDIST_WORKER", "main")
_CHOSEN = "FEDALF_TEST_COMPILE_CACHE_CHOSEN"  # the folder this file chose (a worker inherits its controller's)
if os.environ.get("FEDALF_COMPILE_CACHE", os.environ.get(_CHOSEN)) == os.environ.get(_CHOSEN):
    os.environ["FEDALF_COMPILE_CACHE"] = os.environ[_CHOSEN] = os.path.join(os.environ[_SESSION_ROOT], _FOLDER)

# Bytecode: a shell with PYTHONDONTWRITEBYTECODE set (this project's CI machines have it) makes every Python
# process compile fedalf_jax's ~120 modules from source again, ~0.3 s of CPU before anything else, and the suite
# starts ~170 of them (each `fedalf` subprocess, sweep process and notebook kernel) besides the two workers. The
# tests write it instead to a folder beside their compilation cache (PYTHONPYCACHEPREFIX: nothing in the
# checkout), for this process, its workers and every subprocess; a caller's own PYTHONPYCACHEPREFIX wins.
# tests/test_startup.py::test_the_tests_processes_keep_their_bytecode holds it.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None or sys.dont_write_bytecode:
    os.environ.setdefault("PYTHONPYCACHEPREFIX", os.path.join(os.environ[_SESSION_ROOT], "bytecode"))
    sys.dont_write_bytecode = False
    sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"]

# Every dot at full float32 (a GPU's default would use TF32, too loose for the float64 references), set in
# the environment so that the `fedalf` subprocesses the tests start trace with it too: a program traced
# with another precision is another program, so a subprocess that ran at JAX's default compiled every
# program the test's own process had already put in the shared cache (~160 processes per session). On a
# CPU the precision changes no bit; tests/test_precision.py tests the option itself.
os.environ["JAX_DEFAULT_MATMUL_PRECISION"] = "highest"

import jax  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")  # the same, where jax was imported first

import pytest  # noqa: E402

from fedalf_jax.experiment.cache import MIN_TIME_ENV, cache_dir, configure  # noqa: E402


def _cache_loads_here(folder: Path) -> bool:
    """Whether XLA:CPU loads the programs it wrote to a cache on this machine: on some Intel AVX-512 CPUs
    it rejects every entry, with an error line on stderr for each (jax-ml/jax#38445), which would reach
    the stderr the tests read. A tiny program compiled, then loaded, in this process, stderr watched."""
    import warnings
    import jax.numpy as jnp
    hits = []
    listen = lambda event, **_: hits.append(event) if event.endswith("/cache_hits") else None  # noqa: E731
    configure(folder)
    jax.monitoring.register_event_listener(listen)
    with tempfile.TemporaryFile() as err, warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        try:
            for _ in range(2):
                jax.jit(lambda x: jnp.sin(x) * 3.0)(jnp.arange(5.0)).block_until_ready()
                jax.clear_caches()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            if hasattr(jax.monitoring, "unregister_event_listener"):  # older JAX: it stays, and only counts
                jax.monitoring.unregister_event_listener(listen)
        err.seek(0)
        said = err.read()
    configure(None)
    cut_short = [w for w in warned if "persistent compilation cache" in str(w.message)]
    return bool(hits) and not cut_short and b"doesn't match" not in said


_PROBED = "FEDALF_TEST_COMPILE_CACHE_PROBED"  # the controller probed (its workers and subprocesses inherit)
if _PROBED not in os.environ and os.environ["FEDALF_COMPILE_CACHE"] == os.environ.get(_CHOSEN):
    os.environ[_PROBED] = "1"
    with tempfile.TemporaryDirectory(prefix=_PREFIX + "probe-") as _probe:  # never the kept folder
        if not _cache_loads_here(Path(_probe)):  # off for every worker and subprocess too
            os.environ["FEDALF_COMPILE_CACHE"] = "off"
# Only the programs that took long enough to compile are written: JAX's lock (above) comes with its LRU cap,
# whose every write lists and stats every entry of the folder, and this session runs thousands of programs
# (each op run outside jit is a program of its own): written all, a test that runs ops one by one paid ~0.3 s
# for each of them, 100 s for one test. The test processes (the two workers) write those over 0.05 s (0.5 s
# before the folder was kept between sessions, 0.2 s until issue 56: the float64 references the tests compute
# op by op compile ~1,300 programs of 0.05-0.2 s, ~115 worker-seconds of a warm run, loaded now instead;
# docs/lab/suite_time.md measures each threshold cold and warm). The subprocesses (each `fedalf` command, sweep process, notebook
# kernel) write every program (threshold 0; 0.1 s before issue 49's last stop): they run the same few tiny
# configurations again and again, so what one writes, ~120 small programs of a tiny run, the next ~160 load
# instead of compiling (the subprocess-heavy files warm: 67 -> 60-62 s; docs/lab/suite_time.md). A threshold the
# caller set is used by both. The workers' programs under their threshold compile again in each worker.
_WORKER_MIN_TIME = "FEDALF_TEST_WORKER_MIN_COMPILE_TIME_SECS"
if MIN_TIME_ENV not in os.environ:
    os.environ[MIN_TIME_ENV] = "0"
    os.environ[_WORKER_MIN_TIME] = "0.05"
jax.config.update("jax_persistent_cache_min_compile_time_secs",
                  float(os.environ.get(_WORKER_MIN_TIME, os.environ[MIN_TIME_ENV])))
_CACHE = cache_dir()  # the folder in use (None: off)
configure(_CACHE)  # for the tests' own calls of loop.run and sweep; main() configures itself the same way


def pytest_unconfigure(config):
    if _MADE_HERE is not None:  # the process that made the folder, after its workers have stopped
        shutil.rmtree(_MADE_HERE, ignore_errors=True)


@pytest.fixture(autouse=True)
def _session_compile_cache():
    """After a test that pointed JAX's cache elsewhere (main() with another FEDALF_COMPILE_CACHE,
    tests/test_startup.py's own folders), the session's again."""
    yield
    want = _CACHE is not None
    if (jax.config.jax_enable_compilation_cache != want
            or (want and jax.config.jax_compilation_cache_dir != str(_CACHE))):
        configure(_CACHE)


@pytest.fixture
def compile_cache():
    """The session's compilation cache (above), named by the tests that compile one program several
    times (a sweep then its single runs, a run then its resume, the CLI subprocesses they start)."""
    return _CACHE


# The quick tier, `pytest -m quick` (README): a first check after set-up, well under 3 minutes on a 2-core
# CPU (~50 s of CPU measured on 2026-12-03). Whole files, each under ~40 s: the algorithms' and clients'
# steps against hand-computed ones, the metrics, the partitions, every option's help, and the CLI's one-line
# errors and config handling on tiny runs.
QUICK = frozenset({"test_algorithms.py", "test_client.py", "test_metrics.py", "test_partitions.py",
                   "test_help.py", "test_cli.py"})


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m deselects
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in QUICK:
            item.add_marker(pytest.mark.quick)


# --- two xdist workers by default (issue 38, item 6) -----------------------------------------------------
# pyproject's addopts carry no -n, so `pytest -p no:xdist ...` works; with pytest-xdist loaded and no -n
# given, the run takes two workers, work-stealing (`-n 0` or `-n 4` as given win).
@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    if (config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput")
            and getattr(config.option, "numprocesses", 0) is None):
        config.option.numprocesses = 2
        if config.option.dist == "no":
            config.option.dist = "worksteal"
# --- end of the xdist default ------------------------------------------------------------------------------
