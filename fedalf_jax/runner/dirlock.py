"""One writer per folder, and files that are whole or absent: the folder's OS lock (``.fedalf.lock``,
:class:`DirLock`, with the line it holds naming its writer, and the refusal that names a live one) and the
atomic replacement of a file (:func:`write_atomic`: a temporary file created anew, then renamed) with the JSON
read back checked (:func:`_read_json`). The run and sweep directories (:mod:`.rundir`, :mod:`.sweepdir`) write
through these."""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import sys
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np

from ..config.config import ConfigError
from .writers import NOFOLLOW, WriteError, discard, open_new, tmp_name

try:
    import fcntl
except ImportError:  # not POSIX: no lock
    fcntl = None

LOCK = ".fedalf.lock"


def write_atomic(path: Path, text: str) -> None:
    """``text`` to ``path`` through a temporary file and a rename; :class:`WriteError` (after removing
    the temporary file) when the folder cannot be written."""
    tmp = path.with_name(tmp_name(path.name))
    try:
        with open_new(tmp) as f:  # never through a link planted at the temporary name
            f.write(text)
        os.replace(tmp, path)  # replaces the name itself (a link there, not what it points to)
    except OSError as e:
        discard(tmp)
        raise WriteError(path, e) from None


def write_json(path: Path, obj: Any) -> None:
    write_atomic(path, _json_text(obj))


def _json_text(obj: Any) -> str:
    return json.dumps(obj, indent=2, default=_json_default) + "\n"


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _read_json(path: Path, kind: type = dict) -> Optional[Any]:
    """The JSON value in ``path`` (``None`` if there is no such file); it must be a ``kind``."""
    try:
        d = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path} is not valid JSON ({getattr(e, 'msg', e)}); restore it or rerun the run") from None
    except OSError as e:
        raise ConfigError(f"cannot read {path} ({e.strerror})") from None
    if not isinstance(d, kind):
        raise ConfigError(f"{path} holds a JSON {type(d).__name__}, not the {kind.__name__} fedalf writes there; "
                          f"restore it or rerun the run")
    return d


class DirLock:
    """An OS lock (``flock``) on ``folder/.fedalf.lock``: one writer per folder, released when the process
    ends however it ends. ``shared``: several holders at once (the slices of one sharded sweep), none
    while an exclusive holder has it. A folder held by another process raises one line naming it.

    The file says who holds it, a line per holder: ``pid P on HOST (COMMAND, since TIME)``; ``slice``
    (``"1/2"``, a sharded sweep's slice) is written into its holder's line (``(slice 1/2 of a sweep: ...``).
    An exclusive holder, and a shared one that finds no other holder, writes its line alone; the other
    shared holders add theirs. A refusal names only the holders still alive (:func:`_holders_alive`: a line
    of a process of this host that has ended is left out): once a ``--processes`` parent killed by SIGKILL
    is gone, the line that names a slice still running is the one said."""

    def __init__(self, folder: Path, *, shared: bool = False, slice: Optional[str] = None):
        self.path = Path(folder) / LOCK
        self._fd: Optional[int] = None
        if fcntl is None:
            return
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | NOFOLLOW, 0o644)
        except OSError as e:
            if self.path.is_symlink():  # the holder line would be written where it points
                raise ConfigError(f"{self.path} is a symbolic link, and fedalf writes only inside the folder: "
                                  f"remove the link (rm {self.path}) and run again") from None
            raise WriteError(self.path, e) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ConfigError(f"{self.path} is not a regular file: remove it (rm {self.path}) and run again")
        alone = True
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                if not shared:
                    raise
                alone = False
            if shared:  # (alone: held exclusively for the rewrite below, then shared)
                _flock_shared(fd)
        except OSError:
            text = os.pread(fd, 1 << 16, 0).decode(errors="replace")
            os.close(fd)
            raise ConfigError(_refusal(folder, text)) from None
        self._fd = fd
        cmd = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:300] if sys.argv else "python"
        what = f"slice {slice} of a sweep: {cmd}" if slice else cmd
        line = (f"pid {os.getpid()} on {socket.gethostname()} ({what}, since "  # a path's bytes as given
                f"{time.strftime('%Y-%m-%d %H:%M:%S')})\n").encode(errors="surrogateescape")
        if alone:
            os.ftruncate(fd, 0)
            os.pwrite(fd, line, 0)
        else:  # beside the other holders' lines (one write in append mode: none is overwritten)
            try:
                add = os.open(self.path, os.O_WRONLY | os.O_APPEND | NOFOLLOW)
                try:
                    os.write(add, line)
                finally:
                    os.close(add)
            except OSError:  # the holder line is only what a refusal says: the lock is held all the same
                pass

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the lock
            self._fd = None

    def __enter__(self) -> "DirLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


_HOLDER = re.compile(r"pid (\d+) on (\S+) \((?:slice (\d+/\d+) of a sweep: )?")


def _flock_shared(fd: int) -> None:
    """A shared ``flock`` on ``fd``, tried for up to 0.5 s: another slice starting at the same moment holds
    the lock exclusively only while it rewrites the holder lines (:class:`DirLock`); a writer's exclusive
    hold outlasts that, and raises ``OSError``."""
    deadline = time.monotonic() + 0.5
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host exists (an ended one that is not yet reaped counts as ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        pass
    except OSError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def _holders_alive(text: str) -> list:
    """The holder lines of a lock file (:class:`DirLock`) as ``(line, pid, host, slice)``, those naming a
    process of this host that has ended left out (``pid`` ``None``: a line of no known form, kept)."""
    me, out = socket.gethostname(), []
    for line in (ln.strip() for ln in text.splitlines()):
        if not line:
            continue
        m = _HOLDER.match(line)
        if m is None:
            out.append((line, None, None, None))
        elif m.group(2) != me or pid_alive(int(m.group(1))):
            out.append((line, int(m.group(1)), m.group(2), m.group(3)))
    return out


def _refusal(folder, text: str) -> str:
    """The line that refuses ``folder``, held by another process: the slices of an earlier sweep still running
    (a ``--processes`` child whose parent was killed), else the holder its lock file names."""
    alive = _holders_alive(text)
    slices = [h for h in alive if h[3] is not None]
    if slices:
        hosts = sorted({h[2] for h in slices} - {socket.gethostname()})
        where = f" on {', '.join(hosts)}" if hosts else ""
        pids = [str(h[1]) for h in slices]
        if len(slices) == 1:
            return (f"{folder}: slice {slices[0][3]} of an earlier sweep is still running (pid {pids[0]}{where}); "
                    f"wait for it to end or stop it (kill {pids[0]}), then --resume")
        return (f"{folder}: slices {', '.join(h[3] for h in slices)} of an earlier sweep are still running (pids "
                f"{', '.join(pids)}{where}); wait for them to end or stop them (kill {' '.join(pids)}), then --resume")
    holder = alive[0][0] if alive else "another process"
    return f"{folder} is being written by {holder}; wait for it to end, or choose another --out"


def writer_ended(folder) -> bool:
    """Whether the folder's lock file names only processes of this host that have ended: nothing writes it,
    whatever its files say (a ``running`` run there was stopped or killed, and ``--resume`` continues it).
    ``False`` when there is no lock file or it names a live process or one of another host."""
    try:
        text = (Path(folder) / LOCK).read_bytes()[:1 << 16].decode(errors="replace")
    except OSError:
        return False
    return bool(text.strip()) and not _holders_alive(text)
