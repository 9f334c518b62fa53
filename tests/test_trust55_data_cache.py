"""Trust round 5 (issue 55 items 1-2), the data cache: an entry serves only the files it was made from.

Item 1: files changed in place with their size, modification time and inode kept (``touch -r``, ``rsync
--inplace -t``, an archive re-extracted with fixed member times) are decoded again, never served from the old
entry. Item 2: an entry copied, swapped or symbolically linked in from another data folder, or of another
loaders' version, is not this folder's data: decoded again and replaced by a real entry; the other folder's
entry is untouched. Expectations: the arrays the test wrote (cast by hand), the count of files the loaders read,
the entry folders on disk."""

import json
import os
import shutil

import numpy as np

from fedalf_jax.problem import data_cache
from fedalf_jax.problem.data import load_dataset
from test_data import write_fmnist
from test_data_cache import check, counted, entries, fmnist_want  # noqa: F401 - counted is a fixture


def _rewrite_in_place(path, blob: bytes) -> None:
    """``blob`` written into ``path``'s own inode, its modification time put back (``rsync --inplace -t``)."""
    st = os.stat(path)
    assert len(blob) == st.st_size
    with open(path, "r+b") as f:
        f.write(blob)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)


def test_an_in_place_change_with_the_same_size_mtime_and_inode_is_decoded_again(counted, tmp_path):
    write_fmnist(tmp_path / "f", n_train=30, n_test=12, gz=False)
    load_dataset("fmnist", data_dir=tmp_path / "f")
    new = write_fmnist(tmp_path / "g", n_train=30, n_test=12, gz=False, seed=1)  # other images, same sizes
    name = "train-images-idx3-ubyte"
    _rewrite_in_place(tmp_path / "f" / name, (tmp_path / "g" / name).read_bytes())
    counted.clear()
    ds = load_dataset("fmnist", data_dir=tmp_path / "f")
    assert len(counted) == 4  # decoded from the files, not the old entry
    old_test = write_fmnist(tmp_path / "h", n_train=30, n_test=12, gz=False)  # the first call's arrays again
    want = fmnist_want(old_test)
    want[0] = new["x_train"].astype(np.float32)[..., None] / np.float32(255)
    check(ds, want)
    assert len(entries(tmp_path)) == 1  # the old files' entry removed
    counted.clear()
    check(load_dataset("fmnist", data_dir=tmp_path / "f"), want)
    assert counted == []


def _two_folders(tmp_path):
    a = write_fmnist(tmp_path / "a", n_train=30, n_test=12)
    b = write_fmnist(tmp_path / "b", n_train=30, n_test=12, seed=1)
    load_dataset("fmnist", data_dir=tmp_path / "a")
    before = set(entries(tmp_path))
    load_dataset("fmnist", data_dir=tmp_path / "b")
    (eb,) = set(entries(tmp_path)) - before
    (ea,) = before
    return a, b, tmp_path / "cache" / ea, tmp_path / "cache" / eb


def test_an_entry_copied_in_from_another_folder_is_not_served(counted, tmp_path):
    a, b, ea, eb = _two_folders(tmp_path)
    shutil.rmtree(eb)
    shutil.copytree(ea, eb)  # folder a's images under folder b's name
    counted.clear()
    check(load_dataset("fmnist", data_dir=tmp_path / "b"), fmnist_want(b))
    assert len(counted) == 4
    assert json.loads((eb / "meta.json").read_text())["files"][0].startswith(str(tmp_path / "b"))
    counted.clear()
    check(load_dataset("fmnist", data_dir=tmp_path / "a"), fmnist_want(a))  # a's own entry still serves a
    assert counted == []


def test_a_symlinked_entry_is_replaced_by_a_real_one(counted, tmp_path):
    a, b, ea, eb = _two_folders(tmp_path)
    shutil.rmtree(eb)
    eb.symlink_to(ea, target_is_directory=True)
    counted.clear()
    check(load_dataset("fmnist", data_dir=tmp_path / "b"), fmnist_want(b))
    assert len(counted) == 4 and eb.is_dir() and not eb.is_symlink()
    check(load_dataset("fmnist", data_dir=tmp_path / "a"), fmnist_want(a))
    assert len(counted) == 4  # a's entry, the link's target, untouched and used
    # a damaged entry behind a link: decoded again once, then a real entry serves
    shutil.rmtree(eb)
    bad = tmp_path / "elsewhere"
    shutil.copytree(ea, bad)
    (bad / "x.npy").write_bytes((bad / "x.npy").read_bytes()[:1000])
    eb.symlink_to(bad, target_is_directory=True)
    counted.clear()
    check(load_dataset("fmnist", data_dir=tmp_path / "b"), fmnist_want(b))
    assert len(counted) == 4 and not eb.is_symlink()
    counted.clear()
    check(load_dataset("fmnist", data_dir=tmp_path / "b"), fmnist_want(b))
    assert counted == []  # replaced, not decoded at every start
    # a real entry holding a link to another's file
    os.remove(eb / "x.npy")
    os.symlink(ea / "x.npy", eb / "x.npy")
    counted.clear()
    check(load_dataset("fmnist", data_dir=tmp_path / "b"), fmnist_want(b))
    assert len(counted) == 4 and not (eb / "x.npy").is_symlink() and (ea / "x.npy").is_file()
    # even a link to a true copy of its own entry is refused (what a link points to can change after the check)
    own = tmp_path / "own-copy"
    shutil.copytree(eb, own)
    shutil.rmtree(eb)
    eb.symlink_to(own, target_is_directory=True)
    counted.clear()
    check(load_dataset("fmnist", data_dir=tmp_path / "b"), fmnist_want(b))
    assert len(counted) == 4 and not eb.is_symlink() and (own / "x.npy").is_file()


def test_an_entry_of_another_key_or_version_is_not_served(counted, tmp_path):
    b = write_fmnist(tmp_path / "b", n_train=30, n_test=12)
    load_dataset("fmnist", data_dir=tmp_path / "b")
    (eb,) = entries(tmp_path)
    meta_path = tmp_path / "cache" / eb / "meta.json"
    for change in ({"version": data_cache.VERSION + 1}, {"key": "cifar10"}):
        meta = json.loads(meta_path.read_text())
        meta.update(change)
        meta_path.write_text(json.dumps(meta))
        counted.clear()
        check(load_dataset("fmnist", data_dir=tmp_path / "b"), fmnist_want(b))
        assert len(counted) == 4, change
        assert json.loads(meta_path.read_text())["version"] == data_cache.VERSION  # written again
