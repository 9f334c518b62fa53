"""Batched minimum-norm-point QP on the probability simplex.

Solves ``argmin_{λ ≥ 0, Σλ = 1} ½ λᵀ Q λ`` for a (batch of) positive semi-definite Gram matrices
``Q`` of shape ``[..., n, n]``. This is the dual QP of the fair direction (docs/algorithms.md §3.2 step 3):
for ``Q = V Vᵀ`` the solution gives the minimum-norm point ``d = λᵀ V`` of the convex hull of the
rows of ``V``.

Numerics (all of it is jit/vmap safe, float32 friendly):

* ``Q`` is symmetrised and rescaled by the mean of its (valid) diagonal, so the solver always sees
  entries of order one (a Gram of unit rows becomes a cosine matrix). A zero ``Q`` (every point optimal) is
  replaced by the identity, so it returns the uniform point.
* ``method="active"`` (what ``auto`` picks up to ``AUTO_ACTIVE_MAX`` = 256 coordinates): Wolfe's
  minimum-norm-point (active-set) algorithm started from the uniform point (the full support): exact
  affine minimisers on the support (one dense ridge-regularised solve with a refinement step per
  iteration), line steps back into the simplex, and the most violated coordinate added. It stops
  at the float32 floor of the Frank–Wolfe gap within at most ``2n + 20`` steps (the step counts
  measured on real QPs, against BoxOSQP's: docs/lab/qp.md), and its loop is per problem, so a batch
  of problems (every layer of every run of a sweep) runs in one loop whose depth is the slowest
  problem's, and each problem's iterates are exactly those of its own solve. A result still above
  the gap target (not seen on real problems) is polished by at most ``_FALLBACK_PGD`` FISTA steps,
  so the sequential depth is bounded.
* ``method="osqp"``: jaxopt ``BoxOSQP``, the whole batch run as one separable QP (batched
  matvecs, one ADMM loop), with a tiny ridge on the diagonal. Its float32 settings matter: with
  jaxopt's defaults (``sigma = rho_min = 1e-6``) the CG-solved ADMM system ``Q + (σ+ρ)I + ρ11ᵀ`` has a
  condition number ~1e7 on the near-singular Grams of a converging model, and the iterates blow up
  (NaN, or finite but ~1e15); ``σ = ρ_min = 1e-3`` keeps them bounded. Still, ADMM in float32 only
  gives a rough point on these problems, so its output is treated as a warm start: a non-finite or
  grossly infeasible one is discarded (uniform start), the rest is clipped and projected onto the
  simplex, and polished by the active-set loop (then PGD) when its gap is above target. The batch
  shares one ADMM loop, so problems of one batch are not independent of each other.
* ``method="auto"``: ``active`` for up to ``AUTO_ACTIVE_MAX`` (256) coordinates, ``pgd`` above: the
  active-set step does a dense ``n × n`` solve (O(n³) whatever the support), so ``pgd``'s O(n²) steps
  win on large problems (the timings: docs/lab/qp.md).
* ``method="pgd"``: FISTA (accelerated projected gradient) with adaptive restart, projection by
  ``optax.projections.projection_simplex``, step ``1/L`` with ``L`` an upper bound on ``λ_max(Q)``.
* ``jax.vmap`` of a solve folds the vmapped axes into the batch (``custom_vmap``), so it stays one
  batched solve; jaxopt's loop is never vmapped (that is slow: its conds become selects).
* Optimality certificate: the Frank–Wolfe gap ``λᵀQλ − min_j (Qλ)_j ≥ f(λ) − f* ≥ 0``
  (reported in rescaled units as ``info["residual"]``).
* ``lower``/``upper`` bounds (a box inside the simplex, e.g. FedMGDA+'s ``‖λ − λ₀‖∞ ≤ ε``): FISTA with
  the exact projection onto ``{lo ≤ λ ≤ hi, Σλ = 1}`` (a sort of the ``2n`` kinks, no inner loop), its
  Frank–Wolfe gap as the stopping test, and one KKT solve on the free coordinates as a polish.
* An optional boolean ``mask`` (``[..., n]``) restricts the support: masked-out coordinates get
  ``λ = 0`` and their rows/columns of ``Q`` are ignored. A problem with no valid coordinate returns
  ``λ = 0``.
"""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
from optax.projections import projection_simplex

from ..runtime.errors import ConfigError

__all__ = ["solve_simplex_qp", "solve_simplex_qp_info", "simplex_gap", "box_gap", "resolve_method", "METHODS"]

METHODS = ("auto", "active", "osqp", "pgd")

_HI = jax.lax.Precision.HIGHEST  # full float32 matmuls (no TF32/bf16 passes on accelerators)
_RIDGE = 1e-6  # relative ridge for BoxOSQP (Q is rescaled to unit mean diagonal)
_PATIENCE = 300  # pgd stops after this many steps without a better gap
_RTOL = 1e-5  # relative part of the convergence test: gap ≤ tol + _RTOL·λᵀQλ
_POLISH_TOL = 1e-7  # osqp results failing the test with this tol are polished (active set, then pgd)
_OSQP_SIGMA = 1e-3  # BoxOSQP sigma and rho_min: jaxopt's 1e-6 diverges in float32 on near-singular Q
_OSQP_RHO_MIN = 1e-3
_AS_RIDGE = 1e-7  # relative ridge of the active-set KKT solves (Q has unit mean diagonal)
AUTO_ACTIVE_MAX = 256  # method="auto": the active-set solver up to this many coordinates, pgd above
_FALLBACK_PGD = 200  # method="active": FISTA steps after an active-set result above the gap target
_WARM_BOX = 1e-2  # osqp output outside [−_WARM_BOX, 1 + _WARM_BOX] (or not finite) is discarded


