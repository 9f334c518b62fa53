"""Tests for fedalf_jax.partitions: pat1/pat2 (fedlf, shards), dirichlet, iid, padding, errors."""

import os

import numpy as np
import pytest

from fedalf_jax.problem.partitions import Partition, PartitionError, make_partition, pad_indices
from fedalf_jax.problem.partitions import _assign_classes, _balanced_holders

# Fashion-MNIST-shaped labels: 6000 train + 1000 test per class, interleaved like the real files.
Y_TRAIN = np.tile(np.arange(10), 6000)
Y_TEST = np.tile(np.arange(10), 1000)
POOL = np.concatenate([Y_TRAIN, Y_TEST])
REAL_DIR = "/usr/share/datasets/fashion-mnist"


def check_valid(p: Partition, labels: np.ndarray, num_clients: int, k: int | None = None):
    """Indices valid and disjoint (within and across clients); class sets as claimed."""
    assert len(p.train_idx) == len(p.test_idx) == len(p.classes) == num_clients
    everything = np.concatenate(p.train_idx + p.test_idx)
    assert everything.min() >= 0 and everything.max() < len(labels)
    assert len(np.unique(everything)) == len(everything), "an index is used twice"
    for tr, te, cls in zip(p.train_idx, p.test_idx, p.classes):
        assert len(tr) >= 1 and len(te) >= 1
        assert cls == sorted(cls)
        if k is not None:
            assert len(cls) == k == len(set(cls))
            assert sorted(set(labels[tr])) == cls
            assert sorted(set(labels[te])) == cls  # local test holds the train classes
    return everything


# ------------------------------------------------------------------------------------------ pat


