"""A user's algorithm's own hyper-parameters as flags of their own: ``--beta 0.3`` for ``--hp beta=0.3``.

A built-in's options are ``fj.Config`` fields with flags of their own (``--mu``, ``--rho``, ``--history``); a user's
algorithm declares its own numeric options in ``Algorithm.hparams`` (docs/extending.md), which ``--hp NAME=VALUE``
sets. So that both are given alike, :func:`expand` rewrites ``--NAME VALUE`` (``fedalf sweep``: ``--NAME V1 V2
...``) into ``--hp NAME=VALUE[,V2...]`` when the command's user algorithm declares ``NAME`` and the command has no
flag of that name (a declared name that is one, e.g. ``lr``, is given with ``--hp``). The algorithm is read as
validation reads it (its factory called without the model's layers and without ``--alg-arg``); one that cannot be
built so gets no flags of its own, and ``--hp`` still sets its options.
"""

from __future__ import annotations

import argparse
from typing import Iterable, Optional

_COMMANDS = ("run", "sweep", "bench")


def _algorithms(argv: list[str]) -> list[str]:
    """The names ``--algorithm`` gives in ``argv`` (a sweep may give several)."""
    out: list[str] = []
    for i, tok in enumerate(argv):
        if tok.startswith("--algorithm="):
            out.append(tok.split("=", 1)[1])
        elif tok == "--algorithm":
            for v in argv[i + 1:]:
                if v.startswith("-"):
                    break
                out.append(v)
    return out


def declared_hparams(names: Iterable[str]) -> dict[str, float]:
    """``{name: default}`` of the hyper-parameters the user algorithms ``names`` declare (built-ins: none)."""
    from .plugins import registry
    from .config.options import ALGORITHMS, _user_algorithm
    out: dict[str, float] = {}
    for name in names:
        if name in ALGORITHMS or not registry.is_path(name):  # a command names a user's as module:attribute
            continue
        try:
            alg = _user_algorithm(name, registry.version(), ())
        except Exception:  # noqa: BLE001 - validation says what is wrong with it, in one line
            alg = None
        if alg is not None:
            out.update(dict(alg.hparams))
    return out


def _flags(parser: argparse.ArgumentParser, command: str) -> set[str]:
    """The option strings of ``parser``'s subcommand ``command``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            return {s for a in action.choices[command]._actions for s in a.option_strings}
    return set()


def expand(argv: list[str], parser: Optional[argparse.ArgumentParser] = None) -> list[str]:
    """``argv`` with every ``--NAME VALUE...`` of a hyper-parameter its user algorithm declares written as ``--hp
    NAME=VALUE[,VALUE...]`` (see the module's docstring); ``argv`` itself when there is none."""
    if not argv or argv[0] not in _COMMANDS or not any(t.startswith("--") for t in argv[1:]):
        return list(argv)
    declared = declared_hparams(_algorithms(argv))
    if not declared:
        return list(argv)
    if parser is None:
        from .cli_options import build_parser
        parser = build_parser()
    known = _flags(parser, argv[0])
    out, i = [argv[0]], 1
    while i < len(argv):
        tok = argv[i]
        flag, _, inline = tok.partition("=")
        name = flag[2:].replace("-", "_") if flag.startswith("--") else None
        if name in declared and flag not in known:
            values = [inline] if inline else []
            j = i + 1
            while not inline and j < len(argv) and not (argv[j].startswith("-") and not _number(argv[j])):
                values.append(argv[j])
                j += 1
            if values:
                out += ["--hp", f"{name}={','.join(values)}"]
                i = j if not inline else i + 1
                continue
        out.append(tok)
        i += 1
    return out


def _number(tok: str) -> bool:
    """A negative number (``-0.5``) is a value, not a flag."""
    try:
        float(tok)
        return True
    except ValueError:
        return False