def _box_osqp_cls():
  """Imports jaxopt lazily and silently (it is archived and warns on import)."""
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import jaxopt  # pylint: disable=import-outside-toplevel
  return jaxopt.BoxOSQP


def resolve_method(method: str, n: int) -> str:
  """The solver ``method`` runs on problems of ``n`` coordinates (``auto`` → ``active`` or ``pgd``)."""
  if method == "auto":
    return "active" if n <= AUTO_ACTIVE_MAX else "pgd"
  return method


def simplex_gap(Q, lam, mask=None):
  """Frank–Wolfe gap ``λᵀQλ − min_{j valid} (Qλ)_j`` (≥ f(λ) − f*), batched."""
  g = jnp.einsum("...ij,...j->...i", Q, lam, precision=_HI)
  if mask is not None:
    g = jnp.where(mask, g, jnp.inf)
  return jnp.sum(lam * g if mask is None else jnp.where(mask, lam * g, 0.0), -1) - jnp.min(g, -1)


def _project(v, mask):
  """Euclidean projection of ``v`` onto the simplex restricted to ``mask`` (``mask.any()``)."""
  vmax = jnp.max(jnp.where(mask, v, -jnp.inf))
  # Masked entries sit below the threshold (which is ≥ max(v) − 1), so they project to zero
  # and do not change the threshold. The sentinel is relative to |max(v)|: in float32 ``vmax − 2``
  # rounds to ``vmax`` once |vmax| ≳ 1e7, the masked entries then tie with the maximum and can take
  # all the mass (→ 0/0). Callers pass bounded ``v`` anyway (|v| ≲ a few).
  p = jnp.where(mask, projection_simplex(jnp.where(mask, v, vmax - 2.0 - 2.0 * jnp.abs(vmax))), 0.0)
  return p / jnp.sum(p)  # removes the rounding of the threshold (sum ≥ the largest entry > 0)


def _prepare(Q, mask):
  """Symmetrise, restrict to ``mask`` and rescale one problem to unit mean valid diagonal."""
  Q = 0.5 * (Q + Q.T)
  any_valid = jnp.any(mask)
  mask = jnp.where(any_valid, mask, jnp.ones_like(mask))
  Q = jnp.where(mask[:, None] & mask[None, :], Q, 0.0)
  Q = jnp.where(jnp.isfinite(Q), Q, 0.0)
  s = jnp.sum(jnp.where(mask, jnp.diagonal(Q), 0.0)) / jnp.sum(mask)
  # A PSD Q with zero diagonal is zero: every point is optimal; solve with I instead (→ uniform).
  Q = jnp.where(s > 0, Q / jnp.where(s > 0, s, 1.0), jnp.diag(mask.astype(Q.dtype)))
  return Q, mask, any_valid


def _uniform(mask, dtype):
  m = mask.astype(dtype)
  return m / jnp.sum(m)


def _gap_score(Q, x, mask, tol):
  """Frank–Wolfe gap over its target ``tol + _RTOL·λᵀQλ`` (≤ 1 means converged)."""
  g = jnp.where(mask, jnp.matmul(Q, x, precision=_HI), jnp.inf)
  xqx = jnp.sum(jnp.where(mask, x * g, 0.0))
  return (xqx - jnp.min(g)) / (tol + _RTOL * jnp.maximum(xqx, 0.0))


def _solve_pgd(Q, mask, maxiter, tol, x0=None, active=True, project=None, score=None):
  """FISTA with gradient-based adaptive restart on the (masked) simplex.

  Starts at ``x0`` (default: uniform on ``mask``) and runs while ``active``, the best Frank–Wolfe gap
  exceeds ``tol + _RTOL·λᵀQλ`` and it improved within the last ``_PATIENCE`` steps (float32
  floor); returns the best iterate. ``project`` (``v -> λ``) and ``score`` (``(Q, λ) -> gap score``)
  replace the masked simplex's projection and gap (the bounded solver's box inside the simplex).
  """
  if project is None:
    project = lambda v: _project(v, mask)  # noqa: E731
  if score is None:
    score = lambda q, x: _gap_score(q, x, mask, tol)  # noqa: E731
  dtype = Q.dtype
  # Upper bounds on λ_max for PSD Q: trace and max absolute row sum.
  L = jnp.minimum(jnp.trace(Q), jnp.max(jnp.sum(jnp.abs(Q), -1)))
  L = jnp.where(L > 0, L, 1.0)
  u = _uniform(mask, dtype)
  x0 = u if x0 is None else jnp.where(jnp.all(jnp.isfinite(x0)), x0, u)

  def cond(st):
    it, _, _, _, _, s_best, it_best = st
    return active & (it < maxiter) & (s_best > 1.0) & (it - it_best < _PATIENCE)

  def body(st):
    it, x, y, t, x_best, s_best, it_best = st
    x_new = project(y - jnp.matmul(Q, y, precision=_HI) / L)
    t_new = 0.5 * (1.0 + jnp.sqrt(1.0 + 4.0 * t * t))
    restart = jnp.vdot(y - x_new, x_new - x) > 0
    y_new = jnp.where(restart, x_new, x_new + ((t - 1.0) / t_new) * (x_new - x))
    t_new = jnp.where(restart, jnp.ones_like(t), t_new)
    sc = score(Q, x_new)
    better = sc < s_best
    return (it + 1, x_new, y_new, t_new, jnp.where(better, x_new, x_best),
            jnp.where(better, sc, s_best), jnp.where(better, it + 1, it_best))

  zero = jnp.zeros((), jnp.int32)
  st = (zero, x0, x0, jnp.ones((), dtype), x0, score(Q, x0), zero)
  with jax.named_scope("qp_pgd"):  # fedalf bench finds the loop by this name in the compiled program
    it, _, _, _, x, _, _ = jax.lax.while_loop(cond, body, st)
  return x, it


