import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedalf_jax.problem.models import (
    CONV_IMPLS,
    Conv,
    Model,
    ModelError,
    default_conv_impl,
    make_model,
    max_pool_2x2,
)

FMNIST = (28, 28, 1)
CIFAR = (32, 32, 3)
TOL = dict(rtol=2e-4, atol=2e-4)
# Test data comes from numpy: every eager jax.random call of a new shape is a separate XLA
# compilation (~0.5-1 s each on this CPU), which would dominate the test time.
RNG = np.random.default_rng(0)


def _normal(*shape, scale=1.0):
    return jnp.asarray((scale * RNG.standard_normal(shape)).astype(np.float32))


def _random_variables(m):
    """Variables with m.init's structure and shapes, filled from numpy (no init compilation)."""
    shapes = jax.eval_shape(m.init, jax.random.key(0))
    out = {"params": jax.tree.map(lambda s: _normal(*s.shape, scale=0.1), shapes["params"])}
    if "batch_stats" in shapes:
        out["batch_stats"] = jax.tree_util.tree_map_with_path(
            lambda p, s: (jnp.ones if p[-1].key == "var" else jnp.zeros)(s.shape, s.dtype),
            shapes["batch_stats"])
    return out


def _close(a, b, **kw):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), **{**TOL, **kw})


@pytest.mark.parametrize("padding", ["VALID", "SAME"])
@pytest.mark.parametrize("cin,k", [(1, 5), (3, 3)])
def test_conv_impls_agree_values_and_grads(padding, cin, k):
    x = _normal(2, 9, 8, cin)
    ref_mod = nn.Conv(4, (k, k), padding=padding)
    shapes = jax.eval_shape(ref_mod.init, jax.random.key(1), x)
    params = jax.tree.map(lambda s: _normal(*s.shape), shapes)  # incl. a non-zero bias
    ct = _normal(*jax.eval_shape(ref_mod.apply, params, x).shape)

    def fwd_bwd(mod, p, x):  # outputs and gradients w.r.t. params and input
        out, vjp = jax.vjp(mod.apply, p, x)
        return out, vjp(ct)

    mods = {impl: Conv(4, (k, k), padding=padding, impl=impl) for impl in CONV_IMPLS}
    for mod in mods.values():
        mine = jax.eval_shape(mod.init, jax.random.key(1), x)
        assert jax.tree.structure(mine) == jax.tree.structure(params)
        assert jax.tree.map(jnp.shape, mine) == jax.tree.map(jnp.shape, params)
    # one compiled program for the reference and all impls (compilation dominates test time)
    ref, got = jax.jit(lambda p, x: (fwd_bwd(ref_mod, p, x),
                                     {i: fwd_bwd(m, p, x) for i, m in mods.items()}))(params, x)
    for impl in CONV_IMPLS:
        for a, b in zip(jax.tree.leaves(got[impl]), jax.tree.leaves(ref)):
            _close(a, b, err_msg=impl)


