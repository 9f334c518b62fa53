"""The ``fedalf`` command line's options: what each flag is (its choices, its help text, its group in
``--help``), the parser of the four commands built from the config's fields, and the config a command's
flags (over a ``--config`` file, or a resumed run's ``config.json``) describe. The commands themselves are
in :mod:`fedalf_jax.cli`, which re-exports the names here that code and tests import from it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import typing

from .config import config as C
from .config.config import Config, ConfigError
from .config.identity import identity_diff

# flag -> choices, for the string options
_CHOICES = {
    "partition": C.PARTITIONS, "assign": C.ASSIGNS, "ldp": C.LDPS, "dp": C.DPS, "client_grad": C.CLIENT_GRADS, "layers": C.LAYERS,
    "server_target": C.SERVER_TARGETS, "dual_from": C.DUAL_FROM, "ldp_on": C.LDP_ON, "fair_norm": C.FAIR_NORMS, "qp_method": C.QP_METHODS, "log": C.LOGS,
    "neighbouring": C.NEIGHBOURING, "state_dtype": C.STATE_DTYPES, "matmul_precision": C.MATMUL_PRECISIONS,
    "local_optimizer": C.LOCAL_OPTIMIZERS,
    "data_source": ("auto", "dir", "tfds"), "client_map": C.CLIENT_MAPS, "run_map": C.CLIENT_MAPS, "synthetic_like": ("fmnist", "cifar10", "cifar100"),
}
_HELP = {
    "config": "JSON file of options, e.g. a run's config.json (flags given on the command line override it; "
              "default: none, every option at its default)",
    "clients": "number of clients N", "clients_per_round": "clients sampled per round m",
    "lr": "local learning rate η_l", "lr_decay": "per-round decay of η_l: round t trains at η_l·lr_decay^t",
    "server_lr": "server learning rate η_g, the step the server takes along the aggregated update (default per "
                 "algorithm: fedlf 0.05, fedalf 0.5 (1.0 with a privacy mechanism), 1.0 for the others and your own)", "rho": "ADMM penalty ρ (default per algorithm: fedalf 0.01, fedadmm 0.1)",
    "server_target": "what an ADMM client uploads: increment (FedADMM's released rule; fedalf's default), "
                     "augmented, model (fedadmm's default)",
    "mu": "FedProx μ", "q": "qFedAvg q",
    "epsilon": "privacy budget ε: per upload (each round a client takes part) for --ldp and --dp gaussian, for the "
               "whole run for --dp central (docs/privacy.md; default: 2.0)", "delta": "Gaussian DP δ",
    "clip": "Gaussian DP clipping norm",
    "eval_every": ("rounds between evaluations of every client (and at round 0 and the last round); 'never': no "
                   "evaluation at all, for timing and throw-away runs: no metrics rows, no train loss, summary.json "
                   "says \"evaluated\": false, and a diverged model goes undetected"),
    "out": "run directory (config.json, clients.json, metrics.csv, checkpoint.npz); "
           "default runs/<algorithm>-<model>-<time>",
    "history": "FedLF history rows (default: on for fedlf and fedalf)",
    "history_tau": "τ, how many rounds a stored history row joins the QPs after its client's upload "
                   "(default: FedLF's ⌊M/m⌋, M the clients seen so far; 0: none)",
    "train_loss_every": "rounds between evaluations of the train loss over all training samples (and at the end)",
    "checkpoint_every": ("checkpoint every N rounds (e.g. 50) or every N seconds/minutes (300s, 5m); always at the end; "
                         "'never': no checkpoint at all (a throw-away run: the metrics and summary only, "
                         "not resumable)"),
    "neighbouring": "Gaussian DP neighbouring relation: add_remove (sensitivity clip) or replace (2·clip)",
    "state_dtype": "storage of the per-client rows (ADMM duals, FedLF history): bfloat16 halves their memory",
    "matmul_precision": "precision of the model's float32 matmuls and convolutions (clients' training and "
                        "evaluation): default (the default: XLA's choice, TF32 on recent NVIDIA GPUs), high, "
                        "highest (true float32: use it to compare GPU runs with CPU runs); a CPU computes all "
                        "three in float32",
    "devices": "run: shard the sampled clients over N devices; sweep: shard the runs (docs/lab/scaling.md)",
    "log": "metric writers: csv (metrics.csv, always written), tensorboard (also TensorBoard scalars)",
    "conv_impl": "convolution implementation: auto (per backend; on CPU im2col to train, lax for the clients' "
                 "losses and the evaluation), lax, im2col, ...",
    "client_map": "how the compiled round maps over clients: vmap, map (lax.map), auto (per backend)",
    "run_map": "how a sweep's program maps over its runs: vmap, map (lax.map, one after another), auto (map on CPU)",
    "algorithm": "the federated algorithm: fedavg, fedprox, qfedavg, fedadmm, fedlf, fedalf (docs/algorithms.md), or "
                 "your own as module:attribute, e.g. examples.feddyn:feddyn (docs/extending.md)",
    "dataset": "fmnist, cifar10, cifar100, synthetic (offline data shaped like --synthetic-like), or your own arrays "
               "as module:attribute (docs/extending.md)",
    "data_dir": "folder of the dataset's files (FMNIST IDX .gz, CIFAR python pickles) (default: $FEDALF_DATA_DIR, "
                "then the known places, e.g. /usr/share/datasets/fashion-mnist from Debian's dataset-fashion-mnist)",
    "data_source": "where the data comes from: dir (--data-dir), tfds (tensorflow-datasets), auto (dir, then tfds)",
    "synthetic_like": "the real dataset whose shapes and class count --dataset synthetic copies",
    "synthetic_train": "training samples of --dataset synthetic", "synthetic_test": "test samples of --dataset synthetic",
    "partition": "how samples are split over clients: pat1 (every client holds exactly 2 classes), pat2 (exactly "
                 "1 class; the seed paper's pathological partitions), dirichlet (Dirichlet(--alpha) label shares), iid, "
                 "given (a data set's own client lists)",
    "assign": "pat1/pat2 class assignment: fedlf (the FedLF authors' scheme, train and test pools merged) or "
              "shards (FedAvg-style shards of the train set)",
    "alpha": "Dirichlet concentration of --partition dirichlet (smaller: more skewed)",
    "model": "cnn (the paper's), cnn_bn (with batch norm; no privacy mechanism), mlp (200-200, FedLF's FMNIST model), "
             "or your own flax module's factory as module:attribute (docs/extending.md)",
    "rounds": "communication rounds", "local_epochs": "local epochs E per round", "batch_size": "local minibatch size B",
    "availability": "which clients are online each round (docs/federations.md): always (every client), beta:A,B "
                    "(each client on with its own p_i ~ Beta(A,B), drawn once per seed), size (p_i = n_i / max n), "
                    "labels (p_i = k_i / max k, k_i the classes it holds), cyclic:PERIOD (on half of every PERIOD "
                    "rounds, per-client phases), markov:P_ON,P_OFF (an on/off chain per client) or trace:FILE.npz (an "
                    "[N, T] boolean array 'avail' replayed); the round samples its m from those online, masking the "
                    "slots left over",
    "dropout": "probability P in [0, 1] that a sampled client's upload is lost after training; the server "
               "averages what arrived (weights renormalised); a round where nothing arrives keeps the model",
    "stragglers": "per-client speeds (docs/federations.md): none, or lognormal:SIGMA[,JITTER] (speed exp(SIGMA z_i), "
                  "drawn once per seed, times exp(JITTER z) each round); a client of speed v completes min(K_i, "
                  "floor(v D)) of its K_i local steps by the deadline D",
    "deadline": "the round's deadline D in local steps of a speed-1 client (with --stragglers)",
    "straggler_policy": "what a client that misses the deadline sends: partial (its completed steps' update; "
                        "facts.steps counts them) or drop (nothing: its upload is lost)",
    "local_steps": "K local minibatch steps per round instead of epochs (exclusive with --local-epochs): each of B "
                   "examples, cycling through reshuffled passes over the client's data (fewer than B examples: all "
                   "of them every step) (default: none: --local-epochs)",
    "eval_average": "also evaluate the averaged iterate, the mean of the global models after rounds 1..t (AFL's "
                    "reported model): avg_* columns beside the last iterate's in metrics.csv and summary.json "
                    "(default: off)",
    "server_lr_decay": "per-round decay of η_g: round t steps η_g·server_lr_decay^t (default per algorithm: fedlf "
                       "and fedalf 0.999, 1.0 (none) for the others and your own)",
    "client_grad": "FedLF's client: full (full-batch gradient, FedLF's rule) or local (E epochs of SGD, like the others)",
    "layers": "the fair direction's blocks: module (one per flax module) or tensor (one per parameter tensor)",
    "merge_tol": "fair direction: a block whose hull is this close to 0 (relative) merges into the next one",
    "qp_method": "the per-layer dual QP solver: active (Wolfe's active-set method, exact), osqp (jaxopt "
                 "BoxOSQP + active-set polish), pgd (projected gradient), auto (active up to 256 rows, pgd above)",
    "dual_from": "ADMM dual update from the local model (local, the paper's; with the increment or augmented "
                 "upload it voids the privacy guarantee) or from the perturbed one (perturbed: keeps it) "
                 "(default: local)",
    "ldp": "local differential privacy on each upload: adaptive (the paper's LDP-FedALF), ldp_fl, none",
    "ldp_on": "what the local mechanism perturbs: weights (each weight's offset from its tensor's centre, the "
              "paper's reading) or update (each value of w_i − θ_t: the noise scales with the update); default: "
              "update when a mechanism is on",
    "fair_norm": "FedLF/FedALF: the length the fair direction is rescaled to, ‖mean Δ‖ as received (raw) or "
                 "with the privacy noise's share removed (denoised); default: denoised when a mechanism is on",
    "dp": "gaussian: local Gaussian DP on each upload (clip, then noise; the paper's DP-FedALF); central: user-level "
          "DP-FedAvg (each upload clipped to --clip, the server adds noise calibrated so the whole run is "
          "(--epsilon, --delta)-DP; fedalf/fedlf need --history off); none",
    "seed": "run seed (data partition, sampling, initialisation, noise)",
    "local_optimizer": "the clients' local optimiser (optax, its state fresh each round): sgd, momentum or nesterov "
                       "(β 0.9), adam (optax's defaults); for an algorithm that does not choose its own (default: "
                       "sgd, the plain step w − η_l·g, or the algorithm's own optimiser where it chooses one)",
    "alg_args": "a user's algorithm factory's keyword arguments, NAME=VALUE (repeatable; e.g. --algorithm "
                "examples.fedgkd:fedgkd --alg-arg K=2): each VALUE read as JSON (2 an int, 0.5 a float, true a bool, "
                "anything else a string); static, so a different value is a different program and run; a built-in "
                "algorithm refuses it (its options are flags) (default: none, the factory's own defaults)",
    "hp": "the algorithm's own hyper-parameters, NAME=VALUE (repeatable; e.g. --hp beta1=0.9 beta2=0.99): the names "
          "its Algorithm(hparams=...) declares, traced like --lr (default: the algorithm's declared values)",
}
_ALG_ARGS_SWEEP = ("a user's algorithm factory's keyword arguments, NAME=VALUE[,VALUE...] (repeatable; e.g. "
                   "--alg-arg K=1,2): each VALUE read as JSON (int, float, bool, else a string); each value is a run "
                   "of its own program (static, like --model); the built-in algorithms of a sweep that also runs a "
                   "user's take none (default: none, the factory's own defaults)")
_HP_SWEEP = ("the algorithm's own hyper-parameters, NAME=VALUE[,VALUE...] (repeatable; e.g. --hp beta1=0.9,0.99 "
             "beta2=0.99): each name's values are swept in one program like --lr, in the runs of the algorithms "
             "that declare NAME; ALG.NAME=VALUE sets it for algorithm ALG only (e.g. --hp fedyogi.beta2=0.999) "
             "(default: the algorithm's declared values)")


_CTRL_C = ("Ctrl-C: the round in flight finishes, then its metrics and a checkpoint of it are written (before the "
           "first round: the command stops at once, leaving nothing) and the command exits with status 130, "
           "printing how to resume (--resume); a second "
           "Ctrl-C exits at once, leaving the last checkpoint intact. SIGTERM, SIGHUP and SIGUSR1 do the same "
           "(exit status 143, 129, 138; Slurm: --signal=TERM@120, docs/lab/scaling.md). Only one process may write "
           "a folder at a time.")


_PER_ALGORITHM = ("server_lr", "server_lr_decay", "rho", "server_target", "history")

# fedalf bench times rounds: it never evaluates the train loss, checkpoints or writes metrics, so these
# options have no flag there (a --config file may still hold them); rounds and eval_every only size a
# --sweep-width call.
_BENCH_UNUSED = ("train_loss_every", "checkpoint_every", "log")
_BENCH_HELP = {
    "rounds": "with --sweep-width: a call runs min(--eval-every, --rounds) rounds",
    "eval_every": "with --sweep-width: rounds per timed call, then an evaluation of every client",
    "run_map": "with --sweep-width and --depth-width: how the sweep's program maps over its runs: vmap, map "
               "(lax.map, one after another), auto (map on CPU)",
    "seed": "seed of the timed run (with --sweep-width and --depth-width: seeds SEED .. SEED+W−1)",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage dump
        self.exit(2, f"{self.prog}: error: {message}\n")


class _Version(argparse.Action):
    """``fedalf --version``: the package's and JAX's versions, read from the installed metadata (JAX is
    not imported)."""

    def __init__(self, option_strings, dest, **kw):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit(0)


def version_text() -> str:
    """``fedalf 0.1.0 (jax 0.4.35, jaxlib 0.4.35)``."""
    from importlib import metadata

    from . import __version__

    def installed(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"
    return f"fedalf {__version__} (jax {installed('jax')}, jaxlib {installed('jaxlib')})"


def _eval_every(s: str):
    """``--eval-every``: a number of rounds, or ``never`` (no evaluation at all)."""
    if s.strip().lower() == "never":
        return "never"
    try:
        return int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number of rounds or never, got {s!r}") from None


def _bool(s: str) -> bool:
    v = s.lower()
    if v in ("on", "true", "1", "yes"):
        return True
    if v in ("off", "false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected on/off, got {s!r}")


def _default_text(f: dataclasses.Field) -> str:
    if f.default is None:
        return "per algorithm" if f.name in _PER_ALGORITHM else "none"
    return {True: "on", False: "off"}.get(f.default, f.default) if isinstance(f.default, bool) else str(f.default)


# The config flags' groups in --help, in this order (62 options in one list were hard to scan); an option
# named in none (one added later) is listed under the last, "other options".
FLAG_GROUPS = {
    "data and partition": ("dataset", "data_dir", "data_source", "synthetic_like", "synthetic_train",
                           "synthetic_test", "partition", "assign", "alpha"),
    "federated training": ("algorithm", "alg_args", "rounds", "clients", "clients_per_round", "local_epochs", "local_steps",
                           "availability", "dropout", "stragglers", "deadline", "straggler_policy", "batch_size", "lr",
                           "lr_decay", "server_lr", "server_lr_decay", "local_optimizer", "seed"),
    "the algorithms' options": ("mu", "rho", "q", "client_grad", "history", "history_tau", "layers", "merge_tol",
                                "qp_method", "server_target", "dual_from", "fair_norm", "hp"),
    "privacy": ("ldp", "ldp_on", "dp", "epsilon", "delta", "clip", "neighbouring"),
    "model and execution": ("model", "conv_impl", "client_map", "run_map", "devices", "state_dtype",
                            "matmul_precision"),
    "evaluation, checkpoints and output": ("eval_every", "eval_average", "train_loss_every", "checkpoint_every", "log",
                                           "out"),
}


def _flag_groups(p: argparse.ArgumentParser) -> dict:
    """The argument group of each config option (:data:`FLAG_GROUPS`), made in their order."""
    groups = {title: p.add_argument_group(title) for title in (*FLAG_GROUPS, "other options")}
    return {name: groups[title] for title, names in FLAG_GROUPS.items() for name in names} | {None: groups["other options"]}


# Options that a sweep takes once, for all its runs: a list of them would name no grid axis (where runs are
# saved and logged, and where the data is read from, change nothing a run computes)
SWEEP_SINGLE = ("checkpoint_every", "log", "data_dir")


def _add_config_flags(p: argparse.ArgumentParser, *, multi: bool = False, skip: tuple = (),
                      helps: dict | None = None) -> None:
    """One flag per config option; ``multi``: each takes one or more values (``fedalf sweep``); ``skip``: the
    options the command does not use (no flag); ``helps``: descriptions replacing :data:`_HELP`'s."""
    helps = helps or {}
    hints = typing.get_type_hints(Config)
    group_of = _flag_groups(p)
    for f in dataclasses.fields(Config):
        if (multi and f.name in ("seed", "out")) or f.name in skip:
            continue
        p = group_of.get(f.name, group_of[None])
        if f.name == "hp":
            _hp_flag(p, multi, helps.get("hp") or (_HP_SWEEP if multi else _HELP["hp"]))
            continue
        if f.name == "alg_args":
            p.add_argument("--alg-arg", dest="alg_args", nargs="+", action="extend", default=None,
                           metavar="NAME=VALUE", type=lambda t: _alg_arg_value(t, many=multi),
                           help=(helps.get("alg_args") or (_ALG_ARGS_SWEEP if multi else _HELP["alg_args"])
                                 ).replace("%", "%%"))
            continue
        flag = "--" + f.name.replace("_", "-")
        t = hints[f.name]
        base = next((a for a in typing.get_args(t) if a is not type(None)), t)
        text = helps.get(f.name) or _HELP.get(f.name, f.name.replace("_", " "))  # tests/test_help.py: every option has one
        if "default" not in text:  # some descriptions say their default themselves
            text += f" (default: {_default_text(f)})"
        kw = {"dest": f.name, "default": None, "help": text.replace("%", "%%")}
        if multi and f.name not in SWEEP_SINGLE:
            kw["nargs"] = "+"
        if f.name in _CHOICES:
            kw["choices"] = _CHOICES[f.name]
        elif f.name == "eval_every":
            kw["type"], kw["metavar"] = _eval_every, "{N,never}"
        elif base is bool:
            kw["type"], kw["metavar"] = _bool, "{on,off}"
        elif base is int:
            kw["type"] = int
        elif base is float:
            kw["type"] = float
        p.add_argument(flag, **kw)


