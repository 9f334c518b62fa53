"""The client-side fair and personalised baselines of issue #37 item 8 (examples/propfair.py, fedper.py,
fedrep.py, apfl.py, fedbn.py, moon.py), each against two rounds computed by hand in float64 on a tiny
problem; the rule for clients never sampled (their personal model is the global one); FedBN's per-client
statistics through a checkpoint and a resume; and each example through the CLI as its docstring says.

The tiny problem: three clients with a few 3-feature examples each (mixed labels, the test split = the
train split), a 3-4-3 tanh network with fixed initial weights (``Dense_0``, ``Dense_1``; FedBN's with a
``BatchNorm_0`` between them), and a batch at least as large as a client: every local step is one full
batch, whatever the shuffle, so ``local_epochs`` is the number of steps."""

import sys
from pathlib import Path

import chex
import flax.linen as nn
import jax.numpy as jnp
import numpy as np
import pytest

import fedalf_jax as fj
from fedalf_jax.cli import main

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

COUNTS = [4, 3, 5]  # n_i: p_i = n_i / 12
BN_COUNTS = [4, 4, 4]  # FedBN: no padding (a padded row would enter the batch statistics)
B = 5
_rng = np.random.default_rng(7)
X = _rng.normal(size=(sum(COUNTS), 3))
Y = np.array([0, 1, 2, 0, 1, 1, 2, 2, 0, 2, 1, 0])
K0 = _rng.normal(size=(3, 4)) * 0.8
B0 = _rng.normal(size=4) * 0.1
K1 = _rng.normal(size=(4, 3)) * 0.8
B1 = _rng.normal(size=3) * 0.1
BN_EPS, BN_MOM = 1e-5, 0.9


def _fixed(a):
    return lambda key, shape, dtype=jnp.float32: jnp.asarray(a, dtype)


class Tiny(nn.Module):
    """x → tanh(x K0 + b0) = h → h K1 + b1; ``features``: returns (logits, h) (MOON's z); ``bn``: a
    BatchNorm between the first layer and the tanh (FedBN)."""
    num_classes: int = 3
    features: bool = False
    bn: bool = False

    @nn.compact
    def __call__(self, x, train: bool = False):
        a = nn.Dense(4, kernel_init=_fixed(K0), bias_init=_fixed(B0))(x)
        if self.bn:
            a = nn.BatchNorm(use_running_average=not train, momentum=BN_MOM, epsilon=BN_EPS)(a)
        h = jnp.tanh(a)
        logits = nn.Dense(3, kernel_init=_fixed(K1), bias_init=_fixed(B1))(h)
        return (logits, h) if self.features else logits


def _lists(counts):
    starts = np.cumsum([0] + list(counts))
    return [np.arange(starts[i], starts[i + 1]) for i in range(len(counts))]


_REGISTERED = []


def _register():
    """Once per process: registering takes the code's digest anew (it covers every file under tests/, which
    may change meanwhile), and a resumed run must find the digest it started with."""
    if _REGISTERED:
        return
    _REGISTERED.append(True)
    x = X.astype(np.float32)
    fj.register_dataset("tiny_mixed", x, Y, x, Y, num_classes=3, clients=(_lists(COUNTS), _lists(COUNTS)))
    fj.register_dataset("tiny_even", x, Y, x, Y, num_classes=3, clients=(_lists(BN_COUNTS), _lists(BN_COUNTS)))
    fj.register_model("tiny", lambda num_classes: Tiny())
    fj.register_model("tiny_feat", lambda num_classes: Tiny(features=True))
    fj.register_model("tiny_bn", lambda num_classes: Tiny(bn=True))


def _cfg(algorithm, model="tiny", dataset="tiny_mixed", **kw):
    _register()
    base = dict(algorithm=algorithm, dataset=dataset, partition="given", model=model, clients=3, clients_per_round=3,
                rounds=2, eval_every=1, local_epochs=2, batch_size=B, lr=0.3, lr_decay=1.0, server_lr=0.8)
    return fj.Config(**{**base, **kw})


