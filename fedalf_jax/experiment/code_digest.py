"""The digest of a user's algorithm or model code, part of a run's identity (docs/extending.md, "Your code is
part of the run's identity"): ``--resume`` refuses code changed since the checkpoint.

:func:`take` records what a name's object (a factory, a class, an ``Algorithm``, a partial; and the module
of a ``module:attribute`` name) is made of when it is imported or registered; :func:`current` gives its
digest and a statement of what it covers, re-reading the globals that code outside any file reads.

Covered:

* **files**: the module's source file and those of the modules defining the object's functions and
  classes, and every ``.py`` file under each such module's *home*: the folder of its top-level package
  (``pkg/`` for ``pkg.sub.mod``), or the module's own folder for a top-level module. The walk goes
  shallowest first in name order, skips hidden folders, ``__pycache__``, virtual environments (a folder
  holding ``pyvenv.cfg``), ``site-packages``/``dist-packages``, ``node_modules`` and fedalf_jax itself, and
  stops at :data:`MAX_FILES` files, :data:`MAX_BYTES` bytes or :data:`MAX_DIRS` folders (the statement
  then says "capped"). A home inside an installed location (the standard library, site-packages) is not
  walked. The files' contents are read once, when the name is imported or registered (the code that ran).
* **code outside any file** (a notebook's cell): its code objects (bytecode, names, constants), and the
  values of the globals and closure cells they read, re-read at every digest: ``None``, numbers,
  strings, bytes, tuples, lists, dicts and sets of those, numpy and JAX arrays (dtype, shape, bytes; up
  to :data:`MAX_ARRAY_BYTES`). A function or class read that way is followed the same way (or by its
  file and home); a module read that way by its file and home, unless it is installed.

Not covered: installed packages and the standard library, modules outside those homes, what a module
reads when it is imported (data files, the environment), and globals of other types (the statement
names them). ``Digest.legacy`` is the digest as made before folders and globals were covered (the module's
and the defining files, the targets' code objects), which older checkpoints recorded.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import os
import site
import sysconfig
from typing import Any, Optional

import numpy as np

MAX_FILES = 500         # .py files per home
MAX_BYTES = 50 * 2**20  # their bytes per home
MAX_DIRS = 2000         # folders visited per home
MAX_ARRAY_BYTES = 16 * 2**20  # an array global larger than this is named as not covered
MAX_FUNCTIONS = 500     # file-less functions followed through globals
_SKIP_DIRS = {"__pycache__", "site-packages", "dist-packages", "node_modules"}
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # fedalf_jax/: versioned with the package


@functools.lru_cache(maxsize=1)
def _installed_roots() -> tuple:
    paths = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            paths.add(os.path.realpath(p))
    try:
        paths.update(os.path.realpath(p) for p in site.getsitepackages())
        paths.add(os.path.realpath(site.getusersitepackages()))
    except (AttributeError, TypeError):  # a virtualenv's old site module
        pass
    return tuple(sorted(paths))


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def installed(path: str) -> bool:
    """``path`` lies in the standard library or an installed package's folder (or is fedalf_jax itself)."""
    real = os.path.realpath(path)
    parts = real.split(os.sep)
    return ("site-packages" in parts or "dist-packages" in parts or _inside(real, os.path.realpath(_PACKAGE))
            or any(_inside(real, r) for r in _installed_roots()))


def _file_of(obj) -> Optional[str]:
    mod = obj if inspect.ismodule(obj) else inspect.getmodule(obj)
    f = getattr(mod, "__file__", None)
    return os.path.abspath(f) if f and os.path.isfile(f) else None


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


def _read(path: str) -> bytes:
    """sha256 of the file's bytes; raises OSError."""
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).digest()


def targets(obj) -> list:
    """The functions and classes that make up ``obj`` (a factory, a class, an Algorithm, a partial)."""
    from ..sim.algorithms import Algorithm
    if isinstance(obj, Algorithm):
        return [t for f in dataclasses.fields(obj) if callable(v := getattr(obj, f.name)) for t in targets(v)]
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
    """The code objects of ``t`` as the digest before issue 36 took them (``Digest.legacy``: kept as it was)."""
    t = getattr(t, "__func__", t)
    if inspect.isfunction(t):
        return [t.__code__]
    if inspect.isclass(t):
        return [c for v in vars(t).values() for c in _codes_of(v)]
    return []


