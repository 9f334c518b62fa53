"""Issue 55 item 5: a user's own function failing inside a client program (FedProto on ``--model mlp``, whose
features are ``None``; a CCVR written from the docs on a logits-only model) ended in a 98-104-line traceback.
Now it is one ``ConfigError`` line naming the function (``client.step``, ``ctx.data.fold's function``, ...),
the user's file and line, the error and the likely cause (the model returns logits only); ``fj.run`` raises it
with the original exception as ``__cause__``, and ``FEDALF_DEBUG=1`` makes the CLI raise it with its chain.
The examples that read features (FedProto, MOON, FedDecorr) declare ``needs_features`` and refuse a
logits-only model before anything is compiled.
"""

import dataclasses
import sys
import traceback
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

import fedalf_jax as fj
from fedalf_jax.experiment import programs

from test_contract import _cfg  # the tiny one_label_each data set and the logits-only model bias3

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # examples/ is not a package on the path under the console script `pytest`
from examples.feddecorr import feddecorr  # noqa: E402
from examples.fedproto import fedproto  # noqa: E402
from examples.moon import moon  # noqa: E402

HERE = Path(__file__).name


def _line(marker: str) -> int:
    """The line of this file that carries ``marker`` (a comment), counted from 1."""
    lines = Path(__file__).read_text().splitlines()
    hits = [i + 1 for i, ln in enumerate(lines) if ln.rstrip().endswith(marker)]
    assert len(hits) == 1, (marker, hits)
    return hits[0]


# ---- a CCVR-like client program written from the docs: class means of the features by a data pass ----------

def _ccvr_final(w, ctx):
    def add(acc, batch):
        _, h = ctx.apply(w, batch.x)
        return acc + jnp.sum(h * batch.mask[:, None], axis=0)  # trust55: fold fails here
    means = ctx.data.fold(add, jnp.zeros((4,), jnp.float32))
    return jax.tree_util.tree_map(lambda t, p: t - p, ctx.theta, w), ctx.state, {"means": means}


def _ccvr():
    return fj.Algorithm("ccvr55", server=fj.algorithms.weighted_mean_server, public_aux=False,
                        client=fj.ClientProgram(lambda ctx: ctx.theta, lambda w, batch, ctx: w, _ccvr_final))


def _fedproto_undeclared():
    """examples/fedproto.py without its needs_features declaration: the round itself meets the None features."""
    return dataclasses.replace(fedproto(), needs_features=False)


class _Dense(nn.Module):
    """A user's logits-only model with a last Dense layer (FedProto's server state reads its kernel)."""
    num_classes: int

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.num_classes)(x)


def _raising_step():
    def step(w, batch, ctx):
        raise fj.ConfigError("my own one-line error")  # trust55: a ConfigError of the user's own
    return fj.Algorithm("own55", server=fj.algorithms.weighted_mean_server,
                        client=fj.ClientProgram(lambda ctx: ctx.theta, step,
                                                lambda w, ctx: (jax.tree_util.tree_map(jnp.subtract, ctx.theta, w),
                                                                ctx.state)))


def _run(name, factory, **kw):
    fj.register_algorithm(name, factory)
    with pytest.raises(fj.ConfigError) as e:
        fj.run(_cfg(name, rounds=1, **kw), progress=False)
    return e.value


def test_a_data_pass_failing_on_none_features_is_one_line_naming_the_file_line_and_cause():
    err = _run("ccvr55", _ccvr)
    msg = str(err)
    at = f"{HERE}:{_line('# trust55: fold fails here')} (in add)"
    assert "\n" not in msg, msg
    assert msg.startswith("algorithm 'ccvr55': ctx.data.fold's function failed at "), msg
    assert at in msg, msg
    assert "TypeError: unsupported operand type(s) for *: 'NoneType'" in msg, msg
    assert ("likely cause: model 'bias3' returns its logits only, so ctx.apply's features are None" in msg), msg
    assert msg.endswith("(set FEDALF_DEBUG=1 for the full traceback)"), msg
    assert isinstance(err.__cause__, TypeError)  # fj.run's caller can inspect the original


def test_fedproto_step_without_its_declaration_names_examples_fedproto_line():
    fj.register_model("dense55", _Dense)
    err = _run("fedproto55u", _fedproto_undeclared, model="dense55")
    msg = str(err)
    src = (ROOT / "examples" / "fedproto.py").read_text().splitlines()
    line = next(i + 1 for i, ln in enumerate(src) if "sq = jnp.sum((h - protos[batch.y])" in ln)
    assert msg.startswith("algorithm 'fedproto': client.step failed at "), msg
    assert f"fedproto.py:{line} (in loss): TypeError: unsupported operand type(s) for -: 'NoneType'" in msg, msg
    assert "likely cause: model 'dense55' returns its logits only" in msg, msg
    assert isinstance(err.__cause__, TypeError)


