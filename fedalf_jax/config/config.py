"""Run configuration: one frozen dataclass, validated up front with one-line errors.

Everything a run needs to be reproduced lives here and is written to ``config.json``. The privacy
options' consistency and what a private run's guarantee covers are :mod:`.guarantee`'s (``Config``
calls it, so ``privacy.mechanisms`` stays pure mechanism); the options' possible values are :mod:`.options`'s
(re-exported here); a run's identity compared, the values of options added since a run was made, and the
options a run never reads are :mod:`.identity`'s.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import numbers
import os
import re
import warnings
from pathlib import Path
from typing import Any, Optional, Union

from ..algorithms import BUILTINS, declared
from ..runtime.errors import ConfigError  # raised here and by every floor; fj.ConfigError is this class
from ..sim.algorithms import DUAL_FROM, FAIR_NORMS, LOCAL_OPTIMIZERS, SERVER_TARGETS
from ..privacy.mechanisms import NEIGHBOURING
from ..plugins import registry
from ..privacy.guarantee import _check_accountable, privacy_record, validate_privacy  # it reads no name of this module
# the options' values (re-exported: `from fedalf_jax.experiment.config import ALGORITHMS` keeps working)
from .options import (ALGORITHMS, ASSIGNS, CLIENT_GRADS, CLIENT_MAPS, CONTINUOUS, DATASETS, DPS, LAYERS, LDP_ON,
                      LDPS, LOGS, MATMUL_PRECISIONS, MODELS, PARTITIONS, QP_METHODS, STATE_DTYPES, Plugin, _user_algorithm,
                      resolve_plugin)


# The per-algorithm defaults (server_lr, rho, server_target, history, ..., and a private run's guarantee-holding
# variants) are the algorithm's own declarations (fedalf_jax.algorithms: Declares.options / .defaults; GENERIC for an
# algorithm that declares none): Config.resolved(name) asks them.


# Options that may change when a run is resumed: its length, its cadences, its writers, its folder and
# where its data files lie (the data's digest is what counts: CONTENT). Every other option is part of the
# run's identity (Config.identity).
BOOKKEEPING = ("rounds", "eval_every", "train_loss_every", "checkpoint_every", "log", "out", "data_dir")
# Identity entries that digest content rather than options: the arrays loaded from files (rundir.run_identity)
# and a user's algorithm's or model's code (Config.identity). A checkpoint without one (written before they
# were recorded) or with "uncheckable" cannot be checked; rundir.RunDir.usable_checkpoint says so. The code's
# per-file digests (*_code_files) name what changed when the code digest differs.
CONTENT = ("data_digest", "algorithm_code", "model_code", "algorithm_code_files", "model_code_files")


# Keys that config.json carries for the reader but that are derived from the options (Config.privacy):
# Config.from_dict ignores them, so a run directory's config.json goes back through --config as it is.
DERIVED_KEYS = ("privacy",)


@dataclasses.dataclass(frozen=True)
class Config:
    # what to run
    algorithm: str = "fedalf"
    # a user's algorithm factory's keyword arguments {name: int, float, bool or string} (--alg-arg K=2): static,
    # part of the run's identity and of its code digest (a different K is a different program); built-ins: none
    alg_args: dict = dataclasses.field(default_factory=dict)
    dataset: str = "fmnist"
    data_dir: Optional[str] = None
    data_source: str = "auto"
    synthetic_like: str = "fmnist"
    synthetic_train: int = 2000
    synthetic_test: int = 500
    partition: str = "pat1"
    assign: str = "fedlf"
    alpha: float = 0.5
    model: str = "cnn"
    conv_impl: str = "auto"
    client_map: str = "auto"
    run_map: str = "auto"  # a sweep's runs in one program: vmap, map (lax.map), auto (per backend)
    devices: int = 1  # run: shard the sampled clients over D devices; sweep: shard the runs
    state_dtype: str = "float32"  # storage of per-client rows (ADMM duals, history): float32 or bfloat16
    matmul_precision: str = "default"  # the model's matmuls/convs: default (TF32 on GPU), high, highest
    # federated setting (docs/algorithms.md §2)
    rounds: int = 200
    clients: int = 100
    clients_per_round: int = 10
    local_epochs: int = 1
    # K minibatch steps per round instead of local_epochs epochs (None: epochs); a client's steps cycle
    # through reshuffled passes over its data, B examples each (sim.client.step_batches)
    local_steps: Optional[int] = None
    # real federations (docs/federations.md): which clients are available each round (always, beta:A,B,
    # size, cyclic:PERIOD) and the probability that a sampled client's upload is lost
    availability: str = "always"
    dropout: float = 0.0
    # stragglers (docs/federations.md): per-client speeds, the round's deadline in local steps of a speed-1
    # client, and what happens to a client that misses it (its partial work kept, or its upload lost)
    stragglers: str = "none"
    deadline: Optional[float] = None
    straggler_policy: str = "partial"
    batch_size: int = 50
    lr: float = 0.05
    lr_decay: float = 0.999
    server_lr: Optional[float] = None
    server_lr_decay: Optional[float] = None
    # algorithm hyper-parameters
    mu: float = 0.01
    rho: Optional[float] = None  # ADMM penalty ρ; default per algorithm (its declarations)
    q: float = 0.1
    client_grad: str = "full"
    history: Optional[bool] = None
    history_tau: Optional[int] = None  # rounds a stored history row stays (τ); default FedLF's ⌊M/m⌋
    layers: str = "module"
    merge_tol: float = 1e-6
    qp_method: str = "auto"  # active-set up to 256 QP rows, pgd above (fedalf_jax/sim/qp.py)
    server_target: Optional[str] = None  # the ADMM upload; default per algorithm (its declarations)
    dual_from: Optional[str] = None  # local (the paper's) or perturbed; default: local
    fair_norm: Optional[str] = None  # raw or denoised (a private run's default): the fair direction's length
    # the algorithm's own hyper-parameters (Algorithm.hparams): {name: value}, overriding its declared defaults;
    # traced like lr (hp.own[name]); config.json and the identity record them resolved (defaults filled in)
    hp: dict = dataclasses.field(default_factory=dict)
    # the clients' local optimiser for an algorithm that does not choose its own (Algorithm.local_optimizer):
    # sgd, momentum, nesterov (β 0.9) or adam (optax defaults); None: the algorithm's own, plain SGD w − η_l g
    local_optimizer: Optional[str] = None
    # privacy (docs/privacy.md)
    ldp: str = "none"
    ldp_on: Optional[str] = None  # weights (the paper's reading) or update (a private run's default)
    dp: str = "none"
    epsilon: float = 2.0
    delta: float = 1e-5
    clip: float = 1.0
    neighbouring: str = "add_remove"  # Gaussian DP: sensitivity clip (add/remove) or 2·clip (replace)
    # bookkeeping
    eval_every: Union[int, str] = 10  # rounds between evaluations, or "never": no evaluation at all (timing runs)
    train_loss_every: int = 50  # rounds; the train loss passes over every training sample
    # also evaluate the averaged iterate θ̄_t = mean(θ_1..θ_t) (AFL's reported model), in avg_* columns beside
    # the last iterate's; kept in the run state (checkpointed), so part of the run's identity
    eval_average: bool = False
    checkpoint_every: str = "300s"  # "N" rounds or "Ns" seconds; always at the end of a run; "never": none at all
    log: str = "csv"  # metrics.csv always; "tensorboard" also writes scalars with tensorboardX
    seed: int = 0
    out: Optional[str] = None

    def __post_init__(self):
        self.validated()  # Config(...) itself refuses bad values, with the one-line message
        object.__setattr__(self, "hp", {k: float(v) for k, v in self.hp.items()})  # a copy, of floats
        object.__setattr__(self, "alg_args", dict(self.alg_args))  # a copy

    def __getstate__(self):  # the resolved plugin (functions) is resolved again where the config is read back
        state = dict(self.__dict__)
        state.pop("_plugin", None)
        return state

    def __hash__(self):  # hashable as before hp (a dict) was an option: hp by its sorted items
        return hash(tuple((f.name, tuple(sorted(getattr(self, f.name).items())) if f.name in ("hp", "alg_args")
                           else getattr(self, f.name)) for f in dataclasses.fields(self)))

    # ---- derived values -------------------------------------------------------------
    @property
    def private(self) -> bool:
        """A privacy mechanism is on (local or Gaussian DP)."""
        return self.ldp != "none" or self.dp != "none"

    @property
    def plugin(self) -> Plugin:
        """The run's algorithm as this config's validation resolved it, once (:class:`.options.Plugin`: its
        declarations and, for a user's, the ``Algorithm`` its factory builds without the model's layers): what
        validation, the privacy guarantee and the identity read, instead of looking it up by name again."""
        found = self.__dict__.get("_plugin")
        if found is None or found.name != self.algorithm:
            found = resolve_plugin(self.algorithm, self.alg_args)
            object.__setattr__(self, "_plugin", found)
        return found

    @property
    def declares(self):
        """What the run's algorithm declares (:func:`fedalf_jax.algorithms.declared`: a built-in's own options,
        defaults, label, privacy facts; a user's algorithm: nothing beyond its ``Algorithm``)."""
        return declared(self.algorithm)

    def resolved(self, name: str):
        """Option ``name`` as the run uses it: the given value, else the algorithm's declared default for this
        run (a private run's guarantee-holding variant where it declares one), else the package's
        (:data:`fedalf_jax.algorithms.GENERIC`)."""
        return self.declares.resolve(name, getattr(self, name), self.private)

    @property
    def resolved_ldp_on(self) -> str:
        return self.resolved("ldp_on")

    @property
    def resolved_fair_norm(self) -> str:
        return self.resolved("fair_norm")

    @property
    def resolved_dual_from(self) -> str:
        return self.resolved("dual_from")

    @property
    def resolved_server_lr(self) -> float:
        return self.resolved("server_lr")

    @property
    def resolved_server_lr_decay(self) -> float:
        return self.resolved("server_lr_decay")

    @property
    def resolved_history(self) -> bool:
        return bool(self.resolved("history"))

    @property
    def resolved_rho(self) -> float:
        return self.resolved("rho")

    @property
    def resolved_server_target(self) -> str:
        return self.resolved("server_target")

    @property
    def declared_hp(self) -> Optional[dict]:
        """The algorithm's own hyper-parameters and their defaults (``Algorithm.hparams``): ``{}`` for a
        built-in, ``None`` when a user's factory cannot be built without the model's layers (``build``
        checks it then)."""
        if self.plugin.builtin:
            return {}
        alg = self.plugin.algorithm
        return None if alg is None else dict(alg.hparams)

    @property
    def resolved_hp(self) -> dict:
        """The algorithm's own hyper-parameters with the declared defaults filled in (declaration order)."""
        declared = self.declared_hp
        if declared is None:
            return dict(self.hp)
        return {k: float(self.hp.get(k, v)) for k, v in declared.items()}

    # ---- (de)serialisation ----------------------------------------------------------
    def to_dict(self) -> dict:
        """Every option; ``hp`` resolved (the declared defaults filled in), left out when the algorithm has
        none (so a built-in's config.json, sweep.json and identity are what they were before ``hp``)."""
        d = dataclasses.asdict(self)
        hp = self.resolved_hp
        if hp:
            d["hp"] = hp
        else:
            del d["hp"]
        if self.local_optimizer is None:  # as before the option existed (identities, digests, config.json)
            del d["local_optimizer"]
        if not self.alg_args:  # likewise: a run without factory arguments is what it was
            del d["alg_args"]
        for name, off in (("local_steps", None), ("eval_average", False)):  # likewise when off
            if d[name] is off:
                del d[name]
        return d

    def identity(self) -> dict:
        """What a run's trajectory depends on: every option but :data:`BOOKKEEPING`, with the per-algorithm
        defaults resolved (a changed default changes the identity too), and the digest of a user's algorithm
        or model code (:data:`CONTENT`). A checkpoint records it (with the loaded data's digest:
        ``rundir.run_identity``), and ``--resume`` refuses a config whose identity differs."""
        d = {k: v for k, v in self.to_dict().items() if k not in BOOKKEEPING}
        d.update(server_lr=self.resolved_server_lr, server_lr_decay=self.resolved_server_lr_decay,
                 rho=self.resolved_rho, server_target=self.resolved_server_target, history=self.resolved_history,
                 dual_from=self.resolved_dual_from, fair_norm=self.resolved_fair_norm, ldp_on=self.resolved_ldp_on)
        if self.dp == "central":  # the noise is calibrated to the whole run's length: --rounds cannot change
            d["central_rounds"] = self.rounds
            # and to the accounting: a checkpoint of the Poisson-accounted noise (of the first releases) is not resumed
            d["central_accounting"] = "sampled without replacement, replace-one"
        if self.availability.startswith("trace:"):  # the trace file's content: a resume with another is refused
            from ..sim.federation import trace_digest
            try:
                d["availability_digest"] = trace_digest(self.availability[len("trace:"):])
            except ValueError as e:
                raise ConfigError(str(e)) from None
        if self.dataset not in DATASETS:  # a registered data set: its arrays are part of the run's identity
            d["dataset_digest"] = registry.dataset(self.dataset).digest
        for kind, name, builtin in (("algorithm", self.algorithm, ALGORITHMS), ("model", self.model, MODELS)):
            if name not in builtin:  # a user's code: its source file's digest (built-in code: the package's)
                args = self.alg_args if kind == "algorithm" else None  # the algorithm its factory builds with them
                d[f"{kind}_code"] = registry.code(kind, name, args)[0]
                d[f"{kind}_code_files"] = registry.code_parts(kind, name, args)  # names what changed
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Config":
        d = {k: v for k, v in d.items() if k not in DERIVED_KEYS}  # informational (config.json's "privacy")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ConfigError(f"unknown config key(s) {unknown}; valid keys are the long flag names with '_' "
                              f"(e.g. clients_per_round)")
        return cls(**d).validated()

    @classmethod
    def load(cls, path: str | Path) -> "Config":
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {p} does not exist; pass an existing JSON file to --config")
        try:
            d = json.loads(p.read_text())
        except json.JSONDecodeError as e:
            raise ConfigError(f"config file {p} is not valid JSON ({e.msg} at line {e.lineno})") from None
        except ValueError as e:  # an integer of more than 4300 digits: Python refuses to read it
            raise ConfigError(f"config file {p} cannot be read: {str(e).split(';')[0]}") from None
        if not isinstance(d, dict):
            raise ConfigError(f"config file {p} must hold a JSON object of option names to values")
        return cls.from_dict(d)

    def replace(self, **kw: Any) -> "Config":
        return dataclasses.replace(self, **kw)  # validated by __post_init__, once

    # ---- validation -----------------------------------------------------------------
    def _check_custom(self) -> None:
        """A registered data set's options: its own client lists (partition given) fix the client count."""
        if self.dataset in DATASETS:
            if self.partition == "given":
                raise ConfigError(f"partition given needs a data set registered with its own client lists "
                                  f"(fedalf_jax.register_dataset(..., clients=...)); {self.dataset} has none: use "
                                  f"one of {', '.join(p for p in PARTITIONS if p != 'given')}")
            return
        data = registry.dataset(self.dataset)
        if self.data_dir is not None:
            raise ConfigError(f"--data-dir has no meaning for the registered data set {self.dataset!r}; drop it")
        if self.partition == "given":
            if data.clients is None:
                raise ConfigError(f"partition given: data set {self.dataset!r} was registered without client lists; "
                                  f"register it with clients=(train_lists, test_lists) or choose pat1, pat2, "
                                  f"dirichlet or iid")
            if self.clients != data.num_clients:
                raise ConfigError(f"data set {self.dataset!r} gives {data.num_clients} clients' lists but clients is "
                                  f"{self.clients}; set clients={data.num_clients}")
        elif data.clients is not None:  # a scheme would split the pooled rows and ignore the lists
            raise ConfigError(f"data set {self.dataset!r} was registered with its own client lists, which partition "
                              f"{self.partition} would ignore; run it with partition='given' (and "
                              f"clients={data.num_clients}), or register it without clients= to split it by "
                              f"{self.partition}")

    @property
    def privacy(self) -> dict:
        """What a private run's guarantee is, for ``summary.json`` and ``config.json`` (empty without a
        mechanism): the mechanism's parameters, ``guarantee`` (``"holds"`` or ``"does not hold"``) and
        ``why`` (:func:`privacy_guarantee`), and ``not_covered``: what else leaves the client un-noised,
        outside the guarantee (:func:`privacy_not_covered`)."""
        return privacy_record(self)

    @property
    def checkpoint_policy(self) -> tuple[str, float]:
        """``("rounds", N)``, ``("seconds", S)`` or ``("never", 0)`` from ``checkpoint_every``."""
        return parse_every(self.checkpoint_every)

    @property
    def evaluates(self) -> bool:
        """False for ``eval_every="never"``: the run evaluates nothing (no round-0 row, no final row, no train
        loss; so a diverged model is not detected either), only trains and checkpoints."""
        return self.eval_every != "never"

    @property
    def keeps_checkpoints(self) -> bool:
        """False for a throw-away run (``checkpoint_every="never"``): no checkpoint, not even at its end."""
        return self.checkpoint_policy[0] != "never"

    def check_privacy(self) -> None:
        """The privacy options' consistency (docs/privacy.md); ``ValueError`` with a one-line message."""
        validate_privacy(ldp=self.ldp, dp=self.dp, epsilon=self.epsilon, delta=self.delta, clip=self.clip,
                         algorithm=self.algorithm, client_grad=self.client_grad, plugin=self.plugin)

    def validated(self) -> "Config":
        # a user's algorithm's declaration (hparams, private_upload, ...) is read afresh from its factory: it may
        # read globals a notebook changed since the last run; read once per validation, and
        # kept as the config's plugin (Config.plugin) for every reader after it
        _user_algorithm.cache_clear()
        self.__dict__.pop("_plugin", None)
        for name in ("data_dir", "out"):  # paths: a JSON object or number here is a mistake, not a folder
            v = getattr(self, name)
            if isinstance(v, os.PathLike):  # a pathlib.Path is a path: kept as the string config.json records
                v = os.fspath(v)
                object.__setattr__(self, name, v)
            if v is not None and not isinstance(v, str):
                raise ConfigError(f"{name} must be a path (a string), got {type(v).__name__} {v!r}")
        if self.history is not None and not isinstance(self.history, bool):
            raise ConfigError(f"history must be true, false or null (the algorithm's default), got {self.history!r}")
        _named("algorithm", self.algorithm, ALGORITHMS)
        _check_alg_args(self)
        _named("dataset", self.dataset, DATASETS)
        _choice("synthetic_like", self.synthetic_like, ("fmnist", "cifar10", "cifar100"))
        _choice("data_source", self.data_source, ("auto", "dir", "tfds"))
        _choice("partition", self.partition, PARTITIONS)
        _choice("assign", self.assign, ASSIGNS)
        _named("model", self.model, MODELS)
        self._check_custom()
        _check_hp(self)
        _choice("ldp", self.ldp, LDPS)
        _choice("dp", self.dp, DPS)
        _choice("client_grad", self.client_grad, CLIENT_GRADS)
        _choice("layers", self.layers, LAYERS)
        if self.server_target is not None:
            _choice("server_target", self.server_target, SERVER_TARGETS)
        for name, choices in (("dual_from", DUAL_FROM), ("fair_norm", FAIR_NORMS), ("ldp_on", LDP_ON)):
            if getattr(self, name) is not None:
                _choice(name, getattr(self, name), choices)
        _choice("qp_method", self.qp_method, QP_METHODS)
        _choice("client_map", self.client_map, CLIENT_MAPS)
        _choice("run_map", self.run_map, CLIENT_MAPS)
        _choice("log", self.log, LOGS)
        _choice("state_dtype", self.state_dtype, STATE_DTYPES)
        if self.local_optimizer is not None:
            _choice("local_optimizer", self.local_optimizer, LOCAL_OPTIMIZERS)
        _choice("matmul_precision", self.matmul_precision, MATMUL_PRECISIONS)
        _choice("neighbouring", self.neighbouring, NEIGHBOURING)
        if self.history_tau is not None:
            _nonneg_int("history_tau", self.history_tau)
            if not self.resolved_history:
                raise ConfigError(f"history_tau {self.history_tau} sets how long history rows stay, but this run has "
                                  f"none ({self.algorithm}, history off); drop --history-tau or use --history on "
                                  f"with {' or '.join(_declaring('history'))}")
        if self.dp == "central" and "history" in self.declares.options and self.resolved_history:
            raise ConfigError(f"dp central with {self.algorithm}'s history rows: a client's stored row moves the server "
                              f"step in rounds it was not sampled in, which the accountant (amplified by sampling) "
                              f"does not count; add --history off")
        if self.model == "cnn_bn" and (self.ldp != "none" or self.dp != "none"):
            raise ConfigError("model cnn_bn with a privacy mechanism: its batch-norm statistics would leave the "
                              "clients un-noised (the server averages them); use model cnn or mlp, or no mechanism")
        for name in ("rounds", "clients", "clients_per_round", "local_epochs", "batch_size", "devices",
                     "train_loss_every", "synthetic_train", "synthetic_test"):
            _pos_int(name, getattr(self, name))
        if isinstance(self.eval_every, str) and self.eval_every.strip().lower() == "never":
            object.__setattr__(self, "eval_every", "never")  # one spelling in config.json, sweep.json, the identity
        elif not isinstance(self.eval_every, int) or isinstance(self.eval_every, bool) or not 0 < self.eval_every <= INT_MAX:
            raise ConfigError(f"eval_every must be a positive integer (at most {INT_MAX}) or never (no evaluation at "
                              f"all), got {_shown(self.eval_every)}")
        _nonneg_int("seed", self.seed, 2 ** 32 - 1)
        if self.local_steps is not None:
            _pos_int("local_steps", self.local_steps)
            if self.local_epochs != 1:
                raise ConfigError(f"local_steps {self.local_steps} and local_epochs {self.local_epochs} both set the "
                                  f"local work per round; give one of --local-steps and --local-epochs")
        if not isinstance(self.eval_average, bool):
            raise ConfigError(f"eval_average must be true or false (on/off), got {_shown(self.eval_average)}")
        _check_federation(self)
        if self.clients_per_round > self.clients:
            raise ConfigError(f"clients_per_round ({self.clients_per_round}) exceeds clients ({self.clients}); "
                              f"lower --clients-per-round or raise --clients")
        for name in ("lr", "alpha", "epsilon", "clip"):
            _pos_float(name, getattr(self, name))
        _check_accountable(self)
        if self.rho is not None:
            _pos_float("rho", self.rho)
        for name in ("mu", "q", "merge_tol"):
            _nonneg_float(name, getattr(self, name))
        for name in ("lr_decay", "server_lr_decay"):
            v = getattr(self, name)
            if v is not None:
                _pos_float(name, v)
                if v > 1:
                    raise ConfigError(f"{name} must be in (0, 1], got {v}")
        if self.server_lr is not None:
            _pos_float("server_lr", self.server_lr)
        if not (isinstance(self.delta, (int, float)) and 0 < self.delta < 1):
            raise ConfigError(f"delta must be in (0, 1), got {_shown(self.delta)}")
        try:
            parse_every(self.checkpoint_every)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if self.dataset == "synthetic" and self.data_dir is not None:
            raise ConfigError("--data-dir has no meaning for --dataset synthetic; drop one of them")
        from ..sim.algorithms import unwarned
        with warnings.catch_warnings(), unwarned():  # the ε ≥ 1 Gaussian-DP warning is given once, at run start
            warnings.simplefilter("ignore")
            try:
                self.check_privacy()
            except ValueError as e:
                raise ConfigError(str(e)) from None
        return self