def _lapack_one_at_a_time() -> bool:
  """Whether this trace runs every LAPACK call of a batch one problem at a time (:func:`_per_problem`): on a
  CPU backend with more than one device (``--devices N`` on XLA's host devices). There jaxlib's batched
  LAPACK kernels (0.10: ``ParallelBatchMap``) split a batch over XLA's thread pool and wait in a pool thread
  for the parts; with each host device's program waiting so, no thread is left to run them, and the program
  never completes (a FedLF FMNIST sweep on ``--devices 2`` hung in its first round, every thread in a futex
  wait). One problem per call splits nothing. The results are the same bits: the batched kernel is a loop of
  the same per-matrix LAPACK call."""
  return jax.default_backend() == "cpu" and jax.device_count() > 1


def _per_problem(fn):
  """``fn`` (LAPACK calls) whose ``vmap`` is, where :func:`_lapack_one_at_a_time`, a ``lax.map`` over the batch
  (nested vmaps nest the maps), so every call holds one problem; elsewhere the usual batched call."""

  @jax.custom_batching.custom_vmap
  def one(*args):
    return fn(*args)

  @one.def_vmap
  def _rule(axis_size, in_batched, *args):
    args = tuple(a if b else jnp.broadcast_to(a, (axis_size, *jnp.shape(a))) for a, b in zip(args, in_batched))
    out = jax.lax.map(lambda xs: one(*xs), args) if _lapack_one_at_a_time() else jax.vmap(fn)(*args)
    return out, jax.tree.map(lambda _: True, out)

  return one


_lu = _per_problem(jax.lax.linalg.lu)
_lower_unit_solve = _per_problem(functools.partial(jax.lax.linalg.triangular_solve, left_side=True, lower=True,
                                                   unit_diagonal=True))
_upper_solve = _per_problem(functools.partial(jax.lax.linalg.triangular_solve, left_side=True, lower=False))
_dense_solve = _per_problem(jnp.linalg.solve)


def _affine_min(Q, S):
  """Minimiser of ``λᵀQλ`` over the affine hull ``{Σλ = 1, λ = 0 off S}`` (``S`` non-empty).

  ``x = (Q_S + εI)⁻¹ 1`` with one step of iterative refinement, normalised to sum one. The ridge
  makes the system definite when the points of ``S`` are affinely dependent (then the result is a
  point of the affine hull with ``λᵀQλ ≈ 0``, as the exact minimiser); it moves ``λᵀQλ`` by ``O(ε)``.
  """
  Sf = S.astype(Q.dtype)
  M = jnp.where(S[:, None] & S[None, :], Q, 0.0) + jnp.diag(jnp.where(S, _AS_RIDGE, 1.0))
  # One LU factorisation (partial pivoting: Cholesky breaks down in float32 on the singular Q_S of an
  # affinely dependent support, where the ridge is below float32's rounding of Q) and its row
  # permutation, computed once for the solve and its refinement (two ``jnp.linalg.solve`` calls
  # convert the pivots twice: on CPU a loop of n trips each, as many ops per step as the rest).
  lu, _, perm = _lu(M)

  def solve(b):
    return _upper_solve(lu, _lower_unit_solve(lu, b[perm][:, None]))[:, 0]

  x = solve(Sf)
  x = x + solve(Sf - jnp.matmul(M, x, precision=_HI))
  x = jnp.where(S, x, 0.0)
  return x / jnp.sum(x)


