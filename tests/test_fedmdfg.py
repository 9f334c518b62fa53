"""FedMDFG (examples/fedmdfg.py, issue #59 item 1) against two rounds computed here by hand in float64.

The problem: a bias-only model b ∈ R³ started at θ_0 = (−1, 0, 1), 3 clients of four examples each, labels
(0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 1, 1), one full-batch SGD step a round (batch size 4), every client every
round. Then f_i(b) = logsumexp(b) − q_i·b with q_i the client's label frequencies and Δ_i = η_l (softmax(b) − q_i)
exactly; softmax(θ_0) lies outside the hull of the q_i, so θ_0 is not Pareto-stationary and the min-norm
direction is not 0 (with one label per client it always would be: tests/test_examples_server.py's problem).
The loss vector's angle to the all-ones direction is 5.4° in round 1 and 2.9° or 4.9° in round 2: θ_fair = 2
has the fair guidance on in both rounds, the default θ_fair = 11.25 has it off in both (no loss rises above
its expected loss here, so nothing is forced)."""

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from test_examples_server import _box_min_norm  # noqa: E402  (helpers only)

import flax.linen as nn  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import fedalf_jax as fj  # noqa: E402

LR = 0.5
THETA0 = np.array([-1.0, 0.0, 1.0])
Y = np.array([0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 1])
Q = np.array([[1.0, 0, 0], [0.75, 0.25, 0], [0.5, 0.5, 0]])   # q_i, the clients' label frequencies


class Bias0(nn.Module):
    """logits = one bias vector b (started at THETA0) for every example."""
    num_classes: int

    @nn.compact
    def __call__(self, x):
        b = self.param("b", lambda key, shape: jnp.asarray(THETA0, jnp.float32), (self.num_classes,))
        return jnp.broadcast_to(b, (x.shape[0], self.num_classes))


def _run(tmp_path, **kw):
    lists = [np.arange(4 * i, 4 * i + 4) for i in range(3)]
    x = np.zeros((12, 2), np.float32)
    fj.register_dataset("fedmdfg_mixed", x, Y, x, Y, num_classes=3, clients=(lists, lists))
    fj.register_model("bias3_fedmdfg", Bias0)
    cfg = fj.Config(algorithm="examples.fedmdfg:fedmdfg", dataset="fedmdfg_mixed", partition="given",
                    model="bias3_fedmdfg", clients=3, clients_per_round=3, rounds=2, eval_every=1, local_epochs=1,
                    batch_size=4, lr=LR, lr_decay=1.0, out=str(tmp_path / "fedmdfg"))
    return fj.run(dataclasses.replace(cfg, **kw), progress=False)


def _lse(b):
    return np.log(np.sum(np.exp(b - b.max()))) + b.max()


def _losses(theta):
    return _lse(theta) - Q @ theta


def _deltas(theta):
    p = np.exp(theta - _lse(theta))
    return LR * (p[None, :] - Q)


def _b(res):
    return np.asarray(res.model["params"]["b"], np.float64)


def _fedmdfg_by_hand(rounds, glr, theta_fair):
    """The authors' train_a_round and get_fedmdfg_d, without the line search (a fixed step glr), in float64."""
    theta = THETA0.copy()
    expected, count = [None] * 3, [0] * 3
    active_seq, angle_seq = [], []
    for _ in range(rounds):
        g, l = _deltas(theta), _losses(theta)
        increases = 0
        for i in range(3):
            if count[i] == 0:
                expected[i] = l[i]
            elif l[i] <= expected[i]:
                expected[i] = (expected[i] * count[i] + l[i]) / (count[i] + 1)
            else:
                increases += 1
            count[i] += 1
        force = 0 < increases < 3
        norms = np.linalg.norm(g, axis=1)
        g = g / norms[:, None] * norms.mean()
        lhat = l / np.linalg.norm(l)
        e = np.ones(3) / np.sqrt(3)
        angle = np.degrees(np.arccos(np.clip(lhat @ e, -1, 1)))
        active = angle > theta_fair or force
        vec = g
        if active:
            h = (e @ lhat) * lhat - e
            h = h / np.linalg.norm(h)
            vec = np.vstack([g, h @ g])
        n = len(vec)
        lam = _box_min_norm(vec @ vec.T, np.zeros(n), np.ones(n))
        d_qp = lam @ vec
        d = d_qp / np.linalg.norm(d_qp) * np.linalg.norm(g.mean(axis=0))
        while np.max(-(vec @ d)) > 1e-6:
            if np.linalg.norm(d) > 2 * np.linalg.norm(d_qp):
                d = d / 2
            else:
                d = d_qp
                break
        theta = theta - glr * d
        active_seq.append(float(active))
        angle_seq.append(angle)
    return theta, active_seq, angle_seq


@pytest.mark.parametrize("theta_fair, active", [(2.0, [1.0, 1.0]), (11.25, [0.0, 0.0])])
def test_fedmdfg_matches_two_rounds_computed_by_hand(tmp_path, theta_fair, active):
    res = _run(tmp_path, server_lr=0.8, hp={"theta": theta_fair})
    theta, active_seq, angles = _fedmdfg_by_hand(2, 0.8, theta_fair)
    assert active_seq == active                            # the case this parameter is meant to be
    np.testing.assert_allclose(_b(res), theta, rtol=0, atol=2e-6)
    np.testing.assert_allclose(res.metrics["fair_active"].iloc[1:], active_seq)
    np.testing.assert_allclose(res.metrics["loss_angle"].iloc[1:], angles, atol=1e-3)
    assert np.abs(theta - THETA0).max() > 0.1              # a real step (not a Pareto-stationary 0)
    # the guidance changes the steps: without it (θ_fair = 11.25) the two rounds land elsewhere
    if active[0]:
        assert np.abs(_fedmdfg_by_hand(2, 0.8, 11.25)[0] - theta).max() > 0.02


def test_fedmdfg_stops_on_theta_outside_0_90(tmp_path):
    """θ_fair is traced (the server is compiled): one outside (0, 90) makes the step NaN, and the run stops as diverged."""
    with pytest.raises(FloatingPointError, match="diverged by round 1"):
        _run(tmp_path, hp={"theta": 95.0})
