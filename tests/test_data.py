"""Tests for fedalf_jax.data: IDX / CIFAR-pickle parsing, search order, errors, synthetic data."""

import gzip
import importlib.util
import io
import os
import pathlib
import pickle
import pickletools
import re
import tarfile

import numpy as np
import pytest

from fedalf_jax.problem import data as D
from fedalf_jax.problem.data import DataError, Dataset, dataset_info, load_dataset

REAL_FMNIST = "/usr/share/datasets/fashion-mnist"
FMNIST_NAMES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}


# ---------------------------------------------------------------------------- helpers


def idx_bytes(arr: np.ndarray) -> bytes:
    arr = np.asarray(arr, dtype=np.uint8)
    header = bytes([0, 0, 0x08, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    return header + arr.tobytes()


def write_fmnist(d, n_train=20, n_test=8, gz=True, seed=0):
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(seed)
    arrays = {
        "x_train": rng.integers(0, 256, size=(n_train, 28, 28), dtype=np.uint8),
        "y_train": (np.arange(n_train) % 10).astype(np.uint8),
        "x_test": rng.integers(0, 256, size=(n_test, 28, 28), dtype=np.uint8),
        "y_test": (np.arange(n_test) % 10).astype(np.uint8),
    }
    arrays["x_train"][0, 0, 0], arrays["x_train"][0, 0, 1] = 0, 255
    for key, stem in FMNIST_NAMES.items():
        blob = idx_bytes(arrays[key])
        if gz:
            with gzip.open(os.path.join(d, stem + ".gz"), "wb") as f:
                f.write(blob)
        else:
            with open(os.path.join(d, stem), "wb") as f:
                f.write(blob)
    return arrays


def cifar_batch(n, num_classes, label_key, seed):
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
    labels = [int(v) for v in rng.integers(0, num_classes, size=n)]
    return {b"data": data, label_key: labels, b"batch_label": b"fake"}


def write_cifar10(parent, per_batch=4, n_test=5):
    d = os.path.join(parent, "cifar-10-batches-py")
    os.makedirs(d, exist_ok=True)
    batches = {}
    for i in range(1, 6):
        batches[f"data_batch_{i}"] = cifar_batch(per_batch, 10, b"labels", i)
    batches["test_batch"] = cifar_batch(n_test, 10, b"labels", 99)
    # channel layout check: first train image is R=255, G=0, B=128 everywhere
    batches["data_batch_1"][b"data"][0] = np.concatenate(
        [np.full(1024, 255), np.zeros(1024), np.full(1024, 128)]
    ).astype(np.uint8)
    for name, b in batches.items():
        with open(os.path.join(d, name), "wb") as f:
            pickle.dump(b, f)
    return d, batches


def write_cifar100(parent, n_train=12, n_test=6):
    d = os.path.join(parent, "cifar-100-python")
    os.makedirs(d, exist_ok=True)
    tr = cifar_batch(n_train, 100, b"fine_labels", 1)
    tr[b"fine_labels"][0] = 99
    te = cifar_batch(n_test, 100, b"fine_labels", 2)
    for name, b in (("train", tr), ("test", te)):
        with open(os.path.join(d, name), "wb") as f:
            pickle.dump(b, f)
    return d, tr, te


@pytest.fixture
def no_env(monkeypatch, tmp_path):
    """No $FEDALF_DATA_DIR, known locations pointing at an empty folder, tfds unavailable."""
    monkeypatch.delenv("FEDALF_DATA_DIR", raising=False)
    empty = tmp_path / "empty_known"
    empty.mkdir()
    monkeypatch.setattr(D, "KNOWN_LOCATIONS", {"fmnist": (str(empty),), "cifar10": (), "cifar100": ()})
    monkeypatch.setattr(D, "_tfds_available", lambda: False)
    return str(empty)


# ---------------------------------------------------------------------------- Fashion-MNIST


@pytest.mark.parametrize("gz", [True, False])
def test_fmnist_from_dir(tmp_path, gz):
    arrays = write_fmnist(tmp_path, gz=gz)
    ds = load_dataset("fmnist", data_dir=tmp_path)
    assert isinstance(ds, Dataset) and ds.name == "fmnist" and ds.num_classes == 10
    assert ds.x_train.shape == (20, 28, 28, 1) and ds.x_test.shape == (8, 28, 28, 1)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int32 and ds.y_test.dtype == np.int32
    assert ds.x_train.min() == 0.0 and ds.x_train.max() == 1.0
    np.testing.assert_allclose(ds.x_train[..., 0], arrays["x_train"] / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(ds.y_train, arrays["y_train"])
    np.testing.assert_array_equal(ds.y_test, arrays["y_test"])
    assert ds.source == str(tmp_path)


def test_fmnist_subfolder_and_env(tmp_path, monkeypatch, no_env):
    write_fmnist(tmp_path / "fashion-mnist")
    ds = load_dataset("fmnist", data_dir=tmp_path)  # parent of the folder
    assert ds.source.endswith("fashion-mnist")
    monkeypatch.setenv("FEDALF_DATA_DIR", str(tmp_path))
    ds = load_dataset("fmnist")
    assert ds.x_train.shape == (20, 28, 28, 1) and ds.source.endswith("fashion-mnist")
    ds = load_dataset("fashion_mnist", source="dir")  # alias
    assert ds.name == "fmnist"


def test_fmnist_truncated_gz_names_file(tmp_path):
    write_fmnist(tmp_path)
    p = tmp_path / "train-images-idx3-ubyte.gz"
    blob = p.read_bytes()
    p.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(DataError, match="train-images-idx3-ubyte.gz") as e:
        load_dataset("fmnist", data_dir=tmp_path)
    assert "\n" not in str(e.value)


def test_fmnist_short_data_and_bad_magic(tmp_path):
    write_fmnist(tmp_path, gz=False)
    p = tmp_path / "t10k-images-idx3-ubyte"
    p.write_bytes(p.read_bytes()[:-10])  # data shorter than the header says
    with pytest.raises(DataError, match="t10k-images-idx3-ubyte.*header says"):
        load_dataset("fmnist", data_dir=tmp_path)
    write_fmnist(tmp_path, gz=False)
    p = tmp_path / "train-labels-idx1-ubyte"
    p.write_bytes(b"\x00\x00\x08\x03" + p.read_bytes()[4:])  # images magic on a label file
    with pytest.raises(DataError, match="train-labels-idx1-ubyte.*magic"):
        load_dataset("fmnist", data_dir=tmp_path)


def test_fmnist_count_mismatch(tmp_path):
    write_fmnist(tmp_path, gz=False)
    with open(tmp_path / "train-labels-idx1-ubyte", "wb") as f:
        f.write(idx_bytes(np.zeros(19, np.uint8)))
    with pytest.raises(DataError, match="20 images but .* 19 labels"):
        load_dataset("fmnist", data_dir=tmp_path)


def test_missing_data_dir_message(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(DataError) as e:
        load_dataset("fmnist", data_dir=missing)
    msg = str(e.value)
    assert str(missing) in msg and "dataset-fashion-mnist" in msg and "\n" not in msg
    (tmp_path / "partial").mkdir()
    write_fmnist(tmp_path / "partial")
    os.remove(tmp_path / "partial" / "t10k-labels-idx1-ubyte.gz")
    with pytest.raises(DataError, match="fmnist not found"):
        load_dataset("fmnist", data_dir=tmp_path / "partial")


def test_missing_auto_lists_locations(no_env):
    with pytest.raises(DataError) as e:
        load_dataset("fmnist")
    msg = str(e.value)
    assert "$FEDALF_DATA_DIR (unset)" in msg and no_env in msg
    assert "tensorflow-datasets (not installed)" in msg
    assert "sudo apt-get install dataset-fashion-mnist" in msg and "--data-dir" in msg
    with pytest.raises(DataError) as e:
        load_dataset("cifar100", source="dir")
    assert "cs.toronto.edu/~kriz" in str(e.value) and "fedalf-jax[tfds]" in str(e.value)
    assert "tensorflow-datasets" not in str(e.value).split(".")[0]


def test_env_dir_is_listed(tmp_path, monkeypatch, no_env):
    monkeypatch.setenv("FEDALF_DATA_DIR", str(tmp_path / "envdir"))
    with pytest.raises(DataError, match=r"\$FEDALF_DATA_DIR=.*envdir"):
        load_dataset("cifar10")


def test_unknown_name_and_source():
    with pytest.raises(DataError, match="unknown dataset"):
        load_dataset("mnist")
    with pytest.raises(DataError, match="unknown data source"):
        load_dataset("fmnist", source="web")


@pytest.mark.skipif(
    not os.path.isfile(os.path.join(REAL_FMNIST, "train-images-idx3-ubyte.gz")),
    reason="Debian's dataset-fashion-mnist is not installed",
)
def test_real_fmnist(monkeypatch):
    monkeypatch.delenv("FEDALF_DATA_DIR", raising=False)
    ds = load_dataset("fmnist")
    assert ds.source == REAL_FMNIST
    assert ds.x_train.shape == (60000, 28, 28, 1) and ds.x_test.shape == (10000, 28, 28, 1)
    assert ds.y_train.shape == (60000,) and ds.y_test.shape == (10000,)
    assert 0.0 <= float(ds.x_train.min()) and float(ds.x_train.max()) <= 1.0
    np.testing.assert_array_equal(np.bincount(ds.y_train), np.full(10, 6000))
    np.testing.assert_array_equal(np.bincount(ds.y_test), np.full(10, 1000))


# ---------------------------------------------------------------------------- CIFAR


def test_cifar10_from_folder_and_parent(tmp_path):
    folder, batches = write_cifar10(tmp_path)
    for where in (tmp_path, folder):
        ds = load_dataset("cifar10", data_dir=where)
        assert ds.name == "cifar10" and ds.num_classes == 10 and ds.source == folder
        assert ds.x_train.shape == (20, 32, 32, 3) and ds.x_test.shape == (5, 32, 32, 3)
        assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int32
        labels = sum((batches[f"data_batch_{i}"][b"labels"] for i in range(1, 6)), [])
        np.testing.assert_array_equal(ds.y_train, labels)
        np.testing.assert_array_equal(ds.y_test, batches["test_batch"][b"labels"])
    mean, std = np.array(D.CIFAR10_MEAN), np.array(D.CIFAR10_STD)
    raw = ds.x_train * std + mean  # undo the normalisation: back to [0, 1]
    assert raw.min() > -1e-5 and raw.max() < 1 + 1e-5
    np.testing.assert_allclose(raw[0, 3, 7], [1.0, 0.0, 128 / 255], atol=1e-5)  # NHWC, RGB order
    expect = batches["test_batch"][b"data"].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1) / 255.0
    np.testing.assert_allclose(ds.x_test * std + mean, expect, atol=1e-5)


def test_cifar10_tarball(tmp_path):
    src = tmp_path / "src"
    write_cifar10(src)
    dst = tmp_path / "dl"
    dst.mkdir()
    with tarfile.open(dst / "cifar-10-python.tar.gz", "w:gz") as tar:
        tar.add(src / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    ds = load_dataset("cifar10", data_dir=dst)
    assert ds.x_train.shape == (20, 32, 32, 3) and ds.source.endswith("cifar-10-python.tar.gz")


def test_cifar100(tmp_path, monkeypatch, no_env):
    _, tr, te = write_cifar100(tmp_path / "cifar100")
    monkeypatch.setenv("FEDALF_DATA_DIR", str(tmp_path))  # per-dataset subfolder of the env dir
    ds = load_dataset("cifar100")
    assert ds.num_classes == 100 and ds.x_train.shape == (12, 32, 32, 3) and ds.x_test.shape == (6, 32, 32, 3)
    np.testing.assert_array_equal(ds.y_train, tr[b"fine_labels"])
    np.testing.assert_array_equal(ds.y_test, te[b"fine_labels"])
    assert ds.y_train.max() == 99


def test_cifar_corrupt_pickle_names_file(tmp_path):
    folder, _ = write_cifar10(tmp_path)
    p = os.path.join(folder, "data_batch_3")
    with open(p, "rb") as f:
        blob = f.read()
    with open(p, "wb") as f:
        f.write(blob[:100])
    with pytest.raises(DataError, match="data_batch_3") as e:
        load_dataset("cifar10", data_dir=tmp_path)
    assert "\n" not in str(e.value)
    with open(p, "wb") as f:
        pickle.dump({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}, f)
    with pytest.raises(DataError, match="corrupt CIFAR batch .*data_batch_3"):
        load_dataset("cifar10", data_dir=tmp_path)


class _Py2Pickler(pickle._Pickler):
    """Writes bytes as Python 2 cPickle wrote str (SHORT_BINSTRING / BINSTRING), as in real CIFAR files."""

    dispatch = dict(pickle._Pickler.dispatch)

    def _save_py2_str(self, obj):
        head = pickle.SHORT_BINSTRING + bytes([len(obj)]) if len(obj) < 256 else (
            pickle.BINSTRING + len(obj).to_bytes(4, "little"))
        self.write(head + obj)
        self.memoize(obj)

    dispatch[bytes] = _save_py2_str


def _dumps(obj, protocol):
    if protocol != "py2":
        return pickle.dumps(obj, protocol=protocol)
    buf = io.BytesIO()
    _Py2Pickler(buf, protocol=2).dump(obj)
    # NumPy 1.x (and the real files) name numpy.core.multiarray; NumPy 2 writes numpy._core.multiarray
    return buf.getvalue().replace(b"numpy._core.multiarray\n", b"numpy.core.multiarray\n")


@pytest.mark.parametrize("protocol", ["py2", 2, 3, 4, 5])
def test_cifar_pickles_of_every_protocol_load(tmp_path, protocol):
    folder, batches = write_cifar10(tmp_path)
    batches["data_batch_2"][b"filenames"] = [b"x.png", b""]  # an empty bytes pickles differently
    batches["data_batch_2"][b"scalar"] = np.int64(7)
    for name, b in batches.items():
        blob = _dumps(b, protocol)
        if protocol == "py2":
            names = {a for op, a, _ in pickletools.genops(blob) if op.name == "GLOBAL"}
            assert names == {"numpy.core.multiarray _reconstruct", "numpy ndarray", "numpy dtype",
                             *(["numpy.core.multiarray scalar"] if name == "data_batch_2" else [])}
        with open(os.path.join(folder, name), "wb") as f:
            f.write(blob)
    ds = load_dataset("cifar10", data_dir=tmp_path)
    labels = sum((batches[f"data_batch_{i}"][b"labels"] for i in range(1, 6)), [])
    np.testing.assert_array_equal(ds.y_train, labels)
    expect = batches["test_batch"][b"data"].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1) / 255.0
    raw = ds.x_test * np.array(D.CIFAR10_STD) + np.array(D.CIFAR10_MEAN)
    np.testing.assert_allclose(raw, expect, atol=1e-5)


class _Payload:
    """Unpickling this calls ``fn(*args)``: what a crafted CIFAR file would do."""

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


@pytest.mark.parametrize("protocol", [2, 5])
@pytest.mark.parametrize("payload, refused", [
    (lambda m: _Payload(os.system, f"touch {m}"), "os.system|posix.system"),
    (lambda m: _Payload(exec, f"open({str(m)!r}, 'w').close()"), "builtins.exec|__builtin__.exec"),
    # protocol 2 writes Path.touch as getattr(Path, "touch")
    (lambda m: _Payload(pathlib.Path.touch, pathlib.Path(m)), "pathlib|__builtin__.getattr"),
])
def test_cifar_pickle_that_runs_code_is_refused(tmp_path, protocol, payload, refused):
    folder, _ = write_cifar10(tmp_path / "data")
    live = tmp_path / "live"  # the payload does run when unpickled without the restriction
    pickle.loads(pickle.dumps(payload(live), protocol=protocol))
    assert live.exists()
    marker = tmp_path / "pwned"
    blob = pickle.dumps({b"data": payload(marker), b"labels": [0]}, protocol=protocol)
    with open(os.path.join(folder, "data_batch_1"), "wb") as f:
        f.write(blob)
    with pytest.raises(DataError) as e:
        load_dataset("cifar10", data_dir=tmp_path / "data")
    assert not marker.exists()  # refused before anything ran
    pattern = rf"CIFAR batch \S*data_batch_1 refers to ({refused})[\w.]*, which .*refusing to load it"
    assert re.match(pattern, str(e.value)), e.value  # the refusal itself, not wrapped in "cannot read"
    assert "\n" not in str(e.value)


# ---------------------------------------------------------------------------- synthetic


@pytest.mark.parametrize(
    "like,shape,k", [("fmnist", (28, 28, 1), 10), ("cifar10", (32, 32, 3), 10), ("cifar100", (32, 32, 3), 100)]
)
def test_synthetic_shapes(like, shape, k):
    ds = load_dataset("synthetic", synthetic_like=like, synthetic_train=300, synthetic_test=120)
    assert ds.name == "synthetic" and ds.source == "synthetic" and ds.num_classes == k
    assert ds.x_train.shape == (300, *shape) and ds.x_test.shape == (120, *shape)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int32
    assert 0.0 <= ds.x_train.min() and ds.x_train.max() <= 1.0
    assert set(np.unique(ds.y_train)) <= set(range(k)) and ds.y_train.max() == min(k, 300) - 1
    assert dataset_info("synthetic", synthetic_like=like) == (shape, k)


def test_synthetic_default_sizes_and_determinism():
    a = load_dataset("synthetic")
    assert a.x_train.shape == (2000, 28, 28, 1) and a.x_test.shape == (500, 28, 28, 1)
    b = load_dataset("synthetic")
    np.testing.assert_array_equal(a.x_train, b.x_train)
    np.testing.assert_array_equal(a.y_test, b.y_test)
    c = load_dataset("synthetic", seed=1)
    assert not np.array_equal(a.x_train, c.x_train)
    np.testing.assert_array_equal(np.bincount(a.y_train), np.full(10, 200))


def test_synthetic_is_learnable():
    """A nearest-class-mean classifier fit on train must be far above chance on test."""
    ds = load_dataset("synthetic", synthetic_like="cifar10", synthetic_train=500, synthetic_test=200, seed=3)
    xtr = ds.x_train.reshape(len(ds.x_train), -1)
    xte = ds.x_test.reshape(len(ds.x_test), -1)
    means = np.stack([xtr[ds.y_train == c].mean(0) for c in range(10)])
    pred = np.argmin(((xte[:, None, :] - means[None]) ** 2).sum(-1), axis=1)
    assert (pred == ds.y_test).mean() > 0.8


def test_synthetic_bad_args():
    with pytest.raises(DataError):
        load_dataset("synthetic", synthetic_like="synthetic")
    with pytest.raises(DataError, match="sizes"):
        load_dataset("synthetic", synthetic_train=0)


def test_dataset_info():
    assert dataset_info("fmnist") == ((28, 28, 1), 10)
    assert dataset_info("cifar10") == ((32, 32, 3), 10)
    assert dataset_info("cifar100") == ((32, 32, 3), 100)
    assert dataset_info("synthetic") == ((28, 28, 1), 10)
    with pytest.raises(DataError):
        dataset_info("imagenet")


# ---------------------------------------------------------------------------- tensorflow-datasets


def test_tfds_missing_is_clear(monkeypatch):
    if importlib.util.find_spec("tensorflow_datasets") is not None:
        pytest.skip("tensorflow-datasets is installed")
    with pytest.raises(DataError, match="tensorflow-datasets is not installed"):
        load_dataset("cifar10", source="tfds")


@pytest.mark.skipif(
    importlib.util.find_spec("tensorflow_datasets") is None, reason="tensorflow-datasets not installed"
)
def test_tfds_mock():
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=12):
        ds = load_dataset("fmnist", source="tfds")
    assert ds.source == "tfds" and ds.x_train.shape == (12, 28, 28, 1) and ds.y_train.dtype == np.int32
    assert ds.x_train.dtype == np.float32 and 0.0 <= ds.x_train.min() and ds.x_train.max() <= 1.0


def test_the_pool_is_read_only_and_the_cpu_device_data_is_its_memory():
    """A pool is cached and shared by a process's runs, and on the CPU backend the run's device arrays are the
    pool's own memory (no 220 MB copy of FMNIST at every start, issue 49): so nothing may write to the pool."""
    import jax
    from fedalf_jax import Config
    from fedalf_jax.experiment.build import client_rows, device_data, load_pool
    cfg = Config(dataset="synthetic", model="mlp", clients=4, clients_per_round=2, synthetic_train=200,
                 synthetic_test=80).validated()
    pool = load_pool(cfg)
    for a in (pool.x, pool.y):
        with pytest.raises(ValueError, match="read-only"):
            a[0] = 0
    data = device_data(pool, client_rows(cfg, pool))
    if jax.default_backend() == "cpu":
        assert data.x.unsafe_buffer_pointer() == pool.x.ctypes.data
        assert data.y.unsafe_buffer_pointer() == pool.y.ctypes.data
    np.testing.assert_array_equal(np.asarray(data.x), pool.x)


@pytest.mark.parametrize("dataset", ["fmnist", "cifar10"])
def test_the_pool_is_the_loaded_images_not_a_copy(tmp_path, no_env, dataset):
    """The built-in loaders make train and test images float32 in one aligned block, and the data pool is that
    block (issue 49: the copy touched 220 MB of new pages for FMNIST at every start, half the single run's
    system time). Checked by what the pool shares and by numpy's own allocations, counted by tracemalloc."""
    import tracemalloc
    from fedalf_jax import Config
    from fedalf_jax.experiment.build import _pooled, load_pool
    if dataset == "fmnist":
        arrays = write_fmnist(tmp_path / "f", n_train=1500, n_test=500)
        want = np.concatenate([arrays["x_train"], arrays["x_test"]]).astype(np.float32)[..., None] / np.float32(255)
        where = tmp_path / "f"
    else:
        _, batches = write_cifar10(tmp_path, per_batch=60, n_test=40)
        raw = np.concatenate([batches[f"data_batch_{i}"][b"data"] for i in range(1, 6)] + [batches["test_batch"][b"data"]])
        want = raw.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1).astype(np.float32) / np.float32(255)
        want = (want - np.float32(D.CIFAR10_MEAN)) / np.float32(D.CIFAR10_STD)
        where = tmp_path
    ds = load_dataset(dataset, data_dir=where)
    pooled = _pooled(ds.x_train, ds.x_test)
    assert np.shares_memory(pooled, ds.x_train) and np.shares_memory(pooled, ds.x_test)
    assert pooled.ctypes.data % 64 == 0 and not pooled.flags.writeable and not ds.x_train.flags.writeable
    np.testing.assert_array_equal(pooled, want)  # bit-equal to the cast and divisions made by hand
    apart = _pooled(ds.x_test, ds.x_train)  # not one block in this order: copied
    assert not np.shares_memory(apart, ds.x_train)
    np.testing.assert_array_equal(apart, np.concatenate([want[len(ds.x_train):], want[:len(ds.x_train)]]))
    gap = _pooled(ds.x_train[:10], ds.x_test)  # one block, with a gap between them: copied
    assert not np.shares_memory(gap, ds.x_train)
    np.testing.assert_array_equal(gap, np.concatenate([want[:10], want[len(ds.x_train):]]))
    cfg = Config(dataset=dataset, data_dir=str(where), model="mlp", clients=4, clients_per_round=2).validated()
    tracemalloc.start()
    try:
        pool = load_pool(cfg)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(pool.x, want)
    assert pool.x.nbytes < peak < 1.5 * pool.x.nbytes, (peak, pool.x.nbytes)  # the floats made once, not twice