def test_conv_impls_same_init_as_flax():
    x = jnp.zeros((1, 8, 8, 3))
    ref = nn.Conv(5, (3, 3)).init(jax.random.key(3), x)
    for impl in CONV_IMPLS:
        mine = Conv(5, (3, 3), impl=impl).init(jax.random.key(3), x)
        for a, b in zip(jax.tree.leaves(mine), jax.tree.leaves(ref)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_conv_unknown_impl():
    with pytest.raises(ModelError):
        Conv(2, (3, 3), impl="fft").init(jax.random.key(0), jnp.zeros((1, 5, 5, 1)))


@pytest.mark.parametrize("shape", [(2, 8, 6, 3), (1, 7, 9, 2)])
def test_reshape_max_pool_matches_flax(shape):
    # distinct values: no ties, so the gradient is unambiguous
    x = jnp.asarray(RNG.permutation(np.prod(shape)).reshape(shape).astype(np.float32))
    ct = _normal(shape[0], shape[1] // 2, shape[2] // 2, shape[3])

    def f(x):
        ref, g_ref = jax.value_and_grad(
            lambda x: jnp.sum(nn.max_pool(x, (2, 2), (2, 2)) * ct), has_aux=False)(x)
        mine, g = jax.value_and_grad(lambda x: jnp.sum(max_pool_2x2(x) * ct))(x)
        return (nn.max_pool(x, (2, 2), strides=(2, 2), padding="VALID"), max_pool_2x2(x),
                max_pool_2x2(x, "lax"), g_ref, g)

    ref, mine, mine_lax, g_ref, g = jax.jit(f)(x)
    assert ref.shape == ct.shape
    _close(mine, ref)
    _close(mine_lax, ref)
    _close(g, g_ref)


@pytest.mark.parametrize("shape", [(2, 6, 8, 3), (1, 5, 7, 2)])
def test_reshape_max_pool_gradient_splits_ties_as_jnp_max_does(shape):
    """The reshape pool's written-out backward pass (a custom VJP, for speed) gives each window's cotangent to
    its maxima in equal shares, as ``jnp.max``'s own rule does, and nothing to the rest or to dropped odd
    rows/columns: checked bit for bit against a numpy loop over windows with 1, 2, 3 and 4 tied maxima."""
    b, h, w, c = shape
    x = RNG.integers(0, 3, size=shape).astype(np.float32)  # values 0, 1, 2: many ties of every count
    x[0, 0:2, 0:2, 0] = 2.0  # a window with all four tied, one with three
    x[0, 2:4, 0:2, 0] = [[1.0, 1.0], [1.0, 0.0]]
    ct = RNG.standard_normal((b, h // 2, w // 2, c)).astype(np.float32)
    want = np.zeros(shape, np.float32)
    counts = set()
    for n in range(b):
        for i in range(h // 2):
            for j in range(w // 2):
                for k in range(c):
                    win = x[n, 2 * i:2 * i + 2, 2 * j:2 * j + 2, k]
                    hit = win == win.max()
                    counts.add(int(hit.sum()))
                    want[n, 2 * i:2 * i + 2, 2 * j:2 * j + 2, k] = np.where(hit, ct[n, i, j, k] / np.float32(hit.sum()), 0)
    assert counts == {1, 2, 3, 4}, counts
    y, vjp = jax.vjp(max_pool_2x2, jnp.asarray(x))
    np.testing.assert_array_equal(np.asarray(y), x[:, :h // 2 * 2, :w // 2 * 2].reshape(
        b, h // 2, 2, w // 2, 2, c).max(axis=(2, 4)))
    np.testing.assert_array_equal(np.asarray(vjp(jnp.asarray(ct))[0]), want)
    # the written-out backward pass is what runs, and it counts the ties in integers: with JAX's own rule (float
    # sums of the mask) or float counts the CNN's SGD step takes ~25% longer on CPU (probably because XLA:CPU
    # keeps a float sum's order and so cannot vectorise it across the window's strided axes)
    assert "custom_vjp_call" in str(jax.make_jaxpr(max_pool_2x2)(jnp.asarray(x)))
    bwd = jax.make_jaxpr(lambda x, g: jax.vjp(max_pool_2x2, x)[1](g))(jnp.asarray(x), jnp.asarray(ct)).jaxpr
    sums = [e.outvars[0].aval.dtype for e in bwd.eqns if e.primitive.name == "reduce_sum"]
    assert sums == [jnp.int32], sums


def test_forward_mode_through_the_cnn_needs_the_lax_pool():
    """As models.py says: the reshape pool is reverse-mode only (its backward pass is written out); a CNN built
    with ``pool_impl="lax"`` takes ``jax.jvp``, and its directional derivative matches the reshape CNN's
    gradient along the same direction."""
    a = make_model("cnn", num_classes=10, input_shape=FMNIST, conv_impl="im2col")
    b = make_model("cnn", num_classes=10, input_shape=FMNIST, conv_impl="im2col", pool_impl="lax")
    v, x = _random_variables(a), _normal(2, *FMNIST)
    d = jax.tree.map(lambda t: _normal(*t.shape), v)
    f = lambda m: (lambda v: jnp.sum(m.apply(v, x)[0]))  # noqa: E731
    _, tangent = jax.jvp(f(b), (v,), (d,))
    g = jax.grad(f(a))(v)
    _close(tangent, sum(jnp.vdot(gi, di) for gi, di in zip(jax.tree.leaves(g), jax.tree.leaves(d))), rtol=1e-3)
    with pytest.raises(TypeError, match="custom_vjp"):
        jax.jvp(f(a), (v,), (d,))


def test_default_conv_impl():
    assert default_conv_impl("cpu") in CONV_IMPLS
    assert default_conv_impl("gpu") == "lax"
    assert default_conv_impl() in CONV_IMPLS


def _n_params(tree):
    return sum(int(np.prod(p.shape)) for p in jax.tree.leaves(tree))


@pytest.mark.parametrize("name,shape,nparams", [
    ("cnn", FMNIST, 25 * 32 + 32 + 25 * 32 * 64 + 64 + 1024 * 512 + 512 + 512 * 10 + 10),
    ("cnn", CIFAR, 25 * 3 * 32 + 32 + 25 * 32 * 64 + 64 + 1600 * 512 + 512 + 512 * 10 + 10),
    ("mlp", FMNIST, 784 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10),
    ("mlp", CIFAR, 3072 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10),
    ("cnn_bn", CIFAR, None),
    ("cnn_bn", FMNIST, None),
])
def test_model_output_shapes(name, shape, nparams):
    classes = 100 if name == "cnn_bn" else 10
    m = make_model(name, num_classes=classes, input_shape=shape, conv_impl="im2col")
    assert isinstance(m, Model) and m.input_shape == shape and m.num_classes == classes
    v = jax.eval_shape(m.init, jax.random.key(0))  # shapes only: no compilation needed
    assert set(v) == ({"params", "batch_stats"} if m.has_batch_stats else {"params"})
    if nparams is not None:
        assert _n_params(v["params"]) == nparams
    x = jax.ShapeDtypeStruct((3, *shape), jnp.float32)
    for train in (False, True):
        logits, state = jax.eval_shape(
            lambda v, x: m.apply(v, x, train=train, rng=jax.random.key(2)), v, x)
        assert logits.shape == (3, classes) and logits.dtype == jnp.float32
        assert set(state) == ({"batch_stats"} if m.has_batch_stats else set())
        if m.has_batch_stats:
            assert jax.tree.map(jnp.shape, state["batch_stats"]) == jax.tree.map(
                jnp.shape, v["batch_stats"])


def test_module_names_are_stable():
    def init(name, shape):  # shapes only, no compilation
        m = make_model(name, num_classes=10, input_shape=shape)
        return jax.eval_shape(m.init, jax.random.key(0))

    p = init("cnn", FMNIST)["params"]
    assert sorted(p) == ["Conv_0", "Conv_1", "Dense_0", "Dense_1"]
    assert all(sorted(p[k]) == ["bias", "kernel"] for k in p)
    v = init("cnn_bn", CIFAR)
    assert sorted(v["params"]) == ["BatchNorm_0", "BatchNorm_1", "BatchNorm_2", "Conv_0",
                                   "Conv_1", "Conv_2", "Dense_0", "Dense_1"]
    assert sorted(v["batch_stats"]) == ["BatchNorm_0", "BatchNorm_1", "BatchNorm_2"]
    assert sorted(v["batch_stats"]["BatchNorm_0"]) == ["mean", "var"]
    p = init("mlp", FMNIST)["params"]
    assert sorted(p) == ["Dense_0", "Dense_1", "Dense_2"]


def test_cnn_bn_train_vs_eval():
    m = make_model("cnn_bn", num_classes=100, input_shape=CIFAR, conv_impl="im2col")
    v = _random_variables(m)
    x = 3.0 + 2.0 * _normal(8, *CIFAR)
    # train: batch statistics, running stats updated; deterministic given the rng

    @jax.jit  # one compiled program: train and eval outputs + the first conv's batch mean
    def both(v, x, r):
        conv0 = Conv(32, (3, 3), "SAME", "im2col").apply({"params": v["params"]["Conv_0"]}, x)
        return (m.apply(v, x, train=True, rng=r), m.apply(v, x, train=False),
                conv0.mean(axis=(0, 1, 2)))

    (lt, st), (le, se), conv0_mean = both(v, x, jax.random.key(5))
    (lt2, _), (le2, _), _ = both(v, x, jax.random.key(5))
    (lt3, _), (le3, _), _ = both(v, x, jax.random.key(6))
    # train: batch statistics, running stats updated; deterministic given the rng
    _close(lt, lt2)
    bs0, bs1 = v["batch_stats"]["BatchNorm_0"], st["batch_stats"]["BatchNorm_0"]
    assert jax.tree.structure(st["batch_stats"]) == jax.tree.structure(v["batch_stats"])
    assert not np.allclose(bs0["mean"], bs1["mean"])
    # first BN layer's running mean moves 10% towards the batch mean of the first conv
    _close(bs1["mean"], 0.9 * bs0["mean"] + 0.1 * conv0_mean, rtol=1e-3, atol=1e-4)
    # eval: running stats, deterministic (ignores rng), stats unchanged, differs from train mode
    _close(le, le3)
    for a, b in zip(jax.tree.leaves(se), jax.tree.leaves({"batch_stats": v["batch_stats"]})):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.allclose(le, lt, atol=1e-3)
    # dropout: different rngs give different train outputs
    assert not np.allclose(lt, lt3)
    with pytest.raises(ModelError, match="rng"):
        m.apply(v, x, train=True)


@pytest.mark.parametrize("name,shape", [("cnn", FMNIST), ("cnn_bn", CIFAR)])
def test_params_interchangeable_between_conv_impls(name, shape):
    classes = 100 if name == "cnn_bn" else 10
    # every impl is checked against lax at the Conv level above; here the whole model with the
    # CPU default against lax
    impls = ("lax", default_conv_impl("cpu"))
    models = {i: make_model(name, num_classes=classes, input_shape=shape, conv_impl=i)
              for i in impls}
    v = _random_variables(models[impls[1]])
    x = _normal(2, *shape)
    for m in models.values():  # same tree and shapes (init values: test_conv_impls_same_init_*)
        vi = jax.eval_shape(m.init, jax.random.key(0))
        assert jax.tree.structure(vi) == jax.tree.structure(v)
        assert jax.tree.map(jnp.shape, vi) == jax.tree.map(jnp.shape, v)
    outs = jax.jit(lambda v, x: {i: m.apply(v, x)[0] for i, m in models.items()})(v, x)
    _close(outs[impls[1]], outs["lax"])


def test_pool_impl_same_outputs():
    a = make_model("cnn", num_classes=10, input_shape=FMNIST, conv_impl="im2col")
    b = make_model("cnn", num_classes=10, input_shape=FMNIST, conv_impl="im2col", pool_impl="lax")
    v = _random_variables(a)
    x = _normal(2, *FMNIST)
    oa, ob = jax.jit(lambda v, x: (a.apply(v, x)[0], b.apply(v, x)[0]))(v, x)
    _close(oa, ob)


@pytest.mark.parametrize("kwargs,match", [
    (dict(name="resnet"), "unknown model"),
    (dict(name="cnn", input_shape=(12, 12, 1)), "16"),
    (dict(name="cnn", input_shape=(28, 15, 1)), "16"),
    (dict(name="cnn_bn", input_shape=(7, 7, 3)), "8"),
    (dict(name="mlp", input_shape=(28, 28)), "input_shape"),
    (dict(name="mlp", input_shape=(28, 0, 1)), "input_shape"),
    (dict(name="mlp", num_classes=0), "num_classes"),
    (dict(name="cnn", conv_impl="fft"), "conv_impl"),
    (dict(name="cnn", pool_impl="avg"), "pool_impl"),
])
def test_make_model_errors(kwargs, match):
    full = {"num_classes": 10, "input_shape": FMNIST, **kwargs}
    name = full.pop("name")
    with pytest.raises(ModelError, match=match) as exc:
        make_model(name, **full)
    assert isinstance(exc.value, ValueError) and "\n" not in str(exc.value)


def test_init_runs_and_is_deterministic():
    m = make_model("mlp", num_classes=10, input_shape=FMNIST)  # cheapest init to compile
    v1, v2 = m.init(jax.random.key(0)), m.init(jax.random.key(0))
    v3 = m.init(jax.random.key(1))
    assert set(v1) == {"params"}
    for a, b, c in zip(jax.tree.leaves(v1), jax.tree.leaves(v2), jax.tree.leaves(v3)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        assert a.ndim == 1 or not np.array_equal(np.asarray(a), np.asarray(c))
    k = v1["params"]["Dense_0"]["kernel"]  # lecun_normal: std ~ 1/sqrt(fan_in)
    assert k.shape == (784, 200) and abs(float(k.std()) * np.sqrt(784) - 1) < 0.1


def test_cnn_minimum_size_works():
    m = make_model("cnn", num_classes=3, input_shape=(16, 16, 1))
    v = jax.eval_shape(m.init, jax.random.key(0))
    logits, _ = jax.eval_shape(m.apply, v, jax.ShapeDtypeStruct((1, 16, 16, 1), jnp.float32))
    assert logits.shape == (1, 3)


@pytest.mark.parametrize("name", ["cnn", "cnn_bn"])
def test_auto_conv_gives_a_lax_forward_module_for_the_passes_never_differentiated(name):
    m = make_model(name, num_classes=10, input_shape=FMNIST)  # conv_impl "auto"
    if default_conv_impl() == "lax":  # the backend trains with lax.conv already: one module does every pass
        assert m.forward_module is None
        return
    assert m.module.conv_impl == default_conv_impl() and m.forward_module.conv_impl == "lax"
    v = _random_variables(m)
    x = _normal(3, *FMNIST)
    trained_with, _ = m.apply(v, x)
    forward, state = m.apply(v, x, forward_only=True)
    _close(forward, trained_with)  # the same parameters and logits, up to float rounding (another implementation
    # ran: tests/test_speed.py counts its convolution ops; bit-equality here would depend on the CPU's kernels)
    if name == "cnn_bn":
        assert state == {"batch_stats": v["batch_stats"]}  # evaluation mode: running statistics unchanged
    with pytest.raises(ModelError, match="forward_only"):
        m.apply(v, x, train=True, forward_only=True, rng=jax.random.key(0))


def test_an_explicit_conv_impl_or_a_model_without_convolutions_has_no_forward_module():
    assert make_model("cnn", num_classes=10, input_shape=FMNIST, conv_impl="im2col").forward_module is None
    assert make_model("cnn", num_classes=10, input_shape=FMNIST, conv_impl="lax").forward_module is None
    assert make_model("mlp", num_classes=10, input_shape=FMNIST).forward_module is None
