"""fedalf_jax: a JAX simulator of fair, private federated learning (FedALF, LDP-FedALF and baselines).

The API (``import fedalf_jax as fj``; README "Python API", docs/extending.md):

* ``fj.Config``: every option of a run (the CLI's flags, with ``_`` for ``-``).
* ``fj.run(cfg)`` → :class:`Result` (``.metrics`` DataFrame, ``.model``, ``.run_dir``); ``fj.sweep(cfg,
  out=..., grid=..., seeds=...)`` → :class:`SweepResult`; ``fj.load(run_dir)``; ``fj.report(paths, out)``.
* Your own algorithm: ``fj.Algorithm`` (small pure functions; ``fj.ServerIn``, ``fj.HParams`` are what
  they receive) registered with ``fj.register_algorithm(name, factory)`` or named ``"module:attribute"``;
  your own model (``fj.register_model``, a flax module factory) and data (``fj.register_dataset``);
  ``fj.Personal`` (a second local model, Ditto's, APFL's), ``fj.local_optimizer`` (momentum, Adam local steps),
  ``fj.Batch`` (the one minibatch type: a program's step, a data pass, a ``local_loss``) and ``fj.cross_entropy``
  (the default loss);
  ``fj.ClientProgram(init, step, final)`` (a client's whole procedure, ``Algorithm(client=...)``; ``fj.local_training(...)``
  makes the local-training one from its pieces, functions of ``ctx``), with
  ``fj.ClientContext`` and ``fj.DataPass`` (what its functions see) and ``fj.Reveal``
  (what its ``final`` returns to reveal a model through the privacy mechanism).
* ``fj.client_splits(cfg)``: each client's train and test indices into the pooled examples.
* The numerical core: ``fj.fair_direction``, ``fj.solve_simplex_qp``, ``fj.fairness_angle``, the privacy
  mechanisms ``fj.adaptive_ldp``, ``fj.ldp_fl``, ``fj.gaussian_dp``.
"""

from .runtime.interrupt import INTERRUPT as _INTERRUPT, started_as_command as _started_as_command

if _started_as_command():  # the fedalf command: Ctrl-C and SIGTERM are kept from before JAX loads (interrupt.py)
    from .runtime.allocator import restart_with_settings as _restart_with_settings
    _restart_with_settings()  # an allocator that keeps what XLA frees (allocator.py): once, before anything loads
    _INTERRUPT.install_for_command()
    from .runtime.interrupt import watch_parent as _watch_parent
    _watch_parent()  # a `sweep --processes` child: stopped (its round saved) when its parent ends (interrupt.py)

from .api import Result, SweepResult, client_splits, load, report, run, sweep
from .config.config import Config, ConfigError
from .runner.metrics import fairness_angle, summarize
from .plugins.registry import ArrayData, register_algorithm, register_dataset, register_model
from . import algorithms  # the base types, the pieces and the built-in plug-ins
from .sim.algorithms import (Algorithm, Batch, ClientFacts, HParams, Personal, ServerIn, cross_entropy,
                             local_optimizer)
from .sim.program import ClientBatch, ClientContext, ClientProgram, DataPass, Reveal  # noqa: F401 (ClientBatch: fj.Batch's 0.1 name)
from .sim.default_client import local_training
from .sim.fairness import fair_direction, fair_weights, module_layers, tensor_layers
from .privacy import adaptive_ldp, gaussian_dp, ldp_fl
from .sim.qp import solve_simplex_qp

__version__ = "0.1.0"

__all__ = [
    "Config", "ConfigError", "run", "sweep", "load", "report", "Result", "SweepResult",
    "Algorithm", "ServerIn", "HParams", "ClientFacts", "Personal", "Batch", "cross_entropy", "local_optimizer", "client_splits", "algorithms", "register_algorithm", "register_model", "register_dataset",
    "ClientProgram", "ClientContext", "DataPass", "Reveal", "local_training",
    "ArrayData", "fair_direction", "fair_weights", "module_layers", "tensor_layers", "solve_simplex_qp",
    "fairness_angle", "summarize", "adaptive_ldp", "ldp_fl", "gaussian_dp",
]
