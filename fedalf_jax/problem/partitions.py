"""Client partitions of a dataset (NumPy only, deterministic given the seed).

Everything works on the *merged pool* ``pool = concat(train, test)``: pool indices
``0 .. n_train-1`` are the original train set, ``n_train ..`` the original test set. Every client
gets a local train split and a local test split (indices into the pool), disjoint within and across
clients.

Schemes (``scheme``) and assignments (``assign``, for ``pat1``/``pat2`` only):

* ``pat1``: every client holds exactly 2 classes; ``pat2``: exactly 1 class. (The names follow the
  source paper; the FedLF code names them the other way round -- read ``Partition.classes``.)

  - ``assign="fedlf"`` (default; the FedLF authors' scheme). Train and test pools are merged.
    **Class-to-client rule.** Each class is held by ``N*k // C`` clients, the first ``N*k % C``
    classes (by label) by one more (``N`` clients, ``k`` classes per client, ``C`` classes present).
    Clients are filled in index order, each taking the ``k`` lowest-numbered classes that still need
    holders -- except that a class needing as many holders as there are clients left is taken
    first, which keeps the rule valid for every ``N``, ``k <= C``. When ``C`` is divisible by ``k``
    and ``N*k`` by ``C`` this is exactly FedLF's block layout: with 100 clients, pat1 on 10 classes,
    clients 0-19 hold {0, 1}, 20-39 {2, 3}, ..., 80-99 {8, 9} (pat2: clients 0-9 hold class 0, ...).
    The class layout does not depend on the seed.
    **Samples.** Each class's pool samples are shuffled (seeded), then cut into equal contiguous
    chunks (sizes differ by at most one), one per holding client in client order.
    **Local split**, stratified per class: of a client's ``n_c`` samples of class ``c``,
    ``round(train_frac * n_c)`` (at least 1, at most ``n_c - 1``) go to its train split, the rest to
    its test split, so train and test hold the same classes. ``train_frac`` defaults to 6/7 for
    fmnist and 5/6 for cifar10/cifar100 (FedLF's ratios), otherwise ``n_train / (n_train + n_test)``.
    Fashion-MNIST (7000 per class), 100 clients, pat1: 600 train + 100 test per client.

  - ``assign="shards"`` (FedAvg-style). Only the original *train* set is sharded: each class's
    train samples (shuffled, seeded) are cut into equal shards, ``N*k`` shards in all (balanced over
    classes as above; which classes get one extra shard is seeded), and each client gets ``k``
    random shards of ``k`` *distinct* classes (a seeded random draw that cannot fail: a class
    whose shards must go to every remaining client is always taken). **Test split:** the original
    test set, class by class, is cut into as many equal chunks as the class has shards, and each
    client's test split is the test chunks matching its shards -- so it has the client's classes in
    the same proportions, and ``train_frac`` is ignored.

* ``dirichlet`` (Hsu et al. 2019): for every class, proportions over clients drawn from
  ``Dirichlet(alpha)``, with the usual balancing (a client already above ``n_pool / N`` samples gets
  no more); redrawn until every client has at least ``min_size`` samples (default
  ``min(10, n_pool // (2N))``, at least 2). On the merged pool, then a stratified local split.
* ``iid``: the shuffled merged pool cut into ``N`` equal parts, then a stratified local split.

For ``dirichlet``/``iid`` the local split keeps each client's total test size at
``n - round(train_frac * n)`` and spreads it over classes in proportion (largest remainders).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

__all__ = [
    "Partition",
    "PartitionError",
    "make_partition",
    "pad_indices",
    "default_train_frac",
    "SCHEMES",
    "ASSIGNS",
]

SCHEMES = ("pat1", "pat2", "dirichlet", "iid")
ASSIGNS = ("fedlf", "shards")
_CLASSES_PER_CLIENT = {"pat1": 2, "pat2": 1}
_TRAIN_FRAC = {"fmnist": 6 / 7, "cifar10": 5 / 6, "cifar100": 5 / 6}


class PartitionError(ValueError):
    """A partition cannot be built as asked; the message names the problem and the fix."""


@dataclasses.dataclass(frozen=True, eq=False)
class Partition:
    """Per-client local train/test indices into the merged pool ``concat(train, test)``."""

    train_idx: list[np.ndarray]
    test_idx: list[np.ndarray]
    classes: list[list[int]]

    @property
    def num_clients(self) -> int:
        return len(self.train_idx)

    def summary(self, labels: np.ndarray) -> list[dict]:
        """Per-client description for the run directory; ``labels`` are the merged pool's labels."""
        labels = np.asarray(labels)
        out = []
        for i, (tr, te, cls) in enumerate(zip(self.train_idx, self.test_idx, self.classes)):
            out.append(
                {
                    "client": i,
                    "classes": [int(c) for c in cls],
                    "n_train": int(len(tr)),
                    "n_test": int(len(te)),
                    "train_counts": _counts(labels[tr]),
                    "test_counts": _counts(labels[te]),
                }
            )
        return out


