"""``fedalf report``: hand-built run directories with known numbers; the expected table values are
computed here with numpy from the numbers written, not by the code under test."""

import csv
import math
from pathlib import Path

import numpy as np
import pytest

from fedalf_jax.cli import main
from fedalf_jax.experiment.config import Config, ConfigError
from fedalf_jax.reporting import load_runs, name_variants, report
from fedalf_jax.experiment.rundir import RunDir
from fedalf_jax.experiment.sweepdir import find_runs, write_sweep

ROUNDS = 50
EVAL_ROUNDS = np.arange(0, ROUNDS + 1, 10)                      # 6 evaluations
ACC_SWING = np.array([-0.40, -0.20, -0.05, 0.03, -0.02, 0.0])  # acc - final acc, per evaluation
ANGLE_SWING = np.array([20.0, 10.0, 5.0, -1.0, 2.0, 0.0])      # angle - final angle (degrees)
CLIENT_OFFSETS = np.array([-0.1, -0.05, 0.05, 0.1])             # acc_i - mean acc (4 clients)
PNG = b"\x89PNG\r\n\x1a\n"
LAST = 3


def make_run(root: Path, name: str, *, final_acc: float, final_angle: float, status: str = "done",
             **options) -> dict:
    """A run directory with 6 evaluations ending at ``final_acc`` / ``final_angle``; returns its curves.
    ``status``: done / diverged (summary.json says so) / running (no summary.json, nor the last evaluation)."""
    cfg = Config(**{"dataset": "fmnist", "partition": "pat1", "model": "mlp", "clients": 4,
                    "clients_per_round": 2, "rounds": ROUNDS, "eval_every": 10, **options})
    rd = RunDir(root / name)
    rd.create()
    rd.write_config(cfg)
    acc, angle = final_acc + ACC_SWING, final_angle + ANGLE_SWING
    w = rd.writers(cfg)[0]
    upto = len(EVAL_ROUNDS) - (status == "running")  # a run in progress has not reached its last round
    for t, a, g in list(zip(EVAL_ROUNDS, acc, angle))[:upto]:
        per_client = {f"acc_{i}": a + o for i, o in enumerate(CLIENT_OFFSETS)}
        w.write_scalars(int(t), {"mean_acc": a, "angle": math.radians(g), "angle_deg": g,
                                 "worst10_acc": a + CLIENT_OFFSETS.min(), **per_client})  # 4 clients: the worst one
    w.close()
    if status != "running":
        rd.write_summary({"status": status, "rounds": ROUNDS, "round": ROUNDS,
                          "final": {"mean_acc": acc[-1], "angle": math.radians(angle[-1]), "angle_deg": angle[-1]}})
    return {"acc": acc, "angle": angle}


# algorithm options -> {η: [final accuracies per seed]}; angles are 30 - 20·acc + seed
FEDAVG = {0.01: [0.70, 0.72, 0.71], 0.05: [0.80, 0.83, 0.78]}
FEDLF_FULL = {0.05: [0.85, 0.86], 0.1: [0.88, 0.90]}   # η = server_lr; 0.1 also has a diverged seed
FEDLF_LOCAL = {0.01: [0.60, 0.62], 0.05: [0.50, 0.52]}  # η = lr


