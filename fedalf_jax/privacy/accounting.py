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
``clip``, the server adds Gaussian noise of std ``z`` times its step's sensitivity): the released models
are a subsampled Gaussian mechanism, amplified by sampling against anyone who sees them (not the
server). The simulator samples exactly ``m`` of ``N`` clients without replacement each round, and that
is what is accounted: ``SampledWithoutReplacementDpEvent(N, m, GaussianDpEvent(z))`` composed ``T``
times by dp_accounting's RDP accountant (the only one that has it), under **replace-one** of a client
(the relation that event needs; the sensitivity ``z`` is relative to is the replace-one one, e.g.
``2·clip/m`` for a mean of ``m`` clipped updates). :func:`central_noise_multiplier` calibrates ``z`` so
that the whole run spends at most the configured (ε, δ), within ~1e-6.

**Real federations** (``availability``, ``dropout``: docs/privacy.md, "Real federations"; :func:`sampling`): the
local mechanisms count each client's rounds sampled under the run's own availability, replayed from the seed, lost
uploads included (:func:`sent_counts`); central DP under availability other than ``always`` is accounted without
amplification (q = 1: :data:`NO_AMPLIFICATION`), under dropout alone still at m/N (a lost upload, independent of the
data, releases less).

PLD accountants are pessimistic (their discretisation rounds the privacy loss up), and the RDP
accountant's conversion to (ε, δ) is an upper bound, so every ε here is an upper bound.
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
    "check_central_budget",
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
_PLD_RR = 1e-4        # randomized response: each of the k compositions adds its rounding (up to ~k·1e-4)
# The accountants' inputs are bounded: beyond these the PLD's arrays explode (a hang, or an allocation of
# hundreds of GiB deep inside dp_accounting) or its calibration misses its target.
EPSILON_MAX = 100.0   # a Gaussian's ε (local and central)
EPSILON_MIN_CENTRAL = 0.05  # central ε below this needs z beyond Z_MAX (ε = 0.01 at m/N = 10/100, 200 rounds)
Q_MIN = 1e-5          # central sampling rate m/N (under the former PLD accounting q = 1e-6 did not return in
                      # 40 s, 1e-9 in 10 minutes; the RDP accountant's cost does not depend on q, the bound is kept)
# The central noise multipliers accounted: below Z_MIN the ε is beyond EPSILON_MAX anyway; above Z_MAX
# dp_accounting's RDP of sampling without replacement stops falling with z (its float arithmetic: it
# plateaus, e.g. at ε ≈ 0.045 for δ = 1e-5, m/N = 10/100, and jumps to 0 at z ≈ 5·10⁵).
Z_MIN, Z_MAX = 0.05, 1024.0


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


# ---- the sampling a run's accounting rests on ------------------------------------------------------

def sampling(cfg: Any) -> str:
    """What a run's sampling is, for its accounting (docs/privacy.md, "Real federations"): ``"uniform"`` (``m``
    of ``N`` without replacement every round, every upload arriving: today's), ``"dropout"`` (that sampling,
    then each sampled upload lost with probability P, independently of everything else) or ``"non-uniform"``
    (``availability`` other than ``always``: a client's chance of being sampled is not ``m/N`` and differs
    between clients and rounds)."""
    if (getattr(cfg, "availability", "always") or "always") != "always":
        return "non-uniform"
    return "dropout" if float(getattr(cfg, "dropout", 0.0) or 0.0) > 0 else "uniform"


def amplified(cfg: Any) -> bool:
    """Whether central DP's accounting amplifies by sampling at ``q = m/N``: under ``"uniform"`` and
    ``"dropout"`` sampling (a lost upload, independent of the data, releases less: every realisation of the
    losses is a Gaussian of at most the same sensitivity, and Rényi divergence is quasi-convex, so the mixture
    keeps the amplified bound); not under non-uniform availability (``q = 1``: every round composes the full
    Gaussian)."""
    return sampling(cfg) != "non-uniform"


NO_AMPLIFICATION = "no amplification by sampling: availability/dropout make sampling non-uniform"


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
    if counts is None and sampling(cfg) == "non-uniform":  # the run's own sampling under its availability
        counts = sent_counts(cfg, rounds_done)
    if counts is None:  # uniform (and dropout's, whose losses come after it): every sampled round counts
        from ..sim.round import participation_counts
        counts = participation_counts(int(cfg.clients), int(cfg.clients_per_round), int(cfg.seed), rounds_done)
    counts = [int(c) for c in counts]
    if len(counts) != int(cfg.clients):
        raise ValueError(f"participation counts of {len(counts)} clients for a run of clients={int(cfg.clients)}")
    return counts


