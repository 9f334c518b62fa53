"""The columns of ``metrics.csv``: which there are, in which order, and what a row holds.

One row per evaluation: ``round``, fedalf's own evaluation columns (:data:`EVAL_KEYS`), the round's means
(``sim.round.METRIC_KEYS``: conflicts, QP statistics), then the algorithm's extra columns
(:func:`extra_columns`: a personal model's, its own ``Algorithm.metrics``, the averaged iterate's), then each
client's accuracy ``acc_0 .. acc_{N-1}`` (:func:`metric_columns`). The run directory writes the file with
these columns (:meth:`.rundir.RunDir.writers`), a resumed run and the report read it back against them
(:func:`columns_of_file` for a reader that does not build the algorithm), and the loop turns its rows into
the writers' scalars (:func:`scalars_of`). An algorithm's metric name that is one of fedalf's own columns is
refused in one line.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Iterable

from ..sim.round import METRIC_KEYS
from ..config.config import ConfigError
from .writers import PER_CLIENT_PREFIX

SUMMARY_KEYS = ("mean_acc", "angle", "angle_deg", "std_acc", "worst10_acc", "best10_acc")
EVAL_KEYS = SUMMARY_KEYS + ("test_loss", "train_loss", "seconds_per_round")


PERSONAL_KEYS = ("personal_acc", "personal_std_acc", "personal_angle_deg", "personal_worst10_acc",
                 "personal_test_loss")
"""The columns of an algorithm with a ``personal_model``: each client's own model on its test split (mean,
std and worst 10% accuracy, fairness angle in degrees, mean test loss), beside the global model's."""


AVERAGE_PREFIX = "avg_"
AVERAGE_KEYS = tuple(AVERAGE_PREFIX + k for k in (*SUMMARY_KEYS, "test_loss"))
"""The columns of a run with ``eval_average``: the averaged iterate θ̄_t = mean(θ_1..θ_t) on every
client's test split (θ_0 at round 0), as the last iterate's columns, then each client's accuracy ``avg_acc_i``."""


def average_columns(cfg) -> list[str]:
    """:data:`AVERAGE_KEYS` and ``avg_acc_0 .. avg_acc_{N−1}`` when ``cfg.eval_average``; none otherwise."""
    if cfg is None or not getattr(cfg, "eval_average", False):
        return []
    return [*AVERAGE_KEYS, *(f"{AVERAGE_PREFIX}{PER_CLIENT_PREFIX}{i}" for i in range(cfg.clients))]


def extra_columns(alg, cfg=None) -> list[str]:
    """The columns ``metrics.csv`` has beyond fedalf's own for algorithm ``alg``: :data:`PERSONAL_KEYS` when it
    has a ``personal_model``, then its own metrics (``Algorithm.metrics``), then the averaged iterate's
    (:func:`average_columns`, with ``cfg.eval_average``)."""
    avg = [*(FEDERATION_KEYS if cfg is not None and federated(cfg) else ()),
           *(STRAGGLER_KEYS if cfg is not None and getattr(cfg, "stragglers", "none") != "none" else ()),
           *average_columns(cfg)]  # then θ̄'s
    clash = [k for k in alg.metrics if k in PERSONAL_KEYS or k in avg]
    if clash:
        raise ConfigError(f"the algorithm's metric name {clash[0]!r} is one of fedalf's personalised-model or "
                          f"averaged-iterate (avg_*) columns; rename it in Algorithm(metrics=...)")
    return [*(PERSONAL_KEYS if alg.evaluates_own else ()), *alg.metrics, *avg]


FEDERATION_KEYS = ("available", "arrived")  # a federated round's counts (docs/federations.md)
STRAGGLER_KEYS = ("late", "work")  # clients past the deadline, the share of the local steps done


def federated(cfg) -> bool:
    """The run masks its rounds' slots (availability other than always, dropout > 0, or stragglers dropped)."""
    return (getattr(cfg, "availability", "always") != "always" or getattr(cfg, "dropout", 0.0) > 0
            or (getattr(cfg, "stragglers", "none") != "none" and getattr(cfg, "straggler_policy", "") == "drop"))


def metric_columns(num_clients: int, extra: Iterable[str] = ()) -> list[str]:
    """The columns of ``metrics.csv``; ``extra``: the algorithm's own metrics (``Algorithm.metrics``), after
    the round's and before the clients' accuracies."""
    extra = list(extra)
    own = ["round", *EVAL_KEYS, *METRIC_KEYS]
    for k in extra:
        if not isinstance(k, str) or not k or k in own or k.startswith(PER_CLIENT_PREFIX) or extra.count(k) > 1:
            raise ConfigError(f"the algorithm's metric name {k!r} is empty, repeated, or one of fedalf's own "
                              f"metrics.csv columns; rename it in Algorithm(metrics=...)")
    return own + extra + [f"{PER_CLIENT_PREFIX}{i}" for i in range(num_clients)]


def columns_of_file(path: Path, num_clients: int) -> list[str]:
    """The columns a ``metrics.csv`` written for ``num_clients`` clients must have, with the algorithm's own
    metrics as its header names them (between the round's columns and the accuracies): for a reader that
    does not build the algorithm (the report)."""
    own = metric_columns(num_clients)
    try:
        with open(path, newline="") as f:
            header = next(csv.reader(f), [])
    except (OSError, UnicodeDecodeError, csv.Error):
        return own
    k = len(own) - num_clients
    if header[:k] != own[:k]:
        return own
    extra = [c for c in header[k:] if not c.startswith(PER_CLIENT_PREFIX)]
    try:
        return metric_columns(num_clients, extra)
    except ConfigError:
        return own


def scalars_of(row: dict) -> dict:
    """A loop row (with an ``acc`` vector) as flat scalars for the metric writers."""
    out = {k: float(v) for k, v in row.items() if k not in ("acc", "round")}
    out.update({f"{PER_CLIENT_PREFIX}{i}": float(a) for i, a in enumerate(row["acc"])})
    return out
