"""Issue 49 item 3: ``--eval-every never`` (``fj.Config(eval_every="never")``) runs no evaluation at all: not at
round 0, not at the end, no train-loss pass; it trains the same bits as a run that evaluates, checkpoints as
``--checkpoint-every`` says (and at its last round, and after a signal), resumes, sweeps, and its
``summary.json`` says ``"evaluated": false`` with ``"final": null``; ``fedalf report`` skips it in one line.

Expectations are independent of the code: the checkpoint arrays of a run that evaluated every round, the lines
of metrics.csv (a header, no row), the rounds of the checkpoint files, the summary's keys, exit statuses and the
words of one line, a count of the evaluation program's calls (zero)."""

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest

import fedalf_jax as fj
from fedalf_jax.cli import main
from fedalf_jax.experiment import loop
from fedalf_jax.experiment.rundir import RunDir

TINY = dict(dataset="synthetic", model="mlp", clients=4, clients_per_round=2, synthetic_train=200, synthetic_test=80,
            batch_size=20, rounds=3, algorithm="fedavg")
FLAGS = ["--dataset", "synthetic", "--model", "mlp", "--clients", "4", "--clients-per-round", "2",
         "--synthetic-train", "200", "--synthetic-test", "80", "--batch-size", "20", "--algorithm", "fedavg",
         "--no-progress"]


def _arrays(folder: Path, name: str = "checkpoint.npz") -> dict:
    with np.load(folder / name) as f:
        return {k: f[k] for k in f.files}


def _same_arrays(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def _data_lines(folder: Path) -> int:
    """metrics.csv's lines below its header."""
    return len([line for line in (folder / "metrics.csv").read_text().splitlines() if line.strip()]) - 1


def _count_evaluations(monkeypatch) -> list:
    """Every call of the evaluation-only program (a chunk of length 0) and of the train loss, recorded."""
    calls = []
    real_compiled, real_tl = loop.Program.compiled, loop.Program.compiled_train_loss

    def compiled(self, length, *a):
        calls.append(("chunk", length))
        return real_compiled(self, length, *a)

    def train_loss(self, *a):
        calls.append(("train_loss",))
        return real_tl(self, *a)

    monkeypatch.setattr(loop.Program, "compiled", compiled)
    monkeypatch.setattr(loop.Program, "compiled_train_loss", train_loss)
    return calls


def test_never_trains_the_same_bits_and_evaluates_nothing(tmp_path, monkeypatch, compile_cache):
    # FedALF: its duals and history rows pass through the evaluation program in a run that evaluates
    opts = dict(TINY, algorithm="fedalf")
    a, b = tmp_path / "a", tmp_path / "b"
    evaluated = fj.run(fj.Config(**opts, eval_every=1, train_loss_every=1, out=str(a)), progress=False)
    assert list(evaluated.metrics["round"]) == [0, 1, 2, 3]
    calls = _count_evaluations(monkeypatch)
    res = fj.run(fj.Config(**opts, eval_every="never", out=str(b)), progress=False)
    assert calls == []  # not compiled, not called: no evaluation, no train loss
    _same_arrays(_arrays(a), _arrays(b))  # evaluating changes nothing of the training
    assert _data_lines(b) == 0
    summary = json.loads((b / "summary.json").read_text())
    assert summary["status"] == "done" and summary["round"] == 3 and summary["rounds"] == 3
    assert summary["evaluated"] is False and summary["final"] is None
    assert json.loads((a / "summary.json").read_text())["evaluated"] is True
    assert json.loads((b / "config.json").read_text())["eval_every"] == "never"
    assert res.status == "done" and len(res.metrics) == 0 and res.final == {}
    np.testing.assert_array_equal(res.model["params"]["Dense_0"]["kernel"],
                                  evaluated.model["params"]["Dense_0"]["kernel"])
    loaded = fj.load(b)
    assert loaded.status == "done" and len(loaded.metrics) == 0


def test_the_spellings_and_the_mistakes(capsys):
    assert fj.Config(eval_every=" Never ").eval_every == "never" and fj.Config().eval_every == 10
    assert fj.Config.from_dict({"eval_every": 7}).eval_every == 7  # an old config.json's int
    for bad in (0, "soon", True, 2.5):
        with pytest.raises(fj.ConfigError, match="eval_every must be a positive integer .* or never"):
            fj.Config(eval_every=bad)
    bench = ["bench", *(f for f in FLAGS if f != "--no-progress"), "--eval-every", "never"]
    # a plain fedalf bench times rounds alone (never is no matter there); its calls of --eval-every rounds are refused
    for argv in (["run", *FLAGS, "--eval-every", "soon"], [*bench, "--sweep-width", "1"], [*bench, "--depth-width", "1"]):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse
            code = e.code
        err = capsys.readouterr().err
        assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        assert "never" in err, err


def test_cli_run_checkpoints_on_its_own_cadence_and_says_it_was_not_evaluated(tmp_path, capsys, compile_cache):
    a = tmp_path / "a"
    assert main(["run", *FLAGS, "--rounds", "5", "--eval-every", "never", "--checkpoint-every", "2",
                 "--out", str(a)]) == 0
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1] == f"round 5: not evaluated (--eval-every never) -> {a}", out
    assert sorted(RunDir(a).checkpoint_rounds()) == [4, 5]  # every 2 rounds (2, then 4; the older ones go), and the last
    assert _data_lines(a) == 0
    # a plain --resume of the ended run: nothing to run, nothing rewritten
    before = (a / "summary.json").read_bytes()
    assert main(["run", "--resume", "--out", str(a), "--no-progress"]) == 0
    assert "has already ended (done at round 5)" in capsys.readouterr().err
    assert (a / "summary.json").read_bytes() == before
    # its summary.json lost: --resume rebuilds it from the checkpoint of its last round (no rows to need)
    (a / "summary.json").unlink()
    assert main(["run", "--resume", "--out", str(a), "--no-progress"]) == 0
    rebuilt = json.loads((a / "summary.json").read_text())
    assert (rebuilt["status"], rebuilt["round"], rebuilt["evaluated"], rebuilt["final"]) == ("done", 5, False, None)
    assert "rebuilt" in rebuilt


