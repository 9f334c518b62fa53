"""--devices N: a sweep's run axis and one run's sampled-client axis sharded over a jax.sharding mesh,
on 4 CPU devices (XLA's host-device flag, in a subprocess: the device count is fixed when JAX
starts). Every device computes the single-device program for its own clients (one run; the server
step replicated on every device after an exact all-gather) or its own runs (a sweep), so the results
equal one device's up to float32 rounding: XLA:CPU compiles a multi-device program with other
kernels/threading for the same ops (measured: 1-ulp differences in a loss at the first evaluation,
growing through the chaotic training; docs/scaling.md)."""

import csv
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

NOT_COMPARED = ("seconds_per_round", "qp_iters", "qp_residual")
SCRIPT = textwrap.dedent("""
    import sys
    from fedalf_jax.cli import main
    T = ["--dataset", "synthetic", "--model", "mlp", "--clients", "12", "--clients-per-round", "8",
         "--synthetic-train", "600", "--synthetic-test", "160", "--batch-size", "20", "--rounds", "4",
         "--eval-every", "2", "--no-progress", "--algorithm", "fedalf", "--history", "on"]
    out = sys.argv[1]
    import jax
    assert len(jax.devices()) == 4, jax.devices()
    for d in ("1", "4"):
        assert main(["run", *T, "--devices", d, "--out", f"{out}/run{d}"]) == 0
        assert main(["sweep", *T, "--seeds", "0", "1", "2", "--lr", "0.05", "0.1", "--devices", d,
                     "--out", f"{out}/sweep{d}"]) == 0
    assert main(["run", *T, "--clients-per-round", "3", "--devices", "4", "--out", f"{out}/bad"]) == 2
""")


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def _same(a, b):
    ra, rb = _rows(a), _rows(b)
    assert [r["round"] for r in ra] == [r["round"] for r in rb] == ["0", "2", "4"]
    for x, y in zip(ra, rb):
        for k in x:
            if k not in NOT_COMPARED:
                np.testing.assert_allclose(float(x[k]), float(y[k]), rtol=1e-3, atol=1e-4, err_msg=k)


def test_four_cpu_devices_give_one_devices_metrics(tmp_path):
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], env=env, capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "--devices 4 shards the 3 clients" in p.stderr
    _same(tmp_path / "run1" / "metrics.csv", tmp_path / "run4" / "metrics.csv")
    runs = sorted(d.name for d in (tmp_path / "sweep1").iterdir() if d.is_dir())
    assert len(runs) == 6
    for r in runs:  # 6 runs padded to 8 over 4 devices: 2 per device
        _same(tmp_path / "sweep1" / r / "metrics.csv", tmp_path / "sweep4" / r / "metrics.csv")


def test_more_devices_than_jax_sees_is_a_one_line_error(capsys, tmp_path):
    from fedalf_jax.cli import main
    code = main(["run", "--dataset", "synthetic", "--model", "mlp", "--clients", "8", "--clients-per-round", "4",
                 "--devices", "64", "--rounds", "1", "--no-progress", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2 and "xla_force_host_platform_device_count=64" in err and len(err.strip().splitlines()) == 1


def test_one_run_spans_two_processes(tmp_path):
    """jax.distributed over 127.0.0.1 with CPU collectives (gloo): 2 processes, one device each, one run
    whose clients are sharded over both; process 0 writes the run directory."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t = ["--dataset", "synthetic", "--model", "mlp", "--clients", "12", "--clients-per-round", "8",
         "--synthetic-train", "600", "--synthetic-test", "160", "--batch-size", "20", "--rounds", "4",
         "--eval-every", "2", "--no-progress", "--algorithm", "fedalf", "--history", "on"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    procs = [subprocess.Popen([sys.executable, "-m", "fedalf_jax.cli", "run", *t, "--devices", "2",
                               "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", str(i),
                               "--out", str(tmp_path / "mp")], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    last = [o[0].strip().splitlines()[-1] for o in outs]
    assert last[0] == last[1] and last[0].startswith("round 4: mean_acc")  # both processes saw the same run
    one = subprocess.run([sys.executable, "-m", "fedalf_jax.cli", "run", *t, "--out", str(tmp_path / "one")],
                         env=env, capture_output=True, text=True, timeout=600)
    assert one.returncode == 0, one.stderr[-2000:]
    _same(tmp_path / "one" / "metrics.csv", tmp_path / "mp" / "metrics.csv")
