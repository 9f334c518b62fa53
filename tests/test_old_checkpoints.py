"""Checkpoints written before the algorithm contract grew (issue #28: broadcast, aux uploads, client facts,
local start/optimiser, personal models, own hyper-parameters, --local-optimizer) still resume, bit for bit.

The expectations are literals recorded from the code of commit 6c24dbf (the last before #28's first commit):
each checkpoint's identity record and digest as that code wrote them, and its arrays' names, shapes and
dtypes. Today's code must write the same arrays; a checkpoint carrying that old identity resumes and
continues exactly as an uninterrupted run."""

import json

import numpy as np
import pytest

import fedalf_jax as fj
from fedalf_jax.experiment.identity import identity_digest

_COMMON = ('"alpha": 0.5, "assign": "fedlf", "batch_size": 20, "client_grad": "full", "client_map": "auto", '
           '"clients": 6, "clients_per_round": 3, "clip": 1.0, "conv_impl": "auto", "data_dir": null, '
           '"data_source": "auto", "dataset": "synthetic", "delta": 1e-05, "devices": 1, "dp": "none", '
           '"dual_from": "local", "epsilon": 2.0, "fair_norm": "raw", "history": {history}, "history_tau": null, '
           '"layers": "module", "ldp": "none", "ldp_on": "weights", "local_epochs": 1, "lr": 0.05, "lr_decay": 0.999, '
           '"matmul_precision": "default", "merge_tol": 1e-06, "model": "mlp", "mu": 0.01, '
           '"neighbouring": "add_remove", "partition": "pat1", "q": 0.1, "qp_method": "auto", "rho": {rho}, '
           '"run_map": "auto", "seed": 0, "server_lr": {glr}, "server_lr_decay": {gdecay}, "server_target": "{target}", '
           '"state_dtype": "float32", "synthetic_like": "fmnist", "synthetic_test": 60, "synthetic_train": 240}}')
_MLP = [(200,), (784, 200), (200,), (200, 200), (10,), (200, 10)]  # bias, kernel per Dense (flax's sorted order)
OLD = {  # algorithm -> (identity as written, its digest, arrays arr_0.. as (shape, dtype))
    "fedadmm": (('{{"algorithm": "fedadmm", ' + _COMMON).format(history="false", rho=0.1, glr=1.0, gdecay=1.0,
                                                                target="model"),
                "8b7316f3001db15e",
                [*[(s, "float32") for s in _MLP], *[((6, *s), "float32") for s in _MLP], ((), "int32"),
                 ((2,), "uint32")]),
    "fedalf": (('{{"algorithm": "fedalf", ' + _COMMON).format(history="true", rho=0.01, glr=0.5, gdecay=0.999,
                                                              target="increment"),
               "4e4f2a81cf29a1bf",
               [*[(s, "float32") for s in _MLP], *[((6, *s), "float32") for s in _MLP * 2], ((6,), "int32"),
                ((3, 6, 6), "float32"), ((), "int32"), ((2,), "uint32")]),
}


def _cfg(alg, rounds, out):
    return fj.Config(algorithm=alg, dataset="synthetic", model="mlp", clients=6, clients_per_round=3, rounds=rounds,
                     synthetic_train=240, synthetic_test=60, batch_size=20, eval_every=1, out=str(out))


@pytest.mark.parametrize("alg", sorted(OLD))
def test_a_checkpoint_written_before_the_contract_grew_resumes_exactly(tmp_path, alg):
    identity, digest, arrays = OLD[alg]
    assert identity_digest(json.loads(identity)) == digest  # the literal is what that code hashed
    fj.run(_cfg(alg, 1, tmp_path / "r"), progress=False)
    path = tmp_path / "r" / "checkpoint.npz"
    with np.load(path) as f:
        saved = {k: f[k] for k in f.files}
    assert [(saved[f"arr_{i}"].shape, str(saved[f"arr_{i}"].dtype)) for i in range(len(arrays))] == arrays
    assert sorted(k for k in saved if k.startswith("arr_")) == sorted(f"arr_{i}" for i in range(len(arrays)))
    saved.update(identity=np.asarray(identity), digest=np.asarray(digest))  # as the old code wrote it
    with open(path, "wb") as fh:
        np.savez(fh, **saved)
    fj.run(_cfg(alg, 2, tmp_path / "r"), progress=False, resume=True)
    resumed, whole = fj.load(tmp_path / "r"), fj.run(_cfg(alg, 2, tmp_path / "w"), progress=False)
    assert resumed.status == "done" and list(resumed.metrics["round"]) == [0, 1, 2]
    for a, b in zip(resumed.model["params"].values(), whole.model["params"].values()):
        for k in a:
            np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]))
    # (train_loss is evaluated at a run's last round: the one-round call's round 1 has it, the whole run's not)
    cols = [c for c in whole.metrics.columns if c not in ("seconds_per_round", "train_loss")]
    np.testing.assert_array_equal(resumed.metrics[cols].to_numpy(), whole.metrics[cols].to_numpy())
