"""What a private run may be and what its privacy guarantee covers (docs/privacy.md).

:func:`validate_privacy` refuses an inconsistent privacy configuration in one line (``Config`` calls it,
so ``privacy.mechanisms`` stays pure mechanism) and :func:`_check_accountable` a central-DP one the accountant
cannot account; :func:`privacy_guarantee` says whether the mechanism's formal guarantee covers what the
clients upload, :func:`privacy_not_covered` what leaves them un-noised beside it, and
:func:`privacy_record` is ``Config.privacy``, the record in ``config.json`` and ``summary.json``. This
module reads the options' values from :mod:`.options`, not :mod:`.config`: ``Config`` imports it inside the
methods that call it.
"""

from __future__ import annotations

import warnings
from typing import Protocol

import numpy as np

from ..algorithms import BUILTINS, declared
from ..runtime.errors import ConfigError
from ..runtime.notices import Notice
from ..sim.algorithms import mean_server, weighted_mean_server
from .mechanisms import ADAPTIVE_EXACT_EPSILON, LDP_NAMES, gaussian_epsilon
from ..plugins import registry
from ..config.options import ALGORITHMS, CLIENT_GRADS, DPS, MODELS, plugin_of, resolve_plugin



class PrivacyOptions(Protocol):
    """What this module reads of a run's options: a :class:`~.config.Config` is one. Named here, not
    imported from :mod:`.config` (which imports this module), so that no two modules import each other."""

    algorithm: str
    model: str
    ldp: str
    dp: str
    epsilon: float
    delta: float
    clip: float
    neighbouring: str
    rounds: int
    clients: int
    clients_per_round: int
    client_grad: str

    @property
    def resolved_ldp_on(self) -> str: ...

    @property
    def resolved_dual_from(self) -> str: ...

    @property
    def resolved_server_target(self) -> str: ...


# The server step's L2 sensitivity to replacing one client's clipped upload (norm ≤ clip) by another, in
# units of η_g·clip, under dp="central" (accounted as sampling without replacement, whose relation is
# replace-one), as each built-in declares it (Declares.central_sensitivity): the mean servers' 2/m (FedAvg/FedProx
# average uniformly under central DP; 1/m would be add/remove's), the fair servers' 2 (the fair direction has norm
# ≤ ‖mean Δ̃_i‖ ≤ clip whatever the QP's weights, so two outputs differ by at most 2·clip); a built-in declaring
# none (qFedAvg: its step divides by loss-dependent h_i) is refused. Built-in name -> sensitivity:
CENTRAL_SENSITIVITY = {name: f.declares.central_sensitivity for name, f in BUILTINS.items()
                       if f.declares.central_sensitivity is not None}
# A user's algorithm is accounted as the mean servers are when its server IS one of these function objects
# (identity: nothing is taken on trust): under dp="central" the round weighs the clients 1/m, so either is
# θ − η_g·mean_i clip(Δ_i), which reads nothing else of ServerIn and keeps its server state as it is.
CENTRAL_SERVERS = (weighted_mean_server, mean_server)
_AUX_NOT_COVERED = "the auxiliary upload ServerIn.aux"  # privacy_not_covered's entry (recorded_guarantee reads it)
_PERSONAL_NOT_COVERED = "the personal models (personal_model)"


