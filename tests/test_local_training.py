"""Issue 56 item 2, one client concept: ``fj.local_training(...)`` is the public factory of the local-training
client (a ``fj.ClientProgram``), its pieces explicit functions of ``ctx``; the 0.1 ``fj.Algorithm`` client fields
still run, with one warning line naming the replacement. (That the built-ins and examples, now written with it,
give the same bits is experiments/probes/builtin_hashes.py's, 23 cases.)"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedalf_jax as fj
from fedalf_jax.runtime.notices import Notice
from test_client_program import MAPS, check_facts
from test_examples_client import _cfg, jax_tree


def _state(params):
    z = jnp.zeros((), jnp.int32)
    return {"counts": jnp.zeros((3,), jnp.int32), "index": z - 1, "n": z, "steps": z, "seen": z}


def _facts_upload(ctx, w, w_tilde):
    f = ctx.facts
    new = {"counts": f.label_counts, "index": f.index, "n": f.n, "steps": f.steps, "seen": ctx.state["seen"] + 1}
    return jax.tree_util.tree_map(lambda a, b: a - b, ctx.theta, w_tilde), new


@pytest.mark.parametrize("client_map", MAPS)
def test_the_pieces_see_the_clients_ctx(tmp_path, client_map):
    """``upload(ctx, w, w_tilde)`` reads the client's facts from ``ctx`` (no signature read): two rounds of 2 of 3
    clients, each sampled client's state holds its label counts counted by hand, its index, n and steps."""
    fj.register_algorithm("lt_facts", lambda: fj.Algorithm(
        "lt_facts", server=fj.algorithms.weighted_mean_server, client=fj.local_training(upload=_facts_upload),
        init_client_state=_state))
    res = fj.run(_cfg("lt_facts", clients_per_round=2, batch_size=2, client_map=client_map),
                 out=str(tmp_path / "f"), progress=False)
    assert check_facts(jax_tree(res.client_states))


def _gap_state(params):
    return jnp.zeros((), jnp.float32)


def _gap_upload(ctx, w, w_tilde):
    """The state: Σ (w − w̃)², how far the mechanism's output is from the trained model."""
    gap = sum(jnp.sum(jnp.square(a - b)) for a, b in zip(jax.tree_util.tree_leaves(w), jax.tree_util.tree_leaves(w_tilde)))
    return jax.tree_util.tree_map(lambda a, b: a - b, ctx.theta, w_tilde), gap


@pytest.mark.parametrize("ldp", ["none", "adaptive"])
def test_the_upload_gets_the_noised_model_beside_the_trained_one(tmp_path, ldp):
    """``upload``'s ``w_tilde`` is the mechanism's output and ``w`` the trained model (SCAFFOLD option II's and
    FedPer's upload is computed from w̃): without a mechanism they are one (gap 0 for every client), under LDP
    every sampled client's differ."""
    fj.register_algorithm("lt_gap", lambda: fj.Algorithm(
        "lt_gap", server=fj.algorithms.weighted_mean_server, client=fj.local_training(upload=_gap_upload),
        init_client_state=_gap_state, private_upload=True))
    res = fj.run(_cfg("lt_gap", rounds=1, ldp=ldp, epsilon=2.0), out=str(tmp_path / ldp), progress=False)
    gap = np.asarray(res.client_states, np.float64)
    assert gap.shape == (3,)
    if ldp == "none":
        assert np.all(gap == 0.0)
    else:
        assert np.all(gap > 1e-6)


