"""What a researcher and a new user stumbled on in the API and the CLI (issue 28, items 10 and 11): each
mistake gets one line saying what was given and what is expected, the sweep table names what varies,
the report names the swept η, ``fj.sweep`` runs again with ``resume=``/``overwrite=``, the README's API
block prints what it computes, ``fedalf --version``, and the docs and the notebook say what the code does."""

import argparse
import json
import math
import re
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import nbformat
import numpy as np
import pytest

import fedalf_jax as fj
from fedalf_jax import cli
from fedalf_jax.experiment.config import Config
from fedalf_jax.experiment.rundir import RunDir

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(dataset="synthetic", model="mlp", clients=6, clients_per_round=3, rounds=1, eval_every=1,
            synthetic_train=240, synthetic_test=60, batch_size=20)
X6, Y6 = np.zeros((6, 2), np.float32), np.array([0, 1, 2, 0, 1, 2])


from helpers import Bias  # noqa: E402 - logits = one bias vector for every example


def _own_lists(name):
    """Three clients with their own rows: train 0-1, 2-3, 4-5; test 0, 1, 2."""
    lists = ([np.arange(0, 2), np.arange(2, 4), np.arange(4, 6)], [np.array([0]), np.array([1]), np.array([2])])
    fj.register_dataset(name, X6, Y6, X6[:3], Y6[:3], num_classes=3, clients=lists)
    fj.register_model("bias", Bias)


# ---- item 10: a researcher's stumbles ---------------------------------------------------------------

def test_clients_as_flat_index_arrays_says_what_was_given_and_what_is_expected():
    with pytest.raises(ValueError) as e:
        fj.register_dataset("flat", X6, Y6, X6[:3], Y6[:3], num_classes=3, clients=[np.arange(3), np.arange(3, 6)])
    msg = str(e.value)
    assert "\n" not in msg
    assert "clients was given 2 flat index arrays (of 3 and 3 indices)" in msg
    assert "(train_lists, test_lists)" in msg and "shape ()" not in msg
    # a plain list of ints for one client is the same mistake
    with pytest.raises(ValueError, match="2 flat index arrays"):
        fj.register_dataset("flat", X6, Y6, X6[:3], Y6[:3], num_classes=3, clients=([0, 1, 2], [0, 1]))
    # the pair of per-client lists still registers (a 2-D array is one list per row, too)
    data = fj.register_dataset("flat", X6, Y6, X6[:3], Y6[:3], num_classes=3,
                               clients=(np.array([[0, 1, 2], [3, 4, 5]]), [[0], [1, 2]]))
    assert data.num_clients == 2


def test_a_partition_scheme_over_a_data_sets_own_client_lists_is_refused():
    _own_lists("own_lists")
    for partition in ("pat1", "dirichlet", "iid"):
        with pytest.raises(fj.ConfigError) as e:
            Config(dataset="own_lists", partition=partition, model="bias", clients=3, clients_per_round=3)
        msg = str(e.value)
        assert "\n" not in msg
        assert f"registered with its own client lists, which partition {partition} would ignore" in msg
        assert "partition='given'" in msg and "clients=3" in msg
    with pytest.raises(fj.ConfigError, match="own client lists"):  # pat1 is the default partition
        Config(dataset="own_lists", model="bias", clients=3, clients_per_round=3)
    Config(dataset="own_lists", partition="given", model="bias", clients=3, clients_per_round=3)


class Sows(nn.Module):
    """A model that sows an intermediate value (flax's default collection for ``sow``)."""
    num_classes: int

    @nn.compact
    def __call__(self, x):
        h = nn.Dense(4)(x)
        self.sow("intermediates", "hidden", h)
        return nn.Dense(self.num_classes)(h)


class Counts(nn.Module):
    """A model with a collection of its own besides params."""
    num_classes: int

    @nn.compact
    def __call__(self, x):
        self.variable("counter", "calls", lambda: jnp.zeros((), jnp.int32))
        return nn.Dense(self.num_classes)(x)


def test_sown_intermediates_run_as_documented_and_other_collections_are_refused():
    _own_lists("own_sow")
    fj.register_model("sows", Sows)
    fj.register_model("counts", Counts)
    base = dict(algorithm="fedavg", dataset="own_sow", partition="given", clients=3, clients_per_round=3, rounds=1,
                eval_every=1, batch_size=2)
    res = fj.run(model="sows", progress=False, **base)
    assert res.status == "done" and list(res.model) == ["params"]  # the sown values are not kept
    with pytest.raises(fj.ConfigError) as e:
        fj.run(model="counts", progress=False, **base)
    assert "\n" not in str(e.value) and "variable collections ['counter']" in str(e.value)
    doc = " ".join((ROOT / "docs" / "models-and-data.md").read_text().split())
    assert "Values `sow`n into `intermediates` (flax's default for `sow`) are allowed but not kept" in doc
    assert "A model with other variable collections" in doc