@pytest.mark.parametrize("scheme,k", [("pat1", 2), ("pat2", 1)])
@pytest.mark.parametrize("assign", ["fedlf", "shards"])
def test_pat_fmnist_sizes(scheme, k, assign):
    p = make_partition(Y_TRAIN, Y_TEST, 100, scheme, assign=assign, seed=0)
    check_valid(p, POOL, 100, k)
    assert {len(t) for t in p.train_idx} == {600}
    assert {len(t) for t in p.test_idx} == {100}
    holders = np.bincount(np.concatenate(p.classes), minlength=10)
    np.testing.assert_array_equal(holders, np.full(10, 100 * k // 10))  # 20 (pat1) / 10 (pat2)
    for tr, te, cls in zip(p.train_idx, p.test_idx, p.classes):
        # balanced within the client: 300/50 per class (pat1), 600/100 (pat2)
        assert set(np.bincount(POOL[tr])[cls]) == {600 // k}
        assert set(np.bincount(POOL[te])[cls]) == {100 // k}
    if assign == "shards":  # train from the original train set, test from the original test set
        for tr, te in zip(p.train_idx, p.test_idx):
            assert tr.max() < len(Y_TRAIN) and te.min() >= len(Y_TRAIN)


def test_fedlf_block_layout():
    p = make_partition(Y_TRAIN, Y_TEST, 100, "pat1")
    for i, cls in enumerate(p.classes):
        b = i // 20
        assert cls == [2 * b, 2 * b + 1]
    p = make_partition(Y_TRAIN, Y_TEST, 100, "pat2")
    assert [c[0] for c in p.classes] == [i // 10 for i in range(100)]


@pytest.mark.parametrize("assign", ["fedlf", "shards"])
def test_pat_determinism_and_seed(assign):
    a = make_partition(Y_TRAIN, Y_TEST, 50, "pat1", assign=assign, seed=3)
    b = make_partition(Y_TRAIN, Y_TEST, 50, "pat1", assign=assign, seed=3)
    c = make_partition(Y_TRAIN, Y_TEST, 50, "pat1", assign=assign, seed=4)
    assert a.classes == b.classes
    for x, y in zip(a.train_idx + a.test_idx, b.train_idx + b.test_idx):
        np.testing.assert_array_equal(x, y)
    assert any(not np.array_equal(x, y) for x, y in zip(a.train_idx, c.train_idx))
    if assign == "fedlf":
        assert a.classes == c.classes  # the class layout is fixed; only samples depend on the seed
    else:
        assert a.classes != c.classes


@pytest.mark.parametrize("assign", ["fedlf", "shards"])
@pytest.mark.parametrize("scheme,k", [("pat1", 2), ("pat2", 1)])
@pytest.mark.parametrize("n_clients,n_classes", [(7, 10), (3, 3), (13, 5), (4, 2), (30, 7)])
def test_pat_odd_sizes(assign, scheme, k, n_clients, n_classes):
    rng = np.random.default_rng(n_clients)
    ytr = rng.permutation(np.arange(600) % n_classes)
    yte = rng.permutation(np.arange(120) % n_classes)
    pool = np.concatenate([ytr, yte])
    p = make_partition(ytr, yte, n_clients, scheme, assign=assign, seed=1)
    check_valid(p, pool, n_clients, k)
    holders = np.bincount(np.concatenate(p.classes), minlength=n_classes)
    assert holders.max() - holders.min() <= 1  # as even as the numbers allow


def test_assign_classes_always_exact():
    """The holder assignment never fails and gives every client k distinct classes."""
    rng = np.random.default_rng(0)
    for _ in range(300):
        C = int(rng.integers(1, 12))
        k = int(rng.integers(1, C + 1))
        N = int(rng.integers(1, 40))
        holders = _balanced_holders(C, N * k, extra_first=rng.permutation(C))
        for r in (None, rng):
            out = _assign_classes(N, k, holders, r)
            assert all(len(set(c.tolist())) == k for c in out)
            np.testing.assert_array_equal(np.bincount(np.concatenate(out), minlength=C), holders)


def test_train_frac_default_and_custom():
    p = make_partition(Y_TRAIN[:50000], Y_TEST, 100, "pat1", dataset="cifar10")  # 6000 per class
    assert {len(t) for t in p.train_idx} == {500} and {len(t) for t in p.test_idx} == {100}
    p = make_partition(Y_TRAIN, Y_TEST, 100, "pat1", train_frac=0.5)
    assert {len(t) for t in p.train_idx} == {350} and {len(t) for t in p.test_idx} == {350}


@pytest.mark.skipif(
    not os.path.isfile(os.path.join(REAL_DIR, "train-labels-idx1-ubyte.gz")), reason="no real Fashion-MNIST"
)
def test_real_fmnist_labels_pat1():
    from fedalf_jax.problem.data import _read_idx

    ytr = _read_idx(os.path.join(REAL_DIR, "train-labels-idx1-ubyte.gz"), 1)
    yte = _read_idx(os.path.join(REAL_DIR, "t10k-labels-idx1-ubyte.gz"), 1)
    p = make_partition(ytr, yte, 100, "pat1", seed=0)
    check_valid(p, np.concatenate([ytr, yte]).astype(np.int64), 100, 2)
    assert {len(t) for t in p.train_idx} == {600} and {len(t) for t in p.test_idx} == {100}


# ----------------------------------------------------------------------------- dirichlet / iid


@pytest.mark.parametrize("alpha", [0.1, 0.5, 100.0])
def test_dirichlet_covers_pool(alpha):
    p = make_partition(Y_TRAIN, Y_TEST, 100, "dirichlet", alpha=alpha, seed=0)
    everything = check_valid(p, POOL, 100)
    assert len(everything) == len(POOL)  # every sample used exactly once
    sizes = np.array([len(a) + len(b) for a, b in zip(p.train_idx, p.test_idx)])
    assert sizes.min() >= 10
    for tr, te, cls in zip(p.train_idx, p.test_idx, p.classes):
        assert sorted(set(POOL[np.concatenate([tr, te])])) == cls
        n = len(tr) + len(te)
        assert len(tr) == min(max(round(6 / 7 * n), 1), n - 1)


def test_dirichlet_alpha_controls_heterogeneity():
    lo = make_partition(Y_TRAIN, Y_TEST, 50, "dirichlet", alpha=0.05, seed=1)
    hi = make_partition(Y_TRAIN, Y_TEST, 50, "dirichlet", alpha=100.0, seed=1)
    assert np.mean([len(c) for c in lo.classes]) < np.mean([len(c) for c in hi.classes]) == 10


def test_dirichlet_determinism():
    a = make_partition(Y_TRAIN, Y_TEST, 20, "dirichlet", alpha=0.3, seed=5)
    b = make_partition(Y_TRAIN, Y_TEST, 20, "dirichlet", alpha=0.3, seed=5)
    c = make_partition(Y_TRAIN, Y_TEST, 20, "dirichlet", alpha=0.3, seed=6)
    assert all(np.array_equal(x, y) for x, y in zip(a.train_idx, b.train_idx))
    assert not all(np.array_equal(x, y) for x, y in zip(a.train_idx, c.train_idx))


def test_iid():
    p = make_partition(Y_TRAIN, Y_TEST, 100, "iid", seed=0)
    everything = check_valid(p, POOL, 100)
    assert len(everything) == len(POOL)
    assert {len(t) for t in p.train_idx} == {600} and {len(t) for t in p.test_idx} == {100}
    assert np.mean([len(c) for c in p.classes]) == 10
    q = make_partition(Y_TRAIN, Y_TEST, 100, "iid", seed=1)
    assert not np.array_equal(p.train_idx[0], q.train_idx[0])
    small = make_partition(np.arange(23) % 3, np.arange(4) % 3, 9, "iid")
    check_valid(small, np.concatenate([np.arange(23) % 3, np.arange(4) % 3]), 9)


# ------------------------------------------------------------------------------ summary / pad


def test_summary():
    p = make_partition(Y_TRAIN, Y_TEST, 10, "pat1")
    s = p.summary(POOL)
    assert len(s) == 10 and s[0]["client"] == 0 and s[0]["classes"] == [0, 1]
    assert s[0]["n_train"] == 6000 and s[0]["n_test"] == 1000
    assert s[0]["train_counts"] == {0: 3000, 1: 3000}
    assert all(isinstance(k, int) and isinstance(v, int) for k, v in s[3]["train_counts"].items())


def test_pad_indices():
    idx, counts = pad_indices([np.array([3, 1, 4]), np.array([], dtype=np.int64), np.array([5])])
    assert idx.dtype == np.int32 and counts.dtype == np.int32
    np.testing.assert_array_equal(idx, [[3, 1, 4], [0, 0, 0], [5, 0, 0]])
    np.testing.assert_array_equal(counts, [3, 0, 1])
    p = make_partition(Y_TRAIN, Y_TEST, 20, "dirichlet", alpha=0.5)
    idx, counts = pad_indices(p.train_idx)
    assert idx.shape == (20, max(len(t) for t in p.train_idx))
    for row, n, t in zip(idx, counts, p.train_idx):
        np.testing.assert_array_equal(row[:n], t)
        assert not row[n:].any()
    idx, counts = pad_indices([np.array([], dtype=np.int64)])
    assert idx.shape == (1, 1) and counts.tolist() == [0]


# ------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "args,kwargs,match",
    [
        ((10, "pat3"), {}, "unknown partition scheme"),
        ((10, "pat1"), {"assign": "random"}, "unknown assign"),
        ((0, "iid"), {}, "num_clients must be a positive integer"),
        ((-3, "pat1"), {}, "num_clients must be a positive integer"),
        ((2.5, "pat1"), {}, "num_clients must be a positive integer"),
        ((10, "dirichlet"), {"alpha": 0.0}, "alpha must be > 0"),
        ((10, "dirichlet"), {"alpha": -1.0}, "alpha must be > 0"),
        ((10, "pat1"), {"train_frac": 0.0}, r"train_frac must be in \(0, 1\)"),
        ((10, "pat1"), {"train_frac": 1.0}, r"train_frac must be in \(0, 1\)"),
        ((10, "iid"), {"train_frac": 1.5}, r"train_frac must be in \(0, 1\)"),
    ],
)
def test_errors(args, kwargs, match):
    with pytest.raises(PartitionError, match=match) as e:
        make_partition(Y_TRAIN[:200], Y_TEST[:50], *args, **kwargs)
    assert isinstance(e.value, ValueError) and "\n" not in str(e.value)


def test_errors_data_too_small():
    one_class = np.zeros(100, dtype=np.int64)
    with pytest.raises(PartitionError, match="pat1 gives every client 2 classes but the labels hold only 1"):
        make_partition(one_class, one_class[:10], 5, "pat1")
    with pytest.raises(PartitionError, match="more clients than the data can serve"):
        make_partition(np.arange(10) % 5, np.arange(5), 8, "iid")
    # 12 samples per class in the merged pool, 10 holders each in pat1 with 50 clients: 1.2 per holder
    with pytest.raises(PartitionError, match="too many clients for pat1: class 0 has 12 samples for 10"):
        make_partition(np.arange(100) % 10, np.arange(20) % 10, 50, "pat1")
    with pytest.raises(PartitionError, match="assign='shards'.*assign='fedlf'"):
        make_partition(np.arange(1000) % 10, np.arange(20) % 10, 50, "pat1", assign="shards")
    with pytest.raises(PartitionError, match="raise alpha or use fewer clients"):
        make_partition(np.arange(60) % 3, np.arange(6) % 3, 30, "dirichlet", alpha=0.001, min_size=2)
