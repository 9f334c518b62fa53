"""Real federations (first slice): which clients are available each round, and which uploads arrive.

``availability`` (a Config string, parsed by :func:`parse_availability`): ``always`` (every client, every round:
the round's sampler is then :func:`fedalf_jax.sim.round.sample_clients`, unchanged), ``beta:A,B`` (a per-client
probability ``p_i ~ Beta(A, B)`` drawn once per seed; each round client ``i`` is available with probability ``p_i``,
independently), ``size`` (``p_i = n_i / max_j n_j``, the client's training-set size over the largest's) or
``cyclic:PERIOD`` (client ``i`` is on in rounds ``t`` with ``(t + φ_i) mod PERIOD < ceil(PERIOD / 2)``, its phase
``φ_i`` uniform in ``0 .. PERIOD − 1``, drawn once per seed). The round samples its ``m`` clients uniformly without
replacement from the available ones (all of them when fewer are available); the slots left over are masked.
``dropout`` P: each sampled (unmasked) client's upload is lost with probability P, independently.
See docs/federations.md.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

AVAIL_KEY = 0xA7A1  # folded into the run key: the per-seed draw (p_i, phases)
DROP_KEY = 0xD409   # folded into the round key: the dropped uploads
MODES = ("always", "beta:A,B", "size", "cyclic:PERIOD")


def parse_availability(spec) -> tuple:
    """``("always",)``, ``("beta", a, b)``, ``("size",)`` or ``("cyclic", period)``; ``ValueError`` (one line,
    naming the fix) for anything else."""
    fix = f"use one of {', '.join(MODES)} (e.g. beta:2,5 or cyclic:24)"
    if not isinstance(spec, str):
        raise ValueError(f"availability must be a string, got {type(spec).__name__} {spec!r}; {fix}")
    s = spec.strip().lower()
    kind, _, arg = s.partition(":")
    if kind in ("always", "size") and not arg:
        return (kind,)
    if kind == "beta":
        parts = arg.split(",")
        try:
            a, b = (float(p) for p in parts)
        except ValueError:
            raise ValueError(f"availability {spec!r}: beta takes two numbers A,B; {fix}") from None
        if not (0 < a < float("inf") and 0 < b < float("inf")):
            raise ValueError(f"availability {spec!r}: Beta's A and B must be positive and finite; {fix}")
        return ("beta", a, b)
    if kind == "cyclic":
        try:
            period = int(arg)
        except ValueError:
            raise ValueError(f"availability {spec!r}: cyclic takes a whole number of rounds PERIOD; {fix}") from None
        if not 2 <= period <= 2 ** 31 - 1:
            raise ValueError(f"availability {spec!r}: cyclic's PERIOD must be at least 2 rounds; {fix}")
        return ("cyclic", period)
    raise ValueError(f"unknown availability {spec!r}; {fix}")


def canonical(av: tuple) -> str:
    """The one spelling of a parsed availability (``beta:2,5``, ``cyclic:24``), as config.json records it."""
    return av[0] + (":" + ",".join(f"{x:g}" if isinstance(x, float) else str(x) for x in av[1:]) if len(av) > 1
                    else "")


def check_dropout(p) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= float(p) <= 1.0:
        raise ValueError(f"dropout must be a probability in [0, 1] (the chance a sampled client's upload is lost), "
                         f"got {p!r}; pass e.g. --dropout 0.1")
    return float(p)


def available(av: tuple, run_key, t, key, train_n):
    """``[N]`` bool: the clients available in round ``t`` (``key``: the round's own availability key)."""
    n = train_n.shape[0]
    kind = av[0]
    seed_key = jax.random.fold_in(run_key, AVAIL_KEY)
    if kind == "always":
        return jnp.ones((n,), bool)
    if kind == "cyclic":
        period = av[1]
        phase = jax.random.randint(seed_key, (n,), 0, period)
        return (t + phase) % period < (period + 1) // 2
    if kind == "beta":
        p = jax.random.beta(seed_key, av[1], av[2], (n,), jnp.float32)
    elif kind == "size":
        p = train_n.astype(jnp.float32) / jnp.maximum(jnp.max(train_n), 1).astype(jnp.float32)
    else:
        raise ValueError(f"unknown availability {av!r}")
    return jax.random.uniform(key, (n,)) < p


def sample_available(av: tuple, m: int, run_key, t, key, train_n):
    """``(sel [m] int32, valid [m] bool, n_available)``: ``m`` clients drawn uniformly without replacement from
    the available ones (a uniform priority each, the available ones first); slots beyond the available count
    hold unavailable clients, marked invalid."""
    k_av, k_pick = jax.random.split(key)
    avail = available(av, run_key, t, k_av, train_n)
    u = jax.random.uniform(k_pick, avail.shape)
    score = jnp.where(avail, u, 1.0 + u)
    sel = jnp.argsort(score)[:m].astype(jnp.int32)
    return sel, avail[sel], jnp.sum(avail).astype(jnp.int32)


def arrivals(p_drop: float, round_key, valid):
    """``[m]`` bool: the valid slots whose upload arrives (each lost with probability ``p_drop``)."""
    u = jax.random.uniform(jax.random.fold_in(round_key, DROP_KEY), valid.shape)
    return valid & (u >= p_drop)
