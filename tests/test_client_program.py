"""The client program (issue 48 item 1; fedalf_jax/sim/program.py, docs/extending.md "The client program"):
``fj.Algorithm(..., client=fj.ClientProgram(init, step, final))``, its context (θ, state, hp, broadcast, round,
learning rate, key, facts with label counts and client index, apply), its carry threaded through the local
steps and its data pass; and the first three examples written with it (item 8: examples/fedlc.py, pfedme.py,
fedproto.py), each against two rounds computed by hand in float64 on the tiny problem of
tests/test_examples_client.py (three clients of 4, 3 and 5 examples, a batch of 5: every local step is one
full batch, so ``local_epochs`` is the number of steps), with the clients vmapped and mapped."""

import dataclasses
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedalf_jax as fj
from fedalf_jax.cli import main
from helpers import cli, one_line_error
from test_examples_client import (COUNTS, Y, _backward, _cfg, _close, _close_tree, _flax, _forward, _loss_at, _rows,
                                  _softmax, _sub, _theta0, jax_tree)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MAPS = ["vmap", "map"]


def _map(f, *trees):
    return jax.tree_util.tree_map(f, *trees)


# ---- the foundation: a program doing FedAvg's SGD is FedAvg, bit for bit --------------------------------------

def _sgd_init(ctx):
    return ctx.theta


def _sgd_step(w, batch, ctx):
    g = jax.grad(lambda p: fj.cross_entropy(batch, ctx.apply(p, batch.x, train=True, key=batch.key)[0]))(w)
    return _map(lambda p, gi: p - ctx.lr * gi, w, g)


def _sgd_final(w, ctx):
    return _map(lambda t, p: t - p, ctx.theta, w), ctx.state


def _program_fedavg():
    return fj.Algorithm("program_fedavg", server=fj.algorithms.weighted_mean_server,
                        client=fj.ClientProgram(_sgd_init, _sgd_step, _sgd_final))


