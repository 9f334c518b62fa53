"""The fedalf command's allocator settings (fedalf_jax/allocator.py, issue 49 item 1): the command runs with
glibc's malloc keeping what XLA frees, unless the caller chose otherwise."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedalf_jax import allocator as A

REPO = Path(__file__).resolve().parents[1]


def test_tunables_are_added_unless_the_caller_chose_malloc_settings():
    assert A.tunables_for({}) == A.TUNABLES
    assert "glibc.malloc.mmap_max=0" in A.TUNABLES and "glibc.malloc.arena_max=1" in A.TUNABLES
    # another subsystem's tunable is kept beside them
    assert A.tunables_for({"GLIBC_TUNABLES": "glibc.cpu.x86_ibt=off"}) == "glibc.cpu.x86_ibt=off:" + A.TUNABLES
    # the caller's own malloc tunables win, and so does FEDALF_MALLOC=default
    assert A.tunables_for({"GLIBC_TUNABLES": "glibc.malloc.arena_max=4"}) is None
    for off in ("default", "DEFAULT", "off"):
        assert A.tunables_for({A.ENV: off}) is None


def _environ_of(extra_env: dict, command: list) -> str:
    """The environment, as the kernel has it, of a `fedalf run` process while it runs."""
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", A.ENV)}
    env.update(extra_env)
    cmd = [*command, "run", "--dataset", "synthetic", "--model", "mlp", "--clients", "4",
           "--clients-per-round", "2", "--synthetic-train", "200", "--synthetic-test", "80", "--rounds", "1",
           "--no-progress", "--checkpoint-every", "never", "--out", os.devnull + "-never-made"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.5)  # past the restart, before the run ends (it loads JAX first)
        return Path(f"/proc/{proc.pid}/environ").read_bytes().decode(errors="replace")
    finally:
        proc.kill()
        proc.wait()


SCRIPT = Path(sys.executable).parent / "fedalf"  # the console script beside this Python (a venv's)


@pytest.mark.skipif(not (sys.platform.startswith("linux") and A._glibc()), reason="glibc on Linux only")
@pytest.mark.parametrize("command", ["module", "script"])
def test_the_command_runs_with_the_tunables_and_fedalf_malloc_default_keeps_glibcs(command):
    if command == "script" and not SCRIPT.exists():
        pytest.skip("no fedalf console script beside this Python")
    # the console script as the README types it, a path relative to the folder (Python makes the main script's
    # __file__ absolute: the command was not recognised as itself, and ran without the settings and without
    # its early signal handlers)
    command = ([sys.executable, "-m", "fedalf_jax.cli"] if command == "module"
               else [os.path.relpath(SCRIPT, REPO)])
    # (glibc cuts the variable at each ':' in place as it parses it, so each setting is looked for on its own)
    seen = _environ_of({}, command).split("\0")
    assert f"GLIBC_TUNABLES={A.TUNABLES.split(':')[0]}" in seen, [v for v in seen if "glibc" in v]
    assert all(t in seen for t in A.TUNABLES.split(":")[1:]), [v for v in seen if "glibc" in v]
    seen = _environ_of({A.ENV: "default"}, command).split("\0")
    assert not any(v.startswith("GLIBC_TUNABLES=") for v in seen)