def _hp_value(text: str, *, many: bool):
    """``--hp NAME=VALUE`` (``many``: ``NAME=VALUE[,VALUE...]``) -> ``(NAME, value or [values])``."""
    name, eq, values = text.partition("=")
    name = name.strip()
    owner, _, own = name.rpartition(".") if many else ("", "", name)  # sweep: ALG.NAME, for ALG's runs only
    if not eq or not own.isidentifier() or (many and "." in name and not owner):
        eg = "beta1=0.9 or fedadam.beta1=0.9" if many else "beta1=0.9"
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE (e.g. {eg}), got {text!r}")
    parts = values.split(",") if many else [values]
    out = []
    for v in parts:
        try:
            out.append(float(v))
        except ValueError:
            why = " (several values: fedalf sweep)" if "," in v and not many else ""
            raise argparse.ArgumentTypeError(f"{name}: {v.strip()!r} is not a number{why}") from None
    return name, out if many else out[0]


def _alg_arg_value(text: str, *, many: bool):
    """``--alg-arg NAME=VALUE`` (``many``: ``NAME=VALUE[,VALUE...]``) -> ``(NAME, value or [values])``, each
    value a JSON scalar (``2`` an int, ``0.5`` a float, ``true`` a bool, ``"a,b"`` or anything else not JSON a
    string)."""
    name, eq, values = text.partition("=")
    name = name.strip()
    if not eq or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE (e.g. K=2), got {text!r}")
    out = []
    for v in (values.split(",") if many and not values.strip().startswith('"') else [values]):
        try:
            x = json.loads(v)
        except ValueError:
            x = v  # not JSON: the string as given
        if x is None or not isinstance(x, (bool, int, float, str)):
            raise argparse.ArgumentTypeError(f"{name}: {v!r} is not an int, a float, a bool or a string")
        out.append(x)
    return name, out if many else out[0]


