"""Issue 47, item 14: the code digest covers what the algorithm's code reaches, and no more.

Before, registering ``lambda: fedgkd(K=2)`` digested the lambda's folder only: the factory's loss in another
folder was changed and ``fj.run(..., resume=True)`` went on. And any edit to any ``.py`` file in the folder
blocked ``--resume`` of every run there, in a message that did not name the changed file. Now the digest
follows the code (the module of what is registered, the globals its code names, closure cells, the
``Algorithm`` a factory builds, what those modules import of the user's) and records one digest per file,
so that the refusal names the changed file.

Expectations are independent of the code under test: which file was edited (a set of paths), exit by
``ConfigError`` or not, the rounds on disk, the run folder's bytes, and the old (issue 36) digest recomputed
here from the folder's files with hashlib."""

import hashlib
import importlib
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import fedalf_jax as fj
from fedalf_jax.experiment import registry
from fedalf_jax.experiment.rundir import LOCK, RunDir
from fedalf_jax.notices import Notice

SMALL = dict(dataset="synthetic", synthetic_train=200, synthetic_test=80, model="mlp", clients=2,
             clients_per_round=2, partition="iid", eval_every=1, progress=False)

CONSTS = "def scale():\n    return {}\n"
FACTORIES = '''import fedalf_jax as fj
from consts47 import scale

SCALE = scale()  # read when the module is imported: only the module's imports reach consts47


def gkd_loss(theta, state, hp):
    def loss(params, batch):
        return {factor} * SCALE * fj.cross_entropy(batch)
    return loss


def _alg(K):
    return fj.Algorithm(f"gkd{{K}}", server=fj.algorithms.weighted_mean_server, upload=fj.algorithms.model_upload,
                        local_loss=gkd_loss)


def fedgkd(K=1):
    return _alg(K)


def fedgkd_layers(layer_of, K=1):
    if layer_of is None:
        raise ValueError("this factory needs the model's layers")
    return _alg(K)
'''
UNRELATED = "def other():\n    return {}\n"
SCRIPT = "from factories47 import fedgkd\n\nALG = lambda: fedgkd(K=2)\n"  # noqa: E731 - as a user writes it

# the registered callable, as a notebook's cell defines it (code outside any file); each reaches the factory's
# module one way only: the globals its code names, a closure cell, or the Algorithm the factory builds
CELLS = {
    "cell": ("ALG = lambda layer_of: fedgkd_layers(layer_of, K=2)\n", "fedgkd_layers"),
    "closure": ("ALG = (lambda f: lambda layer_of: f(layer_of, K=2))(g)\n", "g"),
    "built": ("import importlib\nimport fedalf_jax as fj\n\n"
              "def ALG():\n"
              "    loss = getattr(importlib.import_module('factories' + '47'), 'gkd_loss')\n"
              "    return fj.Algorithm('dyn', server=fj.algorithms.weighted_mean_server,\n"
              "                        upload=fj.algorithms.model_upload, local_loss=loss)\n", None),
}
MODULES = ("factories47", "consts47", "unrelated47", "exp47")
NAME = "gkd47"


@pytest.fixture
def user(tmp_path, monkeypatch):
    """lib/ (the factory's folder, with a module the factory imports and one nothing imports) and proj/ (the
    script's folder, with another unrelated module), both on the path; ``register(how)`` registers the
    lambda anew, as a new process would after an edit."""
    lib, proj = tmp_path / "lib", tmp_path / "proj"
    lib.mkdir()
    proj.mkdir()
    (lib / "factories47.py").write_text(FACTORIES.format(factor="1.0"))
    (lib / "consts47.py").write_text(CONSTS.format(1.0))
    (lib / "unrelated47.py").write_text(UNRELATED.format(1))
    (proj / "exp47.py").write_text(SCRIPT)
    (proj / "notes47.py").write_text(UNRELATED.format(1))
    monkeypatch.syspath_prepend(str(lib))
    monkeypatch.syspath_prepend(str(proj))

    def register(how):
        _forget()
        if how == "script":
            fj.register_algorithm(NAME, importlib.import_module("exp47").ALG)
            return
        src, glob = CELLS[how]
        ns = {} if glob is None else {glob: importlib.import_module("factories47").fedgkd_layers}
        exec(compile(src, "<cell>", "exec"), ns)
        fj.register_algorithm(NAME, ns["ALG"])
    register.lib, register.proj = lib, proj
    yield register
    _forget()


def _forget():
    registry._REGISTERED["algorithm"].pop(NAME, None)
    registry._CODE["algorithm"].pop(NAME, None)
    for m in MODULES:
        sys.modules.pop(m, None)


def _hashes(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != LOCK}


def _rounds(folder: Path) -> list:
    return [int(r) for r in RunDir(folder).metrics()["round"]]


