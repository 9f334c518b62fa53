"""The algorithms (``fj.algorithms``): the types a plug-in is made of and the pieces it is built from
(:mod:`fedalf_jax.sim.algorithms`: ``Algorithm``, ``ServerIn``, ``HParams``, the servers, uploads and
penalties), what a plug-in declares beside its functions (:mod:`.declare`), and the built-ins, each an
ordinary plug-in in its own module, made of those same public pieces: :mod:`.fedavg`, :mod:`.fedprox`,
:mod:`.qfedavg`, :mod:`.fedadmm`, :mod:`.fedlf`, :mod:`.fedalf`.

A built-in is a keyword factory returning an :class:`Algorithm`, with its declarations as the factory's
``declares`` attribute (:class:`Declares`: its options and defaults, its report label, what its privacy
guarantee rests on, what its server computes). :data:`BUILTINS` lists them; :func:`declared` is what the rest
of the package asks about an algorithm, never its name.
"""

from ..sim.algorithms import (CLIENT_COLLECTIONS, DUAL_FROM, FAIR_NORMS, LOCAL_OPTIMIZERS, RESERVED_HPARAMS,
                              SERVER_INFO, SERVER_KEY, SERVER_TARGETS, Algorithm, Batch, ClientFacts, ClientProgram,
                              HParams, OwnHParams, Personal, ServerIn, admm_penalty, cross_entropy, history_rows,
                              local_optimizer, make_admm_upload, make_fair_server, mean_server, model_upload,
                              prox_penalty, qfedavg_server, scaled_model_upload, weighted_mean_server,
                              zeros_like_params)
from ..sim.default_client import local_training
from .declare import GENERIC, USER, Declares, Option
from .fedadmm import fedadmm
from .fedalf import fedalf
from .fedavg import fedavg
from .fedlf import fedlf
from .fedprox import fedprox
from .qfedavg import qfedavg

# the built-in algorithms, name -> factory (the list of built-ins: `fedalf run --algorithm NAME`)
BUILTINS = {f.__name__: f for f in (fedavg, fedprox, qfedavg, fedadmm, fedlf, fedalf)}
FACTORIES = BUILTINS  # its name before the built-ins were plug-ins


def declared(name: str) -> Declares:
    """The declarations of algorithm ``name``: a built-in's own, :data:`USER` for a user's algorithm."""
    factory = BUILTINS.get(name)
    return USER if factory is None else factory.declares


__all__ = [
    "BUILTINS", "FACTORIES", "declared", "Declares", "Option", "GENERIC", "USER",
    "fedavg", "fedprox", "qfedavg", "fedadmm", "fedlf", "fedalf",
    "local_training", "Algorithm", "Batch", "ClientFacts", "ClientProgram", "HParams", "OwnHParams", "Personal", "ServerIn",
    "CLIENT_COLLECTIONS", "DUAL_FROM", "FAIR_NORMS", "LOCAL_OPTIMIZERS", "RESERVED_HPARAMS", "SERVER_INFO",
    "SERVER_KEY", "SERVER_TARGETS", "admm_penalty", "cross_entropy", "history_rows", "local_optimizer",
    "make_admm_upload", "make_fair_server", "mean_server", "model_upload", "prox_penalty", "qfedavg_server",
    "scaled_model_upload", "weighted_mean_server", "zeros_like_params",
]
