"""A run's identity is what it computed from, not how it was asked for (issue 27, items 4-6): the data's
arrays (not the folder they were read from), the user code that ran (not only its name), and the
options' resolved values (not whether a default was spelled out).

Each expectation is independent of the code under test: literal round lists, file bytes before and
after, a process's exit status and its one line on stderr."""

import json
import shutil
from pathlib import Path

import pytest

from fedalf_jax.cli import main
from fedalf_jax.problem import data as D
from test_data import write_fmnist
from helpers import cli as _cli, hashes as _hashes, one_line_error as _one_line_error, rounds as _rounds

SMALL = ["--model", "mlp", "--clients", "2", "--clients-per-round", "2", "--partition", "iid", "--rounds", "2",
         "--eval-every", "1", "--algorithm", "fedavg", "--no-progress"]
SYNTH = ["--dataset", "synthetic", "--synthetic-train", "200", "--synthetic-test", "80", *SMALL]


# ---- 4. the data's arrays are part of the identity, the folder they lie in is not -------------------------

@pytest.fixture
def fmnist_dirs(tmp_path, monkeypatch):
    """Two folders of tiny IDX-format Fashion-MNIST files with different pixels, a copy of the first
    elsewhere, and no other place the loader could find data in."""
    monkeypatch.delenv("FEDALF_DATA_DIR", raising=False)
    monkeypatch.setattr(D, "KNOWN_LOCATIONS", {"fmnist": (), "cifar10": (), "cifar100": ()})
    monkeypatch.setattr(D, "_tfds_available", lambda: False)
    a, b = tmp_path / "data_a", tmp_path / "data_b"
    write_fmnist(a, n_train=40, n_test=20, seed=0)
    write_fmnist(b, n_train=40, n_test=20, seed=1)
    moved = tmp_path / "elsewhere" / "fmnist_copy"
    shutil.copytree(a, moved)
    return a, b, moved


def test_the_same_arrays_at_another_path_resume(tmp_path, capsys, fmnist_dirs):
    a, _, moved = fmnist_dirs
    run = tmp_path / "run"
    assert main(["run", "--dataset", "fmnist", "--data-dir", str(a), *SMALL, "--out", str(run)]) == 0
    shutil.rmtree(a)  # the data moved: only the copy is left
    code, err = _cli(capsys, ["run", "--resume", "--out", str(run), "--rounds", "4", "--data-dir", str(moved),
                              "--no-progress"])
    assert code == 0, err
    assert _rounds(run) == [0, 1, 2, 3, 4]
    assert json.loads((run / "clients.json").read_text())["source"] == str(moved)
    assert json.loads((run / "config.json").read_text())["data_dir"] == str(moved)


def test_other_arrays_are_refused_naming_both_sources(tmp_path, capsys, fmnist_dirs):
    a, b, _ = fmnist_dirs
    run = tmp_path / "run"
    assert main(["run", "--dataset", "fmnist", "--data-dir", str(a), *SMALL, "--out", str(run)]) == 0
    before = _hashes(run)
    code, err = _cli(capsys, ["run", "--resume", "--out", str(run), "--rounds", "4", "--data-dir", str(b),
                              "--no-progress"])
    _one_line_error(code, err, "is not the data the run", f"({a},", f"({b},")
    assert _hashes(run) == before  # clients.json and metrics.csv still describe the data the run had


def test_a_switched_fedalf_data_dir_is_refused(tmp_path, capsys, fmnist_dirs, monkeypatch):
    a, b, moved = fmnist_dirs
    run = tmp_path / "run"
    monkeypatch.setenv("FEDALF_DATA_DIR", str(a))
    assert main(["run", "--dataset", "fmnist", *SMALL, "--out", str(run)]) == 0
    assert json.loads((run / "config.json").read_text())["data_dir"] is None
    before = _hashes(run)
    monkeypatch.setenv("FEDALF_DATA_DIR", str(b))
    code, err = _cli(capsys, ["run", "--resume", "--out", str(run), "--rounds", "4", "--no-progress"])
    _one_line_error(code, err, "is not the data the run", f"({a},", f"({b},")
    assert _hashes(run) == before
    monkeypatch.setenv("FEDALF_DATA_DIR", str(moved))  # the same files found elsewhere: it goes on
    code, err = _cli(capsys, ["run", "--resume", "--out", str(run), "--rounds", "3", "--no-progress"])
    assert code == 0 and _rounds(run) == [0, 1, 2, 3], err


