"""Capture the server's QPs (rescaled Grams Qh and masks) of a real FedALF run on FMNIST (docs/lab/benchmarks.md,
"The server's sequential depth"):  python experiments/probes/qp_capture.py mlp 40 /tmp/qp/mlp.npz"""
import sys, numpy as np, jax
import fedalf_jax.sim.fairness as F
from fedalf_jax.experiment.config import Config
from fedalf_jax.experiment.loop import run
model, rounds, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
store = []
orig = F.solve_simplex_qp_info
def wrapped(Q, mask=None, **kw):
    jax.debug.callback(lambda q, v: store.append((np.array(q), np.array(v))), Q, mask)
    return orig(Q, mask, **kw)
F.solve_simplex_qp_info = wrapped
cfg = Config(algorithm="fedalf", model=model, rounds=rounds, eval_every=rounds, data_dir="/usr/share/datasets/fashion-mnist", client_map="map")
run(cfg, progress=False)
Q = np.stack([s[0] for s in store]); V = np.stack([s[1] for s in store])
print(Q.shape, V.shape, V.sum(-1).min(), V.sum(-1).max())
np.savez(out, Q=Q, V=V)
