"""The digest of a user's algorithm or model code, part of a run's identity (docs/extending.md, "Your code is
part of the run's identity"): ``--resume`` refuses code changed since the checkpoint, naming what changed.

:func:`take` records what a name's object (a factory, a class, an ``Algorithm``, a partial, a lambda; and
the module of a ``module:attribute`` name) is made of when it is imported or registered; :func:`current`
gives its digest and a statement of what it covers, :func:`parts` one digest per file (and per piece of
code outside any file), re-reading the globals that code outside any file reads.

Covered: what the code **reaches**, starting from the registered object, the
``module`` of a ``module:attribute`` name and (for an algorithm) the functions of the ``Algorithm`` its
factory builds without the model's layers:

* **a module** that is not installed: its source file (and the ``__init__.py`` files of the packages
  above it, which ran when it was imported), and what its namespace holds from modules that are not
  installed (the modules, functions and classes it imports, and the classes of its objects), followed
  the same way;
* **a function**: its module (when it has a file), the globals its code names (nested code objects
  included), its closure cells and its default arguments: a lambda calling a factory reaches the
  factory's module; a partial its function and arguments; an ``Algorithm`` its fields' functions;
* **code outside any file** (a notebook's cell): its code objects (bytecode, names, constants), and the
  values of the globals and closure cells they read, re-read at every digest: ``None``, numbers,
  strings, bytes, tuples, lists, dicts and sets of those, numpy and JAX arrays (dtype, shape, bytes; up
  to :data:`MAX_ARRAY_BYTES`).

The files' contents are read once, when the name is imported or registered (the code that ran); the walk
stops at :data:`MAX_FILES` files (the statement then says "capped").

Not covered: installed packages and the standard library (and fedalf_jax itself), modules the code does
not reach (another ``.py`` file in the same folder that nothing reached imports), what a module reads
when it is imported (data files, the environment), and globals of other types (the statement names them).

Older checkpoints recorded older digests, still compared the way they were made: ``Digest.legacy``
(in format 1: the module's and the defining files, the targets' code objects) and :func:`previous`
(format 2: every ``.py`` file under each reached module's folder, one digest for all).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import os
from typing import Any, Optional

from .code_reach import (  # noqa: F401 - MAX_ARRAY_BYTES: re-exported, as the docstring names it here
    _PACKAGE, MAX_ARRAY_BYTES, MAX_FUNCTIONS, MAX_STEPS, _file_of, _functions_of, _inside, _names, _read, _Reach,
    _value_bytes, installed)

MAX_FILES = 500         # .py files per home; the files one walk of what the code reaches reads (_Reach)
MAX_BYTES = 50 * 2**20  # their bytes per home
MAX_DIRS = 2000         # folders visited per home
_SKIP_DIRS = {"__pycache__", "site-packages", "dist-packages", "node_modules"}


def _home(obj) -> Optional[str]:
    """The folder of the top-level package of ``obj``'s module (the module's own folder for a top-level
    module); ``None`` when it has no file or lies in an installed location."""
    mod = obj if inspect.ismodule(obj) else inspect.getmodule(obj)
    f = _file_of(mod)
    if f is None or installed(f):
        return None
    parts = str(getattr(mod, "__name__", "") or "m").split(".")
    if os.path.basename(f) == "__init__.py":
        parts.append("__init__")
    d = os.path.dirname(f)
    for _ in range(len(parts) - 2):
        d = os.path.dirname(d)
    return None if installed(d) else d


def _walk(home: str) -> tuple[list, bool]:
    """The ``.py`` files under ``home`` (shallowest first, name order), and whether a cap stopped the walk."""
    files, size, dirs, queue = [], 0, 0, [home]
    package = os.path.realpath(_PACKAGE)
    while queue:
        d = queue.pop(0)
        dirs += 1
        if dirs > MAX_DIRS:
            return files, True
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            if e.name.startswith("."):
                continue
            try:
                if e.is_dir(follow_symlinks=False):
                    if not (e.name in _SKIP_DIRS or os.path.isfile(os.path.join(e.path, "pyvenv.cfg"))
                            or os.path.realpath(e.path) == package):
                        queue.append(e.path)
                elif e.name.endswith(".py") and e.is_file():
                    size += e.stat().st_size
                    if len(files) >= MAX_FILES or size > MAX_BYTES:
                        return files, True
                    files.append(os.path.abspath(e.path))
            except OSError:
                continue
    return files, False


def targets(obj) -> list:
    """The functions and classes that make up ``obj`` (a factory, a class, an Algorithm, a partial)."""
    from ..sim.algorithms import Algorithm
    if isinstance(obj, Algorithm):
        out = [t for f in dataclasses.fields(obj) if callable(v := getattr(obj, f.name)) for t in targets(v)]
        if obj.client is not None:  # a client program (a NamedTuple, not callable itself): its functions
            out += [t for f in obj.client if callable(f) for t in targets(f)]
            training = obj.client.training  # fj.local_training's pieces (the program's own functions are generic)
            for f in training or ():
                out += [t for g in (f if isinstance(f, tuple) else (f,)) if callable(g) for t in targets(g)]
        return out
    if isinstance(obj, functools.partial):
        return targets(obj.func)
    try:
        obj = inspect.unwrap(obj)  # a decorated function (jax.jit, functools.wraps): the function itself
    except ValueError:
        pass
    if inspect.isfunction(obj) or inspect.isclass(obj) or inspect.ismethod(obj):
        return [obj]
    return [type(obj)] if callable(obj) else []


def _const(c) -> str:
    if isinstance(c, (frozenset, set)):  # a set's order varies with string hashing: sort it
        return "{" + ",".join(sorted(_const(x) for x in c)) + "}"
    if isinstance(c, tuple):
        return "(" + ",".join(_const(x) for x in c) + ")"
    return repr(c)


def _code_bytes(co) -> bytes:
    """A code object's bytecode, names and constants, nested code objects (lambdas, inner functions)
    included."""
    parts = [co.co_code, repr(co.co_names).encode()]
    for c in co.co_consts:
        parts.append(_code_bytes(c) if inspect.iscode(c) else _const(c).encode())
    return b"\0".join(parts)


def _codes_of(t) -> list:
    """The code objects of ``t`` as the digest in format 1 took them (``Digest.legacy``: kept as it was)."""
    t = getattr(t, "__func__", t)
    if inspect.isfunction(t):
        return [t.__code__]
    if inspect.isclass(t):
        return [c for v in vars(t).values() for c in _codes_of(v)]
    return []


# ---- the digest of format 2 (every .py file under the reached modules' folders): :func:`previous` ----------

@dataclasses.dataclass
class _Previous:
    """What :func:`_take_previous` found: file hashes read then, homes walked, the targets' file-less functions."""

    files: dict            # path -> sha256 of its bytes when taken
    homes: dict            # home folder -> (its .py files, capped)
    functions: list        # the targets' functions defined outside any file (their globals: re-read)
    legacy: str            # the digest as made in format 1 (checkpoints written before it)
    opaque: str = ""       # why nothing can be hashed ("": it can)
    unreadable: str = ""   # a file that cannot be read


