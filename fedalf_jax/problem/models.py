"""Flax (linen) models of docs/algorithms.md §6: ``cnn``, ``cnn_bn`` and ``mlp``.

Every model is wrapped in a frozen :class:`Model` record with a uniform ``init`` / ``apply``
interface, so the federated round code never touches flax collections directly.

Convolution implementations
---------------------------
The local-training round runs *vmap over clients x lax.scan over SGD steps*. On XLA:CPU the
native convolution (``lax.conv_general_dilated``) is fast in straight-line code but its
gradients become catastrophically slow inside that program: under ``vmap`` the per-client
kernels turn the weight-dependent convolutions into grouped convolutions, and inside a ``while``
loop the CPU backend falls back to a slow generic convolution loop for them (see
``docs/lab/benchmarks.md``). The convolution is therefore pluggable (:data:`CONV_IMPLS`); all
implementations have the same parameters (``kernel`` [kh, kw, cin, cout], ``bias`` [cout]) and
compute the same function, so parameters are interchangeable between them:

``"lax"``      ``lax.conv_general_dilated`` (NHWC / HWIO), what ``flax.linen.Conv`` does.
``"im2col"``   gather the kh*kw shifted windows by static slicing, concatenate them on the channel
               axis ([B, oh, ow, kh*kw*cin]) and do one matmul with the reshaped kernel.
``"patches"``  ``lax.conv_general_dilated_patches`` (an identity-kernel convolution) + matmul.

:func:`default_conv_impl` picks one per backend from the measurements in ``docs/lab/benchmarks.md``.

Max-pooling 2x2 (stride 2) is done by reshape + max (exact: the window partition is the same as
``flax.linen.max_pool(x, (2, 2), (2, 2))`` with VALID padding, odd trailing rows/columns are
dropped the same way), because the gradient of ``reduce_window`` (``select_and_scatter``) is
slow inside ``scan`` on CPU too. ``pool_impl="lax"`` keeps ``nn.max_pool`` for comparison.
Gradients are identical where a window has a unique maximum; on ties ``jnp.max`` splits the
cotangent equally among the tied entries while ``select_and_scatter`` gives it all to the first.
In these models pooling follows a ReLU, so the only practical ties are all-zero windows, whose
gradient the ReLU blocks either way. The reshape pool's backward pass is written out (a ``custom_vjp``
with ``jnp.max``'s own tie rule, the ties counted in int32): the same cotangents bit for bit, and the
CNN's SGD step on CPU 131 ms per 12 steps instead of 167 (``experiments/probes/cnn_step.py``). Only reverse
mode goes through it: for ``jax.jvp`` or ``jax.hessian`` of a model, build it with ``pool_impl="lax"``.

Model notes
-----------
* ``cnn`` uses VALID (PyTorch-default, unpadded) convolutions: 28x28 -> 24 -> pool 12 -> 8 ->
  pool 4, so the dense layer sees 4*4*64 = 1024 features (32x32 CIFAR: 5*5*64 = 1600).
* ``cnn_bn`` uses SAME 3x3 convolutions (32 -> 16 -> 8 -> 4 spatially), BatchNorm (momentum 0.9,
  eps 1e-5, flax defaults otherwise) and dropout 0.25 after the conv stack and 0.5 after the
  256-unit dense layer (the usual Keras CIFAR-CNN rates; both are module fields).
* Module names are flax's automatic ones (``Conv_0``, ``BatchNorm_0``, ``Dense_0``, ...): the fair
  aggregation groups parameters per module (kernel + bias of one module = one layer).
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
from typing import Any, Callable, Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

__all__ = [
    "CONV_IMPLS",
    "MATMUL_PRECISIONS",
    "POOL_IMPLS",
    "MODEL_NAMES",
    "ModelError",
    "Conv",
    "max_pool_2x2",
    "default_conv_impl",
    "CNN",
    "CNNBN",
    "MLP",
    "Model",
    "make_model",
]

CONV_IMPLS = ("lax", "im2col", "patches")
MATMUL_PRECISIONS = ("default", "high", "highest")  # jax.default_matmul_precision; "default": unchanged
POOL_IMPLS = ("reshape", "lax")
MODEL_NAMES = ("cnn", "cnn_bn", "mlp")


class ModelError(ValueError):
    """Bad model name, shape or option (one-line message)."""


# Chosen by measurement (experiments/probes/bench_conv.py, docs/lab/benchmarks.md), FMNIST ``cnn`` round of
# 10 clients x 12 SGD steps x B=50 on a 2-core CPU, jax 0.10.2:
#   cpu -> "im2col": fastest inside vmap/lax.map + scan (docs/lab/benchmarks.md: ~1.7-1.9 s per round
#          with lax.map over clients, ~2.5-3.7 s with vmap); "lax" is 25-40x slower there because
#          its weight gradient, inside a while loop, keeps a non-canonical convolution layout that
#          XLA:CPU runs as a naive loop nest (41x slower than the same op outside a loop).
#   gpu/tpu -> "lax": cuDNN / the TPU convolution emitters handle batched (grouped) convolutions
#          natively; no GPU measurement was made, so the native convolution is kept there.
_DEFAULT_CONV_IMPL = {"cpu": "im2col"}


FORWARD_CONV_IMPL = "lax"  # conv_impl "auto": the convolutions of forward-only passes (Model.forward_module)


def default_conv_impl(backend: str | None = None) -> str:
    """The convolution implementation to use on ``backend`` (default: ``jax.default_backend()``)."""
    if backend is None:
        backend = jax.default_backend()
    return _DEFAULT_CONV_IMPL.get(str(backend).lower(), "lax")


def _pad_same(x: jax.Array, kh: int, kw: int) -> jax.Array:
    """Zero-pad H and W as ``padding="SAME"`` does for stride 1 (low = (k-1)//2)."""
    ph, pw = kh - 1, kw - 1
    return jnp.pad(x, ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)))


