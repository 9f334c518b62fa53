"""Tests of fedalf_jax.sim.fairness against an independent float64 NumPy implementation of docs/algorithms.md §3.2."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedalf_jax.sim.fairness import fair_direction, fair_weights, module_layers, tensor_layers
from reference import min_norm_simplex_qp

# ------------------------------------------------------------------------------------------------
# float64 reference, written from the spec (flat vectors per layer, explicit rows)


def ref_simplex_qp(V):
  """Minimum-norm point of conv(rows of V) (float64); returns λ."""
  return min_norm_simplex_qp(V @ V.T)


def ref_fair_direction(leaves, losses, layer_ids, hist=None, hmask=None, merge_tol=1e-6):
  """§3.2 steps 1–6 in float64. ``leaves``: list of [m, ...]; returns (d leaves, info dict)."""
  m = leaves[0].shape[0]
  K = max(layer_ids) + 1
  l = np.asarray(losses, np.float64)
  p = np.ones(m) / np.sqrt(m)
  nl = np.linalg.norm(l)
  c = (l @ p) * l / nl**3 - p / nl  # step 1
  X = [np.asarray(x, np.float64).reshape(m, -1) for x in leaves]
  Hx = None if hist is None else [np.asarray(h, np.float64).reshape(h.shape[0], -1) for h in hist]

  def block_direction(layers):
    cols = [i for i, k in enumerate(layer_ids) if k in layers]
    D = np.concatenate([X[i] for i in cols], axis=1)  # [m, dim]
    norms = np.linalg.norm(D, axis=1)
    mu = norms.mean()
    if mu == 0:
      return np.zeros(D.shape[1]), 0.0, None
    rows, ghat = [], np.zeros_like(D)
    for i in range(m):
      if norms[i] > 0:  # zero rows are excluded
        ghat[i] = D[i] * mu / norms[i]
        rows.append(ghat[i])
    f = c @ ghat
    if np.linalg.norm(f) > 1e-9 * np.abs(c).sum() * mu:  # a zero fair row is excluded
      rows.append(f * mu / np.linalg.norm(f))
    if Hx is not None:
      Hd = np.concatenate([Hx[i] for i in cols], axis=1)
      for k in range(Hd.shape[0]):
        nk = np.linalg.norm(Hd[k])
        if hmask[k] and nk > 0:
          rows.append(Hd[k] * mu / nk)
    V = np.stack(rows)
    lam = ref_simplex_qp(V)
    return lam @ V, mu, lam

  blocks = [[k] for k in range(K)]
  while True:
    dirs = [block_direction(b) for b in blocks]
    zero = [np.linalg.norm(d) <= merge_tol * mu for d, mu, _ in dirs]
    if not any(zero) or len(blocks) == 1:
      break
    b = zero.index(True)
    t = b + 1 if b + 1 < len(blocks) else b - 1
    lo, hi = min(b, t), max(b, t)
    blocks = blocks[:lo] + [blocks[lo] + blocks[hi]] + blocks[hi + 1:]
  # Concatenate into per-leaf pieces.
  d_leaf = [None] * len(leaves)
  for blk, (d, _, _) in zip(blocks, dirs):
    cols = [i for i, k in enumerate(layer_ids) if k in blk]
    off = 0
    for i in cols:
      size = X[i].shape[1]
      d_leaf[i] = d[off:off + size]
      off += size
  dflat = np.concatenate(d_leaf)
  Xall = np.concatenate(X, axis=1)
  target = np.linalg.norm(Xall.mean(0))
  scaled = dflat * target / np.linalg.norm(dflat)  # step 5
  fallback = np.max(-(Xall @ scaled)) > 1e-6  # step 6
  dfin = dflat if fallback else scaled
  out, off = [], 0
  for i, x in enumerate(leaves):
    out.append(dfin[off:off + X[i].shape[1]].reshape(x.shape[1:]))
    off += X[i].shape[1]
  # Conflicts.
  dots = Xall @ dfin
  layer_dots = np.zeros((K, m))
  off = 0
  for i, k in enumerate(layer_ids):
    layer_dots[k] += X[i] @ dfin[off:off + X[i].shape[1]]
    off += X[i].shape[1]
  info = dict(model_conflicts=int((dots < 0).sum()), layer_conflicts=int((layer_dots < 0).sum()),
              num_blocks=len(blocks), fallback=bool(fallback), dots=dots, layer_dots=layer_dots)
  return out, info


# ------------------------------------------------------------------------------------------------
# Helpers

SHAPES = {"Conv_0": {"kernel": (3, 3, 1, 4), "bias": (4,)},
          "Dense_0": {"kernel": (16, 5), "bias": (5,)},
          "Dense_1": {"kernel": (5, 1), "bias": (1,)}}


TEMPLATE = {mod: {k: np.zeros(s, np.float32) for k, s in sub.items()} for mod, sub in SHAPES.items()}


def random_tree(rng, lead, shapes=SHAPES, scales=None):
  scales = scales or {}
  return {mod: {k: (scales.get(mod, 1.0) * rng.normal(size=(lead,) + s)).astype(np.float32)
                for k, s in sub.items()} for mod, sub in shapes.items()}


def leaves_of(tree):
  return jax.tree_util.tree_leaves(tree)


def compare(deltas, losses, layer_of, history=None, hmask=None, merge_tol=1e-6, qp_method="osqp",
            rtol=1e-3):
  ids = leaves_of(layer_of)
  ref_d, ref_info = ref_fair_direction(
      leaves_of(deltas), losses, ids, None if history is None else leaves_of(history), hmask,
      merge_tol)
  d, info = fair_direction(deltas, jnp.asarray(losses, jnp.float32),
                           layer_of=layer_of, history=history, merge_tol=merge_tol,
                           qp_method=qp_method,
                           history_mask=None if hmask is None else jnp.asarray(hmask))
  dl = [np.asarray(x) for x in leaves_of(d)]
  total = np.sqrt(sum(np.sum(r**2) for r in ref_d))
  for got, want in zip(dl, ref_d):
    assert got.shape == want.shape
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * total)
  assert int(info["num_blocks"]) == ref_info["num_blocks"]
  assert bool(info["fallback"]) == ref_info["fallback"]
  # Conflict counts (pairs whose reference dot is at the float32 noise level are not counted).
  robust = np.abs(ref_info["dots"]) > 1e-4 * np.abs(ref_info["dots"]).max()
  if robust.all():
    assert int(info["model_conflicts"]) == ref_info["model_conflicts"]
  ld = ref_info["layer_dots"]
  if np.all(np.abs(ld) > 1e-4 * np.abs(ld).max()):
    assert int(info["layer_conflicts"]) == ref_info["layer_conflicts"]
  return d, info, ref_d, ref_info


# ------------------------------------------------------------------------------------------------
# Tests


def test_layer_maps():
  tree = {"Conv_0": {"bias": 0, "kernel": 0}, "Dense_0": {"bias": 0, "kernel": 0}}
  assert module_layers(tree) == {"Conv_0": {"bias": 0, "kernel": 0},
                                 "Dense_0": {"bias": 1, "kernel": 1}}
  assert tensor_layers(tree) == {"Conv_0": {"bias": 0, "kernel": 1},
                                 "Dense_0": {"bias": 2, "kernel": 3}}
  nested = {"params": {"a": {"kernel": 0}, "b": {"bias": 0, "kernel": 0}}}
  assert leaves_of(module_layers(nested)) == [0, 1, 1]


@pytest.mark.parametrize("qp_method", ["osqp", "pgd"])
def test_matches_reference_module_layers(qp_method):
  rng = np.random.default_rng(0)
  m = 6
  deltas = random_tree(rng, m, scales={"Conv_0": 0.1, "Dense_0": 1.0, "Dense_1": 5.0})
  losses = rng.uniform(0.5, 3.0, size=m)
  _, info, _, ref = compare(deltas, losses, module_layers(TEMPLATE), qp_method=qp_method)
  assert ref["num_blocks"] == 3 and int(info["model_conflicts"]) == 0
  assert float(info["qp_residual"]) < 1e-4 and int(info["qp_iters"]) > 0


def test_history_with_mask():
  rng = np.random.default_rng(1)
  m, H = 5, 7
  deltas = random_tree(rng, m)
  history = random_tree(rng, H)
  hmask = np.array([1, 0, 1, 1, 0, 0, 1], bool)
  for leaf in leaves_of(history):  # masked rows must not matter (huge entries)
    leaf[~hmask] *= 1e3
  losses = rng.uniform(0.5, 3.0, size=m)
  layer_of = module_layers(TEMPLATE)
  d, info, _, _ = compare(deltas, losses, layer_of, history, hmask, qp_method="pgd")
  lam = np.asarray(info["lambdas"])  # [K, m + 1 + H]
  assert lam.shape == (3, m + 1 + H)
  assert np.all(lam[:, m + 1:][:, ~hmask] == 0)


def test_merges_under_jit_with_default_layers():
  # Default layer_of: every tensor its own layer, in leaf order: Conv_0/bias 0, Conv_0/kernel 1,
  # Dense_0/bias 2, Dense_0/kernel 3, Dense_1/bias 4, Dense_1/kernel 5.
  # Conv_0/bias (first) and Dense_1/kernel (last) get rows whose normalised hull contains 0:
  # layer 0 merges with the next layer, layer 5 (the last) with the previous one.
  rng = np.random.default_rng(2)
  m = 5
  deltas = random_tree(rng, m)
  v, u = rng.normal(size=4), rng.normal(size=4)
  deltas["Conv_0"]["bias"][:] = np.stack([v, -2 * v, u, -0.5 * u, v + u])
  a, b = rng.normal(size=5), rng.normal(size=5)
  deltas["Dense_1"]["kernel"][:, :, 0] = np.stack([a, -a, 3 * b, -b, a - b])
  deltas["Dense_1"]["bias"][:] = np.abs(deltas["Dense_1"]["bias"]) + 0.1  # one sign: not zero
  losses = jnp.asarray(rng.uniform(0.5, 3.0, size=m), jnp.float32)
  d, info = jax.jit(fair_direction)(deltas, losses)  # deltas and losses traced
  K = 6
  ref_d, ref = ref_fair_direction(leaves_of(deltas), np.asarray(losses), list(range(K)))
  assert ref["num_blocks"] == K - 2 and int(info["num_blocks"]) == K - 2
  assert np.asarray(info["block_of_layer"]).tolist() == [0, 0, 2, 3, 4, 4]
  total = np.sqrt(sum(np.sum(r**2) for r in ref_d))
  for got, want in zip(leaves_of(d), ref_d):
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * total)
  assert bool(info["fallback"]) == ref["fallback"] == False  # noqa: E712
  # Merged layers conflict with some clients at layer level, never at model level.
  assert int(info["layer_conflicts"]) == ref["layer_conflicts"] > 0
  assert int(info["model_conflicts"]) == ref["model_conflicts"] == 0
  # Rescaled to ‖mean Δ‖ (step 5).
  norm = np.sqrt(sum(np.sum(np.asarray(x, np.float64) ** 2) for x in leaves_of(d)))
  target = np.linalg.norm(np.concatenate([x.reshape(m, -1) for x in leaves_of(deltas)], 1).mean(0))
  np.testing.assert_allclose(norm, target, rtol=1e-4)


def test_fair_weights_gradient_identity():
  rng = np.random.default_rng(3)
  l = rng.uniform(0.5, 3.0, size=7)

  def P(x):
    return -np.dot(x, np.ones_like(x)) / (np.linalg.norm(x) * np.sqrt(len(x)))

  eps = 1e-6
  grad = np.array([(P(l + eps * e) - P(l - eps * e)) / (2 * eps) for e in np.eye(len(l))])
  c = np.asarray(fair_weights(jnp.asarray(l, jnp.float32)), np.float64)
  # Σ_i c_i ∇l_i = ∇P with ∇_l l_i = e_i.
  np.testing.assert_allclose(c, grad, rtol=1e-4, atol=1e-6 * np.abs(grad).max())
  assert abs(c @ l) < 1e-5 * np.abs(c).sum() * l.max()  # P is scale-invariant
  assert np.all(np.asarray(fair_weights(jnp.zeros(3))) == 0)


def test_zero_layer_and_equal_losses_no_nan():
  rng = np.random.default_rng(4)
  m = 6  # same shapes as test_matches_reference_module_layers (compile cache)
  deltas = random_tree(rng, m)
  deltas["Dense_0"]["kernel"][:] = 0.0
  deltas["Dense_0"]["bias"][:] = 0.0  # an all-zero layer (module level)
  deltas["Conv_0"]["bias"][1] = 0.0  # a zero tensor of one client
  losses = rng.uniform(0.5, 3.0, size=m)
  layer_of = module_layers(TEMPLATE)
  d, info, _, ref = compare(deltas, losses, layer_of)
  assert np.all(np.asarray(d["Dense_0"]["kernel"]) == 0)
  assert ref["num_blocks"] == 2
  assert np.asarray(info["block_of_layer"]).tolist() == [0, 1, 1]  # merged with the next
  # Equal losses: the fair row is zero and excluded; still finite.
  d, info = fair_direction(deltas, jnp.full((m,), 1.7), layer_of=layer_of)
  assert all(np.all(np.isfinite(x)) for x in leaves_of(d))
  assert np.all(np.asarray(info["lambdas"])[:, m] == 0)
  # Everything zero: d = 0, no NaN.
  zeros = jax.tree_util.tree_map(np.zeros_like, deltas)
  d, info = fair_direction(zeros, jnp.asarray(losses, jnp.float32), layer_of=layer_of)
  assert all(np.all(np.asarray(x) == 0) for x in leaves_of(d))
  assert int(info["num_blocks"]) == 1


def test_near_collinear_history_rows():
  # Miniature of the fedlf run that went NaN at round 49 (mlp, pat1, 100 history slots): late in
  # training the client Δ are nearly low-rank and the history rows are near-copies of them, so
  # the per-block QP is near-singular. Before the fix its solver blew up (NaN at worst) or stalled
  # (directions off by ~5e-3 here, residual 4e-7).
  shapes = {"Dense_0": {"kernel": (8, 6), "bias": (6,)}, "Dense_1": {"kernel": (6, 4), "bias": (4,)}}
  template = {mod: {k: np.zeros(s, np.float32) for k, s in sub.items()} for mod, sub in shapes.items()}
  m, H, rank, noise = 10, 20, 3, 1e-2
  for seed in (0, 2):
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, m, H)  # whose earlier Δ each history slot holds
    coef = rng.normal(size=(m, rank)) + np.r_[2.0, np.zeros(rank - 1)]
    deltas, history = {}, {}
    for mod, sub in shapes.items():
      deltas[mod], history[mod] = {}, {}
      for name, s in sub.items():
        size = int(np.prod(s))
        d = coef @ rng.normal(size=(rank, size)) + noise * rng.normal(size=(m, size))
        h = d[pick] * (1 + 0.1 * rng.random((H, 1))) + 0.1 * noise * rng.normal(size=(H, size))
        deltas[mod][name] = d.reshape((m,) + s).astype(np.float32)
        history[mod][name] = h.reshape((H,) + s).astype(np.float32)
    hmask = rng.random(H) < 0.7
    losses = rng.uniform(0.5, 3.0, size=m)
    d, info, _, ref = compare(deltas, losses, module_layers(template), history, hmask)
    assert ref["num_blocks"] == 2
    assert float(info["qp_residual"]) < 1e-7


def _two_layer_history(seed, m=3, H=6):
  """``m`` client rows and ``H`` history rows of a two-layer model (float32), and its module layer map."""
  rng = np.random.default_rng(seed)
  deltas = {"a": {"kernel": rng.normal(size=(m, 4, 3)), "bias": rng.normal(size=(m, 3))},
            "b": {"kernel": rng.normal(size=(m, 3, 2)), "bias": rng.normal(size=(m, 2))}}
  deltas = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float32), deltas)
  hist = jax.tree_util.tree_map(lambda x: jnp.asarray(rng.normal(size=(H,) + x.shape[1:]), jnp.float32), deltas)
  return deltas, hist, module_layers(jax.tree_util.tree_map(lambda x: x[0], deltas))


def _history_gram(h, lo):
  """float64 per-layer Gram ``[2, H, H]`` of the history rows ``h``, by hand."""
  H = jax.tree_util.tree_leaves(h)[0].shape[0]
  g = np.zeros((2, H, H))
  for leaf, k in zip(jax.tree_util.tree_leaves(h), jax.tree_util.tree_leaves(lo)):
    x = np.asarray(leaf, np.float64).reshape(H, -1)
    g[k] += x @ x.T
  return g


def test_cached_history_gram_gives_the_same_direction():
  from fedalf_jax.sim.fairness import update_history_gram
  deltas, hist, lo = _two_layer_history(5)
  mask = jnp.array([True, False, True, True, False, True])
  losses = jnp.array([0.5, 1.0, 2.0])

  def gram_of(h):
    return jnp.asarray(_history_gram(h, lo), jnp.float32)

  d0, info = fair_direction(deltas, losses, layer_of=lo, history=hist, history_mask=mask)
  d1, _ = fair_direction(deltas, losses, layer_of=lo, history=hist, history_mask=mask, history_gram=gram_of(hist))
  for a, b in zip(jax.tree_util.tree_leaves(d0), jax.tree_util.tree_leaves(d1)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)
  sel = jnp.array([1, 4, 0])
  new_hist = jax.tree_util.tree_map(lambda h, d: h.at[sel].set(d), hist, deltas)
  np.testing.assert_allclose(np.asarray(update_history_gram(gram_of(hist), sel, info)),
                             np.asarray(gram_of(new_hist)), rtol=1e-4, atol=1e-5)


def test_qp_iters_counts_the_servers_sequential_trips():
  # qp_iters is the server's sequential depth: per merge step one trip plus the slowest block's solver
  # steps. Here every QP starts at its answer (the uniform point: symmetric problems), so its solver
  # takes 0 steps, and the count is the number of merge steps, known by hand.
  e = jnp.eye(2, dtype=jnp.float32)
  v = jnp.array([[1.0, 2.0], [-1.0, -2.0]], jnp.float32)  # hull of v and -v holds 0: a zero block
  equal = jnp.ones((2,), jnp.float32)  # equal losses: no fair row
  _, info = fair_direction({"a": e}, equal)
  assert int(info["qp_iters"]) == 1 and int(info["num_blocks"]) == 1  # one step, no merge
  _, info = fair_direction({"a": e, "b": v}, equal)  # b merges into a: two steps
  assert int(info["num_blocks"]) == 1 and int(info["qp_iters"]) == 2
  # a QP that needs steps: the count is 1 + the solver's steps
  from fedalf_jax.sim.qp import solve_simplex_qp_info
  w = jnp.array([[1.0, 0.0], [0.0, 1.0], [0.7071068, 0.7071068]], jnp.float32)  # unit rows; λ* = (½, ½, 0)
  _, info = fair_direction({"a": w}, jnp.ones((3,), jnp.float32))
  _, qinfo = solve_simplex_qp_info(w @ w.T)
  assert int(qinfo["iters"]) > 0 and int(info["qp_iters"]) == 1 + int(qinfo["iters"])


def test_the_online_clients_rows_may_already_hold_this_rounds_uploads():
  """FedLF's server stores this round's Δ in the history before it solves (a write in place:
  algorithms.make_fair_server). The online clients' rows are masked out of the QPs, so the direction is
  the one the old rows give, bit for bit, and the kept Gram updated from it is the new rows' Gram."""
  from fedalf_jax.sim.fairness import update_history_gram
  deltas, hist, lo = _two_layer_history(7)
  sel = jnp.array([1, 4, 0])
  mask = jnp.array([False, False, True, True, False, True])  # the online clients' rows never join
  losses = jnp.array([0.5, 1.0, 2.0])
  new_hist = jax.tree_util.tree_map(lambda h, d: h.at[sel].set(d), hist, deltas)
  kept = jnp.asarray(_history_gram(hist, lo), jnp.float32)
  d_old, _ = fair_direction(deltas, losses, layer_of=lo, history=hist, history_mask=mask, history_gram=kept)
  d_new, info = fair_direction(deltas, losses, layer_of=lo, history=new_hist, history_mask=mask, history_gram=kept)
  for a, b in zip(jax.tree_util.tree_leaves(d_old), jax.tree_util.tree_leaves(d_new)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  np.testing.assert_allclose(np.asarray(update_history_gram(kept, sel, info)), _history_gram(new_hist, lo), rtol=1e-4,
                             atol=1e-5)