def _check_federation(cfg: "Config") -> None:
    """availability and dropout (docs/federations.md): parseable; under a privacy mechanism only where its
    accounting is exact (docs/privacy.md, "Real federations"): any dropout, and availability other than size
    and labels (which draw who takes part from the clients' own data)."""
    from ..sim.federation import canonical, check_dropout, parse_availability
    try:
        av = parse_availability(cfg.availability)
        p = check_dropout(cfg.dropout)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    object.__setattr__(cfg, "availability", canonical(av))  # one spelling in config.json and the identity
    object.__setattr__(cfg, "dropout", p)
    if av[0] == "trace":  # its shape, rounds and values, before anything is written
        from ..sim.federation import load_trace
        try:
            load_trace(av[1], cfg.clients, cfg.rounds if isinstance(cfg.rounds, int) else None)
        except (ValueError, OSError) as e:
            raise ConfigError(str(e)) from None
    drop = _check_stragglers(cfg)
    if drop and (cfg.ldp != "none" or cfg.dp != "none"):
        raise ConfigError(f"stragglers with straggler_policy drop under a privacy mechanism: whether a client misses "
                          f"the deadline depends on its own data (its size sets its steps), a release outside the "
                          f"mechanism that no accounting here covers; use --straggler-policy partial (every sampled "
                          f"client uploads), or no --ldp/--dp")
    if drop and not _counts_arrived(cfg.algorithm):
        raise ConfigError(f"stragglers with straggler_policy drop and algorithm {cfg.algorithm!r}: its server does not "
                          f"weigh the clients by ServerIn.weights, so a dropped client would count as a zero update "
                          f"(not built yet); use --straggler-policy partial, or fedavg, fedprox, qfedavg or fedadmm")
    if av[0] in ("size", "labels") and (cfg.ldp != "none" or cfg.dp != "none"):
        raise ConfigError(f"availability {cfg.availability} with a privacy mechanism: it draws who takes part from each "
                          f"client's own data (its {'training size' if av[0] == 'size' else 'classes'}), a release "
                          f"outside the mechanism that no accounting here covers; use availability beta, cyclic, "
                          f"markov or trace, or no --ldp/--dp")
    if (av != ("always",) or p > 0) and not _counts_arrived(cfg.algorithm):
        raise ConfigError(f"availability {cfg.availability} / dropout {p:g} with algorithm {cfg.algorithm!r}: its server "
                          f"does not weigh the clients by ServerIn.weights, so a missing client would count as a zero "
                          f"update (not built yet); use fedavg, fedprox, qfedavg or fedadmm, or --availability always --dropout 0")


