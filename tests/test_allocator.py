"""The fedalf command's allocator (fedalf_jax/allocator.py, issue 49 item 1): the command runs with an
allocator that keeps what XLA frees (jemalloc, else glibc's huge pages), unless the caller chose otherwise."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedalf_jax import allocator as A

REPO = Path(__file__).resolve().parents[1]
JE = "/lib/libjemalloc.so.2"


def test_jemalloc_is_preloaded_and_told_to_keep_its_pages():
    assert A.settings({}, jemalloc_path=JE) == {
        "LD_PRELOAD": JE, "MALLOC_CONF": "dirty_decay_ms:-1,muzzy_decay_ms:-1", A.APPLIED: "jemalloc"}
    # another preloaded library is kept after it
    assert A.settings({"LD_PRELOAD": "/x/libfoo.so"}, jemalloc_path=JE)["LD_PRELOAD"] == f"{JE}:/x/libfoo.so"


def test_without_jemalloc_glibcs_huge_pages_and_the_callers_choices_win():
    assert A.settings({}, jemalloc_path=None) == {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1", A.APPLIED: "thp"}
    assert A.settings({A.ENV: "thp"}, jemalloc_path=JE)[A.APPLIED] == "thp"
    assert A.settings({"GLIBC_TUNABLES": "glibc.cpu.x86_ibt=off"}, jemalloc_path=None)["GLIBC_TUNABLES"] == \
        "glibc.cpu.x86_ibt=off:glibc.malloc.hugetlb=1"
    # the caller's own allocator or settings, FEDALF_MALLOC=default, and a process already restarted: nothing
    for env in ({"LD_PRELOAD": "/usr/lib/libtcmalloc.so.4"}, {"MALLOC_CONF": "narenas:1"}, {A.ENV: "default"},
                {A.ENV: "OFF"}, {A.APPLIED: "jemalloc"}):
        assert A.settings(env, jemalloc_path=JE) == {}, env
    assert A.settings({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, jemalloc_path=None) == {}


def test_jemalloc_is_looked_for_where_debian_puts_it_or_where_told(tmp_path):
    assert "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2" in A.JEMALLOC_PLACES
    lib = tmp_path / "libjemalloc.so.2"
    lib.write_bytes(b"\x7fELF\x02\x01\x01")  # a shared library's first bytes (issue 55 item 11: checked)
    assert A.jemalloc({A.JEMALLOC_ENV: str(lib)}) == str(lib)
    assert A.jemalloc({A.JEMALLOC_ENV: str(tmp_path / "none.so")}) is None


def _environ_of(extra_env: dict, command: list) -> list:
    """The environment, as the kernel has it, of a `fedalf run` process while it runs."""
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "LD_PRELOAD", "MALLOC_CONF", A.ENV,
                                                           A.APPLIED)}
    env.update(extra_env)
    cmd = [*command, "run", "--dataset", "synthetic", "--model", "mlp", "--clients", "4",
           "--clients-per-round", "2", "--synthetic-train", "200", "--synthetic-test", "80", "--rounds", "1",
           "--no-progress", "--checkpoint-every", "never", "--out", os.devnull + "-never-made"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.5)  # past the restart, before the run ends (it loads JAX first)
        return Path(f"/proc/{proc.pid}/environ").read_bytes().decode(errors="replace").split("\0")
    finally:
        proc.kill()
        proc.wait()


SCRIPT = Path(sys.executable).parent / "fedalf"  # the console script beside this Python (a venv's)


@pytest.mark.skipif(not (sys.platform.startswith("linux") and A._glibc()), reason="glibc on Linux only")
@pytest.mark.parametrize("command", ["module", "script"])
def test_the_command_runs_with_the_settings_and_fedalf_malloc_default_keeps_the_process_as_it_is(command):
    if command == "script" and not SCRIPT.exists():
        pytest.skip("no fedalf console script beside this Python")
    # the console script as the README types it, a path relative to the folder (Python makes the main script's
    # __file__ absolute: the command was not recognised as itself, and ran without the settings and without
    # its early signal handlers)
    command = ([sys.executable, "-m", "fedalf_jax.cli"] if command == "module"
               else [os.path.relpath(SCRIPT, REPO)])
    seen = _environ_of({}, command)
    want = A.settings({})
    assert want, "the restart sets something on glibc"
    # (glibc cuts GLIBC_TUNABLES at each ':' in place as it parses it: the first setting is checked)
    for k, v in want.items():
        assert any(e.startswith(f"{k}={v.split(':')[0]}") for e in seen), (k, [e for e in seen if "MALLOC" in e])
    seen = _environ_of({A.ENV: "default"}, command)
    assert not any(e.startswith((A.APPLIED, "MALLOC_CONF=", "GLIBC_TUNABLES=")) for e in seen)
