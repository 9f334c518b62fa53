import os

# Tests run on the CPU with small synthetic data; keep XLA from grabbing every core's worth of threads
# beyond what the 2-core CI machine has.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The CLI's persistent compilation cache (~/.cache/fedalf_jax/jax) stays off in tests, also in the CLI
# subprocesses they start; tests/test_startup.py turns it on in folders of its own.
os.environ.setdefault("FEDALF_COMPILE_CACHE", "off")

import jax  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")

import pytest  # noqa: E402


@pytest.fixture
def compile_cache(tmp_path, monkeypatch):
    """A persistent compilation cache for one test, as a user's repeated commands share one: a test that
    compiles the same program several times (a sweep, then each of its runs alone; a run, then its
    resume; the CLI subprocesses it starts) compiles it once and loads it after. A loaded program is the
    one compiled, so results are bit for bit those without the cache. Off again after the test."""
    from fedalf_jax.experiment.cache import configure
    path = tmp_path / "compile-cache"
    monkeypatch.setenv("FEDALF_COMPILE_CACHE", str(path))  # main() and subprocesses
    configure(path)  # calls of loop.run and sweep made by the test itself
    yield path
    configure(None)


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
