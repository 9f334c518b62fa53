"""The server-side fair-FL baselines of issue #37 item 8, each against one or two rounds computed here
independently, by hand in float64, on the tiny problem of tests/test_contract.py (3 clients, one label
each, n_i = 3, 2, 5, a bias-only model, every client every round): AFL, FedMGDA+ (with its ε-box), TERM,
FedFV, FedAvgM and DP-FedAvg with adaptive clipping; and each run by the CLI, resumed exactly."""

import dataclasses
import itertools
import sys
from pathlib import Path

import chex
import flax.linen as nn
import jax.numpy as jnp
import numpy as np
import pytest

import fedalf_jax as fj

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # examples/ is not a package on the path under the console script `pytest`
from helpers import cli_resume_equals_one_go  # noqa: E402
from test_contract import COUNTS, LABELS, _cfg, _local  # noqa: E402  (helpers only)

LR = 0.5
P = np.asarray(COUNTS, np.float64) / sum(COUNTS)
THETA0 = np.array([0.4, 0.1, -0.3])  # θ_0: unequal losses from the start (at b = 0 they tie, and their float32
                                     # order, which FedFV depends on, would be the rounding's)


class TiltedBias(nn.Module):
    """test_contract's bias-only model, started at THETA0 instead of 0."""
    num_classes: int

    @nn.compact
    def __call__(self, x):
        b = self.param("b", lambda key, shape: jnp.asarray(THETA0, jnp.float32), (self.num_classes,))
        return jnp.broadcast_to(b, (x.shape[0], self.num_classes))


def _lse(b):
    return np.log(np.sum(np.exp(b - b.max()))) + b.max()


def _losses(theta):
    """l_i = f_i(θ) = logsumexp(θ) − θ_{y_i} (client i's examples all have label i)."""
    return np.array([_lse(theta) - theta[y] for y in LABELS])


def _deltas(theta, lr=LR):
    return np.stack([theta - _local(theta, i, lr) for i in range(3)])


def _b(res):
    return np.asarray(res.model["params"]["b"], np.float64)


def _run(tmp_path, name, **kw):
    cfg = _cfg(f"examples.{name}", lr=LR, out=str(tmp_path / name.split(":")[1]), **kw)  # registers the data
    fj.register_model("bias3_tilted", TiltedBias)
    return fj.run(dataclasses.replace(cfg, model="bias3_tilted"), progress=False)


def _fedavg_by_hand(rounds, glr=1.0):
    theta = THETA0.copy()
    for _ in range(rounds):
        theta = theta - glr * P @ _deltas(theta)
    return theta


def _project_simplex(v):
    """Euclidean projection onto the simplex by sorting (Duchi et al. 2008), float64."""
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - 1.0
    rho = np.nonzero(u - css / np.arange(1, len(v) + 1) > 0)[0][-1]
    return np.maximum(v - css[rho] / (rho + 1.0), 0.0)


# ---- AFL ------------------------------------------------------------------------------------------

def _afl_by_hand(rounds, glr, lam_lr):
    theta, lam = THETA0.copy(), np.full(3, 1 / 3)
    for _ in range(rounds):
        losses, d = _losses(theta), _deltas(theta)
        theta = theta - glr * (lam / lam.sum()) @ d          # the old λ (simultaneous update)
        lam = _project_simplex(lam + lam_lr * losses)
    return theta, lam


def test_afl_matches_two_rounds_computed_by_hand(tmp_path):
    res = _run(tmp_path, "afl:afl", server_lr=0.8, hp={"lam_lr": 0.5})
    theta, lam = _afl_by_hand(2, 0.8, 0.5)
    assert np.abs(lam - 1 / 3).max() > 0.05                # λ moved towards the worst client
    np.testing.assert_allclose(_b(res), theta, rtol=0, atol=2e-6)
    np.testing.assert_allclose(np.asarray(res.server_state), lam, rtol=0, atol=2e-6)
    np.testing.assert_allclose(res.metrics["lambda_max"].iloc[1:], [_afl_by_hand(1, 0.8, 0.5)[1].max(), lam.max()],
                               rtol=1e-5)
    assert np.abs(_fedavg_by_hand(2, 0.8) - theta).max() > 1e-2