# ---- the network, its loss and its gradient, by hand in float64 ------------------------------------------

def _theta0(bn=False):
    p = {"W0": K0.copy(), "b0": B0.copy(), "W1": K1.copy(), "b1": B1.copy()}
    if bn:
        p.update(g=np.ones(4), beta=np.zeros(4))
    return p


def _flax(p):
    """Our dict {W0, b0, W1, b1[, g, beta]} as the model's params."""
    out = {"Dense_0": {"kernel": p["W0"], "bias": p["b0"]}, "Dense_1": {"kernel": p["W1"], "bias": p["b1"]}}
    if "g" in p:
        out["BatchNorm_0"] = {"scale": p["g"], "bias": p["beta"]}
    return out


def _rows(i, counts=COUNTS):
    r = _lists(counts)[i]
    return X[r], Y[r]


def _softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _forward(p, x, stats=None, train=False):
    """Logits, h and what the backward pass needs; with BatchNorm: the batch's (train) or the running
    (``stats``) mean and variance."""
    a = x @ p["W0"] + p["b0"]
    cache = {"x": x}
    if "g" in p:
        mu, var = (a.mean(0), a.var(0)) if train else stats
        xh = (a - mu) / np.sqrt(var + BN_EPS)
        cache.update(xh=xh, var=var, mu=mu)
        a = xh * p["g"] + p["beta"]
    h = np.tanh(a)
    cache["h"] = h
    return h @ p["W1"] + p["b1"], h, cache


def _ce(logits, y):
    z = logits - logits.max(axis=-1, keepdims=True)
    return float(np.mean(np.log(np.exp(z).sum(-1)) - z[np.arange(len(y)), y]))


def _backward(p, cache, dlogits, dh_extra=0.0):
    """The gradient of a loss whose gradient in the logits is ``dlogits`` (and in h ``dh_extra``)."""
    h = cache["h"]
    g = {"W1": h.T @ dlogits, "b1": dlogits.sum(0)}
    da = (dlogits @ p["W1"].T + dh_extra) * (1 - h ** 2)
    if "g" in p:  # through the BatchNorm in training mode
        xh, n = cache["xh"], len(h)
        g["g"], g["beta"] = (da * xh).sum(0), da.sum(0)
        dxh = da * p["g"]
        da = (n * dxh - dxh.sum(0) - xh * (dxh * xh).sum(0)) / (n * np.sqrt(cache["var"] + BN_EPS))
    g["W0"], g["b0"] = cache["x"].T @ da, da.sum(0)
    return g


def _ce_grad(p, x, y, stats=None):
    """f = mean cross-entropy (training pass) and ∇f."""
    logits, _, cache = _forward(p, x, stats, train=True)
    return _ce(logits, y), _backward(p, cache, (_softmax(logits) - np.eye(3)[y]) / len(y))


def _sub(p, g, s=1.0):
    return {k: p[k] - s * g[k] for k in p}


def _fedavg(theta, ws, counts=COUNTS, glr=0.8):
    pw = np.asarray(counts) / sum(counts)
    return {k: theta[k] - glr * sum(pw[i] * (theta[k] - ws[i][k]) for i in range(3)) for k in theta}


def _loss_at(p, i, stats=None, counts=COUNTS):
    x, y = _rows(i, counts)
    return _ce(_forward(p, x, stats)[0], y)


def _acc_at(p, i, stats=None, counts=COUNTS):
    x, y = _rows(i, counts)
    return float(np.mean(np.argmax(_forward(p, x, stats)[0], -1) == y))


def _close(got, want, atol=2e-5):
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=0, atol=atol)


def _close_tree(got, want, atol=2e-5):
    chex.assert_trees_all_close(jax_tree(got), jax_tree(want), atol=atol)


def jax_tree(t):
    return {k: jax_tree(v) for k, v in t.items()} if isinstance(t, dict) else np.asarray(t, np.float64)


def _rows_of(res, col):
    return res.metrics[col].to_numpy(np.float64)


