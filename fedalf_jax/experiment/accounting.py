"""Privacy accounting over rounds: what a run has spent (docs/privacy.md, "Accounting over rounds").

Pure host-side functions (no JAX) on top of Google's ``dp_accounting`` (RDP and PLD accountants).

**Participation.** Each round the server samples ``m = clients_per_round`` of ``N = clients`` clients
uniformly without replacement, so a client takes part in a round with probability ``q = m/N``,
independently across rounds: over ``T`` rounds its participation count is Binomial(T, q), expected
``qT``. A run's headline is a bound for **every** client: it is stated at the largest count any client
of the run really reached (:func:`participation`, from the run's own sampling, replayed from its seed
by ``fedalf_jax.sim.round.participation_counts``), with the per-client counts beside it. The expected
count ``ceil(qT)`` (:func:`expected_participations`) gives ``epsilon_expected``, a labelled extra, and
:func:`participation_bound` the count exceeded with probability at most 10⁻³ (before the run).

**Local mechanisms** (``ldp="adaptive"``, ``ldp="ldp_fl"`` and ``dp="gaussian"``, whose noise each
client adds to its own clipped update) are seen by the server, and the server knows who took part, so
sampling gives **no amplification** against it: a client's total is the composition of its own
participations, nothing less.

* Gaussian (:func:`gaussian_local`): ``k`` runs of the Gaussian mechanism with noise multiplier
  ``z = σ/Δ₂ = sqrt(2 ln(1.25/δ))/ε`` (the classic calibration of ``privacy.gaussian_sigma``; the same
  ``z`` under either neighbouring relation, since ``σ`` is calibrated to that relation's sensitivity
  ``Δ₂``), accounted by the RDP and the PLD accountant; the headline is the smaller ε. The total is
  stated at **δ_total = the run's δ** (the same δ as one upload's, not ``k·δ``), so the numbers compare
  with one upload's exact ε (``privacy.gaussian_epsilon``) directly: at ``k = 1`` they are the same.
* Per-value LDP (:func:`ldp_per_value`): each value's release is pure ε-LDP per round; over ``k``
  participations basic composition gives ``kε`` (δ = 0), advanced composition (Dwork, Rothblum and
  Vadhan 2010) ``sqrt(2k ln(1/δ'))·ε + kε(e^ε − 1)`` at δ', and the optimal composition of ε-DP
  mechanisms (Kairouz, Oh and Viswanath 2015: k-fold randomized response is the worst case) is computed
  by the PLD accountant at the same δ'. A tensor of ``n`` values is ``nε`` per round by basic
  composition: that is all the per-value guarantee says of the whole tensor.

**Central DP** (``dp="central"``, DP-FedAvg of McMahan et al. 2018: each client's update clipped to
``clip``, the server adds ``N(0, (z·clip)²)`` to their sum): the released models are a Poisson-sampled
Gaussian mechanism, amplified by sampling against anyone who sees them (not the server). It is
accounted as ``PoissonSampledDpEvent(q, GaussianDpEvent(z))`` composed ``T`` times, for add/remove of
one client; the simulator's fixed-size sampling without replacement is accounted as Poisson sampling
with ``q = m/N``, the usual approximation. :func:`central_noise_multiplier` calibrates ``z`` so that the
whole run spends exactly the configured (ε, δ).

PLD accountants are pessimistic (their discretisation rounds the privacy loss up), so every ε here is
an upper bound.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from typing import Any, Mapping, Optional, Sequence, Union

__all__ = [
    "EXCEEDED_WITH",
    "advanced_composition",
    "central",
    "central_epsilon",
    "central_noise_multiplier",
    "expected_participations",
    "epsilon_spent",
    "gaussian_local",
    "ldp_per_value",
    "noise_multiplier_local",
    "participation",
    "participation_bound",
    "spent",
]

EXCEEDED_WITH = 1e-3  # participation_bound: the count a client exceeds with at most this probability
DELTA_PRIME = 1e-5    # the δ' of advanced and optimal LDP composition, unless given
HEADLINE_MARGIN = 0.01  # LDP: a composition at δ' > 0 is the headline only when 1 % below basic kε
_PLD_LOCAL = 1e-2     # PLD discretisation (of the privacy loss) for the local Gaussian: ε within ~1e-5
_PLD_CENTRAL = 1e-3   # for the Poisson-sampled Gaussian: ε within ~2e-4
_PLD_RR = 1e-4        # randomized response: each of the k compositions adds its rounding (up to ~k·1e-4)
# The accountants' inputs are bounded: beyond these the PLD's arrays explode (a hang, or an allocation of
# hundreds of GiB deep inside dp_accounting) or its calibration misses its target.
EPSILON_MAX = 100.0   # a Gaussian's ε (local and central)
EPSILON_MIN_CENTRAL = 0.05  # central calibration below this misses its target (ε = 0.01 gave 0.0046)
Q_MIN = 1e-5          # central sampling rate m/N (q = 1e-6 did not return in 40 s, 1e-9 in 10 minutes)


# ---- checks ---------------------------------------------------------------------------------------

def _pos(name: str, v) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={v!r} must be a number") from None
    if isinstance(v, bool) or not (math.isfinite(x) and x > 0):
        raise ValueError(f"{name}={v!r} must be finite and > 0")
    return x


def _prob(name: str, v, *, one: bool = False) -> float:
    x = _pos(name, v)
    if x > 1 or (x == 1 and not one):
        raise ValueError(f"{name}={v!r} must lie in (0, 1{']' if one else ')'}")
    return x


def _within(name: str, x: float, lo: float, hi: float, why: str) -> float:
    if not lo <= x <= hi:
        raise ValueError(f"{name}={x:g} is outside the accountant's range [{lo:g}, {hi:g}] ({why})")
    return x


def _count(name: str, v) -> int:
    if isinstance(v, bool) or not hasattr(v, "__index__"):  # int and NumPy integers, not floats
        raise ValueError(f"{name}={v!r} must be a non-negative integer")
    n = int(v)
    if n < 0:
        raise ValueError(f"{name}={v!r} must be a non-negative integer")
    return n


@contextlib.contextmanager
def _quiet():
    """dp_accounting's RDP accountant logs (through absl) every RDP order it cannot evaluate and leaves
    out; the other orders still give a valid bound, so those lines are kept out of a run's output."""
    log = logging.getLogger("absl")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def _accountants():
    from dp_accounting.pld import pld_privacy_accountant
    from dp_accounting.rdp import rdp_privacy_accountant
    return rdp_privacy_accountant.RdpAccountant, pld_privacy_accountant.PLDAccountant