def privacy_record(cfg: PrivacyOptions) -> dict:
    """:attr:`Config.privacy`: the mechanism's parameters, ``guarantee`` and ``why``
    (:func:`privacy_guarantee`) and ``not_covered`` (:func:`privacy_not_covered`); empty without a
    mechanism."""
    if cfg.ldp != "none":
        value = "weight" if cfg.resolved_ldp_on == "weights" else "update value"
        out = {"mechanism": cfg.ldp, "epsilon": cfg.epsilon, "on": cfg.resolved_ldp_on,
               "per": f"{value} sign" if cfg.ldp == "adaptive"
               else f"{value}, given the tensor's centre and radius", "dual_from": cfg.resolved_dual_from}
    elif cfg.dp == "central":
        out = {"mechanism": "central", "epsilon_total": cfg.epsilon, "delta": cfg.delta, "clip": cfg.clip,
               "rounds": cfg.rounds, "sensitivity": f"{central_sensitivity_of(cfg.algorithm)} x server_lr x clip"}
    elif cfg.dp == "gaussian":
        out = {"mechanism": "gaussian", "epsilon_nominal": cfg.epsilon, "delta": cfg.delta,
               "epsilon_exact": gaussian_epsilon(cfg.epsilon, cfg.delta), "clip": cfg.clip,
               "neighbouring": cfg.neighbouring, "dual_from": cfg.resolved_dual_from}
    else:
        return {}
    holds, why = privacy_guarantee(cfg)
    out.update(guarantee="holds" if holds else "does not hold", why=why, not_covered=privacy_not_covered(cfg))
    return out


def _check_accountable(cfg: PrivacyOptions) -> None:
    """The privacy accountant's input ranges (accounting.EPSILON_MAX, EPSILON_MIN_CENTRAL, Q_MIN): beyond
    them dp-accounting hangs or fails deep inside; one line naming the input and its range instead. Only
    central DP needs the accountant to run (it calibrates the noise); a local Gaussian run outside the range
    runs, and its summary records the accountant's one-line refusal instead of privacy_spent."""
    from . import accounting as A
    if cfg.dp != "central":
        return
    eps = float(cfg.epsilon)
    if not (A.EPSILON_MIN_CENTRAL <= eps <= A.EPSILON_MAX):
        raise ConfigError(f"epsilon {eps:g} is outside the privacy accountant's range for dp central "
                          f"([{A.EPSILON_MIN_CENTRAL:g}, {A.EPSILON_MAX:g}]); choose --epsilon in it")
    q = cfg.clients_per_round / cfg.clients
    if q < A.Q_MIN:
        raise ConfigError(f"clients_per_round/clients = {q:g} is below the privacy accountant's range for dp central "
                          f"(q >= {A.Q_MIN:g}); raise --clients-per-round or lower --clients")
    try:  # a budget the calibration cannot reach is refused here, without calibrating (building does that)
        A.check_central_budget(eps, cfg.delta, cfg.clients_per_round, cfg.clients, cfg.rounds,
                               amplified=A.amplified(cfg))
    except ValueError as e:
        raise ConfigError(f"dp central: {e}") from None


