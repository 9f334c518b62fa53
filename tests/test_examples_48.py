"""Issue 48 item 8's FedSAM, FedDecorr and Per-FedAvg (examples/fedsam.py, feddecorr.py, perfedavg.py), each
against two rounds computed by hand in float64 on the tiny problem of tests/test_examples_client.py (three
clients of 4, 3 and 5 examples, a batch of 5: every local step is one full batch, so ``local_epochs`` is the
number of steps), and each from the ``fedalf run`` line of its docstring."""

import importlib
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest

import fedalf_jax as fj
from fedalf_jax.cli import main
from helpers import cli, one_line_error
from test_examples_client import (COUNTS, _backward, _ce_grad, _cfg, _close, _close_tree, _flax, _forward, _loss_at,
                                  _rows, _softmax, _sub, _theta0)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _fedavg(theta, ws, glr=0.8, weights=None):
    pw = np.asarray(COUNTS) / sum(COUNTS) if weights is None else np.asarray(weights)
    return {k: theta[k] - glr * sum(pw[i] * (theta[k] - ws[i][k]) for i in range(3)) for k in theta}


def _far(a, b, tol=1e-4):
    return max(np.abs(a[k] - b[k]).max() for k in a) > tol


# ---- FedSAM -------------------------------------------------------------------------------------------------

def _fedsam_by_hand(rho, rounds=2, lr=0.3, steps=2):
    theta = _theta0()
    for _ in range(rounds):
        ws = []
        for i in range(3):
            x, y = _rows(i)
            w = dict(theta)
            for _ in range(steps):
                _, g = _ce_grad(w, x, y)
                norm = np.sqrt(sum(np.sum(v ** 2) for v in g.values()))
                _, g_sam = _ce_grad({k: w[k] + rho * g[k] / (norm + 1e-12) for k in w}, x, y)
                w = _sub(w, g_sam, lr)
            ws.append(w)
        theta = _fedavg(theta, ws)
    return theta


@pytest.mark.parametrize("client_map", ["map"])
def test_fedsam_matches_two_rounds_by_hand(client_map):
    """Each step descends with the gradient at w + ρ g/‖g‖ (the norm over every parameter); ρ = 0.5."""
    res = fj.run(_cfg("examples.fedsam:fedsam", hp={"sam_rho": 0.5}, client_map=client_map), progress=False)
    theta = _fedsam_by_hand(0.5)
    _close_tree(res.model["params"], _flax(theta))
    assert _far(theta, _fedsam_by_hand(0.0))  # ρ = 0 is FedAvg, which it is not


# ---- FedDecorr ------------------------------------------------------------------------------------------------

def _decorr_and_grad(z, eps=1e-8):
    """‖K‖²_F / d² of the rows of z (all real) and its gradient in z."""
    n, d = z.shape
    c = z - z.mean(0)
    s = np.sqrt((c ** 2).mean(0) + eps)
    zh = c / s
    k = zh.T @ zh / n
    dzh = 4 * zh @ k / (n * d ** 2)
    dc = dzh / s - c * (dzh * c).sum(0) / (n * s ** 3)
    return float(np.sum(k ** 2) / d ** 2), dc - dc.mean(0)


def test_the_decorrelation_gradient_by_hand_is_its_finite_difference():
    """The hand gradient the test below relies on, against central differences in float64."""
    z = np.random.default_rng(3).normal(size=(5, 4))
    _, g = _decorr_and_grad(z)
    num = np.zeros_like(z)
    for idx in np.ndindex(*z.shape):
        e = np.zeros_like(z)
        e[idx] = 1e-6
        num[idx] = (_decorr_and_grad(z + e)[0] - _decorr_and_grad(z - e)[0]) / 2e-6
    np.testing.assert_allclose(g, num, atol=1e-7)


def _feddecorr_by_hand(beta, rounds=2, lr=0.3, steps=2):
    theta = _theta0()
    for _ in range(rounds):
        ws = []
        for i in range(3):
            x, y = _rows(i)
            w = dict(theta)
            for _ in range(steps):
                logits, h, cache = _forward(w, x)
                dh = beta * _decorr_and_grad(h)[1]
                w = _sub(w, _backward(w, cache, (_softmax(logits) - np.eye(3)[y]) / len(y), dh), lr)
            ws.append(w)
        theta = _fedavg(theta, ws)
    return theta


def test_feddecorr_matches_two_rounds_by_hand():
    """CE + β‖K‖²_F/d² on the batch's h (the tiny model's 4 features), standardised over the real rows of a
    batch padded to 5 (clients of 4 and 3 examples); β = 2."""
    res = fj.run(_cfg("examples.feddecorr:feddecorr", model="tiny_feat", hp={"beta": 2.0}), progress=False)
    theta = _feddecorr_by_hand(2.0)
    _close_tree(res.model["params"], _flax(theta))
    assert _far(theta, _feddecorr_by_hand(0.0))  # β = 0 is FedAvg, which it is not


