"""Where does FedLF on the CNN, pat2, η = 0.1 first go non-finite? (issue #8, item 4)

Runs the round's two halves separately (clients, then server) and, every round, prints the sampled
clients' losses, the largest pseudo-gradient and parameter norms, the QP statistics, and the
curvature test of the step along the update direction d: with f the mean loss of the sampled
clients, g = ∇f(θ), h = d̂ᵀ∇²f(θ)d̂ (a central difference of gradients), the quadratic model of f along
d̂ says the step s = η_g‖d‖ lowers f only if s < 2 (g·d̂)/h; ``overshoot`` = s·h / (2 g·d̂) > 1 means the
step is too long for the curvature. Stops at the first non-finite value.

    python experiments/probes/fedlf_nan_probe.py --lr 0.1 --rounds 20
    python experiments/probes/fedlf_nan_probe.py --lr 0.05 --rounds 20
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from fedalf_jax.experiment.build import build
from fedalf_jax.experiment.config import Config
from fedalf_jax.sim import tree as T
from fedalf_jax.sim.client import full_loss
from fedalf_jax.sim.round import client_phase, init_state, server_step


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--model", default="cnn")
    p.add_argument("--partition", default="pat2")
    a = p.parse_args()
    cfg = Config(algorithm="fedlf", model=a.model, partition=a.partition, lr=a.lr, server_lr=a.lr, rounds=a.rounds)
    exp = build(cfg)
    spec, hp, data = exp.spec, exp.hp, exp.data
    state = init_state(spec, cfg.seed)
    clients = jax.jit(lambda s: client_phase(spec, s, hp, data))
    server = jax.jit(lambda s, sel, n, o: server_step(spec, s, sel, n, o, hp))

    def mean_loss(params, variables, sel):
        v = {**variables, "params": params}
        return jnp.mean(jax.vmap(lambda c: full_loss(spec.model, v, data.x, data.y, data.train_idx[c],
                                                     data.train_n[c]))(sel))

    grad = jax.jit(jax.grad(mean_loss))
    finite = lambda tree: all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree_util.tree_leaves(tree))  # noqa: E731
    for t in range(a.rounds):
        sel, n, outs = clients(state)
        new, m = server(state, sel, n, outs)
        theta = state.variables["params"]
        step = T.sub(theta, new.variables["params"])  # η_g(t) d
        s_len = float(jnp.sqrt(T.sq_norm(step)))
        info = {k: float(np.asarray(m[k])) for k in ("qp_iters", "qp_residual", "qp_fallback", "qp_blocks")}
        line = (f"round {t:2d}  max loss {float(jnp.max(outs.loss)):.4g}  "
                f"max|Δ_i| {max(float(jnp.linalg.norm(x)) for x in jax.tree_util.tree_leaves(outs.delta)):.4g}  "
                f"|θ| {float(jnp.sqrt(T.sq_norm(theta))):.4g}  step {s_len:.4g}  {info}")
        if finite(new.variables) and finite(outs.delta) and s_len > 0:
            u = T.scale(step, -1.0 / s_len)  # the unit direction θ moves in
            g = grad(theta, state.variables, sel)
            eps = 1e-3
            gp = grad(T.add(theta, T.scale(u, eps)), state.variables, sel)
            gm = grad(T.sub(theta, T.scale(u, eps)), state.variables, sel)
            h = float(T.vdot(T.sub(gp, gm), u)) / (2 * eps)
            slope = -float(T.vdot(g, u))  # −g·û > 0: û is a descent direction
            line += f"  slope {slope:.4g}  curvature {h:.4g}  overshoot {s_len * h / (2 * slope):.3g}"
        print(line, flush=True)
        if not (finite(new.variables) and finite(outs.delta) and bool(jnp.all(jnp.isfinite(outs.loss)))):
            print(f"first non-finite value at round {t}: client losses/gradients finite: "
                  f"{finite(outs.delta) and bool(jnp.all(jnp.isfinite(outs.loss)))}, new θ finite: {finite(new.variables)}")
            break
        state = new


if __name__ == "__main__":
    main()
