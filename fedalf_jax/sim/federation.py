"""Real federations (first slice): which clients are available each round, and which uploads arrive.

``availability`` (a Config string, parsed by :func:`parse_availability`): ``always`` (every client, every round:
the round's sampler is then :func:`fedalf_jax.sim.round.sample_clients`, unchanged), ``beta:A,B`` (a per-client
probability ``p_i ~ Beta(A, B)`` drawn once per seed; each round client ``i`` is available with probability ``p_i``,
independently), ``size`` (``p_i = n_i / max_j n_j``, the client's training-set size over the largest's) or
``cyclic:PERIOD`` (client ``i`` is on in rounds ``t`` with ``(t + φ_i) mod PERIOD < ceil(PERIOD / 2)``, its phase
``φ_i`` uniform in ``0 .. PERIOD − 1``, drawn once per seed), ``markov:P_ON,P_OFF`` (a two-state on/off chain per
client, started from its stationary law: :func:`markov_on`), ``trace:PATH`` (a replayed ``[N, T]`` boolean array:
:func:`load_trace`) or ``labels`` (``p_i = k_i / max_j k_j``, ``k_i`` the number of classes client ``i`` holds).
The round samples its ``m`` clients uniformly without replacement from the available ones (all of them when fewer
are available); the slots left over are masked.
``dropout`` P: each sampled (unmasked) client's upload is lost with probability P, independently.
See docs/federations.md.
"""

from __future__ import annotations

import functools
import hashlib
import os

import jax
import jax.numpy as jnp
import numpy as np

AVAIL_KEY = 0xA7A1  # folded into the run key: the per-seed draw (p_i, phases, the Markov chains)
DROP_KEY = 0xD409   # folded into the round key: the dropped uploads
MODES = ("always", "beta:A,B", "size", "labels", "cyclic:PERIOD", "markov:P_ON,P_OFF", "trace:FILE.npz")


def parse_availability(spec) -> tuple:
    """``("always",)``, ``("beta", a, b)``, ``("size",)``, ``("labels",)``, ``("cyclic", period)``, ``("markov",
    p_on, p_off)`` or ``("trace", path)`` (the path as given; its file is read by :func:`load_trace`);
    ``ValueError`` (one line, naming the fix) for anything else."""
    fix = f"use one of {', '.join(MODES)} (e.g. beta:2,5, cyclic:24 or markov:0.2,0.1)"
    if not isinstance(spec, str):
        raise ValueError(f"availability must be a string, got {type(spec).__name__} {spec!r}; {fix}")
    s = spec.strip()
    kind, _, arg = s.partition(":")
    kind = kind.strip().lower()
    if kind == "trace":  # the path keeps its case
        path = arg.strip()
        if not path:
            raise ValueError(f"availability {spec!r}: trace takes the file, trace:PATH.npz (an [N, T] boolean array "
                             f"'avail'); {fix}")
        return ("trace", path)
    s = s.lower()
    kind, _, arg = s.partition(":")
    if kind in ("always", "size", "labels") and not arg:
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
    if kind == "markov":
        try:
            p_on, p_off = (float(p) for p in arg.split(","))
        except ValueError:
            raise ValueError(f"availability {spec!r}: markov takes two probabilities P_ON,P_OFF (an off client turns "
                             f"on with P_ON each round, an on client off with P_OFF); {fix}") from None
        if not (0.0 < p_on <= 1.0 and 0.0 <= p_off <= 1.0):
            raise ValueError(f"availability {spec!r}: markov's P_ON must be in (0, 1] (0 would leave every client off) "
                             f"and P_OFF in [0, 1]; {fix}")
        return ("markov", p_on, p_off)
    raise ValueError(f"unknown availability {spec!r}; {fix}")


def canonical(av: tuple) -> str:
    """The one spelling of a parsed availability (``beta:2,5``, ``cyclic:24``, ``trace:PATH`` with the path as
    given), as config.json records it."""
    if av[0] == "trace":
        return f"trace:{av[1]}"
    return av[0] + (":" + ",".join(f"{x:g}" if isinstance(x, float) else str(x) for x in av[1:]) if len(av) > 1
                    else "")


TRACE_FIX = ("save it with numpy.savez(PATH, avail=A), A a boolean array of shape [clients, T] with T at least "
             "the rounds (A[i, t]: client i is available in round t)")


def trace_digest(path: str) -> str:
    """The sha256 (16 hex digits) of the trace file's bytes: part of the run's identity (``availability_digest``)."""
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()[:16]
    except OSError as e:
        raise ValueError(f"availability trace:{path}: cannot read the file ({e.strerror or e}); give an existing "
                         f".npz (or .csv of intervals) file, or {TRACE_FIX}") from None


