"""``fedalf report``'s privacy–utility frontier (issue 15 item 6): per (model, dataset, partition), the final
mean accuracy and fairness angle of each private variant against its ε, with non-private FedALF (and
FedAvg) as horizontal lines. The expected numbers are computed here from the runs' ``metrics.csv`` and
``config.json`` files, not by the code under test."""

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from fedalf_jax.cli import main
from fedalf_jax import reporting as R
from fedalf_jax.experiment.config import Config
from fedalf_jax.experiment.rundir import RunDir

PNG = b"\x89PNG\r\n\x1a\n"
EPSILONS = (1.0, 4.0)
SEEDS = (0, 1)
# Tiny real runs. history off and the pgd QP solver only make FedALF's program quicker to compile; the
# private and the non-private sweep share them, so the baseline is the private variant's own FedALF.
COMMON = ["--dataset", "synthetic", "--model", "mlp", "--clients", "6", "--clients-per-round", "3",
          "--rounds", "2", "--eval-every", "1", "--synthetic-train", "240", "--synthetic-test", "60",
          "--batch-size", "20", "--history", "off", "--qp-method", "pgd", "--no-progress",
          "--seeds", *map(str, SEEDS)]


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    """LDP-FedALF at ε 1 and 4 and non-private FedALF, 2 seeds each (one sweep folder each)."""
    root = tmp_path_factory.mktemp("frontier")
    private, plain = root / "private", root / "plain"
    assert main(["sweep", "--algorithm", "fedalf", "--ldp", "adaptive", "--epsilon", *map(str, EPSILONS),
                 *COMMON, "--out", str(private)]) == 0
    assert main(["sweep", "--algorithm", "fedalf", *COMMON, "--out", str(plain)]) == 0
    return private, plain


def _run_dirs(folder: Path) -> list[Path]:
    return sorted(p.parent for p in folder.rglob("config.json"))


def _final(run_dir: Path) -> tuple[float, float]:
    """The final evaluation's mean accuracy and angle (degrees), read from metrics.csv."""
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    last = max(rows, key=lambda r: int(r["round"]))
    return float(last["mean_acc"]), float(last["angle_deg"])


def _expected(dirs: list[Path]) -> dict:
    """{ε or None (no privacy): (acc mean, acc std, angle mean, angle std)} over seeds (std ddof=1)."""
    by_eps: dict = {}
    for d in dirs:
        cfg = json.loads((d / "config.json").read_text())
        eps = float(cfg["epsilon"]) if cfg["ldp"] != "none" else None
        by_eps.setdefault(eps, []).append(_final(d))
    out = {}
    for eps, finals in by_eps.items():
        acc, angle = np.array(finals).T
        assert acc.size == len(SEEDS)
        out[eps] = (acc.mean(), acc.std(ddof=1), angle.mean(), angle.std(ddof=1))
    return out


def _cells(paths):
    """The report's cells of the runs in ``paths``, each with its η chosen (as ``report`` builds them)."""
    runs, _, _ = R.load_runs(R.find_runs(paths))
    R.name_variants(runs)
    cells, _ = R.build_cells(runs)
    for c in cells:
        R.choose_eta(c)
    return cells


def test_frontier_plots_each_epsilon_against_fedalf(sweeps, tmp_path):
    private, plain = sweeps
    res = R.report([str(private), str(plain)], str(tmp_path / "rep"))
    fig = tmp_path / "rep" / "figures" / "mlp_synthetic_pat1_frontier.png"
    assert str(fig) in res["figures"]
    assert fig.read_bytes().startswith(PNG)
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "(figures/mlp_synthetic_pat1_frontier.png)" in md and R.FRONTIER_NOTE in md

    expected = _expected(_run_dirs(private) + _run_dirs(plain))
    lines, baselines = R.frontier_data(_cells([private, plain]))
    # the two ε cells of LDP-FedALF are one line; its points by ascending ε
    assert list(lines) == ["LDP-FedALF"]
    points = lines["LDP-FedALF"]
    assert {p.eps for p in points} == set(EPSILONS)
    assert [p.eps for p in points] == sorted(EPSILONS)
    for p in points:
        assert tuple(p[1:]) == pytest.approx(expected[p.eps], rel=1e-6, abs=1e-9)
    assert list(baselines) == ["FedALF (no privacy)"]
    base = baselines["FedALF (no privacy)"]
    assert base.algorithm == "fedalf"
    assert tuple(base[1:]) == pytest.approx(expected[None], rel=1e-6, abs=1e-9)
    # the same final-value convention as the table
    rows = {r["algorithm"]: r for r in res["rows"]}
    for p in points:
        row = rows[f"LDP-FedALF (epsilon={p.eps:g})"]
        assert (p.acc, p.angle) == pytest.approx((row["final_acc_mean"], row["final_angle_mean"]))