# ---- participation ------------------------------------------------------------------------------

def expected_participations(clients_per_round: int, clients: int, rounds: int) -> int:
    """``ceil(qT)`` with ``q = m/N``: a client's expected number of participations in ``rounds`` rounds,
    rounded up (integer arithmetic, so ``q·T`` never rounds past an integer)."""
    m, n, t = _count("clients_per_round", clients_per_round), _count("clients", clients), _count("rounds", rounds)
    if n == 0 or m > n:
        raise ValueError(f"clients_per_round={m} must be at most clients={n} (and clients > 0)")
    return -(-m * t // n)


def participation_bound(q: float, rounds: int, exceeded_with: float = EXCEEDED_WITH) -> int:
    """The smallest ``k`` with ``P(Binomial(rounds, q) > k) ≤ exceeded_with``: a client takes part in more
    than ``k`` of ``rounds`` rounds with probability at most ``exceeded_with``."""
    from scipy.stats import binom
    q, t = _prob("q", q, one=True), _count("rounds", rounds)
    _prob("exceeded_with", exceeded_with)
    if t == 0:
        return 0
    k = int(binom.ppf(1.0 - exceeded_with, t, q))
    while k > 0 and binom.sf(k - 1, t, q) <= exceeded_with:  # guard ppf's floating-point edge
        k -= 1
    while binom.sf(k, t, q) > exceeded_with:
        k += 1
    return min(k, t)


def participation(counts: Sequence[int]) -> dict:
    """The distribution of a run's per-client participation counts, JSON-ready: ``per_client`` (client
    ``i``'s count at index ``i``), ``min``, ``median``, ``max`` and ``histogram`` (count → number of
    clients with it, keys as strings)."""
    per = [_count(f"participation count of client {i}", c) for i, c in enumerate(counts)]
    if not per:
        raise ValueError("participation counts of no client: a run has at least one client")
    srt = sorted(per)
    n = len(srt)
    median = float(srt[n // 2]) if n % 2 else (srt[n // 2 - 1] + srt[n // 2]) / 2.0
    hist: dict[str, int] = {}
    for c in srt:
        hist[str(c)] = hist.get(str(c), 0) + 1
    return {"per_client": per, "min": srt[0], "median": median, "max": srt[-1], "histogram": hist}


def _realised_counts(cfg: Any, rounds_done: int, counts: Optional[Sequence[int]]) -> list[int]:
    """``counts`` (one per client), or the run's own: its sampling replayed from ``cfg.seed`` (JAX, imported
    only here)."""
    if counts is None:
        from ..sim.round import participation_counts
        counts = participation_counts(int(cfg.clients), int(cfg.clients_per_round), int(cfg.seed), rounds_done)
    counts = [int(c) for c in counts]
    if len(counts) != int(cfg.clients):
        raise ValueError(f"participation counts of {len(counts)} clients for a run of clients={int(cfg.clients)}")
    return counts


# ---- local Gaussian -------------------------------------------------------------------------------

def noise_multiplier_local(epsilon: float, delta: float) -> float:
    """``z = σ/Δ₂ = sqrt(2 ln(1.25/δ))/ε``: the classic calibration of ``privacy.gaussian_sigma``."""
    epsilon, delta = _pos("epsilon", epsilon), _prob("delta", delta)
    _within("epsilon", epsilon, 0.0, EPSILON_MAX, "a Gaussian with so little noise cannot be accounted")
    return math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


@functools.lru_cache(maxsize=512)
def _gaussian_composed(z: float, k: int, delta: float) -> tuple[float, float]:
    """(RDP ε, PLD ε) at ``delta`` of ``k`` Gaussian mechanisms with noise multiplier ``z``."""
    import dp_accounting as dpa
    if k == 0:
        return 0.0, 0.0
    rdp_cls, pld_cls = _accountants()
    event = dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(z), k)
    with _quiet():
        rdp = rdp_cls().compose(event).get_epsilon(delta)
        pld = pld_cls(value_discretization_interval=_PLD_LOCAL).compose(event).get_epsilon(delta)
    return float(rdp), float(pld)


def gaussian_local(epsilon: float, delta: float, participations: int, neighbouring: str = "add_remove") -> dict:
    """The total (ε, δ) of one client of ``dp="gaussian"`` after ``participations`` uploads.

    Each upload is the Gaussian mechanism with ``σ`` calibrated by ``privacy.gaussian_sigma(epsilon,
    delta, clip, neighbouring=...)``, i.e. noise multiplier ``z = sqrt(2 ln(1.25/δ))/ε`` relative to the
    sensitivity of ``neighbouring`` (so ``z``, and the result, do not depend on the relation; it is
    recorded). No amplification by sampling (the server knows who took part). The total is stated at
    ``δ_total = delta``, the run's δ: ``epsilon_rdp`` and ``epsilon_pld`` from the two accountants,
    ``epsilon`` the smaller. At one participation it is the exact ε of one upload
    (``privacy.gaussian_epsilon``: 1.61 at ε = 2, δ = 1e-5).
    """
    if neighbouring not in ("add_remove", "replace"):
        raise ValueError(f"unknown neighbouring={neighbouring!r}; use 'add_remove' or 'replace'")
    z = noise_multiplier_local(epsilon, delta)
    k = _count("participations", participations)
    rdp, pld = _gaussian_composed(z, k, float(delta))
    return {"participations": k, "noise_multiplier": z, "neighbouring": neighbouring,
            "epsilon": min(rdp, pld), "delta": float(delta), "epsilon_rdp": rdp, "epsilon_pld": pld}


# ---- per-value LDP --------------------------------------------------------------------------------

def advanced_composition(epsilon: float, k: int, delta_prime: float) -> float:
    """Dwork, Rothblum and Vadhan (2010): ``k`` ε-DP mechanisms are (ε', δ')-DP with
    ``ε' = sqrt(2k ln(1/δ'))·ε + kε(e^ε − 1)``."""
    epsilon, k, delta_prime = _pos("epsilon", epsilon), _count("k", k), _prob("delta_prime", delta_prime)
    return math.sqrt(2.0 * k * math.log(1.0 / delta_prime)) * epsilon + k * epsilon * math.expm1(epsilon)


@functools.lru_cache(maxsize=512)
def _optimal_composition(epsilon: float, k: int, delta_prime: float) -> float:
    """The optimal ε at ``delta_prime`` of ``k`` ε-DP mechanisms: that of ``k``-fold binary randomized
    response (Kairouz, Oh and Viswanath 2015, Thm 3.3), by the PLD accountant. The events are listed
    one by one: dp_accounting 0.6.0's PLD accountant drops the count of a ``SelfComposedDpEvent`` of
    ``RandomizedResponseDpEvent`` (it composes it once)."""
    import dp_accounting as dpa
    if k == 0:
        return 0.0
    _, pld_cls = _accountants()
    # RR over 2 buckets with noise p keeps the input with probability 1 − p/2 = e^ε/(1 + e^ε)
    rr = dpa.RandomizedResponseDpEvent(noise_parameter=2.0 / (1.0 + math.exp(epsilon)), num_buckets=2)
    acc = pld_cls(dpa.NeighboringRelation.REPLACE_ONE, value_discretization_interval=_PLD_RR)
    return float(acc.compose(dpa.ComposedDpEvent([rr] * k)).get_epsilon(delta_prime))


def _sizes(tensor_sizes) -> dict[str, int]:
    if isinstance(tensor_sizes, Mapping):
        items = [(str(k), v) for k, v in tensor_sizes.items()]
    else:
        items = [(str(i), v) for i, v in enumerate(tensor_sizes)]
    return {k: _count(f"tensor size {k}", v) for k, v in items}


def ldp_per_value(epsilon: float, participations: int, delta_prime: float = DELTA_PRIME,
                  tensor_sizes: Union[Sequence[int], Mapping[str, int], None] = None) -> dict:
    """What a per-value ε-LDP mechanism (``adaptive``, ``ldp_fl``) spends for one client.

    Per value and round: ε. Over ``participations`` = k rounds, per value: ``basic`` kε (δ = 0),
    ``advanced`` (Dwork–Rothblum–Vadhan, at ``delta_prime``) and ``optimal`` (the optimal composition of
    ε-DP mechanisms, PLD accountant, at ``delta_prime``); ``epsilon``/``delta`` is basic composition's
    (δ = 0) unless advanced or optimal is smaller by more than 1 % (:data:`HEADLINE_MARGIN`), then the
    smaller of those two. ``tensor_sizes`` (a list of value counts, or a mapping name → count): a tensor of ``n``
    values releases ``n`` ε-LDP values per round, ``nε`` by basic composition, which is what the per-value
    guarantee implies for the whole tensor: ``per_tensor_per_round`` (by name or index),
    ``per_tensor_per_round_max``, ``per_model_per_round`` (all tensors) and ``per_model_total_basic``
    (over the k participations).
    """
    eps = _pos("epsilon", epsilon)
    k = _count("participations", participations)
    dp = _prob("delta_prime", delta_prime)
    basic = {"epsilon": k * eps, "delta": 0.0}
    advanced = {"epsilon": advanced_composition(eps, k, dp), "delta": dp}
    optimal = {"epsilon": _optimal_composition(eps, k, dp), "delta": dp}
    best = min((optimal, advanced), key=lambda b: b["epsilon"])
    if not best["epsilon"] < (1.0 - HEADLINE_MARGIN) * basic["epsilon"]:
        best = basic  # a δ' > 0 is worth stating only for a real gain
    out = {"participations": k, "per_round_per_value": eps, "basic": basic, "advanced": advanced,
           "optimal": optimal, "epsilon": best["epsilon"], "delta": best["delta"]}
    if tensor_sizes is not None:
        sizes = _sizes(tensor_sizes)
        per = {name: n * eps for name, n in sizes.items()}
        out.update(per_tensor_per_round=per, per_tensor_per_round_max=max(per.values(), default=0.0),
                   per_model_per_round=sum(sizes.values()) * eps,
                   per_model_total_basic=k * sum(sizes.values()) * eps)
    return out


# ---- central (DP-FedAvg) --------------------------------------------------------------------------

def _sampled_gaussian(z: float, q: float, rounds: int):
    import dp_accounting as dpa
    return dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)), rounds)


