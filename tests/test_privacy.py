"""Tests of fedalf_jax.sim.privacy: exact output sets, probabilities, unbiasedness, variance, per-tensor
statistics, independence of keys, the Gaussian mechanism, jit/vmap with traced hyper-parameters
and configuration checks.

Statistical checks use fixed seeds and explicit Z-sigma bounds (Z = 6), so a correct mechanism
fails them with probability well under 1e-6 per assertion, while a wrong probability/scale
(typically off by several percent or more) fails them outright.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedalf_jax.experiment.guarantee import validate_privacy
from fedalf_jax.sim import privacy as P

Z = 6.0
N_BIG = 200_000  # one shared tensor size, so the jitted mechanisms below compile once per tree shape

# jitted once per tree structure/shape; epsilon is always passed as a traced float32 scalar
AD = jax.jit(P.adaptive_ldp)
LF = jax.jit(P.ldp_fl)
JIT = {"adaptive": AD, "ldp_fl": LF}
MANY = {name: jax.jit(jax.vmap(fn, in_axes=(0, None, None)))
        for name, fn in (("adaptive", P.adaptive_ldp), ("ldp_fl", P.ldp_fl))}
GD = jax.jit(P.gaussian_dp)


def f32(x):
    return jnp.float32(x)


def np_stats(w):
    """Reference centre, radius, offset in float64."""
    w = np.asarray(w, np.float64)
    c = (w.max() + w.min()) / 2
    r = (w.max() - w.min()) / 2
    return c, r, w - c


def np_k(eps):
    return (math.exp(eps) + 1) / (math.exp(eps) - 1)


def ldp_fl_p_plus(w, c, r, eps):
    """LDP-FL's probability of c + rk, written exactly as in Sun et al. / docs/algorithms.md §4."""
    e = math.exp(eps)
    return ((w - c) * (e - 1) + r * (e + 1)) / (2 * r * (e + 1))


def bernoulli_kurtosis(p):
    q = 1 - p
    return (1 - 3 * p * q) / (p * q)


def uniform_tensor(seed, shape, lo=-1.0, hi=1.0):
    rng = np.random.default_rng(seed)
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


# ------------------------------------------------------------------------------------------
# exact output sets
# ------------------------------------------------------------------------------------------


def test_adaptive_takes_exactly_c_plus_minus_k_delta():
    eps = 1.3
    w = uniform_tensor(0, (N_BIG,), -0.7, 0.4)
    out = np.asarray(AD(jax.random.PRNGKey(1), jnp.asarray(w), f32(eps)), np.float64)
    c, r, d = np_stats(w)
    k = np_k(eps)
    hi, lo = c + k * d, c - k * d
    tol = 1e-5 * (abs(c) + k * r)
    is_hi = np.abs(out - hi) <= tol
    is_lo = np.abs(out - lo) <= tol
    assert np.all(is_hi | is_lo)
    # non-vacuous: both branches occur, and the two candidates are distinguishable for most weights
    assert is_hi.sum() > 0 and is_lo.sum() > 0
    assert np.mean(np.abs(hi - lo) > 10 * tol) > 0.95
    assert AD(jax.random.PRNGKey(1), jnp.asarray(w), f32(eps)).dtype == jnp.float32


def test_ldp_fl_takes_exactly_c_plus_minus_rk():
    eps = 0.8
    w = uniform_tensor(2, (N_BIG,), -2.0, 5.0)
    out = np.asarray(LF(jax.random.PRNGKey(3), jnp.asarray(w), f32(eps)), np.float64)
    c, r, _ = np_stats(w)
    k = np_k(eps)
    tol = 1e-5 * (abs(c) + k * r)
    is_hi = np.abs(out - (c + r * k)) <= tol
    is_lo = np.abs(out - (c - r * k)) <= tol
    assert np.all(is_hi | is_lo)
    assert is_hi.sum() > 0 and is_lo.sum() > 0


# ------------------------------------------------------------------------------------------
# probabilities
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_adaptive_keeps_sign_with_prob_e_eps_over_1_plus_e_eps(eps):
    w = uniform_tensor(4, (N_BIG,))
    out = np.asarray(AD(jax.random.PRNGKey(5), jnp.asarray(w), f32(eps)), np.float64)
    c, _, d = np_stats(w)
    nz = np.abs(d) > 1e-4
    kept = np.sign(out[nz] - c) == np.sign(d[nz])
    p = math.exp(eps) / (1 + math.exp(eps))
    m = kept.size
    assert abs(kept.mean() - p) <= Z * math.sqrt(p * (1 - p) / m), (kept.mean(), p)