def _fake_result(**options):
    import pandas as pd
    cfg = Config(**{**TINY, **options})
    metrics = pd.DataFrame([{"round": 1, "mean_acc": 0.5, "angle_deg": 3.0, "worst10_acc": 0.1}])
    return fj.Result(cfg, metrics, "done")


def test_sweep_table_has_a_column_for_every_option_that_varies():
    runs = [_fake_result(server_lr=0.5, seed=0), _fake_result(server_lr=1.0, seed=0),
            _fake_result(server_lr=0.5, seed=1), _fake_result(server_lr=1.0, seed=1)]
    table = fj.SweepResult(Path("x"), runs, ["a", "b", "c", "d"]).table
    assert list(table.columns) == ["run", "algorithm", "seed", "server_lr", "status", "mean_acc", "angle_deg",
                                   "worst10_acc"]
    assert table["server_lr"].tolist() == [0.5, 1.0, 0.5, 1.0]
    two = [_fake_result(lr=0.01, local_epochs=1), _fake_result(lr=0.05, local_epochs=2)]
    assert [c for c in fj.SweepResult(Path("x"), two, ["a", "b"]).table.columns
            if c in Config.__dataclass_fields__] == ["algorithm", "seed", "local_epochs", "lr"]  # Config's order


def test_fairness_angle_names_its_unit_and_gives_degrees_on_request():
    # A = (1, 0): cos = 1 / (1·√2), the angle is 45° = π/4
    assert float(fj.fairness_angle(np.array([1.0, 0.0]))) == pytest.approx(math.pi / 4, rel=1e-6)
    assert float(fj.fairness_angle(np.array([1.0, 0.0]), degrees=True)) == pytest.approx(45.0, rel=1e-6)
    assert float(fj.fairness_angle(np.array([0.8, 0.8, 0.8]), degrees=True)) == pytest.approx(0.0, abs=1e-3)
    assert "radians" in fj.fairness_angle.__doc__ and "degrees=True" in fj.fairness_angle.__doc__
    assert "`fairness_angle(A, degrees=True)`" in (ROOT / "docs" / "algorithms.md").read_text()


def _user_fedavg():
    def upload(theta, w, w_tilde, state, hp, lr_t):
        return jax.tree_util.tree_map(lambda t, u: t - u, theta, w_tilde), state

    def server(s):
        step = jax.tree_util.tree_map(lambda d: jnp.tensordot(s.weights, d, axes=1), s.deltas)
        return jax.tree_util.tree_map(lambda t, d: t - s.server_lr_t * d, s.theta, step), s.sstate, {}

    return fj.Algorithm("mine_slr", server=server, upload=upload, private_upload=True)


def _fake_run(root: Path, name: str, final_acc: float, **options) -> None:
    """A done run directory: evaluations at rounds 0 and 10 ending at ``final_acc`` (angle 5°)."""
    cfg = Config(**{"dataset": "fmnist", "partition": "pat1", "model": "mlp", "clients": 2, "clients_per_round": 2,
                    "rounds": 10, "eval_every": 10, **options})
    rd = RunDir(root / name)
    rd.create()
    rd.write_config(cfg)
    w = rd.writers(cfg)[0]
    for t, a in ((0, 0.1), (10, final_acc)):
        w.write_scalars(t, {"mean_acc": a, "angle": math.radians(5.0), "angle_deg": 5.0, "acc_0": a, "acc_1": a})
    w.close()
    rd.write_summary({"status": "done", "rounds": 10, "round": 10, "final": {"mean_acc": final_acc}})


def test_report_names_eta_by_a_user_algorithms_swept_server_lr(tmp_path):
    fj.register_algorithm("mine_slr", _user_fedavg)
    finals = {0.5: [0.60, 0.62], 1.0: [0.70, 0.74]}  # server_lr -> final accuracy per seed; lr fixed at 0.05
    for slr, accs in finals.items():
        for seed, a in enumerate(accs):
            _fake_run(tmp_path / "runs", f"mine_slr{slr}_s{seed}", a, algorithm="mine_slr", lr=0.05,
                      server_lr=slr, seed=seed)
    for seed, a in enumerate([0.5, 0.52]):  # a built-in's server_lr still names its variants
        for slr in (0.5, 1.0):
            _fake_run(tmp_path / "runs", f"fedavg_slr{slr}_s{seed}", a + slr / 10, algorithm="fedavg", lr=0.05,
                      server_lr=slr, seed=seed)
    res = fj.report(tmp_path / "runs", tmp_path / "rep")
    rows = {r["algorithm"]: r for r in res["rows"]}
    assert sorted(rows) == ["FedAvg (server_lr=0.5)", "FedAvg (server_lr=1)", "mine_slr"]
    mine = rows["mine_slr"]
    assert mine["eta_option"] == "server_lr" and mine["eta"] == 1.0 and mine["seeds"] == 2
    assert mine["final_acc_mean"] == pytest.approx(np.mean(finals[1.0]), abs=1e-12)
    assert rows["FedAvg (server_lr=1)"]["eta_option"] == "lr"
    md = " ".join((tmp_path / "rep" / "report.md").read_text().split())
    assert "`server_lr` for mine_slr (its swept option)" in md
    assert "0.5: 0.610 (2); **1: 0.720 (2)**" in md  # the η candidates are the server_lr values