@functools.lru_cache(maxsize=512)
def _central_composed(z: float, q: float, rounds: int, delta: float) -> tuple[float, float]:
    if rounds == 0:
        return 0.0, 0.0
    rdp_cls, pld_cls = _accountants()
    event = _sampled_gaussian(z, q, rounds)
    with _quiet():
        rdp = rdp_cls().compose(event).get_epsilon(delta)
        pld = pld_cls(value_discretization_interval=_PLD_CENTRAL).compose(event).get_epsilon(delta)
    return float(rdp), float(pld)


def central_epsilon(noise_multiplier: float, q: float, rounds: int, delta: float, *,
                    accountant: str = "tighter") -> float:
    """ε at ``delta`` of ``rounds`` rounds of central DP-FedAvg: ``PoissonSampledDpEvent(q,
    GaussianDpEvent(z))`` composed ``rounds`` times (add/remove of one client; sampling without
    replacement accounted as Poisson sampling with ``q = m/N``). ``accountant``: ``"rdp"``, ``"pld"`` or
    ``"tighter"`` (the smaller of the two)."""
    z, q, delta = _pos("noise_multiplier", noise_multiplier), _prob("q", q, one=True), _prob("delta", delta)
    _within("q", q, Q_MIN, 1.0, "the sampling rate clients_per_round/clients of central DP")
    _within("noise_multiplier", z, 0.05, math.inf, "less noise than this cannot be accounted")
    rdp, pld = _central_composed(z, q, _count("rounds", rounds), delta)
    try:
        return {"rdp": rdp, "pld": pld, "tighter": min(rdp, pld)}[accountant]
    except KeyError:
        raise ValueError(f"unknown accountant={accountant!r}; use 'rdp', 'pld' or 'tighter'") from None


