"""Tests of fedalf_jax.sim.qp against an independent float64 reference (SLSQP + exact KKT polish)."""

import subprocess
import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedalf_jax.sim.qp import solve_simplex_qp, solve_simplex_qp_info
from reference import min_norm_simplex_qp as ref_simplex_qp

METHODS = ["active", "osqp", "pgd"]


def make_q(kind, n, rng):
  if kind == "well":
    v = rng.normal(size=(n, n + 5))
    return v @ v.T
  if kind == "ill":  # condition number 1e6
    u, _ = np.linalg.qr(rng.normal(size=(n, n)))
    return (u * np.logspace(0, -6, n)) @ u.T
  if kind.startswith("rank"):
    v = rng.normal(size=(n, int(kind[4:])))
    return v @ v.T
  if kind == "vertex":  # row 0 is short and every other row has a large component along it
    v = rng.normal(size=(n, n + 5))
    v[0] *= 0.05
    v[1:] += 3.0 * v[0]
    return v @ v.T
  if kind == "biased":  # raw Gram of a realistic scale (entries ~450), rows positively correlated
    v = rng.normal(size=(n, 50)) + 2.0
    return 450.0 * v @ v.T / np.mean(np.sum(v * v, 1))
  raise ValueError(kind)


def check(Q, lam, mask=None):
  """Feasibility, and objective within 1e-4 (relative) of the float64 reference."""
  Q = np.asarray(Q, np.float64)
  lam = np.asarray(lam, np.float64)
  assert np.all(np.isfinite(lam))
  assert lam.min() >= -1e-6
  assert abs(lam.sum() - 1.0) < 1e-5
  if mask is not None:
    assert np.all(lam[~mask] == 0)
    Q = Q[np.ix_(mask, mask)]
    lam = lam[mask]
  ref = ref_simplex_qp(Q)
  f, f_ref = 0.5 * lam @ Q @ lam, 0.5 * ref @ Q @ ref
  scale = max(np.mean(np.diag(Q)), 0.0)
  assert f <= f_ref + 1e-4 * abs(f_ref) + 1e-7 * scale, (f, f_ref)
  return ref


SIZES = [2, 3, 11, 40]
KINDS = ["well", "ill", "rank1", "rank2", "rank3", "vertex", "biased"]
PAD = 40


def vertex_q(rng):
  """Row 0 is the shortest and every row has a larger dot with it than its norm² → λ = e_0."""
  v = rng.normal(size=(6, 20))
  v[0] *= 0.05
  v[1:] += 3.0 * v[0] / np.linalg.norm(v[0]) ** 2 * (np.abs(v[1:] @ v[0])[:, None] + 1.0)
  q = v @ v.T
  assert np.all(q[0] >= q[0, 0])
  return q


@pytest.fixture(scope="module")
def problems():
  """Problems of sizes 2..40 (+ special cases) zero-padded to 40 with masks, and a batch at 111."""
  rng = np.random.default_rng(0)
  small = [make_q(k, n, rng) for n in SIZES for k in KINDS]
  small += [np.zeros((11, 11)), np.zeros((2, 2)), np.ones((1, 1)),
            make_q("well", 5, rng) * 1e-30, vertex_q(rng)]
  Qp = np.zeros((len(small) + 2, PAD, PAD))
  mp = np.zeros((len(small) + 2, PAD), bool)
  for i, q in enumerate(small):
    n = q.shape[0]
    Qp[i, :n, :n] = q
    mp[i, :n] = True
  # Masked rows inside (with NaN that must be ignored), and a problem with no valid coordinate.
  q = make_q("well", PAD, rng)
  keep = rng.random(PAD) < 0.7
  Qp[-2] = np.where(keep[:, None] & keep[None, :], q, np.nan)
  mp[-2] = keep
  Qp[-1] = make_q("well", PAD, rng)
  large = np.stack([make_q(k, 111, rng) for k in KINDS])
  return Qp, mp, large