def sent_counts(cfg: Any, rounds_done: int) -> list[int]:
    """Each client's count of the rounds it was sampled in (and available) under ``cfg``'s availability,
    replayed from the seed with the round's own sampler (``fedalf_jax.sim.round.federated_sampled``) at
    dropout 0: every upload a client sent, those later lost included (a lost upload still left the client),
    so an upper bound of what reached the server."""
    from ..sim.round import federated_sampled
    sel = federated_sampled(int(cfg.clients), int(cfg.clients_per_round), int(cfg.seed), int(rounds_done),
                            cfg.availability, 0.0).ravel()
    counts = [0] * int(cfg.clients)
    for c in sel[sel >= 0].tolist():
        counts[c] += 1
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

CENTRAL_NEIGHBOURING = "replace_one"  # the relation SampledWithoutReplacementDpEvent is accounted under


def _sampled_gaussian(z: float, m: int, n: int, rounds: int):
    """What the simulator does each round, ``rounds`` times: ``m`` of ``n`` clients sampled uniformly
    without replacement (``sim/round.py: sample_clients``), then the Gaussian mechanism with noise
    multiplier ``z`` (the std over the step's replace-one sensitivity)."""
    import dp_accounting as dpa
    return dpa.SelfComposedDpEvent(dpa.SampledWithoutReplacementDpEvent(n, m, dpa.GaussianDpEvent(z)), rounds)


def _rdp_replace_one():
    import dp_accounting as dpa
    rdp_cls, _ = _accountants()
    return rdp_cls(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)


@functools.lru_cache(maxsize=512)
def _central_composed(z: float, m: int, n: int, rounds: int, delta: float) -> float:
    """The RDP accountant's ε at ``delta`` (replace-one; dp_accounting's PLD accountant has no
    sampling without replacement). Its cost does not depend on ``z``, ``m/n`` or ``rounds``: a fixed
    set of RDP orders, each a closed-form sum (Wang, Balle and Kasiviswanathan 2019, Thm 27)."""
    if rounds == 0:
        return 0.0
    with _quiet():
        return float(_rdp_replace_one().compose(_sampled_gaussian(z, m, n, rounds)).get_epsilon(delta))


def _gaussian_rounds(z: float, rounds: int):
    """Without amplification (``q = 1``): the Gaussian mechanism with noise multiplier ``z`` in every one of
    ``rounds`` rounds, whoever is sampled (what non-uniform availability leaves: docs/privacy.md)."""
    import dp_accounting as dpa
    return dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(z), rounds)


@functools.lru_cache(maxsize=512)
def _central_unamplified(z: float, rounds: int, delta: float) -> float:
    """The RDP accountant's ε at ``delta`` of :func:`_gaussian_rounds` (replace-one)."""
    if rounds == 0:
        return 0.0
    with _quiet():
        return float(_rdp_replace_one().compose(_gaussian_rounds(z, rounds)).get_epsilon(delta))


def _sample(clients_per_round, clients) -> tuple[int, int]:
    m, n = _count("clients_per_round", clients_per_round), _count("clients", clients)
    if not 1 <= m <= n:
        raise ValueError(f"clients_per_round={m} must be at least 1 and at most clients={n}")
    _within("q", m / n, Q_MIN, 1.0, "the sampling rate clients_per_round/clients of central DP")
    return m, n


def central_epsilon(noise_multiplier: float, clients_per_round: int, clients: int, rounds: int,
                    delta: float, amplified: bool = True) -> float:
    """ε at ``delta`` of ``rounds`` rounds of central DP-FedAvg as the simulator runs them: each round
    ``SampledWithoutReplacementDpEvent(clients, clients_per_round, GaussianDpEvent(z))``, composed
    ``rounds`` times, under replace-one of a client (dp_accounting's RDP accountant). ``amplified=False``
    (non-uniform availability, :func:`amplified`): ``GaussianDpEvent(z)`` composed ``rounds`` times, ``q = 1``."""
    z, delta = _pos("noise_multiplier", noise_multiplier), _prob("delta", delta)
    m, n = _sample(clients_per_round, clients)
    _within("noise_multiplier", z, Z_MIN, Z_MAX, "dp_accounting's RDP of sampling without replacement is not "
            "reliable outside it")
    if not amplified:
        return _central_unamplified(z, _count("rounds", rounds), delta)
    return _central_composed(z, m, n, _count("rounds", rounds), delta)