@functools.lru_cache(maxsize=128)
def _calibrate(epsilon: float, delta: float, q: float, rounds: int) -> float:
    """The PLD-calibrated ``z``. The bracket is found first with the RDP accountant (cheap at any ``z``;
    its ε bounds the PLD's from above, so its ``z`` is enough for the PLD), then halved until the PLD
    overshoots: the PLD of a very small ``z`` is a huge array, so it is never evaluated far below the
    answer (dp_accounting's own bracket search starts at a fixed guess)."""
    import dp_accounting as dpa
    rdp_cls, pld_cls = _accountants()

    def rdp_gap(z):
        with _quiet():
            return rdp_cls().compose(_sampled_gaussian(z, q, rounds)).get_epsilon(delta) - epsilon

    def pld_gap(z):
        return _central_composed(z, q, rounds, delta)[1] - epsilon

    hi = 1.0
    for _ in range(60):  # the smallest power of 2 whose RDP ε is within the budget
        if rdp_gap(hi) > 0:
            hi *= 2.0
        elif rdp_gap(hi / 2.0) <= 0:
            hi /= 2.0
        else:
            break
    while pld_gap(hi) > 0:  # the PLD's discretisation rounds up: rarely above the RDP's ε
        hi *= 1.25
    lo = hi / 2.0
    while pld_gap(lo) <= 0:
        hi, lo = lo, lo / 2.0
    return float(dpa.calibrate_dp_mechanism(
        lambda: pld_cls(value_discretization_interval=_PLD_CENTRAL),
        lambda z: _sampled_gaussian(z, q, rounds), epsilon, delta,
        bracket_interval=dpa.ExplicitBracketInterval(lo, hi), tol=1e-6))