def test_feddecorr_without_features_is_one_line(capsys, tmp_path):
    _cfg("fedavg")  # registers the tiny data
    code, err = cli(capsys, ["run", "--algorithm", "examples.feddecorr:feddecorr", "--dataset", "tiny_mixed",
                             "--partition", "given", "--model", "tiny", "--clients", "3", "--clients-per-round", "3",
                             "--rounds", "1", "--no-progress", "--out", str(tmp_path / "x")])
    err = "\n".join(ln for ln in err.splitlines() if not ln.startswith("fedalf: warning: code digest"))
    one_line_error(code, err, "algorithm 'feddecorr' needs the model's features", "returns its logits only",
                   "(logits, features)")  # refused up front (needs_features), before anything is compiled


# ---- Per-FedAvg (first order) -------------------------------------------------------------------------------

def _perfedavg_by_hand(alpha, steps, rounds=2, lr=0.3, glr=0.8):
    theta = _theta0()
    personal = [dict(theta) for _ in range(3)]
    evals = [np.mean([_loss_at(theta, i) for i in range(3)])]  # round 0: nobody sampled yet, θ_0
    for _ in range(rounds):
        ws = []
        for i in range(3):
            x, y = _rows(i)
            w = dict(theta)
            for s in range(steps):
                if s % 2 == 0:
                    adapted = _sub(w, _ce_grad(w, x, y)[1], alpha)   # w̃ = w − α ∇f(w; D)
                else:
                    w = _sub(w, _ce_grad(adapted, x, y)[1], lr)      # w ← w − β ∇f(w̃; D')
            ws.append(w)
            personal[i] = _sub(theta, _ce_grad(theta, x, y)[1], alpha)  # θ_t − α ∇f_i(θ_t)
        theta = _fedavg(theta, ws, glr, weights=[1 / 3] * 3)  # the plain mean over the sampled clients
        evals.append(np.mean([_loss_at(personal[i], i) for i in range(3)]))
    return theta, personal, evals


@pytest.mark.parametrize("steps, client_map", [(4, "vmap"), (3, "map")])
def test_perfedavg_matches_two_rounds_by_hand(tmp_path, client_map, steps):
    """θ (two MAML-FO updates a round; with 3 steps the last α-step is dropped: one update), every client's
    personal model θ_t − α∇f_i(θ_t) (its state, from the data pass) and each evaluation's personal loss;
    α = 0.2, β = η_l = 0.3."""
    res = fj.run(_cfg("examples.perfedavg:perfedavg", hp={"alpha": 0.2}, local_epochs=steps, client_map=client_map),
                 out=str(tmp_path / "p"), progress=False)
    theta, personal, evals = _perfedavg_by_hand(0.2, steps)
    _close_tree(res.model["params"], _flax(theta))
    _close_tree(res.client_states, {k: {q: np.stack([_flax(p)[k][q] for p in personal]) for q in ("kernel", "bias")}
                                    for k in ("Dense_0", "Dense_1")})
    _close(res.metrics["personal_test_loss"].to_numpy(np.float64), evals)
    if steps == 3:  # the dropped half: as two steps
        assert not _far(theta, _perfedavg_by_hand(0.2, 2)[0], 1e-12)
    else:
        assert _far(theta, _perfedavg_by_hand(0.2, 2)[0])
        assert _far(theta, _perfedavg_by_hand(0.0, 4)[0])  # α = 0: FedAvg's SGD steps, which it is not


# ---- each example from the CLI, as its docstring says ------------------------------------------------------------

@pytest.mark.parametrize("name", ["fedsam", "feddecorr", "perfedavg"])
def test_example_runs_from_its_docstring_line(tmp_path, name):
    """The ``fedalf run`` line of the module's docstring, on small synthetic data and 2 rounds."""
    doc = importlib.import_module(f"examples.{name}").__doc__
    line = next(ln.strip() for ln in doc.splitlines() if ln.strip().startswith("fedalf run"))
    argv = shlex.split(line)[1:]
    argv[argv.index("--rounds") + 1] = "2"
    small = ["--dataset", "synthetic", "--clients", "4", "--clients-per-round", "2", "--eval-every", "2",
             "--synthetic-train", "80", "--synthetic-test", "40", "--batch-size", "20", "--no-progress"]
    assert main([*argv, *small, "--out", str(tmp_path / "cli")]) == 0
    res = fj.load(tmp_path / "cli")
    assert res.status == "done" and list(res.metrics["round"]) == [0, 2]
    assert np.isfinite(res.metrics["test_loss"]).all()
    assert ("personal_acc" in res.metrics) == (name == "perfedavg")
