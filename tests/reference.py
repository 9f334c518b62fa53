"""Independent float64 references shared by the tests (written from the math, not from the package)."""

import numpy as np


def min_norm_simplex_qp(Q):
  """float64 argmin_{λ≥0, Σλ=1} ½λᵀQλ by Wolfe's minimum-norm-point algorithm (Q = Gram of points).

  Exact active-set steps: affine minimisers on the support (KKT solves), line steps back into the
  simplex when an affine minimiser leaves it, and the most violated point is added until the
  Frank–Wolfe gap vanishes.
  """
  Q = np.asarray(Q, np.float64)
  n = Q.shape[0]
  s = np.mean(np.diag(Q))
  Qs = Q / s if s > 0 else Q
  lam = np.zeros(n)
  lam[np.argmin(np.diag(Qs))] = 1.0
  support = lam > 0
  for _ in range(50 * n):
    g = Qs @ lam
    j = int(np.argmin(np.where(support, np.inf, g))) if not support.all() else -1
    if j < 0 or g[j] >= lam @ g - 1e-14:
      break
    support[j] = True
    while True:  # minor cycle
      idx = np.flatnonzero(support)
      k = len(idx)
      kkt = np.zeros((k + 1, k + 1))
      kkt[:k, :k] = Qs[np.ix_(idx, idx)]
      kkt[:k, k] = -1.0
      kkt[k, :k] = 1.0
      alpha = np.linalg.lstsq(kkt, np.r_[np.zeros(k), 1.0], rcond=None)[0][:k]
      if alpha.min() > 1e-15:
        lam[:] = 0.0
        lam[idx] = alpha
        break
      neg = alpha < 1e-15
      cur = lam[idx]
      theta = np.min(cur[neg] / (cur[neg] - alpha[neg]))
      new = np.clip(cur + theta * (alpha - cur), 0.0, None)
      lam[:] = 0.0
      lam[idx] = new / new.sum()
      support = lam > 1e-15
  lam = np.clip(lam, 0.0, None)
  lam /= lam.sum()
  g = Qs @ lam
  assert lam @ g - g.min() < 1e-10, lam @ g - g.min()
  return lam