@pytest.mark.parametrize("method", METHODS)
def test_against_reference(problems, method):
  Qp, mp, large = problems
  lam, info = solve_simplex_qp_info(jnp.asarray(Qp, jnp.float32), jnp.asarray(mp), method=method)
  lam = np.asarray(lam)
  assert lam.shape == mp.shape and info["iters"].shape == mp.shape[:1]
  assert np.all(np.asarray(info["residual"]) < 1e-4)
  for q, l, k in zip(Qp[:-1], lam[:-1], mp[:-1]):
    check(np.where(np.isnan(q), 0.0, q), l, k)
  assert np.all(lam[-1] == 0)  # no valid coordinate
  np.testing.assert_allclose(lam[-3, :6], np.eye(6)[0], atol=1e-5)  # vertex answer
  np.testing.assert_allclose(lam[-6, :2], [0.5, 0.5], atol=1e-6)  # Q = 0 → uniform
  lam, info = solve_simplex_qp_info(jnp.asarray(large, jnp.float32), method=method)
  assert np.all(np.asarray(info["residual"]) < 1e-4)
  for q, l in zip(large, np.asarray(lam)):
    check(q, l)


@pytest.mark.parametrize("method", METHODS)
def test_batching_jit_vmap(problems, method):
  Qp, mp, _ = problems  # the same flat batch as test_against_reference (compile cache)
  B = len(Qp)
  assert B % 5 == 0
  Qj, mj = jnp.asarray(Qp, jnp.float32), jnp.asarray(mp)
  lam1 = np.asarray(solve_simplex_qp(Qj, mj, method=method))
  # Two leading axes: the same answers.
  lam2 = np.asarray(solve_simplex_qp(Qj.reshape(5, B // 5, PAD, PAD), mj.reshape(5, B // 5, PAD),
                                     method=method))
  assert lam2.shape == (5, B // 5, PAD)
  np.testing.assert_allclose(lam2.reshape(B, PAD), lam1, atol=1e-6)
  # Under jit + vmap (here each vmapped call sees a single [n, n] problem).
  rng = np.random.default_rng(4)
  n = 7
  Qs = np.stack([make_q(k, n, rng) for k in ["well", "rank1", "rank2", "ill", "vertex"]])
  with warnings.catch_warnings(record=True) as caught:  # no warning when tracing / calling
    warnings.simplefilter("always")
    lam_vmap = jax.jit(jax.vmap(lambda q: solve_simplex_qp(q, method=method)))(
        jnp.asarray(Qs, jnp.float32))
  assert not caught, [str(w.message) for w in caught]
  for q, l in zip(Qs, np.asarray(lam_vmap)):
    check(q, l)


def test_no_warning_on_import():
  # A fresh interpreter, so that the lazy (silenced) jaxopt import really happens.
  code = (
      "import warnings\n"
      "with warnings.catch_warnings(record=True) as w:\n"
      "  warnings.simplefilter('always')\n"
      "  import fedalf_jax.sim.qp as qp\n"
      "  qp._box_osqp_cls()\n"
      "print(len(w), [str(x.message) for x in w])\n")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  assert out.stdout.split()[0] == "0", out.stdout


def test_bad_method():
  with pytest.raises(ValueError):
    solve_simplex_qp(jnp.eye(2), method="nope")


def collinear_history_gram(rng, m=10, H=20, dim=64, rank=3, noise=1e-2, shift=1.0):
  """Unit-row Gram like the fedlf server QP late in training (the NaN of round 49).

  ``m`` client rows near a rank-``rank`` subspace, the fair row (a combination of them, so the Gram
  is singular), then ``H`` history rows that are near-copies of client rows (a client's stored Δ
  of an earlier round): a near-singular ``Q`` whose minimum-norm point is small.
  """
  u = rng.normal(size=(rank, dim))
  rows = (rng.normal(size=(m, rank)) + np.r_[shift, np.zeros(rank - 1)]) @ u
  rows += noise * rng.normal(size=(m, dim))
  hist = rows[rng.integers(0, m, H)] * (1 + 0.1 * rng.random((H, 1)))
  hist += 0.1 * noise * rng.normal(size=(H, dim))
  v = np.concatenate([rows, hist])
  v /= np.linalg.norm(v, axis=1, keepdims=True)
  f = rng.normal(size=m) @ v[:m]
  v = np.concatenate([v[:m], f[None] / np.linalg.norm(f), v[m:]])
  return v @ v.T


def test_near_collinear_history_gram():
  # Before the fix: BoxOSQP (sigma = rho_min = 1e-6) blew up on these (λ ~ 1e19 or NaN) and the
  # PGD polish stalled: residuals 5e-6, ‖d − d*‖² ~ 2e-6 (‖d*‖² ~ 1e-5: directions off by 30-300%).
  rng = np.random.default_rng(5)
  n, H = 31, 20
  Q = np.stack([collinear_history_gram(rng) for _ in range(4)])
  mask = np.ones((4, n), bool)
  mask[:, n - H:] = rng.random((4, H)) < 0.7  # history rows of clients online too long ago
  lam, info = solve_simplex_qp_info(jnp.asarray(Q, jnp.float32), jnp.asarray(mask))
  lam = np.asarray(lam, np.float64)
  assert np.all(np.asarray(info["residual"]) < 1e-7), info["residual"]
  for q, l, k in zip(Q, lam, mask):
    ref = check(q, l, k)
    qk, e = q[np.ix_(k, k)], l[k] - ref
    # The direction d = λᵀV itself: ‖d − d*‖² ≤ gap (≤ 1e-7 in units of the mean row norm²).
    assert e @ qk @ e < 1e-7, e @ qk @ e


def test_blown_up_admm_output_is_discarded(monkeypatch):
  # The NaN of the fedlf run: the float32 ADMM returned a finite but huge λ (~1e10..1e14); the
  # masked projection then returned 0/0 (its sentinel vmax − 2 rounds to vmax) and the PGD polish
  # stopped at once on the NaN start. Replay such ADMM outputs: the answer must still be right.
  from fedalf_jax.sim import qp

  rng = np.random.default_rng(6)
  n = 49
  Q = np.stack([make_q("well", n, rng) for _ in range(3)])
  mask = np.zeros((3, n), bool)
  mask[:, :4] = True  # 45 masked coordinates, as many as in the failing history mask
  garbage = np.zeros((3, n), np.float32)
  garbage[0, :4] = 1e10 * np.array([1.0, 0.75, -0.5, 0.6])
  garbage[1, :4] = 1e14 * np.array([-0.2, 1.0, 0.9, -1.0])
  garbage[2, :4] = np.nan

  def fake_osqp(Qs, ms, maxiter, tol):
    return jnp.asarray(garbage), jnp.full((Qs.shape[0],), maxiter, jnp.int32)

  qp._flat_solver.cache_clear()
  monkeypatch.setattr(qp, "_solve_osqp_batch", fake_osqp)
  try:
    lam, info = solve_simplex_qp_info(jnp.asarray(Q, jnp.float32), jnp.asarray(mask), method="osqp")
  finally:
    qp._flat_solver.cache_clear()
  lam = np.asarray(lam)
  assert np.all(np.isfinite(lam)) and np.all(np.isfinite(np.asarray(info["residual"])))
  assert np.all(np.asarray(info["residual"]) < 1e-6)
  for q, l, k in zip(Q, lam, mask):
    check(q, l, k)


def test_auto_method_solves_large_problems_with_pgd():
  # 300 coordinates (> AUTO_ACTIVE_MAX): "auto" takes the projected-gradient path, still optimal
  from fedalf_jax.sim import qp
  rng = np.random.default_rng(11)
  Q = make_q("biased", 300, rng)
  mask = np.ones(300, bool)
  mask[250:] = False
  lam_auto = solve_simplex_qp(jnp.asarray(Q, jnp.float32), jnp.asarray(mask))
  lam_pgd = solve_simplex_qp(jnp.asarray(Q, jnp.float32), jnp.asarray(mask), method="pgd")
  np.testing.assert_array_equal(np.asarray(lam_auto), np.asarray(lam_pgd))
  check(Q, lam_auto, mask)
  assert qp.AUTO_ACTIVE_MAX < 300


def test_active_is_accurate_bounded_and_each_problem_independent_of_its_batch(problems):
  # The server's default solver: every problem of the test set to a Frank–Wolfe gap ≤ 1e-5 (rescaled
  # units, recomputed in float64) and an objective within 1e-5·mean diag of the float64 reference,
  # within its step bound 2n + 20; and a problem's answer does not depend on the batch it is solved in
  # (a sweep batches the QPs of all its runs: a run's QPs must come out as when solved alone).
  from fedalf_jax.sim import qp
  rng = np.random.default_rng(5)
  Qp, mp, _ = problems
  hist = np.stack([collinear_history_gram(rng) for _ in range(3)])
  for Q, M in ((Qp[:-2], mp[:-2]), (hist, np.ones(hist.shape[:2], bool))):
    lam, info = solve_simplex_qp_info(jnp.asarray(Q, jnp.float32), jnp.asarray(M), method="active")
    lam = np.asarray(lam, np.float64)
    n = Q.shape[-1]
    assert np.all(np.asarray(info["iters"]) <= 2 * n + 20)
    for q, l, k in zip(Q, lam, M):
      qk, lk = q[np.ix_(k, k)], l[k]
      s = np.mean(np.diag(qk))
      if s <= 0:
        continue
      g = qk @ lk / s
      assert lk @ g - g.min() <= 1e-5, (lk @ g - g.min())
      ref = ref_simplex_qp(qk)
      assert 0.5 * lk @ qk @ lk <= 0.5 * ref @ qk @ ref + 1e-5 * s
    # Alone = in the batch: the same number of steps (a finished problem's loop stops: no shared
    # convergence test), the same point up to float32 summation order (XLA vectorises a batch of one
    # differently; measured ≤ 3e-8).
    for i in (0, len(Q) // 2, len(Q) - 1):
      alone, info1 = solve_simplex_qp_info(jnp.asarray(Q[i:i + 1], jnp.float32), jnp.asarray(M[i:i + 1]),
                                           method="active")
      assert int(info1["iters"][0]) == int(info["iters"][i])
      np.testing.assert_allclose(np.asarray(alone)[0], lam[i], atol=1e-6)
  assert qp.resolve_method("auto", 111) == "active" and qp.resolve_method("auto", 300) == "pgd"


def test_active_takes_a_few_dozen_steps_where_osqp_takes_hundreds():
  # The server's sequential depth (issue 14): on near-singular history Grams like a FedALF run's
  # (111 rows, 60 valid), the active-set solver needs tens of steps; BoxOSQP's ADMM hundreds (each
  # with an inner CG loop on top).
  rng = np.random.default_rng(8)
  n, H = 111, 100
  Q = np.zeros((4, n, n))
  mask = np.zeros((4, n), bool)
  for b in range(4):
    q = collinear_history_gram(rng, m=10, H=49, rank=6)
    Q[b, :60, :60] = q
    mask[b, :60] = True
  _, act = solve_simplex_qp_info(jnp.asarray(Q, jnp.float32), jnp.asarray(mask), method="active")
  _, osqp = solve_simplex_qp_info(jnp.asarray(Q, jnp.float32), jnp.asarray(mask), method="osqp")
  assert np.all(np.asarray(act["residual"]) < 1e-5), act["residual"]
  assert int(np.max(act["iters"])) <= 80, act["iters"]
  assert int(np.min(osqp["iters"])) > 2 * int(np.max(act["iters"])), (osqp["iters"], act["iters"])


# ---- lower/upper bounds: a box inside the simplex (issue #37 item 5) ----------------------------------

def box_reference(Q, lo, hi):
  """float64 argmin of ½λᵀQλ on {lo ≤ λ ≤ hi, Σλ = 1} by enumeration: every assignment of each coordinate to
  its lower bound, its upper bound or free (3ⁿ faces), the stationary point of each face by an exact KKT
  solve, the best feasible one kept (the minimum lies in the relative interior of some face)."""
  import itertools
  n = len(lo)
  best = (np.inf, None)
  for a in itertools.product(range(3), repeat=n):
    a = np.array(a)
    x = np.where(a == 0, lo, np.where(a == 1, hi, 0.0))
    idx = np.flatnonzero(a == 2)
    k = len(idx)
    if k == 0:
      if abs(x.sum() - 1.0) > 1e-12:
        continue
    else:
      kkt = np.zeros((k + 1, k + 1))
      kkt[:k, :k] = Q[np.ix_(idx, idx)]
      kkt[:k, k] = -1.0
      kkt[k, :k] = 1.0
      rhs = np.r_[-(Q @ x)[idx], 1.0 - x.sum()]
      sol = np.linalg.lstsq(kkt, rhs, rcond=None)[0]
      if np.abs(kkt @ sol - rhs).max() > 1e-9:
        continue
      x = x.copy()
      x[idx] = sol[:k]
      if np.any(x[idx] < lo[idx] - 1e-12) or np.any(x[idx] > hi[idx] + 1e-12):
        continue
    f = 0.5 * x @ Q @ x
    if f < best[0]:
      best = (f, x)
  return best[1]


def box_problems(count, nmax, seed):
  """Random problems of 2..nmax coordinates zero-padded to nmax (mask), each with FedMGDA+'s box
  λ₀ ± ε (λ₀ random on the simplex, ε ∈ {0.02, 0.1, 0.3}) or a random asymmetric box."""
  rng = np.random.default_rng(seed)
  Q, M, LO, HI = (np.zeros((count, nmax, nmax)), np.zeros((count, nmax), bool), np.zeros((count, nmax)),
                  np.zeros((count, nmax)))
  for t in range(count):
    n = int(rng.integers(2, nmax + 1))
    kind = ["well", "rank1", "rank2", "ill", "biased"][t % 5]
    Q[t, :n, :n] = make_q(kind, n, rng)
    l0 = rng.dirichlet(np.ones(n))
    if t % 4 == 3:  # asymmetric: below and above λ₀ by different amounts
      lo, hi = l0 - rng.uniform(0, 0.2, n), l0 + rng.uniform(0, 0.2, n)
    else:
      eps = [0.02, 0.1, 0.3][t % 3]
      lo, hi = l0 - eps, l0 + eps
    M[t, :n] = True
    LO[t, :n], HI[t, :n] = np.clip(lo, 0, 1), np.clip(hi, 0, 1)
  return Q, M, LO, HI


def test_bounded_matches_the_float64_enumeration():
  # Accuracy of the box solver against the exact float64 answer: objective within 1e-7 of the mean
  # diagonal (measured ≤ 3e-8), every bound and Σλ = 1 kept, and λ itself within 1e-4 where the answer
  # is unique (Q of full rank).
  Q, M, LO, HI = box_problems(80, 6, seed=21)
  lam, info = solve_simplex_qp_info(jnp.asarray(Q, jnp.float32), jnp.asarray(M), lower=jnp.asarray(LO, jnp.float32),
                                    upper=jnp.asarray(HI, jnp.float32))
  lam = np.asarray(lam, np.float64)
  assert np.all(np.asarray(info["residual"]) < 1e-6), np.max(info["residual"])
  worst = 0.0
  for t, (q, l, k, lo, hi) in enumerate(zip(Q, lam, M, LO, HI)):
    assert np.all(l[~k] == 0)
    q, l, lo, hi = q[np.ix_(k, k)], l[k], lo[k], hi[k]
    assert np.all(l >= lo - 1e-6) and np.all(l <= hi + 1e-6) and abs(l.sum() - 1) < 1e-5, (t, l, lo, hi)
    ref = box_reference(q, lo, hi)
    s = np.mean(np.diag(q))
    worst = max(worst, (0.5 * l @ q @ l - 0.5 * ref @ q @ ref) / s)
    if np.linalg.matrix_rank(q) == len(l) and np.linalg.cond(q) < 1e4:
      np.testing.assert_allclose(l, ref, atol=1e-4)
  assert worst < 1e-7, worst


def test_bounded_at_40_coordinates_matches_slsqp():
  # Beyond enumeration: scipy's SLSQP in float64 (to 1e-15) as the reference, 40 coordinates.
  from scipy.optimize import minimize
  Q, M, LO, HI = box_problems(6, 40, seed=22)
  M[:] = True
  rng = np.random.default_rng(3)
  for t in range(len(Q)):
    Q[t] = make_q(["well", "rank3", "ill", "biased", "vertex", "well"][t], 40, rng)
    l0 = rng.dirichlet(np.ones(40))
    LO[t], HI[t] = np.clip(l0 - 0.01, 0, 1), np.clip(l0 + 0.01 + 0.02 * (t % 2), 0, 1)
  lam, info = solve_simplex_qp_info(jnp.asarray(Q, jnp.float32), lower=jnp.asarray(LO, jnp.float32),
                                    upper=jnp.asarray(HI, jnp.float32))
  for q, l, lo, hi in zip(Q, np.asarray(lam, np.float64), LO, HI):
    s = np.mean(np.diag(q))
    qs = q / s
    ref = minimize(lambda x: 0.5 * x @ qs @ x, np.clip(np.full(40, 1 / 40), lo, hi), jac=lambda x: qs @ x,
                   bounds=list(zip(lo, hi)), constraints=[{"type": "eq", "fun": lambda x: x.sum() - 1}],
                   method="SLSQP", options={"ftol": 1e-15, "maxiter": 1000}).x
    assert np.all(l >= lo - 1e-6) and np.all(l <= hi + 1e-6) and abs(l.sum() - 1) < 1e-5
    assert 0.5 * l @ qs @ l <= 0.5 * ref @ qs @ ref + 1e-7


def test_a_loose_box_is_the_simplex_and_a_tight_one_its_centre(problems):
  # [0, 1] everywhere: the unbounded answer; lower = upper = λ₀: λ₀ itself; the bounds really bind.
  Qp, mp, _ = problems
  Q, m = jnp.asarray(Qp[:-2], jnp.float32), jnp.asarray(mp[:-2])
  free = np.asarray(solve_simplex_qp(Q, m))
  loose = np.asarray(solve_simplex_qp(Q, m, lower=0.0, upper=1.0))
  for q, a, b, k in zip(Qp[:-2], free, loose, mp[:-2]):
    s = max(np.mean(np.diag(q[np.ix_(k, k)])), 1e-30)
    assert abs(0.5 * a @ q @ a - 0.5 * b @ q @ b) <= 1e-6 * s
  rng = np.random.default_rng(9)
  l0 = rng.dirichlet(np.ones(5), size=3)
  Q5 = np.stack([make_q("well", 5, rng) for _ in range(3)])
  lam = np.asarray(solve_simplex_qp(jnp.asarray(Q5, jnp.float32), lower=l0, upper=l0))
  np.testing.assert_allclose(lam, l0, atol=1e-6)
  unb = np.asarray(solve_simplex_qp(jnp.asarray(Q5, jnp.float32)))
  box = np.asarray(solve_simplex_qp(jnp.asarray(Q5, jnp.float32), lower=l0 - 0.05, upper=l0 + 0.05))
  assert np.abs(unb - l0).max() > 0.05 and np.abs(box - l0).max() <= 0.05 + 1e-6


def test_bounded_under_jit_and_vmap_with_traced_bounds():
  Q, M, LO, HI = box_problems(10, 5, seed=23)
  args = [jnp.asarray(a, jnp.float32) for a in (Q, LO, HI)]
  direct = np.asarray(solve_simplex_qp(args[0], jnp.asarray(M), lower=args[1], upper=args[2]))
  mapped = jax.jit(jax.vmap(lambda q, k, a, b: solve_simplex_qp(q, k, lower=a, upper=b)))(args[0], jnp.asarray(M),
                                                                                          *args[1:])
  np.testing.assert_allclose(np.asarray(mapped), direct, atol=1e-6)


@pytest.mark.parametrize("kw, message", [
    (dict(lower=0.6), "the box is empty: sum(lower) ≤ 1 ≤ sum(upper) is needed"),
    (dict(upper=0.2), "the box is empty"),
    (dict(lower=[0.5, 0.0, 0.0], upper=[0.4, 1.0, 1.0]), "lower exceeds upper"),
    (dict(lower=[np.nan, 0.0, 0.0]), "lower/upper hold NaN"),
    (dict(upper=0.5, method="active"), "method 'active' does not take lower/upper bounds; use 'auto' or 'pgd'"),
])
def test_bad_bounds_are_one_line(kw, message):
  with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
    solve_simplex_qp(jnp.eye(3), **kw)
  assert "\n" not in str(e.value)


def test_bounded_active_set_alone_reaches_the_optimum_from_a_wrong_vertex():
  # The polish is an active-set method of its own: started at a vertex of the box (every coordinate but one at
  # a bound, most of them wrongly), it must release and add bounds until it reaches the float64 optimum. On a
  # well-conditioned Q: on a singular or ill-conditioned one (cond 1e6) its ridge-regularised float32 steps can
  # cycle, and the answer rests on FISTA's point (test_bounded_matches_the_float64_enumeration).
  # Without releasing a bound (the mutation `release = viol[r] > 1e9`) it reaches the optimum in few cases.
  from fedalf_jax.sim import qp
  Q, M, LO, HI = box_problems(40, 5, seed=24)
  tried = reached = 0
  for q, k, lo, hi in zip(Q, M, LO, HI):
    q, lo, hi = q[np.ix_(k, k)], lo[k], hi[k]
    if np.linalg.matrix_rank(q) < len(lo) or np.linalg.cond(q) > 1e4:
      continue
    tried += 1
    s = np.mean(np.diag(q))
    x0 = lo.copy()
    for j in range(len(lo))[::-1]:  # fill the mass left from the last coordinate down
      x0[j] += min(hi[j] - lo[j], 1.0 - x0.sum())
    qs, a, b = (jnp.asarray(v, jnp.float32) for v in (q / s, lo, hi))
    score = lambda qq, x: qp._box_score(qq, x, a, b, 1e-7)  # noqa: E731
    x, steps = qp._box_polish(qs, jnp.asarray(x0, jnp.float32), a, b, score, 2 * len(lo) + 20)
    x = np.asarray(x, np.float64)
    ref = box_reference(q, lo, hi)
    assert 0.5 * x @ q @ x <= 0.5 * x0 @ q @ x0 + 1e-7 * s   # never worse than its start
    reached += 0.5 * x @ q @ x - 0.5 * ref @ q @ ref <= 1e-6 * s
  # Not all: a degenerate step (a released coordinate blocked at once) can make it cycle.
  assert tried >= 10 and reached >= 0.9 * tried, (reached, tried)


HOST_DEVICES_QP = r'''
import os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from fedalf_jax.sim.qp import solve_simplex_qp, solve_simplex_qp_info
Q = jnp.asarray(np.load(sys.argv[1]))
mesh = Mesh(np.array(jax.devices()), ("d",))

def f(Q):  # as a round does: the solve inside a loop, on each device's own problems at once
    def body(c):
        i, q, _, _ = c
        lo = jnp.full(q.shape[:-1], 0.2 / q.shape[-1])  # the bounded path's dense KKT solve too
        return i + 1, q, solve_simplex_qp(q, method="active"), solve_simplex_qp(q, lower=lo)
    z = jnp.zeros(Q.shape[:-1])
    return jax.lax.while_loop(lambda c: c[0] < 2, body, (0, Q, z, z))[2:]

g = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("d"), out_specs=P("d"), check_vma=False))
lam, box = jax.block_until_ready(g(jax.device_put(Q, NamedSharding(mesh, P("d")))))
np.save(sys.argv[2], np.stack([np.asarray(lam), np.asarray(box)]))
'''


def test_batched_lapack_on_two_host_devices_completes_with_one_devices_bits(tmp_path):
  """Issue 49: on XLA's host devices (``--devices 2`` on a CPU), jaxlib's batched LAPACK kernels split a
  batch over the thread pool and wait in a pool thread for its parts; with both devices' programs waiting, the
  program never completed (a FedLF FMNIST sweep hung in its first round; here 4 problems of 100 coordinates a
  device inside a loop hung within a second). Every LAPACK call of a batch now holds one problem there: the
  program completes, with the bits one device gives (the batched kernel loops over the same per-matrix call)."""
  B, n = 4, 100
  V = np.random.default_rng(3).normal(size=(2 * B, n, 2 * n)).astype(np.float32)
  np.save(tmp_path / "q.npy", V @ V.transpose(0, 2, 1))
  script = tmp_path / "host_devices_qp.py"
  script.write_text(HOST_DEVICES_QP)
  try:
    p = subprocess.run([sys.executable, str(script), str(tmp_path / "q.npy"), str(tmp_path / "lam.npy")],
                       capture_output=True, text=True, timeout=60)
  except subprocess.TimeoutExpired:
    pytest.fail("the QP on two host devices did not complete in 60 s (the batched LAPACK deadlock)")
  assert p.returncode == 0, p.stderr[-2000:]
  lam, box = np.load(tmp_path / "lam.npy")
  Q = jnp.asarray(np.load(tmp_path / "q.npy"))
  assert len(jax.devices()) == 1
  for d in range(2):  # one device, each device's problems as one batch: the same bits
    q = Q[d * B:(d + 1) * B]
    lo = jnp.full((B, n), 0.2 / n)
    np.testing.assert_array_equal(lam[d * B:(d + 1) * B], jax.jit(lambda q: solve_simplex_qp(q, method="active"))(q))
    np.testing.assert_array_equal(box[d * B:(d + 1) * B], jax.jit(lambda q: solve_simplex_qp(q, lower=lo))(q))
  for q, l in zip(np.asarray(Q, np.float64), lam):  # and a solution: feasible, near the float64 reference
    check(q, l)
