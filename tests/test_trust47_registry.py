"""Issue 47 items 1, 2, 8 and 9: what a notebook registers is what its runs use, run after run.

1. a registered model's initialiser is traced afresh for each run (a global it reads may have changed); the
   built-in models still share their compiled init;
2. a built-in name cannot be registered (the built-in would run instead, without a word);
8. a registered algorithm's declaration (``hparams`` defaults, ``private_upload``) is read afresh when a
   config is validated, and the round is refused in one line when it is built from another declaration;
9. ``register_dataset`` keeps read-only copies: an in-place change raises, so the arrays trained on are those
   of the recorded digest.
"""

import json
import sys
import types
import warnings

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedalf_jax as fj
from fedalf_jax.experiment.build import build, load_pool
from fedalf_jax.problem import models as M
from fedalf_jax.sim.round import init_state

TINY = dict(dataset="synthetic", clients=6, clients_per_round=3, rounds=1, eval_every=1, synthetic_train=240,
            synthetic_test=60, batch_size=20)


# ---- item 1: a user's model is initialised afresh for each run -------------------------------------------

STD = 0.001


class ReadsStd(nn.Module):
    """A notebook's model: its kernel initialiser reads the global STD when it is traced."""
    num_classes: int

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.num_classes, kernel_init=nn.initializers.normal(STD))(x.reshape(x.shape[0], -1))


def _kernel_std(cfg):
    """The standard deviation of the initial kernel the run starts from (build + init_state, as loop.run)."""
    state = init_state(build(cfg).spec, 0)
    return float(np.std(np.asarray(state.variables["params"]["Dense_0"]["kernel"])))


def test_a_registered_models_init_reads_the_globals_of_each_run():
    global STD
    fj.register_model("t47_reads_std", ReadsStd)
    cfg = fj.Config(algorithm="fedavg", model="t47_reads_std", **TINY).validated()
    try:
        STD = 0.001
        assert 0.0007 < _kernel_std(cfg) < 0.0013  # 60 x 10 draws of N(0, 0.001²)
        STD = 5.0  # a later cell: the same registered class, the global changed
        assert 4.0 < _kernel_std(cfg) < 6.0
        fj.register_model("t47_reads_std", ReadsStd)  # registered again: the same
        STD = 0.02
        assert 0.015 < _kernel_std(cfg) < 0.025
    finally:
        STD = 0.001


def test_builtin_models_still_share_their_compiled_init():
    M._jitted_init.cache_clear()
    a = M.make_model("mlp", num_classes=10, input_shape=(4, 4, 1))
    b = M.make_model("mlp", num_classes=10, input_shape=(4, 4, 1))
    a.init(jax.random.PRNGKey(0))
    b.init(jax.random.PRNGKey(1))
    info = M._jitted_init.cache_info()
    assert (info.misses, info.hits) == (1, 1)


# ---- item 2: a built-in name cannot be registered --------------------------------------------------------

def _arrays():
    return (np.ones((8, 2)), np.arange(8) % 2, np.ones((4, 2)), np.arange(4) % 2)


@pytest.mark.parametrize("kind, name", [("model", "mlp"), ("model", "cnn"), ("model", "cnn_bn"),
                                        ("algorithm", "fedavg"), ("algorithm", "fedprox"), ("algorithm", "qfedavg"),
                                        ("algorithm", "fedadmm"), ("algorithm", "fedlf"), ("algorithm", "fedalf"),
                                        ("dataset", "synthetic"), ("dataset", "fmnist"), ("dataset", "cifar10"),
                                        ("dataset", "cifar100")])
def test_a_builtin_name_is_refused_in_one_line(kind, name):
    from fedalf_jax.experiment import registry
    register = getattr(fj, f"register_{kind}")
    args = {"model": (ReadsStd,), "algorithm": (lambda: None,), "dataset": _arrays()}[kind]
    with pytest.raises(fj.ConfigError, match=f"'{name}' is a built-in {kind}.*register yours under another name") as e:
        register(name, *args)
    assert "\n" not in str(e.value)
    assert name not in registry._REGISTERED[kind]


# ---- item 8: a registered algorithm's declaration, read afresh -------------------------------------------

LAM = 0.0
PRIVATE = True


def sets_theta_to_lam(layer_of=None):
    """θ ← lam everywhere (the server's whole step): the final model shows the lam the round was built with."""
    def upload(theta, w, w_tilde, state, hp, lr_t):
        return jax.tree_util.tree_map(lambda t, u: t - u, theta, w_tilde), state

    def server(s):
        return jax.tree_util.tree_map(lambda t: jnp.zeros_like(t) + s.hp.own["lam"], s.theta), s.sstate, {}

    return fj.Algorithm("sets_lam", server=server, upload=upload, hparams={"lam": LAM}, private_upload=PRIVATE)


def _leaves(res):
    return np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree_util.tree_leaves(res.model["params"])])