def privacy_guarantee(cfg: PrivacyOptions) -> tuple[bool, str]:
    """Whether the formal guarantee of ``cfg``'s privacy mechanism covers what its clients upload, and
    why (one sentence). Pure: reads only the options.

    The guarantee is the mechanism's, for one client's upload in one round, as docs/privacy.md states
    it: ``adaptive`` ε-LDP for the sign of each weight given ``|δ|`` and the tensor's centre and radius;
    ``ldp_fl`` ε-LDP per weight given the centre and radius; ``gaussian`` (ε', δ)-DP with ε' the exact
    (analytic Gaussian) ε of its σ. It holds when the model-sized upload is a function of the
    mechanism's output and public values only (post-processing): FedAvg, FedProx, qFedAvg, FedLF with
    ``client_grad="local"``, and FedADMM/FedALF with ``server_target="model"`` (the dual stays on the
    client) or ``dual_from="perturbed"`` (the dual follows ``w̃``). The values that leave the client
    beside it (centre and radius, loss, ``n_i``) are outside it, by its statement
    (:func:`privacy_not_covered`). It does not hold when the upload adds un-noised data: FedADMM/FedALF
    with ``dual_from="local"`` and the ``increment`` or ``augmented`` upload; a user's algorithm sending an
    un-noised per-client upload beside it (``public_aux=False``: :func:`uploads_not_covered`); FedLF with
    ``client_grad="full"``, a user's algorithm with ``local_train=False`` and ``cnn_bn`` (all refused by
    validation; :func:`check_applied` refuses the cases only the built round shows); nor for ``adaptive`` at
    ε ≥ 16.6, which in float32 releases every weight exactly, or ``ldp_fl`` there (an output of probability 0). No privacy mechanism: ``(False, ...)``.
    """
    mech = cfg.dp if cfg.dp != "none" else cfg.ldp
    if mech == "none":
        return False, "no privacy mechanism is on: every client uploads its un-noised model"
    if cfg.model == "cnn_bn":  # central DP too: its noise is on θ, the averaged statistics are released as they are
        return False, "cnn_bn's batch-norm statistics leave the client un-noised (the server averages them)"
    if mech == "central":
        server = ""
        if cfg.algorithm not in ALGORITHMS:  # a user's: holds only for a mean server and no auxiliary upload
            user = plugin_of(cfg).algorithm
            if user is None:
                return False, (f"algorithm {cfg.algorithm!r}'s factory cannot be built without the model's layers "
                               f"(layer_of), so its server is not read here and central DP's guarantee is not "
                               f"claimed for it")
            refused = central_refusal(cfg.algorithm, user)
            if refused:  # refused by validate_privacy; never claimed whatever calls this
                return False, refused
            server = (f"algorithm {cfg.algorithm!r}'s server is the package's {user.server.__name__} (checked: the "
                      f"function itself), the mean of the clipped uploads under central DP, and it sends nothing "
                      f"beside Δ_i; ")
        return True, (f"{server}each client's upload Δ_i is clipped to L2 norm {cfg.clip:g} and the server adds Gaussian noise "
                      f"to its step ({central_sensitivity_of(cfg.algorithm)} x server_lr x clip sensitivity, noise "
                      f"multiplier calibrated by dp_accounting), so the global models released over the {cfg.rounds} "
                      f"rounds are (epsilon={cfg.epsilon:g}, delta={cfg.delta:g})-DP for replacing any one client's "
                      f"data ({_central_sampling(cfg)}); the "
                      f"server itself sees the clipped updates before its noise and must be trusted")
    builtin = cfg.algorithm in ALGORITHMS
    if builtin:  # what its upload is under a mechanism, as it declares (a built-in that cannot hold says why)
        holds, upload = declared(cfg.algorithm).upload_privacy(cfg)
        if not holds:
            return False, upload
    if not builtin:
        user = plugin_of(cfg).algorithm
        if user is None:
            return False, (f"algorithm {cfg.algorithm!r}'s factory cannot be built without the model's layers "
                           f"(layer_of), so its private_upload declaration is not read here and the mechanism's "
                           f"guarantee is not claimed for what it uploads")
        if not user.trains_locally:  # refused by validate_privacy; never claimed whatever calls this
            return False, _no_local_train(cfg.algorithm)
        if not user.private_upload and not user.hand_written:  # a client program's upload is the round's: θ − w̃
            return False, (f"algorithm {cfg.algorithm!r} does not declare private_upload=True (that its upload is "
                           f"a function of the mechanism's output w̃_i and public values only), so nothing says "
                           f"the mechanism's guarantee covers what it uploads")
        beside = uploads_not_covered(user)
        if beside:  # an un-noised per-client upload beside Δ_i: the headline cannot be "holds"
            return False, (f"algorithm {cfg.algorithm!r} sends {' and '.join(beside)} beside the model upload, "
                           f"un-noised: the mechanism perturbs only the model, so its guarantee does not cover "
                           f"what each client uploads (declare public_aux=True only if aux is a function of "
                           f"w̃_i and public values)")
    if cfg.ldp == "adaptive" and cfg.epsilon >= ADAPTIVE_EXACT_EPSILON:
        return False, (f"ldp=adaptive at epsilon={cfg.epsilon:g} >= {ADAPTIVE_EXACT_EPSILON}: in float32 the flip "
                       f"probability 1/(e^epsilon+1) rounds to 0, so every weight is released exactly")
    if cfg.ldp == "ldp_fl" and cfg.epsilon >= ADAPTIVE_EXACT_EPSILON:
        return False, (f"ldp=ldp_fl at epsilon={cfg.epsilon:g} >= {ADAPTIVE_EXACT_EPSILON}: in float32 the probability "
                       f"1/(e^epsilon+1) of an extreme weight's other output rounds to 0, so no finite epsilon bounds "
                       f"the ratio of the output probabilities")
    if cfg.algorithm not in ALGORITHMS and user.hand_written:  # a client program: the round computes Δ_i
        upload = (f"algorithm {cfg.algorithm!r}'s client program reveals its trained params through fj.Reveal, and "
                  f"the round itself uploads Δ_i = θ_t − w̃_i, the mechanism's output w̃_i of those params (a "
                  f"program whose final returns Δ_i itself is refused under a mechanism while the round is traced)")
    elif cfg.algorithm not in ALGORITHMS:
        upload = (f"algorithm {cfg.algorithm!r} declares its upload a function of the mechanism's output w̃_i and "
                  f"public values (private_upload=True)")
        if user.public_aux:  # its auxiliary upload rides on a second declaration
            upload += (" and its auxiliary upload ServerIn.aux a function of w̃_i and public values too "
                       "(public_aux=True)")
    value = "weight" if cfg.resolved_ldp_on == "weights" else "value of the update w_i − θ_t"
    if mech == "adaptive":
        what = (f"epsilon={cfg.epsilon:g}-LDP for the sign of each {value} only, given |δ| and each tensor's "
                f"centre and radius, which pass through un-noised")
    elif mech == "ldp_fl":
        what = (f"epsilon={cfg.epsilon:g}-LDP per {value} given each tensor's centre and radius, which pass "
                f"through un-noised (d·epsilon for a tensor of d values)")
    else:
        exact = gaussian_epsilon(cfg.epsilon, cfg.delta)
        short = f", short of the nominal epsilon={cfg.epsilon:g}" if exact > cfg.epsilon * (1 + 1e-9) else ""
        what = (f"(ε, δ)-DP at epsilon={exact:.3g}, delta={cfg.delta:g} under {cfg.neighbouring}, by exact "
                f"analytic-Gaussian accounting{short}")
    if cfg.algorithm not in ALGORITHMS and user.hand_written and user.public_aux:
        return True, (f"{upload}; its auxiliary upload ServerIn.aux rests on the algorithm's own declaration, not on "
                      f"a check, that it is a function of public values only (public_aux=True; final does not see "
                      f"w̃_i); if that is true, by post-processing the mechanism's guarantee holds for one upload "
                      f"per round ({what}); nothing composes it over rounds")
    if cfg.algorithm not in ALGORITHMS and not user.hand_written:  # nothing checks a user's upload: the claim is its own
        which, true = ("declarations", "those declarations are") if user.public_aux else ("declaration",
                                                                                         "that declaration is")
        return True, (f"this rests on the algorithm's own {which}, not on a check: {upload}; if {true} "
                      f"true, by post-processing the mechanism's guarantee holds for one upload per "
                      f"round ({what}); nothing composes it over rounds")
    return True, (f"{upload}, so by post-processing the mechanism's guarantee holds for one upload per round "
                  f"({what}); nothing composes it over rounds")


