"""Datasets: Fashion-MNIST, CIFAR-10/100 and a small learnable synthetic set (NumPy only).

``load_dataset(name)`` returns a :class:`Dataset` with float32 NHWC images and int32 labels.

Where the data comes from (``source="auto"``), in this order:

1. ``data_dir`` if given -- and only there: a directory that was named explicitly but does not hold
   the data is an error, never silently replaced by another copy;
2. ``$FEDALF_DATA_DIR`` and its per-dataset subfolder (``fmnist``/``fashion-mnist``, ``cifar10``,
   ``cifar100``);
3. known locations (``/usr/share/datasets/fashion-mnist``, installed by Debian's
   ``dataset-fashion-mnist``);
4. tensorflow-datasets, only if it is importable (it is an optional extra, imported lazily).

``source="dir"`` stops after step 3, ``source="tfds"`` goes straight to step 4.

On disk the datasets are read as they ship:

* Fashion-MNIST: the four IDX files ``{train,t10k}-{images-idx3,labels-idx1}-ubyte`` gzipped
  (``.gz``) or not; headers, magic numbers and sizes are checked.
* CIFAR-10: ``cifar-10-batches-py/{data_batch_1..5,test_batch}``; CIFAR-100:
  ``cifar-100-python/{train,test}`` (python pickles). The directory may be the extracted folder or
  its parent; the parent may also hold the unextracted ``cifar-10-python.tar.gz`` /
  ``cifar-100-python.tar.gz``, read in place.

Pixels become float32 in [0, 1]; CIFAR is then normalised per channel with the usual mean/std
constants (:data:`CIFAR10_MEAN` etc.).
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import os
import pickle
import tarfile
import zlib
from typing import Callable

import numpy as np

from . import data_cache

__all__ = [
    "DataError",
    "Dataset",
    "load_dataset",
    "dataset_info",
    "DATASETS",
    "KNOWN_LOCATIONS",
    "CIFAR10_MEAN",
    "CIFAR10_STD",
    "CIFAR100_MEAN",
    "CIFAR100_STD",
]

DATASETS = ("fmnist", "cifar10", "cifar100", "synthetic")

_INFO = {
    "fmnist": ((28, 28, 1), 10),
    "cifar10": ((32, 32, 3), 10),
    "cifar100": ((32, 32, 3), 100),
}

_ALIASES = {
    "fashion_mnist": "fmnist",
    "fashion-mnist": "fmnist",
    "fashionmnist": "fmnist",
    "cifar-10": "cifar10",
    "cifar_10": "cifar10",
    "cifar-100": "cifar100",
    "cifar_100": "cifar100",
}

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
CIFAR100_MEAN = (0.5071, 0.4865, 0.4409)
CIFAR100_STD = (0.2673, 0.2564, 0.2762)

#: Locations searched after ``$FEDALF_DATA_DIR`` (source "auto" and "dir").
KNOWN_LOCATIONS = {
    "fmnist": ("/usr/share/datasets/fashion-mnist",),
    "cifar10": (),
    "cifar100": (),
}

# Per-dataset subfolders tried below every directory searched.
_SUBDIRS = {
    "fmnist": ("fmnist", "fashion-mnist", "fashion_mnist", "FashionMNIST/raw"),
    "cifar10": ("cifar10", "cifar-10-batches-py", "cifar10/cifar-10-batches-py"),
    "cifar100": ("cifar100", "cifar-100-python", "cifar100/cifar-100-python"),
}

_TFDS_NAMES = {"fmnist": "fashion_mnist", "cifar10": "cifar10", "cifar100": "cifar100"}

_HOW_TO_GET = {
    "fmnist": (
        "Get it with 'sudo apt-get install dataset-fashion-mnist' or pass --data-dir DIR holding "
        "the four IDX .gz files."
    ),
    "cifar10": (
        "Download cifar-10-python.tar.gz from https://www.cs.toronto.edu/~kriz/ and extract it "
        "into DIR (pass --data-dir DIR), or pip install 'fedalf-jax[tfds]'."
    ),
    "cifar100": (
        "Download cifar-100-python.tar.gz from https://www.cs.toronto.edu/~kriz/ and extract it "
        "into DIR (pass --data-dir DIR), or pip install 'fedalf-jax[tfds]'."
    ),
}

_FMNIST_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}


class DataError(Exception):
    """A dataset could not be found or read. The message is one line, meant for the user."""


@dataclasses.dataclass(frozen=True, eq=False)
class Dataset:
    """A loaded dataset: float32 ``[n, H, W, C]`` images, int32 ``[n]`` labels. ``digest``: a hash of the
    four arrays as loaded (:func:`arrays_digest`; empty for ``synthetic``, which its options determine), the
    data's part of a run's identity whatever folder it came from."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    source: str
    digest: str = ""

    @property
    def shape(self) -> tuple[int, int, int]:
        return tuple(self.x_train.shape[1:])

    def __repr__(self) -> str:  # arrays are large; keep the repr short
        return (
            f"Dataset(name={self.name!r}, train={self.x_train.shape}, test={self.x_test.shape}, "
            f"num_classes={self.num_classes}, source={self.source!r})"
        )


