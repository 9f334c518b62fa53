"""Issue 48 item 1: the default client (``upload`` and the optional fields) is a client program run by the same
code as a user's (fedalf_jax/sim/default_client.py), so its functions' ``facts=`` has what a program's
``ctx.facts`` has: the client's label counts and index, beside ``n`` and ``steps``. (That the built-ins' rounds
are the programs they were, bit for bit, is experiments/probes/builtin_hashes.py's, 23 cases.)"""

import jax
import jax.numpy as jnp
import pytest

import fedalf_jax as fj
from fedalf_jax.sim.algorithms import ClientProgram
from fedalf_jax.sim.default_client import default_program
from test_examples_client import _cfg, jax_tree
from test_client_program import MAPS, check_facts


def _state(params):
    z = jnp.zeros((), jnp.int32)
    return {"counts": jnp.zeros((3,), jnp.int32), "index": z - 1, "n": z, "steps": z, "seen": z}


def _upload(theta, w, w_tilde, state, hp, lr_t, facts):
    new = {"counts": facts.label_counts, "index": facts.index, "n": facts.n, "steps": facts.steps,
           "seen": state["seen"] + 1}
    return jax.tree_util.tree_map(lambda a, b: a - b, theta, w_tilde), new



@pytest.mark.parametrize("client_map", MAPS)
def test_the_default_clients_facts_say_who_the_client_is(tmp_path, client_map):
    """An algorithm written with the fields (``upload(..., facts)``), two rounds of 2 clients out of 3: each
    sampled client's state holds its label counts as counted from its rows by hand (padding not counted), its
    index, its n and its steps (2 epochs of ⌈n/2⌉ batches of 2)."""
    fj.register_algorithm("facts_fields", lambda: fj.Algorithm(
        "facts_fields", server=fj.algorithms.weighted_mean_server, upload=_upload, init_client_state=_state))
    res = fj.run(_cfg("facts_fields", clients_per_round=2, batch_size=2, client_map=client_map),
                 out=str(tmp_path / "f"), progress=False)
    assert check_facts(jax_tree(res.client_states))


def test_the_default_client_is_a_client_program():
    """The fields build a ClientProgram of init, step and final (no step with local_train=False)."""
    from fedalf_jax.sim.round import RoundSpec

    class _Ctx:  # just what default_program reads
        theta, state, hp, broadcast, facts, lr, stats = {"w": jnp.zeros(2)}, (), None, None, None, 0.1, None

    alg = fj.Algorithm("f", server=fj.algorithms.weighted_mean_server, upload=lambda *a: (a[0], a[3]))
    spec = RoundSpec(None, alg, 3, 2, 1, 2, None)
    prog = default_program(spec, _Ctx())
    assert isinstance(prog, ClientProgram) and callable(prog.init) and callable(prog.step) and callable(prog.final)
    full = RoundSpec(None, fj.Algorithm("g", server=fj.algorithms.weighted_mean_server, upload=alg.upload,
                                        local_train=False), 3, 2, 1, 2, None)
    assert default_program(full, _Ctx()).step is None