def test_a_changed_global_default_reaches_the_next_run_and_its_record(tmp_path):
    global LAM
    fj.register_algorithm("t47_sets_lam", sets_theta_to_lam)
    cfg = fj.Config(algorithm="t47_sets_lam", model="mlp", **TINY).validated()
    try:
        LAM = 0.25
        first = fj.run(cfg.replace(out=str(tmp_path / "a")), progress=False)
        np.testing.assert_array_equal(_leaves(first), 0.25)
        LAM = 0.5  # a later cell: the factory's default is now 0.5 (not registered again)
        second = fj.run(cfg, out=str(tmp_path / "b"), progress=False)
        np.testing.assert_array_equal(_leaves(second), 0.5)
        assert json.loads((tmp_path / "b" / "config.json").read_text())["hp"] == {"lam": 0.5}
    finally:
        LAM = 0.0


def test_a_changed_private_upload_is_read_for_the_run_not_a_misleading_error(tmp_path):
    global PRIVATE
    fj.register_algorithm("t47_private", sets_theta_to_lam)
    cfg = fj.Config(algorithm="t47_private", model="mlp", dp="gaussian", epsilon=1.0, **TINY).validated()
    try:
        PRIVATE = True
        assert cfg.privacy["guarantee"] == "holds"
        PRIVATE = False  # a later cell: the factory no longer declares its upload private
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fj.run(cfg, out=str(tmp_path / "r"), progress=False)
        saved = json.loads((tmp_path / "r" / "config.json").read_text())
        assert saved["privacy"]["guarantee"] != "holds" and "private_upload" in saved["privacy"]["why"]
    finally:
        PRIVATE = True


def test_a_round_built_from_another_default_than_the_configs_is_refused_in_one_line(tmp_path):
    """A factory whose default depends on layer_of: the config reads lam=0 (layer_of=None), the round is built
    with lam=1: refused, not a run that trains with one and declares the other."""
    def depends(layer_of=None):
        alg = sets_theta_to_lam()
        return fj.Algorithm("depends", server=alg.server, upload=alg.upload,
                            hparams={"lam": 0.0 if layer_of is None else 1.0})

    fj.register_algorithm("t47_depends", depends)
    with pytest.raises(fj.ConfigError, match="declares the default lam=1 when built for the model but lam=0") as e:
        fj.run(algorithm="t47_depends", model="mlp", out=str(tmp_path / "d"), progress=False, **TINY)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "d" / "config.json").exists()
    # given explicitly, the value is the config's whatever the defaults: it runs
    res = fj.run(algorithm="t47_depends", model="mlp", hp={"lam": 0.75}, progress=False, **TINY)
    np.testing.assert_array_equal(_leaves(res), 0.75)


# ---- item 9: register_dataset keeps read-only copies ----------------------------------------------------

def test_register_dataset_keeps_read_only_copies_that_a_run_trains_on():
    x_train, y_train, x_test, y_test = np.full((8, 2), 255.0), np.arange(8) % 2, np.full((4, 2), 255.0), np.arange(4) % 2
    clients = ([np.arange(4), np.arange(4, 8)], [np.arange(2), np.arange(2, 4)])
    data = fj.register_dataset("t47_frozen", x_train, y_train, x_test, y_test, clients=clients)
    for a in (data.x_train, data.y_train, data.x_test, data.y_test, *data.clients[0], *data.clients[1]):
        with pytest.raises(ValueError, match="read-only"):
            a += 1
    x = data.x_train
    with pytest.raises(ValueError, match="read-only"):
        x /= 255  # a notebook's normalisation in place
    x_train /= 255  # the caller's own array: not the registered copy
    cfg = fj.Config(algorithm="fedavg", model="mlp", dataset="t47_frozen", partition="given", clients=2,
                    clients_per_round=2, rounds=1, batch_size=4).validated()
    pool = load_pool(cfg)
    np.testing.assert_array_equal(pool.x, 255.0)  # what the run trains on: the registered values
    again = fj.register_dataset("t47_frozen_again", np.full((8, 2), 255.0), y_train, np.full((4, 2), 255.0), y_test,
                                clients=clients)
    assert pool.digest == again.digest == cfg.identity()["dataset_digest"]


def test_a_module_attribute_arraydata_is_kept_read_only_and_digested(tmp_path, monkeypatch):
    from fedalf_jax.experiment import registry
    mod = types.ModuleType("t47_data_mod")
    mod.DATA = registry.ArrayData(np.ones((6, 2), np.float32), np.array([0, 1] * 3, np.int32),
                                  np.ones((2, 2), np.float32), np.array([0, 1], np.int32), 2)
    monkeypatch.setitem(sys.modules, "t47_data_mod", mod)
    data = registry.dataset("t47_data_mod:DATA")
    assert not data.x_train.flags.writeable and len(data.digest) == 16
    assert data.digest == fj.register_dataset("t47_same", np.ones((6, 2)), [0, 1] * 3, np.ones((2, 2)), [0, 1]).digest