def _angle(acc: float, seed: int) -> float:
    return 30.0 - 20.0 * acc + seed


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """fmnist pat1: FedAvg (η=lr) and FedLF full (η=server_lr) / local (η=lr), 2-3 seeds per η;
    FedALF and LDP-FedALF (1 η, 2 seeds); one diverged FedLF-full seed; one running FedAvg run;
    fmnist pat2: one FedAvg seed."""
    root = tmp_path_factory.mktemp("runs")
    curves = {}

    def add(key, name, **kw):
        curves.setdefault(key, []).append(make_run(root, name, **kw))

    for lr, finals in FEDAVG.items():
        for seed, a in enumerate(finals):
            add(("fedavg", lr), f"fedavg_lr{lr}_s{seed}", final_acc=a, final_angle=_angle(a, seed),
                algorithm="fedavg", lr=lr, seed=seed)
    for slr, finals in FEDLF_FULL.items():
        for seed, a in enumerate(finals):
            add(("fedlf_full", slr), f"fedlf_full_slr{slr}_s{seed}", final_acc=a, final_angle=_angle(a, seed),
                algorithm="fedlf", client_grad="full", server_lr=slr, seed=seed)
    make_run(root, "fedlf_full_slr0.1_s2", final_acc=0.1, final_angle=80.0, status="diverged",
             algorithm="fedlf", client_grad="full", server_lr=0.1, seed=2)
    for lr, finals in FEDLF_LOCAL.items():
        for seed, a in enumerate(finals):
            add(("fedlf_local", lr), f"fedlf_local_lr{lr}_s{seed}", final_acc=a, final_angle=_angle(a, seed),
                algorithm="fedlf", client_grad="local", lr=lr, seed=seed)
    for ldp in ("none", "adaptive"):
        for seed, a in enumerate([0.75, 0.77]):
            add((ldp, 0.05), f"fedalf_{ldp}_s{seed}", final_acc=a - (ldp != "none") * 0.1,
                final_angle=_angle(a, seed), algorithm="fedalf", ldp=ldp, lr=0.05, seed=seed)
    make_run(root, "fedavg_lr0.1_s0_running", final_acc=0.99, final_angle=1.0, status="running",
             algorithm="fedavg", lr=0.1, seed=0)
    add(("fedavg_pat2", 0.05), "fedavg_pat2_s0", final_acc=0.66, final_angle=12.5,
        algorithm="fedavg", lr=0.05, partition="pat2", seed=0)
    return root, curves


@pytest.fixture(scope="module")
def rep(runs, tmp_path_factory):
    root, _ = runs
    out = tmp_path_factory.mktemp("report") / "new" / "folder"  # created by report()
    return report([str(root)], str(out), last=LAST), out


def _row(res, algorithm, partition="pat1"):
    found = [r for r in res["rows"] if r["algorithm"] == algorithm and r["partition"] == partition]
    assert len(found) == 1, [(r["algorithm"], r["partition"]) for r in res["rows"]]
    return found[0]


def _expected(curves_of_seeds):
    acc = [c["acc"] for c in curves_of_seeds]
    angle = [c["angle"] for c in curves_of_seeds]
    return {
        "final_acc": [a[-1] for a in acc], "final_angle": [g[-1] for g in angle],
        "lastK_acc": [np.mean(a[-LAST:]) for a in acc], "lastK_angle": [np.mean(g[-LAST:]) for g in angle],
    }


@pytest.mark.parametrize("algorithm, key, eta, eta_option", [
    ("FedAvg", "fedavg", 0.05, "lr"),
    ("FedLF (client_grad=full)", "fedlf_full", 0.05, "server_lr"),  # 0.1 scores higher but a seed diverged
    ("FedLF (client_grad=local)", "fedlf_local", 0.01, "lr"),
])
def test_eta_choice_and_cell_numbers(rep, runs, algorithm, key, eta, eta_option):
    res, _ = rep
    _, curves = runs
    row = _row(res, algorithm)
    assert row["eta"] == pytest.approx(eta) and row["eta_option"] == eta_option
    seeds = curves[(key, eta)]
    assert row["seeds"] == len(seeds) and row["rounds"] == ROUNDS and row["last_k"] == LAST
    for name, values in _expected(seeds).items():
        assert row[f"{name}_mean"] == pytest.approx(np.mean(values), abs=1e-12), name
        assert row[f"{name}_std"] == pytest.approx(np.std(values, ddof=1), abs=1e-12), name


