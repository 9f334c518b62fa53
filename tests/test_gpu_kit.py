"""Issue 29 items 4-6: a benchmark a user can run (progress lines, Ctrl-C, predictions from compile-free
time), a GPU kit that fails loudly, checkpoints that fit the disk, and no jax API the next jax removes."""

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fedalf_jax import bench as B

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
TINY = ["--dataset", "synthetic", "--model", "mlp", "--clients", "6", "--clients-per-round", "3",
        "--synthetic-train", "300", "--synthetic-test", "60", "--algorithm", "fedalf"]


def _env(**over):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PYTHONUNBUFFERED="1")
    env.update(over)
    return env


def _ctrl_c_after(argv, cwd, line, settle, sig=signal.SIGINT):
    """Run ``argv``, send it Ctrl-C (or ``sig``) ``settle`` seconds after a stderr line containing ``line``
    (within 240 s), and return its exit status, stderr and stdout."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=cwd)
    err, outs = [], []
    readers = [threading.Thread(target=lambda f=f, box=box: box.extend(f), daemon=True)
               for f, box in ((p.stderr, err), (p.stdout, outs))]
    for t in readers:
        t.start()
    deadline = time.time() + 240
    while not any(line in ln for ln in err) and p.poll() is None:
        assert time.time() < deadline, "".join(err)
        time.sleep(0.2)
    time.sleep(settle)
    p.send_signal(sig)
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        raise
    for t in readers:
        t.join(5)
    return p.returncode, "".join(err), "".join(outs)


# ---- item 4: fedalf bench --------------------------------------------------------------------------------

def test_bench_progress_lines_and_ctrl_c_keeps_the_partial_table(tmp_path):
    """Each measurement announces itself on stderr (with its expected time once a round is timed); a
    Ctrl-C during the last one (the server-depth count) stops at once with exit 130 (not a segfault) and
    the table of the measurements done, in the JSON too."""
    out = tmp_path / "b.json"
    argv = [PY, "-m", "fedalf_jax.cli", "bench", *TINY, "--repeats", "2", "--depth-width", "1",
            "--depth-rounds", "2000", "--json", str(out)]
    # Ctrl-C 0.5 s after the last measurement's line: inside the depth count's compilation or its 2000 rounds
    returncode, text, stdout = _ctrl_c_after(argv, tmp_path, "counting the server's loop trips", 0.5)
    assert returncode == 130, (returncode, text)
    # one line per measurement, in order, the timed rounds' with their expected time
    marks = ["loading the data", "compiling the round", "compiling the sequential loop",
             "timing 2 rounds of the compiled round and the sequential loop, interleaved: ~",
             "timing the server step alone",
             "counting the server's loop trips over 2000 rounds of W=1: compiling, then ≤ ~"]
    pos = [text.find(m) for m in marks]
    assert all(i >= 0 for i in pos) and pos == sorted(pos), text
    assert re.search(r"timing 2 rounds .*: ~[\d.]+ (s|ms|µs) more \(one of each took [\d.]+ (s|ms|µs)\)", text)
    assert "fedalf bench: Ctrl-C: stopping the measurement in flight" in text
    assert text.rstrip().endswith("fedalf bench: interrupted: the table above holds what was measured (also in "
                                  f"{out})"), text
    assert "Traceback" not in text
    # the partial table: the measured figures, not the interrupted depth count
    assert stdout.startswith("fedalf bench: fedalf, model mlp, synthetic data, on cpu"), stdout
    assert re.search(r"compiled round +[\d.]+ (s|ms|µs)/round", stdout) and "server step" in stdout
    assert "server depth" not in stdout
    import json
    res = json.loads(out.read_text())
    assert res["interrupted"] is True and res["compiled_s_per_round"] > 0 and "server_depth" not in res


@pytest.mark.parametrize("sig, status, name", [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")])
def test_ctrl_c_during_the_timed_rounds_keeps_the_rounds_timed(tmp_path, sig, status, name):
    """A Ctrl-C (or a scheduler's SIGTERM) in the middle of many timed rounds prints the table of the rounds
    timed so far (and the --against round's), not "nothing was measured yet", in bench's own words, and
    exits with 128 + the signal's number."""
    import json
    out = tmp_path / "b.json"
    argv = [PY, "-m", "fedalf_jax.cli", "bench", *TINY, "--repeats", "100000", "--no-sequential", "--against",
            "fedavg", "--json", str(out)]
    returncode, text, stdout = _ctrl_c_after(argv, tmp_path, "timing 100000 rounds", 2, sig)
    assert returncode == status, (returncode, text)
    assert f"fedalf bench: {name}: stopping the measurement in flight" in text, text
    assert "next rounds" not in text  # not the run loop's message: bench has no rounds to save
    by = "" if sig == signal.SIGINT else f" by {name}"
    assert f"fedalf bench: interrupted{by}: the table above holds what was measured" in text, text
    res = json.loads(out.read_text())
    n = len(res["compiled_times"])
    assert 2 <= n < 100000 and len(res["against_times"]) == n  # whole repeats: the medians' own rounds
    assert re.search(r"compiled round +[\d.]+ (s|ms|µs)/round", stdout) and "fedalf / fedavg" in stdout, stdout


def test_sweep_width_prediction_excludes_compilation():
    """A width's time is predicted from the last width's compile-free time (∝ the width) plus its
    compilation once: W = 1 that took 60 s compiling + 10 calls of 0.1 s predicts W = 8 at 60 + 8 × 1 s."""
    measured = [(1, 60.0 + 10 * 0.1, 60.0)]
    assert B.predict_width_s(8, measured) == pytest.approx(68.0)
    assert B.predict_width_s(32, [(1, 61.0, 60.0), (8, 68.0, 60.0)]) == pytest.approx(60.0 + 8.0 * 4)
    assert B.predict_width_s(8, []) is None
    # the suite's budget uses it: a sweep width predicted from its compile-free time
    item = {"kind": "sweep", "width": 8}
    assert B.suite._predict(item, [(1, 61.0, 60.0)]) == pytest.approx(68.0)
    assert B.suite._compile_s({"kind": "sweep", "width": 2, "result": {"widths": {"2": {
        "compile_sweep_s": 3.0, "compile_single_s": 2.5}}}}) == 5.5


def test_bench_defaults_are_cpu_sized(monkeypatch, capsys):
    """On a CPU: no server-depth count unless asked, and --sweep-width times the MLP unless --model is given."""
    from fedalf_jax.cli import main
    seen = {}

    def fake_bench(cfg, *, depth_widths, progress, partial, **kw):
        seen["depth"] = depth_widths
        progress("a line")
        return {}

    def fake_sweep(cfg, *, widths, progress, partial, **kw):
        seen.setdefault("models", []).append(cfg.model)
        return {}

    monkeypatch.setattr(B, "bench", fake_bench)
    monkeypatch.setattr(B, "bench_sweep", fake_sweep)
    monkeypatch.setattr(B, "format_bench", lambda res: "table")
    monkeypatch.setattr(B, "format_bench_sweep", lambda res: "table")
    assert main(["bench", "--dataset", "synthetic"]) == 0
    assert seen["depth"] == [] and "fedalf bench: a line" in capsys.readouterr().err
    assert main(["bench", "--dataset", "synthetic", "--sweep-width", "1"]) == 0
    assert main(["bench", "--dataset", "synthetic", "--sweep-width", "1", "--model", "cnn"]) == 0
    assert seen["models"] == ["mlp", "cnn"]


# ---- item 5: experiments/gpu_session.sh -------------------------------------------------------------------

SESSION = ROOT / "experiments" / "gpu_session.sh"


@pytest.mark.parametrize("python, needle", [
    ("/bin/false", "cannot import jax"),  # a Python that fails
    ("/nonexistent/python", "no Python at /nonexistent/python"),
])
def test_gpu_session_fails_loudly(tmp_path, python, needle):
    """A step whose Python cannot run (or lacks jax) stops with a non-zero status and one line saying
    what to do; before, it ran system python3 and exited 0 after `No module named 'jax'`."""
    for step in ("0", "1"):
        r = subprocess.run(["bash", str(SESSION), step], capture_output=True, text=True, cwd=tmp_path,
                           env=_env(PYTHON=python, OUT=str(tmp_path / "out")))
        assert r.returncode != 0 and needle in r.stderr, (step, r.returncode, r.stderr)
    assert not (tmp_path / "out" / "bench").exists()


def test_gpu_session_step_whose_command_fails_exits_with_its_status(tmp_path):
    """A fedalf command that fails inside a step ends the script with that command's status (here 2: a
    bad option), after one line naming the step; before, the script went on and exited 0."""
    env = _env(PYTHON=sys.executable, OUT=str(tmp_path / "out"), ALLOW_CPU="1", SUITE="smoke", EXTRA="--rounds 0")
    r = subprocess.run(["bash", str(SESSION), "1"], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "rounds must be a positive integer" in r.stdout  # the command's own line, in the log too
    assert "gpu_session: step 1 failed (exit 2)" in r.stderr and "step 1:" not in r.stdout


def test_gpu_session_step_that_measures_nothing_fails(tmp_path):
    """Issue 36.9: a --model outside the suite (or a typo) measured nothing and the step "passed"."""
    env = _env(PYTHON=sys.executable, OUT=str(tmp_path / "out"), ALLOW_CPU="1", SUITE="smoke", EXTRA="--model nosuch")
    r = subprocess.run(["bash", str(SESSION), "1"], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "--model nosuch selects none of suite smoke's measurements" in r.stdout
    assert "gpu_session: step 1 failed (exit 2)" in r.stderr and "step 1:" not in r.stdout


def test_gpu_session_header_is_for_a_gpu_owner():
    text = SESSION.read_text()
    head = text[:text.index("set -euo pipefail")]
    assert "set -euo pipefail" in text and "python3 -m" not in text  # the project's Python, never the system's
    assert 'PY=${PYTHON:-.venv/bin/python}' in text
    for internal in ("device tool", "device-tool", "lent", "H200", "quarter hour", "carry"):
        assert internal not in head, internal


def test_gpu_session_smoke_step_on_cpu(tmp_path):
    """Step 0 with the project's Python: jax's version and devices, one tiny FedALF round, success said; on
    a CPU only with ALLOW_CPU=1 (else it stops: jax sees no GPU)."""
    env = _env(PYTHON=sys.executable, OUT=str(tmp_path / "out"))
    r = subprocess.run(["bash", str(SESSION), "0"], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert r.returncode == 1 and "jax sees no GPU" in r.stderr and "ALLOW_CPU=1" in r.stderr, r.stderr
    r = subprocess.run(["bash", str(SESSION), "0"], capture_output=True, text=True, cwd=tmp_path,
                       env={**env, "ALLOW_CPU": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    import jax
    assert f"jax {jax.__version__} backend cpu devices [" in r.stdout
    assert "gpu_session: smoke OK: jax on cpu ran one FedALF round" in r.stdout
    assert '"status": "done"' in (tmp_path / "out" / "smoke-run" / "summary.json").read_text()
    assert "smoke OK" in (tmp_path / "out" / "step0.log").read_text()


def _tiny_configs(n=3):
    from fedalf_jax.experiment.config import Config
    base = dict(dataset="synthetic", model="mlp", clients=6, clients_per_round=3, synthetic_train=300,
                synthetic_test=60, algorithm="fedalf", rounds=2, eval_every=1)
    return [Config.from_dict({**base, "seed": s}) for s in range(n)]


def test_sweep_says_before_starting_when_its_checkpoints_exceed_the_free_disk(tmp_path, monkeypatch, capsys):
    """One line before the runs start, naming what the checkpoints need (one per run plus the one being
    written) and the free space, when they do not fit; nothing when they do."""
    import shutil
    from collections import namedtuple

    import jax
    import numpy as np

    from fedalf_jax.experiment import sweep as S
    from fedalf_jax.experiment import sweep_memory as M
    from fedalf_jax.experiment.build import build
    from fedalf_jax.sim.round import init_state
    configs = _tiny_configs(3)
    exp = build(configs[0])  # one run's state, as a checkpoint holds it (real arrays, not shapes)
    one = sum(np.asarray(x).nbytes for x in jax.tree_util.tree_leaves(init_state(exp.spec, 0)))
    usage = namedtuple("usage", "total used free")
    started = []
    monkeypatch.setattr(S, "_resume", lambda root, **kw: started.append(root) or [])
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10 ** 12, 0, one))  # room for one checkpoint
    S.sweep(configs, tmp_path / "s", chunk=1, progress=False)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "checkpoints need" in ln]
    assert len(lines) == 1 and started, err
    assert f"~{M._gb(4 * one)} (one per run: 3 runs, ~{M._gb(3 * one)}, plus one being written)" in lines[0]
    assert f"more than the {M._gb(one)} free in {tmp_path / 's'}" in lines[0]
    assert M.check_disk(configs, tmp_path, announce=lambda m: None) == 4 * one
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10 ** 12, 0, 4 * one))  # just fits
    assert M.check_disk(configs, tmp_path, announce=lambda m: pytest.fail(m)) is None


# ---- item 5: no jax API that a newer jax removes -------------------------------------------------------------

# jax APIs deprecated by jax 0.10 and removed in it or after (checked against jax's CHANGELOG up to 0.11.1),
# or whose meaning changed: a use of one breaks the package on the jax a GPU machine carries, not on 0.10.2.
REMOVED_JAX_API = {
    r"\bjax\.tree_(map|multimap|leaves|flatten|unflatten|structure|transpose|reduce|all)\b":
        "jax.tree_* aliases (removed in 0.6): jax.tree_util.* or jax.tree.*",
    r"\bjax\.experimental\.maps\b|\bxmap\b": "jax.experimental.maps / xmap (removed in 0.4.31)",
    r"\bxla_bridge\b|\bjax\.lib\b": "jax.lib.xla_bridge (removed): jax.devices(), jax.default_backend()",
    r"\bjax\.experimental\.pjit\b|from jax\.experimental import pjit": "pjit (deprecated): jax.jit",
    r"\bjax\.experimental\.shard_map\b|from jax\.experimental import shard_map": "moved to jax.shard_map",
    r"\bKeyArray\b|\bPRNGKeyArray\b": "jax.random.KeyArray (removed): jax.Array",
    r"\.device_buffers?\b": ".device_buffer (removed): .addressable_shards",
    r"\bjax\.config\.jax_\w+|\bconfig\.values\b": "jax.config.jax_* attribute reads (deprecated style): jax.config.read(name)",
    r"\bjax\.core\.(?!Tracer\b)\w+|from jax\.core import": "jax.core internals (removed in 0.11): jax.extend",
    r"\bjax\._src\b|\bjax\.interpreters\b|\bjax\.linear_util\b|\bjax\.abstract_arrays\b": "jax internals",
    r"\bjax\.experimental\.host_callback\b": "host_callback (removed): jax.debug.callback / jax.pure_callback",
    r"\bdevice_put_(replicated|sharded)\b": "deprecated in 0.11: jax.device_put",
    r"\bxla_computation\b": "jax.xla_computation (removed): jax.jit(f).lower(...)",
    r"\bDeviceArray\b": "DeviceArray (removed): jax.Array",
    r"\bjax\.cloud_tpu_init\b": "removed in 0.11",
    r"\bjnp\.empty(_like)?\b": "uninitialised since jax 0.11 (zeros before): jnp.zeros",
}


def _source_files():
    for folder in ("fedalf_jax", "examples", "experiments"):
        yield from sorted((ROOT / folder).rglob("*.py"))


def test_no_jax_api_that_newer_jax_removes():
    assert len(list(_source_files())) > 20
    found = []
    for path in _source_files():
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            for pattern, why in REMOVED_JAX_API.items():
                if re.search(pattern, code):
                    found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}  ({why})")
    assert not found, "\n".join(found)


def test_the_scan_catches_what_it_lists():
    """Each pattern matches the use it names (a pattern that matches nothing would pass any code)."""
    uses = ["jax.tree_map(f, x)", "from jax.experimental.maps import xmap", "jax.lib.xla_bridge.get_backend()",
            "from jax.experimental.pjit import pjit", "from jax.experimental.shard_map import shard_map",
            "k: jax.random.KeyArray", "x.device_buffer", "jax.config.jax_enable_x64",
            "jax.core.get_aval(x)", "from jax._src import core", "jax.experimental.host_callback.call",
            "jax.device_put_sharded(xs, ds)", "jax.xla_computation(f)", "jnp.DeviceArray", "import jax.cloud_tpu_init",
            "jnp.empty((3,))"]
    for use, (pattern, why) in zip(uses, REMOVED_JAX_API.items()):
        assert re.search(pattern, use), (use, why)
    assert not any(re.search(p, "isinstance(x, jax.core.Tracer); jax.tree_util.tree_map(f, x); jax.shard_map")
                   for p in REMOVED_JAX_API)
