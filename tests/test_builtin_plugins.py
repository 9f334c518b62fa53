"""The built-in algorithms are ordinary plug-ins (issue 56 item 1): each is a factory in its own module of
``fedalf_jax.algorithms`` with its declarations (``factory.declares``), and the rest of the package asks those,
never a table of names. Expectations: the defaults as docs/algorithms.md states them (written out here by
hand), and a scan of the package's source for the algorithms' names as string literals."""

import ast
from pathlib import Path

import pytest

import fedalf_jax as fj
from fedalf_jax.algorithms import BUILTINS, Declares, Option, declared

PACKAGE = Path(fj.__file__).parent

# docs/algorithms.md §3's defaults: (server_lr, server_lr_decay, rho, server_target, history) non-private, then private
DEFAULTS = {
    "fedavg": ((1.0, 1.0, 1.0, "increment", False), (1.0, 1.0, 1.0, "increment", False)),
    "fedprox": ((1.0, 1.0, 1.0, "increment", False), (1.0, 1.0, 1.0, "increment", False)),
    "qfedavg": ((1.0, 1.0, 1.0, "increment", False), (1.0, 1.0, 1.0, "increment", False)),
    "fedadmm": ((1.0, 1.0, 0.1, "model", False), (1.0, 1.0, 0.1, "model", False)),
    "fedlf": ((0.05, 0.999, 1.0, "increment", True), (0.05, 0.999, 1.0, "increment", True)),
    "fedalf": ((0.5, 0.999, 0.01, "increment", True), (1.0, 0.999, 0.01, "model", True)),
}


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_each_builtin_resolves_its_declared_defaults(name):
    private = {"ldp": "adaptive", **({"client_grad": "local"} if name == "fedlf" else {})}
    for kw, want in ((({"client_grad": "local"} if name == "fedlf" else {}), DEFAULTS[name][0]),
                     (private, DEFAULTS[name][1])):
        if name == "qfedavg" and kw:
            continue
        cfg = fj.Config(algorithm=name, dataset="synthetic", model="mlp", **kw)
        got = (cfg.resolved_server_lr, cfg.resolved_server_lr_decay, cfg.resolved_rho, cfg.resolved_server_target,
               cfg.resolved_history)
        assert got == want, (name, kw)
    assert fj.Config(algorithm=name, ldp="adaptive", client_grad="local").resolved_fair_norm == "denoised"
    assert fj.Config(algorithm=name).resolved_fair_norm == "raw"


def test_each_builtin_is_a_factory_in_its_own_module_with_declarations():
    assert list(BUILTINS) == ["fedavg", "fedprox", "qfedavg", "fedadmm", "fedlf", "fedalf"]
    for name, factory in BUILTINS.items():
        assert factory.__module__ == f"fedalf_jax.algorithms.{name}"
        assert isinstance(factory.declares, Declares) and declared(name) is factory.declares
        assert set(factory.declares.factory_options) <= set(factory.declares.options)
    labels = {n: declared(n).label for n in BUILTINS}
    assert labels == {"fedavg": "FedAvg", "fedprox": "FedProx", "qfedavg": "qFedAvg", "fedadmm": "FedADMM",
                      "fedlf": "FedLF", "fedalf": "FedALF"}
    # the old import paths still give the same factories
    from fedalf_jax.sim.algorithms import FACTORIES, fedadmm
    assert fedadmm is BUILTINS["fedadmm"] and FACTORIES is BUILTINS and fj.algorithms.fedavg is BUILTINS["fedavg"]


def test_an_option_resolves_given_then_private_then_default():
    opt = Option(0.5, private=1.0)
    assert (opt.resolve(None, False), opt.resolve(None, True), opt.resolve(0.2, True)) == (0.5, 1.0, 0.2)
    assert Option("x").resolve(None, True) == "x"  # no private default: the default
    with pytest.raises(ValueError, match="factory_options"):
        Declares(label="X", factory_options=("nope",))


# where an algorithm's name may still be a string literal outside its module, and why (none of them knowledge
# about the algorithm: a choice of one, or another thing of the same name)
ALLOWED = {
    "config/config.py": {"fedalf", "fedlf"},  # the default algorithm; assign="fedlf" is a partition scheme
    "config/options.py": {"fedlf"},  # ASSIGNS: the partition scheme
    "problem/partitions.py": {"fedlf"},  # the partition scheme
    "bench/suite.py": {"fedavg", "fedalf"},  # which algorithms a benchmark suite times
    "bench/timing.py": {"fedavg"},  # the PyTorch comparison is FedAvg's loop
    "cli.py": {"fedavg", "fedalf"},  # the PyTorch comparison; the command's name
    "runtime/interrupt.py": {"fedalf"},  # the command's name
    "cli_options.py": {"fedalf"},  # the command's name
    "runner/progress.py": {"fedalf"},  # the command's name on the progress bar
    "sim/algorithms.py": set(BUILTINS),  # the old import path of the factories (deprecated, one release)
}


def test_no_module_knows_a_builtin_by_its_name():
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("algorithms/"):
            continue
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        names = {n.value for n in ast.walk(tree)
                 if isinstance(n, ast.Constant) and n.value in BUILTINS and id(n) not in docs}
        extra = names - ALLOWED.get(rel, set())
        if extra:
            found[rel] = sorted(extra)
    assert found == {}, f"built-in algorithms named outside fedalf_jax/algorithms/: {found}"
