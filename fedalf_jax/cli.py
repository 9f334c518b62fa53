"""The ``fedalf`` command line (DESIGN §9): ``fedalf run`` and ``fedalf bench``.

Every user error (bad flag, bad value, missing data or config file) ends in one line on stderr and
a non-zero exit, never a traceback. Set ``FEDALF_DEBUG=1`` to see the traceback anyway.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import typing
import warnings
from pathlib import Path

from . import config as C
from .config import Config, ConfigError

# flag -> choices, for the string options
_CHOICES = {
    "algorithm": C.ALGORITHMS, "dataset": C.DATASETS, "partition": C.PARTITIONS, "assign": C.ASSIGNS,
    "model": C.MODELS, "ldp": C.LDPS, "dp": C.DPS, "client_grad": C.CLIENT_GRADS, "layers": C.LAYERS,
    "server_target": C.SERVER_TARGETS, "dual_from": C.DUAL_FROM, "qp_method": C.QP_METHODS,
    "data_source": ("auto", "dir", "tfds"), "client_map": C.CLIENT_MAPS, "synthetic_like": ("fmnist", "cifar10", "cifar100"),
}
_HELP = {
    "config": "JSON file of options (flags given on the command line override it)",
    "clients": "number of clients N", "clients_per_round": "clients sampled per round m",
    "lr": "local learning rate η_l", "lr_decay": "per-round decay of η_l",
    "server_lr": "server learning rate η_g (default per algorithm)", "rho": "ADMM penalty ρ",
    "mu": "FedProx μ", "q": "qFedAvg q", "epsilon": "privacy budget ε", "delta": "Gaussian DP δ",
    "clip": "Gaussian DP clipping norm", "eval_every": "rounds per compiled chunk between evaluations",
    "out": "run directory (config.json, clients.json, metrics.csv, checkpoint.npz)",
    "history": "FedLF history rows (default: on for fedlf, off for fedalf)",
    "conv_impl": "convolution implementation: auto (per backend), lax, im2col, ...",
    "client_map": "how the compiled round maps over clients: vmap, map (lax.map), auto (per backend)",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage dump
        self.exit(2, f"{self.prog}: error: {message}\n")


def _bool(s: str) -> bool:
    v = s.lower()
    if v in ("on", "true", "1", "yes"):
        return True
    if v in ("off", "false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected on/off, got {s!r}")


def _add_config_flags(p: argparse.ArgumentParser) -> None:
    hints = typing.get_type_hints(Config)
    for f in dataclasses.fields(Config):
        flag = "--" + f.name.replace("_", "-")
        t = hints[f.name]
        base = next((a for a in typing.get_args(t) if a is not type(None)), t)
        kw = {"dest": f.name, "default": None, "help": _HELP.get(f.name, f"(default: {f.default})")}
        if f.name in _CHOICES:
            kw["choices"] = _CHOICES[f.name]
        elif base is bool:
            kw["type"], kw["metavar"] = _bool, "{on,off}"
        elif base is int:
            kw["type"] = int
        elif base is float:
            kw["type"] = float
        p.add_argument(flag, **kw)


def config_from_args(args: argparse.Namespace) -> Config:
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(Config)
             if getattr(args, f.name, None) is not None}
    if getattr(args, "resume", False):
        if not args.out:
            raise ConfigError("--resume needs --out DIR, the run directory to continue")
        path = Path(args.out) / "config.json"
        if not path.is_file():
            raise ConfigError(f"--resume: {path} not found; is {args.out} a run directory?")
        base = Config.load(path).to_dict()
        changed = sorted(k for k in given if k not in ("rounds", "out") and given[k] != base.get(k))
        if changed:
            raise ConfigError(f"--resume continues a run as configured; only --rounds may change, not {changed}")
        return Config.from_dict({**base, **given})
    base = Config.load(args.config).to_dict() if args.config else {}
    return Config.from_dict({**base, **given})


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="fedalf", description="Fair, private federated learning simulator (FedALF, LDP-FedALF).")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    r = sub.add_parser("run", help="run one experiment")
    r.add_argument("--config", default=None, help=_HELP["config"])
    r.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_config_flags(r)
    b = sub.add_parser("bench", help="round throughput: compiled vmapped round vs a sequential client loop")
    b.add_argument("--config", default=None, help=_HELP["config"])
    b.add_argument("--repeats", type=int, default=5, help="timed rounds per variant (median reported)")
    b.add_argument("--json", default=None, help="write the figures to this JSON file")
    b.add_argument("--no-sequential", action="store_true", help="time only the compiled round")
    _add_config_flags(b)
    return p


def _cmd_run(args) -> int:
    from .run import run
    cfg = config_from_args(args)
    rows = run(cfg, progress=not args.no_progress, resume=args.resume)
    last = rows[-1]
    where = f" -> {cfg.out}" if cfg.out else ""
    print(f"round {last['round']}: mean_acc {last['mean_acc']:.4f}  angle {last['angle']:.4f} rad "
          f"({last['angle_deg']:.2f}°){where}")
    return 0


def _cmd_bench(args) -> int:
    from .bench import bench
    if args.repeats < 1:
        raise ConfigError(f"--repeats must be a positive integer, got {args.repeats}")
    cfg = config_from_args(args)
    res = bench(cfg, repeats=args.repeats, sequential=not args.no_sequential)
    for k, v in res.items():
        print(f"{k:>28}: {v}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


def _one_line_warning(message, category, filename, lineno, file=None, line=None):
    print(f"fedalf: warning: {message}", file=sys.stderr if file is None else file)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    warnings.showwarning = _one_line_warning
    from .data import DataError
    from .models import ModelError
    from .partitions import PartitionError
    user_errors = (ConfigError, DataError, PartitionError, ModelError, FloatingPointError)
    try:
        return {"run": _cmd_run, "bench": _cmd_bench}[args.command](args)
    except user_errors as e:
        if os.environ.get("FEDALF_DEBUG"):
            raise
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"fedalf {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fedalf: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