def _add_file(files: dict, homes: dict, f: str, mod, *, unreadable: list) -> None:
    """``f`` and the ``.py`` files of its module's home into ``files`` (read now unless already read)."""
    paths = [f]
    home = _home(mod)
    if home is not None and home not in homes:
        homes[home] = _walk(home)
    if home is not None:
        paths += homes[home][0]
    for p in paths:
        if p not in files:
            try:
                files[p] = _read(p)
            except OSError as e:
                unreadable.append(f"{p} cannot be read ({e.strerror})")


def _take_previous(obj, module=None) -> _Previous:
    """What ``obj``'s code is made of now, as the format-2 digest took it: its files (and their homes) read, its
    file-less functions kept."""
    files, homes, functions, opaque, unreadable = {}, {}, [], [], []
    legacy_files, legacy_codes = [], []
    if module is not None and _file_of(module):
        legacy_files.append(_file_of(module))
        _add_file(files, homes, _file_of(module), module, unreadable=unreadable)
    found = targets(obj)
    for t in found:
        f = _file_of(t)
        if f is not None:
            if not f.startswith(_PACKAGE + os.sep):
                legacy_files.append(f)
                _add_file(files, homes, f, inspect.getmodule(t), unreadable=unreadable)
            continue
        codes = _codes_of(t)
        if not codes:
            opaque.append(getattr(t, "__qualname__", type(t).__name__))
        functions += _functions_of(t)
        legacy_codes += codes
    if opaque or not found:
        why = f"{', '.join(opaque) or type(obj).__name__} is neither defined in a source file nor a function or class"
        return _Previous({}, {}, [], "uncheckable", opaque=why)
    if unreadable:
        return _Previous({}, {}, [], "uncheckable", unreadable=unreadable[0])
    h = hashlib.sha256(b"".join(sorted(files[p] for p in set(legacy_files))))  # as before: the files' contents
    for co in legacy_codes:
        h.update(_code_bytes(co))
    return _Previous(files, homes, functions, h.hexdigest()[:16])