def _changed(user, how, edit) -> set:
    """The files whose recorded digest differs after ``edit`` (and a new registration)."""
    user(how)
    before = registry.code_parts("algorithm", NAME)
    edit()
    user(how)
    after = registry.code_parts("algorithm", NAME)
    return {k for k in set(before) | set(after) if before.get(k) != after.get(k)}


@pytest.mark.parametrize("how", ["script", "cell", "closure", "built"])
def test_the_digest_follows_the_code_to_the_factory_and_what_it_imports_not_to_the_rest_of_the_folders(user, how):
    lib, proj = user.lib, user.proj
    factories = str(lib / "factories47.py")
    assert _changed(user, how, lambda: (lib / "factories47.py").write_text(FACTORIES.format(factor="0.5"))) \
        == {factories}
    # imported by the factory's module, at import time (not named by any function's code)
    consts = str(lib / "consts47.py")
    assert _changed(user, how, lambda: (lib / "consts47.py").write_text(CONSTS.format(2.0))) == {consts}
    # imported by nothing the code reaches, beside the factory and beside the script
    assert _changed(user, how, lambda: (lib / "unrelated47.py").write_text(UNRELATED.format(2))) == set()
    assert _changed(user, how, lambda: (proj / "notes47.py").write_text(UNRELATED.format(2))) == set()


def _run(rounds, resume=False, run=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Notice)
        return fj.run(algorithm=NAME, out=str(run), rounds=rounds, resume=resume, **SMALL)


@pytest.mark.parametrize("how", ["script", "cell"])
def test_resume_refuses_a_changed_factory_naming_its_file_and_resumes_past_unrelated_edits(user, how, tmp_path,
                                                                                          compile_cache):
    lib, proj, run = user.lib, user.proj, tmp_path / "run"
    user(how)
    assert _run(2, run=run).status == "done"
    before = _hashes(run)
    (lib / "factories47.py").write_text(FACTORIES.format(factor="0.5"))  # the loss halved
    user(how)
    with pytest.raises(fj.ConfigError) as e:
        _run(3, resume=True, run=run)
    msg = str(e.value)
    assert len(msg.splitlines()) == 1 and msg.startswith(f"algorithm '{NAME}': its code changed since the checkpoint")
    assert f"(changed: {lib / 'factories47.py'}; the digest covers" in msg, msg
    assert _hashes(run) == before
    (lib / "factories47.py").write_text(FACTORIES.format(factor="1.0"))  # reverted
    (lib / "unrelated47.py").write_text(UNRELATED.format(3))  # and edits that the code does not reach
    (proj / "notes47.py").write_text(UNRELATED.format(3))
    user(how)
    assert _run(3, resume=True, run=run).status == "done"
    assert _rounds(run) == [0, 1, 2, 3]


def _rewrite(run: Path, value: str) -> None:
    """Every checkpoint's code digest set to ``value``, without per-file digests (as fedalf wrote it from
    issue 36 to 47)."""
    from fedalf_jax.experiment.identity import identity_digest
    for ck in run.glob("checkpoint*.npz"):
        with np.load(ck) as f:
            members = {k: f[k] for k in f.files}
        ident = json.loads(str(members["identity"]))
        ident.pop("algorithm_code_files", None)
        ident["algorithm_code"] = value
        members["identity"] = np.asarray(json.dumps(ident, sort_keys=True))
        members["digest"] = np.asarray(identity_digest(ident))
        np.savez(ck.with_suffix(""), **members)


def _issue36_digest(folder: Path) -> str:
    """Issue 36's digest of a file-less-code-free registration whose files all lie in ``folder``: every .py
    file there, one sha256 of their sorted sha256s."""
    shas = sorted(hashlib.sha256(p.read_bytes()).digest() for p in folder.glob("*.py"))
    return hashlib.sha256(b"code digest 2\0" + b"".join(shas)).hexdigest()[:16]


def test_a_checkpoint_with_the_issue36_digest_is_compared_that_way(user, tmp_path, compile_cache):
    proj, run = user.proj, tmp_path / "run"
    user("script")  # issue 36 digested the lambda's folder: exp47.py and notes47.py
    assert _run(2, run=run).status == "done"
    assert isinstance(RunDir(run).checkpoint_identity(run / "checkpoint.npz")["algorithm_code_files"], dict)
    _rewrite(run, _issue36_digest(proj))
    user("script")
    with pytest.warns(Notice, match="made before digests followed what the code reaches.*it matches"):
        res = fj.run(algorithm=NAME, out=str(run), rounds=3, resume=True, **SMALL)
    assert res.status == "done" and _rounds(run) == [0, 1, 2, 3]
    _rewrite(run, _issue36_digest(proj))
    before = _hashes(run)
    (proj / "notes47.py").write_text(UNRELATED.format(2))  # covered by that digest: it cannot tell
    user("script")
    with pytest.raises(fj.ConfigError, match=r"^algorithm 'gkd47': its code changed since the checkpoint .*recorded "
                                             r"before digests named files, so the changed file cannot be named"):
        _run(4, resume=True, run=run)
    assert _hashes(run) == before
