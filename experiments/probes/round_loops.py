"""The loops of one compiled round: how many ``while`` loops XLA's optimised program of ``run_rounds(spec, ·, 1)``
has, and how deeply they nest (the round's sequential structure: a loop inside a loop is a trip per outer
trip), for built-in and example algorithms on small synthetic data. Issue 48: the default client re-expressed
as a client program must not add a loop or a level. Run from the tree whose fedalf_jax is measured:

    cd TREE && PYTHONPATH=. python experiments/probes/round_loops.py [CASE ...]
"""
import os
import re
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ["FEDALF_COMPILE_CACHE"] = "off"
import jax  # noqa: E402

from fedalf_jax.experiment.build import build  # noqa: E402
from fedalf_jax.experiment.config import Config  # noqa: E402
from fedalf_jax.sim.round import init_state, run_rounds  # noqa: E402

base = dict(dataset="synthetic", clients=12, clients_per_round=4, synthetic_train=600, synthetic_test=120)
cases = {
    "fedavg_mlp": dict(algorithm="fedavg", model="mlp"),
    "fedalf_mlp": dict(algorithm="fedalf", model="mlp"),
    "fedlf_mlp": dict(algorithm="fedlf", model="mlp"),
    "fedprox_mom": dict(algorithm="fedprox", model="mlp", local_optimizer="momentum"),
    "ldp_fedalf": dict(algorithm="fedalf", model="mlp", ldp="adaptive", epsilon=2.0),
    "fedavg_steps": dict(algorithm="fedavg", model="mlp", local_steps=3),
    "ditto": dict(algorithm="examples.ditto:ditto", model="mlp"),
    "fedproto": dict(algorithm="examples.fedproto:fedproto", model="examples.moon:model"),
}


def loops(hlo: str):
    """``(count, depth)`` of the ``while`` loops in an HLO module's text: a computation's depth is 1 + the
    deepest body it runs in a loop; the entry's depth is the program's."""
    comps, name = {}, None
    for line in hlo.splitlines():
        m = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
        if m and not line.startswith(" "):
            name = m.group(1)
            comps[name] = {"entry": line.startswith("ENTRY"), "whiles": [], "calls": []}
            continue
        if name is None:
            continue
        if " while(" in line:
            b = re.search(r"body=%?([\w.\-]+)", line)
            comps[name]["whiles"].append(b.group(1))
        for c in re.findall(r"(?:to_apply|calls|branch_computations|true_computation|false_computation|"
                            r"condition)=\{?%?([\w.\-]+)", line):
            comps[name]["calls"].append(c)

    memo = {}

    def depth(c):
        if c not in comps:
            return 0
        if c not in memo:
            memo[c] = 0
            memo[c] = max([1 + depth(b) for b in comps[c]["whiles"]] + [depth(x) for x in comps[c]["calls"]] + [0])
        return memo[c]

    count = sum(len(v["whiles"]) for v in comps.values())
    entry = next(k for k, v in comps.items() if v["entry"])
    return count, depth(entry)


only = sys.argv[1:]
for name, kw in cases.items():
    if only and name not in only:
        continue
    cfg = Config(**{**base, **kw})
    exp = build(cfg)
    spec, hp, data = exp.spec, exp.hp, exp.data
    s0 = init_state(spec, cfg.seed)
    text = jax.jit(lambda s, h, d: run_rounds(spec, s, h, d, 1)).lower(s0, hp, data).compile().as_text()
    count, d = loops(text)
    print(f"{name}: {count} while loops, nested {d} deep", flush=True)
