"""FedALF's server step on the main job's CNN state 12 rounds in, timed as the run loop runs it: with the run
state donated (the compiled round updates the history rows in place), and apart from that, the same step
without donation (what a caller that keeps its input pays: a copy of the state, ~0.23 GB of history rows for
the CNN). Medians of 7 calls; the donated call gets a fresh copy of the state made outside the timing.

    python experiments/probes/server_donated.py [cnn|mlp]        # one JSON line
    TREES="<old tree> <new tree>" bash experiments/round_ratio.sh   # the whole round, for comparison
"""
import json
import statistics
import sys
import time

import jax
import jax.numpy as jnp

from fedalf_jax.experiment.build import build
from fedalf_jax.experiment.config import Config
from fedalf_jax.sim.round import client_phase, init_state, run_rounds, server_step

model = sys.argv[1] if len(sys.argv) > 1 else "cnn"
exp = build(Config(algorithm="fedalf", model=model, data_dir="/usr/share/datasets/fashion-mnist"))
state = init_state(exp.spec, 0)
state, _ = jax.jit(lambda s: run_rounds(exp.spec, s, exp.hp, exp.data, 12))(state)
sel, n, outs = jax.jit(lambda s: client_phase(exp.spec, s, exp.hp, exp.data))(state)
step = lambda s, sel, n, outs, hp: server_step(exp.spec, s, sel, n, outs, hp)  # noqa: E731
kept = jax.jit(step)
donated = jax.jit(step, donate_argnums=0)
copy = jax.jit(lambda s: jax.tree_util.tree_map(jnp.copy, s))
jax.block_until_ready(kept(state, sel, n, outs, exp.hp))
jax.block_until_ready(donated(copy(state), sel, n, outs, exp.hp))
times = {"donated": [], "kept": [], "copy": []}
for _ in range(7):
    fresh = jax.block_until_ready(copy(state))
    t0 = time.perf_counter(); jax.block_until_ready(donated(fresh, sel, n, outs, exp.hp))
    times["donated"].append(time.perf_counter() - t0)
    t0 = time.perf_counter(); jax.block_until_ready(kept(state, sel, n, outs, exp.hp))
    times["kept"].append(time.perf_counter() - t0)
    t0 = time.perf_counter(); jax.block_until_ready(copy(state))
    times["copy"].append(time.perf_counter() - t0)
print(json.dumps({"model": model, **{k + "_ms": round(1e3 * statistics.median(v), 1) for k, v in times.items()}}))