def _central_sampling(cfg: PrivacyOptions) -> str:
    """What central DP's guarantee rests on in the sampling (accounting.sampling): amplified at m/N, also under
    dropout alone; not under non-uniform availability (q = 1)."""
    from . import accounting as A
    how = A.sampling(cfg)
    m, n = cfg.clients_per_round, cfg.clients
    if how == "non-uniform":
        return (f"user-level; {A.NO_AMPLIFICATION} (availability {cfg.availability}), so every round is accounted "
                f"as the full Gaussian mechanism, q = 1, the server dividing by m = {m} whoever arrives")
    if how == "dropout":
        return (f"user-level, amplified by sampling {m} of {n} without replacement, as the simulator does; each "
                f"upload then lost with probability {cfg.dropout:g} independently of the data, which releases "
                f"less, the server dividing by m = {m} whoever arrives")
    return f"user-level, amplified by sampling {m} of {n} without replacement, as the simulator does"


def uploads_not_covered(alg) -> list[str]:
    """The per-client uploads beside Δ_i that ``alg`` (a user's :class:`~fedalf_jax.Algorithm`) declares
    outside the mechanism: today its auxiliary upload with ``public_aux=False`` (any pytree: the raw
    model, FedNova's τ_i). Unlike the scalar facts of :func:`privacy_not_covered` (``|δ|``, ``c, r``,
    ``l_i``, ``n_i``, conditions of the mechanism's statement), each of these voids the headline: a
    per-client upload a later contract adds (prototypes, statistics) belongs here too."""
    return ["its auxiliary upload ServerIn.aux (public_aux=False)"] if alg.public_aux is False else []


