"""The ``fedalf`` command's memory allocator: one that keeps the memory XLA frees for the next round.

XLA:CPU allocates each program call's temporaries afresh and frees them at the call's end. glibc's malloc
serves an allocation over 32 MB (its largest mmap threshold) with a fresh ``mmap`` and returns it with
``munmap``, so every round touches its temporaries as new pages: a page fault per 4 KiB and the kernel
zeroing them. A 3-run FedLF MLP sweep's round has a 316 MB temporary (the QP rows of the three runs):
~110,000 page faults a round, a third of the sweep's CPU time in the kernel (docs/lab/benchmarks.md,
"The kernel's share of a sweep").

The command therefore starts itself again (``os.execve``: the same process id), before it loads anything,
with

1. **jemalloc** preloaded (``LD_PRELOAD``; Debian's ``libjemalloc2``, which ``experiments/setup.sh``
   installs where ``apt-get`` exists, or the file ``FEDALF_JEMALLOC`` names) and told never to return freed
   pages (``MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1``): the next call gets the same pages back, so a
   round faults no page at all and the memory stays at the peak the run reached (it never grows past it);
2. else, glibc's transparent huge pages for its mmapped blocks (``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``):
   2 MiB pages, so 512 times fewer faults, the zeroing left.

(glibc's own settings that keep freed memory, ``arena_max=1:mmap_max=0`` and no trim, were measured too and
turned down: one heap fragments, and the FedALF CNN sweep's memory grew by ~0.5 GB a round.)

``FEDALF_MALLOC=default`` keeps the process as it is (glibc's malloc as configured); ``FEDALF_MALLOC=thp``
chooses 2 even where jemalloc is installed. A caller's own ``LD_PRELOAD`` of an allocator, ``MALLOC_CONF`` or
``glibc.malloc.`` tunables are kept as they are. Elsewhere than on Linux with glibc nothing is done. A
notebook or script calling ``fj.run`` can get the same by starting Python with these variables set
(:func:`settings` prints them: ``python -c "import fedalf_jax.allocator as a; print(a.settings())"``).
"""

from __future__ import annotations

import os
import sys
from typing import Mapping, Optional

ENV = "FEDALF_MALLOC"  # "default": leave the allocator alone; "thp": glibc's huge pages even with jemalloc
APPLIED = "FEDALF_MALLOC_APPLIED"  # set by the restart: what was applied (and no second restart)
JEMALLOC_ENV = "FEDALF_JEMALLOC"  # a libjemalloc.so to preload instead of the known places
JEMALLOC_CONF = "dirty_decay_ms:-1,muzzy_decay_ms:-1"
THP_TUNABLE = "glibc.malloc.hugetlb=1"
JEMALLOC_PLACES = tuple(f"{d}/libjemalloc.so.2" for d in (
    "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib"))
_OFF = ("default", "off", "0", "no", "none", "false")


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")
    except (AttributeError, ValueError, OSError):
        return False


_SAID: set = set()  # the FEDALF_JEMALLOC values this process has warned about (once each)


def _shared_library(path: str) -> bool:
    """Whether ``path`` is a file that begins as a shared library does (the ELF magic ``\\x7fELF``): the
    loader refuses anything else in ``LD_PRELOAD``, with an error from every process started with it."""
    if not os.path.isfile(path):  # (a FIFO would block the open)
        return False
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def jemalloc(env: Mapping[str, str] = os.environ) -> Optional[str]:
    """The jemalloc library to preload: ``FEDALF_JEMALLOC`` when it names a shared library (an ELF file), else
    the first of :data:`JEMALLOC_PLACES` that is one; ``None`` when there is none. A ``FEDALF_JEMALLOC`` that
    names no shared library is said once, on stderr, and the command runs without jemalloc (glibc's huge
    pages): preloaded, it would make the loader print its error in every process and load nothing."""
    given = env.get(JEMALLOC_ENV, "").strip()
    if given:
        if _shared_library(given):
            return given
        if given not in _SAID:
            _SAID.add(given)
            what = "is not a shared library (no ELF header)" if os.path.isfile(given) else "names no file"
            print(f"fedalf: warning: {JEMALLOC_ENV}={given} {what}: running without jemalloc (set it to a "
                  f"libjemalloc.so, or unset it to look in the usual places)", file=sys.stderr, flush=True)
        return None
    for path in JEMALLOC_PLACES:
        if _shared_library(path):
            return path
    return None


def settings(env: Mapping[str, str] = os.environ, jemalloc_path: Optional[str] = "find") -> dict:
    """The environment variables the command restarts with (``{}``: none, it runs as it is). Pure but for
    looking for the jemalloc file (``jemalloc_path``: that file, or ``None`` for none)."""
    mode = env.get(ENV, "").strip().lower()
    if mode in _OFF or env.get(APPLIED):
        return {}
    preload = env.get("LD_PRELOAD", "")
    if "malloc" in preload or env.get("MALLOC_CONF"):  # the caller's own allocator (jemalloc, tcmalloc, ...)
        return {}
    lib = jemalloc(env) if jemalloc_path == "find" else jemalloc_path
    if lib is not None and mode != "thp":
        return {"LD_PRELOAD": f"{lib}:{preload}" if preload else lib, "MALLOC_CONF": JEMALLOC_CONF,
                APPLIED: "jemalloc"}
    tunables = env.get("GLIBC_TUNABLES", "")
    if "glibc.malloc." in tunables:
        return {}
    return {"GLIBC_TUNABLES": f"{tunables}:{THP_TUNABLE}" if tunables else THP_TUNABLE, APPLIED: "thp"}


def restart_with_settings() -> None:
    """Start this process again with :func:`settings` in its environment (the ``fedalf`` command only, before
    anything is loaded); returns when nothing needs doing or the restart is impossible."""
    if not sys.platform.startswith("linux") or not _glibc():
        return
    argv = list(getattr(sys, "orig_argv", None) or [])
    extra = settings()
    if not extra or len(argv) < 2 or not sys.executable:
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, *argv[1:]], {**os.environ, **extra})
    except OSError:  # the interpreter cannot be started again: run as it is
        return