# ---- PropFair ----------------------------------------------------------------------------------------

def _propfair_by_hand(m, eps, rounds=2, lr=0.3, steps=2):
    theta, branches = _theta0(), []
    for _ in range(rounds):
        ws = []
        for i in range(3):
            w = dict(theta)
            for _ in range(steps):
                f, g = _ce_grad(w, *_rows(i))
                gap = m - f
                scale = 1 / gap if gap >= eps else 1 / eps + (eps - gap) / eps ** 2  # d loss / d f
                branches.append(gap >= eps)
                w = _sub(w, g, lr * scale)
            ws.append(w)
        theta = _fedavg(theta, ws)
    return theta, branches


@pytest.mark.parametrize("m", [3.0, 1.6])
def test_propfair_matches_two_rounds_by_hand(m):
    """−log(M − f) per batch (M = 3: every step on the log); M = 1.6: steps below M − f = ε take the
    quadratic continuation, the others the log."""
    res = fj.run(_cfg("examples.propfair:propfair", hp={"M": m, "eps": 0.2}), progress=False)
    theta, branches = _propfair_by_hand(m, 0.2)
    assert all(branches) if m == 3.0 else (not all(branches) and any(branches))
    _close_tree(res.model["params"], _flax(theta))
    plain = fj.run(_cfg("fedavg"), progress=False)  # and it is not FedAvg's
    assert np.abs(np.asarray(plain.model["params"]["Dense_1"]["bias"]) - theta["b1"]).max() > 1e-3


# ---- FedPer and FedRep ----------------------------------------------------------------------------------

HEAD = ("W1", "b1")


def _split_by_hand(head_steps=None, rounds=2, lr=0.3, steps=3):
    """FedPer (head_steps None: every step trains everything) or FedRep (the head alone for head_steps steps,
    then the body alone); each client's head kept; the body FedAvg'd. Returns θ, heads and each evaluation's
    personal (acc, loss) per client."""
    theta = _theta0()
    heads = [{k: theta[k].copy() for k in HEAD} for _ in range(3)]
    evals = [[(_acc_at({**theta, **heads[i]}, i), _loss_at({**theta, **heads[i]}, i)) for i in range(3)]]
    for _ in range(rounds):
        ws = []
        for i in range(3):
            w = {**theta, **heads[i]}
            for k in range(steps):
                _, g = _ce_grad(w, *_rows(i))
                if head_steps is not None:
                    g = {q: g[q] * ((k < head_steps) == (q in HEAD)) for q in g}
                w = _sub(w, g, lr)
            ws.append(w)
            heads[i] = {k: w[k] for k in HEAD}
        new = _fedavg(theta, ws)
        theta = {k: (theta[k] if k in HEAD else new[k]) for k in theta}  # the head's Δ is 0
        evals.append([(_acc_at({**theta, **heads[i]}, i), _loss_at({**theta, **heads[i]}, i)) for i in range(3)])
    return theta, heads, evals


@pytest.mark.parametrize("name, head_steps", [("fedper", None), ("fedrep", 2)])
def test_fedper_and_fedrep_match_two_rounds_by_hand(name, head_steps):
    """θ (the body FedAvg'd, the head θ_0's), each client's head (its state) and each evaluation's personal
    loss and accuracy (the current global body with the client's own head)."""
    hp = {} if head_steps is None else {"head_steps": float(head_steps)}
    res = fj.run(_cfg(f"examples.{name}:{name}", local_epochs=3, hp=hp), progress=False)
    theta, heads, evals = _split_by_hand(head_steps)
    _close_tree(res.model["params"], _flax(theta))
    assert np.abs(theta["W0"] - K0).max() > 1e-3 and np.abs(theta["W1"] - K1).max() == 0  # the body moved, not the head
    assert np.abs(heads[0]["W1"] - heads[2]["W1"]).max() > 1e-3
    want_loss = [np.mean([l for _, l in e]) for e in evals]
    want_acc = [np.mean([a for a, _ in e]) for e in evals]
    _close(_rows_of(res, "personal_test_loss"), want_loss)
    _close(_rows_of(res, "personal_acc"), want_acc, atol=1e-6)
    assert _rows_of(res, "personal_test_loss")[-1] < _rows_of(res, "test_loss")[-1] - 0.05


