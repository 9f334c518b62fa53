"""What the ADMM dual does to the pseudo-gradients FedALF's fair QP sees (docs/lab/results.md).

From a FedALF run's last checkpoint, one round's sampled clients train from the same θ with the same
keys: with their duals λ_i⁻ (FedALF as it runs) and with λ_i⁻ = 0 (the same clients without the
dual's linear term), and the rows the server would receive under each upload rule (``--targets``:
``increment``, ``augmented``, ``model``; docs/algorithms.md §3.3). For each it prints the rows Δ_i's

* their mean pairwise cosine and the fraction of pairs in conflict (cosine < 0), over the whole
  model and per layer;
* their cosine with the global full-data gradient ∇F(θ) (all clients' training samples, weighted by
  size), i.e. how well each client's row points downhill for the federation;
* their norms.

    python experiments/probes/dual_effect.py runs/seed-mlp/fedalf/fedalf_pat1_lr0.05_seed0 [--rounds 5]

``--rounds R`` repeats the comparison over R rounds' client samples (the same θ, other keys).
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from fedalf_jax.experiment.build import build
from fedalf_jax.experiment.config import Config
from fedalf_jax.experiment.rundir import RunDir
from fedalf_jax.sim.client import full_loss
from fedalf_jax.sim.round import client_phase, init_state


def rows(delta):
    """Per-layer matrices [m, D_L] and the whole-model matrix [m, D]."""
    leaves = [x.reshape(x.shape[0], -1) for x in jax.tree_util.tree_leaves(delta)]
    return leaves, jnp.concatenate(leaves, axis=1)


def pair_stats(a):
    u = a / jnp.linalg.norm(a, axis=1, keepdims=True)
    c = np.asarray(u @ u.T)
    iu = np.triu_indices(c.shape[0], 1)
    return float(np.mean(c[iu])), float(np.mean(c[iu] < 0))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", help="a FedALF run directory with a checkpoint")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--targets", nargs="+", default=["increment", "augmented", "model"])
    a = p.parse_args()
    rd = RunDir(a.run)
    cfg = rd.config()
    exp = build(cfg)
    spec, hp, data = exp.spec, exp.hp, exp.data
    specs = {t: build(Config.from_dict({**cfg.to_dict(), "server_target": t})).spec for t in a.targets}
    state = rd.load_checkpoint(jax.eval_shape(lambda: init_state(spec, cfg.seed)))
    t0 = int(state.round)
    if not spec.algorithm.has_client_state:
        raise SystemExit(f"{a.run}: {cfg.algorithm} has no dual")
    theta = state.variables["params"]

    def global_loss(params):
        v = {**state.variables, "params": params}
        losses = jax.vmap(lambda i, n: full_loss(spec.model, v, data.x, data.y, i, n))(data.train_idx, data.train_n)
        w = data.train_n / jnp.sum(data.train_n)
        return jnp.sum(w * losses)

    g = jnp.concatenate([x.reshape(-1) for x in jax.tree_util.tree_leaves(jax.grad(global_loss)(theta))])
    g_unit = g / jnp.linalg.norm(g)
    phases = {t: jax.jit(lambda s, sp=sp: client_phase(sp, s, hp, data)[2].delta) for t, sp in specs.items()}
    no_dual = jax.tree_util.tree_map(jnp.zeros_like, state.client_states)
    cases = [(f"{t}, with dual", t, False) for t in a.targets] + [("dual = 0", a.targets[0], True)]
    res = {name: [] for name, _, _ in cases}
    for r in range(a.rounds):
        s = state._replace(round=jnp.asarray(t0 + r, state.round.dtype))
        for name, t, zero in cases:
            layers, whole = rows(phases[t](s._replace(client_states=no_dual) if zero else s))
            cos_g = np.asarray((whole / jnp.linalg.norm(whole, axis=1, keepdims=True)) @ g_unit)
            res[name].append(dict(
                cos=pair_stats(whole), layer=[pair_stats(x) for x in layers],
                cos_global=float(np.mean(cos_g)), norm=float(np.mean(np.linalg.norm(np.asarray(whole), axis=1)))))
    print(f"{a.run}: round {t0}, ρ={cfg.resolved_rho}, trained with server_target={cfg.resolved_server_target}, "
          f"{a.rounds} client samples of {cfg.clients_per_round}; mean over samples")
    print("| rows Δ_i | mean pairwise cos | pairs in conflict | conflicts per layer (mean) | cos(Δ_i, ∇F(θ)) | ‖Δ_i‖ |")
    print("|---|---|---|---|---|---|")
    for name, v in res.items():
        cos = np.mean([x["cos"][0] for x in v])
        conf = np.mean([x["cos"][1] for x in v])
        lconf = np.mean([[lc for _, lc in x["layer"]] for x in v])
        cg = np.mean([x["cos_global"] for x in v])
        nm = np.mean([x["norm"] for x in v])
        print(f"| {name} | {cos:.3f} | {conf:.1%} | {lconf:.1%} | {cg:.3f} | {nm:.3g} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