def _solve_active(Q, mask, x0, maxiter, tol, active=True):
  """Wolfe's minimum-norm-point (active-set) algorithm started from ``x0`` (on the masked simplex).

  Each iteration solves for the affine minimiser ``a`` on the support ``S``: if ``a ≥ 0`` it becomes
  the iterate and the most violated coordinate (smallest ``(Qλ)_j`` below ``λᵀQλ``) joins ``S``;
  otherwise the iterate moves towards ``a`` until a coordinate hits zero, which leaves ``S``.
  Runs while ``active``, the best gap score exceeds one, and the algorithm has not stopped (no
  violator, or a non-finite solve), at most ``maxiter`` steps; returns the best iterate.
  """

  def cond(st):
    it, _, _, _, s_best, done = st
    return active & (it < maxiter) & (s_best > 1.0) & ~done

  def body(st):
    it, x, S, x_best, s_best, _ = st
    a = _affine_min(Q, S)
    ok = jnp.all(jnp.isfinite(a))
    neg = S & (a < 0)
    # Minor step: towards a, until the first coordinate of S reaches zero (it leaves S).
    ratio = jnp.where(neg, x / jnp.where(neg, x - a, 1.0), jnp.inf)
    k = jnp.argmin(ratio)
    xl = jnp.maximum(x + jnp.clip(ratio[k], 0.0, 1.0) * (a - x), 0.0).at[k].set(0.0)
    xl = jnp.where(mask, xl, 0.0)
    xl = xl / jnp.sum(xl)
    # Major step: a is on the simplex; add the most violated coordinate.
    xa = jnp.where(S, jnp.maximum(a, 0.0), 0.0)
    xa = xa / jnp.sum(xa)
    g = jnp.matmul(Q, xa, precision=_HI)
    gm = jnp.where(mask & ~S, g, jnp.inf)
    j = jnp.argmin(gm)
    add = gm[j] < jnp.sum(xa * g)
    major = ~jnp.any(neg)
    x_new = jnp.where(major, xa, xl)
    S_new = jnp.where(major, S.at[j].set(S[j] | add), S & (xl > 0))
    x_new = jnp.where(ok, x_new, x)
    sc = _gap_score(Q, x_new, mask, tol)
    better = ok & (sc < s_best)
    done = ~ok | (major & ~add)
    return (it + 1, x_new, S_new, jnp.where(better, x_new, x_best), jnp.where(better, sc, s_best),
            done)

  zero = jnp.zeros((), jnp.int32)
  st = (zero, x0, mask & (x0 > 0), x0, _gap_score(Q, x0, mask, tol), jnp.zeros((), bool))
  with jax.named_scope("qp_active_set"):  # fedalf bench finds the loop by this name in the compiled program
    it, _, _, x, _, _ = jax.lax.while_loop(cond, body, st)
  return x, it


def _project_box(v, lo, hi):
  """Euclidean projection of ``v`` onto ``{lo ≤ λ ≤ hi, Σλ = 1}`` (``Σlo ≤ 1 ≤ Σhi``): ``λ = clip(v − τ, lo, hi)``.

  ``φ(τ) = Σ clip(v − τ, lo, hi)`` is piecewise linear and non-increasing, with its kinks at ``v − hi``
  and ``v − lo``: ``τ`` is found exactly by evaluating ``φ`` at the sorted kinks and interpolating on
  the segment where it crosses one (``O(n²)`` work, no iteration). A masked coordinate has
  ``lo = hi = 0``.
  """
  bp = jnp.sort(jnp.concatenate([v - hi, v - lo]))
  phi = jnp.sum(jnp.clip(v[None, :] - bp[:, None], lo, hi), -1)
  k = jnp.clip(jnp.sum(phi >= 1.0) - 1, 0, bp.shape[0] - 2)
  b0, b1, p0, p1 = bp[k], bp[k + 1], phi[k], phi[k + 1]
  drop = p0 - p1
  tau = b0 + jnp.where(drop > 0, (p0 - 1.0) * (b1 - b0) / jnp.where(drop > 0, drop, 1.0), 0.0)
  return jnp.clip(v - tau, lo, hi)


def box_gap(Q, lam, lo, hi):
  """Frank–Wolfe gap on the box inside the simplex: ``λᵀQλ − min_{lo ≤ s ≤ hi, Σs = 1} sᵀQλ`` (one problem).

  The minimising ``s`` starts at ``lo`` and fills the remaining mass ``1 − Σlo`` into the coordinates of
  smallest ``(Qλ)_j`` first, each up to ``hi_j``.
  """
  g = jnp.matmul(Q, lam, precision=_HI)
  order = jnp.argsort(g)
  cap = (hi - lo)[order]
  take = jnp.clip(1.0 - jnp.sum(lo) - (jnp.cumsum(cap) - cap), 0.0, cap)
  return jnp.vdot(lam, g) - jnp.vdot(lo, g) - jnp.vdot(take, g[order])


def _box_score(Q, x, lo, hi, tol):
  xqx = jnp.vdot(x, jnp.matmul(Q, x, precision=_HI))
  return box_gap(Q, x, lo, hi) / (tol + _RTOL * jnp.maximum(xqx, 0.0))


def _box_eqp(Q, fix_lo, fix_hi, lo, hi):
  """The minimiser of ``½λᵀQλ`` on ``{Σλ = 1}`` with the coordinates ``fix_lo``/``fix_hi`` held at their bound,
  and its multiplier ``μ``: one KKT solve on the free ones, ``Q_FF λ_F − μ1 = −Q_{F,B} λ_B``,
  ``Σλ_F = 1 − Σλ_B`` (ridge-regularised like the active-set step; no free coordinate: ``λ = λ_B``)."""
  n = lo.shape[0]
  xb = jnp.where(fix_lo, lo, jnp.where(fix_hi, hi, 0.0))
  free = ~(fix_lo | fix_hi)
  ff = free.astype(Q.dtype)
  M = jnp.zeros((n + 1, n + 1), Q.dtype)
  M = M.at[:n, :n].set(jnp.where(free[:, None] & free[None, :], Q, 0.0) + jnp.diag(jnp.where(free, _AS_RIDGE, 1.0)))
  M = M.at[:n, n].set(-ff).at[n, :n].set(ff).at[n, n].set(jnp.where(jnp.any(free), 0.0, 1.0))
  rhs = jnp.concatenate([jnp.where(free, -jnp.matmul(Q, xb, precision=_HI), 0.0), (1.0 - jnp.sum(xb))[None]])
  sol = _dense_solve(M, rhs)
  return jnp.where(free, sol[:n], xb), sol[n]