@pytest.mark.parametrize("client_map", MAPS)
def test_a_program_doing_sgd_is_fedavg_bit_for_bit(client_map):
    """The carry threads through every step, over the default client's minibatches and keys (a synthetic
    federation of 6 clients, 3 per round, padded rows, two epochs): the model equals the built-in FedAvg's
    bit for bit, and so do the metrics."""
    fj.register_algorithm("program_fedavg", _program_fedavg)
    kw = dict(dataset="synthetic", model="mlp", clients=6, clients_per_round=3, rounds=2, eval_every=1,
              synthetic_train=130, synthetic_test=40, batch_size=8, local_epochs=2, lr=0.1, lr_decay=0.7,
              client_map=client_map)
    mine = fj.run(fj.Config(algorithm="program_fedavg", **kw), progress=False)
    ref = fj.run(fj.Config(algorithm="fedavg", **kw), progress=False)
    for a, b in zip(jax.tree_util.tree_leaves(mine.model["params"]), jax.tree_util.tree_leaves(ref.model["params"])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert np.abs(np.asarray(ref.model["params"]["Dense_0"]["bias"])).max() > 0  # it trained
    cols = ["mean_acc", "test_loss", "angle_deg", "model_conflicts"]
    np.testing.assert_array_equal(mine.metrics[cols].to_numpy(), ref.metrics[cols].to_numpy())


def test_one_batch_type_for_a_step_a_data_pass_and_a_local_loss():
    """A program's step, its data pass and a local_training's local_loss all receive an fj.Batch (the 0.1 name
    fj.ClientBatch is the same class): a step's has its dropout key and no logits, a data pass's neither, a
    local_loss's the model's logits and apply."""
    assert fj.ClientBatch is fj.Batch and "ClientBatch" not in fj.__all__
    seen = {}

    def step(w, batch, ctx):
        seen["step"] = (type(batch), batch.key is not None, batch.logits, batch.apply)
        return _sgd_step(w, batch, ctx)

    def final(w, ctx):
        def note(acc, b):
            seen["pass"] = (type(b), b.key, b.logits)
            return acc
        ctx.data.fold(note, jnp.zeros(()))
        return _sgd_final(w, ctx)

    def local_loss(ctx):
        def loss(p, batch):
            seen["loss"] = (isinstance(batch, fj.Batch), batch.logits is not None, callable(batch.apply))
            return fj.cross_entropy(batch)
        return loss

    fj.register_algorithm("batch_prog", lambda: fj.Algorithm("batch_prog", server=fj.algorithms.weighted_mean_server,
                                                             client=fj.ClientProgram(_sgd_init, step, final)))
    fj.register_algorithm("batch_loss", lambda: fj.Algorithm("batch_loss", server=fj.algorithms.weighted_mean_server,
                                                             client=fj.local_training(local_loss=local_loss)))
    import tempfile
    for name in ("batch_prog", "batch_loss"):
        with tempfile.TemporaryDirectory() as d:
            fj.run(_cfg(name, rounds=1), out=d, progress=False)
    assert seen["step"] == (fj.Batch, True, None, None)
    assert seen["pass"] == (fj.Batch, None, None)
    assert seen["loss"] == (True, True, True)


# ---- the context: facts, round, learning rate ------------------------------------------------------------------

def _facts_final(w, ctx):
    f = ctx.facts
    return _map(jnp.zeros_like, ctx.theta), {"counts": f.label_counts, "index": f.index, "n": f.n, "steps": f.steps,
                                             "t": ctx.t, "lr": ctx.lr, "seen": ctx.state["seen"] + 1, "k": w["k"]}


def _facts_state(params):
    z = jnp.zeros((), jnp.int32)
    return {"counts": jnp.zeros((3,), jnp.int32), "index": z - 1, "n": z, "steps": z, "t": z,
            "lr": jnp.zeros((), jnp.float32), "seen": z, "k": z}


@pytest.mark.parametrize("client_map", MAPS)
def test_the_context_says_who_the_client_is(tmp_path, client_map):
    """After two rounds of 2 clients out of 3, each sampled client's state holds what its ctx said the last time
    it was sampled: its label counts (padding not counted), its index, n, its steps (2 epochs of ⌈n/2⌉ batches
    of 2), the round and that round's learning rate η_l·decay^t; and the carry counted as many steps: the
    compiled steps past its examples (rows padded to 5: 3 steps an epoch) kept the carry as it was."""
    fj.register_algorithm("facts_prog", lambda: fj.Algorithm(
        "facts_prog", server=fj.algorithms.weighted_mean_server, init_client_state=_facts_state,
        client=fj.ClientProgram(lambda ctx: {"k": jnp.zeros((), jnp.int32)}, lambda c, b, ctx: {"k": c["k"] + 1},
                                _facts_final)))
    res = fj.run(_cfg("facts_prog", clients_per_round=2, lr_decay=0.5, batch_size=2, client_map=client_map),
                 out=str(tmp_path / "f"), progress=False)
    st = jax_tree(res.client_states)
    for i in check_facts(st):
        assert st["k"][i] == st["steps"][i]
        t = st["t"][i]
        assert st["lr"][i] == pytest.approx(0.3 * 0.5 ** t, rel=1e-6)
    assert set(st["t"][st["seen"] > 0]) <= {0.0, 1.0} and 1.0 in set(st["t"])


def check_facts(st) -> list:
    """Two rounds of 2 of the 3 clients, batches of 2 for 2 epochs: each sampled client's recorded facts are its
    label counts as counted from its rows by hand (padding not counted), its index, n and steps ⌈n/2⌉ · 2.
    Returns the sampled clients."""
    want_counts = [np.bincount(Y[r], minlength=3) for r in _lists()]
    assert sorted(st["seen"]) in ([1, 1, 2], [0, 2, 2])  # 4 samplings of 3 clients
    sampled = [i for i in range(3) if st["seen"][i] > 0]
    for i in sampled:
        assert st["index"][i] == i and st["n"][i] == COUNTS[i] and st["steps"][i] == 2 * -(-COUNTS[i] // 2)
        np.testing.assert_array_equal(st["counts"][i], want_counts[i])
    return sampled


def _lists():
    starts = np.cumsum([0] + COUNTS)
    return [np.arange(starts[i], starts[i + 1]) for i in range(3)]


# ---- FedLC --------------------------------------------------------------------------------------------------

def _fedlc_by_hand(tau, rounds=2, lr=0.3, decay=1.0, steps=2):
    theta = _theta0()
    for t in range(rounds):
        ws = []
        for i in range(3):
            x, y = _rows(i)
            counts = np.bincount(y, minlength=3).astype(float)
            margin = np.where(counts > 0, tau * np.maximum(counts, 1) ** -0.25, np.inf)
            w = dict(theta)
            for _ in range(steps):
                logits, _, cache = _forward(w, x)
                p = _softmax(logits - margin)
                w = _sub(w, _backward(w, cache, (p - np.eye(3)[y]) / len(y)), lr * decay ** t)
            ws.append(w)
        pw = np.asarray(COUNTS) / sum(COUNTS)
        theta = {k: theta[k] - 0.8 * sum(pw[i] * (theta[k] - ws[i][k]) for i in range(3)) for k in theta}
    return theta


@pytest.mark.parametrize("client_map", MAPS)
def test_fedlc_matches_two_rounds_by_hand(client_map):
    """Client 1 holds no label 0 (an infinite margin: the class leaves its softmax); η_l decays (0.3, 0.15)."""
    res = fj.run(_cfg("examples.fedlc:fedlc", hp={"tau": 0.7}, lr_decay=0.5, client_map=client_map), progress=False)
    theta = _fedlc_by_hand(0.7, decay=0.5)
    _close_tree(res.model["params"], _flax(theta))
    plain = _fedlc_by_hand(0.0, decay=0.5)  # τ = 0 is FedAvg but for the class client 1 lacks: not it
    assert max(np.abs(theta[k] - plain[k]).max() for k in theta) > 1e-3


@pytest.mark.parametrize("client_map", MAPS)
def test_a_programs_own_hyper_parameter_is_swept(tmp_path, client_map):
    """τ = 0.7 and τ = 0 in one sweep (its runs share a program when the sweep batches them): each run equals
    its hand computation."""
    sw = fj.sweep(_cfg("examples.fedlc:fedlc", client_map=client_map), out=tmp_path / "s",
                  grid={"hp.tau": [0.7, 0.0]}, progress=False)
    for r, tau in zip(sw, (0.7, 0.0)):
        _close_tree(r.model["params"], _flax(_fedlc_by_hand(tau)))


# ---- pFedMe -------------------------------------------------------------------------------------------------

def _ce_grad_eval(p, x, y):
    logits, _, cache = _forward(p, x)
    return _backward(p, cache, (_softmax(logits) - np.eye(3)[y]) / len(y))


def _pfedme_by_hand(lam, eta_p, k, rounds=2, lr=0.3, glr=0.8, steps=2, warm=True):
    theta = _theta0()
    personal = [dict(theta) for _ in range(3)]
    evals = [np.mean([_loss_at(theta, i) for i in range(3)])]
    for _ in range(rounds):
        ws = []
        for i in range(3):
            x, y = _rows(i)
            w, v = dict(theta), dict(theta)
            for _ in range(steps):
                v = v if warm else dict(w)
                for _ in range(k):
                    g = _ce_grad_eval(v, x, y)
                    v = {q: v[q] - eta_p * (g[q] + lam * (v[q] - w[q])) for q in v}
                w = {q: w[q] - lr * lam * (w[q] - v[q]) for q in w}
            ws.append(w)
            personal[i] = v
        pw = np.asarray(COUNTS) / sum(COUNTS)
        theta = {q: theta[q] - glr * sum(pw[i] * (theta[q] - ws[i][q]) for i in range(3)) for q in theta}
        evals.append(np.mean([_loss_at(personal[i], i) for i in range(3)]))
    return theta, personal, evals


@pytest.mark.parametrize("client_map", MAPS)
def test_pfedme_matches_two_rounds_by_hand(tmp_path, client_map):
    """θ, every client's θ̃ (its state) and each evaluation's personal loss, with θ̃ warm-started from one local
    step to the next (K = 5 inner steps); restarting θ̃ from w every step gives another θ."""
    hp = {"lam": 2.0, "personal_lr": 0.05}
    res = fj.run(_cfg("examples.pfedme:pfedme", hp=hp, client_map=client_map), out=str(tmp_path / "p"),
                 progress=False)
    theta, personal, evals = _pfedme_by_hand(2.0, 0.05, 5)
    _close_tree(res.model["params"], _flax(theta))
    _close_tree(res.client_states, {k: {q: np.stack([_flax(p)[k][q] for p in personal]) for q in ("kernel", "bias")}
                                    for k in ("Dense_0", "Dense_1")})
    _close(res.metrics["personal_test_loss"].to_numpy(np.float64), evals)
    cold, _, _ = _pfedme_by_hand(2.0, 0.05, 5, warm=False)
    assert max(np.abs(theta[q] - cold[q]).max() for q in theta) > 1e-4


# ---- FedProto -----------------------------------------------------------------------------------------------

def _fedproto_by_hand(lam, rounds=2, lr=0.3, steps=2):
    """Each client's own model (from θ_0) trained on CE + λ·mean((h − C̄_y)²) over the classes with a global
    prototype; prototypes from the trained model (evaluation mode) per class; the server's count-weighted mean."""
    models = [_theta0() for _ in range(3)]
    protos, have = np.zeros((3, 4)), np.zeros(3)
    evals = []
    for _ in range(rounds):
        sums, tot = np.zeros((3, 4)), np.zeros(3)
        for i in range(3):
            x, y = _rows(i)
            w = models[i]
            for _ in range(steps):
                logits, h, cache = _forward(w, x)
                dlog = (_softmax(logits) - np.eye(3)[y]) / len(y)
                dh = lam * 2 * (h - protos[y]) * have[y][:, None] / (len(y) * h.shape[1])
                w = _sub(w, _backward(w, cache, dlog, dh), lr)
            models[i] = w
            _, h, _ = _forward(w, x)
            for c in range(3):
                sel = y == c
                if sel.any():
                    sums[c] += sel.sum() * h[sel].mean(0)
                    tot[c] += sel.sum()
        protos = np.where(tot[:, None] > 0, sums / np.maximum(tot, 1)[:, None], protos)
        have = np.maximum(have, tot > 0)
        evals.append(np.mean([_loss_at(models[i], i) for i in range(3)]))
    return models, protos, evals


@pytest.mark.parametrize("client_map", MAPS)
def test_fedproto_matches_two_rounds_by_hand(tmp_path, client_map):
    """Every client's own model (its state), the global prototypes (the server's state: from a data pass after
    training, over padded rows) and each evaluation's personal loss; θ stays θ_0; λ = 0.5 changes round 2."""
    res = fj.run(_cfg("examples.fedproto:fedproto", model="tiny_feat", hp={"lam": 0.5}, client_map=client_map),
                 out=str(tmp_path / "p"), progress=False)
    models, protos, evals = _fedproto_by_hand(0.5)
    _close_tree(res.model["params"], _flax(_theta0()), atol=0)
    _close_tree(res.client_states, {k: {q: np.stack([_flax(p)[k][q] for p in models]) for q in ("kernel", "bias")}
                                    for k in ("Dense_0", "Dense_1")})
    _close(np.asarray(res.server_state["protos"]), protos)
    np.testing.assert_array_equal(np.asarray(res.server_state["have"]), [1, 1, 1])
    _close(res.metrics["personal_test_loss"].to_numpy(np.float64)[1:], evals)
    no_pull, _, _ = _fedproto_by_hand(0.0)
    assert max(np.abs(models[0][q] - no_pull[0][q]).max() for q in models[0]) > 1e-4


def test_a_data_pass_sums_every_real_example_once():
    """ctx.data.fold in batches of 2 over rows padded to 5 (n = 4, 3, 5): the sum of x and the count of examples,
    with the padded rows masked and a batch with no real example skipped."""
    def final(w, ctx):
        def add(acc, b):
            m = b.mask.astype(jnp.float32)
            return {"x": acc["x"] + m @ b.x, "n": acc["n"] + jnp.sum(b.mask.astype(jnp.int32)),
                    "batches": acc["batches"] + 1}
        acc = ctx.data.fold(add, {"x": jnp.zeros(3), "n": jnp.zeros((), jnp.int32),
                                  "batches": jnp.zeros((), jnp.int32)}, batch_size=2)
        return _map(jnp.zeros_like, ctx.theta), acc

    fj.register_algorithm("fold_prog", lambda: fj.Algorithm(
        "fold_prog", server=fj.algorithms.weighted_mean_server, client=fj.ClientProgram(_sgd_init, None, final),
        init_client_state=lambda p: {"x": jnp.zeros(3), "n": jnp.zeros((), jnp.int32),
                                     "batches": jnp.zeros((), jnp.int32)}))
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        st = jax_tree(fj.run(_cfg("fold_prog", rounds=1), out=d, progress=False).client_states)
    for i, r in enumerate(_lists()):
        from test_examples_client import X
        _close(st["x"][i], X[r].sum(0), atol=1e-5)
        assert st["n"][i] == COUNTS[i] and st["batches"][i] == -(-COUNTS[i] // 2)


# ---- mistakes are one line -----------------------------------------------------------------------------------

def _bad(name, **kw):
    prog = dict(init=_sgd_init, step=_sgd_step, final=_sgd_final)
    alg = {k: v for k, v in kw.items() if k not in prog}
    prog.update({k: v for k, v in kw.items() if k in prog})
    fj.register_algorithm(name, lambda: fj.Algorithm(name, server=fj.algorithms.weighted_mean_server,
                                                     client=fj.ClientProgram(**prog), **alg))
    return name


@pytest.mark.parametrize("make, needles", [
    (lambda: _bad("bad_step", step=lambda w, b, ctx: {"w": w}), ["client.step returned the carry", "another tree"]),
    (lambda: _bad("bad_step_dtype", step=lambda w, b, ctx: _map(lambda p: p.astype(jnp.bfloat16), w)),
     ["client.step returned the carry", "bfloat16"]),
    (lambda: _bad("bad_final", final=lambda w, ctx: w), ["client.final returned dict", "(Δ_i, new state)"]),
    (lambda: _bad("bad_delta", final=lambda w, ctx: ({"x": jnp.zeros(2)}, ctx.state)),
     ["client.final returned Δ_i", "shaped like the params"]),
    (lambda: _bad("bad_aux", final=lambda w, ctx: (_sgd_final(w, ctx)[0], ctx.state, jnp.zeros(2))),
     ["client.final returned an auxiliary upload", "public_aux"]),
    (lambda: _bad("bad_sig", step=lambda w, b: w), ["client.step", "carry, batch, ctx"]),
    (lambda: _bad("bad_init", init=lambda ctx: "w"), ["client.init returned the carry", "pytree of arrays"]),
    (lambda: _bad("bad_fold", final=lambda w, ctx: (ctx.data.fold(lambda a, b: a.astype(jnp.int32), jnp.zeros(2)),
                                                    ctx.state)),
     ["ctx.data.fold's function returned the accumulator", "int32"]),
])
def test_a_programs_mistake_is_one_line(capsys, tmp_path, make, needles):
    _cfg("fedavg")  # registers the tiny data
    code, err = cli(capsys, ["run", "--algorithm", make(), "--dataset", "tiny_mixed", "--partition", "given",
                             "--model", "tiny", "--clients", "3", "--clients-per-round", "3", "--rounds", "1",
                             "--no-progress", "--out", str(tmp_path / "x")])
    # the algorithm is registered in this process: the code digest's warning line comes first
    err = "\n".join(ln for ln in err.splitlines() if not ln.startswith("fedalf: warning: code digest"))
    one_line_error(code, err, *needles)


def _bn_init(ctx):
    return ctx.theta, ctx.stats


def _bn_step(carry, batch, ctx):
    w, stats = carry

    def loss(p):
        (logits, _), new = ctx.apply.with_stats(p, stats, batch.x, train=True, key=batch.key)
        return fj.cross_entropy(batch, logits), new
    g, new = jax.grad(loss, has_aux=True)(w)
    return _map(lambda p, gi: p - ctx.lr * gi, w, g), new


def _bn_final(carry, ctx):
    return fj.Reveal(carry[0], ctx.state, stats=carry[1])


@pytest.mark.parametrize("own", [False, True])
def test_a_program_trains_batch_statistics_as_local_training_does(tmp_path, own):
    """A program on a BatchNorm model carries the statistics through its steps (ctx.apply.with_stats) and
    returns them in fj.Reveal(stats=...): the global model, its statistics and the metrics equal the default
    client's bit for bit, with the statistics averaged (FedAvg) or kept per client (collections, FedBN's)."""
    cols = ("batch_stats",) if own else ()
    fj.register_algorithm("bn_prog", lambda: fj.Algorithm(
        "bn_prog", server=fj.algorithms.weighted_mean_server,
        client=fj.ClientProgram(_bn_init, _bn_step, _bn_final, collections=cols)))
    fj.register_algorithm("bn_ref", lambda: fj.Algorithm(
        "bn_ref", server=fj.algorithms.weighted_mean_server, client=fj.local_training(client_collections=cols)))
    kw = dict(model="tiny_bn", dataset="tiny_even", batch_size=4, eval_every=1)
    mine = fj.run(_cfg("bn_prog", **kw), out=tmp_path / "p", progress=False)
    ref = fj.run(_cfg("bn_ref", **kw), out=tmp_path / "r", progress=False)
    for a, b in zip(jax.tree_util.tree_leaves(mine.model), jax.tree_util.tree_leaves(ref.model)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    stats = jax.tree_util.tree_leaves(ref.model["batch_stats"])
    assert stats and any(np.abs(np.asarray(x)).max() > 0 for x in stats)  # it trained statistics
    cols_ = ["mean_acc", "test_loss"]
    np.testing.assert_array_equal(mine.metrics[cols_].to_numpy(), ref.metrics[cols_].to_numpy())


def test_a_program_on_a_model_with_batch_statistics_must_return_them(capsys, tmp_path):
    """On a BatchNorm model a raw (Δ_i, state) or a Reveal without stats has no place for the statistics it
    trained: one line naming fj.Reveal's stats; a Reveal with stats on a model without them, one line too."""
    _cfg("fedavg")  # registers the tiny data and models
    cases = [(_bad("bn_raw"), "tiny_bn", ["must return fj.Reveal", "stats="]),
             (_bad("bn_nostats", final=lambda w, ctx: fj.Reveal(w, ctx.state)), "tiny_bn",
              ["fj.Reveal without stats", "ctx.apply.with_stats"]),
             (_bad("nobn_stats", final=lambda w, ctx: fj.Reveal(w, ctx.state, stats={"x": jnp.zeros(1)})), "tiny",
              ["has no batch statistics", "drop stats"])]
    for name, model, needles in cases:
        code, err = cli(capsys, ["run", "--algorithm", name, "--dataset", "tiny_mixed", "--partition",
                                 "given", "--model", model, "--clients", "3", "--clients-per-round", "3", "--rounds",
                                 "1", "--no-progress", "--out", str(tmp_path / name)])
        err = "\n".join(ln for ln in err.splitlines() if not ln.startswith("fedalf: warning: code digest"))
        one_line_error(code, err, *needles)


def test_a_reveals_own_upload_is_computed_from_the_noised_model(tmp_path):
    """SCAFFOLD option II as a hand-written program whose fj.Reveal(w, upload=...) computes Δ_i and the new
    control variate from w̃: under --ldp it equals examples/scaffold.py (local_training's upload(ctx, w, w̃))
    bit for bit, model and server state; a Reveal with both upload and a state is one line."""
    sys.path.insert(0, str(ROOT))
    from examples import scaffold as S

    def step(w, batch, ctx):
        corr = _map(lambda c, ci: c - ci, ctx.broadcast, ctx.state)
        g = jax.grad(lambda p: fj.cross_entropy(batch, ctx.apply(p, batch.x, train=True, key=batch.key)[0])
                     + S._vdot(corr, p))(w)
        return _map(lambda p, gi: p - ctx.lr * gi, w, g)

    def final(w, ctx):
        return fj.Reveal(w, upload=lambda wt: S.upload(ctx, w, wt))

    def make():
        ref = S.scaffold()
        return fj.Algorithm("scaffold_prog", server=S.server, client=fj.ClientProgram(_sgd_init, step, final),
                            init_client_state=ref.init_client_state, init_server_state=ref.init_server_state,
                            broadcast=ref.broadcast, private_upload=True, public_aux=True, metrics=("c_norm",))
    fj.register_algorithm("scaffold_prog", make)
    kw = dict(ldp="adaptive", epsilon=2.0)
    mine = fj.run(_cfg("scaffold_prog", **kw), out=tmp_path / "p", progress=False)
    ref = fj.run(_cfg("examples.scaffold:scaffold", **kw), out=tmp_path / "r", progress=False)
    for a, b in zip(jax.tree_util.tree_leaves((mine.model, mine.server_state, mine.client_states)),
                    jax.tree_util.tree_leaves((ref.model, ref.server_state, ref.client_states))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert np.abs(np.asarray(jax.tree_util.tree_leaves(ref.server_state)[0])).max() > 0  # c moved
    np.testing.assert_array_equal(mine.metrics["c_norm"].to_numpy(), ref.metrics["c_norm"].to_numpy())
    with pytest.raises(fj.ConfigError, match="both upload and state"):
        fj.register_algorithm("reveal_both", lambda: dataclasses.replace(
            make(), name="reveal_both", client=fj.ClientProgram(
                _sgd_init, step, lambda w, ctx: fj.Reveal(w, ctx.state, upload=lambda wt: S.upload(ctx, w, wt)))))
        fj.run(_cfg("reveal_both", rounds=1), out=tmp_path / "b", progress=False)


def test_a_program_beside_the_default_clients_fields_is_refused():
    with pytest.raises(fj.ConfigError, match="has a client program and also upload, penalty"):
        fj.Algorithm("both", server=fj.algorithms.weighted_mean_server, upload=fj.algorithms.model_upload,
                     penalty=fj.algorithms.prox_penalty, client=fj.ClientProgram(_sgd_init, _sgd_step, _sgd_final))
    with pytest.raises(fj.ConfigError, match="expected fj.ClientProgram"):
        fj.Algorithm("tuple", server=fj.algorithms.weighted_mean_server, client=(_sgd_init, _sgd_step, _sgd_final))
    with pytest.raises(fj.ConfigError, match="has no client: give upload="):
        fj.Algorithm("none", server=fj.algorithms.weighted_mean_server)


# ---- each example from the CLI, as its docstring says ------------------------------------------------------------

@pytest.mark.parametrize("name", ["fedlc", "pfedme", "fedproto"])
def test_example_runs_from_its_docstring_line(tmp_path, name):
    """The ``fedalf run`` line of the module's docstring, on small synthetic data and 2 rounds."""
    import importlib
    import shlex
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
    assert ("personal_acc" in res.metrics) == (name != "fedlc")


def test_a_program_run_resumes_exactly_from_the_cli(tmp_path):
    """pFedMe (a client state, a personal model, own hyper-parameters) run for one round, then --resume'd in a
    fresh process for the second: the model and metrics of two rounds in one go."""
    from helpers import cli_resume_equals_one_go
    cli_resume_equals_one_go(tmp_path, "examples.pfedme:pfedme")


CELL = '''
import jax
import fedalf_jax as fj

def init(ctx):
    return ctx.theta

def step(w, batch, ctx):
    g = jax.grad(lambda p: fj.cross_entropy(batch, ctx.apply(p, batch.x)[0]))(w)
    return jax.tree_util.tree_map(lambda p, gi: p - SCALE * ctx.lr * gi, w, g)

def final(w, ctx):
    return jax.tree_util.tree_map(lambda t, p: t - p, ctx.theta, w), ctx.state

alg = fj.Algorithm("cellprog", server=fj.algorithms.weighted_mean_server, client=fj.ClientProgram(init, step, final))
'''


def test_a_programs_code_is_in_the_digest_of_an_algorithm_registered_directly(tmp_path):
    """An Algorithm object written in a notebook's cell and registered as it is: the digest covers its program's
    init, step and final and the global they read, so a changed global (a 3x step) is refused on --resume."""
    import warnings
    ns = {"SCALE": 1.0}
    exec(compile(CELL, "<cell>", "exec"), ns)
    fj.register_algorithm("cellprog48", ns["alg"])
    small = dict(dataset="synthetic", model="mlp", clients=4, clients_per_round=2, synthetic_train=80,
                 synthetic_test=40, batch_size=20, progress=False)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        fj.run(algorithm="cellprog48", out=str(tmp_path / "r"), rounds=1, **small)
    lines = [str(w.message) for w in said if "code digest" in str(w.message)]
    assert lines and "covers the code of final, init and step and 1 global value (SCALE)" in lines[0], lines
    ns["SCALE"] = 3.0
    with pytest.raises(fj.ConfigError, match=r"its code changed since the checkpoint .*the global SCALE"):
        fj.run(algorithm="cellprog48", out=str(tmp_path / "r"), rounds=2, resume=True, **small)