def test_docs_say_a_sum_of_squares_penalty_is_not_bit_equal_to_fedprox():
    doc = " ".join((ROOT / "docs" / "extending.md").read_text().split())
    assert "`jnp.sum((w − θ) ** 2)` is the same number in exact arithmetic but adds in another order" in doc
    assert "Write it with `jnp.vdot` to compare against the built-in exactly" in doc

    def user_fedprox():  # as the docs say: the penalty written with jnp.vdot, from the public names only
        def penalty(theta, state, hp):
            leaves = lambda t: jax.tree_util.tree_leaves(t)  # noqa: E731
            return lambda w: 0.5 * hp.mu * sum(jnp.vdot(a - b, a - b, precision=jax.lax.Precision.HIGHEST)
                                               for a, b in zip(leaves(w), leaves(theta)))
        alg = _user_fedavg()
        return fj.Algorithm("my_fedprox", server=alg.server, upload=alg.upload, penalty=penalty, private_upload=True)

    fj.register_algorithm("my_fedprox", user_fedprox)
    opts = {**TINY, "rounds": 2, "mu": 0.1}
    mine, builtin = (fj.run(algorithm=a, progress=False, **opts) for a in ("my_fedprox", "fedprox"))
    for a, b in zip(jax.tree_util.tree_leaves(mine.model), jax.tree_util.tree_leaves(builtin.model)):
        np.testing.assert_array_equal(a, b)


# ---- item 11: a new user's stumbles -------------------------------------------------------------------

def test_sweep_runs_again_with_resume_or_overwrite(tmp_path, compile_cache):
    out = tmp_path / "s"
    grid = {"server_lr": [0.5, 1.0]}
    first = fj.sweep(fj.Config(algorithm="fedavg", **TINY), out=out, grid=grid, progress=False)
    assert first.table["server_lr"].tolist() == [0.5, 1.0] and set(first.table["status"]) == {"done"}
    csvs = {p: p.stat().st_mtime_ns for p in out.glob("*/metrics.csv")}
    assert len(csvs) == 2
    with pytest.raises(fj.ConfigError) as e:  # the same call again: refused, saying how to go on
        fj.sweep(fj.Config(algorithm="fedavg", **TINY), out=out, grid=grid, progress=False)
    assert "\n" not in str(e.value) and "fj.sweep(..., resume=True)" in str(e.value)
    assert "overwrite=True" in str(e.value) and "fedalf sweep" not in str(e.value)
    again = fj.sweep(fj.Config(algorithm="fedavg", **TINY), out=out, grid=grid, progress=False, resume=True)
    assert again.table.equals(first.table)
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/metrics.csv")} == csvs  # read back, not rerun
    with pytest.raises(fj.ConfigError, match="resume=True: the options describe other runs"):
        fj.sweep(fj.Config(algorithm="fedavg", **TINY), out=out, grid={"server_lr": [0.2]}, progress=False,
                 resume=True)
    with pytest.raises(fj.ConfigError, match="choose one"):
        fj.sweep(fj.Config(algorithm="fedavg", **TINY), out=out, grid=grid, resume=True, overwrite=True)
    (out / "notes.txt").write_text("mine")
    new = fj.sweep(fj.Config(algorithm="fedavg", **TINY), out=out, grid={"server_lr": [0.2]}, progress=False,
                   overwrite=True)
    assert new.table["run"].tolist() == [e["name"] for e in json.loads((out / "sweep.json").read_text())["runs"]]
    assert len(new) == 1 and new[0].config.server_lr == 0.2 and new[0].status == "done"
    assert (out / "notes.txt").read_text() == "mine"  # a user's own file stays
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [new.names[0]]  # the old runs' folders went


def _readme_api_block() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Python API", 1)[1]
    return re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)


