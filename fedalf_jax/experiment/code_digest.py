"""The digest of a user's algorithm or model code, part of a run's identity (docs/extending.md, "Your code is
part of the run's identity"): ``--resume`` refuses code changed since the checkpoint, naming what changed.

:func:`take` records what a name's object (a factory, a class, an ``Algorithm``, a partial, a lambda; and
the module of a ``module:attribute`` name) is made of when it is imported or registered; :func:`current`
gives its digest and a statement of what it covers, :func:`parts` one digest per file (and per piece of
code outside any file), re-reading the globals that code outside any file reads.

Covered: what the code **reaches** (issue 47, item 14), starting from the registered object, the
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
(before issue 36: the module's and the defining files, the targets' code objects) and :func:`previous`
(issue 36 to 47: every ``.py`` file under each reached module's folder, one digest for all).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import os
import site
import sys
import sysconfig
from typing import Any, Optional

import numpy as np

MAX_FILES = 500         # .py files per home
MAX_BYTES = 50 * 2**20  # their bytes per home
MAX_DIRS = 2000         # folders visited per home
MAX_ARRAY_BYTES = 16 * 2**20  # an array global larger than this is named as not covered
MAX_FUNCTIONS = 500     # file-less functions followed through globals
MAX_STEPS = 200_000     # values looked at by one walk of what the code reaches (containers included)
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


@functools.lru_cache(maxsize=8192)
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
        out = [t for f in dataclasses.fields(obj) if callable(v := getattr(obj, f.name)) for t in targets(v)]
        if obj.client is not None:  # a client program (a NamedTuple, not callable itself): its functions
            out += [t for f in obj.client if f is not None for t in targets(f)]
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


# ---- the digest of issue 36 to 47 (every .py file under the reached modules' folders): :func:`previous` ----------

@dataclasses.dataclass
class _Previous:
    """What :func:`_take_previous` found: file hashes read then, homes walked, the targets' file-less functions."""

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


def _take_previous(obj, module=None) -> _Previous:
    """What ``obj``'s code is made of now, as issue 36's digest took it: its files (and their homes) read, its
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
    """``(digest, covers)``: issue 36's digest of ``d``'s code now (its globals re-read) and a statement of what it
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


# ---- the digest since issue 47: what the code reaches, one digest per file ------------------------------------

@dataclasses.dataclass
class Digest:
    """What :func:`take` found: the files the code reaches (path -> sha256 of its bytes when taken), what the
    walk starts from (re-walked at each digest: the globals of file-less code are re-read), the digest as
    made before issue 36 (``legacy``) and what :func:`previous` needs (issue 36 to 47's digest)."""

    files: dict            # path -> sha256 of its bytes when taken (the files the code reaches)
    roots: list            # what the walk starts from: modules and objects
    legacy: str            # the digest as made before issue 36 (checkpoints written before it)
    opaque: str = ""       # why nothing can be hashed ("": it can)
    unreadable: str = ""   # a file that cannot be read
    obj: Any = None        # the registered object and module (issue 36's digest: made when asked)
    module: Any = None
    _previous: Optional[str] = None


