"""Old import path of :mod:`fedalf_jax.config.identity` (kept for a release): this name is that module itself,
one module under two names (a monkeypatch of either is the same)."""

import sys

from ..config import identity as _moved

sys.modules[__name__] = _moved
