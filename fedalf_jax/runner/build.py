"""From a :class:`Config` to what the compiled round needs: data on the device, the round's static
spec, the algorithm, the traced hyper-parameters and the initial state (host side, once per run).

A sweep builds the spec once per discrete combination and one set of index rows per run; the data
pool is loaded once per process (:func:`load_pool` is cached).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..runtime.notices import Notice
from ..problem.data import aligned_empty, joined, load_dataset
from ..problem.models import Model, make_model, split_outputs
from ..problem.partitions import make_partition, pad_indices
from ..algorithms import BUILTINS
from ..sim import algorithms as A
from ..sim.fairness import module_layers, tensor_layers
from ..sim.round import ClientData, RoundSpec, default_client_map
from ..plugins import registry
from ..config.config import ALGORITHMS, DATASETS, MODELS, Config, ConfigError


def hparams(cfg: Config) -> A.HParams:
    """The numeric hyper-parameters as float32 scalars (traced, so runs can be vmapped over them)."""
    f = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
    z = 0.0
    if cfg.dp == "central":  # calibrated on the host: (epsilon, delta) over the whole run, m of N per round
        from ..privacy.accounting import amplified, central_noise_multiplier
        z = central_noise_multiplier(cfg.epsilon, cfg.delta, cfg.clients_per_round, cfg.clients, cfg.rounds,
                                     amplified=amplified(cfg))
    own = A.OwnHParams({k: f(v) for k, v in cfg.resolved_hp.items()})  # the algorithm's own (none: no leaves)
    fed = {**({"dropout": f(cfg.dropout)} if cfg.dropout > 0 else {}),
           **({"deadline": f(cfg.deadline)} if cfg.stragglers != "none" else {})}  # traced: sweeps share one program
    return A.HParams(f(cfg.lr), f(cfg.lr_decay), f(cfg.resolved_server_lr), f(cfg.resolved_server_lr_decay),
                     f(cfg.mu), f(cfg.resolved_rho), f(cfg.q), f(cfg.epsilon), f(cfg.delta), f(cfg.clip), f(z), own,
                     fed or ())


def algorithm(cfg: Config, layer_of) -> A.Algorithm:
    """The algorithm's keyword factory called with the config's static choices (a registered or
    ``module:attribute`` algorithm: its factory, :mod:`.registry`), with ``cfg.local_optimizer`` as its local
    optimiser when one is given (an algorithm that chooses its own refuses it)."""
    alg = _algorithm(cfg, layer_of)
    if cfg.local_optimizer is None:
        return alg
    training = getattr(alg.client, "training", None)
    if alg.local_optimizer is not None or (training is not None and training.local_optimizer is not None):
        raise ConfigError(f"local_optimizer {cfg.local_optimizer!r}: algorithm {cfg.algorithm!r} chooses its own local "
                          f"optimiser (Algorithm.local_optimizer); drop --local-optimizer, or build the algorithm "
                          f"without one")
    return _with_optimizer(alg, cfg.local_optimizer)


def _with_optimizer(alg: A.Algorithm, name: str) -> A.Algorithm:
    if getattr(alg.client, "training", None) is not None:  # fj.local_training's: its optimiser, from ctx.lr
        from ..sim.default_client import program_of
        opt = A.local_optimizer(name)
        client = program_of(alg.client.training._replace(local_optimizer=lambda ctx: opt(ctx.lr)), alg.client.evaluate)
        make = lambda: dataclasses.replace(alg, client=client)  # noqa: E731
    else:
        make = lambda: dataclasses.replace(alg, local_optimizer=A.local_optimizer(name))  # noqa: E731
    if _REUSABLE.get(id(alg)) is not alg:  # a user's algorithm: afresh
        return make()
    return _built_once(("optimizer", id(alg), name), make)


def _algorithm(cfg: Config, layer_of) -> A.Algorithm:
    if cfg.algorithm not in ALGORITHMS:
        try:
            alg = registry.make_algorithm(cfg.algorithm, layer_of, cfg.alg_args)  # --alg-arg: its keywords
        except registry.RegistryError as e:
            raise ConfigError(str(e)) from None
        check_own_hparams(cfg, alg)
        return alg
    factory = BUILTINS[cfg.algorithm]
    decl = factory.declares  # the options its factory takes, resolved for this run (its declared defaults)
    kw = {name: cfg.resolved_history if name == "history" else cfg.resolved(name) for name in decl.factory_options}
    return _built_once((cfg.algorithm, frozen(layer_of), tuple(sorted(kw.items()))),
                       lambda: factory(layer_of, **kw) if decl.needs_layers else factory(**kw))


def _built_once(key, make) -> A.Algorithm:
    """The built-in algorithm of ``key``, made by ``make()`` the first time (and marked reusable)."""
    if key not in _BUILTINS:
        alg = make()
        _BUILTINS[key] = _REUSABLE[id(alg)] = alg
    return _BUILTINS[key]


# The built-in algorithms, built once per choice (a process makes a few): two runs of the same choices get the
# same functions, so their round specs are equal and the second reuses the first's compiled programs
# (loop._PROGRAMS). Only these are reused: a user's algorithm may read globals a notebook changes between
# two runs (what a trace bakes in), so its programs are traced afresh for every run.
_BUILTINS: dict = {}
_REUSABLE: dict = {}  # id -> the algorithm (kept alive, so an id is never another object's)


def reusable(spec) -> bool:
    """Whether ``spec``'s compiled programs may serve a later run of an equal spec: a built-in algorithm
    (built here) and a built-in model, whose traces read nothing a user can change between two runs."""
    return _REUSABLE.get(id(spec.algorithm)) is spec.algorithm and spec.model.name in MODELS


def frozen(tree):
    """A hashable stand-in for a pytree of hashable leaves (its structure and its leaves)."""
    leaves, structure = jax.tree_util.tree_flatten(tree)
    return structure, tuple(leaves)


def check_own_hparams(cfg: Config, alg: A.Algorithm) -> None:
    """The algorithm built for the model declares the hyper-parameters ``cfg`` resolved (``Config.resolved_hp``,
    read from the factory called with ``layer_of=None``); one line otherwise."""
    declared = alg.hparam_defaults
    unknown = [k for k in cfg.hp if k not in declared]
    if unknown:
        has = f"it declares {', '.join(declared)}" if declared else "it declares none"
        raise ConfigError(f"hp {unknown[0]!r}: algorithm {cfg.algorithm!r} has no hyper-parameter {unknown[0]!r}; {has}")
    if list(declared) != list(cfg.resolved_hp):
        raise ConfigError(f"algorithm {cfg.algorithm!r} declares the hyper-parameters {', '.join(declared)} when built "
                          f"for the model, but {', '.join(cfg.resolved_hp) or 'none'} when its factory is called with "
                          f"layer_of=None (or that call fails): config.json and the run's identity record the latter; "
                          f"let the factory declare the same hparams whatever layer_of")
    for k, v in declared.items():  # the defaults the round is built with are those the config records
        if k not in cfg.hp and float(v) != cfg.resolved_hp[k]:
            raise ConfigError(f"algorithm {cfg.algorithm!r} declares the default {k}={float(v):g} when built for the "
                              f"model but {k}={cfg.resolved_hp[k]:g} when the config was validated (its factory "
                              f"called with layer_of=None): config.json and the run's identity record the latter; "
                              f"validate the config again (cfg.validated()) after changing what the factory reads, "
                              f"and let it declare the same defaults whatever layer_of")


def layer_ids(params, layers: str):
    return module_layers(params) if layers == "module" else tensor_layers(params)


@dataclasses.dataclass(frozen=True)
class Pool:
    """The pooled examples (train then test) of a dataset, on the host."""

    x: np.ndarray
    y: np.ndarray          # int32
    y_train: np.ndarray
    y_test: np.ndarray
    num_classes: int
    source: str
    digest: str = ""  # the loaded arrays' hash (data.arrays_digest; registered: ArrayData.digest; synthetic: "")


@functools.lru_cache(maxsize=4)
def _pool(dataset, data_dir, data_source, synthetic_like, synthetic_train, synthetic_test, seed, env) -> Pool:
    ds = load_dataset(dataset, data_dir=data_dir, source=data_source, synthetic_like=synthetic_like,
                      synthetic_train=synthetic_train, synthetic_test=synthetic_test, seed=seed)
    x, y = _pooled(ds.x_train, ds.x_test), _pooled(ds.y_train, ds.y_test, np.int32)
    return Pool(x, y, ds.y_train, ds.y_test, ds.num_classes, ds.source, ds.digest)


def _pooled(train: np.ndarray, test: np.ndarray, dtype=None) -> np.ndarray:
    """``concatenate([train, test])`` (cast to ``dtype``) in 64-byte aligned memory, read-only. Aligned, the
    CPU backend's device arrays of it are the same memory (:func:`device_data`: no copy); read-only, since a
    pool is cached and shared by the runs of this process, nothing may write to it. The built-in data sets'
    images are loaded into such a block already (``data.float_images``): the pool is then that block, not a
    copy of it."""
    dtype = np.result_type(train, test) if dtype is None else np.dtype(dtype)  # as concatenate() promotes
    out = joined(train, test) if train.dtype == dtype else None
    if out is None:
        out = aligned_empty((len(train) + len(test), *train.shape[1:]), dtype)
        np.concatenate([train, test], out=out, casting="unsafe")  # the cast astype() made
    else:  # the loaded arrays are the pool's memory: read-only too
        train.flags.writeable = test.flags.writeable = False
    out.flags.writeable = False
    return out


def pool_key(cfg: Config) -> tuple:
    """What the data pool depends on (the seed only for generated data; a registered data set: its name and
    the registry's version, so that registering other arrays under the name is seen)."""
    if cfg.dataset not in DATASETS:
        return (cfg.dataset, registry.version())
    return (cfg.dataset, cfg.data_dir, cfg.data_source, cfg.synthetic_like, cfg.synthetic_train,
            cfg.synthetic_test, cfg.seed if cfg.dataset == "synthetic" else 0, os.environ.get("FEDALF_DATA_DIR"))


def load_pool(cfg: Config) -> Pool:
    key = pool_key(cfg)
    pool = _pool(*key) if cfg.dataset in DATASETS else _registered_pool(*key)
    _LOADED[key] = (pool.digest, pool.source)
    return pool


_LOADED: dict = {}  # pool_key -> (digest, source) of every data set loaded in this process (a few strings)


def loaded_data(cfg: Config) -> tuple[str, str]:
    """``(digest, source)`` of the data ``cfg`` loaded in this process (loaded now if it was not): the
    arrays' digest that a checkpoint records (:func:`.rundir.run_identity`) and where they came from."""
    key = pool_key(cfg)
    if key not in _LOADED:
        load_pool(cfg)
    return _LOADED[key]


@functools.lru_cache(maxsize=4)
def _registered_pool(name: str, version: int) -> Pool:
    d = registry.dataset(name)
    x, y = _pooled(d.x_train, d.x_test), _pooled(d.y_train, d.y_test, np.int32)
    return Pool(x, y, d.y_train, d.y_test, d.num_classes, f"registered:{name}", d.digest)


def given_partition(cfg: Config, pool: Pool):
    """A registered data set's own client lists as a partition of the pool (train rows, then test rows
    offset by the number of train examples)."""
    from ..problem.partitions import Partition
    tr, te = registry.dataset(cfg.dataset).clients
    n_train = len(pool.y_train)
    test = [np.asarray(t) + n_train for t in te]
    classes = [sorted(set(pool.y[r].tolist())) for r in tr]
    return Partition([np.asarray(t) for t in tr], test, classes)


@dataclasses.dataclass(frozen=True)
class Rows:
    """Every client's padded index rows into the pool, and the partition they came from."""

    train_idx: np.ndarray
    train_n: np.ndarray
    test_idx: np.ndarray
    test_n: np.ndarray
    partition: Any


def client_rows(cfg: Config, pool: Pool) -> Rows:
    like = cfg.synthetic_like if cfg.dataset == "synthetic" else cfg.dataset
    if cfg.partition == "given":
        part = given_partition(cfg, pool)
    else:
        part = make_partition(pool.y_train, pool.y_test, cfg.clients, cfg.partition, assign=cfg.assign,
                              alpha=cfg.alpha, seed=cfg.seed, dataset=like)
    tr_idx, tr_n = pad_indices(part.train_idx)
    te_idx, te_n = pad_indices(part.test_idx)
    if tr_n.min() < 1 or te_n.min() < 1:
        raise ConfigError(f"some client has no local train or test data (min train {tr_n.min()}, "
                          f"min test {te_n.min()}); use fewer --clients or another --partition")
    return Rows(tr_idx, tr_n, te_idx, te_n, part)


def check_devices(cfg: Config) -> None:
    found = jax.devices()
    if cfg.devices > len(found):
        raise ConfigError(f"--devices {cfg.devices}: JAX sees {len(found)} {found[0].platform} device(s); on a CPU "
                          f"set XLA_FLAGS=--xla_force_host_platform_device_count={cfg.devices} before starting")


def make_spec(cfg: Config, pool: Pool, *, client_devices: int = 1) -> RoundSpec:
    """The round's static part: model, algorithm, shapes, privacy choice, client mapping, and the
    number of devices the sampled clients are sharded over."""
    from ..sim.federation import parse_availability
    from ..sim.stragglers import parse_stragglers
    model = build_model(cfg, pool)
    params_shape = jax.eval_shape(model.init, jax.random.PRNGKey(0))["params"]
    layer_of = layer_ids(params_shape, cfg.layers)
    spec = RoundSpec(model=model, algorithm=algorithm(cfg, layer_of), num_clients=cfg.clients,
                     clients_per_round=cfg.clients_per_round, epochs=cfg.local_epochs, local_steps=cfg.local_steps,
                     eval_average=cfg.eval_average, rounds=cfg.rounds,
                     availability=parse_availability(cfg.availability), dropout=float(cfg.dropout),
                     stragglers=parse_stragglers(cfg.stragglers), deadline=float(cfg.deadline or 0.0),
                     straggler_policy=cfg.straggler_policy,
                     batch_size=cfg.batch_size, layer_of=layer_of, ldp=cfg.ldp, ldp_on=cfg.resolved_ldp_on, dp=cfg.dp,
                     neighbouring=cfg.neighbouring, client_devices=client_devices,
                     central_sensitivity=central_sensitivity(cfg),
                     state_dtype=jnp.dtype(cfg.state_dtype),
                     client_map=default_client_map() if cfg.client_map == "auto" else cfg.client_map)
    from ..privacy.guarantee import check_applied  # the mechanism the record states applies to what is uploaded
    check_applied(cfg, spec)
    check_features(cfg, spec)
    return spec


def returns_features(model: Model) -> bool:
    """Whether the model's ``__call__`` returns ``(logits, features)`` (or a dict with ``"features"``), not its
    logits alone: read off one traced pass (:func:`jax.eval_shape`, nothing compiled or run)."""
    variables = jax.eval_shape(model.init, jax.random.PRNGKey(0))
    x = jax.ShapeDtypeStruct((2, *model.input_shape), jnp.float32)
    feats = jax.eval_shape(lambda v, x: model.apply(v, x, features=True)[0][1], variables, x)
    return feats is not None


def check_features(cfg: Config, spec: RoundSpec) -> None:
    """An algorithm that declares ``needs_features`` (it reads ``batch.features`` or ``ctx.apply``'s features)
    refuses a model that returns its logits only, in one line, before anything is compiled or written."""
    if getattr(spec.algorithm, "needs_features", False) and not returns_features(spec.model):
        raise ConfigError(f"algorithm {spec.algorithm.name!r} needs the model's features, but model {cfg.model!r} "
                          f"returns its logits only: use a model whose __call__ returns (logits, features), e.g. "
                          f"--model examples.moon:model (docs/extending.md)")


def central_sensitivity(cfg: Config) -> float:
    """``dp="central"``: the server step's replace-one sensitivity in units of η_g·clip
    (guarantee.CENTRAL_SENSITIVITY); 0 else."""
    if cfg.dp != "central":
        return 0.0
    from ..privacy.guarantee import central_sensitivity_of  # a user's algorithm runs here only with a mean server: 2/m
    return 2.0 / cfg.clients_per_round if central_sensitivity_of(cfg.algorithm) == "2/m" else 2.0


def build_model(cfg: Config, pool: Pool) -> Model:
    """The config's model for the pool's example shape and classes (a registered or ``module:attribute``
    model: its flax module, checked on one example: one error naming a shape mismatch)."""
    if cfg.model in MODELS:
        return make_model(cfg.model, num_classes=pool.num_classes, input_shape=pool.x.shape[1:],
                          conv_impl=cfg.conv_impl, matmul_precision=cfg.matmul_precision)
    try:
        module = registry.make_module(cfg.model, pool.num_classes)
    except registry.RegistryError as e:
        raise ConfigError(str(e)) from None
    shape = tuple(pool.x.shape[1:])
    train = registry.takes_train(module)
    x = jax.ShapeDtypeStruct((2, *shape), jnp.float32)
    try:
        variables = jax.eval_shape(lambda k, x: module.init({"params": k, "dropout": k}, x,
                                                            **({"train": False} if train else {})),
                                   jax.random.PRNGKey(0), x)
        logits = jax.eval_shape(lambda v, x: split_outputs(module.apply(v, x, **({"train": False} if train else {})))[0],
                                variables, x)
    except Exception as e:  # noqa: BLE001 - a module that cannot take these inputs: say which shapes
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"model {cfg.model!r} cannot take the data set's examples of shape {shape} (a batch "
                          f"[B, {', '.join(map(str, shape))}]): {type(e).__name__}: {msg[:300]}") from None
    if not hasattr(logits, "shape") or tuple(logits.shape) != (2, pool.num_classes):
        got = getattr(logits, "shape", type(logits).__name__)
        raise ConfigError(f"model {cfg.model!r} maps a batch of 2 examples to {got}, but the data set has "
                          f"{pool.num_classes} classes: it must return logits of shape [B, {pool.num_classes}]")
    extra = sorted(set(variables) - {"params", "batch_stats"})
    if extra:
        raise ConfigError(f"model {cfg.model!r} has variable collections {extra}: the round keeps only 'params' "
                          f"(and 'batch_stats')")
    return Model(cfg.model, module, shape, pool.num_classes, "batch_stats" in variables, cfg.matmul_precision,
                 takes_train=train)