def _legacy(obj, module) -> str:
    """The digest as runs recorded it before issue 36 (the module's file, the files defining the targets,
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


def _mine(path: Optional[str]) -> bool:
    return path is not None and not installed(path)


def _ns_file(ns: dict) -> Optional[str]:
    """The source file of the module whose namespace ``ns`` is (a function's ``__globals__``, a module's
    ``vars``): read from the namespace itself, which stays right when the module has left ``sys.modules``."""
    f = ns.get("__file__")
    return os.path.abspath(f) if isinstance(f, str) and os.path.isfile(f) else None


def _top(f: str, name: str) -> str:
    """The folder of the top-level package of module ``name`` (file ``f``), as :func:`_home` finds it."""
    parts = (name or "m").split(".")
    if os.path.basename(f) == "__init__.py":
        parts.append("__init__")
    d = os.path.dirname(f)
    for _ in range(len(parts) - 2):
        d = os.path.dirname(d)
    return d


def _packages_above(f: str, name: str) -> list:
    """The ``__init__.py`` files of the packages above module ``name`` (file ``f``): they ran when it was
    imported."""
    d = os.path.dirname(f)
    if os.path.basename(f) == "__init__.py":
        d = os.path.dirname(d)
    out = []
    for _ in range(len((name or "").split(".")) - 1):
        p = os.path.join(d, "__init__.py")
        if os.path.isfile(p):
            out.append(p)
        d = os.path.dirname(d)
    return out


class _Reach:
    """The walk from what a name registers to everything of the user's that its code reaches (module
    docstring): the files read (``known``: those read when the name was taken, not read again), and for
    the code outside any file its code objects and the values of the globals it reads."""

    def __init__(self, known: Optional[dict] = None):
        self.known = known or {}
        self.files, self.home = {}, {}   # path -> sha256; path -> the folder the statement names it under
        self.seen, self.capped, self.steps = set(), False, 0
        self.codes, self.names, self.values, self.uncovered, self.unreadable = [], [], [], [], []

    def read(self, path: str, home: str) -> None:
        if path in self.files:
            return
        if len(self.files) >= MAX_FILES:
            self.capped = True
            return
        try:
            self.files[path] = self.known[path] if path in self.known else _read(path)
        except OSError as e:
            self.unreadable.append(f"{path} cannot be read ({e.strerror})")
            return
        self.home[path] = home

    def module(self, mod) -> None:
        ns = getattr(mod, "__dict__", None)
        if isinstance(ns, dict):
            self.namespace(ns)

    def namespace(self, ns: dict) -> None:
        """A module (its namespace): its file, its packages' ``__init__.py`` files and what it holds of the
        user's (what it imports, its functions and classes, the classes of its objects)."""
        if id(ns) in self.seen:
            return
        self.seen.add(id(ns))
        f = _ns_file(ns)
        if not _mine(f):
            return
        name = str(ns.get("__name__") or "")
        top = _top(f, name)
        self.read(f, top)
        for p in _packages_above(f, name):
            if _mine(p):
                self.read(p, top)
        for key, v in sorted(list(ns.items()), key=lambda kv: str(kv[0])):
            if not (str(key).startswith("__") and str(key).endswith("__")):
                self.ref(v)

    def function(self, fn) -> None:
        """A function: its module (or, outside any file, its code and the values it reads), the globals its
        code names, its closure cells and its defaults."""
        if id(fn) in self.seen:
            return
        if len(self.seen) >= MAX_FUNCTIONS + MAX_FILES:
            self.capped = True
            return
        self.seen.add(id(fn))
        g = getattr(fn, "__globals__", {})
        f = _ns_file(g)
        if f is not None:
            if installed(f):
                return
            self.namespace(g)
        else:
            self.codes.append(fn.__code__)
            self.names.append(getattr(fn, "__qualname__", fn.__name__))
        free = f is None
        for name in sorted(_names(fn.__code__)):
            if name in g:
                self.value(name, g[name], free)
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            try:
                self.value(name, cell.cell_contents, free)
            except ValueError:  # an empty cell
                continue
        for v in (fn.__defaults__ or ()) + tuple((fn.__kwdefaults__ or {}).values()):
            self.ref(v)

    def value(self, name: str, v: Any, free: bool) -> None:
        """A global or closure value ``name`` read by code (``free``: code outside any file, whose values
        count by value; a file's code is covered by its file)."""
        if inspect.ismodule(v):
            self.module(v)
            return
        if inspect.isbuiltin(v):  # len, math.sqrt: the interpreter's
            return
        if free:
            b = _value_bytes(v)
            if b is not None:
                self.values.append((name, b))
                return
        if not self.ref(v) and free:
            self.uncovered.append(f"{name} ({type(v).__name__})")

    def ref(self, v: Any, depth: int = 0) -> bool:
        """Follow what ``v`` refers to of the user's code; whether ``v`` itself is then covered (a function,
        a class, a module, a partial or Algorithm of those)."""
        from ..sim.algorithms import Algorithm
        self.steps += 1
        if self.steps > MAX_STEPS:
            self.capped = True
            return False
        if inspect.ismodule(v):
            self.module(v)
            return True
        if v is None or isinstance(v, (bool, int, float, complex, str, bytes)) or inspect.isbuiltin(v):
            return False
        if isinstance(v, functools.partial):
            return all([self.ref(v.func, depth), *(self.ref(x, depth + 1) for x in v.args),
                        *(self.ref(x, depth + 1) for x in v.keywords.values())])
        if isinstance(v, Algorithm):
            for f in dataclasses.fields(v):
                x = getattr(v, f.name)
                if callable(x):
                    self.ref(x, depth + 1)
            return True
        if inspect.ismethod(v):
            self.ref(v.__self__, depth + 1)
            return self.ref(v.__func__, depth)
        try:
            fn = inspect.unwrap(v) if callable(v) else v
        except ValueError:
            fn = v
        if inspect.isfunction(fn):
            self.function(fn)
            return True
        if inspect.isclass(fn):
            self.cls(fn)
            return True
        if depth < 3 and isinstance(v, (tuple, list, set, frozenset, dict)) and len(v) <= 1000:
            for x in (list(v.keys()) + list(v.values()) if isinstance(v, dict) else list(v)):
                self.ref(x, depth + 1)
            return False
        self.cls(type(v))  # an object: the class it is of (its state is not covered)
        return False

    def cls(self, c) -> None:
        """A class: its module's namespace when it has a file; else its functions and its bases."""
        if id(c) in self.seen or getattr(c, "__module__", None) == "builtins":
            return
        self.seen.add(id(c))
        mod = sys.modules.get(getattr(c, "__module__", None) or "")
        if mod is not None and _file_of(mod) is not None:
            self.module(mod)
            return
        for fn in _functions_of(c):  # its module gone from sys.modules, or outside any file
            self.function(fn)
        for base in c.__bases__:
            self.cls(base)


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
    r = _Reach(known)
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
    (the digest format: 2 for issue 36's, 3 for the per-file one)."""
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
    """The digest as made from issue 36 to 47 (every ``.py`` file under each reached module's folder, one
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