def recorded_guarantee(rec: dict) -> dict:
    """``{"guarantee", "why"}`` of a recorded privacy record (``summary.json``'s or ``config.json``'s
    ``privacy``): as recorded, but a ``"holds"`` written before an un-noised auxiliary upload voided the
    headline (its ``not_covered`` names the upload) reads ``"does not hold"``."""
    why = str(rec.get("why", ""))
    listed = rec.get("not_covered") if isinstance(rec.get("not_covered"), list) else []
    if rec.get("guarantee") == "holds" and any(str(x).startswith(_AUX_NOT_COVERED) for x in listed):
        return {"guarantee": "does not hold",
                "why": ("the auxiliary upload ServerIn.aux leaves each client un-noised beside the model upload "
                        "(public_aux=False), outside the mechanism (recorded before this voided the headline: "
                        f"{why})")}
    return {"guarantee": rec.get("guarantee"), "why": why}


def check_applied(cfg: PrivacyOptions, spec) -> None:
    """The round built for ``cfg`` (``spec``: the algorithm built for the model, and the model) applies the
    mechanism as ``cfg.privacy`` records it: one line otherwise, before anything is written
    (``build.make_spec`` calls it). Refused: an algorithm without local training (its client uploads
    ∇f_i(θ_t) past the mechanism; a user's factory needing ``layer_of`` is first built here), a user's
    factory declaring ``private_upload``/``public_aux`` otherwise for the model than for the record, and a
    user's model keeping batch statistics (averaged un-noised by the server, which the record cannot see)."""
    if cfg.ldp == "none" and cfg.dp == "none":
        return
    option, value = ("ldp", cfg.ldp) if cfg.ldp != "none" else ("dp", cfg.dp)
    alg = spec.algorithm
    if not alg.trains_locally:
        raise ConfigError(_no_local_train(cfg.algorithm, option, value))
    read = plugin_of(cfg).algorithm if cfg.algorithm not in ALGORITHMS else None
    for name in ("private_upload", "public_aux"):
        if read is not None and getattr(read, name) != getattr(alg, name):
            raise ConfigError(f"algorithm {cfg.algorithm!r} declares {name}={getattr(alg, name)!r} when built for the "
                              f"model but {name}={getattr(read, name)!r} when its factory is called with "
                              f"layer_of=None, which the run's privacy record reads; let the factory declare the same "
                              f"{name} whatever layer_of")
    refused = central_refusal(cfg.algorithm, alg) if cfg.dp == "central" and cfg.algorithm not in ALGORITHMS else None
    if refused:  # a factory that needs layer_of is first built here (or builds otherwise for the model)
        raise ConfigError(refused)
    if cfg.model not in MODELS and spec.model.has_batch_stats:
        raise ConfigError(f"{option}={value!r} cannot be used with model {cfg.model!r}, which keeps batch statistics "
                          f"(batch_stats): the server averages them un-noised beside the clients' uploads, outside "
                          f"the mechanism; drop batch norm from the model or run it with {option}='none'")


