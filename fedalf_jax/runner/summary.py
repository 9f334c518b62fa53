"""What a run's ``summary.json`` records beside its rows (:func:`fedalf_jax.runner.loop._finish` writes it): the
privacy the run spent, each client's participation, and the model's tensor sizes the accounting reads. Each is
computed at the run's end and a failure is recorded in its place, never losing the summary."""

from __future__ import annotations

import jax
import numpy as np

from ..config.config import Config
from ..privacy import accounting


def _param_sizes(variables, batched: bool = False) -> dict[str, int]:
    """The number of values of each tensor of the model's ``params`` (by its path, e.g.
    ``Dense_0/kernel``), without a batch's leading run axis."""
    params = variables.get("params", variables) if hasattr(variables, "get") else variables
    out = {}
    for path, x in jax.tree_util.tree_flatten_with_path(params)[0]:
        name = "/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)
        out[name] = int(np.prod(np.shape(x)[1:] if batched else np.shape(x)))
    return out


def _privacy_spent(cfg: Config, rounds_done: int, sizes=None) -> dict:
    """:func:`accounting.spent`; a failure of the accountant is recorded, never loses the summary."""
    try:
        return accounting.spent(cfg, rounds_done, sizes)
    except Exception as e:  # noqa: BLE001 - the summary must be written
        return {"error": f"the privacy accountant failed: {type(e).__name__}: {e}"}


def _participation(slot, rounds_done: int):
    """Each client's participation count over the run's rounds (``summary.json``'s ``participation``): the rounds
    whose upload arrived (all its sampled rounds when neither availability nor dropout masks them), replayed from
    the seed with the round's own sampler (:func:`fedalf_jax.sim.round.run_participation`); a failure of the
    replay is recorded, never loses the summary."""
    from ..sim.round import run_participation
    try:
        clients = (slot.rundir.clients() or {}).get("clients")
        return [int(c) for c in run_participation(slot.cfg, rounds_done, clients)]
    except Exception as e:  # noqa: BLE001 - the summary must be written
        return {"error": f"the participation replay failed: {type(e).__name__}: {e}"}
