"""What a real federation costs inside the compiled round (docs/federations.md, docs/lab/benchmarks.md).

Two measurements, each in one process, compiled programs timed with ``jax.block_until_ready``, medians:

1. **The federated round against the uniform one**, the same ``m``, steps and model: availability ``beta:2,5``,
   ``--dropout 0.1`` and ``--stragglers lognormal:0.5 --deadline D --straggler-policy drop`` (each alone and all
   together) against the default round, the programs alternated repeat by repeat so that a noisy machine slows both.
2. **Throughput in the field's unit**, client updates per second (``m`` / the round's seconds), FedAvg on
   Fashion-MNIST-shaped synthetic data (the MLP, B = 50, one local epoch of a 60-example client: 2 steps), for
   ``m`` = 10, 100 and 1,000 sampled clients per round (``N`` = ``m`` clients: every client every round).

Usage (from the repository root): ``PYTHONPATH=. .venv/bin/python experiments/probes/federation_cost.py
[--repeats 7] [--rounds 5] [--ms 10 100 1000] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import jax

from fedalf_jax.experiment.build import build
from fedalf_jax.experiment.config import Config
from fedalf_jax.sim.round import init_state, run_rounds

BASE = dict(dataset="synthetic", synthetic_like="fmnist", model="mlp", algorithm="fedavg", batch_size=50,
            local_epochs=1, eval_every=1, checkpoint_every="never")
SETTINGS = {
    "uniform": {},
    "availability beta:2,5": dict(availability="beta:2,5"),
    "dropout 0.1": dict(dropout=0.1),
    "stragglers drop": dict(stragglers="lognormal:0.5", deadline=2, straggler_policy="drop"),
    "stragglers partial": dict(stragglers="lognormal:0.5", deadline=2),
    "all three": dict(availability="beta:2,5", dropout=0.1, stragglers="lognormal:0.5", deadline=2,
                      straggler_policy="drop"),
}


def _program(cfg: Config, rounds: int):
    exp = build(cfg)
    spec = exp.spec
    step = jax.jit(lambda s, h, d: run_rounds(spec, s, h, d, rounds), donate_argnums=0)
    state = init_state(spec, cfg.seed)
    state, _ = step(state, exp.hp, exp.data)  # compile, and warm
    jax.block_until_ready(state)
    box = [state]

    def once() -> float:
        t = time.perf_counter()
        box[0], m = step(box[0], exp.hp, exp.data)
        jax.block_until_ready(box[0])
        return (time.perf_counter() - t) / rounds
    return once


def federation_ratios(clients: int, m: int, rounds: int, repeats: int) -> dict:
    kw = dict(BASE, clients=clients, clients_per_round=m, synthetic_train=60 * clients,
              synthetic_test=10 * clients, rounds=rounds)
    progs = {name: _program(Config(**kw, **extra), rounds) for name, extra in SETTINGS.items()}
    times = {name: [] for name in progs}
    for _ in range(repeats):
        for name, once in progs.items():
            times[name].append(once())
    med = {name: statistics.median(ts) for name, ts in times.items()}
    return {name: {"s_per_round": med[name], "ratio": med[name] / med["uniform"]} for name in med}


def throughput(ms, rounds: int, repeats: int) -> dict:
    out = {}
    for m in ms:
        kw = dict(BASE, clients=m, clients_per_round=m, synthetic_train=60 * m, synthetic_test=10 * m,
                  rounds=rounds)
        once = _program(Config(**kw), rounds)
        s = statistics.median(once() for _ in range(repeats))
        out[m] = {"s_per_round": s, "client_updates_per_s": m / s}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ms", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--json")
    a = ap.parse_args()
    res = {"device": jax.devices()[0].device_kind, "ratios_m10_of_100": federation_ratios(100, 10, a.rounds, a.repeats),
           "throughput": throughput(a.ms, a.rounds, a.repeats)}
    for name, r in res["ratios_m10_of_100"].items():
        print(f"{name:24s} {r['s_per_round'] * 1e3:8.2f} ms/round  {r['ratio']:.3f}x uniform")
    for m, r in res["throughput"].items():
        print(f"m = {m:5d}: {r['s_per_round'] * 1e3:9.2f} ms/round  {r['client_updates_per_s']:10.0f} client updates/s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