def test_afl_with_few_clients_per_round_takes_no_step_where_the_sampled_lambdas_are_all_zero(tmp_path):
    """2 of 20 clients per round: after round 1 the projection leaves λ > 0 on the sampled clients only, so a round
    whose 2 clients both have λ = 0 has the weights 0/0; it takes no step (θ and the test loss unchanged), and
    the run does not turn non-finite (it diverged at every η of docs/fair.md's benchmark before)."""
    res = fj.run(fj.Config(algorithm="examples.afl:afl", dataset="synthetic", model="mlp", clients=20,
                           clients_per_round=2, rounds=6, eval_every=1, synthetic_train=400, synthetic_test=100),
                 progress=False)
    loss = res.metrics["test_loss"].to_numpy()
    assert res.status == "done" and np.isfinite(loss).all() and np.isfinite(res.metrics["lambda_max"][1:]).all()
    still = [t for t in range(2, 7) if loss[t] == loss[t - 1]]
    assert still and len(still) < 5, loss  # some rounds take no step, not all


def test_afl_projection_is_the_float64_one():
    from examples.afl import project_simplex
    rng = np.random.default_rng(0)
    for n in (2, 5, 30):
        v = rng.normal(size=n) * 0.5 + 1.0 / n
        np.testing.assert_allclose(np.asarray(project_simplex(jnp.asarray(v, jnp.float32))), _project_simplex(v),
                                   atol=2e-6)


# ---- FedMGDA+ -------------------------------------------------------------------------------------

def _box_min_norm(Q, lo, hi):
    """float64 argmin ½λᵀQλ on {lo ≤ λ ≤ hi, Σλ = 1}: the best feasible stationary point of every face."""
    lo, hi = np.clip(lo, 0, 1), np.clip(hi, 0, 1)
    best = (np.inf, None)
    for a in itertools.product(range(3), repeat=len(lo)):
        a = np.array(a)
        x = np.where(a == 0, lo, np.where(a == 1, hi, 0.0))
        idx = np.flatnonzero(a == 2)
        if len(idx):
            k = len(idx)
            kkt = np.block([[Q[np.ix_(idx, idx)], -np.ones((k, 1))], [np.ones((1, k)), np.zeros((1, 1))]])
            rhs = np.r_[-(Q @ x)[idx], 1.0 - x.sum()]
            sol = np.linalg.lstsq(kkt, rhs, rcond=None)[0]
            if np.abs(kkt @ sol - rhs).max() > 1e-9:
                continue
            x[idx] = sol[:k]
        if abs(x.sum() - 1) > 1e-9 or np.any(x < lo - 1e-12) or np.any(x > hi + 1e-12):
            continue
        if 0.5 * x @ Q @ x < best[0]:
            best = (0.5 * x @ Q @ x, x)
    return best[1]


def _fedmgda_by_hand(rounds, glr, eps):
    theta, lams = THETA0.copy(), []
    for _ in range(rounds):
        d = _deltas(theta)
        g = d / np.linalg.norm(d, axis=1, keepdims=True)
        lam = _box_min_norm(g @ g.T, P - eps, P + eps)
        theta = theta - glr * lam @ g
        lams.append(lam)
    return theta, lams


@pytest.mark.parametrize("eps", [0.1, 1.0])
def test_fedmgda_matches_two_rounds_computed_by_hand(tmp_path, eps):
    res = _run(tmp_path, "fedmgda:fedmgda", server_lr=0.3, hp={"eps": eps})
    theta, lams = _fedmgda_by_hand(2, 0.3, eps)
    np.testing.assert_allclose(_b(res), theta, rtol=0, atol=2e-6)
    shift = [np.abs(lam - P).max() for lam in lams]
    np.testing.assert_allclose(res.metrics["lambda_shift"].iloc[1:], shift, atol=2e-6)
    if eps == 0.1:
        assert max(shift) == pytest.approx(0.1, abs=1e-9)  # the box binds
    else:
        assert max(shift) > 0.1                            # beyond it: the plain MGDA point


# ---- TERM -----------------------------------------------------------------------------------------

def _term_by_hand(rounds, glr, tilt):
    theta = THETA0.copy()
    for _ in range(rounds):
        w = np.exp(tilt * _losses(theta))
        theta = theta - glr * (w / w.sum()) @ _deltas(theta)
    return theta


@pytest.mark.parametrize("tilt", [2.0, -1.0])
def test_term_matches_two_rounds_computed_by_hand(tmp_path, tilt):
    res = _run(tmp_path, "term:term", server_lr=0.8, hp={"tilt": tilt})
    theta = _term_by_hand(2, 0.8, tilt)
    np.testing.assert_allclose(_b(res), theta, rtol=0, atol=2e-6)
    assert np.abs(_term_by_hand(2, 0.8, 0.0) - theta).max() > 1e-2