def central_noise_multiplier(epsilon: float, delta: float, q: float, rounds: int) -> float:
    """The noise multiplier ``z`` (the server's noise std over ``clip``) with which ``rounds`` rounds of
    central DP-FedAvg at sampling rate ``q`` spend exactly (``epsilon``, ``delta``) (PLD accountant,
    ``dp_accounting.calibrate_dp_mechanism``; to 1e-6 in ``z``). :func:`central_epsilon` of it gives
    ``epsilon`` back."""
    epsilon, delta, q = _pos("epsilon", epsilon), _prob("delta", delta), _prob("q", q, one=True)
    rounds = _count("rounds", rounds)
    _within("epsilon", epsilon, EPSILON_MIN_CENTRAL, EPSILON_MAX, "central DP's calibration")
    _within("q", q, Q_MIN, 1.0, "the sampling rate clients_per_round/clients of central DP")
    if rounds == 0:
        raise ValueError("rounds=0: a run of no rounds releases nothing; no noise multiplier to calibrate")
    return _calibrate(epsilon, delta, q, rounds)


def central(epsilon: float, delta: float, q: float, rounds: int) -> dict:
    """Central DP-FedAvg calibrated for (``epsilon``, ``delta``) over ``rounds`` rounds at rate ``q``: the
    noise multiplier and the ε it spends over those rounds by each accountant."""
    z = central_noise_multiplier(epsilon, delta, q, rounds)
    rdp, pld = _central_composed(z, float(q), int(rounds), float(delta))
    return {"noise_multiplier": z, "participation_rate": float(q), "rounds": int(rounds),
            "epsilon": min(rdp, pld), "delta": float(delta), "epsilon_rdp": rdp, "epsilon_pld": pld}