def _box_polish(Q, x, lo, hi, score, steps):
  """A primal active-set method started from FISTA's point ``x`` (the exact answer once the working set
  is right). The working set holds the coordinates at a bound. Each step solves the problem with them
  held there (:func:`_box_eqp`) and moves towards that minimiser as far as the box allows: a blocked
  move adds the blocking coordinate; a full one releases the held coordinate whose multiplier has the
  wrong sign (``(Qλ)_j − μ < 0`` at its lower bound, ``> 0`` at its upper), or stops. At most ``steps``
  steps; returns the iterate of the best gap score (``x`` itself if none is better)."""
  eps = 1e-6
  wl, wh = x <= lo + eps, x >= hi - eps
  pinned = hi - lo <= eps                      # lo = hi: held for good
  x = jnp.where(wl, lo, jnp.where(wh, hi, x))

  def cond(st):
    k, _, _, _, _, _, done = st
    return (k < steps) & ~done

  def body(st):
    k, x, wl, wh, best, s_best, _ = st
    a, mu = _box_eqp(Q, wl, wh, lo, hi)
    ok = jnp.all(jnp.isfinite(a))
    d = a - x
    free = ~(wl | wh)
    down, up = free & (d < -1e-12), free & (d > 1e-12)
    ratio = jnp.where(down, (x - lo) / jnp.where(down, -d, 1.0), jnp.where(up, (hi - x) / jnp.where(up, d, 1.0),
                                                                            jnp.inf))
    j = jnp.argmin(ratio)
    alpha = jnp.clip(ratio[j], 0.0, 1.0)
    blocked = ratio[j] < 1.0
    x_new = jnp.clip(x + alpha * d, lo, hi)
    x_new = jnp.where(blocked, x_new.at[j].set(jnp.where(down[j], lo[j], hi[j])), x_new)
    wl_b, wh_b = wl.at[j].set(wl[j] | (blocked & down[j])), wh.at[j].set(wh[j] | (blocked & up[j]))
    # A full step: the multipliers of the held coordinates (all held: μ between the two groups' gradients).
    g = jnp.matmul(Q, a, precision=_HI)
    mu = jnp.where(jnp.any(free), mu, 0.5 * (jnp.max(jnp.where(wh, g, -jnp.inf)) + jnp.min(jnp.where(wl, g, jnp.inf))))
    mu = jnp.where(jnp.isfinite(mu), mu, jnp.where(jnp.any(wl), jnp.min(jnp.where(wl, g, jnp.inf)),
                                                   jnp.max(jnp.where(wh, g, -jnp.inf))))
    viol = jnp.where(pinned, -jnp.inf, jnp.where(wl, mu - g, jnp.where(wh, g - mu, -jnp.inf)))
    r = jnp.argmax(viol)
    release = viol[r] > 1e-7
    wl_f, wh_f = wl.at[r].set(wl[r] & ~release), wh.at[r].set(wh[r] & ~release)
    x_new = jnp.where(ok, x_new, x)
    wl_n = jnp.where(ok, jnp.where(blocked, wl_b, wl_f), wl)
    wh_n = jnp.where(ok, jnp.where(blocked, wh_b, wh_f), wh)
    done = ~ok | (~blocked & ~release)
    sc = score(Q, x_new)
    better = sc < s_best
    return (k + 1, x_new, wl_n, wh_n, jnp.where(better, x_new, best), jnp.where(better, sc, s_best), done)

  zero = jnp.zeros((), jnp.int32)
  st = (zero, x, wl, wh, x, score(Q, x), jnp.zeros((), bool))
  k, _, _, _, best, _, _ = jax.lax.while_loop(cond, body, st)
  return best, k


def _solve_box(Q, mask, lo, hi, maxiter, tol):
  """FISTA on ``{lo ≤ λ ≤ hi, Σλ = 1}`` (one rescaled problem), then :func:`_box_polish`. Returns
  ``(λ, iterations, rescaled gap)``."""
  lo, hi = jnp.where(mask, lo, 0.0), jnp.where(mask, hi, 0.0)
  project = lambda v: _project_box(v, lo, hi)  # noqa: E731
  score = lambda q, x: _box_score(q, x, lo, hi, tol)  # noqa: E731
  x0 = project(_uniform(mask, Q.dtype))
  x, it = _solve_pgd(Q, mask, maxiter, tol, x0=x0, project=project, score=score)
  x, k = _box_polish(Q, x, lo, hi, score, 2 * Q.shape[0] + 20)
  return x, it + k, box_gap(Q, x, lo, hi)


