"""Hashes of the final parameters and metrics of built-in runs (and two examples), 4 rounds on synthetic data,
with no compilation cache: the same hashes from two trees mean bit-equal runs (issue 37: the contract
changed nothing in the built-in programs). Run from the tree whose fedalf_jax is measured:

    cd TREE && PYTHONPATH=. python experiments/probes/builtin_hashes.py [CASE ...]
    cd TREE && PYTHONPATH=. python experiments/probes/builtin_hashes.py --extra   # issue 48's default-client cases
"""
import hashlib, sys, os
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ["FEDALF_COMPILE_CACHE"] = "off"
import numpy as np, jax
import fedalf_jax as fj

def h(tree):
    m = hashlib.sha256()
    for x in jax.tree_util.tree_leaves(tree):
        m.update(np.asarray(x).tobytes())
    return m.hexdigest()[:16]

base = dict(dataset="synthetic", clients=12, clients_per_round=4, rounds=4, eval_every=2, synthetic_train=600, synthetic_test=120)
cases = {
  "fedavg_mlp": dict(algorithm="fedavg", model="mlp"),
  "fedalf_mlp": dict(algorithm="fedalf", model="mlp"),
  "qfedavg_mlp": dict(algorithm="qfedavg", model="mlp"),
  "fedlf_mlp": dict(algorithm="fedlf", model="mlp"),
  "fedprox_mom": dict(algorithm="fedprox", model="mlp", local_optimizer="momentum"),
  "ldp_fedalf": dict(algorithm="fedalf", model="mlp", ldp="adaptive", epsilon=2.0),
  "fedalf_cnnbn": dict(algorithm="fedalf", model="cnn_bn", synthetic_like="cifar10", rounds=2),
  "fedavg_cnn": dict(algorithm="fedavg", model="cnn", rounds=2),
  "ditto": dict(algorithm="examples.ditto:ditto", model="mlp"),
  "scaffold": dict(algorithm="examples.scaffold:scaffold", model="mlp"),
}
# issue 48: every optional field of the default client, and each way a privacy mechanism meets it (run with
# `--extra`, or name them): the default client re-expressed as a client program must give these bits too
extra = {
  "fedlf_fullgrad": dict(algorithm="fedlf", model="mlp", client_grad="full"),
  "fedavg_steps": dict(algorithm="fedavg", model="mlp", local_steps=3),
  "fedavg_gauss": dict(algorithm="fedavg", model="mlp", dp="gaussian", epsilon=8.0, delta=1e-5),
  "fedavg_central": dict(algorithm="fedavg", model="mlp", dp="central", epsilon=8.0, delta=1e-5),
  "fedlf_ldp_denoised": dict(algorithm="fedlf", model="mlp", client_grad="local", ldp="adaptive", epsilon=2.0),
  "fedlf_local": dict(algorithm="fedlf", model="mlp", client_grad="local"),
  "moon": dict(algorithm="examples.moon:moon", model="examples.moon:model"),
  "apfl": dict(algorithm="examples.apfl:apfl", model="mlp"),
  "fedper": dict(algorithm="examples.fedper:fedper", model="mlp"),
  "fedrep": dict(algorithm="examples.fedrep:fedrep", model="mlp"),
  "fedbn": dict(algorithm="examples.fedbn:fedbn", model="cnn_bn", synthetic_like="cifar10", rounds=2),
  "fedgkd": dict(algorithm="examples.fedgkd:fedgkd", model="mlp"),
  "fedproto": dict(algorithm="examples.fedproto:fedproto", model="examples.moon:model"),
}
if "--extra" in sys.argv:
    sys.argv.remove("--extra")
    cases = extra
else:
    cases.update({k: v for k, v in extra.items() if k in sys.argv[1:]})
only = sys.argv[1:]
for name, kw in cases.items():
    if only and name not in only: continue
    cfg = fj.Config(**{**base, **kw})
    r = fj.run(cfg)
    met = r.metrics.drop(columns=[c for c in r.metrics.columns if "second" in c]).to_numpy(dtype=float)
    print(name, h(r.model), hashlib.sha256(np.nan_to_num(met).tobytes()).hexdigest()[:16], flush=True)
