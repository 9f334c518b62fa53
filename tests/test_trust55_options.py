"""Issue 55 items 6, 7, 9, 10, 11, 12 (trust round 5): options nothing reads are named (a user's server that sets
its own step, the evaluation's options of a run evaluating nothing), fj.sweep's grid takes every Config option,
fj.Config takes a run's config.json as it is, a notice is one line, a FEDALF_JEMALLOC that is no shared library
is said once and not preloaded, and experiments/afl_setting.py gives no option its runs do not read."""

import importlib.util
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedalf_jax as fj
from fedalf_jax import allocator as A
from fedalf_jax.experiment import registry
from fedalf_jax.experiment.identity import say_code
from fedalf_jax.experiment.rundir import RunDir
from fedalf_jax.experiment.sweep_plan import non_default, unread_given
from fedalf_jax.notices import Notice

REPO = Path(__file__).resolve().parents[1]
TINY = dict(dataset="synthetic", model="mlp", clients=4, clients_per_round=2, rounds=1, eval_every=1,
            synthetic_train=160, synthetic_test=40, batch_size=20, checkpoint_every="never")
NEVER_READ = ": recorded in the run's config, never read"


# ---- item 6: a server that sets its own step (FedExP, written from the docs) -------------------------------------

def fedexp_server(s: fj.ServerIn):
    """FedExP's extrapolated step: η = max(1, Σ p_i‖Δ_i‖² / (2‖Σ p_i Δ_i‖²)), θ ← θ − η Σ p_i Δ_i; it never reads
    s.server_lr_t."""
    mean = jax.tree_util.tree_map(lambda d: jnp.tensordot(s.weights, d, axes=1), s.deltas)
    sq = sum(jnp.sum(d.reshape(d.shape[0], -1) ** 2, axis=1) for d in jax.tree_util.tree_leaves(s.deltas))
    eta = jnp.maximum(1.0, jnp.sum(s.weights * sq) / (2.0 * sum(jnp.sum(m ** 2) for m in
                                                                  jax.tree_util.tree_leaves(mean)) + 1e-12))
    return jax.tree_util.tree_map(lambda t, m: t - eta * m, s.theta, mean), s.sstate, {}


def _upload(theta, w, w_tilde, state, hp, lr_t):
    return jax.tree_util.tree_map(lambda t, x: t - x, theta, w_tilde), state


def fedexp():
    return fj.Algorithm("t55_fedexp", server=fedexp_server, upload=_upload, reads_server_lr=False)


def fedexp_undeclared():  # the same server, not declaring: nothing is known of what it reads
    return fj.Algorithm("t55_fedexp_undeclared", server=fedexp_server, upload=_upload)


fj.register_algorithm("t55_fedexp", fedexp)
fj.register_algorithm("t55_fedexp_undeclared", fedexp_undeclared)


def test_server_lr_of_a_server_that_sets_its_own_step_is_said_to_have_no_effect():
    cfg = fj.Config(algorithm="t55_fedexp", server_lr=0.5, server_lr_decay=0.99, **TINY)
    assert unread_given([cfg], {"server_lr", "server_lr_decay"}) == (
        "--server-lr 0.5 has no effect with algorithm=t55_fedexp; --server-lr-decay 0.99 has no effect with "
        "algorithm=t55_fedexp" + NEVER_READ)
    # undeclared: the server may read η_g, nothing is said
    assert unread_given([cfg.replace(algorithm="t55_fedexp_undeclared")], {"server_lr"}) is None
    # and fj.run says it, in one Notice, and runs the user's server
    with pytest.warns(Notice) as got:
        res = fj.run(cfg, progress=False)
    said = [str(w.message) for w in got if "has no effect" in str(w.message)]
    assert said == ["--server-lr 0.5 has no effect with algorithm=t55_fedexp; --server-lr-decay 0.99 has no effect "
                    "with algorithm=t55_fedexp" + NEVER_READ]
    assert list(res.metrics["round"]) == [0, 1]