def _box_sums(lo, hi, mask):
  """``(Σlo, Σhi, crossed)`` over the ``mask``ed coordinates of clipped bounds ``[..., n]`` (``crossed``: some
  ``lo > hi``), and the slack the sums are allowed (``1e-6`` plus ``n`` roundings of the dtype: ``λ₀ ± 0`` of
  weights that sum to one in float32)."""
  slo, shi = jnp.sum(jnp.where(mask, lo, 0.0), -1), jnp.sum(jnp.where(mask, hi, 0.0), -1)
  crossed = jnp.any((lo > hi) & mask, -1)
  return slo, shi, crossed, 1e-6 + lo.shape[-1] * float(jnp.finfo(lo.dtype).eps)


def _solve_box_flat(Q, mask, lo, hi, *, maxiter, tol):
  """The bounded solver on a flat batch ``Q [B, n, n]``, ``mask``, ``lo``, ``hi`` ``[B, n]``. A problem whose
  box is empty (``Σlo > 1``, ``Σhi < 1``, some ``lo > hi``, or a NaN bound) gets ``λ = NaN`` (residual inf):
  no point of it is on the simplex, and a NaN reaches the caller's divergence check."""
  Qs, ms, any_valid = jax.vmap(_prepare)(Q, mask)
  lo = jnp.clip(lo, 0.0, 1.0).astype(Qs.dtype)
  hi = jnp.clip(hi, 0.0, 1.0).astype(Qs.dtype)
  slo, shi, crossed, slack = _box_sums(lo, hi, ms)
  feasible = (slo <= 1.0 + slack) & (shi >= 1.0 - slack) & ~crossed
  lam, it, res = jax.vmap(lambda q, k, a, b: _solve_box(q, k, a, b, maxiter, tol))(Qs, ms, lo, hi)
  lam = jnp.where(any_valid[:, None], jnp.where(feasible[:, None], lam, jnp.nan), 0.0)
  res = jnp.where(any_valid, jnp.where(feasible, res, jnp.inf), 0.0)
  return lam, it.astype(jnp.int32), res


_box_solver = functools.lru_cache(maxsize=None)(
    lambda maxiter, tol: jax.jit(functools.partial(_solve_box_flat, maxiter=maxiter, tol=tol)))


def _solve_osqp_batch(Q, mask, maxiter, tol):
  """jaxopt BoxOSQP on the whole batch at once: ``Q [B, n, n]``, ``mask [B, n]``.

  The batch is one separable QP (``x`` of shape ``[B, n]``, batched matvecs), which avoids vmapping
  jaxopt's loop (slow: its internal conds become selects). Constraints: ``0 ≤ λ ≤ mask``, ``Σλ = 1``;
  a tiny ridge on the valid diagonal keeps the ADMM stable on rank-deficient ``Q``.
  """
  B, n = mask.shape
  dtype = Q.dtype
  m = mask.astype(dtype)
  Qr = Q + _RIDGE * m[:, :, None] * jnp.eye(n, dtype=dtype)
  solver = _box_osqp_cls()(
      matvec_Q=lambda P, x: jnp.einsum("bij,bj->bi", P, x, precision=_HI),
      matvec_A=lambda _, x: (x, jnp.sum(x, -1)),
      tol=tol, maxiter=maxiter, jit=True, check_primal_dual_infeasability=False,
      implicit_diff=False, sigma=_OSQP_SIGMA, rho_min=_OSQP_RHO_MIN)
  lo = (jnp.zeros((B, n), dtype), jnp.ones((B,), dtype))
  hi = (m, jnp.ones((B,), dtype))
  sol, state = solver.run(None, params_obj=(Qr, jnp.zeros((B, n), dtype)), params_eq=None,
                          params_ineq=(lo, hi))
  return sol.primal[0], jnp.broadcast_to(state.iter_num, (B,))


