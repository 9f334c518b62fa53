"""A client program under a privacy mechanism (issue 48 item 2; docs/extending.md "The client program",
docs/privacy.md): ``final`` returns ``fj.Reveal(w, new state[, aux])``, the model the client reveals; the round
passes it through the run's mechanism with the default client's key and uploads Δ_i = θ − w̃, so a program
revealing FedAvg's w is the built-in FedAvg under the same mechanism and seed, bit for bit. A raw Δ_i under a
local mechanism is refused in one line; an aux the algorithm does not declare public makes the record say "does
not hold". And examples/scaffold1.py (SCAFFOLD option I: c_i⁺ = ∇f_i(θ) from a data pass) against two rounds
computed by hand in float64 on the tiny problem of tests/test_examples_client.py (three clients of 4, 3 and 5
examples, a batch of 5: every local step is one full batch, so ``local_epochs`` is the number of steps)."""

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedalf_jax as fj
from fedalf_jax.cli import main
from helpers import cli, one_line_error
from test_examples_client import (COUNTS, _backward, _cfg, _close, _close_tree, _flax, _forward, _rows, _softmax,
                                  _theta0)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _map(f, *trees):
    return jax.tree_util.tree_map(f, *trees)


def _init(ctx):
    return ctx.theta


def _step(w, batch, ctx):
    g = jax.grad(lambda p: fj.cross_entropy(batch, ctx.apply(p, batch.x, train=True, key=batch.key)[0]))(w)
    return _map(lambda p, gi: p - ctx.lr * gi, w, g)


def _reveal(w, ctx):
    return fj.Reveal(w, ctx.state)


def _raw(w, ctx):
    return _map(lambda t, p: t - p, ctx.theta, w), ctx.state


def _program(name, final, server=fj.algorithms.weighted_mean_server, **kw):
    fj.register_algorithm(name, lambda: fj.Algorithm(name, server=server, client=fj.ClientProgram(_init, _step, final),
                                                     **kw))
    return name


def _same(a, b):
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


# ---- Reveal: the mechanism sees what leaves the client -----------------------------------------------------------

@pytest.mark.parametrize("privacy", [dict(ldp="adaptive", epsilon=2.0), dict(ldp="ldp_fl", epsilon=1.0),
                                     dict(dp="gaussian", epsilon=1.0, delta=1e-5, clip=0.5), {}])
def test_a_program_revealing_w_is_fedavg_under_the_same_mechanism_bit_for_bit(privacy):
    """The tiny problem, two rounds of two local steps, seed 3: the model and every metric of the program equal
    the built-in FedAvg's under the same mechanism (its key the default client's); and the mechanism did
    something (the run without it differs)."""
    name = _program("reveal_fedavg", _reveal)
    kw = dict(seed=3, **privacy)
    mine = fj.run(_cfg(name, **kw), progress=False)
    ref = fj.run(_cfg("fedavg", **kw), progress=False)
    _same(mine.model, ref.model)
    cols = ["mean_acc", "test_loss", "angle_deg", "model_conflicts", "worst10_acc"]
    np.testing.assert_array_equal(mine.metrics[cols].to_numpy(), ref.metrics[cols].to_numpy())
    if privacy:
        plain = fj.run(_cfg("fedavg", seed=3), progress=False)
        assert max(np.abs(np.asarray(a) - np.asarray(b)).max() for a, b in zip(
            jax.tree_util.tree_leaves(plain.model), jax.tree_util.tree_leaves(mine.model))) > 1e-3


def _noise_server(s: fj.ServerIn):
    theta = _map(lambda t, d: t - s.server_lr_t * jnp.mean(d, axis=0), s.theta, s.deltas)
    return theta, s.sstate, {"noise": jnp.mean(s.noise_var)}


def test_a_reveal_gives_the_server_its_noise_variance():
    """needs_noise_var: ServerIn.noise_var of a Reveal under --dp gaussian is Σ over the values of Var w̃ = d·σ²
    (Δ_i = θ − w̃), the default client's model upload's, with σ = clip·sqrt(2 ln(1.25/δ))/ε."""
    name = _program("reveal_noise", _reveal, server=_noise_server, needs_noise_var=True, metrics=("noise",))
    kw = dict(dp="gaussian", epsilon=1.0, delta=1e-5, clip=0.5)
    got = fj.run(_cfg(name, **kw), progress=False).metrics["noise"].to_numpy(np.float64)[1:]
    sigma = 0.5 * np.sqrt(2 * np.log(1.25 / 1e-5)) / 1.0
    d = sum(v.size for v in _theta0().values())  # 3·4 + 4 + 4·3 + 3 = 31 values
    np.testing.assert_allclose(got, [d * sigma ** 2] * 2, rtol=1e-5)


