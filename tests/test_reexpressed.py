"""The built-ins FedAvg, FedProx and FedADMM re-expressed through the public API (examples/builtins.py) equal
them bit for bit: the metrics, the final model and every array of the checkpoint (the ADMM duals included),
with and without a local privacy mechanism (issue #28 item 9)."""

import json
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import fedalf_jax as fj

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # examples/ is not a package on the path under the console script `pytest`
from examples import builtins as mine  # noqa: E402

TINY = dict(dataset="synthetic", model="mlp", clients=6, clients_per_round=3, rounds=3, eval_every=1,
            synthetic_train=240, synthetic_test=60, batch_size=20, local_epochs=2)
CASES = {  # the built-in, its options (spelled out where a user algorithm has no default of its own)
    "fedavg": {},
    "fedprox": {"mu": 0.5},
    "fedadmm": {"rho": 0.1, "server_target": "model", "dual_from": "local"},
}


def _arrays(run_dir):
    with np.load(Path(run_dir) / "checkpoint.npz") as z:
        return {k: z[k] for k in z.files if k.startswith("arr_")}  # the run state's leaves, in order


@pytest.mark.parametrize("ldp", ["none", "adaptive"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_builtin_reexpressed_through_the_api_is_bit_equal(tmp_path, name, ldp):
    fj.register_algorithm(f"{name}_api", getattr(mine, name))
    opts = {**TINY, **CASES[name], "ldp": ldp}
    if ldp != "none":
        opts["epsilon"] = 5.0
    user_opts = {k: v for k, v in opts.items() if k not in ("server_target", "dual_from")}
    a = fj.run(algorithm=f"{name}_api", progress=False, out=str(tmp_path / "api"), **user_opts)
    b = fj.run(algorithm=name, progress=False, out=str(tmp_path / "builtin"), **opts)
    cols = [c for c in b.metrics.columns if c not in ("seconds_per_round",)]
    assert len(a.metrics) == TINY["rounds"] + 1
    assert a.metrics[cols].equals(b.metrics[cols])
    leaves_a, leaves_b = jax.tree_util.tree_leaves(a.model), jax.tree_util.tree_leaves(b.model)
    assert len(leaves_a) == len(leaves_b) > 0
    for x, y in zip(leaves_a, leaves_b):
        np.testing.assert_array_equal(x, y)
    if ldp != "none":  # the re-expressed upload declares what the built-in's is: the mechanism's output
        priv = [json.loads((tmp_path / d / "summary.json").read_text())["privacy"]["guarantee"] for d in ("api", "builtin")]
        assert priv == ["holds", "holds"]
    ca, cb = _arrays(tmp_path / "api"), _arrays(tmp_path / "builtin")
    assert sorted(ca) == sorted(cb) and ca
    if name == "fedadmm":  # the duals of all 6 clients are kept, one per param leaf, and are not all zero
        shapes = {np.shape(x) for x in leaves_b}
        duals = [k for k in ca if ca[k].ndim and ca[k].shape[0] == TINY["clients"] and ca[k].shape[1:] in shapes]
        assert len(duals) == len(leaves_b) and all(np.abs(ca[k]).max() > 0 for k in duals)
    for k in ca:
        np.testing.assert_array_equal(ca[k], cb[k], err_msg=k)
