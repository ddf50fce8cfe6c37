"""Datasets: map-style (``__getitem__`` + ``__len__``) and iterable-style (``__iter__``), and
the wrappers that combine or split them, as in ``torch.utils.data.dataset``."""
import bisect
import itertools
import math
import warnings


class Dataset:
    """A map-style dataset: subclasses define ``__getitem__`` (and usually ``__len__``).

    Example:
        >>> from ember.utils.data import Dataset
        >>> class Squares(Dataset):
        ...     def __getitem__(self, i): return i * i
        ...     def __len__(self): return 4
        >>> d = Squares() + Squares()
        >>> len(d), d[5]
        (8, 1)
    """

    def __getitem__(self, index):
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other):
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """An iterable-style dataset: subclasses define ``__iter__``.

    With ``num_workers > 0`` every worker iterates its own copy, so ``__iter__`` should shard
    the stream with :func:`get_worker_info` or each sample is loaded once per worker.

    Example:
        >>> import math
        >>> from ember.utils.data import DataLoader, IterableDataset, get_worker_info
        >>> class Range(IterableDataset):
        ...     def __init__(self, n): self.n = n
        ...     def __iter__(self):
        ...         info = get_worker_info()       # None in the main process
        ...         if info is None:
        ...             return iter(range(self.n))
        ...         return iter(range(info.id, self.n, info.num_workers))
        >>> [b.tolist() for b in DataLoader(Range(5), batch_size=2)]
        [[0, 1], [2, 3], [4]]
    """

    def __iter__(self):
        raise NotImplementedError("Subclasses of IterableDataset should implement __iter__.")

    def __add__(self, other):
        return ChainDataset([self, other])


class TensorDataset(Dataset):
    """Samples are tuples of the i-th rows of the given tensors (same first dimension).

    Example:
        >>> import ember
        >>> from ember.utils.data import TensorDataset
        >>> ds = TensorDataset(ember.arange(6).reshape(3, 2), ember.tensor([0, 1, 0]))
        >>> len(ds), ds[1]
        (3, (tensor([2, 3]), tensor(1)))
    """

    def __init__(self, *tensors):
        # NOTE: torch raises AssertionError here, and we match it.
        if any(tensors[0].size(0) != t.size(0) for t in tensors):
            raise AssertionError("Size mismatch between tensors")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].size(0)


def _getitems(dataset, indices):
    """``dataset``'s samples at ``indices``, through its batched ``__getitems__`` if it has one."""
    if callable(getattr(dataset, "__getitems__", None)):
        items = dataset.__getitems__(indices)
        if len(items) != len(indices):
            raise ValueError(f"Nested dataset's output size mismatch. Expected {len(indices)}, "
                             f"got {len(items)}")
        return items
    return [dataset[i] for i in indices]


class StackDataset(Dataset):
    """Zips datasets of one length: samples are tuples (positional) or dicts (keywords).

    Example:
        >>> from ember.utils.data import StackDataset
        >>> StackDataset(x=[1, 2], y="ab")[1]
        {'x': 2, 'y': 'b'}
    """

    def __init__(self, *args, **kwargs):
        if args and kwargs:
            raise ValueError("Supported either ``tuple``- (via ``args``) or``dict``- (via "
                             "``kwargs``) like input/output, but both types are given.")
        if not args and not kwargs:
            raise ValueError("At least one dataset should be passed")
        parts = args or list(kwargs.values())
        self._length = len(parts[0])
        if any(self._length != len(d) for d in parts):
            raise ValueError("Size mismatch between datasets")
        self.datasets = args or kwargs

    def __getitem__(self, index):
        if isinstance(self.datasets, dict):
            return {k: d[index] for k, d in self.datasets.items()}
        return tuple(d[index] for d in self.datasets)

    def __getitems__(self, indices):
        if isinstance(self.datasets, dict):
            cols = {k: _getitems(d, indices) for k, d in self.datasets.items()}
            return [{k: c[i] for k, c in cols.items()} for i in range(len(indices))]
        return list(zip(*(_getitems(d, indices) for d in self.datasets)))

    def __len__(self):
        return self._length