def test_no_frontier_with_one_epsilon(sweeps, tmp_path):
    private, plain = sweeps
    eps1 = [d for d in _run_dirs(private) if json.loads((d / "config.json").read_text())["epsilon"] == 1.0]
    assert len(eps1) == len(SEEDS)
    paths = [*map(str, eps1), str(plain)]
    res = R.report(paths, str(tmp_path / "rep"))
    figs = {Path(f).name for f in res["figures"]}
    assert "mlp_synthetic_pat1_curves.png" in figs and "mlp_synthetic_pat1_privacy.png" in figs
    assert not any(f.endswith("_frontier.png") for f in figs)
    assert not list((tmp_path / "rep" / "figures").glob("*_frontier.png"))
    assert R.FRONTIER_NOTE not in (tmp_path / "rep" / "report.md").read_text()
    lines, _ = R.frontier_data(_cells(paths))
    assert [p.eps for p in lines["LDP-FedALF"]] == [1.0]


# ---- hand-built runs (no training): grouping, ε order and the baselines -------------------------

def _fake_run(root: Path, name: str, acc: float, angle: float, **options) -> None:
    """A done 2-round run whose final evaluation has mean accuracy ``acc`` and angle ``angle`` (degrees)."""
    cfg = Config(**{"dataset": "fmnist", "partition": "pat1", "model": "mlp", "clients": 2,
                    "clients_per_round": 2, "rounds": 2, "eval_every": 1, **options})
    rd = RunDir(root / name)
    rd.create()
    rd.write_config(cfg)
    w = rd.writers(cfg)[0]
    for t, (a, g) in enumerate([(0.1, 80.0), (acc - 0.05, angle + 3.0), (acc, angle)]):
        w.write_scalars(t, {"mean_acc": a, "angle": math.radians(g), "angle_deg": g, "acc_0": a, "acc_1": a})
    w.close()
    rd.write_summary({"status": "done", "rounds": 2, "round": 2,
                      "final": {"mean_acc": acc, "angle": math.radians(angle), "angle_deg": angle}})


def test_frontier_groups_cells_that_differ_only_in_epsilon(tmp_path):
    """Two private FedALF variants (rho 0.1 and 1) at ε 0.5, 4 and 10, one seed each; FedALF, FedAvg and
    qFedAvg without privacy. ε is ordered as a number (10 after 4), and qFedAvg is no baseline."""
    root = tmp_path / "runs"
    acc = {}
    for rho in (0.1, 1.0):
        for k, eps in enumerate((10.0, 0.5, 4.0)):
            acc[rho, eps] = 0.3 + 0.1 * k + rho / 10
            _fake_run(root, f"ldp_rho{rho}_eps{eps}", acc[rho, eps], 40.0 - eps, algorithm="fedalf",
                      ldp="adaptive", epsilon=eps, rho=rho)
    _fake_run(root, "fedavg", 0.6, 35.0, algorithm="fedavg")
    for seed, a in enumerate((0.8, 0.9)):
        _fake_run(root, f"fedalf_s{seed}", a, 20.0 + seed, algorithm="fedalf", rho=0.1, seed=seed)
    _fake_run(root, "qfedavg", 0.5, 30.0, algorithm="qfedavg")

    lines, baselines = R.frontier_data(_cells([root]))
    assert sorted(lines) == ["LDP-FedALF (rho=0.1)", "LDP-FedALF (rho=1)"]
    for rho in (0.1, 1.0):
        points = lines[f"LDP-FedALF (rho={rho:g})"]
        assert [p.eps for p in points] == [0.5, 4.0, 10.0]
        for p in points:
            assert (p.acc, p.acc_std, p.angle, p.angle_std) == (pytest.approx(acc[rho, p.eps]), None,
                                                                 pytest.approx(40.0 - p.eps), None)
    assert list(baselines) == ["FedALF (no privacy)", "FedAvg (no privacy)"]
    fedalf, fedavg = baselines.values()
    assert (fedalf.algorithm, fedavg.algorithm) == ("fedalf", "fedavg")
    assert (fedalf.acc, fedalf.acc_std) == (pytest.approx(0.85), pytest.approx(np.std([0.8, 0.9], ddof=1)))
    assert (fedalf.angle, fedavg.acc, fedavg.acc_std) == (pytest.approx(20.5), pytest.approx(0.6), None)

    assert main(["report", str(root), "--out", str(tmp_path / "rep")]) == 0
    assert (tmp_path / "rep" / "figures" / "mlp_fmnist_pat1_frontier.png").read_bytes().startswith(PNG)