def test_one_seed_has_mean_only(rep, runs):
    res, out = rep
    row = _row(res, "FedAvg", "pat2")
    assert row["seeds"] == 1 and row["final_acc_mean"] == pytest.approx(0.66)
    assert row["final_acc_std"] is None and row["lastK_angle_std"] is None
    assert row["lastK_acc_mean"] == pytest.approx(np.mean(runs[1][("fedavg_pat2", 0.05)][0]["acc"][-LAST:]))
    with open(out / "table.csv") as f:
        csv_row = next(r for r in csv.DictReader(f) if r["partition"] == "pat2")
    assert csv_row["final_acc_std"] == "" and float(csv_row["final_acc_mean"]) == pytest.approx(0.66)


def test_variant_rows(rep):
    res, _ = rep
    assert sorted(r["algorithm"] for r in res["rows"] if r["partition"] == "pat1") == sorted(
        ["FedAvg", "FedLF (client_grad=full)", "FedLF (client_grad=local)", "FedALF", "LDP-FedALF"])


def test_csv_matches_rows(rep):
    res, out = rep
    with open(out / "table.csv") as f:
        reader = csv.DictReader(f)
        table = list(reader)
    assert res["csv"] == str(out / "table.csv")
    for col in ("model", "dataset", "partition", "algorithm", "eta", "seeds", "rounds", "final_acc_mean",
                "final_acc_std", "final_angle_mean", "final_angle_std", "lastK_acc_mean", "lastK_acc_std",
                "lastK_angle_mean", "lastK_angle_std"):
        assert col in reader.fieldnames
    assert len(table) == len(res["rows"]) == 6
    for got, want in zip(table, res["rows"]):
        assert (got["model"], got["dataset"], got["algorithm"]) == ("mlp", "fmnist", want["algorithm"])
        assert float(got["eta"]) == pytest.approx(want["eta"]) and int(got["seeds"]) == want["seeds"]
        for k in ("final_acc_mean", "final_angle_mean", "lastK_acc_mean", "lastK_angle_mean"):
            assert float(got[k]) == pytest.approx(want[k], abs=1e-12)
    fedavg = next(r for r in table if r["algorithm"] == "FedAvg" and r["partition"] == "pat1")
    assert float(fedavg["final_acc_std"]) == pytest.approx(np.std(FEDAVG[0.05], ddof=1), abs=1e-12)
    # the worst 10% of 4 clients is the worst client, 0.1 below the mean (CLIENT_OFFSETS), at the chosen η 0.05
    assert float(fedavg["final_worst10_mean"]) == pytest.approx(np.mean(FEDAVG[0.05]) - 0.1, abs=1e-9)
    assert float(fedavg["final_worst10_std"]) == pytest.approx(np.std(FEDAVG[0.05], ddof=1), abs=1e-9)


def test_markdown_has_the_worst_clients_table(rep):
    res, out = rep
    text = (out / "report.md").read_text()
    section = text.split("### The worst 10% of clients, final evaluation")[1].split("###")[0]
    fedavg = next(line for line in section.splitlines() if line.startswith("| FedAvg |"))
    want = f"{np.mean(FEDAVG[0.05]) - 0.1:.3f} ± {np.std(FEDAVG[0.05], ddof=1):.3f}"
    assert fedavg.split(" | ")[1] == want, fedavg


def test_skipped_runs_are_named(rep):
    res, _ = rep
    text = "\n".join(res["messages"])
    running = next(m for m in res["messages"] if "running run" in m)
    assert "1 running run" in running and "fedavg_lr0.1_s0_running" in running
    diverged = next(m for m in res["messages"] if "diverged run" in m)
    assert "1 diverged run" in diverged and "fedlf_full_slr0.1_s2" in diverged
    assert "η=0.1 not eligible (1 of 3 seeds diverged" in text
    assert res["skipped"] == {"diverged": ["fedlf_full_slr0.1_s2"], "running": ["fedavg_lr0.1_s0_running"]}
    # the running run (lr 0.1, final acc 0.99) is not an η candidate
    assert _row(res, "FedAvg")["eta"] == pytest.approx(0.05)