class _Globals:
    """The walk through the globals and closure cells that file-less code reads (re-done at each digest)."""

    def __init__(self, d: _Previous):
        self.d, self.files = d, dict(d.files)
        self.homes = dict(d.homes)
        self.codes, self.values, self.uncovered, self.seen, self.unreadable = [], [], [], set(), []
        self.names = []

    def function(self, fn) -> None:
        if id(fn) in self.seen or len(self.seen) >= MAX_FUNCTIONS:
            return
        self.seen.add(id(fn))
        self.codes.append(fn.__code__)
        self.names.append(getattr(fn, "__qualname__", fn.__name__))
        g = getattr(fn, "__globals__", {})
        for name in sorted(_names(fn.__code__)):
            if name in g:
                self.value(name, g[name])
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            try:
                self.value(name, cell.cell_contents)
            except ValueError:  # an empty cell
                continue

    def value(self, name: str, v: Any) -> None:
        if inspect.ismodule(v):
            f = _file_of(v)
            if f is not None and not installed(f):
                _add_file(self.files, self.homes, f, v, unreadable=self.unreadable)
            return
        if inspect.isbuiltin(v):  # len, math.sqrt: the interpreter's
            return
        b = _value_bytes(v)
        if b is not None:
            self.values.append((name, b))
            return
        if callable(v):
            try:
                fn = inspect.unwrap(v)
            except ValueError:
                fn = v
            if inspect.isfunction(fn) or inspect.isclass(fn) or inspect.ismethod(fn):
                f = _file_of(fn)
                if f is not None:
                    if not installed(f):
                        _add_file(self.files, self.homes, f, inspect.getmodule(fn), unreadable=self.unreadable)
                    return
                for x in _functions_of(fn):
                    self.function(x)
                return
        self.uncovered.append(f"{name} ({type(v).__name__})")


def _current_previous(d: _Previous) -> tuple[str, str]:
    """``(digest, covers)``: the format-2 digest of ``d``'s code now (its globals re-read) and a statement of what it
    covers and does not; ``digest`` is ``"uncheckable"`` when nothing can be hashed."""
    if d.opaque:
        return "uncheckable", d.opaque
    if d.unreadable:
        return "uncheckable", d.unreadable
    g = _Globals(d)
    for fn in d.functions:
        g.function(fn)
    if g.unreadable:
        return "uncheckable", g.unreadable[0]
    return _hashed(b"code digest 2\0", g), _statement_previous(g)


def _listed(items: list, limit: int = 4) -> str:
    items = list(dict.fromkeys(items))
    shown = items[:limit] + ([f"{len(items) - limit} more"] if len(items) > limit else [])
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