@pytest.mark.parametrize("eps", [1.0, 2.0])
def test_ldp_fl_probability_formula_at_several_positions(eps):
    c0, r0 = 0.3, 2.0
    positions = np.array([-1.0, -0.8, -0.6, 0.0, 0.25, 0.5, 0.9, 1.0])  # δ/r, both extremes present
    n = N_BIG // len(positions)
    w = (c0 + r0 * np.repeat(positions, n)).astype(np.float32)
    out = np.asarray(LF(jax.random.PRNGKey(6), jnp.asarray(w), f32(eps)), np.float64)
    c, r, _ = np_stats(w)
    plus = (out > c).reshape(len(positions), n)
    for j, pos in enumerate(positions):
        p = ldp_fl_p_plus(c + r * pos, c, r, eps)
        freq = plus[j].mean()
        assert abs(freq - p) <= Z * math.sqrt(p * (1 - p) / n), (pos, freq, p)


# ------------------------------------------------------------------------------------------
# unbiasedness and variance
# ------------------------------------------------------------------------------------------

DRAWS = 20_000


def _many_draws(name, w, eps, seed, draws=DRAWS):
    keys = jax.random.split(jax.random.PRNGKey(seed), draws)
    return np.asarray(MANY[name](keys, jnp.asarray(w), f32(eps)), np.float64)


def _test_weights():
    return np.array([-1.5, -1.2, -0.3, 0.0, 0.2, 0.5, 0.9, 1.1, 1.5, 0.75], np.float32)


@pytest.mark.parametrize("eps", [1.0, 2.0])
def test_adaptive_unbiased_with_variance_delta2_k2_minus_1(eps):
    w = _test_weights()
    out = _many_draws("adaptive", w, eps, 7)
    c, r, d = np_stats(w)
    k = np_k(eps)
    var = d**2 * (k**2 - 1)
    mean_tol = Z * np.sqrt(var / DRAWS) + 1e-5 * (abs(c) + k * r)
    assert np.all(np.abs(out.mean(0) - w.astype(np.float64)) <= mean_tol)
    p = math.exp(eps) / (1 + math.exp(eps))
    rel = Z * math.sqrt((bernoulli_kurtosis(p) - 1) / DRAWS) + Z**2 / DRAWS
    nz = np.abs(d) > 1e-3
    s2 = out.var(0, ddof=1)
    assert np.all(np.abs(s2[nz] / var[nz] - 1) <= rel), (s2, var)


@pytest.mark.parametrize("eps", [1.0, 2.0])
def test_ldp_fl_unbiased_with_variance_r2k2_minus_delta2(eps):
    w = _test_weights()
    out = _many_draws("ldp_fl", w, eps, 8)
    c, r, d = np_stats(w)
    k = np_k(eps)
    var = r**2 * k**2 - d**2
    mean_tol = Z * np.sqrt(var / DRAWS) + 1e-5 * (abs(c) + k * r)
    assert np.all(np.abs(out.mean(0) - w.astype(np.float64)) <= mean_tol)
    p = ldp_fl_p_plus(w.astype(np.float64), c, r, eps)
    # sd of the sample variance ≈ σ²·sqrt((kurtosis − 1)/n), plus the O(Z²/n) term from the
    # estimated mean (which is all that is left for a symmetric two-point law, kurtosis 1)
    rel = Z * np.sqrt((bernoulli_kurtosis(p) - 1) / DRAWS) + Z**2 / DRAWS
    s2 = out.var(0, ddof=1)
    assert np.all(np.abs(s2 / var - 1) <= rel)
    # the adaptive mechanism's variance is never above LDP-FL's (equal at |δ| = r)
    assert np.all(d**2 * (k**2 - 1) <= var + 1e-12)


# ------------------------------------------------------------------------------------------
# per-tensor centre and radius
# ------------------------------------------------------------------------------------------


def _check_two_values(out, w, eps, c=None, r=None):
    w64 = np.asarray(w, np.float64)
    if c is None:
        c, r, _ = np_stats(w)
    d = w64 - c
    k = np_k(eps)
    tol = 1e-5 * (abs(c) + k * r) + 1e-12
    out = np.asarray(out, np.float64)
    return np.all(np.minimum(np.abs(out - (c + k * d)), np.abs(out - (c - k * d))) <= tol)


def test_each_leaf_uses_its_own_centre_and_radius():
    eps = 1.0
    a = uniform_tensor(9, (20, 10), -100.0, 300.0)
    b = uniform_tensor(10, (7,), 1e-3, 2e-3)
    params = {"a": jnp.asarray(a), "b": jnp.asarray(b)}
    out = AD(jax.random.PRNGKey(11), params, f32(eps))
    assert _check_two_values(out["a"], a, eps)
    assert _check_two_values(out["b"], b, eps)
    cb, rb, _ = np_stats(b)
    assert np.all(np.abs(np.asarray(out["b"], np.float64) - cb) <= np_k(eps) * rb * (1 + 1e-5))
    # LDP-FL: each leaf's outputs are its own c ± rk
    out2 = LF(jax.random.PRNGKey(12), params, f32(eps))
    for name, x in (("a", a), ("b", b)):
        c, r, _ = np_stats(x)
        vals = np.asarray(out2[name], np.float64)
        tol = 1e-5 * (abs(c) + np_k(eps) * r)
        assert np.all(np.minimum(np.abs(vals - (c + r * np_k(eps))),
                                 np.abs(vals - (c - r * np_k(eps)))) <= tol), name


