"""Memory per client and round time with many clients (FedALF with history rows: ADMM duals and
history rows are N × |θ| each).

    python experiments/many_clients.py --model mlp --clients 1000 --per-round 100 --rounds 3
    python experiments/many_clients.py --model cnn --clients 1000 --per-round 100 --rounds 2 --state-dtype bfloat16

Prints the state's bytes per client (from the state's own arrays), the process's peak resident
memory, compile time and the median seconds per round of the compiled chunk (after the first).
Run it on a quiet machine; one configuration per process, so peak memory is that configuration's.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time

import jax
import numpy as np

from fedalf_jax.experiment.build import build
from fedalf_jax.experiment.config import Config
from fedalf_jax.experiment.loop import Program
from fedalf_jax.sim.round import init_state


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="mlp")
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--per-round", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--algorithm", default="fedalf")
    p.add_argument("--state-dtype", default="float32")
    p.add_argument("--partition", default="pat1")
    a = p.parse_args()
    cfg = Config(algorithm=a.algorithm, model=a.model, clients=a.clients, clients_per_round=a.per_round,
                 history=True if a.algorithm in ("fedlf", "fedalf") else None, partition=a.partition,
                 state_dtype=a.state_dtype, eval_every=1)
    exp = build(cfg)
    state = init_state(exp.spec, 0)
    nbytes = lambda t: sum(x.nbytes for x in jax.tree_util.tree_leaves(t))  # noqa: E731
    per_client = (nbytes(state.client_states) + nbytes(state.sstate[0] if state.sstate else ())) / a.clients
    params = sum(x.size for x in jax.tree_util.tree_leaves(state.variables["params"]))
    prog = Program(exp.spec)
    t0 = time.perf_counter()
    fn = prog.compiled(1, state, exp.hp, exp.data)
    compile_s = time.perf_counter() - t0
    times = []
    for _ in range(a.rounds):
        t0 = time.perf_counter()
        state, out = fn(state, exp.hp, exp.data)
        jax.block_until_ready(out)
        times.append(time.perf_counter() - t0)
    acc = float(np.mean(np.asarray(out.eval.acc)))
    res = {"model": a.model, "algorithm": a.algorithm, "clients": a.clients, "per_round": a.per_round,
           "state_dtype": a.state_dtype, "params": int(params), "state_bytes_per_client": per_client,
           "state_total_gb": nbytes(state) / 2 ** 30, "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20,
           "compile_s": round(compile_s, 2), "s_per_round_median_after_first": statistics.median(times[1:] or times),
           "round_times": [round(t, 3) for t in times], "mean_acc": acc}
    print(json.dumps(res))


if __name__ == "__main__":
    main()