@pytest.mark.parametrize("final, needles", [
    (lambda w, ctx: fj.Reveal({"w": w}, ctx.state), ["client.final returned fj.Reveal's w", "shaped like θ"]),
    (lambda w, ctx: fj.Reveal(_map(lambda p: p.astype(jnp.bfloat16), w), ctx.state), ["fj.Reveal's w", "bfloat16"]),
    (lambda w, ctx: fj.Reveal(w, ctx.state, jnp.zeros(2)), ["client.final returned an auxiliary upload",
                                                            "public_aux"]),
    (lambda w, ctx: w, ["final returns Δ_i itself", "return fj.Reveal(w, new state[, aux])"]),
])
def test_a_reveals_mistake_is_one_line(final, needles):
    """What a Reveal carries is checked while the round is traced: one ConfigError line naming it."""
    with pytest.raises(fj.ConfigError) as e:
        fj.run(_cfg(_program("bad_reveal", final), ldp="adaptive", rounds=1), progress=False)
    msg = str(e.value)
    assert "\n" not in msg and all(n in msg for n in needles), msg


# ---- a raw Δ_i under a local mechanism: one line ---------------------------------------------------------------

@pytest.mark.parametrize("option", [["--ldp", "adaptive"], ["--dp", "gaussian"]])
def test_a_program_returning_delta_under_a_mechanism_is_one_line(capsys, tmp_path, option):
    """FedLC's program returns (Δ_i, state), computed from its un-noised model: refused while the round is traced,
    in one line saying to return fj.Reveal, and nothing of the run is left behind."""
    _cfg("fedavg")  # registers the tiny data
    out = tmp_path / "priv"
    code, err = cli(capsys, ["run", "--algorithm", "examples.fedlc:fedlc", "--dataset", "tiny_mixed", "--partition",
                             "given", "--model", "tiny", "--clients", "3", "--clients-per-round", "3", "--rounds", "1",
                             "--no-progress", "--out", str(out), *option])
    err = "\n".join(ln for ln in err.splitlines() if not ln.startswith("fedalf: warning: code digest"))
    one_line_error(code, err, "client program", "final returns Δ_i itself", "fj.Reveal(w, new state[, aux])",
                   f"{option[0][2:]}={option[1]!r}", f"{option[0][2:]}='none'")
    assert not out.exists()


def test_a_program_returning_delta_under_central_dp_is_fedavg_under_central_dp():
    """Central DP clips whatever Δ_i a client uploads and noises the server's step: a raw Δ_i runs, and equals the
    built-in FedAvg's run under central DP bit for bit (its clip, its uniform weights, its server noise)."""
    name = _program("raw_central", _raw)
    kw = dict(dp="central", epsilon=5.0, delta=1e-3, clip=0.05, seed=1)
    mine = fj.run(_cfg(name, **kw), progress=False)
    ref = fj.run(_cfg("fedavg", **kw), progress=False)
    _same(mine.model, ref.model)
    np.testing.assert_array_equal(mine.metrics["test_loss"].to_numpy(), ref.metrics["test_loss"].to_numpy())
    assert fj.Config(algorithm=name, dp="central").privacy["guarantee"] == "holds"


# ---- the privacy record ---------------------------------------------------------------------------------------

def _aux_final(w, ctx):
    return fj.Reveal(w, ctx.state, {"n": ctx.facts.n.astype(jnp.float32)})


@pytest.mark.parametrize("privacy", [dict(ldp="adaptive"), dict(dp="gaussian", clip=1.0)])
def test_the_record_holds_for_a_reveal_and_not_with_a_private_aux(privacy):
    """A Reveal without aux: holds (no declaration needed: the round computes the upload), no aux listed. With an
    aux and public_aux=False: does not hold, the aux listed as not covered. With public_aux=True: holds, and why
    says it rests on that declaration."""
    p = fj.Config(algorithm=_program("rec_reveal", _reveal), **privacy).privacy
    assert p["guarantee"] == "holds" and "fj.Reveal" in p["why"] and "round itself uploads" in p["why"], p
    assert not any("aux" in x for x in p["not_covered"])
    p = fj.Config(algorithm=_program("rec_private_aux", _aux_final, public_aux=False), **privacy).privacy
    assert p["guarantee"] == "does not hold" and "ServerIn.aux (public_aux=False)" in p["why"], p
    assert "the auxiliary upload ServerIn.aux (the algorithm declares public_aux=False)" in p["not_covered"]
    p = fj.Config(algorithm=_program("rec_public_aux", _aux_final, public_aux=True), **privacy).privacy
    assert p["guarantee"] == "holds" and "rests on the algorithm's own declaration" in p["why"], p


