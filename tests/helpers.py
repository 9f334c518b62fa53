"""Helpers the tests share (import them as ``from helpers import ...``: tests/ is on the path)."""

import hashlib
import time
from pathlib import Path

import flax.linen as nn
import jax.numpy as jnp
import pytest

from fedalf_jax.cli import main
from fedalf_jax.experiment.rundir import LOCK, RunDir


def cli(capsys, argv):
    """``main(argv)`` in this process: its exit status and what it wrote on stderr."""
    capsys.readouterr()
    code = main(argv)
    return code, capsys.readouterr().err


def assert_command_parses(where: str, argv: list) -> None:
    """``fedalf ARGV`` as a page gives it parses with the real parser (a renamed flag fails), and a ``run`` or
    ``bench`` without ``--config``/``--resume`` has valid options too (a ConfigError fails)."""
    from fedalf_jax import cli_options
    if "--help" in argv:
        return
    try:
        args = cli_options.build_parser().parse_args(argv)
    except SystemExit as e:
        pytest.fail(f"{where} does not parse (exit {e.code})")
    if argv[0] in ("run", "bench") and "--config" not in argv and "--resume" not in argv:
        cli_options.config_from_args(args)


def without_deprecation(err: str) -> str:
    """``err`` without the one line naming the replacement of a 0.1 client field (the tests' algorithms that still
    use them test something else)."""
    from fedalf_jax.sim.algorithms import DEPRECATED
    return "\n".join(ln for ln in err.splitlines() if DEPRECATED not in ln)


def one_line_error(code, err, *needles):
    """A user's error: exit status 2, one line, no traceback, naming every one of ``needles``."""
    err = without_deprecation(err)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for n in needles:
        assert n in err, err


def hashes(folder: Path) -> dict:
    """Every file below ``folder`` (but the lock) to its bytes' hash."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != LOCK}


def rounds(folder: Path) -> list:
    """The rounds of a run directory's metrics.csv."""
    return [int(r) for r in RunDir(folder).metrics()["round"]]


class Bias(nn.Module):
    """A user's plain model (no ``train`` argument): logits = one bias vector b for every example, so client
    i's loss on label y is f_i(b) = logsumexp(b) − b_y and its gradient softmax(b) − e_y, by hand."""
    num_classes: int

    @nn.compact
    def __call__(self, x):
        b = self.param("b", nn.initializers.zeros, (self.num_classes,))
        return jnp.broadcast_to(b, (x.shape[0], self.num_classes))


def cli_resume_equals_one_go(tmp_path: Path, algorithm: str) -> None:
    """``algorithm`` (``module:attribute``) run by the CLI for one round, then ``--resume`` for the second, gives
    the model and metrics of two rounds in one go (its client and server states, keys included, checkpoint).
    train_loss is left out: it is evaluated at a run's last round, which the one-round call's round 1 was."""
    import os
    import subprocess
    import sys

    import chex
    import numpy as np

    import fedalf_jax as fj
    root = Path(__file__).resolve().parents[1]
    opts = ["--dataset", "synthetic", "--model", "mlp", "--clients", "6", "--clients-per-round", "3", "--eval-every",
            "1", "--synthetic-train", "240", "--synthetic-test", "60", "--batch-size", "20", "--no-progress"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    out = tmp_path / "cli"
    argv = ["run", "--algorithm", algorithm, *opts, "--out", str(out)]
    if str(root) not in sys.path:  # examples/ importable, as from the checkout's root
        sys.path.insert(0, str(root))
    assert main([*argv, "--rounds", "1"]) == 0  # in this process; the resume in a fresh one, as a user's would be
    p = subprocess.run([sys.executable, "-m", "fedalf_jax.cli", *argv, "--rounds", "2", "--resume"], cwd=root, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    resumed = fj.load(out)
    assert resumed.status == "done" and list(resumed.metrics["round"]) == [0, 1, 2]
    whole = fj.run(fj.Config(algorithm=algorithm, dataset="synthetic", model="mlp", clients=6, clients_per_round=3,
                             eval_every=1, synthetic_train=240, synthetic_test=60, batch_size=20, rounds=2),
                   progress=False)
    cols = [c for c in whole.metrics.columns if c not in ("seconds_per_round", "train_loss")]
    assert set(resumed.metrics.columns) == set(whole.metrics.columns)
    np.testing.assert_array_equal(resumed.metrics[cols].to_numpy(), whole.metrics[cols].to_numpy())
    chex.assert_trees_all_equal(dict(resumed.model), dict(whole.model))


def wait_for(cond, proc, *, timeout: float = 180, poll: float = 0.01) -> None:
    """Polls ``cond()`` every ``poll`` s until it holds; the test fails (the process killed, its output shown)
    when the subprocess ``proc`` ends first or ``timeout`` s pass."""
    deadline = time.time() + timeout
    while not cond():
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            pytest.fail(f"the process ended or hung before the condition: {proc.communicate()}")
        time.sleep(poll)
