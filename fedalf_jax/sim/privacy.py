"""Old import path of :mod:`fedalf_jax.privacy.mechanisms` (kept for a release): this name is that module itself, one
module under two names (a test's or notebook's ``monkeypatch`` of either is the same)."""

import sys

from ..privacy import mechanisms as _moved

sys.modules[__name__] = _moved