def test_fedper_heads_are_the_client_states(tmp_path):
    res = fj.run(_cfg("examples.fedper:fedper", local_epochs=3), out=str(tmp_path / "p"), progress=False)
    _, heads, _ = _split_by_hand(None)
    want = {"Dense_1": {"kernel": np.stack([h["W1"] for h in heads]), "bias": np.stack([h["b1"] for h in heads])}}
    _close_tree(res.client_states, want)


def test_fedrep_head_steps_is_traced_and_swept(tmp_path):
    """head_steps 0 (the body alone) and 3 (the head alone, the body frozen: θ stays θ_0) in one sweep, each
    as by hand."""
    sw = fj.sweep(_cfg("examples.fedrep:fedrep", local_epochs=3), out=tmp_path / "s",
                  grid={"hp.head_steps": [0.0, 3.0]}, progress=False)
    for r, hs in zip(sw, (0, 3)):
        theta, _, evals = _split_by_hand(hs)
        _close_tree(r.model["params"], _flax(theta))
        _close(_rows_of(r, "personal_test_loss"), [np.mean([l for _, l in e]) for e in evals])
    _close_tree(sw[1].model["params"], _flax(_theta0()), atol=0)


# ---- APFL ---------------------------------------------------------------------------------------------

def _mix(a, v, w):
    return {k: a * v[k] + (1 - a) * w[k] for k in v}


def _apfl_by_hand(rounds=2, lr=0.3, steps=2, alpha0=0.5, sel=None, glr=0.8):
    """Each step: w by ∇f(w); v by α ∇f(m), α by ⟨v − w, ∇f(m)⟩ at the mixture m = α v + (1 − α) w (all at
    the step's start); α clipped to [0, 1] after the round. ``sel``: the clients of each round (all)."""
    theta = _theta0()
    v, alpha = [dict(theta) for _ in range(3)], [alpha0] * 3
    evals = [[_loss_at(_mix(alpha[i], v[i], theta), i) for i in range(3)]]
    raw = []
    for t in range(rounds):
        clients = range(3) if sel is None else sel[t]
        ws = {}
        for i in clients:
            w = dict(theta)
            for _ in range(steps):
                x, y = _rows(i)
                _, gw = _ce_grad(w, x, y)
                _, gm = _ce_grad(_mix(alpha[i], v[i], w), x, y)
                da = sum(float(np.sum((v[i][k] - w[k]) * gm[k])) for k in gm)
                v[i] = _sub(v[i], gm, lr * alpha[i])
                alpha[i] = alpha[i] - lr * da
                w = _sub(w, gw, lr)
            raw.append(alpha[i])
            alpha[i] = float(np.clip(alpha[i], 0, 1))
            ws[i] = w
        pw = np.asarray([COUNTS[i] for i in ws], float)
        pw /= pw.sum()
        theta = {k: theta[k] - glr * sum(p * (theta[k] - w[k]) for p, w in zip(pw, ws.values())) for k in theta}
        evals.append([_loss_at(_mix(alpha[i], v[i], theta), i) for i in range(3)])
    return theta, v, alpha, evals, raw