# ---- 5. a user's algorithm's code is part of the identity -----------------------------------------------

ALG = '''import fedalf_jax as fj

STEP = {step}


def server(s):
    import jax
    import jax.numpy as jnp
    mean = jax.tree_util.tree_map(lambda d: jnp.mean(d, axis=0), s.deltas)
    return jax.tree_util.tree_map(lambda t, d: t - STEP * d, s.theta, mean), s.sstate, {{}}


def upload(theta, w, w_tilde, state, hp, lr_t):
    import jax
    return jax.tree_util.tree_map(lambda t, x: t - x, theta, w_tilde), state


def make():
    return fj.Algorithm("mine", server=server, upload=upload)
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A module ``mystep`` in a folder on the path, and a function that rewrites it with another step."""
    folder = tmp_path / "code"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))

    def write(step):
        (folder / "mystep.py").write_text(ALG.format(step=step))
    write(1.0)
    yield write
    _forget()  # this process imported it: the next test imports it again


def _forget(name="mystep:make"):
    """What a new process would see: the module imported again (after the file's edit)."""
    import sys
    from fedalf_jax.experiment import registry
    registry._REGISTERED["algorithm"].pop(name, None)
    getattr(registry, "_CODE", {}).get("algorithm", {}).pop(name, None)
    sys.modules.pop(name.split(":")[0], None)


def test_changed_user_code_is_refused_and_unchanged_code_resumes(tmp_path, capsys, user_module):
    run = tmp_path / "run"
    argv = [*SYNTH[:-3], "--algorithm", "mystep:make", "--no-progress"]  # SYNTH without its --algorithm fedavg
    assert "--algorithm" not in argv[:-3]
    assert main(["run", *argv, "--out", str(run)]) == 0
    before = _hashes(run)
    user_module(50.0)  # a 50x server step
    _forget()
    code, err = _cli(capsys, ["run", "--resume", "--out", str(run), "--rounds", "4", "--no-progress"])
    _one_line_error(code, err, "algorithm 'mystep:make'", "mystep.py", "changed since the checkpoint", "revert")
    assert _hashes(run) == before
    user_module(1.0)  # reverted: the same bytes as the run's
    _forget()
    code, err = _cli(capsys, ["run", "--resume", "--out", str(run), "--rounds", "4", "--no-progress"])
    assert code == 0 and _rounds(run) == [0, 1, 2, 3, 4], err


def test_user_code_outside_any_file_is_checked_by_its_code_objects():
    from fedalf_jax.experiment.registry import code_digest
    ns_a, ns_b, ns_c = {}, {}, {}
    src = "def make():\n    return {}\n"
    exec(compile(src.format(1.0), "<cell>", "exec"), ns_a)
    exec(compile(src.format(1.0), "<cell>", "exec"), ns_b)
    exec(compile(src.format(50.0), "<cell>", "exec"), ns_c)
    a, b, c = (code_digest(ns["make"]) for ns in (ns_a, ns_b, ns_c))
    assert a[0] == b[0] != c[0] and a[0] != "uncheckable"
    assert code_digest(object())[0] == "uncheckable"


# ---- 6. --resume compares resolved values -----------------------------------------------------------------

def test_run_resume_accepts_the_defaults_spelled_out_and_refuses_other_values(tmp_path, capsys):
    run = tmp_path / "run"
    argv = [*SYNTH[:-3], "--algorithm", "fedalf", "--no-progress"]
    assert main(["run", *argv, "--out", str(run)]) == 0
    before = _hashes(run)
    for flag, value in (("--rho", "0.1"), ("--server-lr", "1.0"), ("--mu", "0.5")):  # fedalf's are 0.01, 0.5, 0.01
        code, err = _cli(capsys, ["run", "--resume", "--out", str(run), "--rounds", "4", flag, value])
        _one_line_error(code, err, "may change, not " + flag[2:].replace("-", "_"))
        assert _hashes(run) == before
    code, err = _cli(capsys, ["run", "--resume", "--out", str(run), "--rounds", "4", "--rho", "0.01",
                              "--server-lr", "0.5", "--server-lr-decay", "0.999", "--history", "on", "--mu", "0.01",
                              "--server-target", "increment", "--no-progress"])
    assert code == 0 and _rounds(run) == [0, 1, 2, 3, 4], err


def test_sweep_resume_accepts_the_defaults_spelled_out_and_refuses_other_values(tmp_path, capsys):
    sw = tmp_path / "sw"
    argv = ["sweep", *SYNTH[:-3], "--algorithm", "fedalf", "--seeds", "0", "--no-progress", "--out", str(sw)]
    assert main(argv) == 0
    before = _hashes(sw)
    code, err = _cli(capsys, [*argv, "--resume", "--rho", "0.1"])
    _one_line_error(code, err, "describe other runs than the sweep")
    code, err = _cli(capsys, [*argv, "--resume", "--rho", "0.01", "--server-target", "increment", "--history", "on"])
    assert code == 0, err
    assert _hashes(sw) == before  # finished: nothing to run, nothing rewritten


def _rewrite_identities(folder: Path, edit) -> None:
    """Every checkpoint's recorded identity passed through ``edit`` (as an older or another process wrote it)."""
    import numpy as np
    from fedalf_jax.experiment.identity import identity_digest
    for ck in folder.glob("checkpoint*.npz"):
        with np.load(ck) as f:
            members = {k: f[k] for k in f.files}
        ident = edit(json.loads(str(members["identity"])))
        members["identity"] = np.asarray(json.dumps(ident, sort_keys=True))
        members["digest"] = np.asarray(identity_digest(ident))
        np.savez(ck.with_suffix(""), **members)  # savez appends .npz again


@pytest.mark.parametrize("recorded, says", [(None, "written before runs recorded user code"),
                                            ("uncheckable", "code cannot be checked")])
def test_user_code_that_cannot_be_checked_resumes_saying_so_in_one_line(tmp_path, capsys, user_module, recorded,
                                                                         says):
    run = tmp_path / "run"
    argv = [*SYNTH[:-3], "--algorithm", "mystep:make", "--no-progress"]
    assert main(["run", *argv, "--out", str(run)]) == 0

    def edit(ident):
        assert len(ident.pop("algorithm_code")) == 16
        return ident if recorded is None else {**ident, "algorithm_code": recorded}
    _rewrite_identities(run, edit)
    user_module(50.0)  # changed, but nothing recorded to tell
    _forget()
    code, err = _cli(capsys, ["run", "--resume", "--out", str(run), "--rounds", "3", "--no-progress"])
    assert code == 0 and _rounds(run) == [0, 1, 2, 3], err
    lines = [ln for ln in err.splitlines() if says in ln]
    assert len(lines) == 1 and "mystep.py" in lines[0], err


def test_a_checkpoint_from_before_data_digests_resumes_from_a_moved_folder_saying_so(tmp_path, capsys, fmnist_dirs):
    # written before this change: the identity held data_dir and no data digest
    a, _, moved = fmnist_dirs
    run = tmp_path / "run"
    assert main(["run", "--dataset", "fmnist", "--data-dir", str(a), *SMALL, "--out", str(run)]) == 0

    def edit(ident):
        assert len(ident.pop("data_digest")) == 16 and "data_dir" not in ident
        return {**ident, "data_dir": str(a)}
    _rewrite_identities(run, edit)
    code, err = _cli(capsys, ["run", "--resume", "--out", str(run), "--rounds", "3", "--data-dir", str(moved),
                              "--no-progress"])
    assert code == 0 and _rounds(run) == [0, 1, 2, 3], err
    lines = [ln for ln in err.splitlines() if "digest" in ln]
    assert len(lines) == 1 and "not checked" in lines[0] and str(moved) in lines[0], err
