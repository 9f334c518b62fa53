"""fedalf sweep runs each distinct configuration once (issue #29 item 7): combinations that differ only
in options their algorithm ignores (FedLF with client_grad=full has no local training, so --lr is not
read) collapse to one run, said in one line before the sweep starts; and the sweep shows its stage on
stderr from its start, before anything compiles."""

import csv
import json
import re

from fedalf_jax.cli import main
from fedalf_jax.experiment import sweep_plan as P
from fedalf_jax.experiment.config import Config
from fedalf_jax.experiment.rundir import RunDir

TINY = ["--dataset", "synthetic", "--model", "mlp", "--clients", "8", "--clients-per-round", "3",
        "--synthetic-train", "600", "--synthetic-test", "160", "--batch-size", "20", "--rounds", "2",
        "--eval-every", "2"]
BASE = dict(dataset="synthetic", model="mlp", clients=8, clients_per_round=3, synthetic_train=600,
            synthetic_test=160, batch_size=20, rounds=2, eval_every=2)
LRS = ["0.01", "0.05", "0.1"]


# a run's wall-clock seconds differ; the QP's iteration count and residual come from a tolerance loop
NOT_COMPARED = ("seconds_per_round", "qp_iters", "qp_residual")


def _rows(path):
    with open(path) as f:
        return [{k: v for k, v in r.items() if k not in NOT_COMPARED} for r in csv.DictReader(f)]


def _run_dirs(out):
    return sorted(p.name for p in out.iterdir() if (p / "config.json").is_file())


def test_distinct_counts_of_the_readmes_sweep_and_of_options_an_algorithm_ignores():
    # the README's old sweep: fedavg and fedalf read lr (2 × 2 partitions × 3 lr × 3 seeds = 36 runs),
    # FedLF (client_grad=full) does not: its 18 combinations are 2 partitions × 3 seeds = 6 runs
    cfgs = P.expand({"model": "mlp"}, {"algorithm": ["fedavg", "fedlf", "fedalf"], "partition": ["pat1", "pat2"],
                                       "lr": [0.01, 0.05, 0.1]}, [0, 1, 2])
    kept, notice = P.distinct(cfgs)
    assert len(cfgs) == 54 and len(kept) == 42
    assert [c.lr for c in kept if c.algorithm == "fedlf"] == [0.01] * 6  # the first of each, in order
    assert notice == ("fedlf ignores --lr (client_grad=full): 54 combinations are 42 distinct runs "
                      "(fedlf's 18 are 6); running each once")
    # FedLF with local training reads lr: nothing collapses
    local = P.expand({"model": "mlp", "algorithm": "fedlf", "client_grad": "local"}, {"lr": [0.01, 0.1]}, [0])
    assert P.distinct(local) == (local, None)
    # mu is FedProx's alone: fedavg's 2 are 1, fedprox keeps both
    kept, notice = P.distinct(P.expand({"model": "mlp"}, {"algorithm": ["fedavg", "fedprox"], "mu": [0.0, 0.1]}, [0]))
    assert [(c.algorithm, c.mu) for c in kept] == [("fedavg", 0.0), ("fedprox", 0.0), ("fedprox", 0.1)]
    assert notice.startswith("fedavg ignores --mu: 4 combinations are 3 distinct runs")
    # epsilon without a privacy mechanism; delta and clip without dp gaussian or central
    kept, notice = P.distinct(P.expand({"model": "mlp", "algorithm": "fedavg"}, {"epsilon": [1.0, 2.0],
                                                                                 "clip": [0.5, 1.0]}, [0]))
    assert len(kept) == 1 and "--epsilon (ldp=none, dp=none)" in notice and "--clip (dp=none)" in notice
    # runs of different lengths are different runs, though their identity (rounds excluded) is one
    rounds = P.expand({"model": "mlp", "algorithm": "fedlf"}, {"rounds": [2, 4]}, [0])
    assert P.distinct(rounds) == (rounds, None)
    # a user's algorithm may read any hyper-parameter: nothing is known ignored
    user = [Config(model="mlp", algorithm="examples.feddyn:feddyn", lr=lr) for lr in (0.01, 0.1)]
    assert P.distinct(user) == (user, None)


def test_a_partition_ignores_alpha_outside_dirichlet_and_assign_outside_pat_for_every_algorithm():
    # the examples' study (experiments/examples_study.sh) as one sweep: pat1 and Dirichlet over two alphas
    cfgs = P.expand({"model": "mlp"}, {"algorithm": ["fedavg", "examples.feddyn:feddyn"],
                                       "partition": ["pat1", "dirichlet"], "alpha": [0.3, 0.5]}, [0])
    kept, notice = P.distinct(cfgs)
    assert [(c.algorithm, c.partition, c.alpha) for c in kept] == [
        ("fedavg", "pat1", 0.3), ("fedavg", "dirichlet", 0.3), ("fedavg", "dirichlet", 0.5),
        ("examples.feddyn:feddyn", "pat1", 0.3), ("examples.feddyn:feddyn", "dirichlet", 0.3),
        ("examples.feddyn:feddyn", "dirichlet", 0.5)]
    assert "fedavg ignores --alpha (partition=pat1)" in notice and "8 combinations are 6 distinct runs" in notice
    kept, notice = P.distinct(P.expand({"model": "mlp", "algorithm": "fedavg"},
                                       {"partition": ["iid", "pat2"], "assign": ["fedlf", "shards"]}, [0]))
    assert [(c.partition, c.assign) for c in kept] == [("iid", "fedlf"), ("pat2", "fedlf"), ("pat2", "shards")]
    assert "--assign (partition=iid)" in notice