def _counts_arrived(algorithm: str) -> bool:
    """Its server counts only the arrived clients: it weighs by ``ServerIn.weights`` or reads ``ServerIn.arrived``
    (as the built-in declares); a user's algorithm sees both and is trusted to."""
    d = declared(algorithm)
    return algorithm not in BUILTINS or d.weighted_by_n or d.counts_arrived


def _check_stragglers(cfg: "Config") -> bool:
    """stragglers, deadline and straggler_policy (docs/federations.md): parseable, a deadline exactly when there
    are stragglers; recorded in one spelling. Returns whether late clients' uploads are dropped."""
    from ..sim.stragglers import canonical, check_deadline, check_policy, parse_stragglers
    try:
        st = parse_stragglers(cfg.stragglers)
        policy = check_policy(cfg.straggler_policy)
        if st != ("none",):
            if cfg.deadline is None:
                raise ValueError(f"stragglers {cfg.stragglers} needs a deadline: pass --deadline D, the local steps "
                                 f"a speed-1 client completes in a round (e.g. the steps of a full local epoch)")
            object.__setattr__(cfg, "deadline", check_deadline(cfg.deadline))
        elif cfg.deadline is not None or policy != "partial":
            given = "deadline" if cfg.deadline is not None else "straggler_policy"
            raise ValueError(f"{given} has no meaning without stragglers; drop it or pass --stragglers "
                             f"lognormal:SIGMA[,JITTER]")
    except ValueError as e:
        raise ConfigError(str(e)) from None
    object.__setattr__(cfg, "stragglers", canonical(st))
    return st != ("none",) and policy == "drop"


