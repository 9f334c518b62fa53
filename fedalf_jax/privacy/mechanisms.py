"""Privacy mechanisms applied to what a client uploads (formulas: docs/algorithms.md §4; guarantees: docs/privacy.md).

Every mechanism here is a pure function of a PRNG key and a pytree, safe under ``jax.jit`` and
``jax.vmap``.  The privacy hyper-parameters (``epsilon``, ``delta``, ``clip``) may be traced JAX
scalars, so a sweep can ``vmap`` a whole run over them; only ``layer_of`` and ``neighbouring`` are
static.

**Bad values.** Concrete (not traced) impossible values are refused with a ``ValueError``: ε ≤ 0,
non-finite or subnormal; δ outside (0, 1) (δ ≥ 1.25 would give σ = 0: no noise at all); a clip that
is not finite and positive (a negative clip would flip the update's sign); parameters holding NaN or
±inf.  Traced values cannot be checked inside ``jit`` and are skipped (a concrete array closed over by a
jitted function is still checked, with NumPy on the host: no ``bool()`` of a traced value); the run
configuration validates every
concrete value of a run or sweep before tracing (``fedalf_jax.experiment.config``), and inside a
compiled program a tensor holding a non-finite value comes out all-NaN from every mechanism (never
passed through), so the run's divergence check stops it.  ``adaptive_ldp`` with a concrete
ε ≥ 16.6 warns: in float32 its flip probability ``1/(e^ε+1)`` rounds to 0 and it releases ``w``
exactly.

Per-tensor quantities (local mechanisms).  For one parameter tensor ("layer") with entries ``w``::

    c = (max w + min w) / 2          centre
    r = (max w - min w) / 2          radius          (so |w - c| <= r)
    δ = w - c                        offset of each weight
    k = (e^ε + 1) / (e^ε - 1) = 1 / tanh(ε/2)

By default every pytree leaf is its own tensor; ``layer_of`` (a pytree of static ints with the same
structure, as in :func:`fedalf_jax.sim.fairness.fair_direction`) makes leaves with the same id share one
``c, r`` (e.g. kernel and bias of a module together).  The simulator's round always applies the
mechanisms per tensor (``layer_of=None``), whatever ``--layers`` says: ``--layers`` sets the blocks of
the fair aggregation only.  Non-floating and empty leaves pass through unchanged.  The PRNG key is
split once per leaf, in ``jax.tree_util`` leaf order.

Note that ``c`` and ``r`` are deterministic functions of the raw tensor and are *not* randomised by
either local mechanism: see docs/privacy.md for exactly what is and is not protected.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from ..runtime.notices import Notice

__all__ = [
    "LDP_NAMES",
    "NEIGHBOURING",
    "adaptive_ldp",
    "check_epsilon",
    "clip_global_norm",
    "float32_epsilon",
    "gaussian_delta",
    "gaussian_dp",
    "gaussian_epsilon",
    "gaussian_sigma",
    "ldp_fl",
    "mechanism",
]

LDP_NAMES = ("none", "adaptive", "ldp_fl")
NEIGHBOURING = ("add_remove", "replace")

PyTree = Any


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


_TINY32 = float(np.finfo(np.float32).tiny)
ADAPTIVE_EXACT_EPSILON = 16.6  # float32: sigmoid(ε) rounds to 1 above this, so nothing is flipped
# (ldp_fl's probabilities are σ(±ε) combinations too: the same cut-off, above which an output has probability 0)


def _concrete(x) -> bool:
    return not any(isinstance(v, jax.core.Tracer) for v in jax.tree_util.tree_leaves(x))


def check_epsilon(epsilon) -> None:
    """Refuse a concrete ε that is not a finite number above the float32 subnormal range."""
    if not _concrete(epsilon):
        return
    e = np.asarray(epsilon, np.float64)
    if not (np.all(np.isfinite(e)) and np.all(e >= _TINY32)):
        raise ValueError(f"epsilon={epsilon!r} must be a finite privacy budget > 0 (and not subnormal, "
                         f"≥ {_TINY32:.3g}); e.g. epsilon=2")


def _check_params(params) -> None:
    # Leaf by leaf: a traced leaf is skipped, a concrete one (including an array closed over by a
    # jitted function) is checked with NumPy on the host, so no bool() ever meets a tracer (inside a
    # trace, jnp.isfinite of even a concrete array returns a tracer).
    for x in jax.tree_util.tree_leaves(params):
        if isinstance(x, jax.core.Tracer) or not _perturbable(x):
            continue
        if not np.all(np.isfinite(np.asarray(x))):
            raise ValueError("the parameters to perturb hold NaN or ±inf; a mechanism cannot release them "
                             "(the model diverged: lower the learning rate)")


def _perturbable(x) -> bool:
    return jnp.issubdtype(jnp.result_type(x), jnp.floating) and np.size(x) > 0


def _compute_dtype(x):
    # at least float32 for the arithmetic (bf16/f16 leaves), cast back at the end
    return jnp.promote_types(jnp.result_type(x), jnp.float32)


def _leaf_keys(key, n: int):
    return jax.random.split(key, n)


def _centre_radius(leaves, layer_of_leaves):
    """Per-leaf (c, r) in the compute dtype; leaves sharing a layer id share c and r."""
    groups: dict[Any, list[int]] = {}
    for i, (leaf, lid) in enumerate(zip(leaves, layer_of_leaves)):
        if _perturbable(leaf):
            groups.setdefault(lid, []).append(i)
    cr = [None] * len(leaves)
    for idx in groups.values():
        dt = _compute_dtype(leaves[idx[0]])
        for i in idx[1:]:
            dt = jnp.promote_types(dt, _compute_dtype(leaves[i]))
        hi = jnp.max(jnp.stack([jnp.max(leaves[i]).astype(dt) for i in idx]))
        lo = jnp.min(jnp.stack([jnp.min(leaves[i]).astype(dt) for i in idx]))
        c = (hi + lo) / 2
        r = (hi - lo) / 2
        for i in idx:
            cr[i] = (c, r)
    return cr


def _layer_ids(params, layer_of):
    leaves, treedef = jax.tree_util.tree_flatten(params)
    if layer_of is None:
        return leaves, treedef, list(range(len(leaves)))
    ids = treedef.flatten_up_to(layer_of)
    return leaves, treedef, [int(i) for i in ids]


def _k_factor(eps):
    """k = (e^ε+1)/(e^ε−1) = 1/tanh(ε/2), written in the numerically stable form."""
    return 1.0 / jnp.tanh(eps / 2)


# ---------------------------------------------------------------------------------------------
# local mechanisms
# ---------------------------------------------------------------------------------------------


def _per_tensor(key, params: PyTree, epsilon, layer_of, draw, variance=None):
    """Apply ``draw(key, w, c, r, ε, k)`` to every perturbable leaf, each with its own key and with
    the centre ``c`` and radius ``r`` of its tensor (or of its ``layer_of`` group).

    With ``variance(noisy, c, r, ε, k)`` it returns ``(released, var)``: ``var`` the per-value noise
    variance the server can compute from the released value and its tensor's ``c``, ``r`` (zeros for
    leaves that pass through)."""
    leaves, treedef, ids = _layer_ids(params, layer_of)
    if not leaves:
        return params if variance is None else (params, params)
    keys = _leaf_keys(key, len(leaves))
    cr = _centre_radius(leaves, ids)
    out, var = [], []
    for i, leaf in enumerate(leaves):
        if cr[i] is None:
            out.append(leaf)
            var.append(jnp.zeros(jnp.shape(leaf), jnp.float32))
            continue
        c, r = cr[i]
        w = jnp.asarray(leaf).astype(c.dtype)
        eps = jnp.asarray(epsilon).astype(c.dtype)
        k = _k_factor(eps)
        noisy = draw(keys[i], w, c, r, eps, k)
        # a tensor with a non-finite entry has a non-finite c or r: it comes out all-NaN
        noisy = jnp.where(jnp.isfinite(c) & jnp.isfinite(r), noisy, jnp.nan)
        out.append(noisy.astype(jnp.result_type(leaf)))
        if variance is not None:
            var.append(variance(noisy, c, r, eps, k).astype(jnp.float32))
    released = jax.tree_util.tree_unflatten(treedef, out)
    return released if variance is None else (released, jax.tree_util.tree_unflatten(treedef, var))


def _adaptive_variance(noisy, c, r, eps, k):
    # |w̃ − c| = k|δ|, so Var = (k² − 1)δ² = (k² − 1)(w̃ − c)²/k², exactly
    return (k * k - 1.0) * jnp.square((noisy - c) / k)


def _ldp_fl_variance(noisy, c, r, eps, k):
    # Var = r²k² − δ²; the released value c ± rk says nothing of δ, so the bound r²k² (δ = 0) is used
    return jnp.broadcast_to(jnp.square(r * k), noisy.shape)


def adaptive_ldp(key, params: PyTree, epsilon, *, layer_of: PyTree | None = None, with_variance: bool = False):
    """Adaptive LDP of the source paper (LDP-FedALF), applied per tensor.

    With ``c, r, δ, k`` as in the module docstring, every weight independently becomes::

        w̃ = c + kδ   with probability  p = e^ε / (e^ε + 1)
        w̃ = c − kδ   with probability  1 − p = 1 / (e^ε + 1)

    ``E[w̃] = c + kδ(2p − 1) = c + kδ·tanh(ε/2) = c + δ = w`` (unbiased) and
    ``Var[w̃] = k²δ² − δ² = δ²(k² − 1)``, which is at most LDP-FL's ``r²k² − δ²`` because
    ``|δ| ≤ r``.

    Privacy (docs/privacy.md): the output reveals ``|δ| = |w̃ − c|/k`` exactly, and ``c, r`` are not
    randomised; only the *sign* of ``δ`` goes through randomised response with ratio ``e^ε``.  It is
    ε-LDP for the sign of each weight, not for the weight.

    ``epsilon`` may be a traced scalar.  ``layer_of``: optional pytree of static ints grouping
    leaves that share one ``c, r`` (default: each leaf alone).  ``with_variance``: return
    ``(w̃, var)``, ``var = (k² − 1)(w̃ − c)²/k²`` the exact noise variance of each released value,
    which whoever knows the tensor's centre ``c`` computes from ``w̃`` alone.
    """
    check_epsilon(epsilon)
    _check_params(params)
    if _concrete(epsilon) and np.any(np.asarray(epsilon, np.float64) >= ADAPTIVE_EXACT_EPSILON):
        warnings.warn(f"adaptive_ldp with epsilon={epsilon!r} >= {ADAPTIVE_EXACT_EPSILON}: in float32 the flip "
                      f"probability 1/(e^epsilon+1) rounds to 0, so every weight is released exactly",
                      Notice, stacklevel=2)

    return _per_tensor(key, params, epsilon, layer_of, _adaptive_draw,
                       _adaptive_variance if with_variance else None)


def _adaptive_draw(key, w, c, r, eps, k):
    keep = jax.random.bernoulli(key, jax.nn.sigmoid(eps), w.shape)  # P = e^ε / (e^ε + 1)
    kd = k * (w - c)
    return c + jnp.where(keep, kd, -kd)


def ldp_fl(key, params: PyTree, epsilon, *, layer_of: PyTree | None = None, with_variance: bool = False):
    """LDP-FL (Sun et al., IJCAI 2021), applied per tensor.

    With ``c, r, δ, k`` as in the module docstring, every weight independently becomes::

        w̃ = c + rk   with probability  p(w) = [(w − c)(e^ε − 1) + r(e^ε + 1)] / [2r(e^ε + 1)]
                                              = 1/2 + δ/(2rk)
        w̃ = c − rk   otherwise.

    ``E[w̃] = c + rk(2p − 1) = c + δ = w`` (unbiased), ``Var[w̃] = r²k² − δ²``.
    Given ``c, r`` it is ε-LDP per weight: for any ``w, w'`` in ``[c − r, c + r]`` the probability
    ratio of either output is at most ``[r(e^ε−1) + r(e^ε+1)] / [−r(e^ε−1) + r(e^ε+1)] = e^ε``.
    ``c, r`` themselves are not randomised (both output values ``c ± rk`` reveal them).

    A constant tensor (``r = 0``) is returned unchanged (no NaN).  ``epsilon`` may be traced.
    ``with_variance``: return ``(w̃, var)`` with ``var = r²k²``, an upper bound of the true
    ``r²k² − δ²`` (the released value does not reveal ``δ``).
    """
    check_epsilon(epsilon)
    _check_params(params)
    if _concrete(epsilon) and np.any(np.asarray(epsilon, np.float64) >= ADAPTIVE_EXACT_EPSILON):
        warnings.warn(f"ldp_fl with epsilon={epsilon!r} >= {ADAPTIVE_EXACT_EPSILON}: in float32 an extreme weight's "
                      f"other output has probability 0, so the release is not epsilon-LDP", Notice, stacklevel=2)

    def draw(key, w, c, r, eps, k):
        positive = r > 0
        r_safe = jnp.where(positive, r, jnp.ones_like(r))
        plus = jax.random.bernoulli(key, _ldp_fl_p_plus(w, c, r_safe, eps), w.shape)
        rk = r * k
        return jnp.where(positive, c + jnp.where(plus, rk, -rk), w)

    return _per_tensor(key, params, epsilon, layer_of, draw, _ldp_fl_variance if with_variance else None)


def _ldp_fl_p_plus(w, c, r, eps):
    """LDP-FL's ``P(w̃ = c + rk) = 1/2 + δ/(2rk)``, written as ``((1 + t)·σ(ε) + (1 − t)·σ(−ε))/2`` with
    ``t = δ/r`` clipped to ``[−1, 1]`` (the same value in real arithmetic). In float32 the direct form is not
    ε-LDP: ``(w − c)/r`` rounds past ±1 for a tensor whose spread is small beside its centre (then a
    probability clips to exactly 0, at any ε), and ``1/2 − 1/(2k)`` cancels to 0 at ε ≥ 16. Here each
    output's probability lies between ``σ(−ε)`` and ``σ(ε)``, computed without cancellation, so their ratio
    is ``e^ε`` up to float32 rounding until ``σ(ε)`` itself rounds to 1 (``ADAPTIVE_EXACT_EPSILON``)."""
    t = jnp.clip((w - c) / r, -1.0, 1.0)
    return ((1 + t) * jax.nn.sigmoid(eps) + (1 - t) * jax.nn.sigmoid(-eps)) / 2


SAMPLER_GRID = 2.0 ** 23  # jax.random.uniform(float32) draws k/2^23, so bernoulli(p) = (u < p) is 1 w.p. ceil(p·2^23)/2^23


@functools.lru_cache(maxsize=256)
def float32_epsilon(mechanism: str, epsilon: float) -> float:
    """The per-value ε that ``adaptive`` or ``ldp_fl`` really gives in float32: the largest log-ratio of one
    output's probability under two inputs, with each probability the one ``jax.random.bernoulli`` really
    samples (``ceil(p·2^23)/2^23``, :data:`SAMPLER_GRID`) for the float32 ``p`` the mechanism hands it.
    ``a = σ(ε)`` and ``b = σ(−ε)`` are computed as the mechanism computes them, in float32 on JAX's default
    backend (the one the rounds run on). ``adaptive`` keeps the sign with ``G(a)``: ``log(G(a)/(1 − G(a)))``.
    ``ldp_fl``'s ``P(c + rk)`` lies in ``[b, a]`` for every float32 ``t`` in ``[−1, 1]`` (checked in
    ``tests/test_privacy_sampling.py``; ``a`` at ``t = 1``, ``b`` at ``t = −1``): ``max(log(G(a)/G(b)),
    log((1 − G(b))/(1 − G(a))))``. The sampler's grid rounds each probability up, so this is often a
    little above ε (14.5 → 14.556; 1 → 1 + 1e-7 for ``adaptive``), sometimes below; ``inf`` once an output
    has probability 0 (ε ≥ 16.64, past :data:`ADAPTIVE_EXACT_EPSILON`). The accounting states
    ``max(ε, this)``."""
    if mechanism not in ("adaptive", "ldp_fl"):
        raise ValueError(f"float32_epsilon is for ldp 'adaptive' or 'ldp_fl', not {mechanism!r}")
    e = jnp.float32(epsilon)
    a, b = float(jax.nn.sigmoid(e)), float(jax.nn.sigmoid(-e))
    ga, gb = (min(1.0, math.ceil(p * SAMPLER_GRID) / SAMPLER_GRID) for p in (a, b))
    if ga >= 1.0 or gb <= 0.0:
        return math.inf
    if mechanism == "adaptive":
        return math.log(ga / (1.0 - ga))
    return max(math.log(ga / gb), math.log((1.0 - gb) / (1.0 - ga)))


def _no_ldp(key, params: PyTree, epsilon=None, *, layer_of: PyTree | None = None, with_variance: bool = False):
    """ldp="none": the identity (the key and epsilon are ignored); its variance is zero."""
    del key, epsilon, layer_of
    if with_variance:
        return params, jax.tree_util.tree_map(lambda x: jnp.zeros(jnp.shape(x), jnp.float32), params)
    return params


_LDP = {"none": _no_ldp, "adaptive": adaptive_ldp, "ldp_fl": ldp_fl}


def mechanism(name: str | None) -> Callable[..., PyTree]:
    """The local mechanism called ``name``: ``"none"`` (identity), ``"adaptive"``, ``"ldp_fl"``.

    Every returned function has the signature ``f(key, params, epsilon, *, layer_of=None,
    with_variance=False)`` (``with_variance=True``: it returns ``(released, per-value variance)``).
    """
    key = "none" if name is None else name
    if key not in _LDP:
        raise ValueError(f"unknown ldp mechanism {name!r}; use one of {', '.join(map(repr, LDP_NAMES))}")
    return _LDP[key]


# ---------------------------------------------------------------------------------------------
# Gaussian mechanism (DP-FedALF baseline)
# ---------------------------------------------------------------------------------------------


def _global_norm(tree: PyTree):
    sq = [jnp.sum(jnp.square(x.astype(_compute_dtype(x))))
          for x in jax.tree_util.tree_leaves(tree) if _perturbable(x)]
    if not sq:
        return jnp.zeros((), jnp.float32)
    return jnp.sqrt(sum(sq))


def clip_global_norm(update: PyTree, clip) -> PyTree:
    """Scale ``update`` by ``min(1, clip/‖update‖₂)``, the L2 norm taken over all leaves together.

    Written as ``clip / max(‖u‖, clip)`` so a zero update stays zero (no NaN).
    """
    norm = _global_norm(update)
    clip = jnp.asarray(clip, norm.dtype)
    scale = clip / jnp.maximum(norm, clip)
    return jax.tree_util.tree_map(
        lambda x: (x * scale).astype(jnp.result_type(x)) if _perturbable(x) else x, update)


def gaussian_sigma(epsilon, delta, clip, *, neighbouring: str = "add_remove"):
    """Noise std of the classic Gaussian mechanism (Dwork & Roth 2014, Thm A.1).

    ``σ = Δ₂ · sqrt(2 ln(1.25/δ)) / ε`` with L2 sensitivity ``Δ₂``.  The clipped update lies in the
    ball of radius ``clip``, so:

    * ``neighbouring="add_remove"`` (default; the classic ``σ = C·sqrt(2 ln(1.25/δ))/ε``):
      ``Δ₂ = clip``; neighbours are the client's clipped update vs. no contribution (the zero
      update), i.e. user-level add/remove of the client, the DP-FedAvg convention.
    * ``neighbouring="replace"``: ``Δ₂ = 2·clip``; neighbours are any two datasets of this client
      (any two clipped updates), i.e. the local-DP view of the upload.  σ doubles.

    Theorem A.1 is proven for ``0 < ε < 1`` only; :func:`gaussian_epsilon` gives the exact ε this σ
    achieves (analytic Gaussian accounting), e.g. 1.61 at the nominal ε = 2, δ = 1e-5.  Arguments may
    be traced; concrete impossible values are refused (module docstring).
    """
    if neighbouring not in NEIGHBOURING:
        raise ValueError(f"unknown neighbouring={neighbouring!r}; use 'add_remove' or 'replace'")
    check_epsilon(epsilon)
    _check_delta_clip(delta, clip)
    factor = 1.0 if neighbouring == "add_remove" else 2.0
    eps = jnp.asarray(epsilon, jnp.result_type(float))
    delta = jnp.asarray(delta, eps.dtype)
    clip = jnp.asarray(clip, eps.dtype)
    return factor * clip * jnp.sqrt(2.0 * jnp.log(1.25 / delta)) / eps


def _check_delta_clip(delta, clip) -> None:
    if _concrete(delta):
        d = np.asarray(delta, np.float64)
        if not (np.all(np.isfinite(d)) and np.all(d > 0) and np.all(d < 1)):
            raise ValueError(f"delta={delta!r} must lie strictly between 0 and 1 (δ ≥ 1.25 would give σ = 0: "
                             f"no noise); use e.g. delta=1e-5")
    if _concrete(clip):
        c = np.asarray(clip, np.float64)
        if not (np.all(np.isfinite(c)) and np.all(c > 0)):
            raise ValueError(f"clip={clip!r} must be finite and > 0 (a negative clip would flip the update's "
                             f"sign); use e.g. clip=1.0")


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def gaussian_delta(epsilon: float, sigma_over_sensitivity: float) -> float:
    """The exact δ(ε) of the Gaussian mechanism with noise ``σ = s·Δ₂`` (Balle & Wang 2018, Thm 8):
    ``Φ(1/(2s) − εs) − e^ε Φ(−1/(2s) − εs)``.

    Host-side, concrete values: ``epsilon`` must be finite and > 0 and ``s`` finite and > 0, else a
    one-line ``ValueError`` (ε ≤ 0 would return a meaningless number, s = 0 divides by zero)."""
    try:
        s, e = float(sigma_over_sensitivity), float(epsilon)
    except (TypeError, ValueError):
        raise ValueError(f"gaussian_delta: epsilon={epsilon!r} and sigma_over_sensitivity={sigma_over_sensitivity!r} "
                         f"must be numbers; pass e.g. gaussian_delta(1.0, 2.0)") from None
    if not (math.isfinite(e) and e > 0):
        raise ValueError(f"gaussian_delta: epsilon={epsilon!r} must be finite and > 0; pass a positive privacy "
                         f"budget, e.g. epsilon=1")
    if not (math.isfinite(s) and s > 0):
        raise ValueError(f"gaussian_delta: sigma_over_sensitivity={sigma_over_sensitivity!r} must be finite and > 0 "
                         f"(the noise std divided by the L2 sensitivity); pass e.g. gaussian_sigma(...)/clip")
    tail = _phi(-0.5 / s - e * s)
    second = 0.0 if tail == 0.0 else math.exp(min(e + math.log(tail), 700.0))  # e^ε Φ(·) without overflow
    return _phi(0.5 / s - e * s) - second


def gaussian_epsilon(epsilon, delta, *, neighbouring: str = "add_remove") -> float:
    """The exact ε at ``delta`` of the σ that :func:`gaussian_sigma` calibrates for ``(epsilon, delta)``.

    The classic calibration ``σ = Δ₂·sqrt(2 ln(1.25/δ))/ε`` is only proven for ε < 1; the analytic
    Gaussian mechanism's exact privacy curve gives the smallest ε' with ``δ(ε') ≤ δ`` for that σ
    (bisection; host-side, concrete values).  The ratio σ/Δ₂ does not depend on the neighbouring
    relation (Δ₂ = clip or 2·clip scales σ alike), so neither does ε'.
    """
    del neighbouring  # σ/Δ₂ is the same for both relations
    check_epsilon(epsilon)
    _check_delta_clip(delta, 1.0)
    s = math.sqrt(2.0 * math.log(1.25 / float(delta))) / float(epsilon)
    lo, hi = 0.0, max(1.0, 4.0 * float(epsilon))
    while gaussian_delta(hi, s) > delta:
        hi *= 2.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if gaussian_delta(mid, s) > delta:
            lo = mid
        else:
            hi = mid
    return hi


def gaussian_dp(key, update: PyTree, *, epsilon, delta, clip,
                neighbouring: str = "add_remove") -> PyTree:
    """Gaussian mechanism on one client's update ``w_i − θ_t`` (DP-FedALF baseline).

    ``ũ = clip_global_norm(u, clip) + N(0, σ² I)``, ``σ = gaussian_sigma(epsilon, delta, clip)``,
    independent noise per coordinate (key split per leaf, in tree order).

    What it covers: one round's upload of one client, (ε, δ)-DP with respect to the neighbouring
    relation of :func:`gaussian_sigma` (default add/remove: sensitivity ``clip``), with the exact ε of
    :func:`gaussian_epsilon`.  No composition over rounds is accounted.  The guarantee is for what
    this function releases: an ADMM client with ``dual_from="local"`` also uploads its un-noised,
    unclipped change through the dual, and nothing bounds that (docs/privacy.md).
    """
    _check_params(update)
    clipped = clip_global_norm(update, clip)
    sigma = gaussian_sigma(epsilon, delta, clip, neighbouring=neighbouring)
    leaves, treedef = jax.tree_util.tree_flatten(clipped)
    if not leaves:
        return clipped
    keys = _leaf_keys(key, len(leaves))
    out = []
    for kk, x in zip(keys, leaves):
        if not _perturbable(x):
            out.append(x)
            continue
        dt = _compute_dtype(x)
        noise = jax.random.normal(kk, jnp.shape(x), dt) * sigma.astype(dt)
        out.append((x.astype(dt) + noise).astype(jnp.result_type(x)))
    return jax.tree_util.tree_unflatten(treedef, out)
