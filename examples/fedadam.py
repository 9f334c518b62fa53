"""FedAdam and FedYogi (Reddi et al., ICLR 2021, "Adaptive Federated Optimization", Algorithm 2) written
against the public API, with their own traced hyper-parameters.

The clients run plain local SGD (FedAvg's). The server treats the mean of the clients' pseudo-gradients
``Δ_i = θ − w_i`` as a gradient and takes an adaptive step:

    Δ = mean_i Δ_i,      m ← β1 m + (1 − β1) Δ,
    v ← β2 v + (1 − β2) Δ²                           (FedAdam)
    v ← v − (1 − β2) Δ² sign(v − Δ²)                 (FedYogi)
    θ ← θ − η_g m / (√v + τ),

with ``η_g`` the server learning rate (``--server-lr``). (The paper writes Δ as the clients' model change
``w_i − θ``, the opposite sign: its ``θ + η m/(√v + τ)`` is this step.) The server state is ``(m, v)``,
``m`` starting at 0 and ``v`` at ``τ²`` as in the paper. ``τ`` is traced, so the state's initial ``v`` is
set at the first round (``t = 0``) from the run's own ``τ`` rather than in ``init_server_state``.

``β1``, ``β2`` and ``τ`` are the algorithm's own hyper-parameters (``hparams=``): read as
``s.hp.own["beta1"]``, set with ``--hp beta1=0.95`` (``fj.Config(hp={"beta1": 0.95})``), swept in one
program like ``--lr`` (``fedalf sweep --hp beta1=0.9,0.99``, ``grid={"hp.beta1": [0.9, 0.99]}``), and
recorded in ``config.json`` and the run's identity. Run it from the repository root:

    fedalf run --algorithm examples.fedadam:fedadam --model mlp --rounds 20 --server-lr 0.03
    fedalf sweep --algorithm examples.fedadam:fedyogi --model mlp --rounds 20 --server-lr 0.03 \\
        --hp beta1=0.9,0.99 --out runs/yogi
"""

import jax
import jax.numpy as jnp

import fedalf_jax as fj

HPARAMS = {"beta1": 0.9, "beta2": 0.99, "tau": 1e-3}


def _map(f, *trees):
    return jax.tree_util.tree_map(f, *trees)


def make_server(rule: str):
    """The adaptive server: ``rule`` is ``"adam"`` or ``"yogi"`` (the second moment's update)."""
    if rule not in ("adam", "yogi"):
        raise ValueError(f"unknown rule {rule!r}; use 'adam' or 'yogi'")

    def server(s: fj.ServerIn):
        b1, b2, tau = s.hp.own["beta1"], s.hp.own["beta2"], s.hp.own["tau"]
        m, v = s.sstate
        v = _map(lambda x: jnp.where(s.t == 0, jnp.square(tau).astype(x.dtype), x), v)  # v_0 = τ²
        d = _map(lambda x: jnp.mean(x, axis=0), s.deltas)                              # Δ = mean_i Δ_i
        m = _map(lambda mm, dd: b1 * mm + (1.0 - b1) * dd, m, d)
        if rule == "adam":
            v = _map(lambda vv, dd: b2 * vv + (1.0 - b2) * dd * dd, v, d)
        else:
            v = _map(lambda vv, dd: vv - (1.0 - b2) * dd * dd * jnp.sign(vv - dd * dd), v, d)
        theta = _map(lambda t, mm, vv: t - s.server_lr_t * mm / (jnp.sqrt(vv) + tau), s.theta, m, v)
        return theta, (m, v), {}

    return server


def init_server_state(params, num_clients):
    """(m, v): zeros (v becomes τ² at the first round, τ being traced). Two arrays, not one twice: the
    round donates the state's buffers to the next round."""
    return _map(jnp.zeros_like, params), _map(jnp.zeros_like, params)


def _adaptive(name: str, rule: str) -> fj.Algorithm:
    return fj.Algorithm(name, server=make_server(rule), client=fj.local_training(), init_server_state=init_server_state,
                        private_upload=True, hparams=HPARAMS)


def fedadam() -> fj.Algorithm:
    """FedAdam: Adam's second moment on the server."""
    return _adaptive("fedadam", "adam")


def fedyogi() -> fj.Algorithm:
    """FedYogi: Yogi's additive second moment on the server."""
    return _adaptive("fedyogi", "yogi")
