"""A sweep's plan: the grid's configs, one run per distinct configuration, the runs' names and ``sweep.json``.

:func:`expand` makes every combination of a grid's values and seeds; :func:`distinct` keeps one run of
the combinations that differ only in options their algorithm ignores (:func:`.identity.ignored_options`);
:func:`static_key` is what runs must share to be one compiled program; :func:`run_names` names their
directories from the options that vary; :func:`plan` writes ``out/sweep.json`` (:mod:`.sweep` runs it).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import time
import warnings
from pathlib import Path
from typing import Iterable, Optional

from ..config.config import BOOKKEEPING, CONTINUOUS, Config, ConfigError, declared_hparams
from ..runtime.notices import Notice
from ..config.identity import USED_BY, flat_options, identity_digest, ignored_options, unread_options
from ..runner.rundir import RunDir
from .sweepdir import read_sweep, write_sweep, write_sweep_first

_SHORT = {"lr": "lr", "lr_decay": "lrdecay", "server_lr": "slr", "server_lr_decay": "slrdecay", "mu": "mu",
          "rho": "rho", "q": "q", "epsilon": "eps", "delta": "delta", "clip": "clip"}
_BARE = ("algorithm", "dataset", "partition", "model")  # values readable without their key


def expand(base: dict, grid: dict[str, list], seeds: Iterable[int]) -> list[Config]:
    """Every combination of ``grid``'s values (and every seed) on top of ``base``, validated. A key
    ``hp.NAME`` varies the algorithm's own hyper-parameter ``NAME`` (``Config.hp``), over ``base``'s, in
    the runs of the algorithms that declare ``NAME`` (:func:`own_hparams`); ``hp.ALG.NAME`` in ``ALG``'s only."""
    keys = list(grid)
    combos = [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]
    algorithms = list(dict.fromkeys(c.get("algorithm", base.get("algorithm", _DEFAULT_ALGORITHM)) for c in combos))
    _check_arg_axes(base, keys, algorithms)
    named = {k[3:] for k in keys if k.startswith("hp.")} | set(base.get("hp") or {})
    for key in sorted(n for n in named if "." in n):
        owner = key.rpartition(".")[0]
        if not any(owner in (a, a.rpartition(":")[2]) for a in algorithms):
            raise ConfigError(f"--hp {key}: {owner} is not an algorithm of this sweep ({', '.join(algorithms)}); "
                              f"name one of them before the dot, or give NAME=VALUE for every algorithm declaring it")
    out, seen = [], set()
    for combo in combos:
        own = {k[3:]: combo.pop(k) for k in keys if k.startswith("hp.")}
        args = {k[4:]: combo.pop(k) for k in keys if k.startswith("arg.")}  # the factory's: static, one program each
        if args or base.get("alg_args"):
            alg = combo.get("algorithm", base.get("algorithm", _DEFAULT_ALGORITHM))
            combo["alg_args"] = {} if _builtin_beside_user(alg, algorithms) else {**(base.get("alg_args") or {}), **args}
        if own or base.get("hp"):
            alg = combo.get("algorithm", base.get("algorithm", _DEFAULT_ALGORITHM))
            combo["hp"] = own_hparams(alg, {**(combo.get("hp", base.get("hp")) or {}), **own}, algorithms)
        for seed in seeds:
            cfg = Config.from_dict({**base, **combo, "seed": seed, "out": None})
            k = json.dumps(cfg.to_dict(), sort_keys=True)
            if k not in seen:
                seen.add(k)
                out.append(cfg)
    return out


def _builtin_beside_user(alg: str, algorithms: list[str]) -> bool:
    """A built-in algorithm in a sweep that also runs a user's: the factory arguments (``--alg-arg``) are the
    user's algorithms' (a built-in has no factory arguments; alone, it refuses them)."""
    from ..config.options import ALGORITHMS
    return alg in ALGORITHMS and any(a not in ALGORITHMS for a in algorithms)


def _check_arg_axes(base: dict, keys: list, algorithms: list[str]) -> None:
    """``arg.NAME`` grid axes (``--alg-arg NAME=V1,V2``) need a user's algorithm in the sweep."""
    from ..config.options import ALGORITHMS
    if any(k.startswith("arg.") for k in keys) and all(a in ALGORITHMS for a in algorithms):
        raise ConfigError(f"--alg-arg {', '.join(k[4:] for k in keys if k.startswith('arg.'))}: "
                          f"{', '.join(algorithms)} {'is a built-in algorithm' if len(algorithms) == 1 else 'are built-in algorithms'}, "
                          f"whose options are flags; --alg-arg passes arguments to a user's algorithm factory "
                          f"(module:attribute)")


