"""Issue 47 items 5 and 12.

Item 5: ``fj.solve_simplex_qp`` with an empty box (Σlower > 1, Σupper < 1, or lower > upper at a coordinate)
traced inside ``jit`` returned weights off the simplex (Σλ = 1.2, 0.6, 0.9) with, for crossed bounds, a finite
residual; the shipped FedMGDA+ with ``--hp eps=-0.05`` stepped with them and ended "done". Now such a problem
gives λ = NaN (residual inf), so a run's divergence check stops it, while the feasible problems of the same
batch are solved as before; concrete bounds are one ConfigError line; FedMGDA+ refuses a concrete ε < 0.

Item 12: a ``local_loss`` whose function returns a vector or an integer, one that reads ``batch.features`` of a
model returning logits only, a ``Personal.local_loss`` returning a vector, and ``local_optimizer=lambda lr_t:
optax.sgd`` (the factory) ended in 66-91-line JAX tracebacks; each is now one ConfigError line naming the
function and the fix.
"""

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import fedalf_jax as fj
from fedalf_jax.sim.algorithms import OwnHParams, weighted_mean_server
from fedalf_jax.sim.qp import solve_simplex_qp_info

from test_contract import _cfg

ROOT = Path(__file__).resolve().parents[1]

# ---- item 5: the QP's empty boxes -------------------------------------------------------------------------

Q3 = np.eye(3, dtype=np.float32)  # min ½‖λ‖² on the simplex: the uniform point (1/3 each) when the box allows it
EMPTY = {
    "sum_lower_above_1": ([0.4, 0.4, 0.4], [1.0, 1.0, 1.0]),   # old: λ = lower, Σλ = 1.2
    "sum_upper_below_1": ([0.0, 0.0, 0.0], [0.2, 0.2, 0.2]),   # old: λ = upper, Σλ = 0.6
    "crossed": ([0.5, 0.0, 0.0], [0.4, 1.0, 1.0]),             # old: Σλ = 0.9 with a residual of 4e-8
}


@pytest.mark.parametrize("case", sorted(EMPTY))
def test_traced_empty_box_gives_nan_weights_and_infinite_residual(case):
    lo, hi = (jnp.asarray(v, jnp.float32) for v in EMPTY[case])
    lam, info = jax.jit(lambda q, a, b: solve_simplex_qp_info(q, lower=a, upper=b))(jnp.asarray(Q3), lo, hi)
    assert np.isnan(np.asarray(lam)).all(), lam
    assert np.isinf(float(info["residual"]))


def test_a_batch_keeps_its_feasible_problems_and_marks_only_the_empty_one():
    # three problems, the middle one crossed; the other two have the uniform point inside their box
    lo = jnp.asarray([[0.1, 0.1, 0.1], EMPTY["crossed"][0], [0.0, 0.0, 0.0]], jnp.float32)
    hi = jnp.asarray([[0.5, 0.5, 0.5], EMPTY["crossed"][1], [1.0, 1.0, 1.0]], jnp.float32)
    Q = jnp.broadcast_to(jnp.asarray(Q3), (3, 3, 3))
    lam, info = jax.jit(jax.vmap(lambda q, a, b: solve_simplex_qp_info(q, lower=a, upper=b)))(Q, lo, hi)
    lam = np.asarray(lam)
    np.testing.assert_allclose(lam[[0, 2]], np.full((2, 3), 1 / 3), atol=1e-6)
    assert np.isnan(lam[1]).all() and np.isfinite(lam[[0, 2]]).all()
    res = np.asarray(info["residual"])
    assert np.isinf(res[1]) and (res[[0, 2]] < 1e-5).all()