def arrays_digest(*arrays: np.ndarray) -> str:
    """A hash of the arrays' shapes, dtypes and bytes (one pass, BLAKE2b): equal for equal arrays, whatever
    file or folder they were read from."""
    h = hashlib.blake2b(digest_size=8)
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(memoryview(a).cast("B"))
    return h.hexdigest()


def _loaded(key: str, arrays: tuple, num_classes: int, source: str, digest: str | None = None) -> Dataset:
    digest = arrays_digest(*arrays) if digest is None else digest
    return Dataset(key, *arrays, num_classes=num_classes, source=source, digest=digest)


def _canonical(name: str) -> str:
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in DATASETS:
        raise DataError(f"unknown dataset {name!r}: choose one of {', '.join(DATASETS)}.")
    return key


def dataset_info(name: str, *, synthetic_like: str = "fmnist") -> tuple[tuple[int, int, int], int]:
    """``(image shape (H, W, C), number of classes)`` of a dataset, without loading it."""
    key = _canonical(name)
    if key == "synthetic":
        like = _canonical(synthetic_like)
        if like == "synthetic":
            raise DataError("synthetic_like must be one of fmnist, cifar10, cifar100.")
        return _INFO[like]
    return _INFO[key]


# --------------------------------------------------------------------------------------------
# Fashion-MNIST (IDX files)
# --------------------------------------------------------------------------------------------

_IDX_DTYPES = {0x08: np.uint8}


def _read_idx(path: str, expect_ndim: int) -> np.ndarray:
    """Parse one IDX file (gzipped if its name ends in .gz); any defect is a DataError naming it."""
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                raw = f.read()
        else:
            with open(path, "rb") as f:
                raw = f.read()
    except (OSError, EOFError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
        raise DataError(f"cannot read {path}: {e} (truncated or corrupt; download it again).") from None
    if len(raw) < 4:
        raise DataError(f"corrupt IDX file {path}: only {len(raw)} bytes (download it again).")
    zero, dtype_code, ndim = int.from_bytes(raw[0:2], "big"), raw[2], raw[3]
    if zero != 0 or dtype_code not in _IDX_DTYPES or ndim != expect_ndim:
        magic = int.from_bytes(raw[0:4], "big")
        raise DataError(
            f"corrupt IDX file {path}: magic 0x{magic:08x}, expected 0x{0x0800 + expect_ndim:08x} "
            "(download it again)."
        )
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"corrupt IDX file {path}: header truncated (download it again).")
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    size = int(np.prod(dims, dtype=np.int64))
    if len(raw) - header != size:
        raise DataError(
            f"corrupt IDX file {path}: header says {'x'.join(map(str, dims))} = {size} bytes of data, "
            f"found {len(raw) - header} (truncated or corrupt; download it again)."
        )
    return np.frombuffer(raw, dtype=_IDX_DTYPES[dtype_code], offset=header).reshape(dims)