def test_a_sweep_over_the_server_lr_of_such_a_server_is_one_run():
    from fedalf_jax.experiment.sweep_plan import distinct, expand
    base = {k: v for k, v in fj.Config(algorithm="t55_fedexp", **TINY).to_dict().items() if k not in ("seed", "out")}
    kept, said = distinct(expand(base, {"server_lr": [0.5, 1.0]}, [0]))
    assert len(kept) == 1 and said.startswith("t55_fedexp ignores --server-lr: 2 combinations are 1 distinct runs")
    base["algorithm"] = "t55_fedexp_undeclared"
    assert len(distinct(expand(base, {"server_lr": [0.5, 1.0]}, [0]))[0]) == 2


def test_eval_options_of_a_run_that_evaluates_nothing_are_said_to_have_no_effect():
    cfg = fj.Config(algorithm="fedavg", **{**TINY, "eval_every": "never"}, eval_average=True, train_loss_every=5)
    why = "eval_every=never (only an evaluation, --eval-every N, reads it)"
    assert unread_given([cfg], non_default(cfg.to_dict())) == (
        f"--train-loss-every 5 has no effect with {why}; --eval-average on has no effect with {why}" + NEVER_READ)
    assert unread_given([cfg.replace(eval_every=2)], non_default(cfg.to_dict())) is None


# ---- item 7: fj.sweep's grid takes every Config option -----------------------------------------------------------

def test_the_grid_takes_options_the_base_leaves_at_their_off_value(tmp_path, monkeypatch):
    res = fj.sweep(fj.Config(algorithm="fedavg", **{**TINY, "checkpoint_every": "1"}), out=tmp_path / "s",
                   grid={"local_steps": [1, 3]}, progress=False)
    assert [r.config.local_steps for r in res.runs] == [1, 3]
    a, b = (jax.tree_util.tree_leaves(r.model) for r in res.runs)
    assert not all(bool(jnp.array_equal(x, y)) for x, y in zip(a, b))  # one step is not three
    # eval_average likewise (the runs it plans, captured before anything is compiled)
    from fedalf_jax.experiment import sweep as S
    planned = []

    def plan_only(configs, out, **kw):
        planned.extend(configs)
        raise KeyboardInterrupt  # stop here: nothing to run
    monkeypatch.setattr(S, "sweep", plan_only)
    with pytest.raises(KeyboardInterrupt):
        fj.sweep(fj.Config(algorithm="fedavg", **TINY), out=tmp_path / "e", grid={"eval_average": [False, True]})
    assert [c.eval_average for c in planned] == [False, True]
    with pytest.raises(fj.ConfigError, match=r"grid option\(s\) \['seed'\] are not config options"):
        fj.sweep(fj.Config(algorithm="fedavg", **TINY), out=tmp_path / "x", grid={"seed": [0, 1]})


# ---- item 9: fj.Config(**json.load(open("config.json"))) ---------------------------------------------------------

def test_config_takes_a_runs_config_json_as_it_is(tmp_path):
    cfg = fj.Config(algorithm="fedavg", ldp="adaptive", **TINY)
    RunDir(tmp_path).write_config(cfg)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert "privacy" in saved  # the derived record config.json carries for the reader
    assert fj.Config(**saved) == cfg == fj.Config.from_dict(saved)
    with pytest.raises(fj.ConfigError) as e:
        fj.Config(**saved, colour="blue")
    assert str(e.value) == ("unknown config option(s) ['colour']: Config takes the long flag names with '_' (e.g. "
                            "clients_per_round); a run's saved config reads back with fj.Config.from_dict(d) or "
                            "fj.load(run_dir).config")


# ---- item 10: a notice is one line -------------------------------------------------------------------------------

