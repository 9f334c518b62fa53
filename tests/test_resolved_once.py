"""A configuration's algorithm is resolved once (issue 56 item 3): validating a ``fj.Config`` builds a user's
algorithm once (``Config.plugin``), and its privacy record, its unread options and its declared hyper-parameters
read that one object instead of looking the algorithm up again by name. Expectations: a count of the factory's
calls, and a refusal that needs the factory's own arguments."""

import pytest

import fedalf_jax as fj
from fedalf_jax.experiment.identity import ignored_options

CALLS = []


def counted(K: int = 1):
    CALLS.append(K)
    return fj.Algorithm("counted", server=fj.algorithms.weighted_mean_server, upload=fj.algorithms.model_upload,
                        private_upload=True, hparams={"beta": 0.5})


def gradients_with_k(K: int):  # needs its --alg-arg; with K=2 its clients send gradients (no local training)
    return fj.Algorithm("grads", server=fj.algorithms.weighted_mean_server, upload=fj.algorithms.model_upload,
                        private_upload=True, local_train=K != 2)


def test_validation_builds_a_users_algorithm_once_and_everything_reads_it():
    fj.register_algorithm("counted56", counted)
    CALLS.clear()
    cfg = fj.Config(algorithm="counted56", alg_args={"K": 3}, hp={"beta": 0.2}, ldp="adaptive", dataset="synthetic",
                    model="mlp")
    record, unread, hp = cfg.privacy, ignored_options(cfg), cfg.resolved_hp
    assert CALLS == [3]  # one build, with the config's own arguments, for validation and every reader after it
    assert record["guarantee"] == "holds" and hp == {"beta": 0.2} and "alpha" in unread
    assert cfg.plugin.algorithm.name == "counted" and not cfg.plugin.builtin
    CALLS.clear()
    cfg.replace(seed=1)  # a new config: validated, so resolved, afresh
    assert CALLS == [3]


def test_the_privacy_check_reads_the_algorithm_built_with_its_own_arguments():
    fj.register_algorithm("grads56", gradients_with_k)
    fj.Config(algorithm="grads56", alg_args={"K": 1}, ldp="adaptive", dataset="synthetic", model="mlp")
    with pytest.raises(fj.ConfigError, match="local_train=False"):  # before: built without K, so never read
        fj.Config(algorithm="grads56", alg_args={"K": 2}, ldp="adaptive", dataset="synthetic", model="mlp")