def _find_fmnist_files(d: str) -> dict[str, str] | None:
    found = {}
    for key, stem in _FMNIST_FILES.items():
        for cand in (stem + ".gz", stem):
            p = os.path.join(d, cand)
            if os.path.isfile(p):
                found[key] = p
                break
        else:
            return None
    return found


def _load_fmnist_dir(d: str) -> tuple | None:
    files = _find_fmnist_files(d)
    if files is None:
        return None
    arrays = {}
    for key, path in files.items():
        arr = _read_idx(path, 3 if key.startswith("x") else 1)
        if key.startswith("x") and arr.shape[1:] != (28, 28):
            raise DataError(f"unexpected image size {arr.shape[1:]} in {path}: Fashion-MNIST is 28x28.")
        arrays[key] = arr
    for split in ("train", "test"):
        nx, ny = len(arrays["x_" + split]), len(arrays["y_" + split])
        if nx != ny:
            raise DataError(
                f"{files['x_' + split]} holds {nx} images but {files['y_' + split]} {ny} labels "
                "(download them again)."
            )
        if ny and int(arrays["y_" + split].max()) >= 10:
            raise DataError(f"labels out of range 0..9 in {files['y_' + split]} (download it again).")

    def images(a: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, a[..., None], casting="unsafe")
        out /= 255.0

    x_train, x_test = float_images(arrays["x_train"], arrays["x_test"], images, (*arrays["x_train"].shape[1:], 1))
    return x_train, arrays["y_train"].astype(np.int32), x_test, arrays["y_test"].astype(np.int32)


ALIGN = 64  # XLA:CPU's buffer alignment: a host array so aligned becomes a CPU device array without a copy