def test_a_users_own_config_error_passes_unchanged():
    err = _run("own55", _raising_step)
    assert str(err) == "my own one-line error"


def test_a_local_loss_failure_names_the_file_and_line_too():
    def loss_fn(th, st, hp):
        return lambda w, b: fj.cross_entropy(b) + jnp.mean(b.features ** 2)  # trust55: local_loss fails here

    err = _run("loss55", lambda: fj.Algorithm("loss55", server=fj.algorithms.weighted_mean_server,
                                              upload=fj.algorithms.model_upload, local_loss=loss_fn))
    msg = str(err)
    assert "\n" not in msg and "local_loss's function failed (TypeError" in msg, msg
    assert f"{HERE}:{_line('# trust55: local_loss fails here')} (in <lambda>); batch.features is None" in msg, msg
    assert ") at " in msg, msg
    assert isinstance(err.__cause__, TypeError)


def _cli_argv(tmp_path, name):
    return ["run", "--algorithm", name, "--dataset", "one_label_each", "--partition", "given", "--model", "bias3",
            "--clients", "3", "--clients-per-round", "3", "--rounds", "1", "--batch-size", "2", "--no-progress",
            "--out", str(tmp_path / "r")]


def test_the_cli_prints_one_line_and_fedalf_debug_the_full_traceback(tmp_path, capsys, monkeypatch):
    from helpers import cli
    fj.register_algorithm("ccvr55", _ccvr)
    _cfg("ccvr55")  # registers the tiny data set and model
    monkeypatch.delenv("FEDALF_DEBUG", raising=False)
    code, err = cli(capsys, _cli_argv(tmp_path, "ccvr55"))
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("fedalf: warning: code digest")]
    assert code == 2 and "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith("fedalf run: error: algorithm 'ccvr55': ctx.data.fold's function failed at "), err
    assert f"{HERE}:{_line('# trust55: fold fails here')} (in add)" in lines[0], err

    monkeypatch.setenv("FEDALF_DEBUG", "1")
    with pytest.raises(fj.ConfigError) as e:
        cli(capsys, _cli_argv(tmp_path / "again", "ccvr55"))
    full = "".join(traceback.format_exception(e.value))
    assert "The above exception was the direct cause of the following exception" in full
    assert f'{HERE}", line {_line("# trust55: fold fails here")}, in add' in full  # the user's frame
    assert "TypeError: unsupported operand type(s) for *: 'NoneType'" in full


# ---- the examples that need features refuse a logits-only model up front -----------------------------------

class _WithFeatures(nn.Module):
    """A user's model returning ``(logits, features)``: features [B, 4] feeding its last Dense layer."""
    num_classes: int

    @nn.compact
    def __call__(self, x):
        h = nn.Dense(4)(x)
        return nn.Dense(self.num_classes)(h), h


@pytest.mark.parametrize("factory", [fedproto, moon, feddecorr])
def test_an_example_needing_features_refuses_a_logits_only_model_before_compiling(factory, tmp_path, monkeypatch):
    def no_compile(*a, **k):
        raise AssertionError("compiled before refusing the model")
    monkeypatch.setattr(programs.Program, "_compile", no_compile)
    name = f"{factory.__name__}55"
    fj.register_algorithm(name, factory)
    with pytest.raises(fj.ConfigError) as e:
        fj.run(_cfg(name, rounds=1, out=str(tmp_path / "r")), progress=False)
    assert str(e.value) == (f"algorithm {factory.__name__!r} needs the model's features, but model 'bias3' returns "
                            f"its logits only: use a model whose __call__ returns (logits, features), e.g. --model "
                            f"examples.moon:model (docs/extending.md)")
    assert not (tmp_path / "r").exists()


def test_a_model_returning_features_is_accepted():
    from fedalf_jax.experiment.build import load_pool, make_spec, returns_features
    fj.register_algorithm("fedproto55", fedproto)
    fj.register_model("feats55", _WithFeatures)
    cfg = _cfg("fedproto55", model="feats55")
    spec = make_spec(cfg, load_pool(cfg))
    assert returns_features(spec.model)
    cfg0 = _cfg("fedproto55")
    assert not returns_features(make_spec(_cfg("fedavg"), load_pool(cfg0)).model)  # bias3: logits only