class ConcatDataset(Dataset):
    """Map-style datasets one after another.

    Example:
        >>> from ember.utils.data import ConcatDataset
        >>> d = ConcatDataset([[1, 2], [3, 4, 5]])
        >>> len(d), d[2], d[-1], d.cumulative_sizes
        (5, 3, 5, [2, 5])
    """

    @staticmethod
    def cumsum(sequence):
        return list(itertools.accumulate(len(e) for e in sequence))

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise AssertionError("datasets should not be an empty iterable")
        if any(isinstance(d, IterableDataset) for d in self.datasets):
            raise AssertionError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes = self.cumsum(self.datasets)

    def __len__(self):
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx += len(self)
        which = bisect.bisect_right(self.cumulative_sizes, idx)
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][idx - start]


class ChainDataset(IterableDataset):
    """Iterable datasets one after another (chained lazily).

    Example:
        >>> from ember.utils.data import ChainDataset, IterableDataset
        >>> class Two(IterableDataset):
        ...     def __iter__(self): return iter([1, 2])
        ...     def __len__(self): return 2
        >>> c = ChainDataset([Two(), Two()])
        >>> list(c), len(c)
        ([1, 2, 1, 2], 4)
    """

    def __init__(self, datasets):
        self.datasets = datasets

    def _checked(self):
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise AssertionError("ChainDataset only supports IterableDataset")
            yield d

    def __iter__(self):
        for d in self._checked():
            yield from d

    def __len__(self):
        return sum(len(d) for d in self._checked())


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``.

    Example:
        >>> from ember.utils.data import Subset
        >>> s = Subset("abcde", [4, 0])
        >>> len(s), s[0], s.__getitems__([1, 0])
        (2, 'e', ['a', 'e'])
    """

    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, indices
        # NOTE: the DataLoader fetches batches through __getitems__, so a subclass that only
        # overrides __getitem__ would be silently bypassed; torch refuses it, and so do we.
        if type(self).__getitem__ is not Subset.__getitem__ and \
                type(self).__getitems__ is Subset.__getitems__:
            raise NotImplementedError(
                f"{type(self).__name__} overrides __getitem__ but not __getitems__. When "
                "subclassing Subset and overriding __getitem__, you must also override "
                "__getitems__ to ensure DataLoader works correctly with your custom logic. A "
                "simple implementation:\n\ndef __getitems__(self, indices):\n    return "
                "[self.__getitem__(idx) for idx in indices]")

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices):
        return _getitems(self.dataset, [self.indices[i] for i in indices])

    def __len__(self):
        return len(self.indices)


def _fraction_lengths(n, fractions):
    lengths = []
    for i, frac in enumerate(fractions):
        if frac < 0 or frac > 1:
            raise ValueError(f"Fraction at index {i} is not between 0 and 1")
        lengths.append(math.floor(n * frac))
    # The floors leave a remainder; hand it out one by one from the front, as torch does.
    for i in range(n - sum(lengths)):
        lengths[i % len(lengths)] += 1
    for i, length in enumerate(lengths):
        if length == 0:
            warnings.warn(f"Length of split at index {i} is 0. This might result in an empty "
                          "dataset.", stacklevel=3)
    return lengths


def random_split(dataset, lengths, generator=None):
    """Split ``dataset`` into non-overlapping random subsets of the given lengths (or
    fractions summing to 1), shuffled by ``generator`` (default: the global generator).

    Example:
        >>> import ember
        >>> from ember.utils.data import random_split
        >>> a, b = random_split(range(10), [0.7, 0.3], generator=ember.Generator().manual_seed(0))
        >>> len(a), len(b), sorted(list(a) + list(b)) == list(range(10))
        (7, 3, True)
    """
    from ..._ops.random import randperm
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        lengths = _fraction_lengths(len(dataset), lengths)
    if sum(lengths) != len(dataset):
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    indices = randperm(sum(lengths), generator=generator).tolist()
    return [Subset(dataset, indices[end - n:end])
            for end, n in zip(itertools.accumulate(lengths), lengths)]
