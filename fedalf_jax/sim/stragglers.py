"""Stragglers: how much of its local work each sampled client finishes before the round's deadline.

``stragglers`` (a Config string, parsed by :func:`parse_stragglers`): ``none`` (every client finishes: the round is
today's, unchanged) or ``lognormal:SIGMA[,JITTER]``: client ``i`` has a speed ``s_i = exp(SIGMA · z_i)``, ``z_i ~
N(0, 1)`` drawn once per seed (the run key folded with :data:`SPEED_KEY`), and in round ``t`` runs at ``s_i ·
exp(JITTER · z_{i,t})`` (``z_{i,t} ~ N(0, 1)``, the round's own draw; ``JITTER`` 0 by default). ``deadline`` ``D > 0``
is the round's length in local steps of a speed-1 client: a client of speed ``v`` completes ``c_i = min(K_i, ⌊v ·
D⌋)`` of its ``K_i`` local steps (``epochs · ⌈n_i / B⌉``, or ``--local-steps``).

``straggler_policy``: ``partial`` (the ``c_i`` steps are the client's work this round: its later steps are masked in
the one scan, as a padded step is, and ``facts.steps`` is ``c_i``: FedProx's and FedNova's premise) or ``drop`` (a
client with ``c_i < K_i`` sends nothing, as a lost upload: FedAvg's practice). See docs/federations.md.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

SPEED_KEY = 0x5EED5  # folded into the run key: the per-seed speeds
JITTER_KEY = 0x717E  # folded into the round key: the round's jitter
POLICIES = ("partial", "drop")
MODES = ("none", "lognormal:SIGMA[,JITTER]")


def parse_stragglers(spec) -> tuple:
    """``("none",)`` or ``("lognormal", sigma, jitter)``; ``ValueError`` (one line, naming the fix) otherwise."""
    fix = "use none or lognormal:SIGMA[,JITTER] (e.g. lognormal:0.5 or lognormal:0.5,0.2)"
    if not isinstance(spec, str):
        raise ValueError(f"stragglers must be a string, got {type(spec).__name__} {spec!r}; {fix}")
    kind, _, arg = spec.strip().lower().partition(":")
    if kind == "none" and not arg:
        return ("none",)
    if kind == "lognormal":
        try:
            nums = [float(p) for p in arg.split(",")]
        except ValueError:
            raise ValueError(f"stragglers {spec!r}: lognormal takes SIGMA[,JITTER], numbers; {fix}") from None
        if len(nums) not in (1, 2) or not all(math.isfinite(x) and x >= 0 for x in nums):
            raise ValueError(f"stragglers {spec!r}: SIGMA and JITTER must be one or two finite numbers ≥ 0; {fix}")
        return ("lognormal", nums[0], nums[1] if len(nums) == 2 else 0.0)
    raise ValueError(f"unknown stragglers {spec!r}; {fix}")


def canonical(st: tuple) -> str:
    """The one spelling of a parsed ``stragglers`` (``lognormal:0.5`` or ``lognormal:0.5,0.2``)."""
    if st[0] == "none":
        return "none"
    return f"lognormal:{st[1]:g}" + (f",{st[2]:g}" if st[2] else "")


def check_deadline(d) -> float:
    if isinstance(d, bool) or not isinstance(d, (int, float)) or not (0 < float(d) < float("inf")):
        raise ValueError(f"deadline must be a positive number of local steps (those a speed-1 client completes in a "
                         f"round), got {d!r}; pass e.g. --deadline 20")
    return float(d)


def check_policy(p) -> str:
    if p not in POLICIES:
        raise ValueError(f"straggler_policy must be one of {', '.join(POLICIES)}, got {p!r}: partial keeps a late "
                         f"client's completed steps, drop loses its upload")
    return p


def speeds(st: tuple, run_key, t, sel):
    """``[m]`` float32: the sampled clients' speeds in round ``t``."""
    n_key = jax.random.fold_in(run_key, SPEED_KEY)
    z = jax.vmap(lambda i: jax.random.normal(jax.random.fold_in(n_key, i)))(sel)
    v = jnp.exp(st[1] * z)
    if st[2]:
        r_key = jax.random.fold_in(jax.random.fold_in(run_key, t), JITTER_KEY)
        v = v * jnp.exp(st[2] * jax.vmap(lambda i: jax.random.normal(jax.random.fold_in(r_key, i)))(sel))
    return v


def steps_done(st: tuple, deadline: float, run_key, t, sel, full):
    """``[m]`` int32: the local steps each sampled client completes by the deadline, ``min(K_i, ⌊v_i · D⌋)``
    (``full``: each one's ``K_i``)."""
    done = jnp.floor(speeds(st, run_key, t, sel) * deadline)
    return jnp.minimum(full, jnp.minimum(done, jnp.iinfo(jnp.int32).max).astype(jnp.int32))