def _taking_derived_keys(init):
    """``Config.__init__`` that takes a run's ``config.json`` as it is (``fj.Config(**json.load(f))``): the
    :data:`DERIVED_KEYS` it carries for the reader are ignored, as :meth:`Config.from_dict` ignores them; an
    unknown keyword is refused in one line naming the options and the readers of a saved config."""
    names = frozenset(f.name for f in dataclasses.fields(Config))

    @functools.wraps(init)
    def __init__(self, *args, **kw):
        for k in DERIVED_KEYS:
            kw.pop(k, None)
        unknown = sorted(set(kw) - names)
        if unknown:
            raise ConfigError(f"unknown config option(s) {unknown}: Config takes the long flag names with '_' (e.g. "
                              f"clients_per_round); a run's saved config reads back with fj.Config.from_dict(d) or "
                              f"fj.load(run_dir).config")
        init(self, *args, **kw)
    return __init__


Config.__init__ = _taking_derived_keys(Config.__init__)


def _declaring(option: str) -> list[str]:
    """The built-in algorithms that declare ``option`` (the ones that read it)."""
    return [name for name, factory in BUILTINS.items() if option in factory.declares.options]


def declared_hparams(name: str, args: Optional[dict] = None) -> Optional[dict]:
    """``{name: default}`` of algorithm ``name``'s own hyper-parameters (``Algorithm.hparams``; its factory
    called with ``args``, ``Config.alg_args``): ``{}`` for a built-in; ``None`` when a user's factory cannot
    be built without the model's layers."""
    if name in ALGORITHMS:
        return {}
    alg = _user_algorithm(name, registry.version(), registry.arg_items(args))
    return None if alg is None else dict(alg.hparams)