# ---- a run ---------------------------------------------------------------------------------------

_PER = {
    "gaussian": "one client: everything its uploads over the run can reveal about its data, to the server",
    "central": "one client (its presence or absence), to anyone who sees the released global models",
    "adaptive": "one weight's sign (its offset from the tensor's centre), given |offset| and the tensor's "
                "centre and radius",
    "ldp_fl": "one weight's value, given its tensor's centre and radius",
}


_PER_UPDATE = {  # --ldp-on update
    "adaptive": "the sign of one value of the update w_i − θ_t (its offset from its tensor's centre), given "
                "|offset| and the tensor's centre and radius",
    "ldp_fl": "one value of the update w_i − θ_t, given its tensor's centre and radius",
}


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def spent(cfg: Any, rounds_done: int, tensor_sizes: Union[Sequence[int], Mapping[str, int], None] = None,
          counts: Optional[Sequence[int]] = None) -> dict:
    """The privacy a run of ``cfg`` has spent after ``rounds_done`` rounds, JSON-ready (``{}`` without a
    mechanism). Reads ``cfg.ldp``, ``cfg.dp``, ``cfg.epsilon``, ``cfg.delta``, ``cfg.neighbouring``,
    ``cfg.clients``, ``cfg.clients_per_round``, for the local mechanisms ``cfg.seed`` (unless ``counts``,
    each client's participation count, is given) and, for ``dp="central"``, ``cfg.rounds``.

    Always: ``mechanism``, ``per`` (what one ε protects, plainly), ``accountant``, ``rounds``,
    ``participation_rate``, ``epsilon`` and ``delta`` (the headline: for the local mechanisms at
    ``participations``, the largest count any client reached, so a bound for every client of the run),
    ``statement`` (one plain paragraph). Local mechanisms add ``participation`` (the per-client counts and
    their distribution, :func:`participation`), ``participations_expected`` (``ceil(qT)``) with
    ``epsilon_expected`` (the expected client's, not a bound), ``participations_bound`` (exceeded with
    probability ≤ 10⁻³) and ``epsilon_at_bound``; Gaussian and central add ``noise_multiplier``, ``epsilon_rdp`` and
    ``epsilon_pld``; LDP adds :func:`ldp_per_value`'s fields (``per_round_per_value``, ``basic``,
    ``advanced``, ``optimal``, and the per-tensor ones when ``tensor_sizes`` is given).
    """
    ldp, dp = getattr(cfg, "ldp", "none") or "none", getattr(cfg, "dp", "none") or "none"
    mech = dp if dp != "none" else ldp
    if mech == "none":
        return {}
    t = _count("rounds_done", rounds_done)
    m, n = int(cfg.clients_per_round), int(cfg.clients)
    q = m / n
    per = _PER.get(mech, "")
    on = getattr(cfg, "resolved_ldp_on", "weights")
    if mech in ("adaptive", "ldp_fl") and on == "update":  # --ldp-on update: the values of w_i − θ_t
        per = _PER_UPDATE[mech]
    base = {"mechanism": mech, "per": per, "rounds": t, "participation_rate": q}
    if mech == "central":
        z = central_noise_multiplier(cfg.epsilon, cfg.delta, q, int(cfg.rounds))
        rdp, pld = _central_composed(z, q, t, float(cfg.delta))
        eps = min(rdp, pld)
        return {**base, "accountant": ("dp_accounting RDP and PLD, the smaller ε; Poisson-subsampled Gaussian "
                                       "(sampling without replacement of m of N clients accounted as Poisson "
                                       "sampling with q = m/N), add/remove of one client"),
                "noise_multiplier": z, "epsilon": eps, "delta": float(cfg.delta), "epsilon_rdp": rdp,
                "epsilon_pld": pld, "epsilon_target": float(cfg.epsilon), "rounds_target": int(cfg.rounds),
                "statement": (f"After {t} of {int(cfg.rounds)} rounds the released global models are "
                              f"(ε = {_fmt(eps)}, δ = {cfg.delta:g})-DP for adding or removing any one client "
                              f"(noise multiplier {_fmt(z)}, sampling rate q = {m}/{n}, amplified by sampling); "
                              f"the whole run reaches ε = {cfg.epsilon:g}. The server, which sees the clipped "
                              f"updates before its noise, is not covered.")}
    dist = participation(_realised_counts(cfg, t, counts))
    k = dist["max"]  # the headline is a bound for every client: at the largest count reached
    ke = expected_participations(m, n, t)
    hi = participation_bound(q, t)
    base.update(participations=k, participation=dist, participations_expected=ke, participations_bound=hi,
                bound_exceeded_with=EXCEEDED_WITH)
    counted = (f"The client that took part most often took part in {k} of the {t} rounds (every client: "
               f"{dist['min']} to {k}, median {dist['median']:g}; expected {ke} at q = {m}/{n}, rounded up)")
    if mech == "gaussian":
        neighbouring = getattr(cfg, "neighbouring", "add_remove")
        g = gaussian_local(cfg.epsilon, cfg.delta, k, neighbouring)
        at_e = gaussian_local(cfg.epsilon, cfg.delta, ke, neighbouring)["epsilon"]
        at_hi = gaussian_local(cfg.epsilon, cfg.delta, hi, neighbouring)["epsilon"]
        return {**base, "accountant": ("dp_accounting RDP and PLD, the smaller ε; composition over the client's "
                                       "own participations, no amplification by sampling (the server knows who "
                                       "took part); δ_total = the run's δ"),
                "neighbouring": neighbouring, "noise_multiplier": g["noise_multiplier"], "epsilon": g["epsilon"],
                "delta": g["delta"], "epsilon_rdp": g["epsilon_rdp"], "epsilon_pld": g["epsilon_pld"],
                "epsilon_expected": at_e, "epsilon_at_bound": at_hi,
                "statement": (f"{counted}: every client has spent at most ε = {_fmt(g['epsilon'])} at "
                              f"δ = {cfg.delta:g} ({neighbouring} of its data, against the server); one upload "
                              f"alone is ε = {_fmt(gaussian_local(cfg.epsilon, cfg.delta, 1)['epsilon'])}, a "
                              f"client with the expected {ke} uploads ε = {_fmt(at_e)}.")}
    v = ldp_per_value(cfg.epsilon, k, tensor_sizes=tensor_sizes)
    at_e = ldp_per_value(cfg.epsilon, ke)["epsilon"]
    at_hi = ldp_per_value(cfg.epsilon, hi)["epsilon"]
    tensor = ""
    if tensor_sizes is not None:
        tensor = (f" Per round, a tensor of n values is nε-LDP by basic composition (the largest here: "
                  f"{_fmt(v['per_tensor_per_round_max'])}; the whole model: {_fmt(v['per_model_per_round'])}): "
                  f"that is all the per-value guarantee says of a tensor.")
    out = {**base, "accountant": ("composition of pure ε-LDP releases over the client's own participations "
                                  "(no amplification: the server knows who took part): basic kε, advanced "
                                  "(Dwork–Rothblum–Vadhan) and optimal (dp_accounting PLD of randomized "
                                  f"response) at δ' = {DELTA_PRIME:g}; the headline is basic kε (δ = 0) unless "
                                  "a δ' bound is over 1 % smaller")}
    out.update(v)
    out.update(participations=k, epsilon_expected=at_e, epsilon_at_bound=at_hi,
               statement=(f"Each round a participating client's upload is ε = {cfg.epsilon:g}-LDP for "
                          f"{per}. {counted}. Over {k} participations, every client's bound per value: basic "
                          f"composition {_fmt(v['basic']['epsilon'])}, advanced {_fmt(v['advanced']['epsilon'])} "
                          f"at δ' = {DELTA_PRIME:g}, optimal {_fmt(v['optimal']['epsilon'])} at "
                          f"δ' = {DELTA_PRIME:g}; a client with the expected {ke}: {_fmt(at_e)}.{tensor}"))
    return out


def epsilon_spent(cfg: Any, rounds_done: int, counts: Optional[Sequence[int]] = None) -> Optional[float]:
    """The headline ε of :func:`spent` alone (what the progress line shows: for the local mechanisms at
    the largest participation count of the run so far), ``None`` without a mechanism; cached, so calling
    it after every evaluation costs little."""
    ldp, dp = getattr(cfg, "ldp", "none") or "none", getattr(cfg, "dp", "none") or "none"
    mech = dp if dp != "none" else ldp
    if mech == "none":
        return None
    t = _count("rounds_done", rounds_done)
    m, n = int(cfg.clients_per_round), int(cfg.clients)
    if mech == "central":
        z = central_noise_multiplier(cfg.epsilon, cfg.delta, m / n, int(cfg.rounds))
        return central_epsilon(z, m / n, t, cfg.delta)
    k = max(_realised_counts(cfg, t, counts))
    if mech == "gaussian":
        return gaussian_local(cfg.epsilon, cfg.delta, k, getattr(cfg, "neighbouring", "add_remove"))["epsilon"]
    return ldp_per_value(cfg.epsilon, k)["epsilon"]

