"""A privacy mechanism that a run's record states is applied to what a user's algorithm uploads, or the run
is refused in one line before anything is written (issue 36, item 1).

A user's algorithm with ``local_train=False`` uploads ∇f_i(θ_t) and never calls ``upload``, so no mechanism
touches it: refused like the built-in FedLF ``client_grad=full``, from the CLI and from ``fj.run``, whether
the algorithm is a ``module:attribute``, a registered factory, an ``Algorithm`` given directly or a factory
that needs the model's layers. An accepted algorithm's upload really receives the perturbed model: its
own client metric ``gap = Σ|w̃ − w|`` is exactly 0 without a mechanism and positive with each, and its
run's metrics differ from the run without one. The expectations are literal (exit status, the one line,
exact zeros), not read from the code under test.
"""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedalf_jax as fj
from fedalf_jax.cli import main
from helpers import without_deprecation

GRADALG = '''import jax
import fedalf_jax as fj


def server(s):
    import jax.numpy as jnp
    g = jax.tree_util.tree_map(lambda d: jnp.mean(d, axis=0), s.deltas)
    return jax.tree_util.tree_map(lambda t, d: t - 0.1 * d, s.theta, g), s.sstate, {}


def upload(theta, w, w_tilde, state, hp, lr_t):
    return jax.tree_util.tree_map(lambda t, x: t - x, theta, w_tilde), state


def gradalg():
    return fj.Algorithm("gradalg", server=server, upload=upload, local_train=False, private_upload=True)
'''

SMALL = dict(dataset="synthetic", synthetic_train=200, synthetic_test=80, model="mlp", clients=2,
             clients_per_round=2, partition="iid", rounds=2, eval_every=1)
ARGV = ["--dataset", "synthetic", "--synthetic-train", "200", "--synthetic-test", "80", "--model", "mlp",
        "--clients", "2", "--clients-per-round", "2", "--partition", "iid", "--rounds", "2", "--eval-every", "1",
        "--no-progress"]


def _server(s):
    mean = jax.tree_util.tree_map(lambda d: jnp.mean(d, axis=0), s.deltas)
    return jax.tree_util.tree_map(lambda t, d: t - d, s.theta, mean), s.sstate, {}


def _upload(theta, w, w_tilde, state, hp, lr_t):
    return jax.tree_util.tree_map(lambda t, x: t - x, theta, w_tilde), state


def _grad_alg():
    return fj.Algorithm("grad", server=_server, upload=_upload, local_train=False, private_upload=True)


@pytest.fixture
def grad_module(tmp_path):
    (tmp_path / "mine_grad.py").write_text(GRADALG)
    return tmp_path


def test_cli_refuses_a_mechanism_on_an_algorithm_without_local_training(grad_module):
    out = grad_module / "run"
    p = subprocess.run([sys.executable, "-m", "fedalf_jax.cli", "run", "--algorithm", "mine_grad:gradalg", *ARGV,
                        "--ldp", "adaptive", "--epsilon", "0.5", "--out", str(out)],
                       cwd=grad_module, capture_output=True, text=True, timeout=300)
    err = without_deprecation(p.stderr).strip()
    assert p.returncode == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
    for needle in ("'mine_grad:gradalg'", "local_train=False", "set local_train=True", "ldp='none'"):
        assert needle in err, err
    assert not out.exists()  # nothing written


@pytest.mark.parametrize("mech", [dict(ldp="ldp_fl"), dict(dp="gaussian"), dict(ldp="adaptive")])
def test_fj_run_refuses_it_for_every_kind_of_user_algorithm(tmp_path, monkeypatch, grad_module, mech):
    monkeypatch.chdir(grad_module)
    fj.register_algorithm("grad-factory", _grad_alg)
    fj.register_algorithm("grad-given", _grad_alg())  # an Algorithm given directly
    for name in ("mine_grad:gradalg", "grad-factory", "grad-given"):
        with pytest.raises(fj.ConfigError, match=r"^(ldp|dp)='[a-z_]+' cannot be used with algorithm .*local_train="
                                                  r"False.*set local_train=True"):
            fj.run(algorithm=name, epsilon=0.5, out=str(tmp_path / name), progress=False, **SMALL, **mech)
        assert not (tmp_path / name).exists()
    sys.modules.pop("mine_grad", None)


