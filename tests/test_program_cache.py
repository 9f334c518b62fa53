"""The programs a process compiled are reused by a later run of the same round spec and shapes (another
learning rate or seed, a resume): it compiles nothing (its summary's compile_s is 0) and computes the bits
a freshly compiled program computes; a run whose spec differs (here: another local optimizer, another shape,
another algorithm) compiles its own. The runs are FedAvg's and FedADMM's: the mechanism is the same for every
built-in, and FedALF's programs take about four times as long to compile.

Expectations are independent of the cache: a count of JAX's ahead-of-time compiles, and the metrics of the
same runs with the cache emptied before each."""

import sys
from pathlib import Path

import jax
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/, as under `python -m pytest`

from fedalf_jax.experiment import loop
from fedalf_jax.experiment.config import Config

TINY = dict(dataset="synthetic", model="mlp", clients=4, clients_per_round=2, synthetic_train=200, synthetic_test=80,
            rounds=2, eval_every=1, algorithm="fedavg")  # the mechanism, not FedALF: its programs compile in ~1/4 the time


@pytest.fixture
def compiles(monkeypatch):
    """The number of programs compiled ahead of time (``jax.stages.Lowered.compile``, which a program loaded
    from the persistent compilation cache also goes through) since the fixture started."""
    seen = []
    real = jax.stages.Lowered.compile

    def counted(self, *args, **kw):
        seen.append(1)
        return real(self, *args, **kw)

    monkeypatch.setattr(jax.stages.Lowered, "compile", counted)
    return lambda: len(seen)


def _run(tmp_path, name, **kw):
    return loop.run(Config(**{**TINY, **kw}, out=str(tmp_path / name)), progress=False, full=True)


def _acc(slot):
    return np.array([r["acc"] for r in slot.rows])


def test_a_second_run_of_the_same_spec_compiles_nothing_and_computes_the_same_bits(tmp_path, compiles):
    # FedADMM: a built-in whose factory makes closures (FedALF's too), so two builds are equal only when built once
    loop._PROGRAMS.clear()
    first = _run(tmp_path, "a", lr=0.05, seed=0, algorithm="fedadmm")
    n = compiles()
    assert n >= 3  # the round, the evaluation, the train loss
    again = _run(tmp_path, "b", lr=0.1, seed=1, algorithm="fedadmm")  # learning rate and seed are inputs
    assert compiles() == n
    import json
    assert json.loads((tmp_path / "b" / "summary.json").read_text())["compile_s"] == 0.0
    loop._PROGRAMS.clear()
    fresh = _run(tmp_path, "c", lr=0.1, seed=1, algorithm="fedadmm")
    assert compiles() >= n + 3
    assert np.array_equal(_acc(again), _acc(fresh)) and not np.array_equal(_acc(first), _acc(fresh))
    assert [r["test_loss"] for r in again.rows] == [r["test_loss"] for r in fresh.rows]


@pytest.mark.parametrize("change", [dict(local_optimizer="momentum"), dict(clients_per_round=3), dict(algorithm="fedprox")])
def test_a_run_whose_program_differs_compiles_its_own(tmp_path, compiles, change):
    loop._PROGRAMS.clear()
    _run(tmp_path, "a")
    n = compiles()
    _run(tmp_path, "b", **change)
    assert compiles() >= n + 1


def _zeros(params, num_clients):
    return jax.tree_util.tree_map(jax.numpy.zeros_like, params)


@pytest.mark.parametrize("name", ["examples.fedavgm:fedavgm", "registered"])
def test_a_users_algorithm_is_traced_afresh_for_every_run(tmp_path, compiles, name):
    """A notebook's algorithm may read a global that changed between two runs: its programs are not reused,
    even when it is one and the same object (registered as an Algorithm, not a factory)."""
    import fedalf_jax as fj
    from examples import fedavgm as M
    if name == "registered":
        name = "cache38_user"
        fj.register_algorithm(name, fj.Algorithm(name, server=M.server, client=fj.local_training(), private_upload=True,
                                                 hparams={"beta": 0.9}, init_server_state=_zeros))
    loop._PROGRAMS.clear()
    _run(tmp_path, "a", algorithm=name)
    n = compiles()
    _run(tmp_path, "b", algorithm=name)
    assert compiles() >= n + 1


def test_a_global_trace_option_is_part_of_the_key(tmp_path, compiles):
    """``jax.config.update`` of an option that changes a trace (the runs trace on a worker thread, which sees
    the global options, not a caller's context manager)."""
    loop._PROGRAMS.clear()
    was = jax.config.jax_default_matmul_precision
    try:
        jax.config.update("jax_default_matmul_precision", "bfloat16")
        _run(tmp_path, "a")
    finally:
        jax.config.update("jax_default_matmul_precision", was)
    n = compiles()
    _run(tmp_path, "b")
    assert compiles() >= n + 1  # (a CPU computes both in float32: only a GPU's numbers would differ)