def distinct(configs: list[Config]) -> tuple[list[Config], Optional[str]]:
    """The distinct runs of ``configs`` (the first of each, in order) and a one-line notice saying which
    combinations collapsed (``None`` when none did). Two configs are one run when they differ only in
    options their algorithm ignores (:func:`.identity.ignored_options`): their resolved identities
    (:meth:`Config.identity`) with those options normalised have one digest, and their bookkeeping
    (rounds, cadences, writers) is equal."""
    kept: list[Config] = []
    first: dict[tuple, Config] = {}
    count: dict[str, list[int]] = {}  # algorithm -> [combinations, distinct runs]
    why: dict[tuple[str, str], list[str]] = {}  # (algorithm, condition) -> the ignored options that varied
    for c in configs:
        ignored = ignored_options(c)
        ident = {**c.identity(), **{k: "<ignored>" for k in ignored}}
        key = identity_digest(ident), json.dumps({k: getattr(c, k) for k in BOOKKEEPING if k != "out"}, sort_keys=True)
        n = count.setdefault(c.algorithm, [0, 0])
        n[0] += 1
        twin = first.get(key)
        if twin is None:
            first[key] = c
            kept.append(c)
            n[1] += 1
            continue
        for k in sorted(ignored):
            if getattr(c, k) != getattr(twin, k):
                opts = why.setdefault((c.algorithm, ignored[k]), [])
                if k not in opts:
                    opts.append(k)
    if len(kept) == len(configs):
        return kept, None
    said = ", ".join(f"{a} ignores {', '.join('--' + k.replace('_', '-') for k in opts)}" + (f" ({cond})" if cond else "")
                     for (a, cond), opts in why.items())
    each = ", ".join(f"{a}'s {n} are {d}" for a, (n, d) in count.items() if n != d) if len(count) > 1 else ""
    return kept, (f"{said}: {len(configs)} combinations are {len(kept)} distinct runs{f' ({each})' if each else ''}; "
                  f"running each once")


_DEFAULT_ALGORITHM = Config.__dataclass_fields__["algorithm"].default

# what reads an option that a partition or the privacy options leave unread (unread_given's hint); the
# algorithms' options name their readers in identity.USED_BY
_READ_BY = {"alpha": "--partition dirichlet", "assign": "--partition pat1 or pat2",
            "epsilon": "a privacy mechanism, --ldp or --dp,", "delta": "--dp gaussian or central",
            "clip": "--dp gaussian or central", "eval_average": "an evaluation, --eval-every N,",
            "train_loss_every": "an evaluation, --eval-every N,"}


def non_default(d: dict) -> set[str]:
    """The options of ``d`` (a config file's, ``Config.to_dict``) whose value differs from the option's default:
    what a config file gives explicitly (a run's config.json records every option, the defaults too)."""
    defaults = {f.name: f.default for f in dataclasses.fields(Config) if f.default is not dataclasses.MISSING}
    return {k for k, v in d.items() if k in defaults and v != defaults[k]}


def unread_given(configs: list[Config], given: Iterable[str]) -> Optional[str]:
    """One line naming the options of ``given`` (those given explicitly: flags, a config file's values other
    than the defaults, keyword arguments) that no run of ``configs`` reads (:func:`.identity.unread_options`:
    the sweep's de-duplication's knowledge, and the evaluation's options of a run evaluating nothing), each with
    the choices that make it so; ``None`` when there are none. An option given several values is left to
    :func:`distinct`'s notice (its combinations collapse)."""
    parts = []
    for k in [f.name for f in dataclasses.fields(Config) if f.name in set(given)]:
        conds: list[str] = []
        for c in configs:
            ignored = unread_options(c)
            if k not in ignored:
                break
            cond = ignored[k] or f"algorithm={c.algorithm}"
            if cond not in conds:
                conds.append(cond)
        else:
            values = list(dict.fromkeys(json.dumps(getattr(c, k)) for c in configs))
            if not configs or len(values) != 1:
                continue
            v = getattr(configs[0], k)
            shown = ("on" if v else "off") if isinstance(v, bool) else f"{v:g}" if isinstance(v, float) else v
            readers = USED_BY.get(k)
            hint = (f"only {', '.join(readers)} read{'s' if len(readers) == 1 else ''} it" if readers
                    else f"only {_READ_BY[k]} reads it" if k in _READ_BY else "")
            parts.append(f"--{k.replace('_', '-')} {shown} has no effect with {', '.join(conds)}"
                         + (f" ({hint})" if hint else ""))
    if not parts:
        return None
    return f"{'; '.join(parts)}: recorded in the run's config, never read"


def say_unread(configs: list[Config], given: Iterable[str], *, stacklevel: int = 2) -> None:
    """:func:`unread_given`'s line as a :class:`~fedalf_jax.notices.Notice` (``fedalf: warning: ...``)."""
    line = unread_given(configs, given)
    if line:
        warnings.warn(line, Notice, stacklevel=stacklevel + 1)


