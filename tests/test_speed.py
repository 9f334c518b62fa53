"""Issue #29 item 1: the clients' losses ``f_i(θ)`` (and FedLF's full gradient) computed in batch-sized
chunks (``lax.scan``) equal the masked mean cross-entropy over the client's real examples."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedalf_jax.problem.models import default_conv_impl, make_model
from fedalf_jax.sim.client import full_loss, full_loss_and_grad, masked_loss

L, POOL, CLASSES, CHUNK = 23, 40, 5, 5        # L not a multiple of CHUNK: the last chunk is part padding


def _setup(seed=0):
    r = np.random.default_rng(seed)
    x = r.normal(size=(POOL, 4, 4, 1)).astype(np.float32)
    y = r.integers(0, CLASSES, size=POOL).astype(np.int32)
    idx = r.choice(POOL, size=L, replace=False).astype(np.int32)
    model = make_model("mlp", num_classes=CLASSES, input_shape=(4, 4, 1))
    v = model.init(jax.random.PRNGKey(seed))
    return model, v, x, y, idx


def _np_params(v):
    p = v["params"]
    return [(np.asarray(p[f"Dense_{k}"]["kernel"], np.float64), np.asarray(p[f"Dense_{k}"]["bias"], np.float64))
            for k in range(3)]


def _reference(v, x, y, rows):
    """float64 numpy: mean cross-entropy of the MLP over ``rows`` (0 if none) and its gradient, by hand."""
    layers = _np_params(v)
    grads = [(np.zeros_like(w), np.zeros_like(b)) for w, b in layers]
    if len(rows) == 0:
        return 0.0, grads
    h0 = x[rows].reshape(len(rows), -1).astype(np.float64)
    (w0, b0), (w1, b1), (w2, b2) = layers
    z0 = h0 @ w0 + b0
    h1 = np.maximum(z0, 0)
    z1 = h1 @ w1 + b1
    h2 = np.maximum(z1, 0)
    z = h2 @ w2 + b2
    z = z - z.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    n = len(rows)
    loss = -logp[np.arange(n), y[rows]].mean()
    dz = np.exp(logp)
    dz[np.arange(n), y[rows]] -= 1
    dz /= n
    g2 = (h2.T @ dz, dz.sum(0))
    d1 = (dz @ w2.T) * (z1 > 0)
    g1 = (h1.T @ d1, d1.sum(0))
    d0 = (d1 @ w1.T) * (z0 > 0)
    g0 = (h0.T @ d0, d0.sum(0))
    return loss, [g0, g1, g2]


@pytest.mark.parametrize("n", [0, 1, 7, 12, L])
def test_chunked_loss_and_grad_equal_float64_reference(n):
    model, v, x, y, idx = _setup()
    loss = jax.jit(lambda n: full_loss(model, v, jnp.asarray(x), jnp.asarray(y), jnp.asarray(idx), n,
                                       chunk=CHUNK))(n)
    val, g = jax.jit(lambda n: full_loss_and_grad(model, v, jnp.asarray(x), jnp.asarray(y), jnp.asarray(idx), n,
                                                  chunk=CHUNK))(n)
    ref, ref_g = _reference(v, x, y, idx[:n])
    np.testing.assert_allclose(float(loss), ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(val), ref, rtol=1e-5, atol=1e-6)
    for k, (gw, gb) in enumerate(ref_g):
        np.testing.assert_allclose(np.asarray(g[f"Dense_{k}"]["kernel"]), gw, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(np.asarray(g[f"Dense_{k}"]["bias"]), gb, rtol=1e-4, atol=1e-6)


def test_padding_past_n_is_not_counted():
    """Rows past ``n`` hold other examples (as a padded client's row does): they must not change f_i."""
    model, v, x, y, idx = _setup()
    other = idx.copy()
    other[9:] = (other[9:] + 1) % POOL
    f = jax.jit(lambda i: full_loss(model, v, jnp.asarray(x), jnp.asarray(y), i, 9, chunk=CHUNK))
    assert float(f(jnp.asarray(idx))) == pytest.approx(float(f(jnp.asarray(other))), rel=1e-6)


@pytest.mark.parametrize("chunk", [1, 4, 50])
def test_chunk_size_does_not_change_the_value(chunk):
    """Any chunk (1, not dividing L, larger than L) gives the reference value."""
    model, v, x, y, idx = _setup(1)
    loss = full_loss(model, v, jnp.asarray(x), jnp.asarray(y), jnp.asarray(idx), 17, chunk=chunk)
    np.testing.assert_allclose(float(loss), _reference(v, x, y, idx[:17])[0], rtol=1e-5)


def test_vmapped_clients_with_batch_stats_equal_one_pass():
    """As the round calls it (vmapped over clients, a model with running batch statistics, train=False):
    the chunked value equals the old one-pass masked_loss within float32 noise."""
    r = np.random.default_rng(2)
    x = jnp.asarray(r.normal(size=(POOL, 8, 8, 1)).astype(np.float32))
    y = jnp.asarray(r.integers(0, CLASSES, size=POOL).astype(np.int32))
    model = make_model("cnn_bn", num_classes=CLASSES, input_shape=(8, 8, 1))
    v = model.init(jax.random.PRNGKey(3))
    # running statistics away from their init, so that using batch statistics instead would show
    v = {**v, "batch_stats": jax.tree_util.tree_map(lambda s: s + 0.3, v["batch_stats"])}
    idx = jnp.asarray(np.stack([r.choice(POOL, size=L, replace=False) for _ in range(3)]).astype(np.int32))
    ns = jnp.asarray([L, 11, 0])
    got = jax.jit(jax.vmap(lambda i, n: full_loss(model, v, x, y, i, n, chunk=CHUNK)))(idx, ns)
    got_v, got_g = jax.jit(jax.vmap(lambda i, n: full_loss_and_grad(model, v, x, y, i, n, chunk=CHUNK)))(idx, ns)
    for c in range(3):
        mask = jnp.arange(L) < ns[c]

        def one(p):
            return masked_loss(model, p, v["batch_stats"], x[idx[c]], y[idx[c]], mask, train=False)[0]

        old, old_g = jax.value_and_grad(one)(v["params"])
        np.testing.assert_allclose(float(got[c]), float(old), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(float(got_v[c]), float(old), rtol=1e-5, atol=1e-7)
        for a, b in zip(jax.tree_util.tree_leaves(jax.tree_util.tree_map(lambda t: t[c], got_g)),
                        jax.tree_util.tree_leaves(old_g)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)
    assert float(got[2]) == 0.0


def _compiled_text(algorithm, client_map, what, compiled=False):
    """The program of one round (``what="round"``, its state donated as the run loop donates it) or of the
    evaluation of every client, for a small CNN (``model="cnn"``) or MLP run on synthetic data."""
    from fedalf_jax.experiment.build import build
    from fedalf_jax.experiment.config import Config
    from fedalf_jax.sim.round import init_state, run_rounds
    from fedalf_jax.sim.train import evaluate
    model = "mlp" if compiled else "cnn"
    cfg = Config(algorithm=algorithm, model=model, dataset="synthetic", clients=8, clients_per_round=3,
                 synthetic_train=240, synthetic_test=80, batch_size=10, client_map=client_map)
    exp = build(cfg)
    state = init_state(exp.spec, 0)
    if what == "round":
        f = jax.jit(lambda s: run_rounds(exp.spec, s, exp.hp, exp.data, 1), donate_argnums=(0,))
    else:
        f = jax.jit(lambda s: evaluate(exp.spec, s.variables, exp.data))
    lowered = f.lower(state)
    return lowered.compile().as_text() if compiled else lowered.as_text()


@pytest.mark.skipif(default_conv_impl() == "lax", reason="this backend trains with lax.conv: no forward module")
def test_the_clients_losses_and_the_evaluation_run_the_forward_module_when_clients_are_mapped():
    """On CPU the CNN trains with im2col (no convolution op); its forward-only passes (FedALF's l_i = f_i(θ)
    and the evaluation) run lax.conv, 1.6x faster forward-only (docs/lab/benchmarks.md). Vmapped clients keep
    im2col: over a sweep's runs lax.conv would become grouped convolutions, slower than im2col."""
    def convs(*a):
        return _compiled_text(*a).count("stablehlo.convolution")

    assert convs("fedalf", "map", "round") == 2  # the loss's forward pass: two convolutions
    assert convs("fedavg", "map", "round") == 0  # training only
    assert convs("fedalf", "vmap", "round") == 0
    assert convs("fedavg", "map", "evaluation") == 2
    assert convs("fedavg", "vmap", "evaluation") == 0


def test_the_fair_servers_history_rows_are_written_in_place():
    """The round's program holds no copy of the H x D history rows (written after the Grams read them, XLA
    copied them twice per round: 80 ms of a 190 ms FMNIST CNN server step). The ADMM duals, [N, ...] as
    well, are scattered in place too: no array shaped like a per-client row set is copied."""
    text = _compiled_text("fedalf", "map", "round", compiled=True)
    rows = [line for line in text.splitlines() if " copy(" in line and "f32[8,784,200]" in line.split("=")[1][:40]]
    assert rows == []
