"""Old import path of :mod:`fedalf_jax.plugins.code_reach` (kept for a release): this name is that module itself,
one module under two names (a monkeypatch of either is the same)."""

import sys

from ..plugins import code_reach as _moved

sys.modules[__name__] = _moved
