"""Issue 47 items 10 and 11.

10. A private run of a user's algorithm whose auxiliary upload is not covered by the mechanism
    (``public_aux=False``: here its aux is the raw local model ``w``) is headlined "does not hold" in
    ``Config.privacy``, ``summary.json`` and the report, and its aux stays listed under ``not_covered``;
    the same algorithm declaring ``public_aux=True`` holds. A record written before the fix ("holds" beside
    the aux in ``not_covered``) is read by the report as "does not hold".
11. ``with jax.default_matmul_precision("highest"): fj.run(cfg)`` traces the run's programs with that
    precision although they are traced on a worker thread: the lowered round carries exactly as many
    HIGHEST dots as under ``jax.config.update`` (and more than at JAX's default).

Expectations are literal strings and counts, not read from the code under test.
"""

import json
import re

import jax
import jax.numpy as jnp
import pytest

import fedalf_jax as fj
from fedalf_jax.experiment import loop
from fedalf_jax.experiment.rundir import RunDir
from fedalf_jax.notices import Notice
from fedalf_jax.reporting.runs import run_guarantee

SMALL = dict(dataset="synthetic", synthetic_train=200, synthetic_test=80, model="mlp", clients=2,
             clients_per_round=2, partition="iid", rounds=1, eval_every=1)


def _server(s):
    mean = jax.tree_util.tree_map(lambda d: jnp.mean(d, axis=0), s.deltas)
    return jax.tree_util.tree_map(lambda t, d: t - d, s.theta, mean), s.sstate, {}


def _upload_raw_model(theta, w, w_tilde, state, hp, lr_t):
    """Δ_i = θ − w̃_i, and the un-noised local model w as the auxiliary upload."""
    return jax.tree_util.tree_map(lambda t, x: t - x, theta, w_tilde), state, {"w": w}


def _leaky(public_aux):
    return lambda: fj.Algorithm("leaky", server=_server, upload=_upload_raw_model, private_upload=True,
                                public_aux=public_aux)


AUX = "the auxiliary upload ServerIn.aux (the algorithm declares public_aux=False)"


# ---- item 10: an un-noised auxiliary upload is never headlined "holds" -------------------------------------

@pytest.mark.parametrize("mech", [dict(ldp="adaptive", epsilon=1.0), dict(ldp="ldp_fl", epsilon=1.0),
                                  dict(dp="gaussian", epsilon=1.0, delta=1e-5, clip=1.0)])
def test_a_non_public_aux_voids_the_headline(mech):
    fj.register_algorithm("leaky-aux", _leaky(False))
    fj.register_algorithm("public-aux", _leaky(True))
    p = fj.Config(algorithm="leaky-aux", **mech, **SMALL).privacy
    assert p["guarantee"] == "does not hold", p
    assert "auxiliary upload ServerIn.aux" in p["why"] and "public_aux=False" in p["why"]
    assert AUX in p["not_covered"]
    q = fj.Config(algorithm="public-aux", **mech, **SMALL).privacy
    assert q["guarantee"] == "holds" and not any("aux" in x for x in q["not_covered"])


def test_summary_and_report_say_does_not_hold(tmp_path):
    fj.register_algorithm("leaky-run", _leaky(False))
    out = tmp_path / "run"
    with pytest.warns(Notice, match="the privacy guarantee does not hold for this run: .*auxiliary upload"):
        res = fj.run(fj.Config(algorithm="leaky-run", ldp="adaptive", epsilon=1.0, out=str(out), **SMALL),
                     progress=False)
    assert res.status == "done"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["privacy"]["guarantee"] == "does not hold"
    assert json.loads((out / "config.json").read_text())["privacy"]["guarantee"] == "does not hold"
    assert run_guarantee(RunDir(out))["guarantee"] == "does not hold"
    # a record written before the fix: "holds" with the aux under not_covered; the report reads "does not hold"
    for name in ("summary.json", "config.json"):
        d = json.loads((out / name).read_text())
        d["privacy"]["guarantee"] = "holds"
        (out / name).write_text(json.dumps(d))
    g = run_guarantee(RunDir(out))
    assert g["guarantee"] == "does not hold" and "auxiliary upload" in g["why"], g
