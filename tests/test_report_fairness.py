"""Issue 58 item 6 (labels "fed58b"): ``fedalf report``'s fair-FL numbers beside the angle (worst and best 10%,
variance across clients, the worst client) and each client's final accuracy against its participation, on
hand-built run directories whose expected numbers are computed here with numpy from what was written."""

import csv
import json

import numpy as np
import pytest

from fedalf_jax.reporting import figures, report
from test_report import CLIENT_OFFSETS, make_run

FINALS = [0.6, 0.7, 0.65]


def _with_participation(root, name, counts):
    path = root / name / "summary.json"
    s = json.loads(path.read_text())
    s["participation"] = counts
    path.write_text(json.dumps(s))


def test_fair_numbers_are_the_final_client_accuracies(tmp_path):
    for seed, a in enumerate(FINALS):
        make_run(tmp_path / "runs", f"s{seed}", final_acc=a, final_angle=10.0, algorithm="fedavg", seed=seed)
    res = report([str(tmp_path / "runs")], str(tmp_path / "rep"))
    (row,) = res["rows"]
    finals = np.array(FINALS)[:, None] + CLIENT_OFFSETS[None, :]  # [seeds, clients]
    want = {"best10": np.sort(finals, axis=1)[:, -1],   # 4 clients: ceil(0.4) = 1, the best one
            "variance": ((finals - finals.mean(axis=1, keepdims=True)) ** 2).mean(axis=1),
            "worst_client": finals.min(axis=1)}
    for k, v in want.items():
        assert row[f"final_{k}_mean"] == pytest.approx(v.mean(), abs=1e-9)
        assert row[f"final_{k}_std"] == pytest.approx(v.std(ddof=1), abs=1e-9)
    (table,) = list(csv.DictReader(open(tmp_path / "rep" / "table.csv")))
    assert float(table["final_variance_mean"]) == pytest.approx(want["variance"].mean())
    md = open(res["markdown"]).read()
    assert "### Fairness across clients, final evaluation" in md
    assert f"worst client {want['worst_client'].mean():.3f} ± {want['worst_client'].std(ddof=1):.3f}" in md
    # runs from before participation was recorded: the report goes on, the figure skipped with a note
    assert not any(p.endswith("_participation.png") for p in res["figures"])
    assert any("without a recorded participation" in m and "(not drawn)" in m for m in res["messages"])


def test_accuracy_against_participation_figure_plots_each_client(tmp_path, monkeypatch):
    counts = {0: [5, 1, 3, 0], 1: [2, 2, 4, 1]}
    for seed, a in enumerate(FINALS[:2]):
        make_run(tmp_path / "runs", f"s{seed}", final_acc=a, final_angle=10.0, algorithm="fedavg", seed=seed)
        _with_participation(tmp_path / "runs", f"s{seed}", counts[seed])
    drawn = []
    real = figures._save
    monkeypatch.setattr(figures, "_save", lambda fig, path: (drawn.append((fig, path)), real(fig, path))[1])
    res = report([str(tmp_path / "runs")], str(tmp_path / "rep"))
    (path,) = [p for p in res["figures"] if p.endswith("_participation.png")]
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    (fig,) = [f for f, p in drawn if str(p) == path]
    (points,) = fig.axes[0].collections
    xy = np.asarray(points.get_offsets())
    want_x = counts[0] + counts[1]
    want_y = np.concatenate([a + CLIENT_OFFSETS for a in FINALS[:2]])
    np.testing.assert_array_equal(xy[:, 0], want_x)
    np.testing.assert_allclose(xy[:, 1], want_y, atol=1e-6)
    assert not any("without a recorded participation" in m for m in res["messages"])
    assert "participation.png" in open(res["markdown"]).read()


def test_a_malformed_participation_is_left_out(tmp_path):
    make_run(tmp_path / "runs", "s0", final_acc=0.6, final_angle=10.0, algorithm="fedavg")
    _with_participation(tmp_path / "runs", "s0", {"error": "the participation replay failed: x"})
    res = report([str(tmp_path / "runs")], str(tmp_path / "rep"))
    assert not any(p.endswith("_participation.png") for p in res["figures"])