def own_hparams(algorithm: str, hp: dict, algorithms: list[str]) -> dict:
    """The own hyper-parameters of ``algorithm``'s runs in a sweep over ``algorithms``: ``NAME`` when it
    declares ``NAME`` (every algorithm, when none of the sweep's declares it: its run refuses it, naming
    what it declares), then ``ALG.NAME`` (``ALG`` as given, or its attribute after ``module:``) when
    ``ALG`` is ``algorithm``, over the plain one. ``fedalf sweep --algorithm fedadam fedyogi --hp
    beta1=0.9 fedyogi.beta2=0.999``."""
    def declares(alg: str, name: str) -> bool:
        d = declared_hparams(alg)
        return d is None or name in d  # None: a factory that needs the model's layers (its run checks)
    out = {k: v for k, v in hp.items() if "." not in k
           and (declares(algorithm, k) or not any(declares(a, k) for a in algorithms))}
    for k, v in hp.items():
        owner, _, name = k.rpartition(".")
        if owner and owner in (algorithm, algorithm.rpartition(":")[2]):
            out[name] = v
    return out


def static_key(cfg: Config) -> str:
    """What must be equal for runs to share one program: everything but seed and continuous values."""
    d = cfg.to_dict()
    for k in (*CONTINUOUS, "seed", "out"):
        d.pop(k)
    d.pop("hp", None)  # the algorithm's own: traced too (their names are the algorithm's)
    d["dropout"] = d["dropout"] > 0  # P and the deadline are traced (HParams.fed): whether uploads drop is not
    d.pop("deadline", None)
    return json.dumps(d, sort_keys=True)


def run_names(configs: list[Config]) -> list[str]:
    """Readable, unique directory names from the options that vary across ``configs``."""
    dicts = [flat_options(c.to_dict()) for c in configs]
    keys = list(dict.fromkeys(k for d in dicts for k in d))
    # an own hyper-parameter names a run only when its algorithm's runs differ in it (a grid of algorithms,
    # one declaring beta, is not varied in beta: fedavgm_seed0, not fedavgm_beta-0.9_seed0)
    varying = [k for k in keys if k not in ("out",) and len({json.dumps(d.get(k)) for d in dicts
                                                          if not (k.startswith(("hp.", "arg.")) and d.get(k) is None)}) > 1]
    names = []
    for d in dicts:
        parts = [d["algorithm"]]
        for k in varying:
            v = d.get(k)
            if k == "algorithm" or (v is None and k.startswith(("hp.", "arg."))):
                continue
            if k.startswith("hp."):  # the algorithm's own: beta1-0.9
                parts.append(f"{k[3:]}-{v:g}")
            elif k.startswith("arg."):  # the factory's argument: K-2
                if v is not None:
                    parts.append(f"{k[4:]}-{v:g}" if isinstance(v, float) else f"{k[4:]}-{v}")
            elif k == "seed":
                parts.append(f"seed{v}")
            elif k in _BARE:
                parts.append(str(v))
            elif isinstance(v, bool) or v is None:
                parts.append(f"{k}-{'default' if v is None else ('on' if v else 'off')}")
            elif isinstance(v, str):
                parts.append(f"{k}-{v}")
            else:
                parts.append(f"{_SHORT.get(k, k)}{v:g}")
        names.append(re.sub(r"[^A-Za-z0-9_.+=-]", "-", "_".join(parts)))
    counts: dict[str, int] = {}
    unique = []
    for n in names:
        counts[n] = counts.get(n, 0) + 1
        unique.append(n if counts[n] == 1 else f"{n}_{counts[n]}")
    return unique


def plan(configs: list[Config], out: str | Path, meta: Optional[dict] = None, *, same: bool = False) -> None:
    """Write ``out/sweep.json`` for ``configs`` (refusing a folder that already holds a sweep, unless
    ``same`` and it is this very sweep: the slices of a sharded sweep all plan it)."""
    root = Path(out)
    if not _planned(configs, root, same=same):
        runs = [{"name": n, "dir": n, "config": c.to_dict()} for n, c in zip(run_names(configs), configs)]
        meta = {"created": time.strftime("%Y-%m-%d %H:%M:%S"), **(meta or {})}
        if not same:
            write_sweep(root, runs, meta)
        elif not write_sweep_first(root, runs, meta):  # another slice planned it meanwhile: the same sweep?
            _planned(configs, root, same=True)


def _planned(configs: list[Config], root: Path, *, same: bool) -> bool:
    """Whether ``root`` already holds this very sweep (``same``: the slices of a sharded sweep); raises one
    line when it holds another sweep or a run."""
    runs = [{"name": n, "dir": n, "config": c.to_dict()} for n, c in zip(run_names(configs), configs)]
    if (root / "sweep.json").exists():
        if same and read_sweep(root)["runs"] == runs:
            return True  # another slice of the same sweep planned it
        raise ConfigError(f"{root} already holds a sweep; finish it with fedalf sweep --resume --out {root}, "
                          f"or choose another --out")
    if RunDir(root).holds_run():
        raise ConfigError(f"{root} holds a run (config.json); a sweep needs a folder of its own: choose another --out")
    taken = [n for n in run_names(configs) if RunDir(root / n).holds_run()]
    if taken:
        raise ConfigError(f"{root / taken[0]} already holds a run that is not part of a sweep.json; "
                          f"choose another --out")
    return False