def test_markdown(rep):
    res, out = rep
    md = Path(res["markdown"]).read_text()
    assert res["markdown"] == str(out / "report.md")
    assert "| algorithm | fmnist pat1 (4 clients) | fmnist pat2 (4 clients) |" in md  # the federation's size said
    fa = np.array(FEDAVG[0.05])
    fg = np.array([_angle(a, s) for s, a in enumerate(FEDAVG[0.05])])
    cell = f"{fa.mean():.3f} ± {fa.std(ddof=1):.3f} ({fg.mean():.1f} ± {fg.std(ddof=1):.1f}°)<br>η=0.05 (3 seeds)"
    assert cell in md
    assert "η=0.01 (2 seeds)" in md  # FedLF local
    assert f"Mean of the last {LAST} evaluations" in md
    assert "0.660 (12.5°)<br>η=0.05 (1 seed)" in md  # one seed: no ±
    assert f"**0.05: {fa.mean():.3f} (3)**" in md and f"0.01: {np.mean(FEDAVG[0.01]):.3f} (3)" in md
    assert "0.1: 1/3 diverged" in md
    assert "fedavg_lr0.1_s0_running" in md and "fedlf_full_slr0.1_s2" in md
    for f in res["figures"]:
        assert f"]({Path(f).relative_to(out).as_posix()})" in md


def test_figures(rep):
    res, out = rep
    names = sorted(Path(f).name for f in res["figures"])
    assert names == sorted(["mlp_fmnist_pat1_curves.png", "mlp_fmnist_pat1_clients.png",
                            "mlp_fmnist_pat1_privacy.png", "mlp_fmnist_pat2_curves.png",
                            "mlp_fmnist_pat2_clients.png"])
    for f in res["figures"]:
        data = Path(f).read_bytes()
        assert data.startswith(PNG) and len(data) < 300_000


def test_variant_names(tmp_path):
    """Options that differ within a base label name the variants; η, seeds, axes, bookkeeping and
    options the algorithm does not use do not."""
    specs = {
        "a1": dict(algorithm="fedalf", rho=1.0, lr=0.01, seed=0, eval_every=5, history=False),
        "a2": dict(algorithm="fedalf", rho=0.1, lr=0.05, seed=1, mu=0.5),
        "a3": dict(algorithm="fedalf", rho=0.1, history=True, dataset="cifar10", clip=5.0),
        "v1": dict(algorithm="fedavg", mu=0.1, lr=0.1),
        "v2": dict(algorithm="fedavg", mu=0.2, partition="pat2", rounds=7, epsilon=3.0),
        "l1": dict(algorithm="fedalf", ldp="adaptive", epsilon=1.0, dual_from="perturbed"),
        "l2": dict(algorithm="fedalf", ldp="adaptive", epsilon=2.0, dual_from="perturbed"),
        "f1": dict(algorithm="fedalf", ldp="ldp_fl"),
        "d1": dict(algorithm="fedalf", dp="gaussian", epsilon=0.5),
        "d2": dict(algorithm="fedavg", dp="gaussian", epsilon=0.5),
        "q1": dict(algorithm="qfedavg", server_lr=0.3),
        "q2": dict(algorithm="qfedavg", server_lr=0.7),
        "g1": dict(algorithm="fedlf", client_grad="full", server_lr=0.01, lr=0.5),
        "g2": dict(algorithm="fedlf", client_grad="full", server_lr=0.1, lr=0.1),
        # alpha is read by the dirichlet partition alone, assign by pat1/pat2 alone
        "p1": dict(algorithm="fedprox", partition="pat1", alpha=0.5),
        "p2": dict(algorithm="fedprox", partition="dirichlet", alpha=0.3, assign="shards"),
        "p3": dict(algorithm="fedprox", partition="dirichlet", alpha=0.1),
    }
    for name, kw in specs.items():
        rd = RunDir(tmp_path / name)
        rd.create()
        rd.write_config(Config(**kw))
    runs, skipped, _ = load_runs(find_runs([tmp_path]))
    assert sorted(skipped["running"]) == sorted(specs)
    name_variants(runs)
    got = {r.name: r.variant for r in runs}
    assert got == {
        "a1": "FedALF (history=False, rho=1)", "a2": "FedALF (history=True, rho=0.1)",
        "a3": "FedALF (history=True, rho=0.1)",
        "v1": "FedAvg (rounds=200)", "v2": "FedAvg (rounds=7)",  # runs of two lengths are never averaged
        "l1": "LDP-FedALF (epsilon=1)", "l2": "LDP-FedALF (epsilon=2)",
        "f1": "LDP-FL-FedALF", "d1": "DP-FedALF", "d2": "DP-FedAvg",
        "q1": "qFedAvg", "q2": "qFedAvg",
        "g1": "FedLF", "g2": "FedLF",
        "p1": "FedProx", "p2": "FedProx (alpha=0.3)", "p3": "FedProx (alpha=0.1)",
    }