# ---- FedFV ----------------------------------------------------------------------------------------

def _fv_project(grads, losses, alpha):
    """Wang et al.'s projections (no history), looped as FLGo's fedfv does."""
    m = len(grads)
    order = sorted(range(m), key=lambda i: (losses[i], i))
    keep = order[int(np.ceil((m - 1) * (1 - alpha))):] if alpha > 0 else []
    out = [g.copy() for g in grads]
    for i in range(m):
        if i in keep:
            continue
        for j in order:
            if j != i and out[i] @ grads[j] < 0:
                out[i] = out[i] - (out[i] @ grads[j]) / (grads[j] @ grads[j]) * grads[j]
    return np.asarray(out)


def _fedfv_by_hand(rounds, glr, alpha):
    """Wang et al.'s Algorithm 1 without history, as FLGo's fedfv loops over the clients."""
    theta = THETA0.copy()
    for _ in range(rounds):
        grads, losses = _deltas(theta), _losses(theta)
        out = _fv_project(grads, losses, alpha)
        g = np.mean(out, axis=0)
        g = g / np.linalg.norm(g) * np.linalg.norm(np.mean(grads, axis=0))
        theta = theta - glr * g
    return theta


@pytest.mark.parametrize("alpha", [0.1, 0.0, 0.6])
def test_fedfv_matches_two_rounds_computed_by_hand(tmp_path, alpha):
    res = _run(tmp_path, "fedfv:fedfv", server_lr=0.8, hp={"alpha": alpha})
    theta = _fedfv_by_hand(2, 0.8, alpha)
    np.testing.assert_allclose(_b(res), theta, rtol=0, atol=2e-6)
    plain = THETA0.copy()                                  # the projections matter here: not the plain mean
    for _ in range(2):
        plain = plain - 0.8 * np.mean(_deltas(plain), axis=0)
    assert np.abs(plain - theta).max() > 1e-2


def test_fedfv_keeps_alpha_and_projects_the_others():
    from examples.fedfv import project_conflicts
    # Here the 3 clients of the bias problem conflict pairwise every round; these 4 do not all conflict.
    G = np.array([[1.0, 0.0], [-1.0, 1.0], [0.0, 1.0], [-1.0, -0.5]])
    losses = np.array([0.3, 0.1, 0.2, 0.05])               # ascending: clients 3, 1, 2, 0
    out = np.asarray(project_conflicts(jnp.asarray(G, jnp.float32), jnp.asarray(losses, jnp.float32), 0.3))
    np.testing.assert_allclose(out[0], G[0], atol=1e-7)    # the highest loss keeps its update (⌈3·0.7⌉ = 3)
    np.testing.assert_allclose(out, _fv_project(G, losses, 0.3), atol=1e-6)
    assert np.abs(out[2] - G[2]).max() > 0.1               # client 2: off client 3 only (1 does not conflict)


# ---- FedAvgM --------------------------------------------------------------------------------------

def _fedavgm_by_hand(rounds, glr, beta):
    theta, v = THETA0.copy(), np.zeros(3)
    for _ in range(rounds):
        v = beta * v + P @ _deltas(theta)
        theta = theta - glr * v
    return theta, v


def test_fedavgm_matches_two_rounds_computed_by_hand(tmp_path):
    res = _run(tmp_path, "fedavgm:fedavgm", server_lr=0.7, hp={"beta": 0.8})
    theta, v = _fedavgm_by_hand(2, 0.7, 0.8)
    np.testing.assert_allclose(_b(res), theta, rtol=0, atol=2e-6)
    chex.assert_trees_all_close(res.server_state, {"b": v}, atol=2e-6)
    assert np.abs(_fedavg_by_hand(2, 0.7) - theta).max() > 1e-2


# ---- DP-FedAvg with adaptive clipping -------------------------------------------------------------

def _dp_by_hand(rounds, glr, clip0, quantile, clip_lr):
    theta, clip, clips, fracs = THETA0.copy(), clip0, [], []
    for _ in range(rounds):
        d = _deltas(theta)
        norms = np.linalg.norm(d, axis=1)
        clipped = d * np.minimum(1.0, clip / norms)[:, None]
        theta = theta - glr * clipped.sum(0) / 3
        frac = np.mean(norms <= clip)
        clips.append(clip)
        fracs.append(frac)
        clip = clip * np.exp(-clip_lr * (frac - quantile))
    return theta, clip, clips, fracs