def _hp_flag(p: argparse.ArgumentParser, multi: bool, text: str) -> None:
    p.add_argument("--hp", dest="hp", nargs="+", action="extend", default=None, metavar="NAME=VALUE",
                   type=lambda t: _hp_value(t, many=multi), help=text.replace("%", "%%"))


def _given(args: argparse.Namespace) -> dict:
    out = {f.name: getattr(args, f.name) for f in dataclasses.fields(Config)
           if getattr(args, f.name, None) is not None}
    if "local_steps" in out and "local_epochs" in out:  # (a config file's local_epochs 1 is its default)
        raise ConfigError("--local-steps and --local-epochs both set the local work per round; give one of them")
    if "alg_args" in out:  # [(name, value)], or [(name, [values])] for fedalf sweep
        pairs, out["alg_args"] = out["alg_args"], {}
        for name, v in pairs:
            if name in out["alg_args"]:
                raise ConfigError(f"--alg-arg {name} is given twice; give each name once (several values: "
                                  f"NAME=V1,V2 in fedalf sweep)")
            out["alg_args"][name] = v
    if "hp" in out:  # [(name, value)], or [(name, [values])] for fedalf sweep
        pairs, out["hp"] = out["hp"], {}
        for name, v in pairs:
            if isinstance(v, list):
                out["hp"].setdefault(name, []).extend(v)
            elif name in out["hp"]:
                raise ConfigError(f"--hp {name} is given twice; give each name once (several values: fedalf sweep)")
            else:
                out["hp"][name] = v
    return out


