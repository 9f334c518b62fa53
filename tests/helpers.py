"""Helpers the tests share (import them as ``from helpers import ...``: tests/ is on the path)."""

import hashlib
from pathlib import Path

import flax.linen as nn
import jax.numpy as jnp

from fedalf_jax.cli import main
from fedalf_jax.experiment.rundir import LOCK, RunDir


def cli(capsys, argv):
    """``main(argv)`` in this process: its exit status and what it wrote on stderr."""
    capsys.readouterr()
    code = main(argv)
    return code, capsys.readouterr().err


def one_line_error(code, err, *needles):
    """A user's error: exit status 2, one line, no traceback, naming every one of ``needles``."""
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