def aligned_empty(shape: tuple, dtype) -> np.ndarray:
    """An uninitialised C-contiguous array whose first byte is :data:`ALIGN`-byte aligned."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    buf = np.empty(nbytes + ALIGN, np.uint8)
    start = -buf.ctypes.data % ALIGN
    return buf[start:start + nbytes].view(dtype).reshape(shape)


def float_images(train: np.ndarray, test: np.ndarray, convert: Callable, shape: tuple) -> tuple:
    """``(x_train, x_test)``, float32 images of ``shape`` made by ``convert(raw, out)`` from the raw ones, in
    one aligned block, test right after train: the experiment's data pool is that block as it is
    (:func:`joined`), not a copy of it (a copy would touch as many new pages again at every start)."""
    block = aligned_empty((len(train) + len(test), *shape), np.float32)
    x_train, x_test = block[:len(train)], block[len(train):]
    convert(train, x_train)
    convert(test, x_test)
    return x_train, x_test


def joined(train: np.ndarray, test: np.ndarray) -> np.ndarray | None:
    """``concatenate([train, test])`` without a copy where ``test`` lies right after ``train`` in one
    aligned block (as :func:`float_images` makes them), else None."""
    base = train.base
    if (base is None or test.base is not base or not isinstance(base, np.ndarray) or train.dtype != test.dtype
            or train.shape[1:] != test.shape[1:] or not (train.flags.c_contiguous and test.flags.c_contiguous)
            or test.ctypes.data != train.ctypes.data + train.nbytes or train.ctypes.data % ALIGN
            or not base.flags.c_contiguous):
        return None
    offset = train.ctypes.data - base.ctypes.data
    if offset < 0 or offset + train.nbytes + test.nbytes > base.nbytes:
        return None
    return np.ndarray((len(train) + len(test), *train.shape[1:]), train.dtype, buffer=base, offset=offset)


# --------------------------------------------------------------------------------------------
# CIFAR (python pickles)
# --------------------------------------------------------------------------------------------

_CIFAR_LAYOUT = {
    # folder, archive, train members, test member, label key
    "cifar10": (
        "cifar-10-batches-py",
        "cifar-10-python.tar.gz",
        tuple(f"data_batch_{i}" for i in range(1, 6)),
        "test_batch",
        b"labels",
    ),
    "cifar100": ("cifar-100-python", "cifar-100-python.tar.gz", ("train",), "test", b"fine_labels"),
}


try:  # NumPy 2 renamed numpy.core to numpy._core; pickles name either, depending on who wrote them
    from numpy._core import multiarray as _multiarray, numeric as _numeric
except ImportError:  # pragma: no cover - NumPy 1.x
    from numpy.core import multiarray as _multiarray, numeric as _numeric


def _latin1_bytes(text: str, encoding: str) -> bytes:
    """Stands in for ``_codecs.encode``: Python 3 writes bytes at protocol <= 2 as encode(text, 'latin1')."""
    if encoding != "latin1" or not isinstance(text, str):
        raise pickle.UnpicklingError(f"_codecs.encode called with {encoding!r}, not 'latin1'")
    return text.encode("latin1")


def _empty_bytes() -> bytes:
    """Stands in for ``bytes``: Python 3 writes an empty bytes at protocol <= 2 as bytes()."""
    return b""


# Every global a CIFAR batch may name. Containers, bytes, strings and numbers are opcodes, not globals;
# a NumPy array is _reconstruct(ndarray, (0,), b"b") plus a dtype; the rest is what other writers emit.
_CIFAR_GLOBALS = {
    (mod, name): obj
    for mods, name, obj in (
        (("numpy.core.multiarray", "numpy._core.multiarray"), "_reconstruct", _multiarray._reconstruct),
        (("numpy.core.multiarray", "numpy._core.multiarray"), "scalar", _multiarray.scalar),  # NumPy scalars
        (("numpy",), "ndarray", np.ndarray),
        (("numpy",), "dtype", np.dtype),
        (("numpy.core.numeric", "numpy._core.numeric"), "_frombuffer", _numeric._frombuffer),  # protocol 5
        (("_codecs",), "encode", _latin1_bytes),  # bytes pickled by Python 3 at protocol <= 2 ...
        (("builtins", "__builtin__"), "bytes", _empty_bytes),  # ... and the empty one
    )
    for mod in mods
}


class _CifarUnpickler(pickle.Unpickler):
    """Unpickles builtin containers, bytes, strings, numbers and NumPy arrays; refuses any other global,
    so a crafted file cannot run code (``os.system``, ``builtins.eval``, ...) while it is being read."""

    def __init__(self, blob: bytes, where: str):
        super().__init__(io.BytesIO(blob), encoding="bytes")
        self._where = where

    def find_class(self, module: str, name: str):
        try:
            return _CIFAR_GLOBALS[(module, name)]
        except KeyError:
            what = f"{module}.{name}"  # from the file: keep a crafted name from breaking the one line
            what = what if what.isprintable() and len(what) <= 200 else ascii(what[:200])
            raise DataError(
                f"CIFAR batch {self._where} refers to {what}, which a CIFAR batch never holds; "
                "refusing to load it (the file is not a CIFAR pickle or was tampered with)."
            ) from None


def _unpickle(blob: bytes, where: str, label_key: bytes) -> tuple[np.ndarray, np.ndarray]:
    try:
        d = _CifarUnpickler(blob, where).load()
        data = np.asarray(d[b"data"], dtype=np.uint8)
        labels = np.asarray(d[label_key], dtype=np.int64)
    except DataError:
        raise
    except Exception as e:  # noqa: BLE001 - any defect in the pickle means the file is unusable
        raise DataError(f"cannot read CIFAR batch {where}: {type(e).__name__}: {e} (download it again).") from None
    if data.ndim != 2 or data.shape[1] != 3072 or len(labels) != len(data):
        raise DataError(
            f"corrupt CIFAR batch {where}: data {data.shape}, {len(labels)} labels; expected [n, 3072] "
            "and n labels (download it again)."
        )
    return data, labels


def _read_file(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise DataError(f"cannot read {path}: {e}.") from None


def _cifar_members(
    d: str, key: str
) -> tuple[dict[str, Callable[[], bytes]], str, Callable[[], None]] | None:
    """Readers for the CIFAR members found in ``d`` (extracted folder, its parent, or the tarball)."""
    folder, archive, train_names, test_name, _ = _CIFAR_LAYOUT[key]
    names = (*train_names, test_name)
    files, where = _sources(d, key)
    if files is not None and where != os.path.join(d, archive):  # the extracted members
        return {n: (lambda p=p: _read_file(p)) for n, p in zip(names, files)}, where, lambda: None
    tar_path = where
    if files is not None:
        try:
            tar = tarfile.open(tar_path, "r:gz")
            members = {m.name: m for m in tar.getmembers()}
        except (OSError, EOFError, tarfile.TarError, zlib.error) as e:
            raise DataError(f"cannot read {tar_path}: {e} (truncated or corrupt; download it again).") from None
        missing = [n for n in names if f"{folder}/{n}" not in members]
        if missing:
            tar.close()
            raise DataError(f"{tar_path} lacks {folder}/{missing[0]} (download it again).")

        def reader(n: str) -> Callable[[], bytes]:
            def read() -> bytes:
                try:
                    return tar.extractfile(members[f"{folder}/{n}"]).read()
                except (OSError, EOFError, tarfile.TarError, zlib.error) as e:
                    raise DataError(f"cannot read {folder}/{n} in {tar_path}: {e} (download it again).") from None

            return read

        return {n: reader(n) for n in names}, tar_path, tar.close
    return None


def _normalise_cifar(data: np.ndarray, key: str, out: np.ndarray | None = None) -> np.ndarray:
    """CIFAR's ``[n, 3072]`` bytes as normalised float32 ``[n, 32, 32, 3]`` images (into ``out`` if given)."""
    mean, std = (CIFAR10_MEAN, CIFAR10_STD) if key == "cifar10" else (CIFAR100_MEAN, CIFAR100_STD)
    x = np.empty((len(data), 32, 32, 3), np.float32) if out is None else out
    np.copyto(x, data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), casting="unsafe")
    x /= 255.0
    x -= np.asarray(mean, np.float32)
    x /= np.asarray(std, np.float32)
    return x


