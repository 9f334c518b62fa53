"""Solve captured QPs (experiments/probes/qp_capture.py) with each solver and compare with a float64 reference:
steps per QP and accuracy.  python experiments/probes/qp_compare.py /tmp/qp/mlp.npz"""
import sys, numpy as np, jax, jax.numpy as jnp
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2] / "tests"))
from reference import min_norm_simplex_qp as ref
import fedalf_jax.sim.qp as Q_
d = np.load(sys.argv[1]); Q = d["Q"].reshape(-1, *d["Q"].shape[-2:]); V = d["V"].reshape(-1, d["V"].shape[-1])
Qs, ms, _ = jax.vmap(Q_._prepare)(jnp.asarray(Q, jnp.float32), jnp.asarray(V))
Qn, mn = np.asarray(Qs, np.float64), np.asarray(ms)
fstar, lref = [], []
for q, m in zip(Qn, mn):
    l = np.zeros(len(m)); l[m] = ref(q[np.ix_(m, m)]); lref.append(l); fstar.append(l @ q @ l)
fstar = np.array(fstar); lref = np.array(lref)
print("support sizes of ref:", np.percentile((lref > 1e-9).sum(1), [0, 50, 100]), "valid", mn.sum(1).min(), mn.sum(1).max())
def report(name, lam, it):
    lam = np.asarray(lam, np.float64); f = np.einsum("bi,bij,bj->b", lam, Qn, lam)
    g = np.einsum("bij,bj->bi", Qn, lam); gap = (lam * g).sum(1) - np.where(mn, g, np.inf).min(1)
    print(f"{name:28s} iters max {int(np.max(it)):5d} med {int(np.median(it)):5d}  f-f* max {np.max(f - fstar):.2e}  FWgap max {gap.max():.2e}")
lam, info = Q_.solve_simplex_qp_info(jnp.asarray(Q, jnp.float32), jnp.asarray(V), method="osqp")
report("current osqp(+polish)", lam, info["iters"])
uni = jax.vmap(Q_._uniform, (0, None))(ms, jnp.float32)
lam, it = jax.vmap(lambda q, k, x: Q_._solve_active(q, k, x, 1000, Q_._POLISH_TOL))(Qs, ms, uni)
report("active from uniform", lam, it)
vert = jax.vmap(lambda q, k: jax.nn.one_hot(jnp.argmin(jnp.where(k, jnp.diagonal(q), jnp.inf)), q.shape[0]))(Qs, ms)
lam, it = jax.vmap(lambda q, k, x: Q_._solve_active(q, k, x, 1000, Q_._POLISH_TOL))(Qs, ms, vert)
report("active from vertex", lam, it)
lam, it = jax.vmap(lambda q, k: Q_._solve_pgd(q, k, 5000, Q_._POLISH_TOL))(Qs, ms)
report("pgd", lam, it)
for K in (20, 50, 100):
    lp, it1 = jax.vmap(lambda q, k: Q_._solve_pgd(q, k, K, 0.0))(Qs, ms)
    lam, it2 = jax.vmap(lambda q, k, x: Q_._solve_active(q, k, x, 1000, Q_._POLISH_TOL))(Qs, ms, lp)
    report(f"pgd{K} + active", lam, it1 + it2)
    lam, it2 = jax.vmap(lambda q, k, x: Q_._solve_active(q, k, x, 1000, Q_._POLISH_TOL))(Qs, ms, jnp.where(lp > 1e-3, lp, 0) / jnp.sum(jnp.where(lp > 1e-3, lp, 0), -1, keepdims=True))
    report(f"pgd{K} thresh + active", lam, it1 + it2)
