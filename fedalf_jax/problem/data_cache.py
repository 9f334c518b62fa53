"""A built-in data set's decoded images kept on disk, and mapped at the next start instead of decoded again.

Decoding Fashion-MNIST (decompressing, casting 55 MB of bytes to 220 MB of float32 in fresh memory) was a
single run's largest system-time cost at start (the pages' zeroing); CIFAR's pickles and
normalisation cost more. The first load of a data set from its files writes what it decoded into one folder of
the cache: ``x.npy`` (float32 images, train then test, in the order the pool uses them), ``y.npy`` (int32
labels, the same order) and ``meta.json`` (the split sizes, the classes, the data's digest). A later load of the
same files maps ``x.npy`` read-only (the page cache's pages: nothing zeroed, nothing copied, shared by
the processes of a ``--processes`` sweep) and its pool is that mapping (``data.joined``).

Trust: an entry is named by the source files' paths and the SHA-256 of their bytes (tens of milliseconds for
Fashion-MNIST's ``.gz`` files), and by :data:`VERSION` (the loaders' arithmetic), so files changed in any way are
decoded again, whatever their size, modification time and inode say (``touch -r``, ``rsync --inplace -t``, an
archive re-extracted with its members' times). An entry is used only when its ``meta.json`` says it was made
from exactly this request (the data set's key, the files' paths and hashes, the version: an entry copied,
swapped or linked in from another folder is not this folder's data), when it is a real folder of real files
(an entry that is a symbolic link, or holds one, is removed and decoded again), and when its arrays' digest,
computed again from the mapped bytes, equals the one recorded when it was written (a damaged or truncated entry
is decoded again from the files and replaced); the entry of files that have since changed is removed once their
new one is written. An entry is written into a temporary folder
of the process's own and renamed into place whole (two processes writing the same entry: the first rename
wins, the other removes its own). The data's digest, a checkpoint's identity, is the same either way.

``FEDALF_DATA_CACHE``: ``off`` (or ``0``, ``false``, ``no``, ``none``) turns it off; a folder puts it there;
unset, ``$XDG_CACHE_HOME/fedalf_jax/data`` or ``~/.cache/fedalf_jax/data``. ``rm -rf ~/.cache/fedalf_jax/data``
clears it. A folder that cannot be written leaves the data decoded as before, with a warning.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Mapping, Optional, Sequence

import numpy as np

from ..runtime.cache_home import OFF, cache_home

ENV = "FEDALF_DATA_CACHE"
VERSION = 1  # the loaders' conversion of the files' bytes to arrays: change it when that arithmetic changes
X, Y, META = "x.npy", "y.npy", "meta.json"


def cache_dir(env: Optional[Mapping[str, str]] = None) -> Optional[Path]:
    """The cache's folder, or None where it is off (see the module's docstring)."""
    env = os.environ if env is None else env
    given = env.get(ENV)
    if given is not None:
        given = given.strip()
        return None if not given or given.lower() in OFF else Path(given).expanduser()
    return cache_home("data", env)


def sources(files: Sequence[str]) -> list[list[str]]:
    """``[[absolute path, SHA-256 of its bytes], ...]`` of ``files``: what an entry is made from."""
    out = []
    for f in files:
        with open(f, "rb") as fh:
            out.append([os.path.abspath(f), hashlib.file_digest(fh, "sha256").hexdigest()])
    return out


def entry_name(key: str, made_from: Sequence[Sequence[str]]) -> str:
    """The entry of ``key`` decoded from the files of ``made_from`` (:func:`sources`: their paths and hashes)."""
    h = hashlib.blake2b(digest_size=10)
    h.update(f"{VERSION}|{key}".encode())
    for path, sha in made_from:
        h.update(f"|{path}|{sha}".encode())
    return f"{key}-{h.hexdigest()}"


def _is_link(folder: Path) -> bool:
    """``folder`` (an entry) is a symbolic link, or one of its files is."""
    return folder.is_symlink() or any((folder / n).is_symlink() for n in (X, Y, META))


def _discard(folder: Path) -> None:
    """Remove the entry ``folder``: the link itself where it is one (never what it points to)."""
    if folder.is_symlink():
        try:
            folder.unlink()
        except OSError:
            pass
    else:
        shutil.rmtree(folder, ignore_errors=True)


def read(key: str, files: Sequence[str], digest_of) -> Optional[tuple[tuple, str]]:
    """``((x_train, y_train, x_test, y_test), digest)`` from the cache, or None (off, absent, or not what was
    written from these files: then decoded again). ``x_*`` are views of one private mapping of the file, test
    right after train."""
    root = cache_dir()
    if root is None:
        return None
    try:
        made_from = sources(files)
    except OSError:
        return None  # the loader reads them itself, and says what is wrong
    folder = root / entry_name(key, made_from)
    if not (folder.exists() or folder.is_symlink()):
        return None
    if _is_link(folder):  # another folder's data, or a copy that cannot be trusted: decoded again, replaced
        _discard(folder)
        return None
    try:
        meta = json.loads((folder / META).read_text())
        n_train, digest = int(meta["n_train"]), str(meta["digest"])
        if (meta.get("key"), meta.get("sources"), meta.get("version")) != (key, made_from, VERSION):
            raise ValueError("made from other files")  # copied or swapped in from elsewhere
        x = np.load(folder / X, mmap_mode="c")  # copy-on-write: a caller may write to its arrays, never the file
        y = np.load(folder / Y)
    except (OSError, ValueError, KeyError, TypeError):
        _discard(folder)
        return None
    if x.dtype != np.float32 or y.dtype != np.int32 or len(x) != len(y) or not 0 <= n_train <= len(x):
        del x
        _discard(folder)
        return None
    arrays = (x[:n_train], y[:n_train], x[n_train:], y[n_train:])
    if digest_of(*arrays) != digest:  # damaged since it was written: decoded again, and the entry replaced
        del x, arrays
        _discard(folder)
        return None
    return arrays, digest


def write(key: str, files: Sequence[str], arrays: tuple, digest: str) -> None:
    """Keep ``arrays`` (as loaded from ``files``) in the cache; a failure only warns."""
    root = cache_dir()
    if root is None:
        return
    try:
        made_from = sources(files)
    except OSError:
        return
    name = entry_name(key, made_from)
    tmp = root / f".{name}.{os.getpid()}.tmp"
    x_train, y_train, x_test, y_test = arrays
    try:
        root.mkdir(parents=True, exist_ok=True)
        _remove_stale(root)
        if (root / name).exists() or (root / name).is_symlink():
            return  # another process's, just written (read() removed a bad one)
        tmp.mkdir()
        with open(tmp / X, "wb") as f:
            np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)),
                                                     "fortran_order": False,
                                                     "shape": (len(x_train) + len(x_test), *x_train.shape[1:])})
            for a in (x_train, x_test):
                f.write(memoryview(np.ascontiguousarray(a, np.float32)).cast("B"))
        np.save(tmp / Y, np.concatenate([y_train, y_test]).astype(np.int32))
        (tmp / META).write_text(json.dumps({"key": key, "n_train": len(x_train), "digest": digest,
                                            "files": [path for path, _ in made_from], "sources": made_from,
                                            "version": VERSION}))
        try:
            os.rename(tmp, root / name)
        except OSError:  # another process put the same entry there first
            shutil.rmtree(tmp, ignore_errors=True)
        _remove_replaced(root, name, [path for path, _ in made_from])
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        warnings.warn(f"the decoded {key} could not be kept in {root} ({e.strerror or e}); the next start decodes "
                      f"it again (set {ENV}=off to stop trying)", stacklevel=3)


def _remove_replaced(root: Path, name: str, files: list) -> None:
    """Remove the entries of the same files as ``name``'s, written before they changed."""
    for p in root.glob(f"{name.split('-')[0]}-*"):
        try:
            if p.name != name and not p.is_symlink() and json.loads((p / META).read_text()).get("files") == files:
                shutil.rmtree(p, ignore_errors=True)
        except (OSError, ValueError, AttributeError):
            continue


def _remove_stale(root: Path) -> None:
    """Remove the temporary folders of writers that no longer run (killed mid-write; POSIX only: elsewhere
    ``os.kill(pid, 0)`` is not a question but a signal)."""
    if os.name != "posix":
        return
    for p in root.glob(".*.tmp"):
        try:
            pid = int(p.name.rsplit(".", 2)[-2])
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(p, ignore_errors=True)
        except (ValueError, PermissionError, OSError):
            continue
