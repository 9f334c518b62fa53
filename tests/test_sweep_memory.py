"""Memory and disk for wide sweeps (issue 14, item 4): the program call's width chosen to fit a memory
limit, bench_sweep's separate runs one at a time, one checkpoint generation per sweep on disk, and
compressed checkpoints that load back bit for bit.

The expectations are independent of the code under test: literal widths from a linear cost, counts of
files on disk, live objects, bytes of arrays before and after."""

import csv
import json
import weakref
import zipfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedalf_jax.cli import main
from fedalf_jax import bench as bench_mod
from fedalf_jax.experiment import rundir as R
from fedalf_jax.experiment import sweep as S
from fedalf_jax.experiment import sweep_memory as M
from fedalf_jax.experiment import sweep_plan as P
from fedalf_jax.experiment.build import build
from fedalf_jax.experiment.config import Config, ConfigError
from fedalf_jax.experiment.rundir import RunDir
from fedalf_jax.sim.round import init_state

TINY = ["--dataset", "synthetic", "--model", "mlp", "--clients", "8", "--clients-per-round", "3",
        "--synthetic-train", "600", "--synthetic-test", "160", "--batch-size", "20", "--rounds", "4",
        "--eval-every", "2", "--no-progress"]
BASE = dict(dataset="synthetic", model="mlp", clients=8, clients_per_round=3, synthetic_train=600,
            synthetic_test=160, batch_size=20, rounds=4, eval_every=2)


def _metrics(path):
    with open(path) as f:
        return [{k: v for k, v in r.items() if k != "seconds_per_round"} for r in csv.DictReader(f)]


# ---- the width of a program call ----------------------------------------------------------------------

class Linear:
    """An estimate of ``fixed + per_run · width`` bytes that counts its (compile-costing) calls."""

    def __init__(self, fixed, per_run, one_extra=0):
        self.fixed, self.per_run, self.one_extra, self.calls = fixed, per_run, one_extra, []

    def __call__(self, w):
        self.calls.append(w)
        return self.fixed + self.per_run * w + (self.one_extra if w == 1 else 0)


def test_the_whole_combination_is_compiled_once_when_it_fits():
    est = Linear(100, 10)
    assert M.fit_width(est, 64, 1, limit=740) == (64, {64: 740})
    assert est.calls == [64]  # the sweep runs this very program: nothing compiled in vain


@pytest.mark.parametrize("limit, width", [(739, 63), (500, 40), (125, 2), (119, 1), (50, 1)])
def test_the_widest_call_within_the_limit_is_chosen(limit, width):
    est = Linear(100, 10)
    got, seen = M.fit_width(est, 64, 1, limit=limit)
    assert got == width and all(w <= 64 for w in seen)
    assert len(est.calls) <= 4


def test_widths_are_multiples_of_the_devices_and_wide_arguments_are_not_compiled():
    est = Linear(100, 10)
    assert M.fit_width(est, 61, 4, limit=500, args_bytes=lambda w: 5 * w)[0] == 40
    assert est.calls[:2] == [64, 8]  # 61 runs: 16 calls of 4 at most; then two runs per device
    est = Linear(100, 10)
    assert M.fit_width(est, 61, 4, limit=500, args_bytes=lambda w: 60 * w) == (8, {8: 180})
    assert est.calls == [8]  # 60·w > 500 beyond w = 8: the wider calls are not compiled
    # one run per device compiling to a costlier program does not mislead the interpolation
    est = Linear(100, 10, one_extra=1000)
    assert M.fit_width(est, 64, 1, limit=500)[0] == 40


def test_memory_limit_sources(monkeypatch):
    assert M.memory_limit(123) == (123, "the given limit")
    assert M.memory_limit(None, {"FEDALF_MEMORY_LIMIT": "1.5GiB"})[0] == int(1.5 * 2 ** 30)
    assert M.memory_limit(None, {"FEDALF_MEMORY_LIMIT": "2e9"})[0] == 2 * 10 ** 9
    with pytest.raises(ConfigError, match="FEDALF_MEMORY_LIMIT must be a memory size"):
        M.memory_limit(None, {"FEDALF_MEMORY_LIMIT": "lots"})
    if jax.default_backend() == "cpu":
        monkeypatch.setattr(M, "_mem_available", lambda: 10 * 10 ** 9)
        assert M.memory_limit(None, {}) == (8 * 10 ** 9, "available host memory 10.0 GB × 0.8")


