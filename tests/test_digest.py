"""The digest of a user's code covers what a user expects (issue 36, item 2): the files of the module's own
package or folder, not only the module's file, and the values of the globals that code outside any file
reads; a run says in one line what it covers, at its start and on every resume; a checkpoint whose digest
was made the old way still resumes when what that way covered is unchanged.

Expectations are independent of the code under test: exit statuses, the one line on stderr, file bytes
before and after, and the old digest recomputed here from the file's bytes with hashlib."""

import hashlib
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import fedalf_jax as fj
from fedalf_jax.experiment.registry import code_digest
from fedalf_jax.experiment.rundir import LOCK, RunDir
from fedalf_jax.notices import Notice
from helpers import without_deprecation  # noqa: E402

ARGV = ["--dataset", "synthetic", "--synthetic-train", "200", "--synthetic-test", "80", "--model", "mlp",
        "--clients", "2", "--clients-per-round", "2", "--partition", "iid", "--eval-every", "1", "--no-progress"]
SMALL = dict(dataset="synthetic", synthetic_train=200, synthetic_test=80, model="mlp", clients=2,
             clients_per_round=2, partition="iid", eval_every=1)

MODULE = '''import jax
import fedalf_jax as fj
from helper36 import scale_of


def server(s):
    import jax.numpy as jnp
    g = jax.tree_util.tree_map(lambda d: jnp.mean(d, axis=0), s.deltas)
    return jax.tree_util.tree_map(lambda t, d: t - scale_of() * d, s.theta, g), s.sstate, {}


def upload(theta, w, w_tilde, state, hp, lr_t):
    return jax.tree_util.tree_map(lambda t, x: t - x, theta, w_tilde), state


def alg():
    return fj.Algorithm("alg", server=server, upload=upload)
'''
HELPER = "def scale_of():\n    return {}\n"


def _hashes(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != LOCK}


def _rounds(folder: Path) -> list:
    return [int(r) for r in RunDir(folder).metrics()["round"]]


