"""Old import path of :mod:`fedalf_jax.runner.columns` (kept for a release): this name is that module itself,
one module under two names (a monkeypatch of either is the same)."""

import sys

from ..runner import columns as _moved

sys.modules[__name__] = _moved