def test_layer_of_groups_leaves_into_one_centre_and_radius():
    eps = 1.0
    a = uniform_tensor(13, (8, 4), -3.0, 1.0)
    b = uniform_tensor(14, (4,), 0.5, 2.0)
    params = {"a": jnp.asarray(a), "b": jnp.asarray(b)}
    grouped = jax.jit(lambda k, p, e: P.adaptive_ldp(k, p, e, layer_of={"a": 0, "b": 0}))
    out = grouped(jax.random.PRNGKey(15), params, f32(eps))
    c, r, _ = np_stats(np.concatenate([a.ravel(), b]))
    assert _check_two_values(out["a"], a, eps, c, r)
    assert _check_two_values(out["b"], b, eps, c, r)
    assert not _check_two_values(out["b"], b, eps)  # b's own (c, r) would differ


# ------------------------------------------------------------------------------------------
# independence of keys (across clients and across leaves)
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["adaptive", "ldp_fl"])
def test_clients_with_split_keys_are_independent(name):
    eps, n_clients, d = 1.0, 64, 2000
    w = uniform_tensor(16, (d,))
    out = _many_draws(name, w, eps, 17, draws=n_clients)  # vmap over jax.random.split keys
    c, r, dd = np_stats(w)
    if name == "adaptive":
        ind = (np.sign(out - c) == np.sign(dd)).astype(np.float64)
        p = np.full(d, math.exp(eps) / (1 + math.exp(eps)))
    else:
        ind = (out > c).astype(np.float64)
        p = ldp_fl_p_plus(w.astype(np.float64), c, r, eps)
    assert len({row.tobytes() for row in out}) == n_clients  # all clients differ
    resid = ind - p
    norm = np.sqrt((resid**2).sum(1))
    corr = (resid @ resid.T) / np.outer(norm, norm)
    off = corr[~np.eye(n_clients, dtype=bool)]
    assert np.max(np.abs(off)) <= Z / math.sqrt(d), np.max(np.abs(off))
    # and the sign agreement between clients matches independence: p² + (1−p)² on average
    agree = np.mean([(ind[i] == ind[j]).mean() for i in range(n_clients) for j in range(i)])
    expect = np.mean(p**2 + (1 - p) ** 2)
    assert abs(agree - expect) <= Z * 0.5 / math.sqrt(d), (agree, expect)


def test_leaves_get_independent_keys():
    eps, d = 1.0, 20_000
    w = jnp.asarray(uniform_tensor(18, (d,)))
    out = AD(jax.random.PRNGKey(19), {"a": w, "b": w}, f32(eps))
    c, _, dd = np_stats(w)
    p = math.exp(eps) / (1 + math.exp(eps))
    ka = (np.sign(np.asarray(out["a"], np.float64) - c) == np.sign(dd)) - p
    kb = (np.sign(np.asarray(out["b"], np.float64) - c) == np.sign(dd)) - p
    corr = (ka @ kb) / math.sqrt((ka @ ka) * (kb @ kb))
    assert abs(corr) <= Z / math.sqrt(d)


def test_same_key_same_output_different_key_different():
    w = jnp.asarray(uniform_tensor(20, (N_BIG,)))
    for fn in (AD, LF):
        a = fn(jax.random.PRNGKey(0), w, f32(1.0))
        b = fn(jax.random.PRNGKey(0), w, f32(1.0))
        cc = fn(jax.random.PRNGKey(1), w, f32(1.0))
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        assert not np.array_equal(np.asarray(a), np.asarray(cc))


# ------------------------------------------------------------------------------------------
# Gaussian mechanism
# ------------------------------------------------------------------------------------------


def test_clip_global_norm_is_exact_over_all_leaves():
    u = {"x": jnp.array([6.0, 0.0]), "y": jnp.array([[0.0, 8.0]])}  # global norm 10
    cl = P.clip_global_norm(u, 1.0)
    flat = np.concatenate([np.asarray(cl["x"]).ravel(), np.asarray(cl["y"]).ravel()])
    np.testing.assert_allclose(np.linalg.norm(flat), 1.0, rtol=1e-6)
    np.testing.assert_allclose(flat, [0.6, 0.0, 0.0, 0.8], rtol=1e-6)
    small = {"x": jnp.array([0.3, 0.0]), "y": jnp.array([[0.0, 0.4]])}  # norm 0.5 < 1: unchanged
    cs = P.clip_global_norm(small, 1.0)
    np.testing.assert_allclose(np.asarray(cs["x"]), [0.3, 0.0], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(cs["y"]), [[0.0, 0.4]], rtol=1e-6)
    z = P.clip_global_norm({"x": jnp.zeros(3)}, 1.0)
    assert np.all(np.asarray(z["x"]) == 0)