def test_a_private_aux_runs_and_its_summary_says_does_not_hold(tmp_path):
    """SCAFFOLD option I (its Δc_i a gradient of the client's data, public_aux=False) under --ldp adaptive runs
    through its Reveal, and the run's summary records that the guarantee does not hold."""
    res = fj.run(_cfg("examples.scaffold1:scaffold1", ldp="adaptive", rounds=1), out=str(tmp_path / "s"),
                 progress=False)
    assert res.status == "done"
    assert res.summary["privacy"]["guarantee"] == "does not hold"
    assert any(x.startswith("the auxiliary upload ServerIn.aux") for x in res.summary["privacy"]["not_covered"])


# ---- SCAFFOLD option I ------------------------------------------------------------------------------------------

def _grad(p, x, y):
    logits, _, cache = _forward(p, x)
    return _backward(p, cache, (_softmax(logits) - np.eye(3)[y]) / len(y))


def _scaffold1_by_hand(rounds=2, lr=0.3, glr=0.8, steps=2, correct=True):
    """Local steps w ← w − η(∇f_i(w) − c_i + c) (every step the client's full batch); c_i⁺ = ∇f_i(θ); θ ← θ −
    η_g mean Δ_i (unweighted); c ← c + Σ Δc_i / N."""
    theta = _theta0()
    zero = {k: np.zeros_like(v) for k, v in theta.items()}
    c, ci = dict(zero), [dict(zero) for _ in range(3)]
    norms = []
    for _ in range(rounds):
        deltas, dcs = [], []
        for i in range(3):
            x, y = _rows(i)
            w = dict(theta)
            for _ in range(steps):
                g = _grad(w, x, y)
                w = {k: w[k] - lr * (g[k] - (ci[i][k] - c[k] if correct else 0)) for k in w}
            new = _grad(theta, x, y)
            deltas.append({k: theta[k] - w[k] for k in w})
            dcs.append({k: new[k] - ci[i][k] for k in w})
            ci[i] = new
        theta = {k: theta[k] - glr * np.mean([d[k] for d in deltas], axis=0) for k in theta}
        c = {k: c[k] + sum(d[k] for d in dcs) / 3 for k in c}
        norms.append(np.sqrt(sum(np.sum(v ** 2) for v in c.values())))
    return theta, c, ci, norms


@pytest.mark.parametrize("client_map", ["vmap", "map"])
def test_scaffold1_matches_two_rounds_by_hand(tmp_path, client_map):
    """θ, the server's c, every client's c_i (= ∇f_i(θ_1) after round 2) and ‖c‖ after each round; round 2's
    correction moves θ (without it θ differs)."""
    res = fj.run(_cfg("examples.scaffold1:scaffold1", client_map=client_map), out=str(tmp_path / "s"),
                 progress=False)
    theta, c, ci, norms = _scaffold1_by_hand()
    _close_tree(res.model["params"], _flax(theta))
    _close_tree(res.server_state, _flax(c))
    _close_tree(res.client_states, {k: {q: np.stack([_flax(p)[k][q] for p in ci]) for q in ("kernel", "bias")}
                                    for k in ("Dense_0", "Dense_1")})
    _close(res.metrics["c_norm"].to_numpy(np.float64)[1:], norms)
    plain, _, _, _ = _scaffold1_by_hand(correct=False)
    assert max(np.abs(theta[k] - plain[k]).max() for k in theta) > 1e-4


def test_scaffold1_runs_from_its_docstring_line(tmp_path):
    """The ``fedalf run`` line of examples/scaffold1.py's docstring, on small synthetic data and 2 rounds."""
    import shlex
    from examples import scaffold1
    line = next(ln.strip() for ln in scaffold1.__doc__.splitlines() if ln.strip().startswith("fedalf run"))
    argv = shlex.split(line)[1:]
    argv[argv.index("--rounds") + 1] = "2"
    small = ["--dataset", "synthetic", "--clients", "4", "--clients-per-round", "2", "--eval-every", "2",
             "--synthetic-train", "80", "--synthetic-test", "40", "--batch-size", "20", "--no-progress"]
    assert main([*argv, *small, "--out", str(tmp_path / "cli")]) == 0
    res = fj.load(tmp_path / "cli")
    assert res.status == "done" and list(res.metrics["round"]) == [0, 2]
    assert np.isfinite(res.metrics["test_loss"]).all() and np.isfinite(res.metrics["c_norm"].iloc[-1])