def test_a_notice_is_one_line_without_the_source_line(capsys):
    cfg = fj.Config(algorithm="t55_fedexp", **TINY)
    covers = registry.code("algorithm", "t55_fedexp")[1]
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        # shown as Python shows a script's warnings (pytest records them instead)
        warnings.showwarning = lambda m, c, f, n, file=None, line=None: sys.stderr.write(
            warnings.formatwarning(m, c, f, n, line))
        line = sys._getframe().f_lineno + 1
        say_code(cfg)
    assert capsys.readouterr().err == (f"{__file__}:{line}: Notice: code digest of algorithm 't55_fedexp' covers "
                                       f"{covers}\n")
    # pytest's summary and any caller formatting a notice get the one line; other warnings keep their source line
    assert warnings.formatwarning("ε small", Notice, "f.py", 3, "  say_privacy(cfg)") == "f.py:3: Notice: ε small\n"
    assert warnings.formatwarning("x", UserWarning, "f.py", 3, "  src()") == "f.py:3: UserWarning: x\n  src()\n"


# ---- item 11: FEDALF_JEMALLOC naming a file that is not a shared library -----------------------------------------

def test_a_jemalloc_that_is_not_a_shared_library_is_said_once_and_not_preloaded(tmp_path, capsys):
    text = tmp_path / "libjemalloc.so.2"
    text.write_text("INPUT ( libjemalloc.so.2 )\n")  # a linker script, say: the loader cannot preload it
    env = {A.JEMALLOC_ENV: str(text)}
    assert A.settings(env) == {"GLIBC_TUNABLES": A.THP_TUNABLE, A.APPLIED: "thp"}
    assert A.settings(env)[A.APPLIED] == "thp"
    assert capsys.readouterr().err == (f"fedalf: warning: {A.JEMALLOC_ENV}={text} is not a shared library (no ELF "
                                       f"header): running without jemalloc (set it to a libjemalloc.so, or unset it "
                                       f"to look in the usual places)\n")


@pytest.mark.skipif(not (sys.platform.startswith("linux") and A._glibc()), reason="glibc on Linux only")
def test_the_command_with_such_a_jemalloc_says_it_once_and_the_loader_nothing(tmp_path):
    text = tmp_path / "jemalloc.txt"
    text.write_text("not a library\n")
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "LD_PRELOAD", "MALLOC_CONF", A.ENV,
                                                           A.APPLIED)}
    p = subprocess.run([sys.executable, "-m", "fedalf_jax.cli", "--help"], cwd=REPO, capture_output=True, text=True,
                       env={**env, A.JEMALLOC_ENV: str(text)}, timeout=120)
    assert p.returncode == 0
    assert p.stderr.splitlines() == [f"fedalf: warning: {A.JEMALLOC_ENV}={text} is not a shared library (no ELF "
                                     f"header): running without jemalloc (set it to a libjemalloc.so, or unset it to "
                                     f"look in the usual places)"]


# ---- item 12: experiments/afl_setting.py gives its runs no option they do not read -------------------------------

def _afl_script():
    spec = importlib.util.spec_from_file_location("t55_afl_setting", REPO / "experiments" / "afl_setting.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_afl_settings_runs_get_no_notice_of_an_unread_option():
    afl = _afl_script()
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(12, 4, 4, 1)).astype(np.float32), np.repeat(np.arange(3), 4)
    lists = [np.flatnonzero(y == k) for k in range(3)]
    fj.register_dataset("fmnist3", x, y, x, y, num_classes=3, clients=(lists, lists))  # the script's, tiny
    fj.register_model("logreg", afl.LogReg)
    checked = 0
    for protocol, table in (("current", afl.ALGORITHMS), ("qffl", afl.QFFL_ALGORITHMS)):
        base = afl.base_options(protocol, 200)
        for opts in table.values():
            cfg = fj.Config(**base, **opts)
            assert unread_given([cfg], set(base) | set(opts) | non_default(cfg.to_dict())) is None, (protocol, opts)
            checked += opts["algorithm"] == "qfedavg"
    assert checked == 4  # q = 5 and q = 1, in both protocols