def _check_hp(cfg: "Config") -> None:
    """``cfg.hp``: a dict of the algorithm's declared names to finite numbers; one line otherwise."""
    hp = cfg.hp
    if not isinstance(hp, dict):
        raise ConfigError(f"hp must be a dict of the algorithm's own hyper-parameter names to numbers, e.g. "
                          f"{{'beta1': 0.9}}, got {type(hp).__name__} {hp!r}")
    declared = cfg.declared_hp if hp else {}
    for k, v in hp.items():
        if declared is not None and k not in declared:
            has = (f"it declares {', '.join(declared)}" if declared else
                   "it declares none (Algorithm(hparams=...) declares them)")
            raise ConfigError(f"hp {k!r}: algorithm {cfg.algorithm!r} has no hyper-parameter {k!r}; {has}")
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not _finite(v):
            shown = _shown(v) if isinstance(v, int) and not _finite(v) else f"{type(v).__name__} {v!r}"
            raise ConfigError(f"hp {k!r} must be a finite number, got {shown}")


def _check_alg_args(cfg: "Config") -> None:
    """``cfg.alg_args``: a dict of names to JSON scalars (int, float, bool, string) that the user's algorithm
    factory takes (:func:`.registry.check_args`); a built-in refuses any (its options are flags)."""
    args = cfg.alg_args
    if not isinstance(args, dict):
        raise ConfigError(f"alg_args must be a dict of the algorithm factory's argument names to values, e.g. "
                          f"{{'K': 2}}, got {type(args).__name__} {args!r}")
    if not args:
        return
    for k, v in args.items():
        if not (isinstance(k, str) and k.isidentifier()):
            raise ConfigError(f"alg_args: {k!r} is not an argument name (a Python identifier, e.g. K)")
        if v is None or not isinstance(v, (bool, int, float, str)) or (isinstance(v, float) and not _finite(v)):
            raise ConfigError(f"alg_args {k!r} must be an int, a finite float, a bool or a string, got "
                              f"{type(v).__name__} {_shown(v)}")
    given = " ".join(f"--alg-arg {k}={json.dumps(v)}" for k, v in args.items())
    if cfg.algorithm in ALGORITHMS:
        raise ConfigError(f"{given}: {cfg.algorithm} is a built-in algorithm, whose options are flags (fedalf run "
                          f"--help); --alg-arg passes arguments to a user's algorithm factory (module:attribute)")
    try:
        registry.check_args(cfg.algorithm, registry.lookup("algorithm", cfg.algorithm), args)
    except registry.RegistryError as e:
        raise ConfigError(str(e)) from None