def config_from_args(args: argparse.Namespace) -> Config:
    """The run's config: ``--config`` file, overridden by flags. With ``--resume`` and a ``config.json``
    in ``--out``, that config, which the flags may not change (except ``--rounds``)."""
    given = _given(args)
    base = Config.load(args.config).to_dict() if args.config else {}
    base.pop("out", None)  # a config file never chooses the folder: --out does (or the default)
    if getattr(args, "resume", False):
        if not args.out:
            raise ConfigError("--resume needs --out DIR, the run directory to continue")
        from .runner.rundir import RunDir
        rd = RunDir(args.out)
        if rd.has_config():  # else nothing to resume yet: start from round 0 with the given options
            saved = rd.config_dict()
            hp = {**saved.get("hp", {}), **base.get("hp", {}), **given.get("hp", {})}  # --hp a=1 leaves b as it ran
            args_ = {**saved.get("alg_args", {}), **base.get("alg_args", {}), **given.get("alg_args", {})}
            want = Config.from_dict({**saved, **base, **given, **({"hp": hp} if hp else {}),
                                     **({"alg_args": args_} if args_ else {})})
            old = Config.from_dict(saved)  # an option newer than the run: its default
            # resolved values, as the checkpoint's identity compares them: --rho 0.01 is fedalf's default
            options = {f.name for f in dataclasses.fields(Config)}  # (derived entries follow their options)
            changed = [k for k in identity_diff(old.identity(), want.identity()) if k in options]
            if "hp" in changed:  # name the hyper-parameters: --hp beta1 (0.9 there, 0.5 given)
                was, now = old.resolved_hp, want.resolved_hp
                changed[changed.index("hp")] = ", ".join(
                    f"--hp {k} ({was[k]:g} there, {now[k]:g} given)" for k in now if was.get(k) != now[k])
            if "alg_args" in changed:  # name the factory's arguments: --alg-arg K (1 there, 2 given)
                was, now = old.alg_args, want.alg_args
                changed[changed.index("alg_args")] = ", ".join(
                    f"--alg-arg {k} ({json.dumps(was.get(k))} there, {json.dumps(now.get(k))} given)"
                    for k in sorted(set(was) | set(now)) if was.get(k) != now.get(k))
            if changed:
                raise ConfigError(f"--resume continues the run in {args.out} as configured there; only --rounds, "
                                  f"the cadences, --log and --data-dir may change, not {', '.join(changed)}")
            keep = {k: v for k, v in {**base, **given}.items() if k in C.BOOKKEEPING}
            return Config.from_dict({**saved, **keep, "out": args.out})
    return Config.from_dict({**base, **given})