def test_lower_equal_upper_at_weights_summing_to_one_in_float32_is_feasible():
    # FedMGDA+'s ε = 0 (λ₀ ± 0) with 200 clients: Σλ₀ is 1 only up to float32 rounding; the answer is λ₀
    w = np.random.default_rng(0).dirichlet(np.ones(200)).astype(np.float32)
    w[0] += 3e-6  # Σw off by 3e-6 (a few roundings of 200 additions), beyond the old 1e-6 slack
    lam = jax.jit(lambda q, a: fj.solve_simplex_qp(q, lower=a, upper=a))(jnp.eye(200), jnp.asarray(w))
    np.testing.assert_allclose(np.asarray(lam), w, atol=1e-6)


@pytest.mark.parametrize("kw, needle", [
    (dict(lower=0.4), "lower the lower bounds"),
    (dict(upper=0.2), "raise the upper bounds"),
    (dict(lower=[0.5, 0.0, 0.0], upper=[0.4, 1.0, 1.0]), "lower exceeds upper"),
])
def test_concrete_empty_box_is_one_config_error_line(kw, needle):
    with pytest.raises(fj.ConfigError, match=needle) as e:
        fj.solve_simplex_qp(jnp.asarray(Q3), **kw)
    assert "\n" not in str(e.value) and str(e.value).startswith("solve_simplex_qp: ")


def _server_in(eps):
    deltas = {"b": jnp.asarray([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])}
    hp = fj.HParams(*([jnp.float32(0.0)] * 10), own=OwnHParams({"eps": eps}))
    return fj.ServerIn(theta={"b": jnp.zeros(3)}, deltas=deltas, weights=jnp.asarray([0.2, 0.3, 0.5]),
                       losses=jnp.zeros(3), lr_t=0.1, server_lr_t=1.0, hp=hp, t=0, sel=jnp.arange(3), sstate=())


def _fedmgda():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from examples import fedmgda
    return fedmgda


def test_fedmgda_refuses_a_concrete_negative_eps_in_one_line():
    with pytest.raises(fj.ConfigError, match=r"hp eps = -0\.05 must be ≥ 0") as e:
        _fedmgda().server(_server_in(jnp.float32(-0.05)))
    assert "\n" not in str(e.value)
    # ε = 0.1 on orthonormal updates: the minimum-norm point of the box [p − 0.1, p + 0.1] is (0.3, 0.3, 0.4)
    theta, _, info = _fedmgda().server(_server_in(jnp.float32(0.1)))
    np.testing.assert_allclose(np.asarray(theta["b"]), [-0.3, -0.3, -0.4], atol=1e-5)


def test_fedmgda_with_a_traced_negative_eps_diverges_instead_of_ending_done(tmp_path):
    _fedmgda()
    with pytest.raises(FloatingPointError, match=r"diverged by round 1.*own hyper-parameters \(--hp eps=-0\.05\)"):
        fj.run(_cfg("examples.fedmgda:fedmgda", rounds=2, hp={"eps": -0.05}, out=str(tmp_path / "r")), progress=False)
    res = fj.load(tmp_path / "r")
    assert res.status == "diverged"  # old: "done", every round stepping with weights off the simplex
    assert np.isnan(res.metrics["lambda_shift"].iloc[-1])


# ---- item 12: the contract's losses and optimiser ---------------------------------------------------------

def _alg(name, **kw):
    return fj.Algorithm(name, **{**dict(server=weighted_mean_server, upload=fj.algorithms.model_upload), **kw})


def _up_personal(theta, w, w_tilde, state, hp, lr_t, personal):
    return fj.algorithms.model_upload(theta, w, w_tilde, state, hp, lr_t)[0], personal