def central_sensitivity_of(algorithm: str) -> str:
    """The server step's replace-one sensitivity under ``dp="central"``, in units of η_g·clip: a built-in's
    :data:`CENTRAL_SENSITIVITY`, a user's algorithm's ``"2/m"`` (central DP runs one only when
    :func:`central_refusal` finds nothing: its server is one of :data:`CENTRAL_SERVERS`)."""
    return CENTRAL_SENSITIVITY[algorithm] if algorithm in ALGORITHMS else "2/m"


def central_refusal(name: str, alg) -> str | None:
    """Why ``dp="central"`` cannot account a user's algorithm ``alg``, in one line; ``None`` when it can.

    The accounting (docs/privacy.md) assumes the round's released model is ``θ − η_g·mean_i clip(Δ_i)``
    plus the server's noise: the mean server (:data:`CENTRAL_SERVERS`, tested by identity) moves by at most
    ``2·η_g·clip/m`` when one client's data is replaced, whatever that client's upload was, so its client may
    train as it likes (``penalty``, ``local_loss``, ``local_optimizer``, ``local_start``, ``personal``, a
    per-client state: the server never reads a client's state, only its clipped Δ_i). Refused: any other
    server (its sensitivity is not analysed), and an auxiliary upload (``public_aux`` set: ``ServerIn.aux`` is
    neither clipped nor noised, and its ``metrics`` are released as they are)."""
    if not any(alg.server is f for f in CENTRAL_SERVERS):
        return (f"dp='central' needs a bound on how much one client moves the server step, and algorithm {name!r} "
                f"has its own server, whose bound is not analysed: build it with server=fj.algorithms."
                f"weighted_mean_server or fj.algorithms.mean_server (FedAvg's mean of the clipped uploads, accounted "
                f"at 2·clip/m; its client may train as it likes), or use dp='gaussian'")
    if alg.public_aux is not None:
        return (f"dp='central' cannot be used with algorithm {name!r}, which sends an auxiliary upload ServerIn.aux "
                f"(public_aux={alg.public_aux}) beside Δ_i: central DP clips only Δ_i and noises only the server's "
                f"step, so aux would leave each client unclipped and un-noised; upload only (Δ_i, new state) "
                f"(drop public_aux), or use dp='gaussian'")
    return None


def _no_local_train(name: str, option: str = "", value: str = "") -> str:
    """One line: a mechanism cannot apply to an algorithm without local training (its client uploads
    ∇f_i(θ_t) and never calls ``upload``, so nothing it uploads passes through the mechanism)."""
    mech = f"{option}={value!r}" if option else "a privacy mechanism"
    return (f"{mech} cannot be used with algorithm {name!r}, which declares local_train=False: its client uploads "
            f"its full-batch gradient ∇f_i(θ_t) and never calls upload, so the mechanism, which perturbs a trained "
            f"model, would perturb nothing; set local_train=True in its Algorithm (upload then receives the perturbed "
            f"model as w_tilde) or run it with {option or 'ldp'}='none'")


