"""Notices that matter to a run's integrity: resuming from an older checkpoint, a checkpoint that
cannot be checked, a privacy guarantee that does not hold (or holds only at a smaller ε than asked).

They are ``warnings.warn(..., Notice)``: a :class:`UserWarning`, so a Python caller filters or records them
as any warning. The ``fedalf`` command shows them whatever the warnings filter (:func:`shown`): a user who
sets ``PYTHONWARNINGS=ignore`` to silence libraries still sees, on stderr, that the run resumed from the
previous checkpoint.

A notice is one line (:func:`_one_line`, installed as ``warnings.formatwarning`` for this category only):
``FILE:LINE: Notice: MESSAGE``, without the line of source Python's default format prints after it (the
package's ``say_code(cfg)`` after every run of a user's module, in a script's output and pytest's summary).
"""

from __future__ import annotations

import contextlib
import warnings


class Notice(UserWarning):
    """A warning about the trust one may put in a run's results (shown by the command line always)."""


def _one_line(message, category, filename, lineno, line=None):
    """``warnings.formatwarning`` that writes a :class:`Notice` as one line (its source line left out); every
    other warning as the format this one replaced writes it."""
    if isinstance(category, type) and issubclass(category, Notice):
        return f"{filename}:{lineno}: {category.__name__}: {message}\n"
    return _one_line.previous(message, category, filename, lineno, line)


# a module imported again (importlib.reload) wraps the format it found first, not its own wrapper
_one_line.previous = getattr(warnings.formatwarning, "previous", warnings.formatwarning)
warnings.formatwarning = _one_line


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