def _counts(y: np.ndarray) -> dict[int, int]:
    vals, cnt = np.unique(y, return_counts=True)
    return {int(v): int(c) for v, c in zip(vals, cnt)}


def pad_indices(idx_list: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``([N, max_n] int32 indices padded with 0, [N] int32 counts)``; ``max_n`` is at least 1."""
    counts = np.asarray([len(i) for i in idx_list], dtype=np.int32)
    max_n = max(int(counts.max(initial=0)), 1)
    out = np.zeros((len(idx_list), max_n), dtype=np.int32)
    for row, idx in enumerate(idx_list):
        out[row, : len(idx)] = np.asarray(idx, dtype=np.int64)
    return out, counts


def default_train_frac(dataset: str, n_train: int, n_test: int) -> float:
    """6/7 for fmnist, 5/6 for CIFAR, else the dataset's own train share (6/7 if that is degenerate)."""
    if dataset in _TRAIN_FRAC:
        return _TRAIN_FRAC[dataset]
    total = n_train + n_test
    frac = n_train / total if total else 0.0
    return frac if 0.0 < frac < 1.0 else 6 / 7


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _balanced_holders(n_classes: int, slots: int, extra_first: np.ndarray | None = None) -> np.ndarray:
    """Spread ``slots`` holder slots over classes: ``slots // C`` each, ``slots % C`` get one more."""
    h = np.full(n_classes, slots // n_classes, dtype=np.int64)
    extra = slots % n_classes
    order = np.arange(n_classes) if extra_first is None else extra_first
    h[order[:extra]] += 1
    return h


def _assign_classes(
    num_clients: int, k: int, holders: np.ndarray, rng: np.random.Generator | None
) -> list[np.ndarray]:
    """Give every client ``k`` distinct class positions so that class ``j`` gets ``holders[j]`` clients.

    Requires ``sum(holders) == num_clients * k`` and ``holders <= num_clients``; it then never fails:
    with ``M`` clients left, classes still needing ``M`` holders are taken first (at most ``k`` of them
    exist), which keeps ``remaining <= clients left`` true -- the Gale-Ryser condition for uniform row
    sums. The other picks are the lowest positions (``rng=None``) or a random draw weighted by the
    holders still needed.
    """
    r = holders.astype(np.int64).copy()
    out = []
    for i in range(num_clients):
        left = num_clients - i
        must = np.flatnonzero(r == left)
        need = k - len(must)
        cand = np.flatnonzero((r > 0) & (r < left))
        if need > len(cand) or need < 0:  # cannot happen when the preconditions hold
            raise AssertionError("class assignment invariant violated")
        if rng is None:
            pick = cand[:need]
        else:
            w = r[cand].astype(np.float64)
            pick = rng.choice(cand, size=need, replace=False, p=w / w.sum()) if need else cand[:0]
        chosen = np.sort(np.concatenate([must, pick]))
        r[chosen] -= 1
        out.append(chosen)
    return out


def _split_class_local(chunk: np.ndarray, frac: float) -> tuple[np.ndarray, np.ndarray]:
    """Train/test cut of one client's (already shuffled) samples of one class."""
    n = len(chunk)
    n_tr = min(max(int(round(frac * n)), 1), n - 1) if n >= 2 else n
    return chunk[:n_tr], chunk[n_tr:]


def _stratified_split(
    idx: np.ndarray, labels: np.ndarray, frac: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Local split keeping the total test size exact and spreading it over classes by largest remainders."""
    n = len(idx)
    n_test = n - min(max(int(round(frac * n)), 1), n - 1)
    y = labels[idx]
    vals, cnt = np.unique(y, return_counts=True)
    ideal = cnt * (n_test / n)
    t = np.floor(ideal).astype(np.int64)
    rest = n_test - int(t.sum())
    if rest > 0:
        order = np.lexsort((np.arange(len(vals)), -cnt, -(ideal - t)))
        t[order[:rest]] += 1
    train, test = [], []
    for v, tc in zip(vals, t):
        members = rng.permutation(idx[y == v])
        test.append(members[:tc])
        train.append(members[tc:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def _as_labels(y, what: str) -> np.ndarray:
    y = np.asarray(y)
    if y.ndim != 1:
        raise PartitionError(f"{what} must be a 1-D label vector, got shape {y.shape}.")
    if y.size and not np.issubdtype(y.dtype, np.integer):
        if not np.all(np.equal(np.mod(y, 1), 0)):
            raise PartitionError(f"{what} must hold integer class labels.")
    y = y.astype(np.int64)
    if y.size and y.min() < 0:
        raise PartitionError(f"{what} holds negative labels; labels must be 0..C-1.")
    return y


# --------------------------------------------------------------------------------------------
# schemes
# --------------------------------------------------------------------------------------------


def _holders_of(assigned, num_classes):
    """Invert a client → class-positions assignment: the clients holding each class, in client order."""
    holders_of = [[] for _ in range(num_classes)]
    for client, pos in enumerate(assigned):
        for j in pos:
            holders_of[j].append(client)
    return holders_of


def _pat_fedlf(labels, num_clients, k, frac, rng, scheme):
    classes = np.unique(labels)
    C = len(classes)
    holders = _balanced_holders(C, num_clients * k)
    assigned = _assign_classes(num_clients, k, holders, None)
    holders_of = _holders_of(assigned, C)
    train = [[] for _ in range(num_clients)]
    test = [[] for _ in range(num_clients)]
    for j, c in enumerate(classes):
        if not holders_of[j]:
            continue
        members = rng.permutation(np.flatnonzero(labels == c))
        h = len(holders_of[j])
        if len(members) < 2 * h:
            raise PartitionError(
                f"too many clients for {scheme}: class {int(c)} has {len(members)} samples for {h} "
                f"holding clients (each needs >= 2); use fewer clients or more data."
            )
        for client, chunk in zip(holders_of[j], np.array_split(members, h)):
            tr, te = _split_class_local(chunk, frac)
            train[client].append(tr)
            test[client].append(te)
    return _collected(train, test, assigned, classes)


def _collected(train, test, assigned, classes) -> Partition:
    """The partition from each client's lists of train and test index arrays and its assigned class positions."""
    train_idx = [np.sort(np.concatenate(t)) for t in train]
    test_idx = [np.sort(np.concatenate(t)) for t in test]
    cls = [[int(classes[j]) for j in pos] for pos in assigned]
    return Partition(train_idx, test_idx, cls)


def _pat_shards(y_train, y_test, num_clients, k, rng, scheme):
    n_train = len(y_train)
    classes = np.unique(y_train)
    C = len(classes)
    holders = _balanced_holders(C, num_clients * k, extra_first=rng.permutation(C))
    for j, c in enumerate(classes):
        n_tr, n_te = int(np.sum(y_train == c)), int(np.sum(y_test == c))
        if holders[j] and (n_tr < holders[j] or n_te < holders[j]):
            raise PartitionError(
                f"too many clients for {scheme} with assign='shards': class {int(c)} has {n_tr} train and "
                f"{n_te} test samples for {holders[j]} shards (each needs >= 1 of both); use fewer "
                "clients or assign='fedlf'."
            )
    assigned = _assign_classes(num_clients, k, holders, rng)
    holders_of = _holders_of(assigned, C)
    train = [[] for _ in range(num_clients)]
    test = [[] for _ in range(num_clients)]
    for j, c in enumerate(classes):
        h = len(holders_of[j])
        if not h:
            continue
        tr_members = rng.permutation(np.flatnonzero(y_train == c))
        te_members = n_train + rng.permutation(np.flatnonzero(y_test == c))
        for client, tr, te in zip(
            holders_of[j], np.array_split(tr_members, h), np.array_split(te_members, h)
        ):
            train[client].append(tr)
            test[client].append(te)
    return _collected(train, test, assigned, classes)


def _dirichlet(labels, num_clients, alpha, frac, rng, min_size, max_tries=1000):
    n_pool = len(labels)
    classes = np.unique(labels)
    by_class = [np.flatnonzero(labels == c) for c in classes]
    cap = n_pool / num_clients
    for _ in range(max_tries):
        sizes = np.zeros(num_clients, dtype=np.int64)
        parts = [[] for _ in range(num_clients)]
        for members in by_class:
            members = rng.permutation(members)
            p = rng.dirichlet(np.full(num_clients, float(alpha)))
            p = np.where(sizes < cap, p, 0.0)
            if not np.all(np.isfinite(p)) or p.sum() <= 0:
                p = (sizes < cap).astype(np.float64)
                if p.sum() <= 0:
                    p = np.ones(num_clients)
            p = p / p.sum()
            cuts = (np.cumsum(p) * len(members)).astype(np.int64)[:-1]
            for client, chunk in enumerate(np.split(members, cuts)):
                if len(chunk):
                    parts[client].append(chunk)
                    sizes[client] += len(chunk)
        if sizes.min() >= min_size:
            break
    else:
        raise PartitionError(
            f"dirichlet(alpha={alpha}) could not give each of {num_clients} clients >= {min_size} "
            f"samples in {max_tries} draws; raise alpha or use fewer clients."
        )
    return _finish_local(parts, labels, frac, rng)


def _iid(labels, num_clients, frac, rng):
    perm = rng.permutation(len(labels))
    parts = [[chunk] for chunk in np.array_split(perm, num_clients)]
    return _finish_local(parts, labels, frac, rng)


def _finish_local(parts, labels, frac, rng):
    train_idx, test_idx, cls = [], [], []
    for chunks in parts:
        idx = np.sort(np.concatenate(chunks))
        tr, te = _stratified_split(idx, labels, frac, rng)
        train_idx.append(tr)
        test_idx.append(te)
        cls.append([int(c) for c in np.unique(labels[idx])])
    return Partition(train_idx, test_idx, cls)


# --------------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------------


def make_partition(
    y_train,
    y_test,
    num_clients: int,
    scheme: str,
    *,
    assign: str = "fedlf",
    alpha: float = 0.5,
    seed: int = 0,
    train_frac: float | None = None,
    dataset: str = "fmnist",
    min_size: int | None = None,
) -> Partition:
    """Split the merged pool ``concat(y_train, y_test)`` over ``num_clients`` clients (see module doc).

    ``scheme``: ``pat1`` | ``pat2`` | ``dirichlet`` | ``iid``; ``assign`` (pat only): ``fedlf`` |
    ``shards``; ``alpha``: Dirichlet concentration; ``train_frac``: local train share (default by
    ``dataset``); ``min_size``: dirichlet's minimum samples per client. Deterministic in ``seed``.
    Raises :class:`PartitionError` with a one-line message.
    """
    if scheme not in SCHEMES:
        raise PartitionError(f"unknown partition scheme {scheme!r}: choose one of {', '.join(SCHEMES)}.")
    if assign not in ASSIGNS:
        raise PartitionError(f"unknown assign {assign!r}: choose one of {', '.join(ASSIGNS)}.")
    if isinstance(num_clients, bool) or int(num_clients) != num_clients or num_clients <= 0:
        raise PartitionError(f"num_clients must be a positive integer, got {num_clients!r}.")
    num_clients = int(num_clients)
    y_train = _as_labels(y_train, "y_train")
    y_test = _as_labels(y_test, "y_test")
    labels = np.concatenate([y_train, y_test])
    n_pool = len(labels)
    if train_frac is None:
        frac = default_train_frac(dataset, len(y_train), len(y_test))
    else:
        frac = float(train_frac)
        if not 0.0 < frac < 1.0:
            raise PartitionError(f"train_frac must be in (0, 1), got {train_frac!r}.")
    if n_pool < 2 * num_clients:
        raise PartitionError(
            f"more clients than the data can serve: {num_clients} clients need >= {2 * num_clients} "
            f"samples (one train + one test each), the pool has {n_pool}; use fewer clients."
        )
    rng = np.random.default_rng(seed)

    if scheme in _CLASSES_PER_CLIENT:
        k = _CLASSES_PER_CLIENT[scheme]
        pool_for_classes = y_train if assign == "shards" else labels
        n_classes = len(np.unique(pool_for_classes))
        if k > n_classes:
            raise PartitionError(
                f"{scheme} gives every client {k} classes but the labels hold only {n_classes}; "
                "use pat2 or a dataset with more classes."
            )
        if assign == "fedlf":
            return _pat_fedlf(labels, num_clients, k, frac, rng, scheme)
        return _pat_shards(y_train, y_test, num_clients, k, rng, scheme)

    if scheme == "dirichlet":
        if not (np.isfinite(alpha) and alpha > 0):
            raise PartitionError(f"dirichlet alpha must be > 0, got {alpha!r}; e.g. --alpha 0.5.")
        if min_size is None:
            min_size = min(10, n_pool // (2 * num_clients))
        min_size = max(int(min_size), 2)
        return _dirichlet(labels, num_clients, alpha, frac, rng, min_size)
    return _iid(labels, num_clients, frac, rng)