def _bad(kind):
    if kind == "loss_vector":
        return _alg("bad", local_loss=lambda th, st, hp: (lambda w, b: b.logits[:, 0]))
    if kind == "loss_int":
        return _alg("bad", local_loss=lambda th, st, hp: (lambda w, b: jnp.sum(b.y)))
    if kind == "loss_python_int":
        return _alg("bad", local_loss=lambda th, st, hp: (lambda w, b: 0))
    if kind == "features":  # bias3 returns its logits only: batch.features is None
        return _alg("bad", local_loss=lambda th, st, hp: (lambda w, b: fj.cross_entropy(b) + jnp.mean(b.features ** 2)))
    if kind == "personal_vector":
        return _alg("bad", upload=_up_personal, init_client_state=lambda p: p,
                    personal=fj.Personal(start=lambda th, st, hp: st,
                                         local_loss=lambda th, st, hp: (lambda v, b: b.apply(v)[0][:, 0])))
    if kind == "personal_logits":  # Personal.local_loss's batch has no logits: it must call batch.apply
        return _alg("bad", upload=_up_personal, init_client_state=lambda p: p,
                    personal=fj.Personal(start=lambda th, st, hp: st,
                                         local_loss=lambda th, st, hp: (lambda v, b: jnp.mean(b.logits))))
    if kind == "optimizer_factory":
        return _alg("bad", local_optimizer=lambda lr_t: optax.sgd)
    if kind == "optimizer_object":
        return _alg("bad", local_optimizer=lambda lr_t: 0.1)
    raise AssertionError(kind)


@pytest.mark.parametrize("kind, needles", [
    ("loss_vector", ["local_loss's function returned float32[2]", "expected a float scalar loss", "jnp.mean"]),
    ("loss_int", ["local_loss's function returned int32[]", "return a float"]),
    ("loss_python_int", ["local_loss's function returned int32[]", "return a float"]),
    ("features", ["local_loss's function failed (TypeError", "batch.features is None: the model returns its "
                  "logits only", "returns (logits, features)"]),
    ("personal_vector", ["personal.local_loss's function returned float32[2]", "expected a float scalar loss"]),
    ("personal_logits", ["personal.local_loss's function failed", "batch.logits is None for Personal.local_loss",
                         "batch.apply(params)"]),
    ("optimizer_factory", ["local_optimizer returned the function sgd, not an optax.GradientTransformation",
                           "lambda lr_t: optax.sgd(lr_t)"]),
    ("optimizer_object", ["local_optimizer returned float", "expected an optax.GradientTransformation"]),
])
def test_a_loss_or_optimiser_that_breaks_the_contract_is_one_line(kind, needles):
    fj.register_algorithm("bad", lambda: _bad(kind))
    with pytest.raises(fj.ConfigError) as e:
        fj.run(_cfg("bad", rounds=1), progress=False)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("algorithm 'bad': "), msg
    for n in needles:
        assert n in msg, msg


def test_the_cli_prints_the_loss_mistake_as_one_line(tmp_path, capsys):
    from helpers import cli
    fj.register_algorithm("bad", lambda: _bad("loss_vector"))
    _cfg("bad")  # registers the tiny data set and model
    code, err = cli(capsys, ["run", "--algorithm", "bad", "--dataset", "one_label_each", "--partition", "given",
                             "--model", "bias3", "--clients", "3", "--clients-per-round", "3", "--rounds", "1",
                             "--batch-size", "2", "--no-progress", "--out", str(tmp_path / "r")])
    from helpers import without_deprecation
    lines = [ln for ln in without_deprecation(err).strip().splitlines()
             if not ln.startswith("fedalf: warning: code digest")]
    assert code == 2 and "Traceback" not in err and len(lines) == 1, err
    assert "local_loss's function returned float32[2]" in lines[0], err


def test_a_scalar_float_loss_and_an_optax_transformation_still_run():
    # the checks add nothing to a correct algorithm: a python-float loss term and optax.sgd(lr_t) run as before
    fj.register_algorithm("good", lambda: _alg("good", local_loss=lambda th, st, hp: (lambda w, b: fj.cross_entropy(b) + 0.0),
                                               local_optimizer=lambda lr_t: optax.sgd(lr_t)))
    res = fj.run(_cfg("good", rounds=1), progress=False)
    assert res.status == "done" and np.isfinite(res.metrics["test_loss"]).all()
