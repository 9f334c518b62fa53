"""Start-up: the persistent compilation cache (where it lives, that a second run loads its programs
from it) and a progress bar that says what it is doing while nothing counts rounds yet."""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from fedalf_jax.cli import build_parser, main
from fedalf_jax.experiment import cache as C
from fedalf_jax.experiment.progress import Progress
from fedalf_jax.experiment.rundir import RunDir

REPO = Path(__file__).resolve().parents[1]
TINY = ["--dataset", "synthetic", "--model", "mlp", "--clients", "4", "--clients-per-round", "2",
        "--synthetic-train", "200", "--synthetic-test", "80", "--rounds", "4", "--eval-every", "2",
        "--algorithm", "fedavg"]


# -- where the cache lives

def test_cache_dir_default_override_and_off(tmp_path):
    home = {"HOME": "/home/ann"}
    assert C.cache_dir(env=home) == Path("/home/ann/.cache/fedalf_jax/jax")
    assert C.cache_dir(env={**home, "XDG_CACHE_HOME": "/scratch/ann"}) == Path("/scratch/ann/fedalf_jax/jax")
    assert C.cache_dir(env={**home, "XDG_CACHE_HOME": "rel"}) == Path("/home/ann/.cache/fedalf_jax/jax")
    # FEDALF_COMPILE_CACHE moves it (~ expanded) and wins over JAX's own variable, which wins over the default
    assert C.cache_dir(env={**home, C.ENV: str(tmp_path / "c")}) == tmp_path / "c"
    assert C.cache_dir(env={C.ENV: "~/c"}) == Path("~/c").expanduser()
    assert C.cache_dir(env={**home, "JAX_COMPILATION_CACHE_DIR": "/j"}) == Path("/j")
    assert C.cache_dir(env={**home, "JAX_COMPILATION_CACHE_DIR": "/j", C.ENV: "/f"}) == Path("/f")
    for off in ("off", "OFF", "0", "false", "no", "none"):
        assert C.cache_dir(env={**home, C.ENV: off}) is None, off
    assert C.cache_dir(env={**home, C.ENV: " "}) == Path("/home/ann/.cache/fedalf_jax/jax")  # blank: unset
    # --no-compile-cache: off whatever the environment says
    assert C.cache_dir(disabled=True, env={**home, C.ENV: "/f", "JAX_COMPILATION_CACHE_DIR": "/j"}) is None


@pytest.fixture
def jax_cache_config():
    """The JAX cache settings as they were, after a test that calls ``cache.configure`` in-process."""
    names = ("jax_enable_compilation_cache", "jax_compilation_cache_dir",
             "jax_persistent_cache_min_compile_time_secs", "jax_persistent_cache_min_entry_size_bytes")
    saved = {n: getattr(jax.config, n) for n in names}
    yield
    for n, v in saved.items():
        jax.config.update(n, v)
    from jax.experimental.compilation_cache import compilation_cache
    compilation_cache.reset_cache()


def test_configure_caches_every_program_or_turns_off(tmp_path, jax_cache_config, monkeypatch):
    monkeypatch.delenv(C.MIN_TIME_ENV, raising=False)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)  # JAX's default
    assert C.configure(tmp_path / "c") == tmp_path / "c" and (tmp_path / "c").is_dir()
    assert jax.config.jax_enable_compilation_cache
    assert jax.config.jax_compilation_cache_dir == str(tmp_path / "c")
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0
    # a threshold the user gave JAX (which read it from the environment) is kept
    monkeypatch.setenv(C.MIN_TIME_ENV, "0.25")
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.25)
    assert C.configure(tmp_path / "c") == tmp_path / "c"
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.25
    assert C.configure(None) is None and not jax.config.jax_enable_compilation_cache
    # a folder that cannot be made: one warning, and the command runs without the cache
    (tmp_path / "file").write_text("")
    with pytest.warns(UserWarning, match="compile cache off: cannot use"):
        assert C.configure(tmp_path / "file" / "c") is None
    assert not jax.config.jax_enable_compilation_cache


