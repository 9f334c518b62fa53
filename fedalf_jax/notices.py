"""Notices that matter to a run's integrity: resuming from an older checkpoint, a checkpoint that
cannot be checked, a privacy guarantee that does not hold (or holds only at a smaller ε than asked).

They are ``warnings.warn(..., Notice)``: a :class:`UserWarning`, so a Python caller filters or records them
as any warning. The ``fedalf`` command shows them whatever the warnings filter (:func:`shown`): a user who
sets ``PYTHONWARNINGS=ignore`` to silence libraries still sees, on stderr, that the run resumed from the
previous checkpoint.
"""

from __future__ import annotations

import contextlib
import warnings


class Notice(UserWarning):
    """A warning about the trust one may put in a run's results (shown by the command line always)."""


@contextlib.contextmanager
def shown():
    """Within: every :class:`Notice` is shown (once per place, as Python's default), whatever filters the
    environment set (``PYTHONWARNINGS``, ``-W``); a ``warnings.catch_warnings`` inside still decides."""
    warnings.filterwarnings("default", category=Notice)
    entry = warnings.filters[0]
    try:
        yield
    finally:
        if entry in warnings.filters:
            warnings.filters.remove(entry)
            getattr(warnings, "_filters_mutated", lambda: None)()