def warn_privacy(cfg: Config) -> None:
    """One-line warnings where a run's privacy guarantee is weaker than its options suggest."""
    cfg.check_privacy()  # warns (once) where a guarantee is only nominal
    if cfg.privacy and cfg.privacy["guarantee"] != "holds":
        warnings.warn(f"the privacy guarantee does not hold for this run: {cfg.privacy['why']} (docs/privacy.md)",
                      Notice, stacklevel=2)


def pad_rows(idx: np.ndarray, length: int) -> np.ndarray:
    """Index rows padded with zeros to ``length`` columns (padding is masked by the counts)."""
    return np.pad(idx, ((0, 0), (0, length - idx.shape[1])))


def device_data(pool: Pool, rows: Rows, *, train_len: int | None = None, test_len: int | None = None) -> ClientData:
    tr = rows.train_idx if train_len is None else pad_rows(rows.train_idx, train_len)
    te = rows.test_idx if test_len is None else pad_rows(rows.test_idx, test_len)
    # jax.device_put, not jnp.asarray: on the CPU backend it keeps the (read-only) host array as the device
    # array's memory instead of copying it (FMNIST's pool: 220 MB, ~54,000 page faults at every start)
    return ClientData(*(jax.device_put(np.asarray(a)) for a in (pool.x, pool.y, tr, rows.train_n, te, rows.test_n)))


@dataclasses.dataclass
class Experiment:
    """One run, built: its config, the round spec, hyper-parameters, device data and partition."""

    cfg: Config
    spec: RoundSpec
    hp: A.HParams
    data: ClientData
    partition: Any
    labels: np.ndarray
    source: str


def build(cfg: Config) -> Experiment:
    """Load data, partition it, build the model and the round for ``cfg`` (host side, once). With
    ``cfg.devices > 1`` the round shards its sampled clients over that many devices."""
    warn_privacy(cfg)
    check_devices(cfg)
    if cfg.clients_per_round % cfg.devices:
        raise ConfigError(f"--devices {cfg.devices} shards the {cfg.clients_per_round} clients of a round: use a "
                          f"--clients-per-round that is a multiple of it")
    pool = load_pool(cfg)
    rows = client_rows(cfg, pool)
    return Experiment(cfg, make_spec(cfg, pool, client_devices=cfg.devices), hparams(cfg), device_data(pool, rows),
                      rows.partition, pool.y, pool.source)