def parse_every(v: Any) -> tuple[str, float]:
    """``"50"`` or ``50`` → ``("rounds", 50)``; ``"90s"``, ``"5m"``, ``"1h"`` → ``("seconds", ...)``;
    ``"never"`` → ``("never", 0)`` (a throw-away run: no checkpoint at all, so it cannot be resumed)."""
    if isinstance(v, str) and v.strip().lower() == "never":
        return "never", 0
    if isinstance(v, int) and not isinstance(v, bool) and v > 0:
        return "rounds", v
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", str(v))
    if not m or float(m.group(1)) <= 0 or (not m.group(2) and "." in m.group(1)):
        raise ValueError(f"checkpoint_every must be a positive number of rounds (e.g. 50) or of seconds, "
                         f"minutes or hours (e.g. 300s, 5m, 1h), or never (no checkpoint at all), got {v!r}")
    if not m.group(2):
        return "rounds", int(m.group(1))
    return "seconds", float(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2)]


def _named(name: str, value: Any, builtin: tuple) -> None:
    """A built-in name, a registered one, or an importable ``module:attribute`` (:mod:`.registry`)."""
    if value in builtin:
        return
    if not isinstance(value, str):
        raise ConfigError(f"{name} must be a name (a string), got {type(value).__name__} {value!r}")
    try:
        registry.lookup(name, value, builtin)
    except registry.RegistryError as e:
        raise ConfigError(str(e)) from None