def test_the_old_fields_warn_once_naming_the_replacement():
    """An algorithm written with the 0.1 fields builds (and runs: tests/test_default_program.py) with one Notice
    line naming ``fj.local_training`` and the pieces it takes; the built-ins and every example give none."""
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        fj.Algorithm("old", server=fj.algorithms.weighted_mean_server, upload=fj.algorithms.model_upload,
                     penalty=fj.algorithms.prox_penalty, local_train=False)
    notes = [w for w in rec if issubclass(w.category, Notice)]
    assert len(notes) == 1 and len(str(notes[0].message).splitlines()) == 1
    assert ("client=fj.local_training(upload=, penalty=, full_gradient=True) with functions of ctx"
            in str(notes[0].message))
    assert notes[0].filename == __file__  # it points at the user's line
    import importlib
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in ("fedavg", "fedprox", "qfedavg", "fedadmm"):
            fj.algorithms.BUILTINS[name]()
        for name in ("fedlf", "fedalf"):
            fj.algorithms.BUILTINS[name]({"w": 0})
        fj.algorithms.fedlf({"w": 0}, client_grad="local")
        for mod in ("afl", "apfl", "builtins", "ditto", "dp_fedavg", "fedadam", "fedavgm", "fedbn", "feddecorr",
                    "feddyn", "fedfv", "fedgkd", "fedmgda", "fednova", "fedper", "fedrep", "moon", "propfair",
                    "scaffold", "term"):
            m = importlib.import_module(f"examples.{mod}")
            alg = getattr(m, mod if mod != "builtins" else "fedadmm")()
            assert alg.client.training is not None and alg.upload is None and alg.penalty is None, mod


def test_local_training_refuses_what_it_cannot_run():
    """One line each: a personal model without an upload to keep it, pieces beside ``full_gradient=True``, a piece
    that is not a function, and the program's functions called by hand (the round builds it per client)."""
    with pytest.raises(fj.ConfigError, match=r"a personal model needs an upload\(ctx, w, w_tilde, v\)"):
        fj.local_training(personal=fj.Personal(start=lambda ctx: ctx.theta))
    with pytest.raises(fj.ConfigError, match=r"full_gradient=True\) trains nothing locally, so penalty"):
        fj.local_training(full_gradient=True, penalty=lambda ctx: None)
    with pytest.raises(fj.ConfigError, match="fj.local_training: upload is a int; expected a function of ctx"):
        fj.local_training(upload=3)
    with pytest.raises(fj.ConfigError, match="run by the round"):
        fj.local_training().init(None)
    with pytest.raises(fj.ConfigError, match="has a client program and also penalty"):  # a program by hand
        fj.Algorithm("both", server=fj.algorithms.weighted_mean_server,
                     client=fj.ClientProgram(lambda ctx: (), None, lambda c, ctx: None),
                     penalty=fj.algorithms.prox_penalty)
    # 0.1 code replacing a field of a built-in (dataclasses.replace(fedavg(), penalty=...)): the field takes the
    # piece's place, as it did
    from fedalf_jax.sim.default_client import training_of
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        both = fj.Algorithm("both", server=fj.algorithms.weighted_mean_server, client=fj.local_training(),
                            penalty=fj.algorithms.prox_penalty)
    assert training_of(both).penalty is not None and training_of(both).upload is None


def test_the_cli_gives_the_old_fields_one_line(tmp_path):
    """From the command line, an algorithm written with the 0.1 fields runs and says so once: the builds that
    ignore warnings (the code digest's, the privacy check's) do not use up its one line."""
    import subprocess
    import sys
    from pathlib import Path
    from fedalf_jax.sim.algorithms import DEPRECATED
    (tmp_path / "old56.py").write_text(
        "import jax\nimport fedalf_jax as fj\n\n\ndef upload(theta, w, w_tilde, state, hp, lr_t):\n"
        "    return jax.tree_util.tree_map(lambda t, u: t - u, theta, w_tilde), state\n\n\n"
        "def old():\n    return fj.Algorithm('old56', server=fj.algorithms.weighted_mean_server, upload=upload)\n")
    root = Path(__file__).resolve().parents[1]
    env = {**__import__("os").environ, "PYTHONPATH": f"{tmp_path}:{root}"}
    p = subprocess.run([sys.executable, "-m", "fedalf_jax.cli", "run", "--algorithm", "old56:old", "--dataset",
                        "synthetic", "--model", "mlp", "--clients", "4", "--clients-per-round", "2", "--rounds", "1",
                        "--synthetic-train", "80", "--synthetic-test", "40", "--no-progress", "--out",
                        str(tmp_path / "r")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if DEPRECATED in ln]
    assert len(lines) == 1 and "old56.py" in lines[0] and "fj.local_training(upload=)" in lines[0], p.stderr
