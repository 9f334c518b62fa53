"""Old import path of :mod:`fedalf_jax.runtime.errors` (kept for a release): this name is that module itself,
one module under two names (a monkeypatch of either is the same)."""

import sys

from .runtime import errors as _moved

sys.modules[__name__] = _moved