def test_gaussian_dp_clips_before_noise():
    u = {"x": jnp.array([6.0, 0.0]), "y": jnp.array([[0.0, 8.0]])}
    out = GD(jax.random.PRNGKey(0), u, epsilon=f32(1e6), delta=f32(1e-5), clip=f32(1.0))  # σ ≈ 5e-6
    flat = np.concatenate([np.asarray(out["x"]).ravel(), np.asarray(out["y"]).ravel()])
    np.testing.assert_allclose(flat, [0.6, 0.0, 0.0, 0.8], atol=1e-4)


def test_gaussian_sigma_against_hand_value():
    # σ = C·sqrt(2 ln(1.25/δ))/ε; ln(1.25e5) = 11.736069016..., sqrt(23.472138) = 4.8448052...
    assert float(P.gaussian_sigma(0.5, 1e-5, 2.0)) == pytest.approx(19.379221050421556, rel=1e-6)
    assert float(P.gaussian_sigma(0.5, 1e-5, 2.0, neighbouring="replace")) == pytest.approx(
        2 * 19.379221050421556, rel=1e-6)
    jitted = jax.jit(P.gaussian_sigma)(jnp.float32(0.5), jnp.float32(1e-5), jnp.float32(2.0))
    assert float(jitted) == pytest.approx(19.379221050421556, rel=1e-5)
    with pytest.raises(ValueError, match="neighbouring"):
        P.gaussian_sigma(0.5, 1e-5, 1.0, neighbouring="swap")


