"""Issue 49 item 1: ``fedalf sweep --processes P`` runs a sweep as P processes (this one and P − 1 it starts,
each a ``--shard`` slice of one-run calls into the same ``--out``), so that a CPU's cores compute runs side by
side; every run's metrics are those of the same sweep in one process, bit for bit."""

import csv

import pytest

from fedalf_jax.cli import main

FLAGS = ["--dataset", "synthetic", "--clients", "8", "--clients-per-round", "3", "--synthetic-train", "240",
         "--synthetic-test", "60", "--algorithm", "fedavg", "--model", "mlp", "--seeds", "0", "1", "2",
         "--rounds", "2", "--eval-every", "1", "--checkpoint-every", "never", "--no-progress"]


def _metrics(path):
    with open(path) as f:
        return [{k: v for k, v in row.items() if k != "seconds_per_round"} for row in csv.DictReader(f)]


def test_two_processes_run_every_run_once_and_as_one_process_would(tmp_path, capsys):
    assert main(["sweep", *FLAGS, "--out", str(tmp_path / "one")]) == 0
    assert main(["sweep", *FLAGS, "--out", str(tmp_path / "two"), "--processes", "2"]) == 0
    out = capsys.readouterr().out
    assert f"3 runs: 3 done -> {tmp_path / 'two'}" in out  # the last lines count the children's runs too
    for seed in (0, 1, 2):  # seed 1 is slice 1/2's only call: the child's
        a = _metrics(tmp_path / "one" / f"fedavg_seed{seed}" / "metrics.csv")
        b = _metrics(tmp_path / "two" / f"fedavg_seed{seed}" / "metrics.csv")
        assert len(a) == 3 and a == b


@pytest.mark.parametrize("extra, needle", [(["--processes", "0"], "--processes must be a positive integer, got 0"),
                                           (["--processes", "2", "--shard", "0/2"], "give --processes or --shard")])
def test_a_wrong_processes_is_one_line(tmp_path, capsys, extra, needle):
    assert main(["sweep", *FLAGS, "--out", str(tmp_path / "x"), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1
