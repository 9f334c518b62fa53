"""The walk behind a user's code digest (:mod:`.code_digest`, whose docstring says what it covers): from
what a name registers to everything of the user's that its code reaches (:class:`_Reach`), and how it reads
what it finds: whether a file is the user's (:func:`installed`: not the standard library, an installed
package or fedalf_jax), a file's hash, the global names a code object reads, a simple value's bytes.

The walk's file cap is given by :mod:`.code_digest` (its ``MAX_FILES``, which the digest's statement names).
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

MAX_ARRAY_BYTES = 16 * 2**20  # an array global larger than this is named as not covered
MAX_FUNCTIONS = 500     # file-less functions followed through globals
MAX_STEPS = 200_000     # values looked at by one walk of what the code reaches (containers included)
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


def _read(path: str) -> bytes:
    """sha256 of the file's bytes; raises OSError."""
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).digest()


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
    """The walk from what a name registers to everything of the user's that its code reaches (code_digest's
    module docstring): the files read (``known``: those read when the name was taken, not read again), and for
    the code outside any file its code objects and the values of the globals it reads."""

    def __init__(self, max_files: int, known: Optional[dict] = None):
        self.known, self.max_files = known or {}, max_files  # the cap on the files read (code_digest.MAX_FILES)
        self.files, self.home = {}, {}   # path -> sha256; path -> the folder the statement names it under
        self.seen, self.capped, self.steps = set(), False, 0
        self.codes, self.names, self.values, self.uncovered, self.unreadable = [], [], [], [], []

    def read(self, path: str, home: str) -> None:
        if path in self.files:
            return
        if len(self.files) >= self.max_files:
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
        if len(self.seen) >= MAX_FUNCTIONS + self.max_files:
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