def test_a_bad_memory_limit_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FEDALF_MEMORY_LIMIT", "lots")
    code = main(["sweep", *TINY, "--algorithm", "fedavg", "--out", str(tmp_path / "sw")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "FEDALF_MEMORY_LIMIT" in err, err


def test_a_small_memory_limit_chooses_a_narrower_call_says_why_and_runs_it(tmp_path, capsys, monkeypatch, compile_cache):
    cfgs = P.expand({**BASE, "algorithm": "fedavg"}, {}, [0, 1, 2, 3])
    group = S._Group([(c, None) for c in cfgs])
    sizer = M._Sizer(group, P.static_key(cfgs[0]), False, None)
    at2, at4 = sizer(2), sizer(4)
    assert at2 < at4
    limit = (at2 + at4) // 2  # 2 runs fit, 4 do not
    monkeypatch.setenv("FEDALF_MEMORY_LIMIT", str(limit))
    compiled = []
    real = S.Program._compile

    def compile_(self, key, make, args):  # the compiles, as (program, (width, 2))
        if key not in self._compiled:
            compiled.append((key, tuple(args[0].key.shape)))
        return real(self, key, make, args)

    monkeypatch.setattr(S.Program, "_compile", compile_)
    capsys.readouterr()
    out = tmp_path / "sw"
    assert main(["sweep", *TINY, "--algorithm", "fedavg", "--seeds", "0", "1", "2", "3", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "sweep chunk" in line]
    chunk = json.loads((out / "sweep.json").read_text())["chunk"]
    assert chunk in (2, 3), err
    assert len(said) == 1 and said[0].startswith(f"fedalf: sweep chunk {chunk} of 4 runs: ~"), err
    assert f"per {chunk}-run program call" in said[0] and "FEDALF_MEMORY_LIMIT" in said[0], said
    # the chosen call's programs were compiled once, when the sweep was sized, and then run
    assert compiled.count((("round",), (chunk, 2))) == 1, compiled
    assert compiled.count((("chunk", 0), (chunk, 2))) == 1, compiled
    assert compiled.count((("train_loss",), (chunk, 2))) == 1, compiled
    assert (("round",), (4, 2)) in compiled  # the whole combination was sized first
    # a run of the narrower calls is still its single run, bit for bit
    rd = RunDir(out / "fedavg_seed3")
    single = tmp_path / "single"
    assert main(["run", "--config", str(rd.path / "config.json"), "--out", str(single), "--no-progress"]) == 0
    assert _metrics(rd.path / "metrics.csv") == _metrics(single / "metrics.csv")
    # an explicit --sweep-chunk is authoritative: nothing is sized
    monkeypatch.setenv("FEDALF_MEMORY_LIMIT", "1")
    assert main(["sweep", *TINY, "--algorithm", "fedavg", "--seeds", "0", "1", "--sweep-chunk", "2",
                 "--out", str(tmp_path / "explicit")]) == 0
    assert "sweep chunk" not in capsys.readouterr().err
    assert json.loads((tmp_path / "explicit" / "sweep.json").read_text())["chunk"] == 2


def test_abstract_inputs_are_the_shapes_of_the_real_ones():
    cfgs = P.expand({**BASE, "algorithm": "fedalf"}, {"lr": [0.05, 0.1]}, [0, 1])
    group = S._Group([(c, None) for c in cfgs])
    assert M._avals(group.abstract_inputs(3)) == M._avals(group.inputs([0, 1, 3]))


# ---- bench_sweep: one single run's state at a time ---------------------------------------------------

def test_bench_sweep_builds_runs_and_drops_each_single_run_in_turn(monkeypatch):
    cfg = Config(algorithm="fedalf", **{**BASE, "rounds": 2})
    real = S._Group.single_inputs
    states, alive_then, live_bytes = [], [], []

    def single_inputs(self, i):
        alive_then.append(sum(r() is not None for r in states))
        live_bytes.append(sum(a.nbytes for a in jax.live_arrays()))
        ins = real(self, i)
        states.append(weakref.ref(jax.tree_util.tree_leaves(ins[0])[0]))  # a leaf of this run's state
        return ins

    monkeypatch.setattr(S._Group, "single_inputs", single_inputs)
    res = bench_mod.bench_sweep(cfg, widths=[4], repeats=2)
    one_state = sum(a.nbytes for a in jax.tree_util.tree_leaves(init_state(build(cfg).spec, 0)))
    assert alive_then == [0, 0, 0, 0]  # each single run was dropped before the next was built
    assert max(live_bytes) - live_bytes[0] < one_state / 2, (live_bytes, one_state)
    w = res["widths"]["4"]
    assert len(w["sweep_times"]) == 2 and len(w["separate_times"]) == 2
    assert w["sweep_s_per_call"] > 0 and w["separate_s_per_call"] > 0 and w["speedup"] > 0


# ---- checkpoints: one generation of a sweep on disk ----------------------------------------------------

def _checkpoint_files(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("checkpoint*"))


def test_a_sweep_keeps_one_checkpoint_per_run_and_never_more_than_one_being_written(tmp_path, monkeypatch):
    out = tmp_path / "sw"
    names = ["fedalf_lr0.05", "fedalf_lr0.1", "fedalf_lr0.2"]
    seen, had = [], set()
    real = R._read_meta

    def read_meta(path):  # the sweep reads each new checkpoint back before it replaces the old one
        if path.name.endswith(".tmp"):
            seen.append(_checkpoint_files(out))
            now = {n for n in names if (out / n / "checkpoint.npz").is_file()}
            assert had <= now, (had, now)  # a run that had a checkpoint always has one
            had.update(now)
        return real(path)

    monkeypatch.setattr(R, "_read_meta", read_meta)
    cfgs = P.expand({**BASE, "algorithm": "fedalf", "rounds": 6, "checkpoint_every": "1", "eval_every": 1},
                    {"lr": [0.05, 0.1, 0.2]}, [0])
    S.sweep(cfgs, out, chunk=2, progress=False)
    assert _checkpoint_files(out) == [f"{n}/checkpoint.npz" for n in names]
    assert len(seen) == 3 * 6  # a checkpoint per run and round, each read back
    assert max(len(f) for f in seen) == 4  # one per run, plus the one being written
    assert all(sum(x.endswith(".tmp") for x in f) == 1 for f in seen)
    assert all(RunDir(out / n).checkpoint_rounds().keys() == {6} for n in names)


def test_a_sweep_killed_between_its_runs_checkpoints_resumes_each_run_from_its_own(tmp_path, monkeypatch, compile_cache):
    cfgs = P.expand({**BASE, "algorithm": "fedalf", "rounds": 6, "checkpoint_every": "2"}, {"lr": [0.05, 0.1]}, [0])
    whole = tmp_path / "whole"
    S.sweep(cfgs, whole, progress=False)
    real = RunDir.save_checkpoint

    class Killed(BaseException):
        pass

    def save(self, state, cfg):  # the process dies after the first run's round-4 checkpoint
        if int(state.round) == 4 and self.name == "fedalf_lr0.1":
            raise Killed
        return real(self, state, cfg)

    monkeypatch.setattr(RunDir, "save_checkpoint", save)
    cut = tmp_path / "cut"
    with pytest.raises(Killed):
        S.sweep(cfgs, cut, progress=False)
    monkeypatch.setattr(RunDir, "save_checkpoint", real)
    first, second = RunDir(cut / "fedalf_lr0.05"), RunDir(cut / "fedalf_lr0.1")
    assert first.checkpoint_rounds().keys() == {4} and second.checkpoint_rounds().keys() == {2}
    assert S._start_rounds([first, second]) == [4, 2]  # neither starts again from round 0
    assert main(["sweep", "--resume", "--out", str(cut), "--no-progress"]) == 0
    for n in ("fedalf_lr0.05", "fedalf_lr0.1"):
        assert _metrics(whole / n / "metrics.csv") == _metrics(cut / n / "metrics.csv"), n
    assert _checkpoint_files(cut) == ["fedalf_lr0.05/checkpoint.npz", "fedalf_lr0.1/checkpoint.npz"]


def test_a_sweep_run_whose_only_checkpoint_is_damaged_stops_in_one_line(tmp_path, capsys):
    out = tmp_path / "sw"
    assert main(["sweep", *TINY, "--algorithm", "fedavg", "--seeds", "0", "1", "--out", str(out)]) == 0
    bad = out / "fedavg_seed1"
    (bad / "summary.json").unlink()  # as if killed after its last checkpoint
    p = bad / "checkpoint.npz"
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    before = {q.name: q.read_bytes() for q in bad.iterdir() if q.is_file() and q.name != R.LOCK}
    capsys.readouterr()
    code = main(["sweep", "--resume", "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "no usable checkpoint" in err, err
    assert {q.name: q.read_bytes() for q in bad.iterdir() if q.is_file() and q.name != R.LOCK} == before


# ---- compressed checkpoints ------------------------------------------------------------------------------

@pytest.mark.parametrize("state_dtype", ["float32", "bfloat16"])
def test_compressed_and_plain_checkpoints_load_back_bit_equal(tmp_path, state_dtype):
    cfg = Config(algorithm="fedalf", state_dtype=state_dtype, **BASE)
    spec = build(cfg).spec
    state = init_state(spec, 0)
    leaves, treedef = jax.tree_util.tree_flatten(state)
    rng = np.random.default_rng(0)
    filled = []
    for x in leaves:  # half the clients' rows nonzero, as after a few rounds
        if jnp.issubdtype(x.dtype, jnp.floating) and x.ndim >= 2 and x.shape[0] == cfg.clients:
            v = rng.normal(size=x.shape).astype(np.float32)
            v[cfg.clients // 2:] = 0
            x = jnp.asarray(v).astype(x.dtype)
        filled.append(x)
    state = jax.tree_util.tree_unflatten(treedef, filled)
    sizes = {}
    for compress in (False, True):
        rd = RunDir(tmp_path / str(compress), compress=compress)
        rd.create()
        rd.save_checkpoint(state, cfg)
        with zipfile.ZipFile(rd.path / "checkpoint.npz") as z:
            kinds = {i.compress_type for i in z.infolist()}
        assert kinds == {zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED}
        back = rd.load_checkpoint(jax.eval_shape(lambda: init_state(spec, 0)), cfg=cfg)
        for a, b in zip(jax.tree_util.tree_leaves(state), jax.tree_util.tree_leaves(back)):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
        sizes[compress] = (rd.path / "checkpoint.npz").stat().st_size
    assert sizes[True] < 0.75 * sizes[False], sizes


def test_compress_is_chosen_per_sweep_and_by_the_environment_for_a_run(tmp_path, monkeypatch):
    out = tmp_path / "sw"
    assert main(["sweep", *TINY, "--algorithm", "fedavg", "--seeds", "0", "--compress-checkpoints",
                 "--out", str(out)]) == 0
    assert json.loads((out / "sweep.json").read_text())["compress_checkpoints"] is True
    with zipfile.ZipFile(out / "fedavg" / "checkpoint.npz") as z:
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_DEFLATED}
    monkeypatch.setenv("FEDALF_COMPRESS_CHECKPOINTS", "1")
    assert main(["run", *TINY, "--algorithm", "fedavg", "--out", str(tmp_path / "run")]) == 0
    with zipfile.ZipFile(tmp_path / "run" / "checkpoint.npz") as z:
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_DEFLATED}