def test_sweep_in_progress_and_errors(tmp_path):
    sweep = tmp_path / "sweep"
    make_run(sweep, "r0", final_acc=0.5, final_angle=10.0, algorithm="fedavg", seed=0)
    make_run(sweep, "r1", final_acc=0.7, final_angle=11.0, algorithm="fedavg", seed=1)
    write_sweep(sweep, [{"name": n, "dir": n} for n in ("r0", "r1", "r2")], {})  # r2: not started
    bad = sweep / "bad"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    res = report([str(sweep), str(bad)], str(tmp_path / "out"), last=2)
    assert any("1 new run" in m and "r2" in m for m in res["messages"])
    assert any(m.startswith("skipped bad:") and "not valid JSON" in m for m in res["messages"])
    (row,) = res["rows"]
    assert row["seeds"] == 2 and row["final_acc_mean"] == pytest.approx(0.6)
    assert row["final_acc_std"] == pytest.approx(np.std([0.5, 0.7], ddof=1))

    with pytest.raises(ConfigError, match="no run directories"):
        report([str(tmp_path / "out")], str(tmp_path / "o2"))
    with pytest.raises(ConfigError, match="--last"):
        report([str(sweep)], str(tmp_path / "o3"), last=0)
    unfinished = tmp_path / "unfinished"
    make_run(unfinished, "u", final_acc=0.5, final_angle=1.0, status="running", algorithm="fedavg")
    with pytest.raises(ConfigError, match="has finished"):
        report([str(unfinished)], str(tmp_path / "o4"))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="cannot create"):
        report([str(sweep)], str(blocker / "out"))