def _statement_previous(g: _Globals) -> str:
    """What the digest covers; not covered: ... (one clause each)."""
    covers, in_home = [], set()
    for home, (files, capped) in sorted(g.homes.items()):
        mine = [f for f in g.files if _inside(f, home)]
        in_home.update(mine)
        names = sorted(os.path.relpath(f, home) for f in mine)
        what = _listed(names) if len(names) <= 3 else f"{len(names)} .py files"
        covers.append(f"{what} under {home}" + (f" (capped at {MAX_FILES} files, {MAX_BYTES >> 20} MB or "
                                                  f"{MAX_DIRS} folders)" if capped else ""))
    covers += sorted(f for f in g.files if f not in in_home)
    if g.names:
        covers.append(f"the code of {_listed(sorted(set(g.names)))}")
    if g.values:
        names = sorted({n for n, _ in g.values})
        covers.append(f"{len(names)} global value{'s' if len(names) > 1 else ''} ({_listed(names)})")
    outside = "modules outside " + _listed(sorted(g.homes)) if g.homes else "modules in other files"
    not_covered = ["installed packages", outside]
    if g.uncovered:
        not_covered.append(f"the global{'s' if len(set(g.uncovered)) > 1 else ''} {_listed(sorted(set(g.uncovered)))}")
    return f"{_listed(covers, 6) if covers else 'nothing'}; not covered: {_listed(not_covered)}"


# ---- the digest of format 3: what the code reaches, one digest per file ------------------------------------

@dataclasses.dataclass
class Digest:
    """What :func:`take` found: the files the code reaches (path -> sha256 of its bytes when taken), what the
    walk starts from (re-walked at each digest: the globals of file-less code are re-read), the digest as
    made in format 1 (``legacy``) and what :func:`previous` needs (the format-2 digest)."""

    files: dict            # path -> sha256 of its bytes when taken (the files the code reaches)
    roots: list            # what the walk starts from: modules and objects
    legacy: str            # the digest as made in format 1 (checkpoints written before it)
    opaque: str = ""       # why nothing can be hashed ("": it can)
    unreadable: str = ""   # a file that cannot be read
    obj: Any = None        # the registered object and module (the format-2 digest: made when asked)
    module: Any = None
    _previous: Optional[str] = None


def _legacy(obj, module) -> str:
    """The digest as runs recorded it in format 1 (the module's file, the files defining the targets,
    the code objects of those defined outside any file): raises OSError."""
    files, codes = [], []
    if module is not None and _file_of(module):
        files.append(_file_of(module))
    for t in targets(obj):
        f = _file_of(t)
        if f is not None:
            if not f.startswith(_PACKAGE + os.sep):
                files.append(f)
            continue
        codes += _codes_of(t)
    h = hashlib.sha256(b"".join(sorted(_read(p) for p in set(files))))
    for co in codes:
        h.update(_code_bytes(co))
    return h.hexdigest()[:16]


def take(obj, module=None, built=None) -> Digest:
    """What ``obj``'s code is made of now: the files it reaches read, what the walk starts from kept.
    ``module``: the module of a ``module:attribute`` name; ``built``: what an algorithm's factory builds
    (its fields' functions are reached too)."""
    found = targets(obj)
    opaque = [getattr(t, "__qualname__", type(t).__name__) for t in found
              if _file_of(t) is None and not _codes_of(t)]
    if opaque or not found:
        why = f"{', '.join(opaque) or type(obj).__name__} is neither defined in a source file nor a function or class"
        return Digest({}, [], "uncheckable", opaque=why)
    roots = ([module] if module is not None else []) + found + ([built] if built is not None else [])
    r = _walk_from(roots)
    if r.unreadable:
        return Digest({}, [], "uncheckable", unreadable=r.unreadable[0])
    try:
        legacy = _legacy(obj, module)
    except OSError as e:
        return Digest({}, [], "uncheckable", unreadable=f"{e.filename} cannot be read ({e.strerror})")
    return Digest(r.files, roots, legacy, obj=obj, module=module)


def _walk_from(roots: list, known: Optional[dict] = None) -> _Reach:
    r = _Reach(MAX_FILES, known)
    for x in roots:
        if inspect.ismodule(x):
            r.module(x)
        else:
            r.ref(x)
    return r


def _now(d: Digest) -> _Reach:
    """The walk done again (the files as read when taken, the globals of file-less code as they are now)."""
    return _walk_from(d.roots, d.files)


