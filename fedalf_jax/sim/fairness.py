"""The fair direction of FedLF / FedALF (docs/algorithms.md §3.2, steps 1–6), computed from Gram matrices.

Every quantity comes from the per-layer raw Gram matrices ``R_L = Δ_L Δ_Lᵀ`` over the raw rows
(the ``m`` online clients, then the ``H`` history slots): norms are diagonals, normalisation is a
diagonal scaling, the fair row is a linear combination of client rows, and a merged block's Gram is
the sum of its layers' Grams. The QP rows of a block are ``[ĝ_1..ĝ_m; f; h_1..h_H]``, expressed as a
matrix ``T`` (rows × raw rows) applied to the raw rows; the direction of a layer is the coefficient
vector ``μ_B Tᵀλ_B`` over the raw rows applied to the stacked ``Δ`` (one einsum per leaf).

Degenerate rows are excluded from the QP (``λ = 0``) rather than producing NaNs: zero-norm client or
history rows of a block, masked history rows, and the fair row when it is zero or numerically
undefined (all losses equal, or ``Σ c_i ĝ_i`` cancels to float noise).

Merge test (step 4): a block is "zero" when the QP certifies that the minimum norm of the hull of its
normalised rows can be ``≤ merge_tol · μ``: with ``a = Q̂λ`` (``Q̂`` the Gram of the rows divided by
``μ²``) the weak-duality bound ``‖d*‖/μ ≥ min_j a_j / sqrt(λᵀQ̂λ)`` is used, i.e. the block merges
when ``min_j a_j ≤ merge_tol · sqrt(λᵀQ̂λ) + slack`` with ``slack = 100 · eps(dtype)`` (rounding of
the Gram). Exact-zero hulls (e.g. a 1-wide layer with entries of both signs) always merge; in
float32 blocks whose true min-norm is below ~3e-3·μ also merge (harmless: merged blocks still give
a direction that conflicts with no client).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from .batching import per_run
from .qp import resolve_method, solve_simplex_qp_info

__all__ = ["fair_direction", "fair_weights", "module_layers", "tensor_layers", "update_history_gram"]

_HI = jax.lax.Precision.HIGHEST
_FALLBACK_TOL = 1e-6  # step 6: max_i(−Δ_i·d) above this after rescaling → unscaled direction


# ----------------------------------------------------------------------------------------------
# Layer maps


def tensor_layers(params):
  """Each leaf its own layer, ids ``0..n-1`` in ``jax.tree_util`` leaf order."""
  leaves, treedef = jax.tree_util.tree_flatten(params)
  return jax.tree_util.tree_unflatten(treedef, list(range(len(leaves))))


def module_layers(params):
  """One layer id per module (the dict holding the leaf), in order of first appearance.

  ``{'Conv_0': {'bias', 'kernel'}, 'Dense_0': {...}}`` → Conv_0 leaves 0, Dense_0 leaves 1.
  """
  paths_leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
  ids, seen = [], {}
  for path, _ in paths_leaves:
    key = tuple(str(p) for p in path[:-1]) if len(path) > 1 else ("leaf", str(path))
    ids.append(seen.setdefault(key, len(seen)))
  return jax.tree_util.tree_unflatten(treedef, ids)


# ----------------------------------------------------------------------------------------------
# Step 1


def fair_weights(losses):
  """Weights ``c`` of ``P(l) = −cos(l, 1)``: ``c = (l·p) l/‖l‖³ − p/‖l‖``, ``p = 1/√m``.

  ``Σ_i c_i ∇l_i = ∇P``. Returns zeros when ``l = 0``.
  """
  losses = jnp.asarray(losses)
  m = losses.shape[-1]
  p = jnp.full_like(losses, 1.0 / np.sqrt(m))
  nl = jnp.linalg.norm(losses)
  safe = jnp.where(nl > 0, nl, 1.0)
  lh = losses / safe
  return jnp.where(nl > 0, (jnp.dot(lh, p) * lh - p) / safe, 0.0)


# ----------------------------------------------------------------------------------------------
# Helpers


def _rows(x):
  """``x [r, ...]`` as the matrix ``[r, D]`` (a free reshape of a row-major leaf)."""
  return x.reshape(x.shape[0], -1)


def _gram(a, b):
  """``[r, s]``: ⟨a_i, b_j⟩ over every axis but the first. One 2-D matmul: XLA:CPU ran the same contraction
  written as ``einsum("i...,j...->ij")`` over a conv kernel's four axes at about half the speed (a CNN's
  cross Gram against 100 history rows: 221 ms against 122 ms, ``/tmp``-free microbenchmark in
  docs/lab/benchmarks.md)."""
  return jnp.matmul(_rows(a), _rows(b).T, precision=_HI)


def _combine(w, x):
  """``Σ_i w_i x_i`` for ``x [r, ...]``, as a ``[r] · [r, D]`` product."""
  return jnp.matmul(w, _rows(x), precision=_HI).reshape(x.shape[1:])


def _layer_grams(deltas_leaves, hist_leaves, ids, K, history_gram):
  """Per-layer raw Grams over the raw rows (clients, then history), summed over each layer's leaves.

  Returns ``(R [K, r, r], cc [K, m, m], ch [K, m, H] or None)``. With ``history_gram`` ``[K, H, H]``
  (the history rows' own Gram, kept across rounds) the ``H²·D`` history block is not recomputed.
  """
  m = deltas_leaves[0].shape[0]
  dtype = deltas_leaves[0].dtype
  H = 0 if hist_leaves is None else hist_leaves[0].shape[0]
  cc = [jnp.zeros((m, m), dtype) for _ in range(K)]
  ch = [jnp.zeros((m, H), dtype) for _ in range(K)]
  hh = [jnp.zeros((H, H), dtype) for _ in range(K)]
  for i, (a, k) in enumerate(zip(deltas_leaves, ids)):
    cc[k] = cc[k] + _gram(a, a)
    if H:
      h = hist_leaves[i]
      ch[k] = ch[k] + _gram(a, h)
      if history_gram is None:
        hh[k] = hh[k] + _gram(h, h)
  cc = jnp.stack(cc)
  if not H:
    return cc, cc, None
  ch = jnp.stack(ch)
  hh = jnp.stack(hh) if history_gram is None else history_gram.astype(dtype)
  R = jnp.concatenate([jnp.concatenate([cc, ch], axis=2),
                       jnp.concatenate([jnp.swapaxes(ch, 1, 2), hh], axis=2)], axis=1)
  return R, cc, ch


def update_history_gram(history_gram, sel, info):
  """The history rows' Gram after the rows ``sel`` are replaced by this round's ``Δ`` (no ``D``-sized work).

  Uses the Grams that :func:`fair_direction` already formed (``info['client_gram']`` = Δ·Δᵀ and
  ``info['cross_gram']`` = Δ·hᵀ against the history rows it was given), so a caller that keeps the history
  Gram in its state pays ``m·H·D`` per round instead of ``H²·D``. The columns ``sel`` of the cross Gram are
  replaced by the client Gram, so the rows ``sel`` may hold the old rows or (as FedLF's server passes them,
  having stored this round's ``Δ`` first) the new ones.
  """
  cross = info["cross_gram"].at[:, :, sel].set(info["client_gram"])  # [K, m, H]: Δ_sel · h_new
  g = history_gram.at[:, sel, :].set(cross)
  return g.at[:, :, sel].set(jnp.swapaxes(cross, 1, 2))


def _block_qps(R, bid, c, hmask, m, merge_tol, qp_method):
  """QPs of all blocks for the layer→block map ``bid`` (block id = its first layer).

  Returns ``(w [K, r], lam [K, n_rows], nonempty, zero, iters, residual)`` indexed by block id;
  ``w`` are the coefficients over raw rows of the (unscaled) block direction ``d_B = w_B·Δ_B``.
  """
  K, r, _ = R.shape
  dtype = R.dtype
  H = r - m
  tiny = jnp.finfo(dtype).tiny
  slack = 100.0 * jnp.finfo(dtype).eps
  RB = jax.ops.segment_sum(R, bid, num_segments=K)  # [K, r, r]
  nonempty = jax.ops.segment_sum(jnp.ones((K,), jnp.int32), bid, num_segments=K) > 0
  n2 = jnp.diagonal(RB, axis1=1, axis2=2)  # [K, r]
  norms = jnp.sqrt(jnp.maximum(n2, 0.0))
  row_ok = n2 > tiny
  if H:
    row_ok = row_ok.at[:, m:].set(row_ok[:, m:] & hmask)
  inv = jnp.where(row_ok, 1.0 / jnp.where(row_ok, norms, 1.0), 0.0)  # unit-row scaling
  mu = jnp.mean(norms[:, :m], axis=1)  # [K]
  # Fair row (unit norm): f̂ = Σ c_i ĝ_i / ‖Σ c_i ĝ_i‖, with ĝ_i unit client rows.
  a = c[None, :] * inv[:, :m]  # [K, m] coefficients over raw client rows
  f2 = jnp.einsum("ki,kij,kj->k", a, RB[:, :m, :m], a, precision=_HI)
  cn = jnp.sum(jnp.abs(c[None, :]) * row_ok[:, :m], axis=1)
  f_ok = (f2 > slack * cn * cn) & (f2 > tiny)
  a = jnp.where(f_ok[:, None], a / jnp.sqrt(jnp.where(f_ok, f2, 1.0))[:, None], 0.0)
  # T: [K, n_rows = m + 1 + H, r]
  eye = jnp.eye(r, dtype=dtype)
  Tc = inv[:, :m, None] * eye[None, :m, :]
  Tf = jnp.concatenate([a, jnp.zeros((K, H), dtype)], axis=1)[:, None, :]
  Th = inv[:, m:, None] * eye[None, m:, :]
  T = jnp.concatenate([Tc, Tf, Th], axis=1)
  valid = jnp.concatenate([row_ok[:, :m], f_ok[:, None], row_ok[:, m:]], axis=1)
  Qh = jnp.einsum("kar,krs,kbs->kab", T, RB, T, precision=_HI)
  lam, info = solve_simplex_qp_info(Qh, valid, method=qp_method)
  w = mu[:, None] * jnp.einsum("kar,ka->kr", T, lam, precision=_HI)
  # Merge certificate (see module docstring).
  g = jnp.einsum("kab,kb->ka", Qh, lam, precision=_HI)
  dd = jnp.maximum(jnp.sum(lam * g, axis=1), 0.0)
  gmin = jnp.min(jnp.where(valid, g, jnp.inf), axis=1)
  zero = nonempty & ((mu <= tiny) | (gmin <= merge_tol * jnp.sqrt(dd) + slack))
  return w, lam, nonempty, zero, info["iters"], info["residual"]


def _merge_once(bid, nonempty, zero):
  """Merges the first zero block with the next block (the previous one if it is the last)."""
  K = bid.shape[0]
  idx = jnp.arange(K)
  s = jnp.argmax(zero)  # first zero block
  nxt = jnp.min(jnp.where(nonempty & (idx > s), idx, K))
  prv = jnp.max(jnp.where(nonempty & (idx < s), idx, -1))
  keep, drop = jnp.where(nxt < K, s, prv), jnp.where(nxt < K, nxt, s)
  return jnp.where(bid == drop, keep, bid)


# ----------------------------------------------------------------------------------------------
# Main entry point


def fair_direction(deltas, losses, *, layer_of=None, history=None, history_mask=None, history_gram=None,
                   merge_tol=1e-6, qp_method="auto", num_layers=None, noise_sq=None):
  """Fair direction ``d`` of docs/algorithms.md §3.2 steps 1–6 (gradient sign, already rescaled).

  Args:
    deltas: pytree whose leaves have a leading client axis ``m`` (pseudo-gradients ``Δ_i``).
    losses: ``[m]`` losses of the online clients.
    layer_of: pytree like one client's tree with int leaves (static layer ids ``0..K-1``);
      default: each leaf its own layer (see :func:`tensor_layers`, :func:`module_layers`).
    history: optional pytree like ``deltas`` with leading axis ``H`` (history rows).
    history_mask: ``[H]`` bool, True = row included (default all True). Rows must be finite.
    history_gram: optional ``[K, H, H]`` per-layer Gram of the history rows among themselves (all
      ``H`` rows, unmasked), kept across rounds with :func:`update_history_gram`; saves ``H²·D``.
    merge_tol: step 4 threshold (static).
    qp_method: ``"auto"``, ``"osqp"`` or ``"pgd"`` (static), see :mod:`fedalf_jax.sim.qp`.
    num_layers: static number of layers ``K`` (default ``max(layer_of) + 1``).
    noise_sq: optional scalar ``Σ_i Var Δ̃_i`` (summed over every value) of privacy noise in the rows:
      step 5 then rescales to ``sqrt(max(‖Σ_i Δ̃_i‖² − noise_sq, 0))/m``, an estimate of the noise-free
      ``‖mean_i Δ_i‖`` (``E‖Σ Δ̃_i‖² = ‖Σ Δ_i‖² + Σ_i Var Δ̃_i`` for independent zero-mean noise).

  Returns:
    ``(d, info)``: ``d`` a pytree like one client's tree; ``info`` a dict with ``model_conflicts``
    (#i with Δ_i·d < 0), ``layer_conflicts`` (#(i, layer) with Δ_{i,L}·d_L < 0), ``qp_iters`` (the
    sequential loop trips of steps 2–4: per merge step one trip plus the slowest block's solver
    iterations, summed over the merge steps), ``qp_residual`` (max over final blocks), ``num_blocks``, ``fallback`` (step 6 triggered),
    ``block_of_layer`` ``[K]`` and ``lambdas`` ``[K, m + 1 + H]`` (per layer, its block's λ over
    rows: clients, fair row, history), ``client_gram`` ``[K, m, m]`` and, with history,
    ``cross_gram`` ``[K, m, H]`` (the raw per-layer Grams, for :func:`update_history_gram`).
  """
  leaves, treedef = jax.tree_util.tree_flatten(deltas)
  if layer_of is None:
    ids = tuple(range(len(leaves)))
  else:
    ids = tuple(int(i) for i in jax.tree_util.tree_leaves(layer_of))
    if len(ids) != len(leaves):
      raise ValueError(f"layer_of has {len(ids)} leaves, deltas has {len(leaves)}")
  K = int(num_layers) if num_layers is not None else max(ids) + 1
  if min(ids) < 0 or max(ids) >= K:
    raise ValueError(f"layer ids must lie in [0, {K})")
  # Canonical dtypes outside the jit (a weakly typed input would otherwise trigger a recompile).
  dtype = jnp.result_type(*leaves, jnp.float32)
  leaves = [jnp.asarray(x, dtype) for x in leaves]
  losses = jnp.asarray(losses, dtype)
  m = {x.shape[0] if x.ndim else None for x in leaves}
  if len(m) != 1 or None in m:
    raise ValueError(f"every leaf of deltas needs the same leading client axis; got leading sizes "
                     f"{sorted(str(x.shape[:1]) for x in leaves)}")
  m = m.pop()
  if losses.shape != (m,):
    raise ValueError(f"losses must have shape ({m},), one per client row of deltas; got {losses.shape}")
  hist_leaves = None
  if history is not None:
    hist_leaves = [jnp.asarray(x, dtype) for x in treedef.flatten_up_to(history)]
    for x, h in zip(leaves, hist_leaves):
      if h.ndim < 1 or h.shape[1:] != x.shape[1:] or h.shape[0] != hist_leaves[0].shape[0]:
        raise ValueError(f"history leaves must be [H, ...] like the deltas' [{m}, ...] leaves with one H; got "
                         f"{h.shape} for a {x.shape} leaf")
    if history_mask is not None:
      history_mask = jnp.asarray(history_mask, bool)
  elif history_gram is not None:
    raise ValueError("history_gram was given without history rows")
  noise_sq = jnp.zeros((), dtype) if noise_sq is None else jnp.asarray(noise_sq, dtype)
  d_leaves, info = _fair_direction_leaves(leaves, losses, hist_leaves, history_mask, history_gram, noise_sq, ids=ids,
                                          num_layers=K, merge_tol=float(merge_tol),
                                          qp_method=qp_method)
  return jax.tree_util.tree_unflatten(treedef, d_leaves), info


@functools.partial(jax.jit, static_argnames=("ids", "num_layers", "merge_tol", "qp_method"))
def _fair_direction_leaves(leaves, losses, hist_leaves, history_mask, history_gram, noise_sq, *, ids, num_layers,
                           merge_tol, qp_method):
  """:func:`fair_direction` on flat leaf lists (jitted, so eager calls hit the compile cache).

  Three phases: the Grams (the ``D``-sized work, plain matmuls), the coefficients of ``d`` over the
  rows (steps 1–6 from the Grams alone: ``[K, r]``-sized) and their application to the rows (``D``-sized
  again). Under ``jax.vmap`` (a sweep) every phase is batched: the QPs of all runs and all layers are one
  batch whose solver loops are per problem (a finished problem is frozen), so the server's sequential
  depth is that of its slowest run, not the sum over runs. With ``qp_method="osqp"`` (one ADMM loop
  shared by its batch) the middle phase runs once per run instead (:func:`per_run`), so that runs do
  not share a loop.
  """
  m = leaves[0].shape[0]
  H = 0 if hist_leaves is None else hist_leaves[0].shape[0]
  if hist_leaves is None:
    hmask = jnp.ones((0,), bool)
  else:
    hmask = jnp.ones((H,), bool) if history_mask is None else history_mask.reshape((H,))
  R, cc, ch = _layer_grams(leaves, hist_leaves, ids, num_layers, history_gram)
  coefficients = functools.partial(_coefficients, m=m, merge_tol=merge_tol, qp_method=qp_method)
  if resolve_method(qp_method, R.shape[-1] + 1) == "osqp":
    coefficients = per_run(coefficients)  # one ADMM loop per run: a shared one would couple the runs
  W, info = coefficients(R, losses.reshape((m,)), hmask, noise_sq)
  d_leaves = []
  for i, (x, k) in enumerate(zip(leaves, ids)):
    d = _combine(W[k, :m], x)
    if H:
      d = d + _combine(W[k, m:], hist_leaves[i])
    d_leaves.append(d)
  info["client_gram"] = cc
  if H:
    info["cross_gram"] = ch
  return d_leaves, info


def _coefficients(R, losses, hmask, noise_sq, *, m, merge_tol, qp_method):
  """Steps 1–6 from the per-layer raw Grams ``R [K, r, r]``: the coefficients ``W [K, r]`` of the
  (rescaled) direction over the raw rows, ``d_L = W_L · rows``, and the info dict."""
  K = R.shape[0]
  dtype = R.dtype
  if hmask.shape[0]:  # masked history rows zeroed: they affect nothing
    ok = jnp.concatenate([jnp.ones((m,), bool), hmask])
    R = jnp.where(ok[None, :, None] & ok[None, None, :], R, 0.0)

  c = fair_weights(losses)
  slack = 100.0 * jnp.finfo(dtype).eps
  c_ok = jnp.linalg.norm(c) * jnp.linalg.norm(losses) > slack  # sin∠(l, 1) above float noise
  c = jnp.where(c_ok, c, 0.0)

  # Steps 2–4: QPs of all blocks, merging zero blocks one at a time (≤ K−1 merges).
  def solve(bid):
    return _block_qps(R, bid, c, hmask, m, merge_tol, qp_method)

  def cond(st):
    return st[0]

  def body(st):
    _, bid, _, trips = st
    out = solve(bid)
    _, _, nonempty, zero, iters, _ = out
    more = jnp.any(zero) & (jnp.sum(nonempty) > 1)
    # the solves of all blocks run side by side: this step's depth is the slowest block's
    trips = trips + 1 + jnp.max(jnp.where(nonempty, iters, 0))
    return more, jnp.where(more, _merge_once(bid, nonempty, zero), bid), out, trips

  bid0 = jnp.arange(K)
  out0 = jax.eval_shape(solve, bid0)
  out0 = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), out0)
  _, bid, (w, lam, nonempty, _, iters, resid), trips = jax.lax.while_loop(
      cond, body, (jnp.array(True), bid0, out0, jnp.zeros((), jnp.int32)))

  # Step 5/6 from the Grams: per-layer coefficients, dots and norms.
  W = w[bid]  # [K, r]
  P = jnp.einsum("krs,ks->kr", R, W, precision=_HI)[:, :m]  # Δ_{i,L}·d_L  [K, m]
  dots = jnp.sum(P, axis=0)  # Δ_i·d
  d_norm = jnp.sqrt(jnp.maximum(jnp.sum(W * jnp.einsum("krs,ks->kr", R, W, precision=_HI)), 0.0))
  mean_norm = jnp.sqrt(jnp.maximum(jnp.sum(R[:, :m, :m]) - noise_sq, 0.0)) / m
  scale = jnp.where(d_norm > 0, mean_norm / jnp.where(d_norm > 0, d_norm, 1.0), 1.0)
  fallback = jnp.max(-scale * dots) > _FALLBACK_TOL
  factor = jnp.where(fallback, 1.0, scale)
  info = {
      "model_conflicts": jnp.sum(factor * dots < 0).astype(jnp.int32),
      "layer_conflicts": jnp.sum(factor * P < 0).astype(jnp.int32),
      "qp_iters": trips,
      "qp_residual": jnp.max(jnp.where(nonempty, resid, 0.0)),
      "num_blocks": jnp.sum(nonempty).astype(jnp.int32),
      "fallback": fallback,
      "block_of_layer": bid,
      "lambdas": lam[bid],
  }
  return factor * W, info
