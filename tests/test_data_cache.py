"""The decoded data set kept on disk (fedalf_jax/problem/data_cache.py, issue 49: a single run's start decoded
FMNIST into 220 MB of fresh memory, its largest system-time cost): a second load maps the first's entry instead
of reading the files, with the same arrays and digest; changed files, a damaged entry, the cache off, and a
folder that cannot be written are each decoded from the files, never a wrong array."""

import json
import os
import tarfile
import warnings

import numpy as np
import pytest

from fedalf_jax.problem import data as D
from fedalf_jax.problem import data_cache
from fedalf_jax.problem.data import load_dataset
from test_data import write_cifar10, write_fmnist


@pytest.fixture
def counted(monkeypatch, tmp_path):
    """The cache in a folder of its own, and a count of the files the loaders read."""
    monkeypatch.setenv("FEDALF_DATA_CACHE", str(tmp_path / "cache"))
    reads = []
    read_idx, read_file = D._read_idx, D._read_file
    monkeypatch.setattr(D, "_read_idx", lambda p, *a: reads.append(p) or read_idx(p, *a))
    monkeypatch.setattr(D, "_read_file", lambda p: reads.append(p) or read_file(p))
    return reads


def fmnist_want(arrays):
    return [arrays["x_train"].astype(np.float32)[..., None] / np.float32(255), arrays["y_train"].astype(np.int32),
            arrays["x_test"].astype(np.float32)[..., None] / np.float32(255), arrays["y_test"].astype(np.int32)]


def check(ds, want):
    for a, w in zip((ds.x_train, ds.y_train, ds.x_test, ds.y_test), want):
        np.testing.assert_array_equal(a, w)
        assert a.dtype == (np.float32 if a.ndim > 1 else np.int32)


def entries(tmp_path):
    return sorted(p.name for p in (tmp_path / "cache").iterdir())


def test_second_load_maps_the_first_ones_entry(counted, tmp_path):
    arrays = write_fmnist(tmp_path / "f", n_train=30, n_test=12)
    first = load_dataset("fmnist", data_dir=tmp_path / "f")
    assert len(counted) == 4 and len(entries(tmp_path)) == 1  # the four files read, one entry written
    second = load_dataset("fmnist", data_dir=tmp_path / "f")
    assert len(counted) == 4  # no file read again
    check(second, fmnist_want(arrays))
    assert second.digest == first.digest == D.arrays_digest(*fmnist_want(arrays))
    assert second.source == first.source == str(tmp_path / "f")
    second.x_train[0] = 7.0  # the caller's own copy of the page: the entry is unchanged
    check(load_dataset("fmnist", data_dir=tmp_path / "f"), fmnist_want(arrays))
    assert len(counted) == 4
    # the pool is the mapping itself: test right after train, one block
    from fedalf_jax.experiment.build import _pooled
    third = load_dataset("fmnist", data_dir=tmp_path / "f")
    assert np.shares_memory(_pooled(third.x_train, third.x_test), third.x_test)
    entry = tmp_path / "cache" / entries(tmp_path)[0]
    assert json.loads((entry / "meta.json").read_text())["n_train"] == 30


def test_changed_files_are_decoded_again(counted, tmp_path):
    write_fmnist(tmp_path / "f", n_train=30, n_test=12)
    load_dataset("fmnist", data_dir=tmp_path / "f")
    arrays = write_fmnist(tmp_path / "f", n_train=30, n_test=12, seed=1)  # new images, same names and sizes
    counted.clear()
    check(load_dataset("fmnist", data_dir=tmp_path / "f"), fmnist_want(arrays))
    assert len(counted) == 4 and len(entries(tmp_path)) == 1  # decoded again; the old files' entry removed
    counted.clear()
    ds = load_dataset("fmnist", data_dir=tmp_path / "f")
    assert counted == []
    check(ds, fmnist_want(arrays))


def test_a_damaged_entry_is_decoded_again_and_replaced(counted, tmp_path):
    arrays = write_fmnist(tmp_path / "f", n_train=30, n_test=12)
    load_dataset("fmnist", data_dir=tmp_path / "f")
    x = tmp_path / "cache" / entries(tmp_path)[0] / "x.npy"
    raw = bytearray(x.read_bytes())
    raw[-5] ^= 0x40  # one bit of the last test image
    x.write_bytes(bytes(raw))
    counted.clear()
    ds = load_dataset("fmnist", data_dir=tmp_path / "f")
    assert len(counted) == 4  # decoded from the files
    check(ds, fmnist_want(arrays))
    counted.clear()
    check(load_dataset("fmnist", data_dir=tmp_path / "f"), fmnist_want(arrays))
    assert counted == []  # the entry was written again
    x.write_bytes(bytes(raw[:len(raw) // 2]))  # cut short
    check(load_dataset("fmnist", data_dir=tmp_path / "f"), fmnist_want(arrays))


def test_cifar_folder_and_tarball_entries(counted, tmp_path):
    folder, batches = write_cifar10(tmp_path / "c")
    want = load_dataset("cifar10", data_dir=tmp_path / "c")
    counted.clear()
    again = load_dataset("cifar10", data_dir=tmp_path / "c")
    assert counted == [] and again.source == want.source == folder and again.digest == want.digest
    check(again, (want.x_train, want.y_train, want.x_test, want.y_test))
    (tmp_path / "t").mkdir()
    with tarfile.open(tmp_path / "t" / "cifar-10-python.tar.gz", "w:gz") as tar:
        tar.add(folder, arcname="cifar-10-batches-py")
    load_dataset("cifar10", data_dir=tmp_path / "t")
    from_tar = load_dataset("cifar10", data_dir=tmp_path / "t")
    assert from_tar.source.endswith("cifar-10-python.tar.gz") and from_tar.digest == want.digest
    assert len(entries(tmp_path)) == 2  # the folder's files and the tarball: entries of their own


def test_off_and_unwritable(monkeypatch, tmp_path):
    arrays = write_fmnist(tmp_path / "f", n_train=30, n_test=12)
    monkeypatch.setenv("FEDALF_DATA_CACHE", "off")
    assert data_cache.cache_dir() is None
    check(load_dataset("fmnist", data_dir=tmp_path / "f"), fmnist_want(arrays))
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("FEDALF_DATA_CACHE", str(blocked))
    with pytest.warns(UserWarning, match="could not be kept in .*FEDALF_DATA_CACHE=off"):
        check(load_dataset("fmnist", data_dir=tmp_path / "f"), fmnist_want(arrays))
    monkeypatch.delenv("FEDALF_DATA_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert data_cache.cache_dir() == tmp_path / "home" / ".cache" / "fedalf_jax" / "data"


def test_a_killed_writers_folder_is_removed(counted, tmp_path):
    write_fmnist(tmp_path / "f", n_train=30, n_test=12)
    (tmp_path / "cache").mkdir()
    dead = tmp_path / "cache" / ".fmnist-x.999999999.tmp"  # no such process
    alive = tmp_path / "cache" / f".fmnist-y.{os.getpid()}.tmp"
    dead.mkdir()
    alive.mkdir()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_dataset("fmnist", data_dir=tmp_path / "f")
    assert not dead.exists() and alive.exists()