def test_dp_fedavg_without_noise_matches_two_rounds_computed_by_hand(tmp_path):
    own = {"clip0": 0.6, "quantile": 0.5, "clip_lr": 0.4, "noise": 0.0, "bit_noise": 0.0}
    res = _run(tmp_path, "dp_fedavg:dp_fedavg", server_lr=0.9, hp=own)
    theta, clip, clips, fracs = _dp_by_hand(2, 0.9, 0.6, 0.5, 0.4)
    assert 0 < fracs[0] < 1                               # some clients clipped, some not
    np.testing.assert_allclose(_b(res), theta, rtol=0, atol=2e-6)
    np.testing.assert_allclose(float(res.server_state) * 0.6, clip, rtol=1e-6)
    np.testing.assert_allclose(res.metrics["clip"].iloc[1:], clips, rtol=1e-6)
    np.testing.assert_allclose(res.metrics["unclipped"].iloc[1:], fracs, atol=1e-7)


def _synthetic(**kw):
    base = dict(dataset="synthetic", model="mlp", clients=6, clients_per_round=3, eval_every=1,
                synthetic_train=240, synthetic_test=60, batch_size=20, rounds=1)
    return fj.Config(**{**base, **kw})


def test_dp_fedavg_server_noise_has_its_std_and_follows_the_seed():
    # The server's Gaussian noise: (θ_noised − θ_clean) · m / η_g = z C ξ, ξ ~ N(0, I) over all the MLP's
    # weights (the clients' training is the same: the noise comes from the server's own key).
    hp = {"clip0": 0.05, "noise": 2.0, "bit_noise": 0.0}
    alg = "examples.dp_fedavg:dp_fedavg"
    clean = fj.run(_synthetic(algorithm=alg, hp={**hp, "noise": 0.0}, server_lr=0.5), progress=False)
    noised = fj.run(_synthetic(algorithm=alg, hp=hp, server_lr=0.5), progress=False)
    xi = np.concatenate([np.ravel(a) - np.ravel(b) for a, b in
                         zip(jax_leaves(noised.model["params"]), jax_leaves(clean.model["params"]))]) * 3 / 0.5
    xi = xi / (2.0 * 0.05)
    assert xi.size > 10_000
    assert abs(np.std(xi) - 1.0) < 0.03 and abs(np.mean(xi)) < 0.03
    other = fj.run(_synthetic(algorithm=alg, hp=hp, server_lr=0.5, seed=1), progress=False)
    other_clean = fj.run(_synthetic(algorithm=alg, hp={**hp, "noise": 0.0}, server_lr=0.5, seed=1), progress=False)
    xi1 = np.concatenate([np.ravel(a) - np.ravel(b) for a, b in
                          zip(jax_leaves(other.model["params"]), jax_leaves(other_clean.model["params"]))])
    assert abs(np.corrcoef(xi, xi1)[0, 1]) < 0.05         # another seed: other noise


def jax_leaves(tree):
    import jax
    return [np.asarray(x, np.float64) for x in jax.tree_util.tree_leaves(tree)]


def test_dp_fedavg_privacy_record_claims_nothing_for_its_own_noise():
    # Its own noise is not a package mechanism: no record, no guarantee; under --ldp the record is the
    # LDP mechanism's alone (its clipped upload and bit are declared functions of w̃_i and public values).
    alg = "examples.dp_fedavg:dp_fedavg"
    assert fj.Config(algorithm=alg).privacy == {}
    p = fj.Config(algorithm=alg, ldp="adaptive").privacy
    assert p["mechanism"] == "adaptive" and p["guarantee"] == "holds" and "server" not in p["why"]


# ---- every example from the CLI, resumed exactly --------------------------------------------------

@pytest.mark.parametrize("name", ["afl", "fedmgda", "term", "fedfv", "fedavgm", "dp_fedavg"])
def test_example_runs_by_the_cli_and_resumes_exactly(tmp_path, name):
    """One round, then --resume for the second (the server state and, for DP-FedAvg, the server's noise
    key come back): the same model and metrics as two rounds in one go."""
    cli_resume_equals_one_go(tmp_path, f"examples.{name}:{name}")
