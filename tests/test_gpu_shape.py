"""Issue 29 items 2 and 3, counted from the compiled programs (deterministic, no timing): a sweep's
evaluation batched over its runs on the GPU path (loop trips that do not grow with the width), and the
active-set QP step's operations (one LU pivot permutation per step, not two)."""

import jax
import jax.numpy as jnp

from fedalf_jax.bench import hlo
from fedalf_jax.bench import server_depth
from fedalf_jax.experiment.config import Config
from fedalf_jax.experiment.loop import Program
from fedalf_jax.experiment.sweep import _Group
from fedalf_jax.sim.qp import _flat_solver

# 20 clients: the evaluation maps them in chunks of 10 (client.evaluate_clients), 2 loop trips per run
TINY = dict(algorithm="fedalf", dataset="synthetic", model="mlp", clients=20, clients_per_round=3,
            synthetic_train=600, synthetic_test=200, batch_size=20, rounds=4, eval_every=2)


def _eval_trips(width: int, client_map: str) -> tuple[int, int]:
    """Loop trips of the evaluation program and of the train-loss program of a ``width``-run sweep."""
    cfg = Config(**TINY, run_map="vmap", client_map=client_map)
    group = _Group([(cfg.replace(seed=i, out=None), None) for i in range(width)])
    args = group.abstract_inputs(width)
    program = Program(group.spec, batched=True, data_axes=group.axes, run_map="vmap")
    return tuple(hlo.static_trips(*hlo.computations(c.as_text()))
                 for c in (program.compiled(0, *args), program.compiled_train_loss(*args)))


def test_gpu_path_evaluation_is_batched_over_runs_so_its_trips_do_not_grow_with_the_width():
    # the GPU's combination (runs and clients vmapped): 2 chunks of 10 clients, whatever the width
    assert _eval_trips(1, "vmap") == (2, 2)
    assert _eval_trips(5, "vmap") == (2, 2)  # mapped per run, it was 5 runs × (1 + 2 chunks) = 15
    # the CPU's client_map (map): one run after another, in a single run's shapes (kept on purpose), and
    # one client after another in B = 20-example passes (the padded test splits, 6 long, take one pass, a
    # loop XLA removes; the train splits, 34 long, two)
    assert _eval_trips(3, "map") == (3 * (1 + 20), 3 * (1 + 20 * (1 + 2)))


def test_depth_width_counts_every_loop_of_a_round_evaluation_included():
    cfg = Config(**TINY, run_map="vmap", client_map="vmap", train_loss_every=4)
    res = server_depth(cfg, widths=(1, 3), rounds=2)
    one, three = res["widths"]["1"], res["widths"]["3"]
    for d in (one, three):
        assert d["eval_trips"] == 2 and d["train_loss_trips"] == 2 and d["eval_every"] == 2
        # all loops = the round's scans + the server's trips (each with the loops nested in a QP step,
        # here the LU's pivot permutation over the n = 3 + 1 + 20 QP rows) + 2/2 + 2/4
        assert d["server_inner_trips_per_trip"] == 24
        assert d["all_trips_per_round"] == (d["round_static_trips"] + d["trips_per_round"] * 25 + 1 + 0.5)
        assert d["qp_ops_per_step"] > 0 and d["qp_ops_per_round"] > 0
    # the round's own loops (local SGD, RNG) are batched over the runs too
    assert one["round_static_trips"] == three["round_static_trips"] > 0


def test_active_set_step_permutes_the_pivots_once():
    n = 12
    c = _flat_solver("active", 2 * n + 20, 1e-7).lower(jax.ShapeDtypeStruct((3, n, n), jnp.float32),
                                                       jax.ShapeDtypeStruct((3, n), bool)).compile()
    comps, entry = hlo.computations(c.as_text())
    (step,) = hlo.find_loops(comps, entry, "qp_active_set")
    body = comps[step.body]
    # one LU factorisation and one pivot → permutation loop of n trips (two solves made two: 2n trips)
    assert sum(i.opcode == "custom-call" and "getrf" in i.line for i in body) == 1
    assert [hlo.loop_of(i).trips for i in body if i.opcode == "while"] == [n]
    assert hlo.inner_static_per_trip(comps, step) == n
