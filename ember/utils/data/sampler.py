"""Samplers: the order in which a DataLoader visits a map-style dataset, as in
``torch.utils.data.sampler``. Random samplers draw on ember's generators, so a seed fixes the
order in ember (not the same order torch gives for that seed)."""
import itertools

from ..._dtype import int64
from ..._ops.creation import empty
from ..._ops.random import Generator, default_generator, multinomial, randint, randperm


def _positive_int(value, name):
    # NOTE: bool is an int in Python; torch rejects it explicitly and so do we.
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} should be a positive integer value, but got {name}={value}")


def _bool(value, name, exc=ValueError):
    if not isinstance(value, bool):
        raise exc(f"{name} should be a boolean value, but got {name}={value}")


class Sampler:
    """Base class: subclasses define ``__iter__`` over indices (and ``__len__`` if known)."""

    def __init__(self, data_source=None):
        """(``data_source`` is accepted as torch's samplers take it, and unused.)"""

    def __iter__(self):
        raise NotImplementedError


class SequentialSampler(Sampler):
    """Indices 0, 1, ..., len(data_source) - 1.

    Example:
        >>> from ember.utils.data import SequentialSampler
        >>> list(SequentialSampler("abc"))
        [0, 1, 2]
    """

    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class RandomSampler(Sampler):
    """Random indices: a permutation, or ``num_samples`` draws with ``replacement``.

    Without a ``generator`` each pass seeds a fresh one from the global generator, so
    ``ember.manual_seed`` makes the order reproducible.

    Example:
        >>> import ember
        >>> from ember.utils.data import RandomSampler
        >>> s = RandomSampler(range(5), generator=ember.Generator().manual_seed(0))
        >>> sorted(s), len(RandomSampler(range(5), replacement=True, num_samples=8))
        ([0, 1, 2, 3, 4], 8)
    """

    def __init__(self, data_source, replacement=False, num_samples=None, generator=None):
        self.data_source, self.replacement = data_source, replacement
        self._num_samples, self.generator = num_samples, generator
        _bool(replacement, "replacement", TypeError)
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError("num_samples should be a positive integer value, but got "
                             f"num_samples={self.num_samples}")

    @property
    def num_samples(self):
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def _generator(self):
        if self.generator is not None:
            return self.generator
        # NOTE: torch's seed draw: random_() of an int64 (random64() % 2**63)
        seed = int(empty((), dtype=int64).random_(generator=default_generator))
        return Generator().manual_seed(seed)

    def __iter__(self):
        n, g = len(self.data_source), self._generator()
        # Draw lazily in chunks, as torch does, so a long epoch doesn't hold every index.
        if self.replacement:
            for _ in range(self.num_samples // 32):
                yield from randint(0, n, (32,), generator=g).tolist()
            yield from randint(0, n, (self.num_samples % 32,), generator=g).tolist()
        else:
            for _ in range(self.num_samples // n):
                yield from randperm(n, generator=g).tolist()
            yield from randperm(n, generator=g).tolist()[:self.num_samples % n]

    def __len__(self):
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given ``indices`` in random order.

    Example:
        >>> import ember
        >>> from ember.utils.data import SubsetRandomSampler
        >>> sorted(SubsetRandomSampler([7, 3, 5], generator=ember.Generator().manual_seed(1)))
        [3, 5, 7]
    """

    def __init__(self, indices, generator=None):
        self.indices, self.generator = indices, generator

    def __iter__(self):
        for i in randperm(len(self.indices), generator=self.generator).tolist():
            yield self.indices[i]

    def __len__(self):
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """``num_samples`` indices drawn with probabilities proportional to ``weights``.

    Example:
        >>> import ember
        >>> from ember.utils.data import WeightedRandomSampler
        >>> g = ember.Generator().manual_seed(0)
        >>> list(WeightedRandomSampler([0.0, 1.0, 0.0], 3, generator=g))
        [1, 1, 1]
    """

    def __init__(self, weights, num_samples, replacement=True, generator=None):
        from ..._ops.creation import as_tensor
        from ..._dtype import float64
        _positive_int(num_samples, "num_samples")
        _bool(replacement, "replacement")
        w = as_tensor(weights, dtype=float64)
        if w.dim() != 1:
            raise ValueError("weights should be a 1d sequence but given weights have shape "
                             f"{tuple(w.shape)}")
        self.weights, self.num_samples = w, num_samples
        self.replacement, self.generator = replacement, generator

    def __iter__(self):
        yield from multinomial(self.weights, self.num_samples, self.replacement,
                               generator=self.generator).tolist()

    def __len__(self):
        return self.num_samples


class BatchSampler(Sampler):
    """Groups another sampler's indices into lists of ``batch_size``.

    Example:
        >>> from ember.utils.data import BatchSampler, SequentialSampler
        >>> list(BatchSampler(SequentialSampler(range(5)), 2, drop_last=False))
        [[0, 1], [2, 3], [4]]
        >>> len(BatchSampler(range(5), 2, drop_last=True))
        2
    """

    def __init__(self, sampler, batch_size, drop_last):
        _positive_int(batch_size, "batch_size")
        _bool(drop_last, "drop_last")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self):
        it = iter(self.sampler)
        batch = list(itertools.islice(it, self.batch_size))
        while batch and (len(batch) == self.batch_size or not self.drop_last):
            yield batch
            batch = list(itertools.islice(it, self.batch_size))

    def __len__(self):
        if self.drop_last:
            return len(self.sampler) // self.batch_size
        return (len(self.sampler) + self.batch_size - 1) // self.batch_size


class _InfiniteConstantSampler(Sampler):
    """``None`` forever: the index stream for an IterableDataset, which ignores indices."""

    def __iter__(self):
        while True:
            yield None