def _fedalf(cwd, *argv):
    return subprocess.run([sys.executable, "-m", "fedalf_jax.cli", "run", *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def _rewrite_code_digest(run: Path, value: str) -> None:
    """Every checkpoint's recorded algorithm_code set to ``value`` (as an older fedalf wrote it)."""
    from fedalf_jax.experiment.identity import identity_digest
    for ck in run.glob("checkpoint*.npz"):
        with np.load(ck) as f:
            members = {k: f[k] for k in f.files}
        ident = json.loads(str(members["identity"]))
        assert len(ident["algorithm_code"]) == 16
        ident["algorithm_code"] = value
        ident.pop("algorithm_code_files", None)  # recorded since issue 47
        members["identity"] = np.asarray(json.dumps(ident, sort_keys=True))
        members["digest"] = np.asarray(identity_digest(ident))
        np.savez(ck.with_suffix(""), **members)


# ---- a helper module beside the algorithm's module ----------------------------------------------------------

def test_a_changed_helper_module_is_refused_on_resume_and_the_coverage_is_said(tmp_path, compile_cache):
    proj, run = tmp_path / "proj", tmp_path / "run"
    proj.mkdir()
    (proj / "mine36.py").write_text(MODULE)
    (proj / "helper36.py").write_text(HELPER.format(1.0))
    start = _fedalf(proj, "--algorithm", "mine36:alg", *ARGV, "--rounds", "2", "--out", str(run))
    assert start.returncode == 0, start.stderr
    before = _hashes(run)
    (proj / "helper36.py").write_text(HELPER.format(2.0))  # scale_of() 1.0 -> 2.0
    p = _fedalf(proj, "--resume", "--out", str(run), "--rounds", "3", "--no-progress")
    err = without_deprecation(p.stderr).strip()
    assert p.returncode == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "algorithm 'mine36:alg': its code changed since the checkpoint" in err and "helper36.py" in err, err
    assert _hashes(run) == before
    (proj / "helper36.py").write_text(HELPER.format(1.0))  # reverted
    p = _fedalf(proj, "--resume", "--out", str(run), "--rounds", "3", "--no-progress")
    assert p.returncode == 0 and _rounds(run) == [0, 1, 2, 3], p.stderr
    said = f"code digest of algorithm 'mine36:alg' covers helper36.py and mine36.py under {proj}; not covered:"
    for err in (start.stderr, p.stderr):  # said at the start and on the resume, in one line
        assert [ln for ln in err.splitlines() if "code digest" in ln] == [f"fedalf: warning: {said} installed "
                                                                         f"packages and modules its code does not "
                                                                         f"reach"]


def _forget(*modules, name="mine36:alg"):
    """What a new process would see: the modules imported again (after a file's edit)."""
    from fedalf_jax.experiment import registry
    registry._REGISTERED["algorithm"].pop(name, None)
    registry._CODE["algorithm"].pop(name, None)
    for m in modules:
        sys.modules.pop(m, None)


def test_a_digest_made_the_old_way_resumes_when_the_file_it_covered_is_unchanged(tmp_path, capsys, monkeypatch):
    from fedalf_jax.cli import main
    proj, run = tmp_path / "proj", tmp_path / "run"
    proj.mkdir()
    (proj / "mine36.py").write_text(MODULE)
    (proj / "helper36.py").write_text(HELPER.format(1.0))
    monkeypatch.chdir(proj)
    monkeypatch.syspath_prepend(str(proj))
    _forget("mine36", "helper36")
    assert main(["run", "--algorithm", "mine36:alg", *ARGV, "--rounds", "2", "--out", str(run)]) == 0
    # before issue 36: the sha256 of the sorted sha256 of the module's file (its functions are all in it)
    old = hashlib.sha256(hashlib.sha256((proj / "mine36.py").read_bytes()).digest()).hexdigest()[:16]
    _rewrite_code_digest(run, old)
    (proj / "helper36.py").write_text(HELPER.format(2.0))  # outside what the old digest covered
    _forget("mine36", "helper36")
    capsys.readouterr()
    assert main(["run", "--resume", "--out", str(run), "--rounds", "3", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert _rounds(run) == [0, 1, 2, 3], err
    lines = [ln for ln in err.splitlines() if "made before digests covered" in ln]
    assert len(lines) == 1 and "not checked" in lines[0], err
    # an old digest of other bytes: the module's file changed since, refused
    _rewrite_code_digest(run, hashlib.sha256(hashlib.sha256(b"x = 1\n").digest()).hexdigest()[:16])
    _forget("mine36", "helper36")
    before = _hashes(run)
    assert main(["run", "--resume", "--out", str(run), "--rounds", "4", "--no-progress"]) == 2
    err = without_deprecation(capsys.readouterr().err).strip()
    assert len(err.splitlines()) == 1 and "changed since the checkpoint" in err, err
    assert _hashes(run) == before
    _forget("mine36", "helper36")


# ---- a notebook's algorithm reading a global set in another cell ----------------------------------------------

CELL = '''
import jax
import jax.numpy as jnp
import fedalf_jax as fj

def server(s):
    g = jax.tree_util.tree_map(lambda d: jnp.mean(d, axis=0), s.deltas)
    return jax.tree_util.tree_map(lambda t, d: t - STEP * d, s.theta, g), s.sstate, {}

def upload(theta, w, w_tilde, state, hp, lr_t):
    return jax.tree_util.tree_map(lambda t, x: t - x, theta, w_tilde), state

def make():
    return fj.Algorithm("cell", server=server, upload=upload)
'''


def test_a_changed_global_of_notebook_code_is_refused_on_resume(tmp_path):
    ns = {"STEP": 1.0}  # set in "another cell"
    exec(compile(CELL, "<cell>", "exec"), ns)
    fj.register_algorithm("cell36", ns["make"])
    run = tmp_path / "run"
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        fj.run(algorithm="cell36", out=str(run), rounds=2, progress=False, **SMALL)
    before = _hashes(run)
    ns["STEP"] = 3.0  # a 3x server step
    with pytest.raises(fj.ConfigError, match=r"^algorithm 'cell36': its code changed since the checkpoint .*1 global "
                                             r"value \(STEP\).*revert the change"):
        fj.run(algorithm="cell36", out=str(run), rounds=3, resume=True, progress=False, **SMALL)
    assert _hashes(run) == before
    ns["STEP"] = 1.0
    with pytest.warns(Notice, match="code digest of algorithm 'cell36'"):
        res = fj.run(algorithm="cell36", out=str(run), rounds=3, resume=True, progress=False, **SMALL)
    assert res.status == "done" and _rounds(run) == [0, 1, 2, 3]
    lines = [str(w.message) for w in said if issubclass(w.category, Notice) and "code digest" in str(w.message)]
    assert lines == ["code digest of algorithm 'cell36' covers the code of make, server and upload and 1 global value "
                     "(STEP); not covered: installed packages and modules its code does not reach"], lines


# ---- what the digest covers, rule by rule -----------------------------------------------------------------------

def _load(path: Path, name: str):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.modules.pop(name, None)
    return mod


def test_a_package_module_covers_its_packages_and_what_it_imports_not_the_rest_of_the_folder(tmp_path):
    # issue 36 covered every .py file of the top-level package; since issue 47 (item 14) what the code reaches:
    # the module, the __init__.py files of the packages above it (they ran) and what it imports
    from fedalf_jax.experiment import code_digest as CD
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    for rel in ("__init__.py", "sub/__init__.py", "util.py", "other.py", ".hidden/x.py", "__pycache__/y.py",
                "venv/lib.py", "node_modules/z.py", "lib/site-packages/w.py"):
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(f"# {rel}\ndef make():\n    return 1\n")
    (pkg / "sub" / "alg.py").write_text("from pkg.util import make as helper\n\ndef make():\n    return helper()\n")
    (pkg / "venv" / "pyvenv.cfg").write_text("home = /usr\n")
    (tmp_path / "outside.py").write_text("x = 1\n")  # beside the package, not in it
    sys.path.insert(0, str(tmp_path))
    try:
        import pkg.sub.alg as alg
        d = CD.take(alg.make, alg)
    finally:
        sys.path.remove(str(tmp_path))
        for m in ("pkg", "pkg.sub", "pkg.sub.alg"):
            sys.modules.pop(m, None)
    assert sorted(os.path.relpath(f, pkg) for f in d.files) == ["__init__.py", "sub/__init__.py", "sub/alg.py",
                                                               "util.py"]
    digest, covers = CD.current(d)
    assert covers.startswith(f"4 .py files under {pkg}; not covered: installed packages and modules its code does "
                             f"not reach")
    (pkg / "other.py").write_text("def changed():\n    pass\n")  # imported by nothing the code reaches
    assert CD.current(CD.take(alg.make, alg))[0] == digest
    (pkg / "util.py").write_text("def changed():\n    pass\n")
    assert CD.current(CD.take(alg.make, alg))[0] != digest


def test_the_walk_is_capped_and_says_so(tmp_path, monkeypatch):
    from fedalf_jax.experiment import code_digest as CD
    for i in range(1, 5):
        (tmp_path / f"m{i}.py").write_text(f"def make():\n    return {i}\n")
    (tmp_path / "m0.py").write_text("import m1, m2, m3, m4\n\ndef make():\n    return 0\n")
    monkeypatch.setattr(CD, "MAX_FILES", 3)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        mod = _load(tmp_path / "m0.py", "m0")
        d = CD.take(mod.make, mod)
    finally:
        for m in ("m1", "m2", "m3", "m4"):
            sys.modules.pop(m, None)
    assert len(d.files) == 3 and "(capped at 3 files" in CD.current(d)[1]


def test_the_globals_of_file_less_code_are_covered_by_value_and_the_others_named():
    src = "def make():\n    return (A, B, C, D, helper())\n\ndef helper():\n    return E\n"

    def ns(**kw):
        out = dict(A=1.0, B=(2, "x"), C=np.arange(4, dtype=np.float32), D=object(), E={"k": [1, 2]})
        out.update(kw)
        exec(compile(src, "<cell>", "exec"), out)
        return out
    base = code_digest(ns()["make"])
    assert base[0] != "uncheckable"
    assert "the code of helper and make" in base[1] and "4 global values (A, B, C and E)" in base[1]
    assert "not covered: installed packages, modules its code does not reach and the global D (object)" in base[1]
    assert code_digest(ns()["make"])[0] == base[0]  # the same values: the same digest
    for change in (dict(A=2.0), dict(B=(2, "y")), dict(C=np.arange(4, dtype=np.float64)),
                   dict(C=np.arange(1, 5, dtype=np.float32)), dict(E={"k": [1, 3]})):
        assert code_digest(ns(**change)["make"])[0] != base[0], change
    assert code_digest(ns(D=object())["make"])[0] == base[0]  # not covered, as said