_COMPILE_CACHE = ("keep no compiled program on disk for this command (neither read nor write the persistent "
                  "compilation cache). By default the cache is on, in $FEDALF_COMPILE_CACHE or "
                  "$XDG_CACHE_HOME/fedalf_jax/jax (~/.cache/fedalf_jax/jax): the first run of a configuration "
                  "compiles its programs, later ones load them in seconds; FEDALF_COMPILE_CACHE=DIR moves it, "
                  "FEDALF_COMPILE_CACHE=off turns it off for good")


def _add_distributed_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("several processes (jax.distributed; with --devices: one run's clients span them)")
    g.add_argument("--distributed", action="store_true",
                   help="call jax.distributed.initialize() with its auto-detection (Slurm, Open MPI)")
    g.add_argument("--coordinator", default=None, metavar="HOST:PORT",
                   help="coordinator address (process 0's) (default: none: one process)")
    g.add_argument("--num-processes", type=int, default=None, help="number of processes (default: none: one process)")
    g.add_argument("--process-id", type=int, default=None,
                   help="this process's index, from 0 (default: none: one process)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="fedalf", description="Fair, private federated learning simulator (FedALF, LDP-FedALF).")
    p.add_argument("--version", action=_Version, help="print fedalf_jax's and JAX's versions and exit")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    r = sub.add_parser("run", help="run one experiment", epilog=_CTRL_C)
    r.add_argument("--config", default=None, help=_HELP["config"] + "; its 'out' is ignored (--out chooses)")
    r.add_argument("--resume", action="store_true",
                   help="continue the run in --out from its checkpoint (from round 0 if it has none yet); "
                        "the checkpoint must come from the same options, data and user code (only --rounds, the "
                        "cadences, --log and --data-dir may change)")
    r.add_argument("--overwrite", action="store_true",
                   help="replace the run in --out (its files are removed first); without it a folder that "
                        "holds a run is refused")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument("--no-compile-cache", action="store_true", help=_COMPILE_CACHE)
    _add_distributed_flags(r)
    _add_config_flags(r)
    s = sub.add_parser("sweep", help="many runs: seeds and continuous values vmapped in one program per "
                                     "discrete combination; every option takes one or more values", epilog=_CTRL_C)
    s.add_argument("--config", default=None, help=_HELP["config"])
    s.add_argument("--seeds", "--seed", dest="seeds", nargs="+", type=int, default=None,
                   help="run seeds (default: the config's seed)")
    s.add_argument("--out", required=True, help="sweep directory: sweep.json and one run directory per run")
    s.add_argument("--sweep-chunk", type=int, default=None,
                   help="most runs in one program call (bounds memory; default: the most whose compiled program "
                        "fits the device's memory, or FEDALF_MEMORY_LIMIT, chosen when the sweep starts and kept "
                        "in sweep.json)")
    s.add_argument("--compress-checkpoints", action="store_true", default=None,
                   help="write the runs' checkpoints compressed (np.savez_compressed: smaller, slower to write; "
                        "kept in sweep.json)")
    s.add_argument("--resume", action="store_true",
                   help="finish the unfinished runs of the sweep in --out (with the sweep's options: start it "
                        "if it has not written sweep.json yet; with only --rounds N: extend every run to N rounds)")
    s.add_argument("--shard", default=None, metavar="I/K",
                   help="run slice I of K of the sweep's program calls (K alone: I from SLURM_ARRAY_TASK_ID); "
                        "the slices share --out (default: none: every call)")
    s.add_argument("--processes", type=int, default=1, metavar="P",
                   help="run the sweep as P processes, one per core: this one and P − 1 it starts, each the --shard "
                        "slice i/P of one-run program calls (--sweep-chunk 1 unless given), all in --out, each pinned to "
                        "cores of its own where there are at least P; in one "
                        "process a CPU computes a sweep's runs one after another, so 2 uses both cores of a 2-core "
                        "machine (timings: docs/lab/benchmarks.md); each run's metrics are its single run's, bit "
                        "for bit (default 1)")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.add_argument("--no-compile-cache", action="store_true", help=_COMPILE_CACHE)
    _add_config_flags(s, multi=True)
    rep = sub.add_parser("report", help="paper-style table (Markdown, CSV) and figures from run or sweep directories")
    rep.add_argument("paths", nargs="+", help="run directories, sweep directories, or folders holding them")
    rep.add_argument("--out", required=True, help="folder for report.md, table.csv and the figures")
    rep.add_argument("--last", type=int, default=5,
                     help="evaluations averaged in the 'last evaluations' column (default: 5)")
    b = sub.add_parser(
        "bench", help="round throughput: compiled vmapped round vs a sequential client loop",
        description="Round throughput. The default (the main job's FedALF CNN round on Fashion-MNIST, compiled "
                    "against a sequential client loop, 5 rounds each, and the server step alone): the compilations, "
                    "then the timed rounds (what it took: docs/lab/benchmarks.md). --sweep-width times the MLP unless --model cnn is given. Each "
                    "measurement prints a line on stderr with its expected time; Ctrl-C stops at once, prints the "
                    "table of what was measured and exits with 130 (SIGTERM, SIGHUP, SIGUSR1 the same, exit 143, 129, "
                    "138).")
    b.add_argument("--config", default=None, help=_HELP["config"])
    b.add_argument("--repeats", type=int, default=None,
                   help="timed rounds per variant (median reported; default 5, a --suite sets its own)")
    b.add_argument("--json", default=None,
                   help="also write every figure, unrounded, to this JSON file (default: none: the printed table only)")
    b.add_argument("--no-sequential", action="store_true", help="time only the compiled round")
    b.add_argument("--sweep-width", type=int, nargs="+", default=None, metavar="W",
                   help="time a vmapped sweep of W runs against W separate runs, for each W, each call min(--eval-"
                        "every, --rounds) rounds and their evaluation; the MLP unless --model is given (the CNN's "
                        "widths take minutes each on a CPU); each width's time is predicted from the last one's "
                        "compile-free time (default: none: time one round instead)")
    b.add_argument("--depth-width", type=int, nargs="+", default=None, metavar="W",
                   help="FedLF/FedALF: also count the server's sequential loop trips per round (the QP solvers' "
                        "own iteration counters) in a sweep of W runs, for each W (default: 1 8 on a GPU; none on "
                        "a CPU, where the count takes minutes; 0: skip)")
    b.add_argument("--depth-rounds", type=int, default=12, metavar="R",
                   help="rounds counted by --depth-width (default 12: FedALF's history rows fill within the "
                        "first N/m rounds, and the QPs grow with them)")
    b.add_argument("--pytorch", default=None, metavar="PYTHON",
                   help="opt-in: also time FedAvg's CNN round as a lean PyTorch loop (experiments/torch_round.py, "
                        "run by the interpreter PYTHON, which must have torch: python -m venv X && X/bin/pip "
                        "install torch numpy) with the same clients per round, examples, batch size, epochs and "
                        "step size, one PyTorch round after each of this round's timed rounds (both see the same load), "
                        "and print both medians and their ratio fedalf/PyTorch; "
                        "the algorithm is FedAvg unless given, the model the CNN (default: none: no PyTorch)")
    b.add_argument("--against", default=None, metavar="ALGORITHM",
                   help="also time ALGORITHM's compiled round on the same config, interleaved with this one's "
                        "(both see the same machine load), and print their ratio: e.g. --against fedavg gives "
                        "FedALF's round cost in FedAvg rounds (default: none)")
    b.add_argument("--suite", default=None, choices=("gpu", "smoke"),
                   help="a fixed list of measurements, each written to --out as <name>.json (and its line of "
                        "the printed table) as soon as it is measured: gpu: round time of the CNN and the MLP "
                        "with FedAvg and FedALF, then sweep width W = 1, 8, 32, 64 (CNN FedALF, 5 rounds per "
                        "call), stopping at the first W that runs out of memory; smoke: the same code on "
                        "synthetic data, minutes on a CPU (README). Config flags given replace the suite's "
                        "options (a given --model or --algorithm keeps only its measurements, and one that keeps "
                        "none is an error); --sweep-width replaces its widths "
                        "(default: none: one measurement of the options given)")
    b.add_argument("--part", nargs="+", default=None, choices=("round", "sweep"),
                   help="with --suite: only these parts of it (default: both)")
    b.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="with --suite: a measurement predicted (from those done) to end later than SECONDS "
                        "after the start is skipped and recorded as skipped (default: none: no limit)")
    b.add_argument("--no-compile-cache", action="store_true",
                   help=_COMPILE_CACHE + " (with the cache, compile_s times loading the programs when they are in it)")
    _add_config_flags(b, skip=_BENCH_UNUSED, helps=_BENCH_HELP)
    for action in b._actions:  # bench's --out is the --suite's folder, not a run directory
        if action.dest == "out":
            action.help = "with --suite: the folder for its JSON files and table.txt (default: none; --suite needs it)"
    return p
