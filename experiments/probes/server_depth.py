"""The server's sequential depth before (osqp, runs mapped) and after (active, runs vmapped), W = 1 and 8, FedALF
MLP and CNN on FMNIST, 12 rounds (docs/lab/benchmarks.md).  python experiments/probes/server_depth.py [mlp|cnn ...]"""
import json, sys, time
from fedalf_jax.experiment.config import Config
from fedalf_jax.bench import server_depth
models = sys.argv[1:] or ["mlp", "cnn"]
for model, method, run_map, widths in [("mlp", "osqp", "map", (1, 8)), ("mlp", "auto", "vmap", (1, 8)),
                                       ("cnn", "auto", "vmap", (1, 8)), ("cnn", "osqp", "map", (1, 8))]:
    if model not in models:
        continue
    cfg = Config(algorithm="fedalf", model=model, qp_method=method, run_map=run_map,
                 data_dir="/usr/share/datasets/fashion-mnist")
    t0 = time.time()
    r = server_depth(cfg, widths=widths, rounds=12)
    for w in r["widths"].values():
        w.pop("per_run")
    print(json.dumps({"model": model, "qp_method_asked": method, "wall_s": round(time.time() - t0), **r}), flush=True)
