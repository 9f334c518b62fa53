"""--matmul-precision: the model's float32 matmuls and convolutions (forward and gradient) carry the asked
precision in the lowered program; "default" leaves them alone. On CPU every precision computes in
float32, so these tests check the wiring (the HLO text), the validation and the run identity."""

import json
import re

import jax
import jax.numpy as jnp
import pytest

from fedalf_jax.cli import main
from fedalf_jax.experiment import config as C
from fedalf_jax.experiment import identity as ID
from fedalf_jax.experiment.build import build
from fedalf_jax.experiment.config import Config, ConfigError
from fedalf_jax.problem.models import ModelError, make_model
from fedalf_jax.sim.round import init_state, run_rounds

TINY = ["--dataset", "synthetic", "--model", "mlp", "--clients", "4", "--clients-per-round", "2",
        "--synthetic-train", "200", "--synthetic-test", "80", "--rounds", "1", "--eval-every", "1",
        "--algorithm", "fedavg", "--no-progress"]


def _precisions(text: str) -> list[str]:
    """The precision of every dot_general and convolution in StableHLO text (one per op)."""
    out = []
    for line in text.splitlines():
        if "stablehlo.dot_general" in line:
            out += re.findall(r"precision = \[(\w+), \w+\]", line)
        elif "stablehlo.convolution" in line:
            out += re.findall(r"precision_config = \[#stablehlo<precision (\w+)>", line)
    return out


def _grad_hlo(model) -> str:
    v = model.init(jax.random.PRNGKey(0))
    x = jnp.zeros((2, *model.input_shape), jnp.float32)
    return jax.jit(jax.grad(lambda v: model.apply(v, x)[0].sum())).lower(v).as_text()


@pytest.mark.parametrize("name, conv", [("cnn", "lax"), ("cnn", "im2col")])
def test_model_ops_carry_the_precision(name, conv):
    with jax.default_matmul_precision(None):  # conftest sets "highest" globally; start from JAX's default
        ops = {p: _precisions(_grad_hlo(make_model(name, num_classes=10, input_shape=(16, 16, 1), conv_impl=conv,
                                                   matmul_precision=p)))
               for p in C.MATMUL_PRECISIONS}
    n = len(ops["default"])
    assert n >= 5 + (conv == "lax") * 4, ops["default"]  # forward and gradient dots (+ convs)
    assert ops["default"] == ["DEFAULT"] * n
    assert ops["high"] == ["HIGH"] * n
    assert ops["highest"] == ["HIGHEST"] * n


def test_default_leaves_the_ambient_precision():
    model = make_model("mlp", num_classes=10, input_shape=(8, 8, 1))  # matmul_precision="default"
    with jax.default_matmul_precision("high"):
        assert set(_precisions(_grad_hlo(model))) == {"HIGH"}


def test_config_reaches_the_compiled_round():
    """Through Config -> build -> the compiled round: the clients' dots follow --matmul-precision."""
    cfg = Config(dataset="synthetic", model="mlp", algorithm="fedavg", clients=4, clients_per_round=2,
                 synthetic_train=200, synthetic_test=80)
    found = {}
    with jax.default_matmul_precision(None):
        for p in ("default", "highest"):
            exp = build(cfg.replace(matmul_precision=p))
            assert exp.spec.model.matmul_precision == p
            state = init_state(exp.spec, 0)
            text = jax.jit(lambda s, h, d: run_rounds(exp.spec, s, h, d, 1)).lower(state, exp.hp, exp.data).as_text()
            found[p] = _precisions(text)
    # The simulator's own sums (server average, conflict counts) are HIGHEST whatever the option; the
    # model's dots only with it. MLP: 3 forward + 5 gradient dots per client step.
    assert found["highest"].count("HIGHEST") >= found["default"].count("HIGHEST") + 8


def test_bad_precision_is_one_line(capsys, tmp_path):
    with pytest.raises(ConfigError, match=r"unknown matmul_precision 'tf32'; choose one of default, high, highest"):
        Config(matmul_precision="tf32").validated()
    with pytest.raises(ModelError, match="matmul_precision"):
        make_model("mlp", num_classes=10, input_shape=(8, 8, 1), matmul_precision="fastest")
    with pytest.raises(SystemExit) as e:  # argparse's choices
        main(["run", "--matmul-precision", "tf32"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "invalid choice" in err and len(err.strip().splitlines()) == 1
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"matmul_precision": "fast"}))
    assert main(["run", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "unknown matmul_precision 'fast'" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_precision_is_identity_and_round_trips(capsys, tmp_path):
    assert "matmul_precision" not in C.BOOKKEEPING
    a, b = Config(), Config(matmul_precision="highest")
    assert ID.identity_diff(a.identity(), b.identity()) == ["matmul_precision"]
    assert ID.identity_digest(a.identity()) != ID.identity_digest(b.identity())
    out = tmp_path / "run"
    assert main(["run", *TINY, "--matmul-precision", "highest", "--out", str(out)]) == 0
    saved = json.loads((out / "config.json").read_text())
    assert saved["matmul_precision"] == "highest"
    loaded = Config.load(out / "config.json")  # --config takes config.json back
    assert loaded.matmul_precision == "highest" and loaded.identity() == b.replace(**{
        k: getattr(loaded, k) for k in saved if k not in C.DERIVED_KEYS}).identity()
    capsys.readouterr()
    # a resumed run keeps its precision: changing it is refused in one line naming it
    code = main(["run", "--resume", "--out", str(out), "--matmul-precision", "default", "--rounds", "2"])
    err = capsys.readouterr().err
    assert code == 2 and "matmul_precision" in err and len(err.strip().splitlines()) == 1