@pytest.mark.parametrize("alpha0, lr", [(0.5, 0.3), (0.95, 2.0)])
def test_apfl_matches_two_rounds_by_hand(tmp_path, alpha0, lr):
    """θ (FedAvg), each client's v_i and α_i (its state) and the personal loss at α v + (1 − α) θ_t; with
    α_0 = 0.95 and η = 2, α leaves [0, 1] and is clipped."""
    from examples.apfl import apfl
    name = f"apfl_{alpha0}"
    fj.register_algorithm(name, lambda: apfl(alpha0=alpha0))
    res = fj.run(_cfg(name, lr=lr), out=str(tmp_path / "a"), progress=False)
    theta, v, alpha, evals, raw = _apfl_by_hand(lr=lr, alpha0=alpha0)
    _close_tree(res.model["params"], _flax(theta), atol=2e-5 * lr)
    st = res.client_states
    _close(st["alpha"], alpha, atol=2e-5 * lr)
    _close_tree(st["v"], {k: {q: np.stack([_flax(vi)[k][q] for vi in v]) for q in ("kernel", "bias")}
                          for k in ("Dense_0", "Dense_1")}, atol=3e-5 * lr)
    _close(_rows_of(res, "personal_test_loss"), [np.mean(e) for e in evals], atol=3e-5 * lr)
    if alpha0 == 0.95:
        assert max(raw) > 1.0 and 1.0 in alpha  # clipped
    else:
        assert 0 < min(alpha) and max(alpha) < 1 and np.ptp(alpha) > 1e-3


# ---- the rule for clients never sampled -----------------------------------------------------------------

def test_a_client_never_sampled_is_evaluated_with_the_global_model(tmp_path):
    """APFL, one client per round, one round: the sampled client's personal model is its mixture; the two
    others, never sampled, are evaluated with θ_1 (not with their initial α_0 v_0 + (1 − α_0) θ_1 = ½θ_0 + ½θ_1);
    at round 0 every personal metric equals the global one."""
    res = fj.run(_cfg("examples.apfl:apfl", clients_per_round=1, rounds=1), out=str(tmp_path / "n"), progress=False)
    sampled = [i for i in range(3) if abs(float(res.client_states["alpha"][i]) - 0.5) > 1e-7]
    assert len(sampled) == 1
    s = sampled[0]
    theta, v, alpha, evals, _ = _apfl_by_hand(rounds=1, sel=[[s]])
    _close_tree(res.model["params"], _flax(theta))
    never = [i for i in range(3) if i != s]
    want = np.mean([evals[1][s]] + [_loss_at(theta, i) for i in never])
    stale = np.mean([evals[1][s]] + [_loss_at(_mix(0.5, _theta0(), theta), i) for i in never])
    assert abs(want - stale) > 1e-3
    _close(_rows_of(res, "personal_test_loss")[1], want)
    want_acc = np.mean([_acc_at(_mix(alpha[s], v[s], theta), s)] + [_acc_at(theta, i) for i in never])
    _close(_rows_of(res, "personal_acc")[1], want_acc, atol=1e-6)
    row0 = res.metrics.iloc[0]
    assert row0["personal_acc"] == row0["mean_acc"]
    assert row0["personal_test_loss"] == pytest.approx(row0["test_loss"], abs=1e-6)


# ---- FedBN --------------------------------------------------------------------------------------------

BN = ("g", "beta")


def _fedbn_by_hand(rounds=2, lr=0.3, steps=2):
    """FedAvg outside the BatchNorm; each client's BatchNorm scale/bias and running statistics its own."""
    theta = _theta0(bn=True)
    own = [{k: theta[k].copy() for k in BN} for _ in range(3)]
    stats = [(np.zeros(4), np.ones(4)) for _ in range(3)]
    gstats = (np.zeros(4), np.ones(4))
    pw = np.full(3, 1 / 3)

    def evaluate():
        return ([_loss_at({**theta, **own[i]}, i, stats[i], BN_COUNTS) for i in range(3)],
                [_loss_at(theta, i, gstats, BN_COUNTS) for i in range(3)])
    evals = [evaluate()]
    for _ in range(rounds):
        ws = []
        for i in range(3):
            w = {**theta, **own[i]}
            x, y = _rows(i, BN_COUNTS)
            for _ in range(steps):
                _, g = _ce_grad(w, x, y)
                a = x @ w["W0"] + w["b0"]  # the step's batch statistics (at the step's start)
                stats[i] = tuple(BN_MOM * s + (1 - BN_MOM) * b for s, b in zip(stats[i], (a.mean(0), a.var(0))))
                w = _sub(w, g, lr)
            ws.append(w)
            own[i] = {k: w[k] for k in BN}
        new = _fedavg(theta, ws, BN_COUNTS)
        theta = {k: (theta[k] if k in BN else new[k]) for k in theta}
        gstats = tuple(sum(pw[i] * stats[i][j] for i in range(3)) for j in range(2))
        evals.append(evaluate())
    return theta, own, stats, gstats, evals


