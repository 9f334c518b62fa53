"""The options' possible values, and a user's algorithm built to read its declarations.

Read by :mod:`.config` (which re-exports every name: ``from fedalf_jax.experiment.config import
ALGORITHMS`` keeps working) and by :mod:`.guarantee`, which ``Config`` calls: both import them from here,
so neither module imports the other to read them.
"""

from __future__ import annotations

import functools
from typing import Any

from ..algorithms import BUILTINS
from ..sim.privacy import LDP_NAMES
from . import registry

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


def alg_key(cfg) -> tuple:
    """``_user_algorithm``'s key of ``cfg``'s factory arguments (``Config.alg_args``; none: ``()``)."""
    return registry.arg_items(getattr(cfg, "alg_args", None))