def solve_simplex_qp_info(Q, mask=None, *, lower=None, upper=None, method="auto", maxiter=None, tol=None):
  """Solves ``argmin_{λ≥0, Σλ=1} ½λᵀQλ`` for ``Q`` of shape ``[..., n, n]``, optionally inside a box.

  Args:
    Q: positive semi-definite matrices ``[..., n, n]`` (may be traced; any float dtype).
    mask: optional bool ``[..., n]``; False coordinates are forced to ``λ = 0``.
    lower, upper: optional bounds ``lower ≤ λ ≤ upper`` (broadcast to ``[..., n]``; may be traced), a box
      intersected with the simplex (clipped to ``[0, 1]``, so ``λ₀ ± ε`` may be passed as it is). Given
      concretely, they must satisfy ``lower ≤ upper`` and ``Σ lower ≤ 1 ≤ Σ upper`` over the unmasked
      coordinates (a one-line :class:`~fedalf_jax.errors.ConfigError` otherwise); traced bounds that do not
      (an empty box, or NaN) give ``λ = NaN`` and ``residual = inf`` for that problem, so a run's divergence
      check stops on it (no λ off the simplex is ever returned). Bounded
      problems are solved by FISTA projected exactly onto the box inside the simplex, then one KKT
      solve on the coordinates strictly inside the box (kept when feasible and better); ``method``
      must be ``"auto"`` or ``"pgd"`` (default ``maxiter`` 5000), and ``residual`` is the Frank–Wolfe
      gap over the box inside the simplex.
    method: ``"auto"`` (default: active up to 256 coordinates, pgd above), ``"active"`` (Wolfe's
      active-set algorithm), ``"osqp"`` (jaxopt BoxOSQP + polish) or ``"pgd"`` (FISTA). Static.
    maxiter: iteration limit (static; default ``2n + 20`` active-set steps, 1000 for osqp, 5000 for pgd).
    tol: tolerance in rescaled units (static; default 1e-5 for the osqp residuals; 1e-7 for pgd and
      active, which stop when the Frank–Wolfe gap is ≤ ``tol + 1e-5·λᵀQλ``).

  Returns:
    ``(lam, info)``: ``lam [..., n]`` on the simplex (zero where masked; zero everywhere if no
    coordinate is valid); ``info`` has ``iters`` (int32: the sequential loop trips of that problem's
    solve, active-set steps plus PGD steps; for osqp the batch shares one ADMM loop, so this is the
    shared ADMM count, without its inner CG steps, plus the per-problem polish steps) and ``residual`` (Frank–Wolfe gap of the rescaled problem), each of shape ``[...]``.
  """
  if method not in METHODS:
    raise ValueError(f"unknown method {method!r}; expected one of {', '.join(map(repr, METHODS))}")
  Q = jnp.asarray(Q)
  if Q.ndim < 2 or Q.shape[-1] != Q.shape[-2]:
    raise ValueError(f"Q must be a (batch of) square matrices [..., n, n]; got shape {Q.shape}")
  if not jnp.issubdtype(Q.dtype, jnp.floating):
    Q = Q.astype(jnp.float32)
  n = Q.shape[-1]
  batch = Q.shape[:-2]
  mask = jnp.ones(batch + (n,), bool) if mask is None else jnp.broadcast_to(mask, batch + (n,))
  if not isinstance(Q, jax.core.Tracer) and not isinstance(mask, jax.core.Tracer):
    used = mask[..., :, None] & mask[..., None, :]  # masked rows/columns are ignored, NaN allowed there
    if not bool(jnp.all(jnp.isfinite(Q) | ~used)):
      raise ValueError("Q holds NaN or ±inf in its unmasked entries; the QP needs a finite Gram matrix")
  if lower is not None or upper is not None:
    return _bounded(Q, mask, lower, upper, method, maxiter, tol)
  method = resolve_method(method, n)
  if maxiter is None:
    maxiter = {"osqp": 1000, "pgd": 5000, "active": 2 * n + 20}[method]
  if tol is None:
    tol = 1e-5 if method == "osqp" else 1e-7
  solve = _flat_solver(method, int(maxiter), float(tol))
  lam, it, res = solve(Q.reshape((-1, n, n)), mask.reshape((-1, n)).astype(bool))
  info = {"iters": it.reshape(batch), "residual": res.reshape(batch)}
  return lam.reshape(batch + (n,)), info


def _bounded(Q, mask, lower, upper, method, maxiter, tol):
  """``solve_simplex_qp_info`` with ``lower``/``upper`` (``Q``, ``mask`` already checked and broadcast)."""
  if method not in ("auto", "pgd"):
    raise ConfigError(f"solve_simplex_qp: method {method!r} does not take lower/upper bounds; use 'auto' or 'pgd'")
  n = Q.shape[-1]
  batch = Q.shape[:-2]
  lo = jnp.broadcast_to(jnp.zeros((), Q.dtype) if lower is None else jnp.asarray(lower, Q.dtype), batch + (n,))
  hi = jnp.broadcast_to(jnp.ones((), Q.dtype) if upper is None else jnp.asarray(upper, Q.dtype), batch + (n,))
  if not any(isinstance(a, jax.core.Tracer) for a in (lo, hi, mask)):
    a, b = jnp.clip(lo, 0.0, 1.0), jnp.clip(hi, 0.0, 1.0)
    if bool(jnp.any(jnp.isnan(lo) | jnp.isnan(hi))):
      raise ConfigError("solve_simplex_qp: lower/upper hold NaN; the bounds must be numbers (±inf allowed)")
    slo, shi, crossed, slack = _box_sums(a, b, mask)
    if bool(jnp.any(crossed)):
      j = int(jnp.argmax(jnp.reshape((a > b) & mask, (-1, n)).any(0)))
      raise ConfigError(f"solve_simplex_qp: lower exceeds upper at some coordinate (after clipping both to [0, 1]; "
                        f"first at index {j}); pass lower ≤ upper (λ₀ − ε and λ₀ + ε need ε ≥ 0)")
    high, low = bool(jnp.any(slo > 1.0 + slack)), bool(jnp.any(shi < 1.0 - slack))
    if high or low:
      fix = "lower the lower bounds" if high else "raise the upper bounds"
      raise ConfigError(f"solve_simplex_qp: the box is empty: sum(lower) ≤ 1 ≤ sum(upper) is needed over the unmasked "
                        f"coordinates; got sums {float(jnp.max(slo)):.6g} and {float(jnp.min(shi)):.6g}; {fix}")
  solve = _box_solver(5000 if maxiter is None else int(maxiter), 1e-7 if tol is None else float(tol))
  lam, it, res = solve(Q.reshape((-1, n, n)), mask.reshape((-1, n)).astype(bool), lo.reshape((-1, n)),
                       hi.reshape((-1, n)))
  return lam.reshape(batch + (n,)), {"iters": it.reshape(batch), "residual": res.reshape(batch)}


