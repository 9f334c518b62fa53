"""Where fedalf_jax keeps what it caches for a user (the compiled programs, the decoded data sets): a folder of
``$XDG_CACHE_HOME/fedalf_jax`` (an absolute one: the XDG spec ignores a relative path) or ``~/.cache/fedalf_jax``.
At the ground: it imports nothing of the package (``problem/`` and ``runner/`` both use it)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional

OFF = ("off", "0", "false", "no", "none")  # a cache's environment variable set to one of these turns it off


def cache_home(name: str, env: Optional[Mapping[str, str]] = None) -> Path:
    """The default folder of the cache ``name`` (``env``: the environment, default ``os.environ``). Pure."""
    env = os.environ if env is None else env
    xdg = env.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else (
        (Path(env["HOME"]) if env.get("HOME") else Path.home()) / ".cache")
    return base / "fedalf_jax" / name
