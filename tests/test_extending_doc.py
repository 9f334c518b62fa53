"""docs/extending.md, rewritten around the client program (issue 48 item 10): its code runs as it says, every
optional field of ``fj.Algorithm`` is shown as the special case of a client program it is, and the reserved
names of own hyper-parameters are listed in full (the old page wrote ``lr``, ``mu``, ..., ``own`` and left out
``noise_multiplier``)."""

import dataclasses
import re
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import optax

import fedalf_jax as fj

DOC = (Path(__file__).resolve().parents[1] / "docs" / "extending.md").read_text()
TINY = dict(dataset="synthetic", model="mlp", clients=6, clients_per_round=3, rounds=2, eval_every=1,
            synthetic_train=240, synthetic_test=60, batch_size=20, lr=0.3)


def _section(title: str, end: str) -> str:
    start = DOC.index(title)
    return DOC[start:DOC.index(end, start)]


def _blocks() -> list:
    return [textwrap.dedent(b) for b in re.findall(r"```python\n(.*?)\s*```", DOC, re.S)]


def _same(a, b):
    la, lb = jax.tree_util.tree_leaves(a.model), jax.tree_util.tree_leaves(b.model)
    return len(la) == len(lb) and all(bool(jnp.array_equal(x, y)) for x, y in zip(la, lb))


def test_reserved_names_are_every_hparams_field():
    """The list the page gives is HParams' fields, each named (noise_multiplier too)."""
    text = " ".join(DOC.split())
    m = re.search(r"not one of `fj\.HParams`' fields, which are reserved: (.*?) \(a reserved name", text)
    assert m, "the reserved-name sentence is gone"
    assert set(re.findall(r"`(\w+)`", m.group(1))) == set(fj.HParams._fields)


def _bold_heads(sec: str) -> set:
    heads = set()
    for line in re.findall(r"^- (\*\*.*)$", sec, re.M):
        for bold in re.findall(r"\*\*(.*?)\*\*", line):
            heads |= set(re.findall(r"`(\w+)", bold))
    return heads


def test_every_piece_and_field_is_documented():
    """Each parameter of ``fj.local_training`` heads a bullet of "Local training", and each field of
    ``fj.Algorithm`` that is not a 0.1 client field (nor name, server, client) heads one of "The algorithm's
    other fields"; the 0.1 fields are each named in "Code written for 0.1"."""
    import inspect
    local = _section("## Local training", "## The server side")
    assert set(inspect.signature(fj.local_training).parameters) - _bold_heads(local) == set()
    old = {"upload", "penalty", "local_loss", "local_start", "local_optimizer", "personal", "client_collections",
           "local_train"}
    other = _section("**The algorithm's other fields**", "## Names")
    fields = {f.name for f in dataclasses.fields(fj.Algorithm)} - {"name", "server", "client"}
    assert old <= fields and fields - old - _bold_heads(other) == set()
    legacy = " ".join(_section("**Code written for 0.1.**", "## The server side").split())
    assert all(f"`{f}`" in legacy or f"`{f}=False`" in legacy for f in old)


def test_the_smallest_algorithm_is_fedavg_bit_for_bit():
    ns = {}
    exec(_blocks()[0], ns)  # the page's first block: FedAvg's server and its three-function client program
    fj.register_algorithm("doc48_fedavg", ns["fedavg"])
    mine, builtin = (fj.run(algorithm=a, progress=False, **TINY) for a in ("doc48_fedavg", "fedavg"))
    assert mine.metrics["mean_acc"].tolist() == builtin.metrics["mean_acc"].tolist() and _same(mine, builtin)


def test_local_optimizer_as_a_carry_equals_the_option():
    """The page's optimiser-in-the-carry program (momentum 0.9) is FedAvg under --local-optimizer momentum
    (optax.sgd with momentum 0.9, fresh each round), bit for bit on this run."""
    block = next(b for b in _blocks() if "opt.init(ctx.theta)" in b)
    ns = {"jax": jax, "fj": fj, "optax": optax}
    exec(block, ns)

    def final(carry, ctx):
        return jax.tree_util.tree_map(lambda t, p: t - p, ctx.theta, carry[0]), ctx.state

    fj.register_algorithm("doc48_momentum", fj.Algorithm("doc48_momentum", server=fj.algorithms.weighted_mean_server,
                                                         client=fj.ClientProgram(ns["init"], ns["step"], final)))
    mine = fj.run(algorithm="doc48_momentum", progress=False, **TINY)
    builtin = fj.run(algorithm="fedavg", local_optimizer="momentum", progress=False, **TINY)
    plain = fj.run(algorithm="fedavg", progress=False, **TINY)
    assert _same(mine, builtin) and not _same(mine, plain)
