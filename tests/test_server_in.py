"""What the server knows (issue 56 item 2): ``ServerIn.apply`` (the model, for a server that runs it: CCVR's
classifier re-training), ``ServerIn.rounds`` (so it knows the run's last round) and ``init_server_state``'s
``key=`` and ``init=`` (IFCA's k models), on the tiny problem of tests/test_examples_client.py, against FedAvg
computed by hand in float64."""

import jax
import jax.numpy as jnp
import numpy as np

import fedalf_jax as fj
from test_examples_client import COUNTS, X, _ce_grad, _cfg, _close, _fedavg, _flax, _forward, _rows, _sub, _theta0

PROBE = X[:2].astype(np.float32)


def _server(s: fj.ServerIn):
    theta, sstate, info = fj.algorithms.weighted_mean_server(s._replace(sstate=()))
    last = s.t == s.rounds - 1
    logits = s.apply(s.theta, jnp.asarray(PROBE))[0]  # θ_t's logits on two fixed examples
    return theta, {**s.sstate, "logits": jnp.where(last, logits, s.sstate["logits"]),
                   "lasts": s.sstate["lasts"] + last.astype(jnp.int32)}, info


def _init(params, num_clients, key, init):
    models = [init(k) for k in jax.random.split(key, 2)]
    return {"logits": jnp.zeros((2, 3)), "lasts": jnp.zeros((), jnp.int32), "key": jax.random.key_data(key),
            "k0": models[0], "k1": models[1]}


def test_the_server_runs_the_model_in_the_last_round_and_its_state_starts_from_key_and_init(tmp_path):
    fj.register_algorithm("serverin56", lambda: fj.Algorithm(
        "serverin56", server=_server, client=fj.local_training(), init_server_state=_init))
    res = fj.run(_cfg("serverin56", rounds=3, server_lr=1.0), out=str(tmp_path / "r"), progress=False)
    # θ_2 by hand: two FedAvg rounds of two full-batch steps each (lr 0.3, η_g 1)
    theta = _theta0()
    for _ in range(2):
        ws = []
        for i in range(3):
            w = dict(theta)
            for _ in range(2):
                w = _sub(w, _ce_grad(w, *_rows(i))[1], 0.3)
            ws.append(w)
        theta = _fedavg(theta, ws, COUNTS, glr=1.0)
    s = res.server_state
    assert int(s["lasts"]) == 1  # one round of three was the last
    _close(s["logits"], _forward(theta, PROBE.astype(np.float64))[0], atol=2e-5)
    # the key: the seed's init key folded with its own constant; init: the model's initialiser (Tiny's weights
    # are fixed, so every key gives θ_0)
    want = jax.random.fold_in(jax.random.split(jax.random.PRNGKey(0))[0], 0x5E1A)
    assert np.array_equal(np.asarray(s["key"]), np.asarray(jax.random.key_data(want)))
    for k in ("k0", "k1"):
        got = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), s[k])
        want_p = jax.tree_util.tree_map(np.asarray, _flax(_theta0()))
        jax.tree_util.tree_map(lambda a, b: _close(a, b, atol=1e-7), got, want_p)