def _eps_of(m: int, n: int, rounds: int, delta: float, amplified: bool):
    """z -> the accountant's ε at ``delta`` of the run (cached per z: :func:`_central_composed`)."""
    if amplified:
        return lambda z: _central_composed(z, m, n, rounds, delta)
    return lambda z: _central_unamplified(z, rounds, delta)


def _refuse_unreachable(epsilon: float, delta: float, m: int, n: int, rounds: int, amplified: bool) -> None:
    """One line for a budget that no ``z`` in [Z_MIN, Z_MAX] keeps (ε falls with ``z``: both ends above
    ``epsilon``); one evaluation of the accountant for a reachable budget, two at most."""
    eps = _eps_of(m, n, rounds, delta, amplified)
    if eps(Z_MAX) <= epsilon or eps(Z_MIN) <= epsilon:
        return
    raise ValueError(f"epsilon={epsilon:g} at delta={delta:g} over {rounds} rounds of {m} of {n} clients needs a "
                     f"noise multiplier above {Z_MAX:g}, beyond the accountant's range (its epsilon there is "
                     f"{eps(Z_MAX):.3g}); choose a larger epsilon or delta, or fewer rounds")


@functools.lru_cache(maxsize=128)
def _calibrate(epsilon: float, delta: float, m: int, n: int, rounds: int, amplified: bool = True) -> float:
    """The smallest ``z`` in [:data:`Z_MIN`, :data:`Z_MAX`] (to 1e-6) whose ε is within ``epsilon``:
    dp_accounting's calibration (Brent's method on that bracket, ending on the side within the budget)
    with the same RDP accountant. A budget that even ``Z_MIN`` keeps gets ``Z_MIN`` (more noise than
    needed: conservative); one that ``Z_MAX`` does not keep is refused in one line."""
    import dp_accounting as dpa

    eps = _eps_of(m, n, rounds, delta, amplified)

    def event(z):
        return _sampled_gaussian(z, m, n, rounds) if amplified else _gaussian_rounds(z, rounds)

    if eps(Z_MIN) <= epsilon:
        return Z_MIN
    _refuse_unreachable(epsilon, delta, m, n, rounds, amplified)
    lo, hi = -5, 10  # exponents with ε(max(2^lo, Z_MIN)) > epsilon ≥ ε(2^hi) (2^-5 < Z_MIN, 2^10 = Z_MAX)
    while hi - lo > 1:  # bisect the power of 2 first: a narrow bracket costs Brent's method fewer evaluations
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if eps(2.0 ** mid) <= epsilon else (mid, hi)
    return float(dpa.calibrate_dp_mechanism(
        _rdp_replace_one, event, epsilon, delta,
        bracket_interval=dpa.ExplicitBracketInterval(max(2.0 ** lo, Z_MIN), 2.0 ** hi), tol=1e-6))


def _central_args(epsilon, delta, clients_per_round, clients, rounds) -> tuple:
    epsilon, delta = _pos("epsilon", epsilon), _prob("delta", delta)
    m, n = _sample(clients_per_round, clients)
    rounds = _count("rounds", rounds)
    _within("epsilon", epsilon, EPSILON_MIN_CENTRAL, EPSILON_MAX, "central DP's calibration")
    if rounds == 0:
        raise ValueError("rounds=0: a run of no rounds releases nothing; no noise multiplier to calibrate")
    return epsilon, delta, m, n, rounds


def central_noise_multiplier(epsilon: float, delta: float, clients_per_round: int, clients: int,
                             rounds: int, amplified: bool = True) -> float:
    """The noise multiplier ``z`` (the server noise's std over its step's replace-one sensitivity) with
    which ``rounds`` rounds of central DP-FedAvg, ``clients_per_round`` of ``clients`` sampled without
    replacement each round, spend (``epsilon``, ``delta``): :func:`central_epsilon` of it is at most
    ``epsilon`` (within ~1e-6 of it; the smallest such ``z`` to 1e-6). ``amplified=False``: calibrated
    without amplification by sampling (``q = 1``, :func:`central_epsilon`)."""
    epsilon, delta, m, n, rounds = _central_args(epsilon, delta, clients_per_round, clients, rounds)
    return _calibrate(epsilon, delta, m, n, rounds) if amplified else _calibrate(epsilon, delta, m, n, rounds, False)