def test_a_sweep_runs_fedlfs_ignored_lr_values_once_says_so_and_reports_and_resumes(tmp_path, capsys, compile_cache):
    out = tmp_path / "sw"
    grid = ["sweep", *TINY, "--algorithm", "fedavg", "fedlf", "--lr", *LRS, "--seeds", "0", "1", "--no-progress"]
    assert main([*grid, "--out", str(out)]) == 0
    cap = capsys.readouterr()
    # fedavg: 3 lr × 2 seeds = 6 runs; fedlf: one run per seed = 2; 12 combinations in all
    assert "8 runs: 8 done" in cap.out
    said = [line for line in cap.err.splitlines() if "distinct" in line]
    assert said == ["fedalf sweep: fedlf ignores --lr (client_grad=full): 12 combinations are 8 distinct runs "
                    "(fedlf's 6 are 2); running each once"], cap.err
    assert cap.err.splitlines()[0] == said[0]  # before the sweep starts
    listed = json.loads((out / "sweep.json").read_text())["runs"]
    assert len(listed) == 8 and len(_run_dirs(out)) == 8
    assert sorted((r["config"]["algorithm"], r["config"]["seed"]) for r in listed if r["config"]["algorithm"] == "fedlf") \
        == [("fedlf", 0), ("fedlf", 1)]
    assert sorted(r["dir"] for r in listed) == _run_dirs(out)
    # the report reads it: one FedLF row, of 2 seeds
    assert main(["report", str(out), "--out", str(tmp_path / "rep")]) == 0
    with open(tmp_path / "rep" / "table.csv") as f:
        table = list(csv.DictReader(f))
    assert [(r["algorithm"], r["seeds"]) for r in table if r["algorithm"].startswith("FedLF")] == [("FedLF", "2")], table
    # resumed with the options that made it (they describe the sweep's distinct runs): nothing left to do
    capsys.readouterr()
    assert main([*grid, "--resume", "--out", str(out)]) == 0
    assert "8 runs: 8 done" in capsys.readouterr().out


def test_a_sweep_json_from_before_that_lists_duplicates_still_resumes(tmp_path, capsys, compile_cache):
    """A sweep planned before the dedupe lists every combination: --resume runs them all, as before, with
    or without the options that made it; and the three FedLF runs that differ only in lr are one
    trajectory, bit for bit (what the dedupe relies on)."""
    out = tmp_path / "old"
    cfgs = P.expand({**BASE, "algorithm": "fedlf"}, {"lr": [float(x) for x in LRS]}, [0])
    out.mkdir()
    P.plan(cfgs, out, {"chunk": None})  # sweep.json as the old code wrote it: 3 runs
    assert main(["sweep", "--resume", "--out", str(out), "--no-progress"]) == 0
    assert "3 runs: 3 done" in capsys.readouterr().out
    runs = [_rows(out / d / "metrics.csv") for d in _run_dirs(out)]
    assert len(runs) == 3 and runs[0] and {r["round"] for r in runs[0]} == {"0", "2"}
    assert runs[0] == runs[1] == runs[2]
    assert main(["sweep", *TINY, "--algorithm", "fedlf", "--lr", *LRS, "--resume", "--out", str(out),
                 "--no-progress"]) == 0
    assert "3 runs: 3 done" in capsys.readouterr().out
    assert all(RunDir(out / d).status() == "done" for d in _run_dirs(out))


def test_a_sweep_shows_its_stage_from_the_start_before_it_compiles(tmp_path, capsys, monkeypatch):
    from fedalf_jax.experiment import loop
    monkeypatch.setenv("FEDALF_MEMORY_LIMIT", "10GB")  # sized: its programs compile while it plans memory
    loop._PROGRAMS.clear()  # an earlier test's run of the same programs in this process would leave nothing to compile
    capsys.readouterr()
    assert main(["sweep", *TINY, "--algorithm", "fedavg", "--seeds", "0", "1", "--out", str(tmp_path / "sw")]) == 0
    err = capsys.readouterr().err
    said = [s.strip() for s in re.split(r"[\r\n]", err) if s.strip()]
    first = next(i for i, s in enumerate(said) if "(planning 2 runs)" in s)
    memory = next(i for i, s in enumerate(said) if "(planning memory)" in s)
    compiling = next(i for i, s in enumerate(said) if "(compiling)" in s)
    chunk = next(i for i, s in enumerate(said) if "sweep chunk" in s)
    assert said[0].startswith("fedalf sweep") and first <= 1, said[:3]  # its first line: the bar, then the stage
    assert first < memory < compiling < chunk, said


def test_fj_sweep_runs_ignored_values_once_and_resumes_with_the_same_call(tmp_path, compile_cache):
    import fedalf_jax as fj
    call = dict(out=tmp_path / "api", grid={"lr": [0.01, 0.1]}, seeds=[0], progress=False)
    first = fj.sweep(fj.Config(algorithm="fedlf", **BASE), **call)
    assert first.names == ["fedlf"] and _run_dirs(tmp_path / "api") == ["fedlf"]  # 2 lr × 1 seed: 1 run
    again = fj.sweep(fj.Config(algorithm="fedlf", **BASE), **call, resume=True)
    assert again.names == ["fedlf"]