def _load_cifar_dir(d: str, key: str) -> tuple[tuple, str] | None:
    """``(arrays, where)``: ``where`` is the extracted folder or the tarball actually read."""
    found = _cifar_members(d, key)
    if found is None:
        return None
    readers, where, close = found
    _, _, train_names, test_name, label_key = _CIFAR_LAYOUT[key]
    num_classes = _INFO[key][1]
    try:
        parts = [_unpickle(readers[n](), os.path.join(where, n), label_key) for n in train_names]
        x_test, y_test = _unpickle(readers[test_name](), os.path.join(where, test_name), label_key)
    finally:
        close()
    x_train = np.concatenate([p[0] for p in parts])
    y_train = np.concatenate([p[1] for p in parts])
    for y, n in ((y_train, "train"), (y_test, "test")):
        if len(y) and (y.min() < 0 or y.max() >= num_classes):
            raise DataError(f"labels out of range 0..{num_classes - 1} in the {n} batches of {where}.")
    xs = float_images(x_train, x_test, lambda raw, out: _normalise_cifar(raw, key, out), (32, 32, 3))
    return (xs[0], y_train.astype(np.int32), xs[1], y_test.astype(np.int32)), where


def _load_from_dir(d: str, key: str) -> tuple | None:
    """``(arrays, where, digest)`` of ``key`` from directory ``d`` or one of its per-dataset subfolders (from
    :mod:`.data_cache` where it holds these files decoded); None if absent."""
    if not os.path.isdir(d):
        return None
    for sub in ("", *_SUBDIRS[key]):
        cand = os.path.join(d, sub) if sub else d
        if not os.path.isdir(cand):
            continue
        files, where = _sources(cand, key)
        if files is None:
            continue
        hit = data_cache.read(key, files, arrays_digest)
        if hit is not None:
            return hit[0], where, hit[1]
        if key == "fmnist":
            arrays = _load_fmnist_dir(cand)
            out = None if arrays is None else (arrays, cand)
        else:
            out = _load_cifar_dir(cand, key)
        if out is not None:
            digest = arrays_digest(*out[0])
            data_cache.write(key, files, out[0], digest)
            return (*out, digest)
    return None


