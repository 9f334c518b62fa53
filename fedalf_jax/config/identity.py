"""A run's identity and the options it reads: what makes two configurations one run.

:func:`identity_digest` and :func:`identity_diff` compare the identities checkpoints record
(:meth:`Config.identity`); :func:`from_run` reads a saved config as it ran (:data:`LEGACY`: the values of
the options added since); :func:`ignored_options` names the options a run never reads (a sweep runs
combinations that differ only in them once, the report names no variant by them); :func:`flat_options`
spreads ``hp`` into one ``hp.NAME`` entry each, as a sweep's table, its run names and the report compare.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import warnings

from ..algorithms import BUILTINS, declared
from ..runtime.errors import ConfigError
from ..runtime.notices import Notice
from ..plugins import code_digest, registry
from ..plugins.code_digest import _listed
from .config import ALGORITHMS, BOOKKEEPING, CONTENT, MODELS, Config

# Options added after runs were made: a run directory whose config.json lacks one ran with this value.
LEGACY = {"ldp_on": "weights", "fair_norm": "raw"}


def identity_digest(identity: dict) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def identity_diff(a: dict, b: dict) -> list[str]:
    """The options whose values differ between two identities (sorted). An option one of them lacks
    (recorded before the option existed) counts with its default, the value it ran with. Bookkeeping
    options (an identity recorded when ``data_dir`` was part of it) and :data:`CONTENT` digests, checked
    on their own, are left out."""
    defaults = {**{f.name: f.default for f in dataclasses.fields(Config)
                   if f.default is not dataclasses.MISSING}, **LEGACY}

    def get(d, k):
        return d.get(k, defaults.get(k, "<missing>"))

    return sorted(k for k in set(a) | set(b) if k not in BOOKKEEPING and k not in CONTENT and get(a, k) != get(b, k))


# option -> the built-in algorithms that read it, as each declares its own options (Declares.options); the
# others' programs never do: the report names no variant by an option its run does not read, and a sweep runs
# combinations differing only in such options once (ignored_options)
USED_BY: dict[str, tuple] = {}
for _name, _factory in BUILTINS.items():
    for _option in _factory.declares.options:
        USED_BY[_option] = (*USED_BY.get(_option, ()), _name)


def partition_ignores(partition: str) -> dict[str, str]:
    """The data options ``partition`` never reads, each with its condition: ``alpha`` outside ``dirichlet``,
    ``assign`` outside ``pat1``/``pat2`` (:func:`fedalf_jax.problem.partitions.make_partition`)."""
    out = {}
    if partition != "dirichlet":
        out["alpha"] = f"partition={partition}"
    if partition not in ("pat1", "pat2"):
        out["assign"] = f"partition={partition}"
    return out


def ignored_options(cfg: "Config") -> dict[str, str]:
    """The options ``cfg``'s run never reads, each with the condition that makes it so ("" when its
    algorithm never reads it): runs of a built-in algorithm that differ only in these compute the same
    trajectory bit for bit. A user's algorithm reads ``HParams`` as it likes: of its options only the
    partition's (:func:`partition_ignores`) are known ignored, and ``server_lr``/``server_lr_decay`` when its
    server declares it never reads η_g (``Algorithm.reads_server_lr=False``) and no central DP noise does."""
    algo = cfg.algorithm
    if algo not in ALGORITHMS:
        out = partition_ignores(cfg.partition)
        if cfg.dp != "central" and not _reads_server_lr(cfg):  # central DP's noise reads η_g, whatever the server
            out.update(server_lr="", server_lr_decay="")
        return out
    out = {**partition_ignores(cfg.partition), **{k: "" for k, users in USED_BY.items() if algo not in users}}
    out.update(declared(algo).ignores(cfg))  # what else it declares it never reads (FedLF's gradient clients: lr)
    if cfg.ldp == "none" and cfg.dp == "none":
        out["epsilon"] = "ldp=none, dp=none"
    if cfg.dp not in ("gaussian", "central"):
        out.update(delta=f"dp={cfg.dp}", clip=f"dp={cfg.dp}")
    return out


def _reads_server_lr(cfg: "Config") -> bool:
    """Whether the server of ``cfg``'s user algorithm reads ``ServerIn.server_lr_t`` (η_g): its declaration
    ``Algorithm.reads_server_lr`` (a server that sets its own step, FedExP's, declares ``False``); ``True`` when
    its factory cannot be built without the model's layers (nothing is known then)."""
    from .options import plugin_of
    alg = plugin_of(cfg).algorithm
    return alg is None or bool(getattr(alg, "reads_server_lr", True))


def unread_options(cfg: "Config") -> dict[str, str]:
    """:func:`ignored_options` and the evaluation's options that a run evaluating nothing (``eval_every="never"``)
    never reads: ``eval_average`` and ``train_loss_every``, each with its condition. What a given option's
    "has no effect" notice names (:func:`.sweep_plan.unread_given`); not a sweep's de-duplication, whose
    runs differing in them differ in speed (the averaged iterate is updated every round)."""
    out = ignored_options(cfg)
    if not cfg.evaluates:
        out.update(eval_average="eval_every=never", train_loss_every="eval_every=never")
    return out


def from_run(d: dict) -> dict:
    """A run directory's saved config (config.json, or a sweep.json entry) as it ran: an option it lacks
    was added after it was written, and it ran with that option's :data:`LEGACY` value; the per-algorithm
    defaults that a private run now resolves differently (the algorithms' private defaults) are filled in with the
    values it resolved then, so ``--resume`` continues it unchanged."""
    if "ldp_on" in d:
        return d
    d = {**LEGACY, **d}
    if d.get("ldp", "none") != "none" or d.get("dp", "none") != "none":
        then = Config.from_dict({**d, "ldp": "none", "dp": "none"})  # how defaults resolved before
        for name in ("server_target", "server_lr", "server_lr_decay", "dual_from"):
            if d.get(name) is None:
                d[name] = getattr(then, f"resolved_{name}")
    return d


def flat_options(d: dict) -> dict:
    """A config dict (``Config.to_dict``, config.json) with its ``hp`` dict spread into one ``hp.NAME`` entry
    per hyper-parameter, in ``hp``'s place, and its ``alg_args`` (the factory's arguments) into one ``arg.NAME``
    entry each: what a sweep's table, its run names and the report compare."""
    out = {}
    for k, v in d.items():
        if k == "hp" and isinstance(v, dict):
            out.update({f"hp.{n}": x for n, x in v.items()})
        elif k == "alg_args" and isinstance(v, dict):
            out.update({f"arg.{n}": x for n, x in v.items()})
        else:
            out[k] = v
    return out


# ---- the digest of a user's code (registry.code, code_digest) ------------------------------------------------

def user_code(cfg: "Config") -> list[tuple[str, str]]:
    """``(kind, name)`` of ``cfg``'s algorithm and model when they are a user's (built-ins carry no digest)."""
    return [(k, n) for k, n, builtin in (("algorithm", cfg.algorithm, ALGORITHMS), ("model", cfg.model, MODELS))
            if n not in builtin]


def say_code(cfg: "Config") -> None:
    """One line per user algorithm or model of ``cfg``: what its code digest covers and what it does not (a
    run says it when it starts and on every resume: ``RunDir.write_config``)."""
    for kind, name in user_code(cfg):
        digest, covers = registry.code(kind, name)
        if digest == "uncheckable":
            msg = f"the code of {kind} {name!r} cannot be digested ({covers}): --resume cannot check it"
        else:
            msg = f"code digest of {kind} {name!r} covers {covers}"
        warnings.warn(msg, Notice, stacklevel=2)


def check_code(kind: str, name: str, old, new: str, where, old_files=None) -> None:
    """The code digest a checkpoint in ``where`` recorded (``old``, with its per-file digests ``old_files``)
    against this process's (``new``): a change is refused in one line naming the changed files;
    a digest recorded the way an older version made it (no per-file digests) is compared that way: issue
    36's (every ``.py`` file under the code's folders) and, before it, the module's and the defining files;
    when it matches, the run resumes with one line saying so; one that cannot be checked (not recorded yet,
    or uncheckable) is said."""
    covers = registry.code(kind, name)[1]
    if old == new:
        return
    if old is None:
        warnings.warn(f"{where}: the checkpoint was written before runs recorded user code, so {kind} {name!r} "
                      f"({covers}) is not checked against the code that ran", Notice, stacklevel=3)
    elif "uncheckable" in (old, new):
        warnings.warn(f"{kind} {name!r}'s code cannot be checked ({covers}): resuming {where} without knowing "
                      f"whether it changed", Notice, stacklevel=3)
    elif isinstance(old_files, dict):  # recorded per file: name what changed
        what = code_digest.changed(old_files, registry.code_parts(kind, name))
        said = f"changed: {_listed(what, 6)}; " if what else ""
        raise ConfigError(f"{kind} {name!r}: its code changed since the checkpoint in {where} was written "
                          f"({said}the digest covers {covers}); revert the change to resume, or run the new "
                          f"code with --overwrite or another --out")
    elif old == registry.previous_code(kind, name):
        warnings.warn(f"{where}: the checkpoint's digest of {kind} {name!r} was made before digests followed "
                      f"what the code reaches (one digest of every .py file under its modules' folders); it "
                      f"matches, and what it did not cover of what is covered now ({covers}) is not checked "
                      f"against the code that ran", Notice, stacklevel=3)
    elif old == registry.legacy_code(kind, name):
        warnings.warn(f"{where}: the checkpoint's digest of {kind} {name!r} was made before digests covered a "
                      f"module's folder and the globals its code reads; it matches the module's file and the "
                      f"files defining its functions, and the rest now covered is not checked against the code "
                      f"that ran", Notice, stacklevel=3)
    else:
        raise ConfigError(f"{kind} {name!r}: its code changed since the checkpoint in {where} was written (its "
                          f"digest was recorded before digests named files, so the changed file cannot be named; "
                          f"the digest now covers {covers}); revert the change to resume, or run the new code "
                          f"with --overwrite or another --out")
