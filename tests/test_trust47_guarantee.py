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


# ---- item 11: the caller's matmul precision reaches the worker thread that traces ---------------------------

def _precisions(text: str) -> list[str]:
    """The precision of every dot_general in StableHLO text (one per op)."""
    out = []
    for line in text.splitlines():
        if "stablehlo.dot_general" in line:
            out += re.findall(r"precision = \[(\w+), \w+\]", line)
    return out


@pytest.fixture
def lowered(monkeypatch):
    """The StableHLO text of every program compiled ahead of time since the fixture started."""
    seen = []
    real = jax.stages.Lowered.compile

    def compile(self, *args, **kw):
        seen.append(self.as_text())
        return real(self, *args, **kw)

    monkeypatch.setattr(jax.stages.Lowered, "compile", compile)
    return seen


def _highest_per_program(tmp_path, name, lowered, how):
    """HIGHEST dots of each program a tiny FedAvg run compiles, with the precision set ``how``."""
    loop._PROGRAMS.clear()  # the process's program cache would hand back another precision's program
    lowered.clear()
    was = jax.config.jax_default_matmul_precision
    cfg = fj.Config(algorithm="fedavg", out=str(tmp_path / name), **SMALL)
    try:
        jax.config.update("jax_default_matmul_precision", None)  # conftest sets "highest" globally
        if how == "context":
            with jax.default_matmul_precision("highest"):
                fj.run(cfg, progress=False)
        elif how == "global":
            jax.config.update("jax_default_matmul_precision", "highest")
            fj.run(cfg, progress=False)
        else:
            fj.run(cfg, progress=False)
    finally:
        jax.config.update("jax_default_matmul_precision", was)
    assert lowered, "no program was compiled"
    return sorted(_precisions(t).count("HIGHEST") for t in lowered)


def test_a_callers_precision_context_reaches_the_traced_run(tmp_path, lowered):
    default = _highest_per_program(tmp_path, "d", lowered, "none")
    context = _highest_per_program(tmp_path, "c", lowered, "context")
    update = _highest_per_program(tmp_path, "u", lowered, "global")
    assert context == update, (context, update)
    assert sum(context) > sum(default), (context, default)


def test_the_worker_thread_traces_with_the_callers_precision():
    """The loop's worker (``loop._interruptible``) traces under the caller's context, and a context entered
    there does not outlive the call."""
    f = jax.jit(lambda a, b: a @ b)
    x = jnp.ones((4, 4))
    was = jax.config.jax_default_matmul_precision
    try:
        jax.config.update("jax_default_matmul_precision", None)
        with jax.default_matmul_precision("highest"):
            inside = _precisions(loop._interruptible(lambda: f.lower(x, x).as_text()))
        after = _precisions(loop._interruptible(lambda: f.lower(x, x).as_text()))
    finally:
        jax.config.update("jax_default_matmul_precision", was)
    assert inside == ["HIGHEST"] and after == ["DEFAULT"], (inside, after)