def _windows(x: jax.Array, kh: int, kw: int):
    """The kh*kw shifted [B, oh, ow, cin] views of a (padded) NHWC input, in (i, j) order."""
    oh, ow = x.shape[1] - kh + 1, x.shape[2] - kw + 1
    for i in range(kh):
        for j in range(kw):
            yield i, j, x[:, i : i + oh, j : j + ow, :]


def _im2col(x: jax.Array, kh: int, kw: int) -> jax.Array:
    """[B, oh, ow, kh*kw*cin] patches of a (padded) NHWC input, features in (i, j, c) order."""
    return jnp.concatenate([w for _, _, w in _windows(x, kh, kw)], axis=-1)


def conv2d(x: jax.Array, kernel: jax.Array, padding: str = "VALID", impl: str = "lax") -> jax.Array:
    """Stride-1 2-D convolution (cross-correlation), NHWC input, HWIO kernel, no bias."""
    kh, kw, cin, cout = kernel.shape
    padding = padding.upper()
    if padding not in ("VALID", "SAME"):
        raise ModelError(f"padding must be 'VALID' or 'SAME', got {padding!r}")
    if impl == "lax":
        return lax.conv_general_dilated(
            x, kernel, window_strides=(1, 1), padding=padding,
            dimension_numbers=("NHWC", "HWIO", "NHWC"),
        )
    if padding == "SAME":
        x = _pad_same(x, kh, kw)
    if impl == "im2col":
        return _im2col(x, kh, kw) @ kernel.reshape(kh * kw * cin, cout)
    if impl == "patches":
        cols = lax.conv_general_dilated_patches(
            x, (kh, kw), (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"),
        )  # features in (c, i, j) order
        return cols @ kernel.transpose(2, 0, 1, 3).reshape(cin * kh * kw, cout)
    raise ModelError(f"unknown conv impl {impl!r}; expected one of {CONV_IMPLS}")


class Conv(nn.Module):
    """Stride-1 convolution with the parameters of ``flax.linen.Conv`` (kernel HWIO, bias)."""

    features: int
    kernel_size: Sequence[int]
    padding: str = "VALID"
    impl: str = "lax"
    kernel_init: Callable[..., Any] = nn.initializers.lecun_normal()
    bias_init: Callable[..., Any] = nn.initializers.zeros_init()

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kh, kw = self.kernel_size
        kernel = self.param("kernel", self.kernel_init, (kh, kw, x.shape[-1], self.features))
        bias = self.param("bias", self.bias_init, (self.features,))
        return conv2d(x, kernel, self.padding, self.impl) + bias


def _windows_2x2(x: jax.Array) -> jax.Array:
    """[B, H/2, 2, W/2, 2, C]: the 2x2 windows of an NHWC input (odd trailing rows/cols dropped)."""
    b, h, w, c = x.shape
    return x[:, : 2 * (h // 2), : 2 * (w // 2), :].reshape(b, h // 2, 2, w // 2, 2, c)


@jax.custom_vjp
def _max_pool_reshape(x: jax.Array) -> jax.Array:
    return jnp.max(_windows_2x2(x), axis=(2, 4))


def _max_pool_reshape_fwd(x):
    y = _max_pool_reshape(x)
    return y, (x, y)


def _max_pool_reshape_bwd(res, g):
    """``jnp.max``'s own gradient (the cotangent split equally among a window's tied maxima), written as one
    mask, an integer count and one select: JAX's rule (float sums of a float mask) made the CNN's SGD step
    on CPU ~25% longer; so do float counts (docs/lab/benchmarks.md, "The pooling's backward pass")."""
    x, y = res
    xw = _windows_2x2(x)
    hit = xw == y[:, :, None, :, None, :]
    count = jnp.sum(hit, axis=(2, 4), keepdims=True).astype(g.dtype)  # counted in int32: as floats, 25% slower
    gw = jnp.where(hit, g[:, :, None, :, None, :] / count, jnp.zeros((), g.dtype))
    b, h, w, c = x.shape
    dx = gw.reshape(b, 2 * y.shape[1], 2 * y.shape[2], c)
    return (jnp.pad(dx, ((0, 0), (0, h - dx.shape[1]), (0, w - dx.shape[2]), (0, 0))),)


_max_pool_reshape.defvjp(_max_pool_reshape_fwd, _max_pool_reshape_bwd)


def max_pool_2x2(x: jax.Array, impl: str = "reshape") -> jax.Array:
    """2x2 max-pool, stride 2, VALID (odd trailing rows/cols dropped), NHWC."""
    if impl == "lax":
        return nn.max_pool(x, (2, 2), strides=(2, 2), padding="VALID")
    if impl != "reshape":
        raise ModelError(f"unknown pool impl {impl!r}; expected one of {POOL_IMPLS}")
    return _max_pool_reshape(x)


class CNN(nn.Module):
    """conv5x5x32-ReLU-pool-conv5x5x64-ReLU-pool-dense512-ReLU-dense (VALID convs, as PyTorch)."""

    num_classes: int
    conv_impl: str = "lax"
    pool_impl: str = "reshape"

    @nn.compact
    def __call__(self, x, train: bool = False):
        del train
        x = max_pool_2x2(nn.relu(Conv(32, (5, 5), "VALID", self.conv_impl)(x)), self.pool_impl)
        x = max_pool_2x2(nn.relu(Conv(64, (5, 5), "VALID", self.conv_impl)(x)), self.pool_impl)
        x = x.reshape(x.shape[0], -1)
        x = nn.relu(nn.Dense(512)(x))
        return nn.Dense(self.num_classes)(x)


class CNNBN(nn.Module):
    """3 x [conv3x3 SAME - BatchNorm - ReLU - pool] - dropout - dense256 - ReLU - dropout - dense."""

    num_classes: int
    conv_impl: str = "lax"
    pool_impl: str = "reshape"
    features: Sequence[int] = (32, 64, 128)
    conv_dropout: float = 0.25
    dense_dropout: float = 0.5
    bn_momentum: float = 0.9

    @nn.compact
    def __call__(self, x, train: bool = False):
        for f in self.features:
            x = Conv(f, (3, 3), "SAME", self.conv_impl)(x)
            x = nn.BatchNorm(use_running_average=not train, momentum=self.bn_momentum)(x)
            x = max_pool_2x2(nn.relu(x), self.pool_impl)
        x = x.reshape(x.shape[0], -1)
        x = nn.Dropout(self.conv_dropout, deterministic=not train)(x)
        x = nn.relu(nn.Dense(256)(x))
        x = nn.Dropout(self.dense_dropout, deterministic=not train)(x)
        return nn.Dense(self.num_classes)(x)


class MLP(nn.Module):
    """flatten - 200 - ReLU - 200 - ReLU - classes (FedLF's Fashion-MNIST model)."""

    num_classes: int
    hidden: Sequence[int] = (200, 200)

    @nn.compact
    def __call__(self, x, train: bool = False):
        del train
        x = x.reshape(x.shape[0], -1)
        for h in self.hidden:
            x = nn.relu(nn.Dense(h)(x))
        return nn.Dense(self.num_classes)(x)


@dataclasses.dataclass(frozen=True)
class Model:
    """A flax module plus the shapes it was built for, with a uniform init/apply."""

    name: str
    module: nn.Module
    input_shape: tuple
    num_classes: int
    has_batch_stats: bool
    matmul_precision: str = "default"  # of apply's float32 matmuls and convolutions (and their gradients)
    takes_train: bool = True  # the module's __call__ has a train argument (a user's module may not)
    # The module for forward passes that are never differentiated (``apply(..., forward_only=True)``: a
    # client's loss l_i = f_i(θ)): the same parameters, another implementation of its convolutions. On CPU
    # the training default im2col (whose backward XLA runs fast) is about 1.6x slower forward-only than
    # ``lax.conv`` (docs/lab/benchmarks.md). None: ``module`` does every pass.
    forward_module: Optional[nn.Module] = None

    def init(self, key: jax.Array) -> dict:
        """Variables: ``{'params': ...}`` (+ ``'batch_stats'`` for models with BatchNorm).

        Compiled once: eager flax init would dispatch hundreds of small ops. Also usable under jit / vmap
        (e.g. over seeds). A built-in model's compiled init is shared per (module, input shape) by every
        :class:`Model` of this process (its code cannot change); a user's module is traced afresh for each
        ``Model`` (one per run): it may read globals a notebook changed since the last run.
        """
        if _shared_init(self):
            return _jitted_init(self.module, self.input_shape, self.takes_train)(key)
        own = self.__dict__.get("_own_init")
        if own is None:  # not a field: equality, hashing and dataclasses.replace ignore it
            own = _init_program(self.module, self.input_shape, self.takes_train)
            object.__setattr__(self, "_own_init", own)
        return own(key)

    def apply(self, variables: dict, x: jax.Array, *, train: bool = False, rng=None, forward_only: bool = False,
              features: bool = False):
        """Return ``(logits, new_state)`` (``features``: ``((logits, features), new_state)``).

        A module may return ``(logits, features)`` (or ``{"logits": ..., "features": ...}``): the features
        (MOON's projection, a prototype's embedding) reach an algorithm's ``local_loss``; every other pass
        uses the logits alone (:func:`split_outputs`). ``features`` is ``None`` for a module returning logits.

        ``forward_only``: the caller never differentiates this pass (and ``train`` is False), so
        :attr:`forward_module` may compute it (the same logits up to float rounding).

        ``new_state`` is ``{}`` for models without batch statistics, otherwise
        ``{'batch_stats': ...}`` -- the updated running statistics when ``train`` (batch
        statistics are used for normalisation), the given ones unchanged when not (running
        statistics are used). Merge with ``{**variables, **new_state}``. ``rng`` feeds dropout
        when ``train`` (required then for ``cnn_bn``).

        With ``matmul_precision`` other than ``"default"`` the call is traced under
        ``jax.default_matmul_precision``: every dot and convolution it emits (and, through their
        transposes, the gradients' ones) carries that precision (on GPU: ``"highest"`` turns TF32 off).
        """
        if forward_only and train:
            raise ModelError("forward_only=True is for evaluation-mode passes (train=False)")
        module = self.forward_module if forward_only and self.forward_module is not None else self.module
        if self.matmul_precision == "default":
            out, state = self._apply(module, variables, x, train=train, rng=rng)
        else:
            with jax.default_matmul_precision(self.matmul_precision):
                out, state = self._apply(module, variables, x, train=train, rng=rng)
        logits, feats = split_outputs(out)
        return ((logits, feats) if features else logits), state

    def _apply(self, module: nn.Module, variables: dict, x: jax.Array, *, train: bool, rng):
        rngs = {}
        if train and rng is not None:
            rngs["dropout"] = rng
        kw = {"train": train} if self.takes_train else {}
        if not self.has_batch_stats:
            return module.apply(variables, x, rngs=rngs, **kw), {}
        if not train:
            logits = module.apply(variables, x, **kw)
            return logits, {"batch_stats": variables["batch_stats"]}
        if rng is None:
            raise ModelError(f"model {self.name!r} needs rng= for dropout when train=True")
        logits, mutated = module.apply(
            variables, x, rngs=rngs, mutable=["batch_stats"], **kw
        )
        return logits, {"batch_stats": mutated["batch_stats"]}


def split_outputs(out):
    """``(logits, features)`` of what a module returned: ``(logits, features)``, a dict with ``"logits"`` (and
    ``"features"``), or the logits alone (features ``None``)."""
    if isinstance(out, dict) and "logits" in out:
        return out["logits"], out.get("features")
    if isinstance(out, (tuple, list)) and len(out) == 2:
        return out[0], out[1]
    return out, None


def _shared_init(model: "Model") -> bool:
    """Whether ``model`` is a built-in one (made by :func:`make_model`), whose compiled init may be shared."""
    return model.name in MODEL_NAMES and type(model.module) in (MLP, CNN, CNNBN)


@functools.lru_cache(maxsize=64)
def _jitted_init(module: nn.Module, input_shape: tuple, takes_train: bool = True):
    return _init_program(module, input_shape, takes_train)


def _init_program(module: nn.Module, input_shape: tuple, takes_train: bool = True):
    def init(key):
        x = jnp.zeros((1, *input_shape), jnp.float32)
        return dict(module.init({"params": key}, x, **({"train": False} if takes_train else {})))

    return jax.jit(init)


def _cnn_out(n: int) -> int:
    return ((n - 4) // 2 - 4) // 2


def make_model(
    name: str,
    *,
    num_classes: int,
    input_shape: Sequence[int],
    conv_impl: str = "auto",
    pool_impl: str = "reshape",
    matmul_precision: str = "default",
) -> Model:
    """Build model ``name`` for NHWC inputs of per-example shape ``input_shape`` (H, W, C);
    ``matmul_precision`` sets the precision of its float32 matmuls and convolutions (:meth:`Model.apply`)."""
    if name not in MODEL_NAMES:
        raise ModelError(f"unknown model {name!r}; expected one of {MODEL_NAMES}")
    try:
        input_shape = tuple(int(d) for d in input_shape)
    except (TypeError, ValueError):
        raise ModelError(f"input_shape must be (H, W, C) integers, got {input_shape!r}") from None
    if len(input_shape) != 3 or min(input_shape) < 1:
        raise ModelError(f"input_shape must be (H, W, C) with positive sizes, got {input_shape}")
    if isinstance(num_classes, bool) or not isinstance(num_classes, numbers.Integral) \
            or num_classes < 1:
        raise ModelError(f"num_classes must be a positive int, got {num_classes!r}")
    num_classes = int(num_classes)
    auto = conv_impl == "auto"
    if auto:
        conv_impl = default_conv_impl()
    if conv_impl not in CONV_IMPLS:
        raise ModelError(f"unknown conv_impl {conv_impl!r}; expected 'auto' or one of {CONV_IMPLS}")
    if pool_impl not in POOL_IMPLS:
        raise ModelError(f"unknown pool_impl {pool_impl!r}; expected one of {POOL_IMPLS}")
    if matmul_precision not in MATMUL_PRECISIONS:
        raise ModelError(f"unknown matmul_precision {matmul_precision!r}; expected one of {MATMUL_PRECISIONS}")
    h, w, _ = input_shape
    if name == "cnn":
        if min(_cnn_out(h), _cnn_out(w)) < 1:
            raise ModelError(
                f"model 'cnn' needs H, W >= 16 (two 5x5 VALID convs + 2 pools), got {input_shape}")
        make = lambda impl: CNN(num_classes, impl, pool_impl)  # noqa: E731
        bs = False
    elif name == "cnn_bn":
        if min(h, w) < 8:
            raise ModelError(f"model 'cnn_bn' needs H, W >= 8 (three 2x2 pools), got {input_shape}")
        make = lambda impl: CNNBN(num_classes, impl, pool_impl)  # noqa: E731
        bs = True
    else:
        return Model(name, MLP(num_classes), input_shape, num_classes, False, matmul_precision)
    # conv_impl "auto": the backend's training default, and lax.conv for the passes never differentiated
    forward = make(FORWARD_CONV_IMPL) if auto and conv_impl != FORWARD_CONV_IMPL else None
    return Model(name, make(conv_impl), input_shape, num_classes, bs, matmul_precision, forward_module=forward)