def test_a_factory_needing_the_models_layers_is_refused_when_built_before_anything_is_written(tmp_path, capsys):
    def needs_layers(layer_of):
        if layer_of is None:
            raise TypeError("needs the model's layers")
        return _grad_alg()
    fj.register_algorithm("grad-layers", needs_layers)
    out = tmp_path / "run"
    capsys.readouterr()
    code = main(["run", "--algorithm", "grad-layers", *ARGV, "--dp", "gaussian", "--epsilon", "1", "--out", str(out)])
    err = without_deprecation(capsys.readouterr().err).strip()
    # the record, written before the model's layers exist, claims nothing (the warning line says so); then the
    # one-line refusal of the algorithm built for the model
    lines = err.splitlines()
    assert code == 2 and "Traceback" not in err and len(lines) <= 2 and "guarantee does not hold" in lines[0], err
    assert "local_train=False" in lines[-1] and "grad-layers" in lines[-1] and "error" in lines[-1], err
    assert not (out / "config.json").exists()


def test_the_record_names_both_declarations_when_the_aux_is_declared_public():
    fj.register_algorithm("declares-one", lambda: fj.Algorithm("one", server=_server, upload=_upload,
                                                              private_upload=True))
    fj.register_algorithm("declares-two", lambda: fj.Algorithm("two", server=_server, upload=_upload,
                                                              private_upload=True, public_aux=True))
    one = fj.Config(algorithm="declares-one", ldp="adaptive", epsilon=1.0, **SMALL).privacy
    two = fj.Config(algorithm="declares-two", ldp="adaptive", epsilon=1.0, **SMALL).privacy
    assert one["guarantee"] == two["guarantee"] == "holds"
    assert "private_upload=True" in one["why"] and "public_aux" not in one["why"]
    assert "declarations" in two["why"] and "private_upload=True" in two["why"] and "public_aux=True" in two["why"]


def test_batch_statistics_are_never_covered_by_a_stated_guarantee(tmp_path):
    # the built-in cnn_bn with any mechanism (central DP too: its noise is on θ, not on the averaged statistics)
    with pytest.raises(fj.ConfigError, match="batch-norm statistics"):
        fj.Config(algorithm="fedavg", model="cnn_bn", dp="central", epsilon=5.0, delta=1e-5, clip=1.0,
                  clients=10, clients_per_round=5, rounds=2)
    # a user's model with batch norm, likewise: the record cannot see it, so the run is refused when built
    import flax.linen as nn

    class BN(nn.Module):
        num_classes: int = 10

        @nn.compact
        def __call__(self, x, train: bool = True):
            x = nn.BatchNorm(use_running_average=not train)(x.reshape((x.shape[0], -1)))
            return nn.Dense(self.num_classes)(x)
    fj.register_model("bn-mlp", BN)
    with pytest.raises(fj.ConfigError, match=r"^ldp='adaptive' cannot be used with model 'bn-mlp', which keeps batch "
                                              r"statistics"):
        fj.run(**{**SMALL, "model": "bn-mlp"}, algorithm="fedavg", ldp="adaptive", epsilon=1.0,
               out=str(tmp_path / "bn"), progress=False)
    assert not (tmp_path / "bn").exists()


# ---- an accepted user algorithm: the mechanism runs on what it uploads -----------------------------------

def _gap_upload(theta, w, w_tilde, state, hp, lr_t):
    gap = sum(jnp.sum(jnp.abs(a - b)) for a, b in zip(jax.tree_util.tree_leaves(w_tilde), jax.tree_util.tree_leaves(w)))
    return jax.tree_util.tree_map(lambda t, x: t - x, theta, w_tilde), state, {"metrics": {"gap": gap}}


def test_an_accepted_user_algorithms_upload_receives_the_perturbed_model():
    fj.register_algorithm("gapalg", lambda: fj.Algorithm("gapalg", server=_server, upload=_gap_upload,
                                                        private_upload=True, public_aux=True, metrics=("gap",)))
    runs = {m: fj.run(algorithm="gapalg", progress=False, **SMALL, **kw).metrics
            for m, kw in (("none", {}), ("adaptive", dict(ldp="adaptive", epsilon=0.5)),
                          ("gaussian", dict(dp="gaussian", epsilon=1.0, delta=1e-5, clip=1.0)))}
    runs = {m: df[df["round"] > 0] for m, df in runs.items()}  # round 0: the initial model, no upload yet
    raw = runs["none"]
    assert len(raw) == 2 and np.all(raw["gap"].to_numpy() == 0.0)  # no mechanism: w_tilde is w, exactly
    for m in ("adaptive", "gaussian"):
        assert np.all(runs[m]["gap"].to_numpy() > 0.01), (m, runs[m]["gap"])
        assert not np.allclose(runs[m]["test_loss"].to_numpy(), raw["test_loss"].to_numpy()), m