def check_central_budget(epsilon: float, delta: float, clients_per_round: int, clients: int, rounds: int,
                         amplified: bool = True) -> None:
    """Refuses, with :func:`central_noise_multiplier`'s ValueError, exactly the budgets it refuses, without
    calibrating (one or two evaluations of the accountant instead of ~15): what validating a config does."""
    epsilon, delta, m, n, rounds = _central_args(epsilon, delta, clients_per_round, clients, rounds)
    _refuse_unreachable(epsilon, delta, m, n, rounds, bool(amplified))


def central(epsilon: float, delta: float, clients_per_round: int, clients: int, rounds: int) -> dict:
    """Central DP-FedAvg calibrated for (``epsilon``, ``delta``) over ``rounds`` rounds of
    ``clients_per_round`` of ``clients``: the noise multiplier and the ε it spends over those rounds."""
    z = central_noise_multiplier(epsilon, delta, clients_per_round, clients, rounds)
    eps = _central_composed(z, int(clients_per_round), int(clients), int(rounds), float(delta))
    return {"noise_multiplier": z, "clients_per_round": int(clients_per_round), "clients": int(clients),
            "participation_rate": clients_per_round / clients, "rounds": int(rounds), "epsilon": eps,
            "delta": float(delta), "epsilon_rdp": eps, "neighbouring": CENTRAL_NEIGHBOURING}


# ---- a run ---------------------------------------------------------------------------------------

_PER = {
    "gaussian": "one client: everything its uploads over the run can reveal about its data, to the server",
    "central": "one client (all its data, replaced by any other's), to anyone who sees the released global models",
    "adaptive": "one weight's sign (its offset from the tensor's centre), given |offset| and the tensor's "
                "centre and radius",
    "ldp_fl": "one weight's value, given its tensor's centre and radius",
}


_PER_UPDATE = {  # --ldp-on update
    "adaptive": "the sign of one value of the update w_i − θ_t (its offset from its tensor's centre), given "
                "|offset| and the tensor's centre and radius",
    "ldp_fl": "one value of the update w_i − θ_t, given its tensor's centre and radius",
}


def _ldp_epsilon(mech: str, epsilon: float) -> tuple[float, float]:
    """(the per-value ε a local LDP run is accounted at, the float32 mechanism's own ε): the larger of the
    configured ε and ``privacy.float32_epsilon`` (float32 sampling rounds each probability up to the
    sampler's 2^-23 grid: 14.5 gives 14.556), so the record is a bound of what the mechanism really does.
    Where the float32 ε is infinite (ε ≥ 16.64) the configured ε is kept: the guarantee field says the
    guarantee does not hold there."""
    from .mechanisms import float32_epsilon
    eps = float(_pos("epsilon", epsilon))
    eff = float32_epsilon(mech, eps)
    return (max(eps, eff) if math.isfinite(eff) else eps), eff


