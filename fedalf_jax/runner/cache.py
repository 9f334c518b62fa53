"""The persistent compilation cache: XLA's compiled programs kept on disk, so that a command that
runs programs already compiled once (the same options, data shapes and versions of JAX) loads them in
a fraction of a second instead of compiling them again (FedALF's FMNIST CNN chunk: 40-60 s on a busy
2-core CPU).

``fedalf run``, ``sweep`` and ``bench`` turn it on before anything compiles (:func:`configure`), and so do
``fj.run`` and ``fj.sweep`` (:func:`configure_for_api`: once per process; a folder the process gave JAX's cache
itself is kept unless ``FEDALF_COMPILE_CACHE`` is set), so a notebook's kernel restarted loads what it compiled
before.
The folder (:func:`cache_dir`), first match wins:

1. ``--no-compile-cache``: off;
2. ``FEDALF_COMPILE_CACHE``: a folder, or ``off`` (also ``0``, ``false``, ``no``, ``none``);
3. JAX's own ``JAX_COMPILATION_CACHE_DIR``;
4. ``$XDG_CACHE_HOME/fedalf_jax/jax``, or ``~/.cache/fedalf_jax/jax``.

JAX keys every entry on the program, the JAX version, the backend and the compile options, so a stale
entry is never used; an entry that cannot be loaded (another machine's CPU) is compiled again. The
folder only grows: remove it to reclaim the space. Every program is kept, however fast it compiled
(JAX's default keeps only those over 1 s), unless ``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS`` is
set. JAX writes an entry in place, without a lock: a process that reads it while another (a
concurrent ``--shard`` slice) writes it gets it cut short, which
JAX rejects with a warning ("Error reading persistent compilation cache entry") and compiles again, so
results never depend on it; an entry left cut short by a killed process draws that warning, and a
compile, every time: remove the folder. (JAX's locking comes with its LRU cap,
``jax_compilation_cache_max_size``, which needs ``filelock`` and fails on folders written without it;
each write under it lists and stats the whole folder: 0.3 s at 3,000 entries.)
JAX does not persist a program that calls back into Python (``jax.debug.callback``): the run loop's
programs have no callbacks (the progress bar moves after each chunk, see :mod:`.progress`).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Mapping, Optional

from ..runtime.cache_home import OFF, cache_home

ENV = "FEDALF_COMPILE_CACHE"
MIN_TIME_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"  # set: JAX's threshold, kept (else 0: every program)


def cache_dir(*, disabled: bool = False, env: Optional[Mapping[str, str]] = None) -> Optional[Path]:
    """The cache folder for this command, or ``None`` when the cache is off (see the module's docstring).

    ``disabled``: ``--no-compile-cache`` was given. ``env``: the environment (default ``os.environ``).
    Pure: nothing is created or configured.
    """
    env = os.environ if env is None else env
    if disabled:
        return None
    given = env.get(ENV, "").strip()
    if given:
        return None if given.lower() in OFF else Path(given).expanduser()
    jax_dir = env.get("JAX_COMPILATION_CACHE_DIR", "").strip()
    if jax_dir:
        return Path(jax_dir).expanduser()
    return cache_home("jax", env)


def configure(path: Optional[Path]) -> Optional[Path]:
    """Point JAX's persistent compilation cache at ``path`` (``None``: turn it off) and cache every
    program, however fast it compiled or small it is (unless ``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS``
    is set: then only the programs that took longer to compile). Call it before anything compiles. Returns the
    folder in use: ``None`` when off, or when ``path`` cannot be written (a one-line warning says so)."""
    import jax

    if path is not None:
        try:
            path.mkdir(parents=True, exist_ok=True)
            if not os.access(path, os.W_OK | os.X_OK):
                raise PermissionError("not writable")
        except OSError as e:
            warnings.warn(f"compile cache off: cannot use {path} ({e.strerror or e}); set {ENV}=DIR to "
                          f"move it or {ENV}=off to silence this")
            path = None
    if path is None:
        jax.config.update("jax_enable_compilation_cache", False)
    else:
        jax.config.update("jax_enable_compilation_cache", True)
        jax.config.update("jax_compilation_cache_dir", str(path))
        if not os.environ.get(MIN_TIME_ENV, "").strip():  # a user's own threshold (JAX read it) wins
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)  # default 1 s: misses most programs
        try:
            jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)  # -1: no size limit
        except AttributeError:  # an older JAX without the option caches every size
            pass
    try:  # JAX reads the settings once, at its first compile: start over (a no-op before any compile)
        from jax.experimental.compilation_cache import compilation_cache as cc
        cc.reset_cache()
    except (ImportError, AttributeError):
        pass
    return path


_API_CONFIGURED = False


def api_cache_dir(env: Optional[Mapping[str, str]] = None, jax_dir: Optional[str] = None):
    """What ``fj.run``/``fj.sweep`` do to JAX's cache, as ``(change, folder)``: ``FEDALF_COMPILE_CACHE`` set
    (a folder, or off) rules as for the CLI, ``(True, its folder or None)``; else a folder the process already
    gave JAX (``jax_dir``: ``JAX_COMPILATION_CACHE_DIR``, or ``jax.config``) is left as it is, ``(False,
    None)``; else ``(True, cache_dir())``, the CLI's default folder. Pure."""
    env = os.environ if env is None else env
    if env.get(ENV, "").strip() or not jax_dir:
        return True, cache_dir(env=env)
    return False, None


def _jax_cache_folder() -> Optional[str]:
    """The folder JAX's cache is set to in this process (``None``: none)."""
    import jax
    try:
        return jax.config.read("jax_compilation_cache_dir")
    except AttributeError:  # JAX 0.10 reads a flag that has a context manager as an attribute only
        pass
    try:
        return getattr(jax.config, "jax_compilation_cache_dir")
    except AttributeError:  # a JAX that reads it neither way: what the environment gave it
        return os.environ.get("JAX_COMPILATION_CACHE_DIR") or None


def configure_for_api() -> None:
    """Turn the persistent cache on for the Python API, as :func:`configure` does for the CLI, the first
    time ``fj.run`` or ``fj.sweep`` is called in this process (see :func:`api_cache_dir`): a process that set
    JAX's cache folder itself keeps its settings, unless ``FEDALF_COMPILE_CACHE`` says otherwise. A later
    call changes nothing."""
    global _API_CONFIGURED
    if _API_CONFIGURED:
        return
    _API_CONFIGURED = True
    change, path = api_cache_dir(jax_dir=_jax_cache_folder())
    if change:
        configure(path)