def _bn_cfg(**kw):
    return _cfg("examples.fedbn:fedbn", model="tiny_bn", dataset="tiny_even", batch_size=4, **kw)


def _checkpoint(path):
    with np.load(path / "checkpoint.npz") as z:
        return {k: z[k] for k in z.files}


def test_fedbn_matches_two_rounds_by_hand(tmp_path):
    """θ outside the BatchNorm FedAvg'd, its scale and bias θ_0's; each client's own BatchNorm params (its
    state) and running statistics (kept per client); the global statistics their p-weighted mean; the
    personal loss (θ_t with the client's own BatchNorm) and the global one (θ_t with the mean statistics)."""
    res = fj.run(_bn_cfg(), out=str(tmp_path / "b"), progress=False)
    theta, own, stats, gstats, evals = _fedbn_by_hand()
    _close_tree(res.model["params"], _flax(theta))
    _close_tree(res.model["batch_stats"], {"BatchNorm_0": {"mean": gstats[0], "var": gstats[1]}})
    _close_tree(res.client_states, {"BatchNorm_0": {"scale": np.stack([o["g"] for o in own]),
                                                    "bias": np.stack([o["beta"] for o in own])}})
    kept = res._checkpoint.clients["batch_stats"]["BatchNorm_0"]
    _close(kept["mean"], np.stack([s[0] for s in stats]))
    _close(kept["var"], np.stack([s[1] for s in stats]))
    assert np.abs(stats[0][0] - stats[1][0]).max() > 1e-2  # the clients' statistics differ
    _close(_rows_of(res, "personal_test_loss"), [np.mean(p) for p, _ in evals])
    _close(_rows_of(res, "test_loss"), [np.mean(g) for _, g in evals])


def test_fedbn_statistics_survive_a_checkpoint_and_resume_bit_for_bit(tmp_path):
    """Two rounds, then --resume to four (one client of three per round, so the kept statistics matter),
    against four in one go: every array of the checkpoint (θ, global and per-client statistics, the clients'
    BatchNorm params, which were sampled) and the metrics equal bit for bit."""
    kw = dict(clients_per_round=1, eval_every=1)
    fj.run(_bn_cfg(rounds=2, **kw), out=str(tmp_path / "r"), progress=False)
    resumed = fj.run(_bn_cfg(rounds=4, **kw), out=str(tmp_path / "r"), progress=False, resume=True)
    whole = fj.run(_bn_cfg(rounds=4, **kw), out=str(tmp_path / "w"), progress=False)
    a, b = _checkpoint(tmp_path / "r"), _checkpoint(tmp_path / "w")
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    kept = fj.load(tmp_path / "r")._checkpoint.clients  # what the resumed run kept per client
    chex.assert_trees_all_equal(kept, whole._checkpoint.clients)
    mean = np.asarray(kept["batch_stats"]["BatchNorm_0"]["mean"])
    assert mean.shape == (3, 4) and np.abs(mean).max() > 1e-3  # statistics were trained and kept
    assert any(np.array_equal(a[k], np.asarray(kept["batch_stats"]["BatchNorm_0"]["var"])) for k in a)  # in the file
    cols = [c for c in whole.metrics.columns if c not in ("seconds_per_round", "train_loss")]
    np.testing.assert_array_equal(fj.load(tmp_path / "r").metrics[cols].to_numpy(), whole.metrics[cols].to_numpy())
    assert list(resumed.metrics["round"]) == [3, 4]  # the resumed call ran rounds 3 and 4 only


# ---- MOON ---------------------------------------------------------------------------------------------

