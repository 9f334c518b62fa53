"""``fedalf report`` over many clients and over runs of different lengths (issue 16): the per-client
heatmap shows every client, ranked worst to best, and a cell never averages runs of two lengths; each
note is printed once. Hand-built run directories with known numbers."""

import math
from pathlib import Path

import numpy as np

from fedalf_jax.cli import main
from fedalf_jax.experiment.config import Config
from fedalf_jax.reporting import heatmap_data, report
from fedalf_jax.experiment.rundir import RunDir

PNG = b"\x89PNG\r\n\x1a\n"


def _run(root: Path, name: str, final_clients, *, rounds: int = 20, eval_every: int = 10, **options) -> None:
    """A done run whose per-client accuracies end at ``final_clients`` (every evaluation after round 0
    holds them; round 0 holds zeros)."""
    final_clients = np.asarray(final_clients, np.float64)
    cfg = Config(**{"dataset": "fmnist", "partition": "pat1", "model": "mlp", "clients": final_clients.size,
                    "clients_per_round": 2, "rounds": rounds, "eval_every": eval_every, **options})
    rd = RunDir(root / name)
    rd.create()
    rd.write_config(cfg)
    w = rd.writers(cfg)[0]
    for t in range(0, rounds + 1, eval_every):
        acc = final_clients if t else np.zeros_like(final_clients)
        w.write_scalars(t, {"mean_acc": acc.mean(), "angle": 0.1, "angle_deg": math.degrees(0.1),
                            **{f"acc_{i}": a for i, a in enumerate(acc)}})
    w.close()
    rd.write_summary({"status": "done", "rounds": rounds, "round": rounds,
                      "final": {"mean_acc": final_clients.mean(), "angle": 0.1, "angle_deg": math.degrees(0.1)}})


def _cells(root):
    """The report's cells of the runs under ``root``, each with its η chosen (as ``report`` builds them)."""
    from fedalf_jax import reporting as R
    runs, _, _ = R.load_runs(R.find_runs([root]))
    R.name_variants(runs)
    cells, _ = R.build_cells(runs)
    for c in cells:
        R.choose_eta(c)
    return cells


def test_heatmap_shows_every_client_ranked(tmp_path):
    """100 clients, pat1-like: clients 0..9 are FedAvg's best (the old figure showed only them, and ranked
    FedAvg above FedALF); the heatmap has all 100, worst to best, and each row's mean is the table's."""
    rng = np.random.default_rng(0)
    fedavg = [np.r_[np.full(10, 0.95), rng.uniform(0.2, 0.9, 90)] for _ in range(2)]
    fedalf = [np.r_[np.full(10, 0.85), rng.uniform(0.7, 0.95, 90)] for _ in range(2)]
    for seed in range(2):
        _run(tmp_path / "runs", f"avg_s{seed}", fedavg[seed], algorithm="fedavg", seed=seed)
        _run(tmp_path / "runs", f"alf_s{seed}", fedalf[seed], algorithm="fedalf", seed=seed)
    res = report([str(tmp_path / "runs")], str(tmp_path / "rep"), last=1)
    rows = {r["algorithm"]: r for r in res["rows"]}
    cells = _cells(tmp_path / "runs")
    data, resampled = heatmap_data(cells)
    assert data.shape == (2, 100) and not resampled
    for c, row in zip(cells, data):
        assert np.all(np.diff(row) >= 0), "ranked worst to best"
        own = np.mean([np.sort(r.clients[-1]) for r in c.runs], axis=0)
        np.testing.assert_allclose(row, own)
        assert math.isclose(row.mean(), rows[c.variant]["final_acc_mean"], rel_tol=1e-9)
    by = dict(zip([c.variant for c in cells], data))
    assert by["FedALF"][:50].mean() > by["FedAvg"][:50].mean()  # the worst half: the table's order, not ids 0..9's
    fig = Path(next(f for f in res["figures"] if f.endswith("_clients.png")))
    assert fig.read_bytes().startswith(PNG)


def test_heatmap_resamples_fewer_clients(tmp_path):
    _run(tmp_path / "runs", "a", [0.1, 0.5, 0.9, 0.3], algorithm="fedavg")
    _run(tmp_path / "runs", "b", np.linspace(0.0, 1.0, 8), algorithm="fedavg")  # clients=8 names a variant
    cells = _cells(tmp_path / "runs")
    data, resampled = heatmap_data(cells)
    assert data.shape == (2, 8) and resampled and np.all(np.diff(data, axis=1) >= 0)


def test_runs_of_different_lengths_are_never_averaged(tmp_path, capsys):
    """A 2-round run and two 20-round runs of FedALF (and FedAvg at 20 rounds only) in one folder, over two
    partitions: two FedALF rows per partition, each the mean of one length; one note per label, once."""
    root = tmp_path / "runs"
    for part in ("pat1", "pat2"):
        _run(root, f"alf2_{part}", [0.0, 0.2], rounds=2, eval_every=1, algorithm="fedalf", partition=part, seed=0)
        _run(root, f"alf20_{part}_s0", [0.9, 1.0], algorithm="fedalf", partition=part, seed=0)
        _run(root, f"alf20_{part}_s1", [0.7, 0.8], algorithm="fedalf", partition=part, seed=1)
        _run(root, f"avg20_{part}", [0.5, 0.6], algorithm="fedavg", partition=part, seed=0)
    assert main(["report", str(root), "--out", str(tmp_path / "rep"), "--last", "1"]) == 0
    printed = capsys.readouterr().out.splitlines()
    notes = [line for line in printed if not line.startswith("report:")]
    assert len(notes) == len(set(notes)), "each note printed once"
    (length_note,) = [n for n in notes if "different lengths" in n]
    assert length_note.startswith("FedALF:") and "2 rounds: alf2_pat1, alf2_pat2" in length_note
    assert not any("repeats seed" in n for n in notes)  # the 20-round seed 0 is no twin of the 2-round one
    res = report([str(root)], str(tmp_path / "rep2"), last=1)
    got = {(r["algorithm"], r["partition"]): (r["rounds"], r["seeds"], round(r["final_acc_mean"], 6))
           for r in res["rows"]}
    for part in ("pat1", "pat2"):
        assert got[("FedALF (rounds=2)", part)] == (2, 1, 0.1)
        assert got[("FedALF (rounds=20)", part)] == (20, 2, 0.85)
        assert got[("FedAvg", part)] == (20, 1, 0.55)  # one length: its name stays plain
    md = (tmp_path / "rep" / "report.md").read_text()
    assert md.count(length_note) == 1


def test_each_note_is_printed_once(tmp_path, capsys, monkeypatch):
    """However a note comes about twice, ``fedalf report`` prints it, and report.md lists it, once."""
    from fedalf_jax import reporting as R
    _run(tmp_path / "runs", "a", [0.5, 0.7], algorithm="fedavg")
    note = "mlp fmnist pat1 FedAvg η=0.05: the same note"
    monkeypatch.setattr(R, "last_k_notes", lambda cells, last: [note, note])
    assert main(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "rep")]) == 0
    assert capsys.readouterr().out.splitlines().count(note) == 1
    assert (tmp_path / "rep" / "report.md").read_text().count(note) == 1