def privacy_not_covered(cfg: PrivacyOptions) -> list[str]:
    """What a private run's client reveals un-noised beside the mechanism's output, outside the guarantee
    of :func:`privacy_guarantee` (docs/privacy.md). Empty without a mechanism."""
    mech = cfg.dp if cfg.dp != "none" else cfg.ldp
    if mech == "none":
        return []
    if mech == "central":
        out = ["everything a client sends to the server (its clipped update, loss and sample count): central DP "
               "covers the released global models, not the uploads"]
        if cfg.algorithm not in ALGORITHMS:
            alg = plugin_of(cfg).algorithm
            if alg is not None and alg.evaluates_own:
                out.append(f"{_PERSONAL_NOT_COVERED}: each client's own model, kept on the client and evaluated "
                           f"un-noised (central DP covers the global models only)")
        return out
    out = []
    if mech == "adaptive":
        out.append("|δ| = |w − c| of every weight")
    if mech in ("adaptive", "ldp_fl"):
        out.append("each tensor's centre c and radius r")
    if cfg.algorithm not in ALGORITHMS:
        alg = plugin_of(cfg).algorithm
        if alg is None or alg.needs_loss:
            out.append("the loss l_i = f_i(θ_t)" + ("" if alg is not None else ", if its server uses it"))
        out.append("the sample count n_i, if its server uses ServerIn.weights or ServerIn.n")
        if alg is not None and alg.public_aux is False:
            out.append(f"{_AUX_NOT_COVERED} (the algorithm declares public_aux=False)")
        return out
    if declared(cfg.algorithm).sends_loss:
        out.append("the loss l_i = f_i(θ_t)")
    if declared(cfg.algorithm).weighted_by_n:
        out.append("the sample count n_i (the aggregation weight)")
    return out


def _as_array(name: str, value, hint: str) -> np.ndarray:
    if value is None or isinstance(value, (str, bytes, bool)):
        raise ValueError(f"{name}={value!r} is not a number; {hint}")
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={value!r} is not a number; {hint}") from None