def _sources(d: str, key: str) -> tuple[list[str] | None, str]:
    """The files the loader of ``key`` reads from folder ``d`` (found as it finds them, none read), and where
    it says the data came from; ``(None, d)`` if it would find none."""
    if key == "fmnist":
        files = _find_fmnist_files(d)
        return (None if files is None else list(files.values())), d
    folder, archive, train_names, test_name, _ = _CIFAR_LAYOUT[key]
    names = (*train_names, test_name)
    for base in (d, os.path.join(d, folder)):
        if all(os.path.isfile(os.path.join(base, n)) for n in names):
            return [os.path.join(base, n) for n in names], base
    tar_path = os.path.join(d, archive)
    return ([tar_path], tar_path) if os.path.isfile(tar_path) else (None, d)


# --------------------------------------------------------------------------------------------
# tensorflow-datasets
# --------------------------------------------------------------------------------------------


def _tfds_available() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("tensorflow_datasets") is not None
    except (ImportError, ValueError):
        return False


def _load_tfds(key: str, data_dir: str | None) -> tuple:
    try:
        import tensorflow_datasets as tfds  # optional extra: pip install 'fedalf-jax[tfds]'
    except ImportError:
        raise DataError(
            f"{key}: tensorflow-datasets is not installed; pip install 'fedalf-jax[tfds]' or use local "
            f"files. {_HOW_TO_GET[key]}"
        ) from None
    tfds_name = _TFDS_NAMES[key]
    out = []
    for split in ("train", "test"):
        try:
            ds = tfds.load(tfds_name, split=split, batch_size=-1, as_supervised=True, data_dir=data_dir)
            x, y = tfds.as_numpy(ds)
        except Exception as e:  # noqa: BLE001 - tfds raises many kinds (download, not prepared, ...)
            msg = " ".join(str(e).split())[:200]
            raise DataError(
                f"{key}: tensorflow-datasets could not load '{tfds_name}' ({type(e).__name__}: {msg}). "
                f"{_HOW_TO_GET[key]}"
            ) from None
        x = np.asarray(x)
        if x.ndim == 3:
            x = x[..., None]
        if key == "fmnist":
            x = x.astype(np.float32)
            x /= 255.0
        else:
            x = _normalise_cifar(np.ascontiguousarray(x.transpose(0, 3, 1, 2)).reshape(len(x), -1), key)
        out += [x, np.asarray(y).astype(np.int32)]
    return tuple(out)


# --------------------------------------------------------------------------------------------
# synthetic
# --------------------------------------------------------------------------------------------


