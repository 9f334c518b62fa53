"""The options' possible values, and a user's algorithm built to read its declarations.

Read by :mod:`.config` (which re-exports every name: ``from fedalf_jax.experiment.config import
ALGORITHMS`` keeps working) and by :mod:`.guarantee`, which ``Config`` calls: both import them from here,
so neither module imports the other to read them.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple, Optional

from ..algorithms import BUILTINS, declared
from ..privacy.mechanisms import LDP_NAMES
from ..plugins import registry

ALGORITHMS = tuple(BUILTINS)
DATASETS = ("fmnist", "cifar10", "cifar100", "synthetic")
PARTITIONS = ("pat1", "pat2", "dirichlet", "iid", "given")  # given: a registered data set's own client lists
ASSIGNS = ("fedlf", "shards")
MODELS = ("cnn", "cnn_bn", "mlp")
LDPS = LDP_NAMES
DPS = ("none", "gaussian", "central")  # central: user-level DP-FedAvg (clip each upload, the server adds noise)
CLIENT_GRADS = ("full", "local")
LDP_ON = ("weights", "update")  # what a local mechanism perturbs: w (the paper's reading) or w − θ
LAYERS = ("module", "tensor")
QP_METHODS = ("auto", "active", "osqp", "pgd")
CLIENT_MAPS = ("auto", "vmap", "map")
LOGS = ("csv", "tensorboard")
STATE_DTYPES = ("float32", "bfloat16")
# float32 matmuls/convolutions of the model (clients' training and evaluation): default (TF32 on recent
# NVIDIA GPUs), high, highest (true float32). CPU computes all three in float32.
MATMUL_PRECISIONS = ("default", "high", "highest")
# The numeric hyper-parameters: traced in the compiled program, so a sweep vmaps over them.
CONTINUOUS = ("lr", "lr_decay", "server_lr", "server_lr_decay", "mu", "rho", "q", "epsilon", "delta", "clip")


@functools.lru_cache(maxsize=32)
def _user_algorithm(name: str, version: int, args: tuple = ()) -> Any:
    """A user's algorithm built without the model's layers (once per registry ``version`` and factory
    arguments ``args``, :func:`.registry.arg_items` of ``Config.alg_args``), or ``None`` when its factory
    needs them: ``build()`` builds and checks it then."""
    try:
        return registry.make_algorithm(name, None, {k: v for k, _, v in args})
    except Exception:  # noqa: BLE001 - a factory that needs the model's layers
        return None


class Plugin(NamedTuple):
    """A configuration's algorithm, resolved once when the config is validated (``Config.plugin``), and what
    every later reader of it receives instead of looking it up by name again: its ``declares``
    (:func:`fedalf_jax.algorithms.declared`) and, for a user's algorithm, ``algorithm``, the
    :class:`~fedalf_jax.Algorithm` its factory builds without the model's layers (with the config's
    ``alg_args``), or ``None`` when it needs them (``build()`` builds and checks it then). A built-in's
    ``algorithm`` is ``None``: what the package knows of it is its declarations."""

    name: str
    builtin: bool
    declares: Any
    algorithm: Any = None


def resolve_plugin(name: str, alg_args: Optional[dict] = None) -> Plugin:
    """:class:`Plugin` of algorithm ``name`` (its factory called afresh: it may read globals a notebook changed
    since the last run)."""
    if name in ALGORITHMS:
        return Plugin(name, True, declared(name))
    try:
        alg = registry.make_algorithm(name, None, dict(alg_args or {}))
    except Exception:  # noqa: BLE001 - a factory that needs the model's layers
        alg = None
    return Plugin(name, False, declared(name), alg)


def plugin_of(cfg) -> Plugin:
    """``cfg.plugin`` (a validated ``Config``'s), or the plugin resolved now for anything else with the
    privacy options (:class:`.guarantee.PrivacyOptions`)."""
    found = getattr(cfg, "plugin", None)
    return found if isinstance(found, Plugin) else resolve_plugin(cfg.algorithm, getattr(cfg, "alg_args", None))


def alg_key(cfg) -> tuple:
    """``_user_algorithm``'s key of ``cfg``'s factory arguments (``Config.alg_args``; none: ``()``)."""
    return registry.arg_items(getattr(cfg, "alg_args", None))