def _hashed(tag: bytes, found) -> str:
    """The 16-hex digest of what a walk ``found`` (its ``files``, ``codes`` and ``values``), after ``tag``
    (the digest format: 1 the first, 2 the folder digest, 3 the per-file one)."""
    h = hashlib.sha256(tag)
    h.update(b"".join(sorted(found.files.values())))  # the files' contents, wherever they lie
    for co in found.codes:
        h.update(_code_bytes(co))
    for name, b in sorted(found.values):
        h.update(name.encode() + b"\0" + hashlib.sha256(b).digest())
    return h.hexdigest()[:16]


def current(d: Digest) -> tuple[str, str]:
    """``(digest, covers)``: the digest of ``d``'s code now (its globals re-read) and a statement of what it
    covers and does not; ``digest`` is ``"uncheckable"`` when nothing can be hashed."""
    if d.opaque:
        return "uncheckable", d.opaque
    if d.unreadable:
        return "uncheckable", d.unreadable
    r = _now(d)
    if r.unreadable:
        return "uncheckable", r.unreadable[0]
    return _hashed(b"code digest 3\0", r), statement(r)


def parts(d: Digest) -> dict:
    """One digest per part of ``d``'s code now: each file it reaches (by its path), and for code outside any
    file ``code NAME`` (a function's code objects) and ``global NAME`` (a value it reads). ``{}`` when it
    cannot be digested. A checkpoint records it, so that a refusal names what changed."""
    if d.opaque or d.unreadable:
        return {}
    r = _now(d)
    if r.unreadable:
        return {}
    out = {p: sha.hex()[:16] for p, sha in r.files.items()}
    pieces: dict = {}
    for co, name in zip(r.codes, r.names):
        pieces.setdefault(f"code {name}", []).append(hashlib.sha256(_code_bytes(co)).digest())
    for name, b in r.values:
        pieces.setdefault(f"global {name}", []).append(hashlib.sha256(b).digest())
    out.update({k: hashlib.sha256(b"".join(sorted(v))).hexdigest()[:16] for k, v in pieces.items()})
    return dict(sorted(out.items()))


def changed(old: dict, new: dict) -> list:
    """What differs between two :func:`parts` records, each named (a file by its path; ``the code of f``,
    ``the global X``; ``(not reached then)`` / ``(no longer reached)`` for a part only one of them has)."""
    def named(k):
        return ("the " + k.replace("code ", "code of ", 1)) if k.startswith(("code ", "global ")) else k
    out = []
    for k in sorted(set(old) | set(new)):
        if k not in old:
            out.append(f"{named(k)} (not reached then)")
        elif k not in new:
            out.append(f"{named(k)} (no longer reached)")
        elif old[k] != new[k]:
            out.append(named(k))
    return out


def previous(d: Digest) -> str:
    """The digest as made in format 2 (the folder digest) (every ``.py`` file under each reached module's folder, one
    digest for all), which checkpoints of those versions recorded; made when first asked."""
    if d.opaque or d.unreadable or d.obj is None:
        return "uncheckable"
    if d._previous is None:
        d._previous = _current_previous(_take_previous(d.obj, d.module))[0]
    return d._previous


def statement(r: _Reach) -> str:
    """What the digest covers; not covered: ... (one clause each)."""
    covers, homes = [], {}
    for f in r.files:
        homes.setdefault(r.home.get(f) or os.path.dirname(f), []).append(f)
    for home, mine in sorted(homes.items()):
        names = sorted(os.path.relpath(f, home) for f in mine)
        what = _listed(names) if len(names) <= 3 else f"{len(names)} .py files"
        covers.append(f"{what} under {home}")
    if r.capped and covers:
        covers[-1] += f" (capped at {MAX_FILES} files or {MAX_STEPS} values)"
    if r.names:
        covers.append(f"the code of {_listed(sorted(set(r.names)))}")
    if r.values:
        names = sorted({n for n, _ in r.values})
        covers.append(f"{len(names)} global value{'s' if len(names) > 1 else ''} ({_listed(names)})")
    not_covered = ["installed packages", "modules its code does not reach"]
    if r.uncovered:
        not_covered.append(f"the global{'s' if len(set(r.uncovered)) > 1 else ''} {_listed(sorted(set(r.uncovered)))}")
    return f"{_listed(covers, 6) if covers else 'nothing'}; not covered: {_listed(not_covered)}"
