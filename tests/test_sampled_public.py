"""Which clients each round sampled is public (issue 56 item 2): ``Result.sampled_clients`` and
``Result.participation``, from the run and from ``fj.load``. Expectation: the ids the server itself received,
kept round by round in a user server's own state (``ServerIn.sel``), and their count."""

import jax.numpy as jnp
import numpy as np

import fedalf_jax as fj

ROUNDS, M = 3, 2


def keeping_sel():
    """FedAvg whose server also keeps each round's ServerIn.sel in its state, row t for round t."""
    def server(s):
        theta, _, info = fj.algorithms.weighted_mean_server(s)
        return theta, s.sstate.at[s.t].set(s.sel.astype(jnp.int32)), info
    return fj.Algorithm("keeping_sel", server=server, upload=fj.algorithms.model_upload, private_upload=True,
                        init_server_state=lambda params, n: jnp.zeros((ROUNDS, M), jnp.int32))


def test_the_sampled_clients_are_the_ones_the_server_received(tmp_path):
    fj.register_algorithm("keeping_sel56", keeping_sel)
    cfg = fj.Config(algorithm="keeping_sel56", dataset="synthetic", model="mlp", clients=5, clients_per_round=M,
                    synthetic_train=150, synthetic_test=50, batch_size=25, rounds=ROUNDS, seed=3,
                    out=str(tmp_path / "r"))
    res = fj.run(cfg, progress=False)
    received = np.asarray(res.server_state)
    assert res.sampled_clients.shape == (ROUNDS, M)
    np.testing.assert_array_equal(res.sampled_clients, received)
    np.testing.assert_array_equal(fj.load(tmp_path / "r").sampled_clients, received)
    assert res.participation.tolist() == np.bincount(received.ravel(), minlength=5).tolist()
    assert res.participation.sum() == ROUNDS * M
