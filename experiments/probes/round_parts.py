"""FedALF's CNN round against FedAvg's, and the parts FedALF adds, compiled and timed interleaved in one
process (docs/lab/benchmarks.md, "FedALF's extra work"): the two rounds (state donated, as the run loop donates
it), the two client phases, FedALF's server step (donated, 12 rounds in, so that its history rows are
full), and the 10 clients' losses l_i = f_i(θ) in B-example forward passes with the training module
(im2col on CPU) and with the forward-only module (lax.conv). Medians of REPEATS (default 7).

    python experiments/probes/round_parts.py [REPEATS]
"""
import statistics
import sys
import time

import jax
import jax.numpy as jnp

from fedalf_jax.experiment.build import build
from fedalf_jax.experiment.config import Config
from fedalf_jax.sim import client as CL
from fedalf_jax.sim.round import client_phase, init_state, run_rounds, server_step

REPEATS = int(sys.argv[1]) if len(sys.argv) > 1 else 7
DATA = dict(model="cnn", dataset="fmnist", data_dir="/usr/share/datasets/fashion-mnist")
fresh = lambda s: jax.tree_util.tree_map(jnp.copy, s)  # noqa: E731

parts = {}  # name -> [compiled, donated state or None, other args]
for alg in ("fedalf", "fedavg"):
    exp = build(Config(algorithm=alg, **DATA))
    s0 = init_state(exp.spec, 0)
    f = jax.jit(lambda s, h, d, sp=exp.spec: run_rounds(sp, s, h, d, 1)[0], donate_argnums=(0,))
    parts[f"{alg} round"] = [f.lower(s0, exp.hp, exp.data).compile(), fresh(s0), (exp.hp, exp.data)]
    f = jax.jit(lambda s, h, d, sp=exp.spec: client_phase(sp, s, h, d)[2])
    parts[f"{alg} clients"] = [f.lower(s0, exp.hp, exp.data).compile(), None, (s0, exp.hp, exp.data)]
    if alg == "fedalf":
        alf, s12 = exp, jax.jit(lambda s, h, d, sp=exp.spec: run_rounds(sp, s, h, d, 12)[0])(s0, exp.hp, exp.data)
sel, n, outs = jax.jit(lambda s, h, d: client_phase(alf.spec, s, h, d))(s12, alf.hp, alf.data)
f = jax.jit(lambda s, o, h, sl=sel, n=n: server_step(alf.spec, s, sl, n, o, h)[0], donate_argnums=(0,))
parts["fedalf server"] = [f.lower(s12, outs, alf.hp).compile(), fresh(s12), (outs, alf.hp)]
d, v = alf.data, s12.variables
for fo, name in ((False, "losses, training module"), (True, "losses, forward module")):
    g = jax.jit(lambda v, x, y, i, n, fo=fo: jax.lax.map(
        lambda a: CL.full_loss(alf.spec.model, v, x, y, a[0], a[1], chunk=50, forward_only=fo), (i, n)))
    args = (v, d.x, d.y, d.train_idx[:10], d.train_n[:10])
    parts[name] = [g.lower(*args).compile(), None, args]

times = {k: [] for k in parts}
for _ in range(REPEATS):
    for k, p in parts.items():
        t0 = time.perf_counter()
        out = jax.block_until_ready(p[0](p[1], *p[2]) if p[1] is not None else p[0](*p[2]))
        times[k].append(time.perf_counter() - t0)
        if p[1] is not None:
            p[1] = out
med = {k: statistics.median(v) for k, v in times.items()}
for k, v in times.items():
    print(f"{k:28s} {1e3 * med[k]:8.1f} ms  ({1e3 * min(v):.0f}-{1e3 * max(v):.0f})")
print(f"FedALF / FedAvg round: {med['fedalf round'] / med['fedavg round']:.3f}")