def _sampling_text(cfg: Any, how: str) -> str:
    """The record's ``sampling`` under availability/dropout: what the round's sampling is."""
    m, n = int(cfg.clients_per_round), int(cfg.clients)
    if how == "non-uniform":
        lost = f", then each upload lost with probability {float(cfg.dropout):g}" if float(cfg.dropout) > 0 else ""
        return (f"non-uniform: each round {m} clients sampled uniformly without replacement from those available "
                f"under availability {cfg.availability} (all of them when fewer){lost}; a client's chance of "
                f"being sampled is not {m}/{n}")
    return (f"{m} of {n} clients sampled uniformly without replacement, then each upload lost with probability "
            f"{float(cfg.dropout):g}, independently of the data")


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
    probability ≤ 10⁻³) and ``epsilon_at_bound``; Gaussian adds ``noise_multiplier``, ``epsilon_rdp`` and
    ``epsilon_pld``, central ``noise_multiplier``, ``epsilon_rdp`` and ``neighbouring``; LDP adds ``epsilon_configured``,
    ``epsilon_float32`` (:func:`_ldp_epsilon`: the accounted per-value ε is the larger) and :func:`ldp_per_value`'s fields (``per_round_per_value``, ``basic``,
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
    how = sampling(cfg)
    if how != "uniform":  # availability/dropout: what the accounting rests on, in the record
        base.update(sampling=_sampling_text(cfg, how))
    if mech == "central":  # amplified at m/N unless availability makes the sampling non-uniform (q = 1)
        amp = amplified(cfg)
        z = central_noise_multiplier(cfg.epsilon, cfg.delta, m, n, int(cfg.rounds), amplified=amp)
        eps = central_epsilon(z, m, n, t, cfg.delta, amplified=amp)
        if how == "dropout":
            base.update(amplification=(f"amplified by sampling {m} of {n} without replacement; each upload then "
                                       f"lost with probability {float(cfg.dropout):g} independently of the data, "
                                       f"which releases less (the server divides by m = {m} whoever arrives)"))
        if amp:
            accountant = ("dp_accounting RDP, sampling without replacement of m of N clients "
                          "(SampledWithoutReplacementDpEvent of a Gaussian, as the simulator samples), "
                          "replace-one of a client")
            how_sampled = f"{m} of {n} clients sampled without replacement each round, amplified by sampling"
        else:
            accountant = ("dp_accounting RDP, the Gaussian composed over every round (q = 1: "
                          f"{NO_AMPLIFICATION}), replace-one of a client")
            how_sampled = (f"the server dividing by m = {m} whoever arrives; {NO_AMPLIFICATION} (availability "
                           f"{cfg.availability}), so every round is accounted as the full Gaussian mechanism, q = 1")
        return {**base, "accountant": accountant, **({} if amp else {"amplification": NO_AMPLIFICATION}),
                "neighbouring": CENTRAL_NEIGHBOURING, "noise_multiplier": z, "epsilon": eps,
                "delta": float(cfg.delta), "epsilon_rdp": eps, "epsilon_target": float(cfg.epsilon),
                "rounds_target": int(cfg.rounds),
                "statement": (f"After {t} of {int(cfg.rounds)} rounds the released global models are "
                              f"(ε = {_fmt(eps)}, δ = {cfg.delta:g})-DP for replacing any one client's data "
                              f"(noise multiplier {_fmt(z)} over the step's replace-one sensitivity, {how_sampled}); "
                              f"the whole run reaches ε = {cfg.epsilon:g}. The server, which sees the clipped "
                              f"updates before its noise, is not covered.")}
    dist = participation(_realised_counts(cfg, t, counts))
    k = dist["max"]  # the headline is a bound for every client: at the largest count reached
    if how == "non-uniform":  # no client's count is Binomial(T, m/N): the mean client's, and every round
        ke = -(-sum(dist["per_client"]) // len(dist["per_client"]))
        hi = t
        base.update(participations=k, participation=dist, participations_expected=ke, participations_bound=hi,
                    bound_exceeded_with=0.0,
                    participations_counted=("the rounds each client was sampled in under its availability, "
                                            "replayed from the seed (its uploads lost to dropout included); the "
                                            "bound is every round, the expected count the mean client's"))
        counted = (f"The client that took part most often took part in {k} of the {t} rounds (every client: "
                   f"{dist['min']} to {k}, median {dist['median']:g}, under availability {cfg.availability}, "
                   f"replayed from the seed; the mean client {ke}, rounded up)")
    else:
        ke = expected_participations(m, n, t)
        hi = participation_bound(q, t)
        base.update(participations=k, participation=dist, participations_expected=ke, participations_bound=hi,
                    bound_exceeded_with=EXCEEDED_WITH)
        if how == "dropout":
            base.update(participations_counted=("the rounds each client was sampled in (its uploads lost to "
                                                 "dropout included)"))
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
    eps, eff = _ldp_epsilon(mech, cfg.epsilon)
    v = ldp_per_value(eps, k, tensor_sizes=tensor_sizes)
    at_e = ldp_per_value(eps, ke)["epsilon"]
    at_hi = ldp_per_value(eps, hi)["epsilon"]
    stated = f"{cfg.epsilon:g}" if eps == float(cfg.epsilon) else (
        f"{eps:.7g} (the configured {cfg.epsilon:g} as the float32 mechanism samples it)")
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
    out.update(participations=k, epsilon_expected=at_e, epsilon_at_bound=at_hi, epsilon_configured=float(cfg.epsilon),
               epsilon_float32=eff if math.isfinite(eff) else None,
               statement=(f"Each round a participating client's upload is ε = {stated}-LDP for "
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
        amp = amplified(cfg)
        z = central_noise_multiplier(cfg.epsilon, cfg.delta, m, n, int(cfg.rounds), amplified=amp)
        return central_epsilon(z, m, n, t, cfg.delta, amplified=amp)
    k = max(_realised_counts(cfg, t, counts))
    if mech == "gaussian":
        return gaussian_local(cfg.epsilon, cfg.delta, k, getattr(cfg, "neighbouring", "add_remove"))["epsilon"]
    return ldp_per_value(_ldp_epsilon(mech, cfg.epsilon)[0], k)["epsilon"]