def _synthetic(like: str, n_train: int, n_test: int, seed: int) -> tuple:
    """Class prototypes (smooth random images) plus Gaussian pixel noise, clipped to [0, 1].

    Every class has a fixed prototype, so a small CNN or MLP gets far above chance in a few rounds.
    Labels are balanced (each class appears ``n // num_classes`` or one more times), shuffled.
    """
    (h, w, c), k = _INFO[like]
    rng = np.random.default_rng([int(seed), 0x5EED, k, h])
    # low-resolution random patterns, upsampled: blob-like structure a conv net can pick up
    lo = rng.uniform(0.0, 1.0, size=(k, (h + 3) // 4, (w + 3) // 4, c)).astype(np.float32)
    protos = lo.repeat(4, axis=1).repeat(4, axis=2)[:, :h, :w, :]

    def draw(n: int, stream: int) -> tuple[np.ndarray, np.ndarray]:
        r = np.random.default_rng([int(seed), stream, k, h])
        y = (np.arange(n) % k).astype(np.int32)
        r.shuffle(y)
        x = protos[y] + r.normal(0.0, 0.35, size=(n, h, w, c)).astype(np.float32)
        np.clip(x, 0.0, 1.0, out=x)
        return x.astype(np.float32, copy=False), y

    x_train, y_train = draw(n_train, 1)
    x_test, y_test = draw(n_test, 2)
    return x_train, y_train, x_test, y_test


# --------------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------------


def load_dataset(
    name: str,
    *,
    data_dir: str | os.PathLike | None = None,
    source: str = "auto",
    synthetic_like: str = "fmnist",
    synthetic_train: int = 2000,
    synthetic_test: int = 500,
    seed: int = 0,
) -> Dataset:
    """Load ``name`` (``fmnist``, ``cifar10``, ``cifar100`` or ``synthetic``) as a :class:`Dataset`.

    ``source``: ``"auto"`` (directory, ``$FEDALF_DATA_DIR``, known locations, then tensorflow-datasets),
    ``"dir"`` (the same without tensorflow-datasets) or ``"tfds"``. ``synthetic_*`` and ``seed`` apply
    to ``name="synthetic"`` only; the synthetic set is deterministic in ``seed``.
    Raises :class:`DataError` (one line: where it looked, how to get the data).
    """
    key = _canonical(name)
    if key == "synthetic":
        like = _canonical(synthetic_like)
        if like == "synthetic":
            raise DataError("synthetic_like must be one of fmnist, cifar10, cifar100.")
        if int(synthetic_train) < 1 or int(synthetic_test) < 1:
            raise DataError(
                f"synthetic sizes must be >= 1 (got train={synthetic_train}, test={synthetic_test})."
            )
        arrays = _synthetic(like, int(synthetic_train), int(synthetic_test), seed)
        return Dataset("synthetic", *arrays, num_classes=_INFO[like][1], source="synthetic")

    if source not in ("auto", "dir", "tfds"):
        raise DataError(f"unknown data source {source!r}: choose auto, dir or tfds.")
    num_classes = _INFO[key][1]
    if source == "tfds":
        arrays = _load_tfds(key, None if data_dir is None else os.fspath(data_dir))
        return _loaded(key, arrays, num_classes, "tfds")

    if data_dir is not None:
        d = os.path.abspath(os.path.expanduser(os.fspath(data_dir)))
        got = _load_from_dir(d, key)
        if got is None:
            state = "" if os.path.isdir(d) else " (no such directory)"
            raise DataError(f"{key} not found: looked in {d}{state} and its subfolders. {_HOW_TO_GET[key]}")
        arrays, where, digest = got
        return _loaded(key, arrays, num_classes, where, digest)

    looked = []
    env = os.environ.get("FEDALF_DATA_DIR")
    if env:
        env_d = os.path.abspath(os.path.expanduser(env))
        got = _load_from_dir(env_d, key)
        if got is not None:
            return _loaded(key, got[0], num_classes, got[1], got[2])
        looked.append(f"$FEDALF_DATA_DIR={env_d}")
    else:
        looked.append("$FEDALF_DATA_DIR (unset)")
    for d in KNOWN_LOCATIONS[key]:
        got = _load_from_dir(d, key)
        if got is not None:
            return _loaded(key, got[0], num_classes, got[1], got[2])
        looked.append(d)
    if source == "auto":
        if _tfds_available():
            arrays = _load_tfds(key, None)
            return _loaded(key, arrays, num_classes, "tfds")
        looked.append("tensorflow-datasets (not installed)")
    raise DataError(f"{key} not found: looked in {', '.join(looked)}. {_HOW_TO_GET[key]}")
