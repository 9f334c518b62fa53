"""Central DP for a user's algorithm (issue 48 item 7): one whose server IS the package's mean server
(``fj.algorithms.weighted_mean_server`` / ``mean_server``, tested by identity) runs under ``dp="central"``,
accounted as FedAvg (sensitivity 2·η_g·clip/m, the same ε), whatever its client trains; another server, or an
auxiliary upload beside Δ_i, is refused in one line."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import cli, one_line_error

import fedalf_jax as fj
from fedalf_jax.experiment import accounting
from fedalf_jax.experiment.build import build

TINY = dict(dataset="synthetic", model="mlp", clients=8, clients_per_round=4, rounds=2, eval_every=1,
            synthetic_train=400, synthetic_test=80, batch_size=20)
CENTRAL = dict(dp="central", epsilon=4.0, delta=1e-5, clip=0.5, mu=0.1)


def _upload(theta, w, w_tilde, state, hp, lr_t):
    return jax.tree_util.tree_map(lambda t, u: t - u, theta, w_tilde), state


def _prox(theta, state, hp):  # FedProx's μ/2‖w − θ‖², written as a user would
    return lambda w: 0.5 * hp.mu * sum(jnp.vdot(a - b, a - b, precision=jax.lax.Precision.HIGHEST)
                                       for a, b in zip(jax.tree_util.tree_leaves(w), jax.tree_util.tree_leaves(theta)))


def my_prox():
    return fj.Algorithm("my_prox", server=fj.algorithms.weighted_mean_server, upload=_upload, penalty=_prox)


def _own_server(s):  # FedAvg's step, but the user's own function: its bound is not taken on trust
    step = jax.tree_util.tree_map(lambda d: jnp.tensordot(s.weights, d, axes=1), s.deltas)
    return jax.tree_util.tree_map(lambda t, d: t - s.server_lr_t * d, s.theta, step), s.sstate, {}


def test_user_algorithm_with_fedavgs_server_runs_as_builtin_fedprox(tmp_path):
    fj.register_algorithm("my_prox", my_prox)
    cfg = fj.Config(algorithm="my_prox", **CENTRAL, **TINY)  # before: refused ("a user's algorithm is not analysed")
    assert cfg.privacy["guarantee"] == "holds" and "weighted_mean_server" in cfg.privacy["why"]
    assert cfg.privacy["sensitivity"] == "2/m x server_lr x clip"
    assert build(cfg).spec.central_sensitivity == 2 / 4  # replace-one: 2·clip/m, m = 4
    mine = fj.run(cfg, progress=False, out=str(tmp_path / "mine"))
    builtin = fj.run(algorithm="fedprox", progress=False, out=str(tmp_path / "fedprox"), **CENTRAL, **TINY)
    for a, b in zip(jax.tree_util.tree_leaves(mine.model), jax.tree_util.tree_leaves(builtin.model)):
        np.testing.assert_array_equal(a, b)  # clipped, averaged 1/m and noised as fedprox is
    plain = fj.run(algorithm="my_prox", progress=False, **{**CENTRAL, "dp": "none"}, **TINY)
    gap = [np.abs(np.asarray(a) - np.asarray(b)).max()
           for a, b in zip(jax.tree_util.tree_leaves(mine.model), jax.tree_util.tree_leaves(plain.model))]
    assert max(gap) > 0.1  # the noise is there (std z·(2/4)·1·0.5 per round, z ≈ 1 here)
    spent = mine.summary["privacy_spent"]
    fedavg = accounting.spent(fj.Config(algorithm="fedavg", **CENTRAL, **TINY), 2)
    assert spent["epsilon"] == fedavg["epsilon"] == builtin.summary["privacy_spent"]["epsilon"]
    assert spent["noise_multiplier"] == fedavg["noise_multiplier"] and spent["epsilon"] == pytest.approx(4.0, rel=0.01)
    assert mine.summary["privacy"]["guarantee"] == "holds"


def test_user_algorithm_with_its_own_server_is_refused_in_one_line(capsys):
    fj.register_algorithm("own_server", fj.Algorithm("own_server", server=_own_server, upload=_upload))
    with pytest.raises(fj.ConfigError, match="own_server.*has its own server.*weighted_mean_server"):
        fj.Config(algorithm="own_server", **CENTRAL, **TINY)
    code, err = cli(capsys, ["run", "--algorithm", "own_server", "--dp", "central", "--dataset", "synthetic"])
    one_line_error(code, err, "own_server", "fj.algorithms.weighted_mean_server", "dp='gaussian'")
    assert fj.Config(algorithm="own_server", dp="gaussian", **TINY).dp == "gaussian"  # the other mechanisms: as before

    def needs_layers(layer_of):  # built only for the model: its server is checked then, before anything runs
        if layer_of is None:
            raise ValueError("needs the model's layers")
        return fj.Algorithm("needs_layers", server=_own_server, upload=_upload)
    fj.register_algorithm("needs_layers", needs_layers)
    cfg = fj.Config(algorithm="needs_layers", **CENTRAL, **TINY)
    assert cfg.privacy["guarantee"] == "does not hold"  # nothing read, nothing claimed
    with pytest.raises(fj.ConfigError, match="needs_layers.*has its own server") as e:
        fj.run(cfg, progress=False)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("public_aux", [False, True])
def test_user_algorithm_with_an_aux_upload_is_refused(public_aux):
    def upload(theta, w, w_tilde, state, hp, lr_t):
        delta, state = _upload(theta, w, w_tilde, state, hp, lr_t)
        return delta, state, {"metrics": {"n": jnp.float32(1.0)}}
    fj.register_algorithm("with_aux", fj.Algorithm("with_aux", server=fj.algorithms.mean_server, upload=upload,
                                                   public_aux=public_aux, metrics=("n",)))
    with pytest.raises(fj.ConfigError, match=f"with_aux.*auxiliary upload.*public_aux={public_aux}.*unclipped") as e:
        fj.Config(algorithm="with_aux", **CENTRAL, **TINY)
    assert "\n" not in str(e.value)


def test_client_state_and_personal_model_are_free_under_central_dp():
    """The server never reads a client's state, only its clipped Δ_i: a user's FedADMM-like or Ditto-like client
    with the mean server is accounted; its personal models are listed as outside the guarantee."""
    state = fj.Algorithm("with_state", server=fj.algorithms.mean_server, upload=_upload, penalty=_prox,
                         init_client_state=lambda p: jax.tree_util.tree_map(jnp.zeros_like, p),
                         personal_model=lambda s: s)
    fj.register_algorithm("with_state", state)
    p = fj.Config(algorithm="with_state", **CENTRAL, **TINY).privacy
    assert p["guarantee"] == "holds" and "mean_server" in p["why"]
    assert len(p["not_covered"]) == 2 and p["not_covered"][1].startswith("the personal models (personal_model)")
    assert len(fj.Config(algorithm="fedavg", **CENTRAL, **TINY).privacy["not_covered"]) == 1