def test_readme_api_block_prints_what_it_computes_and_runs_twice(tmp_path, monkeypatch, capsys, compile_cache):
    """The README's block pasted into a script, on tiny synthetic data: it prints its results, and a
    second run of it works (the sweep is read back); fj.run without out keeps nothing on disk."""
    real = fj.Config
    monkeypatch.setattr(fj, "Config", lambda **kw: real(**{**kw, **TINY, "clients": 4, "clients_per_round": 2}))
    monkeypatch.chdir(tmp_path)
    code = compile(_readme_api_block(), "README.md", "exec")
    for attempt in (1, 2):
        exec(code, {"__name__": "__main__"})
        out = capsys.readouterr().out
        assert "mean_acc" in out and "angle_deg" in out, attempt         # res.metrics and sw.table
        assert "fedalf_seed2" in out and "fedavg_seed0" in out, attempt  # the sweep's rows
        assert "Result(fedalf, done" in out, attempt                      # fj.load's
        assert "FedALF" in out and "final_acc_mean" in out, attempt       # fj.report's table
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["api-report", "api-sweep"]  # no fj.run folder
    assert "Without ``out`` nothing is kept on disk" in fj.run.__doc__
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "`fj.run(cfg)` without `out` keeps nothing on disk" in readme


def _choice_options(command: str):
    p = cli.build_parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return [a for a in sub.choices[command]._actions if a.choices and a.option_strings]


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_help_shows_a_default_that_is_one_of_the_choices(command):
    for a in _choice_options(command):
        m = re.search(r"\(default: ([^)]*)\)", a.help)
        if m is None:  # says its default in its own words
            continue
        said = m.group(1)
        assert said == "per algorithm" or said.split()[0].rstrip(";,") in a.choices, (a.option_strings, said)
    dual = next(a for a in _choice_options(command) if a.option_strings == ["--dual-from"])
    assert dual.help.endswith("(default: local)")
    assert Config(algorithm="fedalf").resolved_dual_from == "local"
    assert Config(algorithm="fedalf", ldp="adaptive").resolved_dual_from == "local"


def test_default_out_of_a_module_path_name_holds_no_colon_and_no_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))  # examples/ from the checkout
    out = cli.default_out(Config(algorithm="examples.feddyn:feddyn", model="mlp"))
    assert re.fullmatch(r"runs/examples\.feddyn_feddyn-mlp-\d{8}-\d{6}", out), out
    fj.register_model("team/bias", Bias)
    out = cli.default_out(Config(algorithm="fedavg", model="team/bias", dataset="synthetic"))
    assert Path(out).parent == Path("runs") and Path(out).name.startswith("fedavg-team_bias-")


def test_version_prints_the_package_and_jax_versions(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0
    out = capsys.readouterr().out.strip()
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    import jaxlib
    assert out == f"fedalf {project} (jax {jax.__version__}, jaxlib {jaxlib.__version__})"
    assert fj.__version__ == project


def test_fedalf_round_notebook_describes_the_upload_and_solver_it_uses():
    nb = nbformat.read(ROOT / "notebooks" / "fedalf_round.ipynb", as_version=4)
    text = " ".join(" ".join(c.source for c in nb.cells if c.cell_type == "markdown").split())
    code = nb.cells[1].source
    cfg = eval(code[code.index("Config("):code.index("exp = build")].strip(), {"Config": Config})  # its own config
    from fedalf_jax.sim.qp import resolve_method
    assert cfg.resolved_server_target == "increment"
    assert '(`server_target="increment"`, FedALF\'s default' in text and "server_target=\"augmented\"" not in text
    assert "u_i = w_i + (y_i - y_i^-)/\\rho" in text and "u_i = w_i + y_i/\\rho" not in text
    assert resolve_method(cfg.qp_method, cfg.clients_per_round + 1) == "active"
    assert "by the project's active-set solver" in text and "solved inside the compiled round by jaxopt" not in text
    assert "upload={cfg.resolved_server_target}" in code and "QP solver={resolve_method(" in code


def test_a_pathlib_path_is_a_path_kept_as_its_string():
    """``fj.Config(out=Path(...))`` (and ``data_dir``): a ``pathlib.Path`` is accepted and kept as the string
    config.json records, so the config equals the one written with a string; a number is still refused."""
    cfg = fj.Config(dataset="fmnist", out=Path("runs") / "p", data_dir=Path("/tmp"))
    assert cfg.out == "runs/p" and cfg.data_dir == "/tmp" and cfg == fj.Config(dataset="fmnist", out="runs/p",
                                                                               data_dir="/tmp")
    with pytest.raises(fj.ConfigError, match="out must be a path"):
        fj.Config(dataset="synthetic", out=3)