@functools.lru_cache(maxsize=None)
def _flat_solver(method, maxiter, tol):
  """``_solve_flat`` with a vmap rule that folds vmapped axes into the flat batch.

  So ``jax.vmap`` of a solve (e.g. of a whole vmapped server step) is still one batched solve
  (one shared ADMM loop) instead of jaxopt's loop under vmap, which is slow.
  """

  @jax.custom_batching.custom_vmap
  def solve(Q, mask):
    return _solve_flat(Q, mask, method=method, maxiter=maxiter, tol=tol)

  @solve.def_vmap
  def _rule(axis_size, in_batched, Q, mask):
    if not in_batched[0]:
      Q = jnp.broadcast_to(Q, (axis_size,) + Q.shape)
    if not in_batched[1]:
      mask = jnp.broadcast_to(mask, (axis_size,) + mask.shape)
    B, n = mask.shape[1:]
    lam, it, res = solve(Q.reshape((-1, n, n)), mask.reshape((-1, n)))
    out = (lam.reshape((axis_size, B, n)), it.reshape((axis_size, B)), res.reshape((axis_size, B)))
    return out, (True, True, True)

  return jax.jit(solve)


def _solve_flat(Q, mask, *, method, maxiter, tol):
  """The solver on a flat batch ``Q [B, n, n]``, ``mask [B, n]``; returns (lam, iters, residual)."""
  Qs, ms, any_valid = jax.vmap(_prepare)(Q, mask)
  score = jax.vmap(_gap_score, (0, 0, 0, None))
  if method == "pgd":
    lam, it = jax.vmap(lambda q, k: _solve_pgd(q, k, maxiter, tol))(Qs, ms)
  elif method == "active":
    # Each problem's loops run on their own (vmapped while loops: a finished problem is frozen), so a
    # problem's result does not depend on the rest of the batch.
    uni = jax.vmap(_uniform, (0, None))(ms, Qs.dtype)
    lam, it = jax.vmap(lambda q, k, x: _solve_active(q, k, x, maxiter, tol))(Qs, ms, uni)
    bad = ~(score(Qs, lam, ms, tol) <= 1.0)
    lam, it_pgd = jax.vmap(lambda q, k, x, a: _solve_pgd(q, k, _FALLBACK_PGD, tol, x, a))(Qs, ms, lam, bad)
    it = it + it_pgd
  else:
    lam, it = _solve_osqp_batch(Qs, ms, maxiter, tol)
    # The ADMM output is a warm start: a non-finite or grossly infeasible one (float32 ADMM can
    # blow up on near-singular Q) is replaced by the uniform point; the rest is clipped to the box
    # (so the projection sees bounded numbers) and projected onto the simplex.
    warm = jnp.all(jnp.isfinite(lam) & (lam >= -_WARM_BOX) & (lam <= 1.0 + _WARM_BOX), -1)
    uni = jax.vmap(_uniform, (0, None))(ms, Qs.dtype)
    lam = jax.vmap(_project)(jnp.clip(jnp.where(warm[:, None], lam, uni), 0.0, 1.0), ms)
    # Check of the result: a poor one is polished by the active-set loop, then (if still poor) by
    # PGD from the best point; the loops do not iterate for good results.
    bad = ~(score(Qs, lam, ms, _POLISH_TOL) <= 1.0)
    n = Qs.shape[-1]
    lam, it_as = jax.vmap(lambda q, k, x, a: _solve_active(q, k, x, 4 * n + 20, _POLISH_TOL, a))(
        Qs, ms, lam, bad)
    bad = ~(score(Qs, lam, ms, _POLISH_TOL) <= 1.0)
    lam, it_pgd = jax.vmap(lambda q, k, x, a: _solve_pgd(q, k, 4 * maxiter, _POLISH_TOL, x, a))(
        Qs, ms, lam, bad)
    it = it + it_as + it_pgd
  # Last resort (not reached for finite Q): never hand out a non-finite λ; the residual below is
  # that of the returned point, so a poor fallback shows there.
  lam = jnp.where(jnp.all(jnp.isfinite(lam), -1, keepdims=True), lam,
                  jax.vmap(_uniform, (0, None))(ms, Qs.dtype))
  lam = jnp.where(any_valid[:, None], lam, 0.0)
  res = jnp.where(any_valid, simplex_gap(Qs, lam, ms), 0.0)
  return lam, it.astype(jnp.int32), res


def solve_simplex_qp(Q, mask=None, *, lower=None, upper=None, method="auto", maxiter=None, tol=None):
  """``argmin_{λ≥0, Σλ=1, lower≤λ≤upper} ½λᵀQλ`` batched over the leading axes of ``Q`` (``[..., n, n]``).

  See :func:`solve_simplex_qp_info`; this returns only ``λ``.
  """
  return solve_simplex_qp_info(Q, mask, lower=lower, upper=upper, method=method, maxiter=maxiter, tol=tol)[0]