def _cos_grad(z, c):
    """cos(z_r, c_r) per row and its gradient in z."""
    nz, nc = np.linalg.norm(z, axis=1, keepdims=True), np.linalg.norm(c, axis=1, keepdims=True)
    cos = np.sum(z * c, 1, keepdims=True) / (nz * nc)
    return cos[:, 0], c / (nz * nc) - cos * z / nz ** 2


def _moon_by_hand(mu, tau, rounds=2, lr=0.3, steps=2):
    theta = _theta0()
    prev = [dict(theta) for _ in range(3)]
    cons = []
    for _ in range(rounds):
        ws = []
        for i in range(3):
            w = dict(theta)
            x, y = _rows(i)
            zg, zp = _forward(theta, x)[1], _forward(prev[i], x)[1]
            for _ in range(steps):
                logits, z, cache = _forward(w, x, train=True)
                (cp, dp), (cn, dn) = _cos_grad(z, zg), _cos_grad(z, zp)
                pos, neg = cp / tau, cn / tau
                sp = np.exp(pos) / (np.exp(pos) + np.exp(neg))
                cons.append(float(np.mean(np.logaddexp(pos, neg) - pos)))
                dz = mu / len(y) * (((sp - 1) / tau)[:, None] * dp + ((1 - sp) / tau)[:, None] * dn)
                g = _backward(w, cache, (_softmax(logits) - np.eye(3)[y]) / len(y), dz)
                w = _sub(w, g, lr)
            ws.append(w)
            prev[i] = w
        theta = _fedavg(theta, ws)
    return theta, prev, cons


def test_moon_matches_two_rounds_by_hand(tmp_path):
    """Round 1: the previous model is θ_0 = θ_t, so the contrastive term is log 2 with no gradient (FedAvg's
    round); round 2 pulls z towards θ_1's and away from each client's round-1 model. θ and every client's
    previous model (its state) as by hand."""
    mu, tau = 2.0, 0.5
    res = fj.run(_cfg("examples.moon:moon", model="tiny_feat", hp={"mu_con": mu, "tau": tau}),
                 out=str(tmp_path / "m"), progress=False)
    theta, prev, cons = _moon_by_hand(mu, tau)
    assert cons[0] == pytest.approx(np.log(2)) and abs(cons[-1] - np.log(2)) > 1e-4
    _close_tree(res.model["params"], _flax(theta))
    _close_tree(res.client_states, {k: {q: np.stack([_flax(p)[k][q] for p in prev]) for q in ("kernel", "bias")}
                                    for k in ("Dense_0", "Dense_1")})
    theta0, _, _ = _moon_by_hand(0.0, tau)  # μ = 0: FedAvg, which it is not
    assert max(np.abs(theta[k] - theta0[k]).max() for k in theta) > 1e-4


# ---- each example from the CLI, as its docstring says (on small synthetic data) ----------------------------

@pytest.mark.parametrize("name, model", [("propfair", "mlp"), ("fedper", "mlp"), ("fedrep", "mlp"), ("apfl", "mlp"),
                                         ("fedbn", "cnn_bn"), ("moon", "examples.moon:model")])
def test_example_runs_from_the_cli(tmp_path, name, model):
    opts = ["--dataset", "synthetic", "--model", model, "--clients", "4", "--clients-per-round", "2", "--rounds", "2",
            "--eval-every", "2", "--synthetic-train", "80", "--synthetic-test", "40", "--batch-size", "20",
            "--no-progress"]
    # the CLI's main in this process (examples/ is on the path, above); a fresh process's import of examples.NAME
    # is tested by tests/helpers.cli_resume_equals_one_go
    assert main(["run", "--algorithm", f"examples.{name}:{name}", *opts, "--out", str(tmp_path / "cli")]) == 0
    res = fj.load(tmp_path / "cli")
    assert res.status == "done" and list(res.metrics["round"]) == [0, 2]
    assert np.isfinite(res.metrics["test_loss"]).all()
    assert ("personal_acc" in res.metrics) == (name not in ("propfair", "moon"))