def test_no_compile_cache_flag_wins_over_the_environment(tmp_path, monkeypatch, capsys, jax_cache_config):
    monkeypatch.setenv(C.ENV, str(tmp_path / "c"))
    bad = ["--dataset", "fmnist", "--data-dir", str(tmp_path / "none"), "--rounds", "1"]  # stops before compiling
    assert main(["run", "--no-compile-cache", *bad]) == 2
    assert not (tmp_path / "c").exists() and not jax.config.jax_enable_compilation_cache
    assert main(["run", *bad]) == 2
    assert (tmp_path / "c").is_dir() and jax.config.jax_compilation_cache_dir == str(tmp_path / "c")
    for cmd in (["sweep", "--out", "x"], ["bench"]):  # the same flag on the other commands that compile
        assert build_parser().parse_args([*cmd, "--no-compile-cache"]).no_compile_cache


def test_api_cache_follows_fedalf_compile_cache_else_a_folder_jax_was_given():
    home = {"HOME": "/home/ann"}
    default = Path("/home/ann/.cache/fedalf_jax/jax")
    assert C.api_cache_dir(env=home, jax_dir=None) == (True, default)  # nothing chosen: the CLI's folder
    assert C.api_cache_dir(env=home, jax_dir="/mine") == (False, None)  # the process chose JAX's folder: kept
    assert C.api_cache_dir(env={**home, C.ENV: "/f"}, jax_dir="/mine") == (True, Path("/f"))  # fedalf's own says
    assert C.api_cache_dir(env={**home, C.ENV: "off"}, jax_dir="/mine") == (True, None)  # off: turned off


_API_SWEEP = """
import sys
import fedalf_jax as fj
fj.sweep(fj.Config(dataset="synthetic", model="mlp", clients=4, clients_per_round=2, synthetic_train=200,
                   synthetic_test=80, rounds=1, eval_every=1, algorithm="fedavg"), out=sys.argv[1], progress=False)
"""