def test_gaussian_noise_std_matches_sigma():
    n1, n2 = 120_000, 80_000
    u = {"a": jnp.zeros((n1,)), "b": jnp.zeros((400, n2 // 400))}
    eps, delta, clip = 0.5, 1e-5, 0.1
    out = GD(jax.random.PRNGKey(21), u, epsilon=f32(eps), delta=f32(delta), clip=f32(clip))
    sigma = clip * math.sqrt(2 * math.log(1.25 / delta)) / eps
    a = np.asarray(out["a"], np.float64)
    b = np.asarray(out["b"], np.float64).ravel()
    x = np.concatenate([a, b])
    n = x.size
    assert abs(x.mean()) <= Z * sigma / math.sqrt(n)
    assert abs(x.std() / sigma - 1) <= Z / math.sqrt(2 * n)
    m = min(a.size, b.size)
    corr = np.corrcoef(a[:m], b[:m])[0, 1]
    assert abs(corr) <= Z / math.sqrt(m)  # leaves get independent noise


# ------------------------------------------------------------------------------------------
# jit, traced epsilon, degenerate tensors
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fn", [P.adaptive_ldp, P.ldp_fl])
def test_jit_with_traced_epsilon_compiles_once(fn):
    w = uniform_tensor(22, (1000,))
    traces = []

    def f(key, params, eps):
        traces.append(1)
        return fn(key, params, eps)

    jf = jax.jit(f)
    for eps in (0.5, 2.0):
        out = np.asarray(jf(jax.random.PRNGKey(23), jnp.asarray(w), jnp.float32(eps)), np.float64)
        c, r, d = np_stats(w)
        k = np_k(eps)
        tol = 1e-5 * (abs(c) + k * r)
        if fn is P.adaptive_ldp:
            ok = np.minimum(np.abs(out - (c + k * d)), np.abs(out - (c - k * d))) <= tol
        else:
            ok = np.minimum(np.abs(out - (c + k * r)), np.abs(out - (c - k * r))) <= tol
        assert np.all(ok), eps
    assert len(traces) == 1
    # vmap over epsilon (a sweep axis)
    eps_v = jnp.array([0.5, 2.0], jnp.float32)
    outs = jax.jit(jax.vmap(lambda e: fn(jax.random.PRNGKey(24), jnp.asarray(w), e)))(eps_v)
    c, r, _ = np_stats(w)
    for j, eps in enumerate((0.5, 2.0)):
        spread = np.abs(np.asarray(outs[j], np.float64) - c).max()
        assert spread == pytest.approx(np_k(eps) * r, rel=1e-4)


def test_constant_tensor_and_scalar_give_no_nan():
    params = {"const": jnp.full((4, 5), 0.7, jnp.float32), "scalar": jnp.float32(3.0),
              "ints": jnp.arange(3), "empty": jnp.zeros((0,), jnp.float32)}
    for out in (LF(jax.random.PRNGKey(0), params, f32(2.0)), AD(jax.random.PRNGKey(0), params, f32(2.0))):
        for name in params:
            np.testing.assert_array_equal(np.asarray(out[name]), np.asarray(params[name]))
    g = GD(jax.random.PRNGKey(0), {"z": jnp.zeros(5)}, epsilon=f32(0.5), delta=f32(1e-5), clip=f32(1.0))
    assert np.all(np.isfinite(np.asarray(g["z"])))


def test_mechanism_lookup():
    assert P.mechanism("adaptive") is P.adaptive_ldp
    assert P.mechanism("ldp_fl") is P.ldp_fl
    p = {"w": jnp.arange(4.0)}
    assert P.mechanism("none")(jax.random.PRNGKey(0), p, 2.0) is p
    with pytest.raises(ValueError, match="laplace"):
        P.mechanism("laplace")


# ------------------------------------------------------------------------------------------
# configuration checks
# ------------------------------------------------------------------------------------------

GOOD = dict(ldp="none", dp="none", epsilon=2.0, delta=1e-5, clip=1.0, algorithm="fedalf")


@pytest.mark.parametrize(
    "changes, needle",
    [
        (dict(ldp="laplace"), "ldp='laplace'"),
        (dict(dp="laplace"), "dp='laplace'"),
        (dict(algorithm="fedsgd", ldp="adaptive"), "unknown algorithm 'fedsgd'; choose one of"),
        (dict(algorithm="nosuchmod:alg", ldp="adaptive"), "cannot import module 'nosuchmod'"),
        (dict(algorithm=["fedalf"], ldp="adaptive"), "algorithm must be a name"),
        (dict(ldp="adaptive", epsilon=0.0), "epsilon"),
        (dict(ldp="adaptive", epsilon=-1.0), "epsilon"),
        (dict(ldp="ldp_fl", epsilon=float("inf")), "epsilon"),
        (dict(ldp="ldp_fl", epsilon=float("nan")), "epsilon"),
        (dict(ldp="ldp_fl", epsilon=None), "epsilon"),
        (dict(ldp="adaptive", epsilon=np.array([1.0, 0.0])), "epsilon"),
        (dict(dp="gaussian", epsilon=0.0), "epsilon"),
        (dict(dp="gaussian", epsilon=0.5, delta=0.0), "delta"),
        (dict(dp="gaussian", epsilon=0.5, delta=1.0), "delta"),
        (dict(dp="gaussian", epsilon=0.5, delta=1.5), "delta"),
        (dict(dp="gaussian", epsilon=0.5, delta=None), "delta"),
        (dict(dp="gaussian", epsilon=0.5, clip=0.0), "clip"),
        (dict(dp="gaussian", epsilon=0.5, clip=-1.0), "clip"),
        (dict(dp="gaussian", epsilon=0.5, clip=float("inf")), "clip"),
        (dict(ldp="adaptive", dp="gaussian"), "both on"),
        (dict(ldp="adaptive", algorithm="fedlf"), "client_grad"),
        (dict(ldp="ldp_fl", algorithm="fedlf", client_grad="full"), "client_grad"),
        (dict(dp="gaussian", epsilon=0.5, algorithm="fedlf"), "client_grad"),
        (dict(algorithm="fedlf", client_grad="partial"), "client_grad='partial'"),
    ],
)
def test_validate_privacy_refuses(changes, needle):
    cfg = {**GOOD, **changes}
    with pytest.raises(ValueError) as err:
        validate_privacy(**cfg)
    msg = str(err.value)
    assert needle in msg
    assert "\n" not in msg


def test_validate_privacy_accepts_valid_configs():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for alg in ("fedavg", "fedprox", "qfedavg", "fedadmm", "fedalf"):
            for ldp in ("none", "adaptive", "ldp_fl"):
                validate_privacy(**{**GOOD, "algorithm": alg, "ldp": ldp})
            validate_privacy(**{**GOOD, "algorithm": alg, "dp": "gaussian", "epsilon": 0.5})
        validate_privacy(**{**GOOD, "algorithm": "fedlf", "ldp": "adaptive", "client_grad": "local"})
        validate_privacy(**{**GOOD, "algorithm": "fedlf"})  # no mechanism: fine with client_grad=full
        validate_privacy(ldp=None, dp=None, algorithm="fedlf")  # unused values may be omitted
        validate_privacy(**{**GOOD, "ldp": "adaptive", "epsilon": np.array([0.5, 2.0, 8.0])})


def test_gaussian_warns_only_where_the_classic_calibration_falls_short():
    # exact accounting: ε = 2 at δ = 1e-5 gives ε' = 1.61 (the guarantee holds, no warning);
    # ε = 10 gives ε' ≈ 10.4 > 10 (the calibration falls short: a warning)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        validate_privacy(**{**GOOD, "dp": "gaussian", "epsilon": 2.0})
    with pytest.warns(UserWarning, match="gives only epsilon=10.4"):
        validate_privacy(**{**GOOD, "dp": "gaussian", "epsilon": 10.0})


def test_gaussian_exact_epsilon_against_scipy():
    from scipy.stats import norm
    for eps, delta in ((2.0, 1e-5), (0.5, 1e-5), (1.0, 1e-6), (8.0, 1e-5)):
        s = math.sqrt(2 * math.log(1.25 / delta)) / eps  # σ/Δ₂ of the classic calibration
        exact = P.gaussian_epsilon(eps, delta)

        def d(e):  # Balle & Wang (2018), Theorem 8, with scipy's normal CDF
            return norm.cdf(0.5 / s - e * s) - math.exp(e) * norm.cdf(-0.5 / s - e * s)

        assert abs(d(exact) - delta) < 1e-3 * delta and d(0.99 * exact) > delta, (eps, delta)
    assert P.gaussian_epsilon(2.0, 1e-5) == pytest.approx(1.61, abs=0.005)


@pytest.mark.parametrize("call, needle", [
    (lambda p: P.adaptive_ldp(jax.random.PRNGKey(0), p, -1.0), "epsilon"),
    (lambda p: P.adaptive_ldp(jax.random.PRNGKey(0), p, 0.0), "epsilon"),
    (lambda p: P.ldp_fl(jax.random.PRNGKey(0), p, float("nan")), "epsilon"),
    (lambda p: P.ldp_fl(jax.random.PRNGKey(0), p, 1e-40), "subnormal"),
    (lambda p: P.adaptive_ldp(jax.random.PRNGKey(0), p, float("inf")), "epsilon"),
    (lambda p: P.gaussian_sigma(2.0, 1.25, 1.0), "delta"),
    (lambda p: P.gaussian_sigma(2.0, 1e-5, -1.0), "clip"),
    (lambda p: P.gaussian_dp(jax.random.PRNGKey(0), p, epsilon=2.0, delta=1e-5, clip=-1.0), "clip"),
    (lambda p: P.gaussian_dp(jax.random.PRNGKey(0), p, epsilon=2.0, delta=2.0, clip=1.0), "delta"),
    (lambda p: P.ldp_fl(jax.random.PRNGKey(0), {"w": jnp.array([-1.0, 0.3, jnp.nan, 0.8])}, 2.0), "NaN"),
    (lambda p: P.adaptive_ldp(jax.random.PRNGKey(0), {"w": jnp.array([-1.0, jnp.inf])}, 2.0), "NaN"),
])
def test_public_mechanisms_refuse_concrete_bad_values(call, needle):
    with pytest.raises(ValueError, match=needle):
        call({"w": jnp.array([-1.0, 0.3, 0.5, 0.8])})


def test_traced_non_finite_tensor_comes_out_all_nan():
    w = {"w": jnp.array([-1.0, 0.3, jnp.nan, 0.8]), "b": jnp.array([0.1, 0.2])}
    for fn in (P.ldp_fl, P.adaptive_ldp):
        out = jax.jit(fn)(jax.random.PRNGKey(1), w, 2.0)  # traced: no check, explicit NaN handling
        assert np.all(np.isnan(np.asarray(out["w"]))), fn.__name__  # never the input passed through
        assert np.all(np.isfinite(np.asarray(out["b"])))


def test_adaptive_warns_where_float32_releases_the_model_exactly():
    w = {"w": jnp.linspace(-1.0, 1.0, 1000)}
    with pytest.warns(UserWarning, match="released exactly"):
        out = P.adaptive_ldp(jax.random.PRNGKey(0), w, 17.0)
    np.testing.assert_allclose(np.asarray(out["w"]), np.asarray(w["w"]), rtol=1e-6, atol=1e-7)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        P.adaptive_ldp(jax.random.PRNGKey(0), w, 16.0)


# ---- issue 13 item 9: does the formal guarantee hold for this configuration? ----------------------

from fedalf_jax.experiment.config import Config, ConfigError  # noqa: E402
from fedalf_jax.experiment.guarantee import privacy_guarantee  # noqa: E402

# (options, holds, a phrase of `why`), written out by hand from docs/privacy.md ("The guarantee field")
# and sim/algorithms.py's uploads: FedAvg/FedProx/qFedAvg/FedLF-local upload w̃ (or (θ−w̃)/η_l);
# an ADMM upload with dual_from=local adds w − θ (increment) or λ/ρ (augmented); model keeps the dual
# on the client; dual_from=perturbed builds the dual from w̃.
GUARANTEE_TABLE = [
    (dict(algorithm="fedavg", ldp="adaptive", ldp_on="weights"), True, "sign of each weight"),
    (dict(algorithm="fedavg", ldp="adaptive"), True, "sign of each value of the update"),  # private default
    (dict(algorithm="fedavg", dp="gaussian"), True, "epsilon=1.61"),
    (dict(algorithm="fedavg", dp="gaussian", epsilon=10.0), True, "short of the nominal epsilon=10"),
    (dict(algorithm="fedprox", ldp="ldp_fl", ldp_on="weights"), True, "per weight given each tensor's centre and radius"),
    (dict(algorithm="qfedavg", dp="gaussian", neighbouring="replace"), True, "under replace"),
    (dict(algorithm="fedlf", client_grad="local", ldp="adaptive"), True, "(θ_t − w̃_i)/η_l"),
    (dict(algorithm="fedalf", ldp="adaptive", server_target="increment"), False, "increment upload"),
    # a private FedALF's defaults: the model upload, the dual from the local model, the noise on the update
    (dict(algorithm="fedalf", ldp="adaptive"), True, "stays on the client"),
    (dict(algorithm="fedalf", dp="gaussian", server_target="increment"), False, "(λ_i − λ_i⁻)/ρ = w_i − θ_t"),
    (dict(algorithm="fedalf", ldp="ldp_fl", history=False, server_target="increment"), False, "dual_from=local"),
    (dict(algorithm="fedalf", ldp="adaptive", server_target="augmented"), False, "augmented upload"),
    (dict(algorithm="fedalf", ldp="adaptive", dual_from="perturbed", server_target="increment"), True,
     "dual_from=perturbed"),
    (dict(algorithm="fedalf", dp="gaussian", dual_from="perturbed", server_target="augmented"), True,
     "augmented upload is a function"),
    (dict(algorithm="fedalf", ldp="adaptive", server_target="model"), True, "stays on the client"),
    (dict(algorithm="fedadmm", ldp="adaptive"), True, "model upload"),  # fedadmm's default target: model
    (dict(algorithm="fedadmm", dp="gaussian", server_target="increment"), False, "increment upload"),
    (dict(algorithm="fedadmm", ldp="ldp_fl", server_target="augmented", dual_from="perturbed"), True,
     "dual_from=perturbed"),
    (dict(algorithm="fedavg", ldp="adaptive", epsilon=17.0), False, "released exactly"),
    (dict(algorithm="fedalf", ldp="adaptive", dual_from="perturbed", epsilon=16.0, ldp_on="weights"), True,
     "sign of each weight"),
]


@pytest.mark.parametrize("options, holds, phrase", GUARANTEE_TABLE,
                         ids=["-".join(f"{v}" for v in o.values()) for o, _, _ in GUARANTEE_TABLE])
def test_privacy_guarantee_table(options, holds, phrase):
    cfg = Config(**options).validated()
    got, why = privacy_guarantee(cfg)
    assert got is holds and phrase in why, why
    assert "\n" not in why
    rec = cfg.privacy
    assert rec["guarantee"] == ("holds" if holds else "does not hold") and rec["why"] == why
    assert rec["dual_from"] == options.get("dual_from", "local")  # a private run's default too


def _unvalidated(**kw) -> Config:
    """A Config built without its validation (Config(...) refuses these), field by field."""
    cfg = object.__new__(Config)
    for f in dataclasses.fields(Config):
        object.__setattr__(cfg, f.name, kw.get(f.name, f.default))
    return cfg


def test_privacy_guarantee_of_unvalidated_and_non_private_configs():
    # refused by validation (Config(...) raises), but the decision still says why
    with pytest.raises(ValueError, match="client_grad"):
        Config(algorithm="fedlf", client_grad="full", ldp="adaptive")
    holds, why = privacy_guarantee(_unvalidated(algorithm="fedlf", client_grad="full", ldp="adaptive"))
    assert not holds and "gradient" in why
    holds, why = privacy_guarantee(_unvalidated(algorithm="fedavg", model="cnn_bn", dp="gaussian"))
    assert not holds and "batch-norm" in why
    assert privacy_guarantee(Config(algorithm="fedavg"))[0] is False
    for algorithm in ("fedavg", "fedalf", "fedadmm"):
        assert Config(algorithm=algorithm).validated().privacy == {}


def test_privacy_not_covered_lists_what_leaves_the_client_un_noised():
    fedavg = Config(algorithm="fedavg", dp="gaussian").validated().privacy["not_covered"]
    assert fedavg == ["the sample count n_i (the aggregation weight)"]
    fedalf = Config(algorithm="fedalf", ldp="adaptive", dual_from="perturbed").validated().privacy["not_covered"]
    assert fedalf == ["|δ| = |w − c| of every weight", "each tensor's centre c and radius r", "the loss l_i = f_i(θ_t)"]
    ldp_fl = Config(algorithm="fedadmm", ldp="ldp_fl").validated().privacy["not_covered"]
    assert ldp_fl == ["each tensor's centre c and radius r"]


def test_config_json_with_the_derived_privacy_key_reads_back(tmp_path):
    cfg = Config(algorithm="fedalf", ldp="adaptive", rounds=3).validated()
    d = {**cfg.to_dict(), "privacy": cfg.privacy}  # what config.json carries
    assert Config.from_dict(d) == cfg
    path = tmp_path / "config.json"
    import json
    path.write_text(json.dumps(d))
    assert Config.load(path) == cfg
    with pytest.raises(ConfigError, match="unknown config key"):
        Config.from_dict({**d, "privacy_guarantee": "holds"})


@pytest.mark.parametrize("epsilon, s, needle", [
    (-1.0, 1.0, "epsilon=-1.0"), (0.0, 1.0, "epsilon=0.0"), (float("nan"), 1.0, "epsilon=nan"),
    (float("inf"), 1.0, "epsilon=inf"), (1.0, 0.0, "sigma_over_sensitivity=0.0"),
    (1.0, -2.0, "sigma_over_sensitivity=-2.0"), (1.0, float("nan"), "sigma_over_sensitivity=nan"),
    (1.0, float("inf"), "sigma_over_sensitivity=inf"), ("two", 1.0, "must be numbers"),
])
def test_gaussian_delta_refuses_impossible_arguments(epsilon, s, needle):
    with pytest.raises(ValueError, match=needle) as e:
        P.gaussian_delta(epsilon, s)
    assert "\n" not in str(e.value) and ("e.g." in str(e.value))


def test_gaussian_delta_still_computes_valid_arguments():
    # hand value: s = 1, ε = 1: Φ(1/2 − 1) − e Φ(−1/2 − 1) = Φ(−0.5) − e·Φ(−1.5)
    phi = lambda x: 0.5 * math.erfc(-x / math.sqrt(2.0))  # noqa: E731
    assert P.gaussian_delta(1.0, 1.0) == pytest.approx(phi(-0.5) - math.e * phi(-1.5), rel=1e-12)


@pytest.mark.parametrize("name", ["adaptive", "ldp_fl", "gaussian"])
def test_jit_with_closed_over_weights_runs(name):
    w = jnp.linspace(-1.0, 1.0, 12)
    if name == "gaussian":
        fn = lambda k, p: P.gaussian_dp(k, p, epsilon=2.0, delta=1e-5, clip=1.0)  # noqa: E731
    else:
        fn = lambda k, p: P.mechanism(name)(k, p, 2.0)  # noqa: E731
    key = jax.random.PRNGKey(3)
    out = jax.jit(lambda k: fn(k, {"w": w}))(key)  # w is concrete but used inside the trace
    assert np.all(np.isfinite(np.asarray(out["w"])))
    np.testing.assert_allclose(np.asarray(out["w"]), np.asarray(fn(key, {"w": w})["w"]), rtol=1e-6, atol=1e-6)
    # the concrete check is kept: a closed-over non-finite tensor is still refused
    bad = w.at[3].set(jnp.nan)
    with pytest.raises(ValueError, match="NaN"):
        jax.jit(lambda k: fn(k, {"w": bad}))(key)
    # leaf by leaf: a traced leaf is skipped, the closed-over one beside it is still checked
    with pytest.raises(ValueError, match="NaN"):
        jax.jit(lambda k, v: fn(k, {"w": bad, "v": v}))(key, w)


def test_report_shows_whether_the_guarantee_holds(tmp_path):
    import json
    from pathlib import Path

    from test_report import make_run

    from fedalf_jax.reporting import report

    root = tmp_path / "runs"
    make_run(root, "local", final_acc=0.7, final_angle=5.0, algorithm="fedalf", ldp="adaptive", server_target="increment")
    make_run(root, "perturbed", final_acc=0.6, final_angle=6.0, algorithm="fedalf", ldp="adaptive",
             dual_from="perturbed", server_target="increment")
    make_run(root, "plain", final_acc=0.8, final_angle=4.0, algorithm="fedavg")
    # summary.json's record wins over the options (a DP-FedAvg run would compute "holds")
    make_run(root, "recorded", final_acc=0.5, final_angle=7.0, algorithm="fedavg", dp="gaussian")
    summary = json.loads((root / "recorded" / "summary.json").read_text())
    summary["privacy"] = {"mechanism": "gaussian", "guarantee": "does not hold", "why": "the recorded reason"}
    (root / "recorded" / "summary.json").write_text(json.dumps(summary))
    # without it in summary.json, config.json's record is read
    make_run(root, "from_config", final_acc=0.5, final_angle=7.0, algorithm="fedprox", ldp="ldp_fl")
    cfg = json.loads((root / "from_config" / "config.json").read_text())
    cfg["privacy"] = {"mechanism": "ldp_fl", "guarantee": "does not hold", "why": "the config's reason"}
    (root / "from_config" / "config.json").write_text(json.dumps(cfg))

    res = report([str(root)], str(tmp_path / "out"))
    by_alg = {r["algorithm"]: r["guarantee"] for r in res["rows"]}
    assert by_alg == {"FedAvg": "", "DP-FedAvg": "does not hold", "LDP-FL-FedProx": "does not hold",
                      "LDP-FedALF (dual_from=local)": "does not hold",
                      "LDP-FedALF (dual_from=perturbed)": "holds"}
    md = Path(res["markdown"]).read_text()
    assert "0.700 (5.0°)<br>η=0.05 (1 seed)<br>guarantee: does not hold |" in md
    assert "0.600 (6.0°)<br>η=0.05 (1 seed)<br>guarantee: holds |" in md
    assert "0.800 (4.0°)<br>η=0.05 (1 seed) |" in md  # no mechanism: no guarantee note
    assert "- DP-FedAvg: **does not hold**: the recorded reason" in md
    assert "- LDP-FL-FedProx: **does not hold**: the config's reason" in md
    assert "- LDP-FedALF (dual_from=local): **does not hold**: with dual_from=local the increment upload" in md
    with open(res["csv"]) as f:
        header = f.readline().strip().split(",")
    assert header[-3:] == ["guarantee", "eps_spent", "eps_spent_delta"]
