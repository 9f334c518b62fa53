"""Damaged and missing files of a run or sweep directory (issue 27, items 3, 9 and 11).

3: a damaged ``metrics.csv`` (another header, a row of the wrong width, a repeated or reordered round, a
value that is not a number) is refused in one line naming the file and line by ``fedalf run --resume``,
``fedalf sweep --resume`` and ``fedalf report``, changing no file; the last line cut short by a kill is
still tolerated. 9: a finished run whose ``summary.json`` was deleted is completed by ``--resume``. 11: a
refused ``--resume --rounds`` of a ``--dp central`` run or sweep rewrites nothing.

Expectations are independent of the code under test: literal line numbers and round lists, file bytes
before and after, exit statuses, the original ``summary.json``."""

import json
import shutil
from pathlib import Path

import pytest

from fedalf_jax.cli import main
from fedalf_jax.experiment.rundir import RunDir
from helpers import cli as _cli, hashes as _hashes, one_line_error as _one_line_error, rounds as _rounds

TINY = ["--dataset", "synthetic", "--model", "mlp", "--clients", "4", "--clients-per-round", "2",
        "--synthetic-train", "200", "--synthetic-test", "80", "--rounds", "2", "--eval-every", "1",
        "--algorithm", "fedavg", "--no-progress"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished 2-round run and a finished one-run 2-round sweep (copied by each test before it damages them)."""
    base = tmp_path_factory.mktemp("finished")
    assert main(["run", *TINY, "--out", str(base / "run")]) == 0
    assert main(["sweep", *TINY, "--seeds", "0", "--out", str(base / "sweep")]) == 0
    return base


def _copy(finished: Path, tmp_path: Path, name: str) -> Path:
    shutil.copytree(finished / name, tmp_path / name)
    return tmp_path / name


def _sweep_run(sw: Path) -> Path:
    (entry,) = json.loads((sw / "sweep.json").read_text())["runs"]
    return sw / entry["dir"]


# ---- 3. a damaged metrics.csv ------------------------------------------------------------------------
# metrics.csv of a finished 2-round run (eval every round): line 1 the header, lines 2-4 rounds 0, 1, 2.

def _drop_a_column_everywhere(lines):  # the audit's case: the 3rd column cut from every line
    return [",".join(v for j, v in enumerate(line.split(",")) if j != 2) for line in lines]


def _drop_a_value_in_row_of_round_1(lines):
    cells = lines[2].split(",")
    return lines[:2] + [",".join(cells[:-1])] + lines[3:]


def _repeat_round_1(lines):
    return lines[:3] + [lines[2]] + lines[3:]


def _swap_rounds_1_and_2(lines):
    return lines[:2] + [lines[3], lines[2]]


def _a_word_for_a_number(lines):
    cells = lines[2].split(",")
    cells[1] = "lost"
    return lines[:2] + [",".join(cells)] + lines[3:]


def _rename_a_column(lines):
    return [lines[0].replace("mean_acc", "mean_accuracy")] + lines[1:]


DAMAGE = [  # (damage, the line named, words of the message)
    (_drop_a_column_everywhere, 1, "header"),
    (_drop_a_value_in_row_of_round_1, 3, "values where the header has"),
    (_repeat_round_1, 4, "round 1 comes after round 1"),
    (_swap_rounds_1_and_2, 4, "round 1 comes after round 2"),
    (_a_word_for_a_number, 3, "mean_acc 'lost' is not a number"),
    (_rename_a_column, 1, "'mean_accuracy'"),
]
IDS = [d[0].__name__.lstrip("_") for d in DAMAGE]


def _damage(run: Path, damage) -> None:
    lines = (run / "metrics.csv").read_text().splitlines()
    assert [line.split(",")[0] for line in lines] == ["round", "0", "1", "2"]
    (run / "metrics.csv").write_text("\n".join(damage(lines)) + "\n")


@pytest.mark.parametrize("damage, line, words", DAMAGE, ids=IDS)
def test_run_resume_refuses_a_damaged_metrics_csv(finished, tmp_path, capsys, damage, line, words):
    run = _copy(finished, tmp_path, "run")
    _damage(run, damage)
    before = _hashes(run)
    code, err = _cli(capsys, ["run", "--resume", "--rounds", "3", "--out", str(run), "--no-progress"])
    _one_line_error(code, err, f"{run / 'metrics.csv'} line {line}:", words, "damaged")
    assert _hashes(run) == before  # the rows are not silently dropped, nothing is rewritten


@pytest.mark.parametrize("damage, line, words", DAMAGE, ids=IDS)
def test_sweep_resume_refuses_a_damaged_metrics_csv(finished, tmp_path, capsys, damage, line, words):
    sw = _copy(finished, tmp_path, "sweep")
    run = _sweep_run(sw)
    _damage(run, damage)
    before = _hashes(sw)
    code, err = _cli(capsys, ["sweep", "--resume", "--rounds", "3", "--out", str(sw), "--no-progress"])
    _one_line_error(code, err, f"{run / 'metrics.csv'} line {line}:", words, "damaged")
    assert _hashes(sw) == before  # sweep.json not extended either


@pytest.mark.parametrize("damage, line, words", DAMAGE, ids=IDS)
def test_report_refuses_a_damaged_metrics_csv(finished, tmp_path, capsys, damage, line, words):
    run = _copy(finished, tmp_path, "run")
    _damage(run, damage)
    code, err = _cli(capsys, ["report", str(run), "--out", str(tmp_path / "report")])
    _one_line_error(code, err, f"{run / 'metrics.csv'} line {line}:", words, "damaged")
    assert not (tmp_path / "report" / "table.csv").exists()


@pytest.mark.parametrize("cut", ["3,0.25,0.81", "3,0.25,0.81\n"], ids=["no-line-end", "short-row"])
def test_the_last_line_cut_short_by_a_kill_is_still_tolerated(finished, tmp_path, capsys, cut):
    """A run killed while writing round 3's row (no summary.json yet): resume, sweep resume and report
    drop the cut line, as before."""
    run, sw = _copy(finished, tmp_path, "run"), _copy(finished, tmp_path, "sweep")
    for r in (run, _sweep_run(sw)):
        with open(r / "metrics.csv", "a") as f:
            f.write(cut)
    assert RunDir(run).metrics()["round"].tolist() == [0, 1, 2]  # a reader skips it
    code, err = _cli(capsys, ["report", str(run), "--out", str(tmp_path / "report")])  # a done run read
    assert code == 0, err
    for r in (run, _sweep_run(sw)):
        (r / "summary.json").unlink()  # killed before its end
    code, err = _cli(capsys, ["run", "--resume", "--rounds", "4", "--out", str(run), "--no-progress"])
    assert code == 0, err
    assert _rounds(run) == [0, 1, 2, 3, 4]
    code, err = _cli(capsys, ["sweep", "--resume", "--rounds", "4", "--out", str(sw), "--no-progress"])
    assert code == 0, err
    assert _rounds(_sweep_run(sw)) == [0, 1, 2, 3, 4]


# ---- 9. summary.json missing from a finished run ------------------------------------------------------

def test_resume_rebuilds_the_missing_summary_of_a_finished_run(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["run", *TINY, "--dp", "central", "--out", str(run)]) == 0  # with privacy_spent to rebuild
    original = json.loads((run / "summary.json").read_text())
    (run / "summary.json").unlink()
    metrics = (run / "metrics.csv").read_bytes()
    code, err = _cli(capsys, ["run", "--resume", "--out", str(run), "--no-progress"])
    assert code == 0 and "Traceback" not in err, err
    notice = [line for line in err.splitlines() if "summary.json" in line]
    assert len(notice) == 1 and "rebuilt" in notice[0], err
    rebuilt = json.loads((run / "summary.json").read_text())
    same = ("status", "rounds", "round", "final", "privacy", "privacy_spent")
    assert original["status"] == "done" and original["round"] == 2
    assert json.dumps({k: rebuilt[k] for k in same}, sort_keys=True) == json.dumps(
        {k: original[k] for k in same}, sort_keys=True)  # (as text: the final row holds NaNs)
    assert (run / "metrics.csv").read_bytes() == metrics
    assert RunDir(run).status() == "done"
    code, err = _cli(capsys, ["report", str(run), "--out", str(tmp_path / "report")])
    assert code == 0 and "running" not in err + capsys.readouterr().out, err


def test_a_missing_summary_that_cannot_be_rebuilt_is_one_line(finished, tmp_path, capsys):
    run = _copy(finished, tmp_path, "run")
    (run / "summary.json").unlink()
    lines = (run / "metrics.csv").read_text().splitlines()
    (run / "metrics.csv").write_text("\n".join(lines[:-1]) + "\n")  # round 2's row gone too
    before = _hashes(run)
    code, err = _cli(capsys, ["run", "--resume", "--out", str(run), "--no-progress"])
    _one_line_error(code, err, "no summary.json", "round 1", "--overwrite")
    assert _hashes(run) == before


# ---- 11. a refused --resume --rounds of a --dp central sweep or run rewrites nothing --------------------

def test_central_dp_sweep_extension_is_refused_before_sweep_json_changes(tmp_path, capsys):
    sw = tmp_path / "sw"
    assert main(["sweep", *TINY, "--dp", "central", "--seeds", "0", "--out", str(sw)]) == 0
    before = _hashes(sw)
    code, err = _cli(capsys, ["sweep", "--resume", "--rounds", "4", "--out", str(sw), "--no-progress"])
    _one_line_error(code, err, "--dp central", "sweep.json is unchanged")
    assert _hashes(sw) == before
    code, err = _cli(capsys, ["sweep", "--resume", "--out", str(sw), "--no-progress"])
    assert code == 0, err
    assert _hashes(sw) == before  # a finished sweep: nothing to do


def test_central_dp_run_extension_is_refused_before_config_json_changes(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["run", *TINY, "--dp", "central", "--out", str(run)]) == 0
    before = _hashes(run)
    code, err = _cli(capsys, ["run", "--resume", "--rounds", "4", "--out", str(run), "--no-progress"])
    _one_line_error(code, err, "--dp central", "--rounds 2")
    assert _hashes(run) == before
    code, err = _cli(capsys, ["run", "--resume", "--out", str(run), "--no-progress"])
    assert code == 0, err


def test_an_ended_run_without_evaluations_is_one_line_not_an_index_error(finished, tmp_path, capsys):
    run = _copy(finished, tmp_path, "run")
    header = (run / "metrics.csv").read_text().splitlines()[0]
    (run / "metrics.csv").write_text(header + "\n")
    before = _hashes(run)
    code, err = _cli(capsys, ["run", "--resume", "--out", str(run), "--no-progress"])
    _one_line_error(code, err, "holds no evaluation", "metrics.csv")
    assert _hashes(run) == before


# ---- issue 36, item 8: what a report, a summary and a resume say of a run whose end went wrong ------------

def test_report_calls_a_finished_run_without_summary_ended_not_running(finished, tmp_path, capsys):
    run = _copy(finished, tmp_path, "run")
    (run / "summary.json").unlink()  # its metrics.csv reaches round 2 of 2
    before = _hashes(run)
    code, err = _cli(capsys, ["report", str(run), "--out", str(tmp_path / "report")])
    _one_line_error(code, err, "(1 ended (no summary.json))", f"fedalf run --resume --out {run}")
    assert "running" not in err
    assert _hashes(run) == before
    unfinished = _copy(finished, tmp_path / "cut", "run")  # round 2's row gone: it did not end
    (unfinished / "summary.json").unlink()
    lines = (unfinished / "metrics.csv").read_text().splitlines()
    (unfinished / "metrics.csv").write_text("\n".join(lines[:-1]) + "\n")
    code, err = _cli(capsys, ["report", str(unfinished), "--out", str(tmp_path / "report2")])
    _one_line_error(code, err, "(1 running)")


def _failing_final_checkpoint(monkeypatch, rounds):
    from fedalf_jax.experiment.rundir import WriteError
    real = RunDir.save_checkpoint

    def save(self, state, cfg):  # the disk fills up on the last round's checkpoint
        if int(state.round) == rounds:
            raise WriteError(self.path / "checkpoint.npz", OSError(28, "No space left on device"))
        return real(self, state, cfg)
    monkeypatch.setattr(RunDir, "save_checkpoint", save)
    return real


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_a_failed_final_checkpoint_leaves_no_done_summary(tmp_path, capsys, monkeypatch, compile_cache, command):
    """summary.json said "done at round 2" beside a round-1 checkpoint: a resume then had nothing to do and
    rounds 1-2 lived only in metrics.csv. Now the run stays unfinished and --resume redoes round 2."""
    out = tmp_path / command
    real = _failing_final_checkpoint(monkeypatch, 2)
    extra = ["--seeds", "0"] if command == "sweep" else []
    code, err = _cli(capsys, [command, *TINY, "--checkpoint-every", "1", *extra, "--out", str(out)])
    if command == "sweep":  # after the line that says how the sweep's runs are grouped
        assert err.startswith("fedalf: sweep chunk 1: ") and err.count("\n") == 2, err
        err = err.splitlines()[-1]
    _one_line_error(code, err, "No space left on device", "round 1")
    run = _sweep_run(out) if command == "sweep" else out
    assert not (run / "summary.json").exists()
    assert RunDir(run).checkpoint_rounds().keys() == {1}
    monkeypatch.setattr(RunDir, "save_checkpoint", real)
    code, err = _cli(capsys, [command, "--resume", "--out", str(out), "--no-progress"])
    assert code == 0, err
    assert json.loads((run / "summary.json").read_text())["round"] == 2
    assert RunDir(run).checkpoint_rounds().keys() >= {2} and _rounds(run) == [0, 1, 2]


def test_resume_says_when_it_falls_back_to_the_previous_checkpoint(tmp_path, capsys, compile_cache):
    run = tmp_path / "run"
    assert main(["run", *TINY, "--checkpoint-every", "1", "--out", str(run)]) == 0
    assert RunDir(run).checkpoint_rounds().keys() == {1, 2}
    (run / "checkpoint.npz").unlink()
    (run / "summary.json").unlink()
    code, err = _cli(capsys, ["run", "--resume", "--out", str(run), "--no-progress"])
    assert code == 0, err
    said = [line for line in err.splitlines() if "checkpoint" in line]
    assert said == [f"fedalf: warning: {run}: checkpoint.npz is missing; resuming from checkpoint.prev.npz "
                    f"(round 1)"], err
    assert _rounds(run) == [0, 1, 2] and json.loads((run / "summary.json").read_text())["round"] == 2