def test_api_cache_fj_sweep_keeps_its_programs_where_the_cli_keeps_them(tmp_path):
    """A notebook's kernel restarted loads what it compiled: in a fresh process, with FEDALF_COMPILE_CACHE and
    JAX's own folder unset, fj.sweep's programs land in HOME's fedalf cache, the CLI's default."""
    env = {k: v for k, v in _user_env().items() if k not in (C.ENV, "JAX_COMPILATION_CACHE_DIR", "XDG_CACHE_HOME")}
    env.update(HOME=str(tmp_path / "home"), JAX_PLATFORMS="cpu")
    p = subprocess.run([sys.executable, "-c", _API_SWEEP, str(tmp_path / "s")], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    kept = tmp_path / "home" / ".cache" / "fedalf_jax" / "jax"
    assert any(e.name.startswith("jit_mapped-") for e in kept.iterdir())  # the sweep's runs mapped in one program


def test_api_cache_fj_run_and_sweep_configure_it_once_per_process(tmp_path, monkeypatch, jax_cache_config):
    import fedalf_jax as fj
    tiny = fj.Config(dataset="synthetic", model="mlp", clients=4, clients_per_round=2, synthetic_train=200,
                     synthetic_test=80, rounds=1, eval_every=1, algorithm="fedavg")
    configured = []
    monkeypatch.setattr(C, "configure", lambda path: configured.append(path))
    monkeypatch.setattr(C, "_API_CONFIGURED", False)
    monkeypatch.setenv(C.ENV, str(tmp_path / "c"))
    fj.run(tiny, progress=False)
    assert configured == [tmp_path / "c"]
    fj.sweep(tiny, out=tmp_path / "s", progress=False)  # later calls: as it is
    assert configured == [tmp_path / "c"]
    monkeypatch.setattr(C, "_API_CONFIGURED", False)
    fj.sweep(tiny, out=tmp_path / "s2", progress=False)
    assert configured == [tmp_path / "c"] * 2


# -- the cache in use: fedalf run twice

def _user_env():
    """A user's environment: without the test session's lock on its cache (JAX_COMPILATION_CACHE_MAX_SIZE, conftest)
    and its threshold (JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS)."""
    return {k: v for k, v in os.environ.items() if k not in ("JAX_COMPILATION_CACHE_MAX_SIZE", C.MIN_TIME_ENV)}


def _fedalf(*argv, cache, out):
    env = {**_user_env(), C.ENV: str(cache), "JAX_PLATFORMS": "cpu",  # log each cache hit, miss and skipped write
           "JAX_LOG_COMPILES": "1", "JAX_EXPLAIN_CACHE_MISSES": "1"}
    p = subprocess.run([sys.executable, "-m", "fedalf_jax.cli", "run", *TINY, *argv, "--out", str(out)],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stderr


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """The same ``fedalf run`` twice with one new cache folder: first with a progress bar (it compiles, for
    seconds: the bar shows a stage of more than 1 s), then without one (it loads its programs)."""
    tmp = tmp_path_factory.mktemp("startup")
    cache = tmp / "cache"
    first = _fedalf(cache=cache, out=tmp / "a")
    entries = sorted(p.name for p in cache.iterdir())
    second = _fedalf("--no-progress", cache=cache, out=tmp / "b")
    return dict(tmp=tmp, cache=cache, first=first, entries=entries, second=second)


def _hits(log: str, name: str) -> int:
    return len(re.findall(rf"Persistent compilation cache hit for '{name}'", log))


def test_first_run_writes_every_program_to_the_cache(two_runs):
    # the round, the evaluation (the chunk of no rounds), the train loss, the small ones
    assert sum(n.startswith("jit_chunk-") for n in two_runs["entries"]) == 1, two_runs["entries"]
    assert sum(n.startswith("jit_round-") for n in two_runs["entries"]) == 1, two_runs["entries"]
    assert "Not writing persistent cache entry" not in two_runs["first"], two_runs["first"][-3000:]


def test_second_run_loads_its_programs_from_the_cache(two_runs):
    second = two_runs["second"]
    if "Machine type used for XLA:CPU compilation doesn't match" in second:
        pytest.skip("XLA:CPU rejects the entries it wrote on this CPU (jax-ml/jax#38445): every run compiles")
    assert _hits(second, "jit_chunk") == 1 and _hits(second, "jit_round") == 1, second[-3000:]
    assert "PERSISTENT COMPILATION CACHE MISS" not in second  # nothing compiled again
    assert sorted(p.name for p in two_runs["cache"].iterdir()) == two_runs["entries"]  # nothing new written
    a, b = (RunDir(two_runs["tmp"] / d).metrics() for d in "ab")  # the loaded programs compute the same numbers
    for k in ("round", "mean_acc", "angle", "test_loss", "train_loss"):
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


_PROGRAM = """
import sys, jax, jax.numpy as jnp
from pathlib import Path
from fedalf_jax.experiment.cache import configure
configure(Path(sys.argv[1]))
x = jnp.arange(1000, dtype=jnp.float32)
print(float(jax.jit(lambda x: jnp.sum(jnp.sin(x) * x))(x)))
"""


def test_an_entry_cut_short_is_compiled_again_never_trusted(tmp_path):
    # what a reader meets while a concurrent --shard slice writes the entry, or what a killed writer leaves
    def once():
        p = subprocess.run([sys.executable, "-c", _PROGRAM, str(tmp_path / "c")], cwd=REPO, capture_output=True,
                           text=True, timeout=120, env={**_user_env(), "JAX_PLATFORMS": "cpu"})
        assert p.returncode == 0, p.stderr[-3000:]
        return float(p.stdout), p.stderr
    want = float(np.sum(np.sin(np.arange(1000, dtype=np.float64)) * np.arange(1000)))  # float64, independently
    first, _ = once()
    entries = [e for e in (tmp_path / "c").iterdir() if e.name.endswith("-cache")]
    assert entries
    for e in entries:
        e.write_bytes(e.read_bytes()[: e.stat().st_size // 2])
    second, err = once()
    assert "Error reading persistent compilation cache entry" in err, err[-3000:]
    assert second == first and abs(first - want) <= 1e-3 * abs(want)


# -- the progress bar while it compiles and evaluates

def test_progress_says_compiling_evaluating_and_which_rounds(two_runs):
    err = two_runs["first"]
    for said in ("fedalf run (compiling)", "fedalf run (evaluating round 0)",
                 "fedalf run (evaluating round 2)", "fedalf run (evaluating round 4)", "4/4"):
        assert said in err, (said, err[-2000:])


def test_no_progress_shows_no_bar(two_runs, capsys):
    assert "fedalf run" not in two_runs["second"] and "round/s" not in two_runs["second"]
    bar = Progress(10, enabled=False)
    with bar.stage("compiling"):
        pass
    bar.close()
    assert capsys.readouterr().err == "" and bar._ticker is None


def test_stage_clock_keeps_moving_without_calls(capsys):
    bar = Progress(10, desc="fedalf run", refresh_s=0.1)
    with bar.stage("compiling"):
        time.sleep(2.3)  # nothing but the ticker redraws the bar meanwhile
    bar.close()
    err = capsys.readouterr().err
    assert "fedalf run (compiling) 0s" in err and "fedalf run (compiling) 2s" in err, err[-1000:]
    assert "0/10 [00:02<" in err  # tqdm's elapsed clock moved too


def test_the_first_rate_counts_rounds_only_not_the_loading_and_the_compile(capsys):
    bar = Progress(100, desc="fedalf run", refresh_s=10)
    with bar.stage("compiling"):
        time.sleep(1.5)
    bar.start_rounds()
    for r in range(1, 4):
        bar.begin_call(1, r, r)
        time.sleep(0.15)
        bar.end_call(1)
    rate = bar._bar.format_dict["rate"]
    bar.stopping(4)
    bar.close()
    assert rate is not None and rate > 4, rate  # 1 / 0.15 s ≈ 6.7 rounds/s; with the compile counted ≈ 1.5
    assert "fedalf run (stopping after round 4)" in capsys.readouterr().err


def test_importing_jax_does_not_spend_most_of_a_second_on_ml_dtypes():
    """Every process that imports jax imports ml_dtypes: 0.7.0's module init takes ~0.7 s of CPU (0.6.0:
    ~5 ms), paid by each fedalf command, sweep worker, notebook kernel and the ~160 processes of this suite.
    experiments/setup.sh keeps it out (experiments/constraints.txt). CPU time of the import alone, numpy
    imported first, in a fresh process."""
    code = ("import time, numpy; t = time.process_time(); import ml_dtypes; "
            "print(time.process_time() - t, ml_dtypes.__version__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    cpu, version = out.stdout.split()
    assert float(cpu) < 0.25, (f"import ml_dtypes ({version}) took {float(cpu):.2f} s of CPU: install with "
                               "experiments/constraints.txt (bash experiments/setup.sh does)")


def test_a_fedalf_subprocess_loads_the_programs_this_test_process_compiled(tmp_path, monkeypatch, jax_cache_config):
    """The tests' own processes and the `fedalf` processes they start trace the same programs (conftest puts
    their JAX options in the environment): a program traced at another matmul precision is another program,
    and the subprocess compiled again what the session's cache already held."""
    monkeypatch.setenv(C.ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(C.MIN_TIME_ENV, raising=False)  # every program written, however quick its compile
    extra = ["--synthetic-train", "210", "--no-progress"]  # a shape no other test compiles in this process
    assert main(["run", *TINY, *extra, "--out", str(tmp_path / "here")]) == 0
    written = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert any(n.startswith("jit_round-") for n in written), written
    log = _fedalf(*extra, cache=tmp_path / "cache", out=tmp_path / "there")
    # (only the run's own programs: an op this process had compiled for an earlier test was not compiled, nor
    # written, again)
    assert _hits(log, "jit_round") == 1 and _hits(log, "jit_chunk") == 1, log[-3000:]


def test_the_tests_subprocesses_cache_more_of_their_programs_than_the_workers():
    """conftest: a `fedalf` process the tests start writes every program it compiles, so that the next one
    loads them all (the tests start ~160 of a few tiny configurations); the test processes themselves write
    those over 0.05 s (they run thousands of programs, and each write lists the whole folder). Unless the caller
    set JAX's threshold: then both use it."""
    if os.environ.get("FEDALF_TEST_WORKER_MIN_COMPILE_TIME_SECS") is None:
        pytest.skip(f"the caller set {C.MIN_TIME_ENV}")
    code = "import jax; print(jax.config.jax_persistent_cache_min_compile_time_secs)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) == 0
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.05


# -- the suite's own cache, kept between sessions (issue 49, item 4)

def test_the_suites_cache_folder_is_kept_under_the_users_cache_unless_told_otherwise():
    from conftest import kept_cache_root
    home = {"HOME": "/home/ann"}
    assert kept_cache_root(home) == Path("/home/ann/.cache/fedalf_jax/tests")
    assert kept_cache_root({**home, "XDG_CACHE_HOME": "/scratch"}) == Path("/scratch/fedalf_jax/tests")
    assert kept_cache_root({**home, "XDG_CACHE_HOME": "rel"}) == Path("/home/ann/.cache/fedalf_jax/tests")
    assert kept_cache_root({**home, "FEDALF_TEST_CACHE": "/k"}) == Path("/k")
    # never the folder the user's own runs keep their programs in
    assert kept_cache_root(home) != C.cache_dir(env=home)


_JITS = '''
import jax, jax.numpy as jnp
def test_two_programs():
    jax.jit(lambda x: jnp.cos(x) @ x.T)(jnp.ones((7, 5))).block_until_ready()
    jax.jit(lambda x: jnp.tanh(x).sum(0))(jnp.ones((7, 5))).block_until_ready()
'''


def _session(folder: Path, cache: str, tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FEDALF_TEST_", "PYTEST_", "FEDALF_COMPILE"))}
    env.update({"FEDALF_TEST_CACHE": cache, C.MIN_TIME_ENV: "0", "TMPDIR": str(tmp_path / "tmp")})
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", str(folder)],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]


def test_a_second_session_loads_what_the_first_compiled_and_session_leaves_nothing(tmp_path):
    """A pytest session writes its programs to the kept folder and leaves them there; the next session on the
    same machine loads them (it writes no entry of its own); ``FEDALF_TEST_CACHE=session`` keeps nothing."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (tmp_path / "tmp").mkdir()
    (suite / "conftest.py").write_text((REPO / "tests" / "conftest.py").read_text())
    (suite / "test_jits.py").write_text(_JITS)
    kept = tmp_path / "kept"
    _session(suite, str(kept), tmp_path)
    first = {p.name: p.stat().st_mtime_ns for p in (kept / "shared").iterdir() if p.name.endswith("-cache")}
    assert len([n for n in first if "lambda" in n]) == 2, sorted(first)  # the test's two programs, kept
    _session(suite, str(kept), tmp_path)
    second = {p.name: p.stat().st_mtime_ns for p in (kept / "shared").iterdir() if p.name.endswith("-cache")}
    assert second == first  # nothing compiled nor written again: every program was loaded
    _session(suite, "session", tmp_path)
    assert list((tmp_path / "tmp").iterdir()) == []  # the session's temporary folder is removed at its end


def test_the_tests_processes_keep_their_bytecode(tmp_path):
    """tests/conftest.py: the suite's processes write the bytecode they compile, even from a shell with
    PYTHONDONTWRITEBYTECODE set (this project's CI machines), to a folder outside the checkout, so each of its
    ~170 subprocesses does not compile fedalf_jax's modules again (~0.3 s of CPU each)."""
    code = "import sys, fedalf_jax; print(sys.flags.dont_write_bytecode, sys.dont_write_bytecode, sys.pycache_prefix)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    flag, dont, prefix = out.stdout.split()
    assert out.returncode == 0 and (flag, dont) == ("0", "False") and not sys.dont_write_bytecode
    if prefix != "None":  # the shell had PYTHONDONTWRITEBYTECODE (or its own prefix): not in the checkout
        root = Path(__file__).resolve().parent.parent
        assert not Path(prefix).resolve().is_relative_to(root)
        assert any(Path(prefix).rglob("fedalf_jax/__init__.*.pyc"))
