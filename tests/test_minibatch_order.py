"""The minibatch order is documented well enough to reproduce by hand (issue 56 item 2; docs/extending.md
"Which examples each local step sees"): a client program records which examples each of its steps saw, and the
test rebuilds them from the documented recipe alone, with ``jax.random`` and the pooled data, never through the
package's own sampler or shuffle."""

import jax
import jax.numpy as jnp
import numpy as np

import fedalf_jax as fj
from fedalf_jax.runner.build import load_pool

S, B, N = 16, 8, 3


def recording():
    """A client that trains nothing and keeps, in its state, row `step` = the first pixel of each example its
    local step `step` saw (-1 for padding)."""
    def init(ctx):
        return jnp.full((S, B), -1.0)

    def step(carry, batch, ctx):
        return carry.at[batch.step].set(jnp.where(batch.mask, batch.x.reshape(B, -1)[:, 0], -1.0))

    def final(carry, ctx):
        return jax.tree_util.tree_map(jnp.zeros_like, ctx.theta), carry
    return fj.Algorithm("recording", server=fj.algorithms.weighted_mean_server,
                        client=fj.ClientProgram(init, step, final),
                        init_client_state=lambda params: jnp.full((S, B), -1.0))


def by_hand(cfg, seed_round=0):
    """The documented recipe: run key, round key, client keys, the epoch's order, B examples a step."""
    run_key = jax.random.split(jax.random.PRNGKey(cfg.seed))[1]
    k_sel, k_clients = jax.random.split(jax.random.fold_in(run_key, seed_round))
    sel = np.asarray(jax.random.choice(k_sel, cfg.clients, (cfg.clients_per_round,), replace=False))
    keys = jax.random.split(k_clients, cfg.clients_per_round)
    x = load_pool(cfg).x.reshape(-1, int(np.prod(load_pool(cfg).x.shape[1:])))[:, 0]
    splits = fj.client_splits(cfg)
    want = {}
    for slot, client in enumerate(sel):
        train = splits[client][0]
        k_train = jax.random.split(keys[slot])[0]
        okey = jax.random.split(jax.random.split(k_train, 1)[0])[0]  # epoch 0's key, then its order half
        u = np.asarray([jax.random.uniform(jax.random.fold_in(okey, p)) for p in range(len(train))])
        order = np.argsort(u, kind="stable")
        rows = np.full((S, B), -1.0, np.float32)
        for j in range(-(-len(train) // B)):
            chunk = x[train[order[j * B:(j + 1) * B]]]
            rows[j, :len(chunk)] = chunk
        want[int(client)] = rows
    return want


def test_each_local_steps_examples_follow_the_documented_recipe(tmp_path):
    fj.register_algorithm("recording56", recording)
    cfg = fj.Config(algorithm="recording56", dataset="synthetic", model="mlp", clients=N, clients_per_round=2,
                    synthetic_train=120, synthetic_test=30, partition="iid", batch_size=B, rounds=1, seed=5,
                    out=str(tmp_path / "r"))
    got = np.asarray(fj.run(cfg, progress=False).client_states)
    want = by_hand(cfg)
    assert len(want) == 2
    for client, rows in want.items():
        np.testing.assert_array_equal(got[client], rows)