def test_cli(runs, tmp_path, capsys):
    root, _ = runs
    assert main(["report", str(root), "--out", str(tmp_path / "rep"), "--last", "2"]) == 0
    printed = capsys.readouterr().out
    assert "skipped 1 running run" in printed and f"report: {tmp_path / 'rep' / 'report.md'}" in printed
    assert (tmp_path / "rep" / "table.csv").is_file()

    assert main(["report", str(tmp_path / "missing"), "--out", str(tmp_path / "rep2")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "does not exist" in err and "Traceback" not in err


def test_privacy_spent_column(tmp_path):
    """summary.json's privacy_spent gives a private cell its ε spent (the largest over its seeds); a run
    recorded before the accounting (no privacy_spent) and a non-private one leave it blank."""
    import json
    root = tmp_path / "runs"
    for seed, eps in enumerate([9.0, 9.5]):
        make_run(root, f"dp_s{seed}", final_acc=0.7, final_angle=5.0, algorithm="fedavg", dp="gaussian", seed=seed)
        path = root / f"dp_s{seed}" / "summary.json"
        summary = json.loads(path.read_text())
        summary["privacy_spent"] = {"mechanism": "gaussian", "epsilon": eps, "delta": 1e-5, "per": "one client",
                                    "accountant": "test", "statement": f"spent {eps}"}
        path.write_text(json.dumps(summary))
    make_run(root, "ldp_old", final_acc=0.6, final_angle=5.0, algorithm="fedavg", ldp="adaptive")
    make_run(root, "plain", final_acc=0.8, final_angle=5.0, algorithm="fedavg")
    res = report([str(root)], str(tmp_path / "rep"), last=LAST)
    assert (_row(res, "DP-FedAvg")["eps_spent"], _row(res, "DP-FedAvg")["eps_spent_delta"]) == (9.5, 1e-5)
    assert _row(res, "LDP-FedAvg")["eps_spent"] is None and _row(res, "FedAvg")["eps_spent"] is None
    with open(tmp_path / "rep" / "table.csv") as f:
        table = {r["algorithm"]: r for r in csv.DictReader(f)}
    assert float(table["DP-FedAvg"]["eps_spent"]) == 9.5 and float(table["DP-FedAvg"]["eps_spent_delta"]) == 1e-5
    assert table["LDP-FedAvg"]["eps_spent"] == "" and table["FedAvg"]["eps_spent"] == ""
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "ε spent: 9.5 (δ=1e-05)" in md and "### Privacy spent" in md and "per one client" in md


def test_runs_of_an_algorithm_registered_in_another_process_are_read_from_their_metrics(tmp_path, capsys,
                                                                                          monkeypatch):
    """Issue 37.7: runs of ``fj.register_algorithm("mine", ...)`` made in a notebook were "2 unreadable" in
    ``fedalf report`` (another process), which needs only their config.json and metrics.csv."""
    import fedalf_jax as fj
    from fedalf_jax.experiment import registry
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))  # the checkout's examples/
    from examples.fedadam import fedadam
    fj.register_algorithm("mine_elsewhere", fedadam)
    for seed, acc in ((0, 0.6), (1, 0.7)):
        make_run(tmp_path / "runs", f"s{seed}", final_acc=acc, final_angle=30.0, algorithm="mine_elsewhere",
                 seed=seed, hp={"beta1": 0.8})
    monkeypatch.delitem(registry._REGISTERED["algorithm"], "mine_elsewhere")  # as in a new process
    monkeypatch.setitem(registry._VERSION, "n", registry._VERSION["n"] + 1)
    capsys.readouterr()
    assert main(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "rep")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("read 2 runs of algorithm 'mine_elsewhere' from their config.json and metrics.csv only: it is "
                      "not registered in this process (fj.register_algorithm it before report(), or name it "
                      "module:attribute), so their options were not checked: s0, s1"), out
    assert not any("unreadable" in line for line in out)
    (row,) = list(csv.DictReader(open(tmp_path / "rep" / "table.csv")))
    assert row["algorithm"] == "mine_elsewhere" and row["seeds"] == "2"
    assert float(row["final_acc_mean"]) == pytest.approx(0.65)


def test_short_curves_have_markers_and_whole_round_ticks(tmp_path, monkeypatch):
    """Issue 36.10: a 3-evaluation curve was a bare polyline with ticks at 0.5-round steps (2.5 rounds)."""
    import sys
    from fedalf_jax.reporting import figures
    here = sys.modules[__name__]
    monkeypatch.setattr(here, "ROUNDS", 2)
    monkeypatch.setattr(here, "EVAL_ROUNDS", np.arange(3))
    monkeypatch.setattr(here, "ACC_SWING", np.array([-0.2, -0.1, 0.0]))
    monkeypatch.setattr(here, "ANGLE_SWING", np.array([5.0, 2.0, 0.0]))
    for seed in (0, 1):
        make_run(tmp_path / "runs", f"s{seed}", final_acc=0.5 + 0.1 * seed, final_angle=20.0, seed=seed,
                 eval_every=1)
    drawn = []
    real = figures._save
    monkeypatch.setattr(figures, "_save", lambda fig, path: (drawn.append(fig), real(fig, path))[1])
    report([str(tmp_path / "runs")], str(tmp_path / "rep"))
    (fig,) = [f for f in drawn if len(f.axes) == 2 and f.axes[0].get_xlabel() == "round"]
    for ax in fig.axes:
        (line,) = ax.get_lines()
        assert list(line.get_xdata()) == [0, 1, 2] and line.get_marker() == "o"
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
