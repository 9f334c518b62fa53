"""What a plug-in algorithm declares beside its functions: its own options and their defaults, what the report
calls it, what its privacy guarantee rests on, what ``fedalf bench`` says its server computes.

The rest of the package asks these declarations (:class:`Declares`, found by :func:`fedalf_jax.algorithms.declared`)
and never an algorithm's name: configuration defaults, the options a run reads, the privacy record, the report's
labels and η, the bench's server description. A built-in is one factory with its declarations, in its own module
(:mod:`fedalf_jax.algorithms.fedavg`, ...); a user's algorithm declares its own hyper-parameters through
``Algorithm.hparams`` (docs/extending.md) and gets :data:`USER` here.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any, Callable, Mapping, NamedTuple, Optional

_SAME = object()


class Option(NamedTuple):
    """One option an algorithm reads: a field of ``fj.Config`` (``--mu``, ``--server-target``, ...), its
    ``default`` when the config leaves it ``None``, and ``private``, the default under a privacy mechanism (the
    guarantee-holding variant; unset: ``default``)."""

    default: Any
    private: Any = _SAME

    def resolve(self, given: Any, private: bool) -> Any:
        """``given`` unless ``None``; else the default for a private or non-private run."""
        if given is not None:
            return given
        return self.default if (not private or self.private is _SAME) else self.private


def option(cfg, name: str, default: Any = None) -> Any:
    """Option ``name`` of ``cfg``: a ``fj.Config`` or a saved config's dict (config.json, a report's run)."""
    if isinstance(cfg, Mapping):
        return cfg.get(name, default)
    return getattr(cfg, name, default)


# Every algorithm's options whose defaults an algorithm may declare otherwise (``Declares.options`` or
# ``Declares.defaults``), with the package's default for one that declares nothing: a user's algorithm gets these.
# A private run (a mechanism on) that leaves ldp_on and fair_norm unset gets the guarantee-holding variant that
# trained best in docs/lab/results.md §5: the noise on the update, the fair direction's length with the noise's
# share removed.
GENERIC = {"server_lr": Option(1.0), "server_lr_decay": Option(1.0), "rho": Option(1.0),
           "server_target": Option("increment"), "history": Option(False), "dual_from": Option("local"),
           "fair_norm": Option("raw", private="denoised"), "ldp_on": Option("weights", private="update")}


def _reads_nothing_more(cfg) -> dict:
    return {}


def _eta_is_lr(cfg: Mapping) -> str:
    return "lr"


def _upload_is_the_output(cfg) -> tuple[bool, str]:
    return True, "the upload is the mechanism's output w̃_i"


@dataclasses.dataclass(frozen=True)
class Declares:
    """An algorithm's declarations.

    * ``label``: its name in reports (``"FedLF"``; a private run's prefix is the report's).
    * ``options``: the ``fj.Config`` fields it reads beyond every algorithm's (``lr``, the privacy options, ...),
      each an :class:`Option` with its default (``--mu``, ``--rho``, ``--history``: the family flags). An option
      that some algorithm declares is not read by one that does not.
    * ``defaults``: its defaults of every algorithm's options (``server_lr``, ``server_lr_decay``) where they are
      not :data:`GENERIC`'s.
    * ``factory_options``: the declared options its factory takes as keyword arguments (static: another value
      is another program); the others are traced (``fj.HParams``).
    * ``needs_layers``: the factory's first argument is the model's per-layer ids (``layer_of``).
    * ``ignores(cfg) -> {option: condition}``: every-algorithm options that its run does not read, with the
      condition that makes it so (``""``: never).
    * ``eta(cfg: dict) -> "lr" | "server_lr"``: the option a report tunes as η (from a saved config).
    * ``central_sensitivity``: its server step's replace-one L2 sensitivity under ``dp="central"`` in units of
      ``η_g·clip`` (``"2/m"``, ``"2"``), or ``None``: no bound, central DP refused.
    * ``sends_loss`` / ``weighted_by_n``: its clients upload ``l_i = f_i(θ_t)`` / its server weighs them by
      ``n_i`` (what the privacy record lists beside the mechanism's output). ``counts_arrived``: its server, though
      not weighing by ``n_i``, counts only ``ServerIn.arrived``'s clients (so it runs under availability, dropout
      and dropped stragglers, as a ``weighted_by_n`` one does).
    * ``upload_privacy(cfg) -> (holds, text)``: under a local mechanism, whether its upload is a function of the
      mechanism's output and public values (``text`` says what the upload is) or not (``text`` says why).
    * ``privacy_refusal(cfg, option, value) -> str | None``: a mechanism it cannot run with at all.
    * ``server_work``: what its server step computes (``fedalf bench``); ``fair_server``: its server solves
      the per-layer fair QPs (``fedalf bench --depth`` counts their loop trips).
    * ``frontier_line``: the matplotlib line style its non-private cells are drawn with as a level on the
      report's privacy frontier (``"--"``: FedALF, ``":"``: FedAvg), in declaration order of the built-ins;
      ``None``: not drawn there.
    """

    label: str
    options: Mapping[str, Option] = dataclasses.field(default_factory=dict)
    defaults: Mapping[str, Option] = dataclasses.field(default_factory=dict)
    factory_options: tuple = ()
    needs_layers: bool = False
    ignores: Callable = _reads_nothing_more
    eta: Callable = _eta_is_lr
    central_sensitivity: Optional[str] = None
    sends_loss: bool = False
    weighted_by_n: bool = False
    counts_arrived: bool = False
    upload_privacy: Callable = _upload_is_the_output
    privacy_refusal: Optional[Callable] = None
    server_work: str = "the weighted mean of the uploads and the model update"
    fair_server: bool = False
    frontier_line: Optional[str] = None

    def __post_init__(self):
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))
        object.__setattr__(self, "defaults", MappingProxyType(dict(self.defaults)))
        unknown = [k for k in self.factory_options if k not in self.options]
        if unknown:
            raise ValueError(f"{self.label}: factory_options {unknown} are not among its options")

    def resolve(self, name: str, given: Any, private: bool) -> Any:
        """Option ``name`` resolved: ``given`` unless ``None``, else this algorithm's default (its own, or
        :data:`GENERIC`'s; ``None`` for an option without one)."""
        opt = self.options.get(name) or self.defaults.get(name) or GENERIC.get(name)
        return given if opt is None else opt.resolve(given, private)


USER = Declares(label="")  # a user's algorithm: nothing declared beyond what its Algorithm says
