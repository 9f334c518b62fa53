"""Server step time, osqp (before) vs active (after), W = 1 and W copies of one run's server inputs (vmap), on a
state 12 rounds in; interleaved, medians of 7 (docs/lab/benchmarks.md).  python experiments/probes/server_time.py mlp 8"""
import json, statistics, sys, time
import jax, jax.numpy as jnp
from fedalf_jax.experiment.build import build
from fedalf_jax.experiment.config import Config
from fedalf_jax.sim.round import client_phase, init_state, run_rounds, server_step
model, W = sys.argv[1], int(sys.argv[2])
res = {"model": model, "W": W}
specs = {}
for method in ("osqp", "auto"):
    cfg = Config(algorithm="fedalf", model=model, qp_method=method, data_dir="/usr/share/datasets/fashion-mnist")
    specs[method] = build(cfg)
exp = specs["auto"]
state = init_state(exp.spec, 0)
state, _ = jax.jit(lambda s: run_rounds(exp.spec, s, exp.hp, exp.data, 12))(state)
sel, n, outs = jax.jit(lambda s: client_phase(exp.spec, s, exp.hp, exp.data))(state)
args1 = (state, sel, n, outs, exp.hp)
stack = lambda t: jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (W,) + jnp.shape(x)), t)
argsW = tuple(stack(a) for a in args1)
fns = {}
for method, e in specs.items():
    fns[f"{method}_W1"] = (jax.jit(lambda *a, e=e: server_step(e.spec, *a)), args1)
    fns[f"{method}_W{W}"] = (jax.jit(jax.vmap(lambda *a, e=e: server_step(e.spec, *a))), argsW)
times = {k: [] for k in fns}
for k, (f, a) in fns.items():  # compile and warm up
    jax.block_until_ready(f(*a))
for _ in range(7):
    for k, (f, a) in fns.items():
        t0 = time.perf_counter(); jax.block_until_ready(f(*a)); times[k].append(time.perf_counter() - t0)
for k in fns:
    res[k + "_ms"] = round(1e3 * statistics.median(times[k]), 2)
print(json.dumps(res))