def load_trace(path: str, num_clients: int, rounds: int | None = None) -> np.ndarray:
    """The ``[N, T]`` bool array ``avail`` of the trace file ``path``, checked: its shape (``N`` the clients, ``T``
    at least ``rounds``) and its values (booleans, or integers 0/1); ``ValueError`` in one line naming the fix."""
    try:
        st = os.stat(path)
        stamp = (st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = None  # _trace_file says why it cannot be read
    where = f"availability trace:{path}"
    if path.lower().endswith(".csv"):  # intervals: every round outside them unavailable, however many
        return _csv_trace(path, stamp, int(num_clients))
    arr = _trace_file(path, stamp)
    if arr.ndim != 2 or arr.shape[0] != int(num_clients):
        raise ValueError(f"{where}: 'avail' has shape {list(arr.shape)}, not [clients={num_clients}, T]; {TRACE_FIX}")
    if rounds is not None and arr.shape[1] < int(rounds):
        raise ValueError(f"{where}: 'avail' covers {arr.shape[1]} rounds, fewer than the run's {rounds}; extend the "
                         f"trace to {rounds} rounds or lower --rounds")
    return arr


CSV_FIX = ("write one row per interval, client,start,end (a header line client,start,end first), client in 0 .. "
           "clients − 1 and 0 ≤ start < end whole rounds: the client is available in rounds start ≤ t < end")


@functools.lru_cache(maxsize=8)
def _csv_trace(path: str, stamp, num_clients: int) -> np.ndarray:
    """A CSV trace of intervals as an ``[N, max end + 1]`` bool array, its last column all off (the round reads
    a round past the last interval from it)."""
    import csv
    where = f"availability trace:{path}"
    try:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{where}: cannot read the file ({getattr(e, 'strerror', None) or e}); {CSV_FIX}") from None
    if not rows or [c.strip().lower() for c in rows[0]] != ["client", "start", "end"]:
        raise ValueError(f"{where}: the first line is not the header client,start,end; {CSV_FIX}")
    spans = []
    for line, row in enumerate(rows[1:], start=2):
        if not any(c.strip() for c in row):
            continue
        try:
            i, a, b = (int(c) for c in row)
        except ValueError:
            raise ValueError(f"{where}: line {line} ({','.join(row)}) is not three whole numbers client,start,end; "
                             f"{CSV_FIX}") from None
        if not 0 <= i < num_clients:
            raise ValueError(f"{where}: line {line} names client {i}, not one of the run's clients 0 .. "
                             f"{num_clients - 1}; fix the id or set --clients")
        if not 0 <= a < b:
            raise ValueError(f"{where}: line {line}: the interval {a} .. {b} is not 0 ≤ start < end; {CSV_FIX}")
        spans.append((i, a, b))
    arr = np.zeros((num_clients, max((b for _, _, b in spans), default=0) + 1), bool)
    for i, a, b in spans:
        arr[i, a:b] = True
    arr.setflags(write=False)
    return arr


@functools.lru_cache(maxsize=8)
def _trace_file(path: str, stamp) -> np.ndarray:
    where = f"availability trace:{path}"
    try:
        with np.load(path, allow_pickle=False) as z:
            if "avail" not in z.files:
                raise ValueError(f"{where}: the file holds no array 'avail' (it has {', '.join(z.files) or 'none'}); "
                                 f"{TRACE_FIX}")
            a = z["avail"]
    except ValueError as e:
        if str(e).startswith(where):
            raise
        raise ValueError(f"{where}: not a readable .npz file ({e}); {TRACE_FIX}") from None
    except OSError as e:
        raise ValueError(f"{where}: cannot read the file ({e.strerror or e}); {TRACE_FIX}") from None
    if a.dtype != np.bool_:
        if not np.issubdtype(a.dtype, np.integer) or not np.isin(a, (0, 1)).all():
            raise ValueError(f"{where}: 'avail' holds non-boolean values (dtype {a.dtype}); {TRACE_FIX}")
        a = a.astype(bool)
    a.setflags(write=False)
    return a


def markov_law(p_on: float, p_off: float) -> tuple:
    """``(pi_on, r, q, flip)``: the chain's stationary on-probability ``pi_on = P_ON / (P_ON + P_OFF)``, and the
    mixture it is drawn as (:func:`markov_on`): each round a client "refreshes" with probability ``r`` to a fresh
    state, on with probability ``q``; otherwise it keeps its state (``flip`` false: ``P_ON + P_OFF ≤ 1``, ``r =
    P_ON + P_OFF``, ``q = pi_on``) or flips it (``flip`` true: ``P_ON + P_OFF > 1``, ``r = 2 − P_ON − P_OFF``, ``q =
    (1 − P_OFF) / r``). Either way ``P(on | off) = P_ON`` and ``P(off | on) = P_OFF`` exactly."""
    pi_on = p_on / (p_on + p_off)
    if p_on + p_off <= 1.0:
        return pi_on, p_on + p_off, pi_on, False
    r = 2.0 - p_on - p_off
    return pi_on, r, (1.0 - p_off) / r if r > 0 else 0.0, True


def markov_on(p_on: float, p_off: float, seed_key, t, n: int):
    """``[N]`` bool: which clients' two-state chains are on in round ``t``, without a state carried across rounds.
    Round ``s`` gives each client two uniforms from ``fold_in(seed_key, s)``: whether it refreshes (round 0 always
    does, to the stationary law) and the fresh state. Round ``t``'s state is the fresh state of the client's last
    refresh ``s* ≤ t``, flipped ``t − s*`` times when ``flip`` (:func:`markov_law`): a ``while_loop`` back from
    ``t`` until every client has found its ``s*``, ``1 + max_i (t − s*_i)`` draws of ``[2, N]`` (expected about
    ``log N / r``, at most ``t + 1``), the same for round ``t`` of a resumed run as of an uninterrupted one."""
    pi_on, r, q, flip = markov_law(p_on, p_off)
    t = jnp.asarray(t, jnp.int32)

    def body(c):
        s, found, on = c
        v, w = jax.random.uniform(jax.random.fold_in(seed_key, s), (2, n))
        first = s == 0
        refresh = (v < r) | first
        fresh = w < jnp.where(first, pi_on, q)
        if flip:
            fresh = fresh ^ ((t - s) % 2 == 1)
        now = refresh & ~found
        return s - 1, found | now, jnp.where(now, fresh, on)

    _, _, on = jax.lax.while_loop(lambda c: ~jnp.all(c[1]), body,
                                  (t, jnp.zeros((n,), bool), jnp.zeros((n,), bool)))
    return on


def classes_held(y, train_idx, train_n, num_classes: int):
    """``[N]`` int32: how many distinct classes each client's training split holds (``labels`` availability)."""
    n, width = train_idx.shape
    mask = jnp.arange(width)[None, :] < train_n[:, None]
    held = jnp.zeros((n, int(num_classes)), jnp.int32).at[jnp.arange(n)[:, None], y[train_idx]].max(
        mask.astype(jnp.int32))
    return jnp.sum(held, axis=1).astype(jnp.int32)


def check_dropout(p) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= float(p) <= 1.0:
        raise ValueError(f"dropout must be a probability in [0, 1] (the chance a sampled client's upload is lost), "
                         f"got {p!r}; pass e.g. --dropout 0.1")
    return float(p)


def available(av: tuple, run_key, t, key, train_n, classes=None):
    """``[N]`` bool: the clients available in round ``t`` (``key``: the round's own availability key;
    ``classes``: each client's number of classes, :func:`classes_held`, read by ``labels`` only)."""
    n = train_n.shape[0]
    kind = av[0]
    seed_key = jax.random.fold_in(run_key, AVAIL_KEY)
    if kind == "always":
        return jnp.ones((n,), bool)
    if kind == "markov":
        return markov_on(av[1], av[2], seed_key, t, n)
    if kind == "trace":  # the file's column t (a constant of the compiled program; past its end: the last)
        arr = jnp.asarray(load_trace(av[1], n))
        return jax.lax.dynamic_index_in_dim(arr, jnp.asarray(t, jnp.int32), axis=1, keepdims=False)
    if kind == "cyclic":
        period = av[1]
        phase = jax.random.randint(seed_key, (n,), 0, period)
        return (t + phase) % period < (period + 1) // 2
    if kind == "beta":
        p = jax.random.beta(seed_key, av[1], av[2], (n,), jnp.float32)
    elif kind == "size":
        p = train_n.astype(jnp.float32) / jnp.maximum(jnp.max(train_n), 1).astype(jnp.float32)
    elif kind == "labels":
        if classes is None:
            raise ValueError("availability labels needs each client's number of classes (classes=)")
        p = classes.astype(jnp.float32) / jnp.maximum(jnp.max(classes), 1).astype(jnp.float32)
    else:
        raise ValueError(f"unknown availability {av!r}")
    return jax.random.uniform(key, (n,)) < p


def sample_available(av: tuple, m: int, run_key, t, key, train_n, classes=None):
    """``(sel [m] int32, valid [m] bool, n_available)``: ``m`` clients drawn uniformly without replacement from
    the available ones (a uniform priority each, the available ones first); slots beyond the available count
    hold unavailable clients, marked invalid."""
    k_av, k_pick = jax.random.split(key)
    avail = available(av, run_key, t, k_av, train_n, classes)
    u = jax.random.uniform(k_pick, avail.shape)
    score = jnp.where(avail, u, 1.0 + u)
    sel = jnp.argsort(score)[:m].astype(jnp.int32)
    return sel, avail[sel], jnp.sum(avail).astype(jnp.int32)


def arrivals(p_drop: float, round_key, valid):
    """``[m]`` bool: the valid slots whose upload arrives (each lost with probability ``p_drop``)."""
    u = jax.random.uniform(jax.random.fold_in(round_key, DROP_KEY), valid.shape)
    return valid & (u >= p_drop)