def test_a_signal_saves_a_checkpoint_and_the_resume_gives_the_bits_of_one_go(tmp_path, capsys, monkeypatch,
                                                                             compile_cache):
    real = loop.Program.compiled_round

    def compiled_round(self, *args):
        program = real(self, *args)

        def call(*a):
            state, metrics = program(*a)
            if int(state.round) == 2:  # SIGTERM to this process once round 2 is computed
                os.kill(os.getpid(), signal.SIGTERM)
            return state, metrics
        return call

    a, b = tmp_path / "a", tmp_path / "b"
    argv = [*FLAGS, "--eval-every", "never", "--checkpoint-every", "1h"]
    monkeypatch.setattr(loop.Program, "compiled_round", compiled_round)
    assert main(["run", *argv, "--rounds", "4", "--out", str(a)]) == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert "interrupted by SIGTERM after round 2" in err, err
    assert RunDir(a).checkpoint_round() == 2 and not (a / "summary.json").exists()  # the round in flight is kept
    monkeypatch.setattr(loop.Program, "compiled_round", real)
    assert main(["run", "--resume", "--out", str(a), "--no-progress"]) == 0
    assert main(["run", *argv, "--rounds", "4", "--out", str(b)]) == 0
    _same_arrays(_arrays(a), _arrays(b))
    summary = json.loads((a / "summary.json").read_text())
    assert (summary["status"], summary["round"], summary["evaluated"], summary["final"]) == ("done", 4, False, None)
    assert _data_lines(a) == 0


def test_a_sweep_with_never_equals_its_single_runs_and_resumes(tmp_path, compile_cache):
    sw = tmp_path / "sw"
    cfg = fj.Config(**TINY, eval_every="never", run_map="map")
    res = fj.sweep(cfg, out=sw, grid={"lr": [0.05, 0.1]}, seeds=[0], progress=False)
    assert [r.status for r in res.runs] == ["done", "done"]
    for name, r in zip(res.names, res.runs):
        assert r.summary["evaluated"] is False and r.summary["final"] is None and len(r.metrics) == 0
        assert _data_lines(sw / name) == 0
    single = tmp_path / "single"
    fj.run(cfg.replace(lr=0.1, out=str(single)), progress=False)
    _same_arrays(_arrays(sw / res.names[1]), _arrays(single))  # --run-map map: a single run's bits
    assert list(res.table["status"]) == ["done", "done"]
    # resumed to more rounds: the finished runs go on (their summaries read back on the way)
    from fedalf_jax.experiment import sweep as S
    got = S.resume(sw, rounds=5, progress=False)
    assert [(r["status"], r["final"]) for r in got] == [("done", None), ("done", None)]
    assert [json.loads((sw / n / "summary.json").read_text())["round"] for n in res.names] == [5, 5]


def test_report_skips_an_unevaluated_run_in_one_line(tmp_path, capsys, compile_cache):
    root = tmp_path / "runs"
    fj.run(fj.Config(**TINY, eval_every=1, out=str(root / "evaluated")), progress=False)
    fj.run(fj.Config(**TINY, eval_every="never", out=str(root / "timing")), progress=False)
    got = fj.report(root, tmp_path / "rep")
    notes = [m for m in got["messages"] if "timing" in m]
    assert len(notes) == 1 and "--eval-every never" in notes[0], got["messages"]
    assert got["skipped"] == {"unevaluated": ["timing"]} and len(got["rows"]) == 1
    # nothing but unevaluated runs: one line, exit 2, saying why
    code = main(["report", str(root / "timing"), "--out", str(tmp_path / "rep2")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--eval-every never" in err, err
