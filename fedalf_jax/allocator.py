"""The ``fedalf`` command's memory allocator settings: glibc's malloc told to keep the memory it was given.

XLA:CPU allocates each program call's temporary buffer afresh and frees it at the call's end. glibc's
malloc serves an allocation over 32 MB (its largest mmap threshold) with a fresh ``mmap`` and returns it
with ``munmap``, so every round of a run touches its temporaries as new pages: a page fault per 4 KiB and
the kernel zeroing them. A 3-run FedLF MLP sweep's round has a 316 MB temporary (the QP rows of the three
runs): ~80,000 page faults a round, a third of the sweep's CPU time in the kernel (issue 49). With

* ``arena_max=1``: every thread allocates from the main heap (a thread's own arena is at most 64 MB,
  so a larger block there is mmapped whatever the settings),
* ``mmap_max=0``: no block is mmapped, every block comes from the heap,
* ``trim_threshold`` and ``top_pad`` large: freed memory stays with the process,

the next call gets the same memory back: a round then faults no page at all (docs/benchmarks.md, "The
kernel's share of a sweep"). The price is the peak's slack: memory once used is kept until the process
ends.

glibc reads these settings once, when the process starts (``GLIBC_TUNABLES``), so the command starts itself
again with them (``os.execve``, the same process id) before it loads anything: :func:`restart_with_tunables`,
called from ``fedalf_jax/__init__.py``. ``FEDALF_MALLOC=default`` keeps glibc's own settings; a
``GLIBC_TUNABLES`` that already sets any ``glibc.malloc.`` tunable is the caller's choice and is kept as it
is. Elsewhere than on glibc (macOS, musl) nothing is done. A notebook or script calling ``fj.run`` can get
the same by starting Jupyter or Python with ``GLIBC_TUNABLES`` set to :data:`TUNABLES`.
"""

from __future__ import annotations

import os
import sys

TUNABLES = ("glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:"
            "glibc.malloc.trim_threshold=4294967295:glibc.malloc.top_pad=67108864")
ENV = "FEDALF_MALLOC"  # "default": glibc's own settings


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")
    except (AttributeError, ValueError, OSError):
        return False


def tunables_for(env) -> str | None:
    """The ``GLIBC_TUNABLES`` the command should run with, or ``None`` when it should run as it is
    (``FEDALF_MALLOC=default``, or the caller's own malloc tunables). Pure."""
    if env.get(ENV, "").strip().lower() in ("default", "off", "0", "no", "none", "false"):
        return None
    given = env.get("GLIBC_TUNABLES", "")
    if "glibc.malloc." in given:
        return None
    return f"{given}:{TUNABLES}" if given else TUNABLES


def restart_with_tunables() -> None:
    """Start this process again with :data:`TUNABLES` in ``GLIBC_TUNABLES`` (the ``fedalf`` command only,
    before anything is loaded); returns when nothing needs doing or the restart is impossible."""
    if not sys.platform.startswith("linux") or not _glibc():
        return
    argv = list(getattr(sys, "orig_argv", None) or [])
    want = tunables_for(os.environ)
    if want is None or len(argv) < 2 or not sys.executable:
        return
    env = dict(os.environ, GLIBC_TUNABLES=want)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, *argv[1:]], env)
    except OSError:  # the interpreter cannot be started again: run as it is
        return
