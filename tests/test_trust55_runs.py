"""Trust round 5 (issue 55 items 3 and 8), a run's end.

Item 3: a run that evaluates nothing (``eval_every="never"``) whose final model is not finite ends ``diverged``
(``fj.run`` raises, the CLI exits non-zero, ``summary.json`` says so), never ``done``. Item 8: the averaged
iterate that the ``avg_*`` columns score is ``Result.average_model``, from the run and from ``fj.load`` (the
last-round rule of ``.model``). Expectations: exit statuses, summary.json's words, and the mean of the final
models of runs of 1, 2 and 3 rounds (round t's randomness is ``fold_in(key, t)``, so they are the first rounds
of the 3-round run)."""

import json

import jax
import numpy as np
import pytest

import fedalf_jax as fj
from fedalf_jax.cli import main

TINY = dict(dataset="synthetic", model="mlp", clients=4, clients_per_round=2, synthetic_train=200, synthetic_test=80,
            batch_size=20, rounds=2, algorithm="fedavg")
FLAGS = ["--dataset", "synthetic", "--model", "mlp", "--clients", "4", "--clients-per-round", "2",
         "--synthetic-train", "200", "--synthetic-test", "80", "--batch-size", "20", "--algorithm", "fedavg",
         "--rounds", "2", "--no-progress"]


def test_a_non_finite_model_that_was_never_evaluated_is_diverged(tmp_path, capsys):
    with pytest.raises(FloatingPointError, match="not finite after round 2 .*eval_every never"):
        fj.run(fj.Config(**TINY, eval_every="never", lr=1e30), progress=False)
    rc = main(["run", *FLAGS, "--eval-every", "never", "--lr", "1e30", "--out", str(tmp_path / "nan")])
    assert rc != 0
    assert "not finite after round 2" in capsys.readouterr().err
    summary = json.loads((tmp_path / "nan" / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["evaluated"] is False and "not finite" in summary["message"]
    assert fj.load(tmp_path / "nan").status == "diverged"
    # a finite one ends done
    assert main(["run", *FLAGS, "--eval-every", "never", "--out", str(tmp_path / "ok")]) == 0
    assert json.loads((tmp_path / "ok" / "summary.json").read_text())["status"] == "done"


def test_the_averaged_iterate_is_a_result_of_its_own(tmp_path):
    finals = [fj.run(fj.Config(**{**TINY, "rounds": r}), progress=False).model for r in (1, 2, 3)]
    want = jax.tree_util.tree_map(lambda *x: np.mean(np.asarray(x, np.float64), axis=0), *finals)
    res = fj.run(fj.Config(**{**TINY, "rounds": 3}, eval_average=True, out=str(tmp_path / "avg")), progress=False)
    got = res.average_model
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=1e-5, atol=1e-7)
    loaded = fj.load(tmp_path / "avg").average_model
    for g, w in zip(jax.tree_util.tree_leaves(loaded), jax.tree_util.tree_leaves(got)):
        np.testing.assert_array_equal(g, w)
    for g, m in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(res.model)):
        assert not np.array_equal(g, m)  # not the last model under another name
    unsaved = fj.run(fj.Config(**{**TINY, "rounds": 3}, eval_average=True), progress=False)  # no run directory
    for g, w in zip(jax.tree_util.tree_leaves(unsaved.average_model), jax.tree_util.tree_leaves(got)):
        np.testing.assert_array_equal(g, w)
    with pytest.raises(fj.ConfigError, match="eval_average=True"):
        fj.run(fj.Config(**TINY), progress=False).average_model