def _choice(name: str, value: Any, options: tuple) -> None:
    if value not in options:
        raise ConfigError(f"unknown {name} {value!r}; choose one of {', '.join(options)}")


INT_MAX = 2 ** 31 - 1  # counts are int32 on the device; a seed is a PRNG key's 32 bits (2**32 would be seed 0)


def _pos_int(name: str, v: Any) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or not 0 < v <= INT_MAX:
        raise ConfigError(f"{name} must be a positive integer (at most {INT_MAX}), got {_shown(v)}")


def _nonneg_int(name: str, v: Any, top: int = INT_MAX) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= top:
        raise ConfigError(f"{name} must be a non-negative integer (at most {top}), got {_shown(v)}")


def _finite(v: Any) -> bool:
    """``v`` is a number a float holds: an integer past ~1.8e308 (JSON allows one) is not finite here."""
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def _shown(v: Any) -> str:
    """``repr(v)``, an integer too long to read shortened to its size (``10**400`` has 401 digits)."""
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) > 10 ** 30:
        return f"an integer of about {int(abs(v).bit_length() * 0.30103) + 1} digits"
    return repr(v)


def _pos_float(name: str, v: Any) -> None:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not _finite(v) or v <= 0:
        raise ConfigError(f"{name} must be a positive finite number, got {_shown(v)}")


def _nonneg_float(name: str, v: Any) -> None:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not _finite(v) or v < 0:
        raise ConfigError(f"{name} must be a non-negative finite number, got {_shown(v)}")
