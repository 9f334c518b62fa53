"""Rounds as one program per evaluation chunk (a ``lax.scan`` of ``--eval-every`` rounds and the evaluation)
against one program per round (a scan of 1, dispatched one at a time) and the evaluation-only program: the
time of a chunk, both ways in one process (alternated, medians), and a hash of the final state both ways.

    .venv/bin/python experiments/probes/round_dispatch.py --dataset synthetic --model mlp --clients 20 --clients-per-round 5
    .venv/bin/python experiments/probes/round_dispatch.py            # the main job's CNN FedALF round (README)

Issue 36 item 4: the run loop dispatches rounds one at a time so that a signal is answered after the round in
flight; this measures what that costs and whether it changes a run's arithmetic.
"""

import argparse
import hashlib
import statistics
import time

import jax
import numpy as np

from fedalf_jax.experiment.build import build
from fedalf_jax.experiment.config import Config
from fedalf_jax.sim.round import init_state, run_rounds
from fedalf_jax.sim.train import make_chunk


def digest(tree) -> str:
    h = hashlib.sha256()
    for a in jax.tree_util.tree_leaves(tree):
        h.update(np.asarray(a).tobytes())
    return h.hexdigest()[:16]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="cnn")
    p.add_argument("--algorithm", nargs="+", default=["fedalf", "fedavg"])
    p.add_argument("--dataset", default="fmnist")
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--clients-per-round", type=int, default=10)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    for alg in args.algorithm:
        cfg = Config.from_dict({"model": args.model, "algorithm": alg, "dataset": args.dataset,
                                "clients": args.clients, "clients_per_round": args.clients_per_round,
                                "eval_every": args.eval_every})
        exp = build(cfg)
        spec, hp, data = exp.spec, exp.hp, exp.data
        L = args.eval_every
        chunk = jax.jit(make_chunk(spec, L))
        one = jax.jit(lambda s, h, d: run_rounds(spec, s, h, d, 1))
        ev = jax.jit(make_chunk(spec, 0))
        s0 = init_state(spec, cfg.seed)
        t0 = time.perf_counter()
        chunk_c = chunk.lower(s0, hp, data).compile()
        one_c = one.lower(s0, hp, data).compile()
        ev_c = ev.lower(s0, hp, data).compile()
        comp = time.perf_counter() - t0

        def by_chunk(s):
            s, out = chunk_c(s, hp, data)
            return jax.block_until_ready((s, out))

        def by_round(s):
            ms = []
            for _ in range(L):
                s, m = one_c(s, hp, data)
                jax.block_until_ready(s)  # one round in flight at a time, as the loop does
                ms.append(m)
            s, out = ev_c(s, hp, data)
            return jax.block_until_ready((s, out, ms))

        a, b = by_chunk(s0)[0], by_round(s0)[0]  # warm-up, and the hashes after L rounds from the same state
        ha, hb = digest(a), digest(b)
        ta, tb = [], []
        for _ in range(args.repeats):
            t = time.perf_counter(); by_chunk(s0); ta.append(time.perf_counter() - t)  # noqa: E702
            t = time.perf_counter(); by_round(s0); tb.append(time.perf_counter() - t)  # noqa: E702
        ma, mb = statistics.median(ta), statistics.median(tb)
        print(f"{alg} {args.model} N={args.clients} m={args.clients_per_round}: {L} rounds + eval, chunk program "
              f"{ma:.3f} s, per-round {mb:.3f} s (ratio {mb / ma:.3f}; {args.repeats} alternated, medians; "
              f"compiles {comp:.0f} s); state after {L} rounds: chunk {ha}, per-round {hb} "
              f"({'identical' if ha == hb else 'DIFFERENT'})", flush=True)


if __name__ == "__main__":
    main()