def _functions_of(t) -> list:
    """The plain functions behind ``t`` (a function, a bound method, a class's methods and properties)."""
    t = getattr(t, "__func__", t)
    if inspect.isfunction(t):
        return [t]
    if inspect.isclass(t):
        out = []
        for v in vars(t).values():
            if isinstance(v, (staticmethod, classmethod)):
                v = v.__func__
            if isinstance(v, property):
                out += [f for f in (v.fget, v.fset, v.fdel) if inspect.isfunction(f)]
            elif inspect.isfunction(v):
                out.append(v)
        return out
    return []


def _names(co) -> set:
    out = set(co.co_names)
    for c in co.co_consts:
        if inspect.iscode(c):
            out |= _names(c)
    return out


def _value_bytes(v, depth: int = 0) -> Optional[bytes]:
    """A global's value as bytes when it is a simple value (see the module's docstring); ``None`` else."""
    if v is None or isinstance(v, (bool, float, complex, str, bytes)):
        return f"{type(v).__name__}:{v!r}".encode()
    if isinstance(v, int):  # hex: no limit on its digits
        return f"{type(v).__name__}:{v:x}".encode()
    if depth < 8 and isinstance(v, (tuple, list, set, frozenset, dict)) and len(v) <= 100_000:
        items = v.items() if isinstance(v, dict) else ((x, None) for x in v)
        parts = []
        for k, x in items:
            kb = _value_bytes(k, depth + 1)
            xb = b"" if x is None and not isinstance(v, dict) else _value_bytes(x, depth + 1)
            if kb is None or xb is None:
                return None
            parts.append(kb + b"=" + xb)
        if isinstance(v, (set, frozenset, dict)):
            parts.sort()
        return f"{type(v).__name__}(".encode() + b",".join(parts) + b")"
    if hasattr(v, "__array__") and hasattr(v, "dtype") and hasattr(v, "shape"):
        try:
            a = np.asarray(v)
        except Exception:  # noqa: BLE001 - an array-like that cannot be read (a tracer): not covered
            return None
        if a.dtype == object or a.nbytes > MAX_ARRAY_BYTES:
            return None
        return f"array:{a.dtype.str}{list(a.shape)}:".encode() + np.ascontiguousarray(a).tobytes()
    return None


@dataclasses.dataclass
class Digest:
    """What :func:`take` found: file hashes read then, homes walked, the targets' file-less functions."""

    files: dict            # path -> sha256 of its bytes when taken
    homes: dict            # home folder -> (its .py files, capped)
    functions: list        # the targets' functions defined outside any file (their globals: re-read)
    legacy: str            # the digest as made before issue 36 (checkpoints written before it)
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


def take(obj, module=None) -> Digest:
    """What ``obj``'s code is made of now: its files (and their homes) read, its file-less functions kept."""
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
        return Digest({}, {}, [], "uncheckable", opaque=why)
    if unreadable:
        return Digest({}, {}, [], "uncheckable", unreadable=unreadable[0])
    h = hashlib.sha256(b"".join(sorted(files[p] for p in set(legacy_files))))  # as before: the files' contents
    for co in legacy_codes:
        h.update(_code_bytes(co))
    return Digest(files, homes, functions, h.hexdigest()[:16])


class _Globals:
    """The walk through the globals and closure cells that file-less code reads (re-done at each digest)."""

    def __init__(self, d: Digest):
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


def current(d: Digest) -> tuple[str, str]:
    """``(digest, covers)``: the digest of ``d``'s code now (its globals re-read) and a statement of what it
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
    h = hashlib.sha256(b"code digest 2\0")
    h.update(b"".join(sorted(g.files.values())))  # the files' contents, wherever they lie
    for co in g.codes:
        h.update(_code_bytes(co))
    for name, b in sorted(g.values):
        h.update(name.encode() + b"\0" + hashlib.sha256(b).digest())
    return h.hexdigest()[:16], statement(g)


def _listed(items: list, limit: int = 4) -> str:
    items = list(dict.fromkeys(items))
    shown = items[:limit] + ([f"{len(items) - limit} more"] if len(items) > limit else [])
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


def statement(g: _Globals) -> str:
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