def validate_privacy(*, ldp: str | None, dp: str | None, epsilon=None, delta=None, clip=None,
                     algorithm: str, client_grad: str | None = None, plugin=None) -> None:
    """Refuse an inconsistent privacy configuration with a one-line ``ValueError`` (problem + fix).

    Checks: ``ldp`` in ``LDP_NAMES``, ``dp`` in ``DPS``, a known ``algorithm`` (and
    ``client_grad`` for fedlf, default ``"full"``), not both ``ldp`` and ``dp`` on, the mechanism
    applies to the algorithm (both perturb an uploaded model, so fedlf needs
    ``client_grad="local"``), ``epsilon`` finite and > 0 when a mechanism is on, and for
    ``dp="gaussian"``: ``0 < delta < 1`` and ``clip`` finite and > 0.  Values may be scalars or
    arrays (sweeps: every entry is checked); they must be concrete, not traced.

    Warns (``UserWarning``) when ``dp="gaussian"`` has an ``epsilon`` whose classic calibration does
    not reach it: the exact (analytic Gaussian) ε of that σ is larger than the stated one (about
    ε > 8.4 at δ = 1e-5; at the paper's ε = 2 the exact ε is 1.61, so the guarantee holds).
    """
    ldp = "none" if ldp is None else ldp
    dp = "none" if dp is None else dp
    if ldp not in LDP_NAMES:
        raise ValueError(f"unknown ldp={ldp!r}; use one of {', '.join(map(repr, LDP_NAMES))}")
    if dp not in DPS:
        raise ValueError(f"unknown dp={dp!r}; use one of {', '.join(map(repr, DPS))}")
    if algorithm not in ALGORITHMS:
        if not isinstance(algorithm, str):
            raise ValueError(f"algorithm must be a name (a string), got {type(algorithm).__name__} {algorithm!r}")
        try:
            registry.lookup("algorithm", algorithm, ALGORITHMS)
        except registry.RegistryError as e:  # says why (unknown, or its module:attribute does not import)
            raise ValueError(str(e)) from None
    decl = declared(algorithm)
    if "client_grad" in decl.options:  # (fedlf's: what its clients send)
        client_grad = decl.resolve("client_grad", client_grad, False)
        if client_grad not in CLIENT_GRADS:
            raise ValueError(f"unknown client_grad={client_grad!r} for algorithm={algorithm!r}; "
                             f"use 'full' or 'local'")
    if ldp != "none" and dp != "none":
        raise ValueError(f"ldp={ldp!r} and dp={dp!r} are both on; choose one privacy mechanism "
                         f"(set ldp='none' or dp='none')")
    if ldp == "none" and dp == "none":
        return
    option, value = ("ldp", ldp) if ldp != "none" else ("dp", dp)
    if dp == "central" and algorithm in ALGORITHMS and algorithm not in CENTRAL_SENSITIVITY:
        raise ValueError(f"dp='central' needs a bound on how much one client moves the server step; algorithm="
                         f"{algorithm!r} has none (qFedAvg divides by loss-dependent h_i): use one of "
                         f"{', '.join(CENTRAL_SENSITIVITY)} (or a user's algorithm with FedAvg's server), or dp='gaussian'")
    refused = decl.privacy_refusal(option, value, client_grad) if decl.privacy_refusal is not None else None
    if refused:  # a mechanism the built-in cannot run with at all (fedlf's gradient upload)
        raise ValueError(refused)
    if algorithm not in ALGORITHMS:  # the same for a user's algorithm (a factory needing layer_of: check_applied)
        user = (plugin if plugin is not None else resolve_plugin(algorithm)).algorithm
        if user is not None and not user.trains_locally:
            raise ValueError(_no_local_train(algorithm, option, value))
        refused = central_refusal(algorithm, user) if dp == "central" and user is not None else None
        if refused:
            raise ValueError(refused)

    eps = _as_array("epsilon", epsilon, f"set epsilon to a finite privacy budget > 0 for {option}={value!r}")
    if not (np.all(np.isfinite(eps)) and np.all(eps >= np.finfo(np.float32).tiny)):
        raise ValueError(f"epsilon={epsilon!r} must be finite and > 0 (not subnormal) for {option}={value!r}; "
                         f"set a positive privacy budget, e.g. epsilon=2")
    if ldp in ("adaptive", "ldp_fl") and np.any(eps >= ADAPTIVE_EXACT_EPSILON):
        warnings.warn(f"ldp={ldp!r} with epsilon={float(np.max(eps)):g} >= {ADAPTIVE_EXACT_EPSILON}: in float32 "
                      f"the probability 1/(e^epsilon+1) rounds to 0 and the upload is not epsilon-LDP", Notice,
                      stacklevel=2)
    if dp in ("gaussian", "central"):
        d = _as_array("delta", delta, f"set delta in (0, 1) for dp={dp!r}, e.g. delta=1e-5")
        if not (np.all(np.isfinite(d)) and np.all(d > 0) and np.all(d < 1)):
            raise ValueError(f"delta={delta!r} must lie strictly between 0 and 1 for dp={dp!r}; "
                             f"use e.g. delta=1e-5 (well below 1/number of records)")
        cl = _as_array("clip", clip, "set clip, the L2 bound of each client update, e.g. clip=1.0")
        if not (np.all(np.isfinite(cl)) and np.all(cl > 0)):
            raise ValueError(f"clip={clip!r} must be finite and > 0 for dp={dp!r} (the L2 norm bound "
                             f"of each client's update); use e.g. clip=1.0")
    if dp == "gaussian":
        for e, dl in zip(*np.broadcast_arrays(eps.ravel(), d.ravel())):
            exact = gaussian_epsilon(float(e), float(dl))
            if exact > float(e) * (1 + 1e-9):
                warnings.warn(
                    f"dp='gaussian' with epsilon={float(e):g}: the classic calibration sigma = clip*sqrt(2 ln(1.25/delta))"
                    f"/epsilon gives only epsilon={exact:.3g} at delta={float(dl):g} (exact accounting); use a smaller "
                    f"epsilon (see docs/privacy.md)", Notice, stacklevel=2)
                break
