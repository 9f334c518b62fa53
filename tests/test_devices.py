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
