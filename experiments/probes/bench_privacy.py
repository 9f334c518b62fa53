"""Cost of each privacy mechanism in round time: FedALF rounds with no mechanism, adaptive LDP,
LDP-FL and Gaussian DP, compiled, timed interleaved in one process (median of --repeats).

    python experiments/probes/bench_privacy.py --model cnn --repeats 3
"""

import argparse
import statistics
import time

import jax

from fedalf_jax.experiment.config import Config
from fedalf_jax.sim.round import init_state, run_rounds
from fedalf_jax.experiment.build import build

VARIANTS = {"none": {}, "adaptive": {"ldp": "adaptive"}, "ldp_fl": {"ldp": "ldp_fl"},
            "gaussian": {"dp": "gaussian", "epsilon": 0.5}}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="cnn")
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    progs = {}
    for name, kw in VARIANTS.items():
        exp = build(Config(algorithm="fedalf", model=a.model, **kw))
        state = init_state(exp.spec, 0)
        f = jax.jit(lambda s, h, d, spec=exp.spec: run_rounds(spec, s, h, d, 1)).lower(state, exp.hp, exp.data).compile()
        progs[name] = [f, state, exp.hp, exp.data]
    times = {k: [] for k in progs}
    for _ in range(a.repeats):
        for name, pr in progs.items():
            f, s, hp, d = pr
            t0 = time.perf_counter()
            pr[1] = jax.block_until_ready(f(s, hp, d)[0])
            times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["none"])
    print("| mechanism | s/round (median) | vs none |\n|---|---|---|")
    for name, t in times.items():
        med = statistics.median(t)
        print(f"| {name} | {med:.3f} | {100 * (med - base) / base:+.1f}% |")


if __name__ == "__main__":
    main()
