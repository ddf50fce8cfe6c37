"""The built-in iterable DataPipes, each with its functional name (``dp.map(fn)``):
``IterableWrapperIterDataPipe``, ``map``, ``filter``, ``batch``, ``unbatch``, ``concat``, ``zip``,
``collate``, ``shuffle``, ``sharding_filter``, as torch's ``torch.utils.data.datapipes.iter``."""
import copy
import random

from .datapipe import DataChunk, _check_unpickable_fn, IterDataPipe, functional_datapipe

__all__ = ["IterableWrapper", "Mapper", "Filter", "Batcher", "UnBatcher", "Concater", "Zipper",
           "Collator", "Shuffler", "ShardingFilter"]


def _len(dp, n):
    """``n()`` where ``dp``'s sources have lengths, else torch's TypeError."""
    try:
        return n()
    except TypeError:
        raise TypeError(f"{type(dp).__name__} instance doesn't have valid length") from None


class IterableWrapperIterDataPipe(IterDataPipe):
    """The elements of an iterable (deep-copied per iteration unless ``deepcopy=False``).

    Example:
        >>> from ember.utils.data.datapipes.iter import IterableWrapperIterDataPipe
        >>> list(IterableWrapperIterDataPipe(range(6)).map(lambda x: x * 2).batch(4))
        [[0, 2, 4, 6], [8, 10]]
    """

    def __init__(self, iterable, deepcopy=True):
        self.iterable, self.deepcopy = iterable, deepcopy

    def __iter__(self):
        source = self.iterable
        if self.deepcopy:
            try:
                source = copy.deepcopy(self.iterable)
            except TypeError:       # (not copyable: a generator, iterated as it is)
                pass
        yield from source

    def __len__(self):
        return len(self.iterable)


def _columns(data, col):
    return tuple(data[c] for c in col) if isinstance(col, (list, tuple)) else (data[col],)


@functional_datapipe("map")
class MapperIterDataPipe(IterDataPipe):
    """``fn`` of each element; with ``input_col`` of the given column(s), written to
    ``output_col`` (or in place of the input column; -1 appends)."""

    def __init__(self, datapipe, fn, input_col=None, output_col=None):
        if input_col is None and output_col is not None:
            raise ValueError("`output_col` must be None when `input_col` is None.")
        if isinstance(output_col, (list, tuple)):
            if len(output_col) > 1:
                raise ValueError("`output_col` must be a single-element list or tuple")
            output_col = output_col[0]
        _check_unpickable_fn(fn)
        self.datapipe, self.fn, self.input_col, self.output_col = datapipe, fn, input_col, \
            output_col

    def _apply_fn(self, data):
        if self.input_col is None:
            return self.fn(data)
        res = self.fn(*_columns(data, self.input_col))
        was_tuple, data = isinstance(data, tuple), list(data) if isinstance(data, tuple) else data
        if self.output_col is None:
            if isinstance(self.input_col, (list, tuple)):
                data[self.input_col[0]] = res
                for idx in sorted(self.input_col[1:], reverse=True):
                    del data[idx]
            else:
                data[self.input_col] = res
        elif self.output_col == -1:
            data.append(res)
        else:
            data[self.output_col] = res
        return tuple(data) if was_tuple else data

    def __iter__(self):
        for data in self.datapipe:
            yield self._apply_fn(data)

    def __len__(self):
        return _len(self, lambda: len(self.datapipe))


@functional_datapipe("filter")
class FilterIterDataPipe(IterDataPipe):
    """The elements ``filter_fn`` (of ``input_col`` where given) accepts."""

    def __init__(self, datapipe, filter_fn, input_col=None):
        _check_unpickable_fn(filter_fn)
        self.datapipe, self.filter_fn, self.input_col = datapipe, filter_fn, input_col

    def __iter__(self):
        for data in self.datapipe:
            keep = self.filter_fn(data) if self.input_col is None else \
                self.filter_fn(*_columns(data, self.input_col))
            if not isinstance(keep, bool):
                raise ValueError("Boolean output is required for `filter_fn` of "
                                 "FilterIterDataPipe, got", type(keep))
            if keep:
                yield data


@functional_datapipe("batch")
class BatcherIterDataPipe(IterDataPipe):
    """Consecutive elements in ``DataChunk``s of ``batch_size`` (the last one shorter unless
    ``drop_last``)."""

    def __init__(self, datapipe, batch_size, drop_last=False, wrapper_class=DataChunk):
        if batch_size <= 0:
            raise AssertionError("Batch size is required to be larger than 0!")
        self.datapipe, self.batch_size, self.drop_last = datapipe, batch_size, drop_last
        self.wrapper_class = wrapper_class

    def __iter__(self):
        batch = []
        for x in self.datapipe:
            batch.append(x)
            if len(batch) == self.batch_size:
                yield self.wrapper_class(batch)
                batch = []
        if batch and not self.drop_last:
            yield self.wrapper_class(batch)

    def __len__(self):
        n = _len(self, lambda: len(self.datapipe))
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


@functional_datapipe("unbatch")
class UnBatcherIterDataPipe(IterDataPipe):
    """The elements of the batches, ``unbatch_level`` levels deep (-1: all the way)."""

    def __init__(self, datapipe, unbatch_level=1):
        self.datapipe, self.unbatch_level = datapipe, unbatch_level

    def __iter__(self):
        for element in self.datapipe:
            yield from self._dive(element, self.unbatch_level)

    def _dive(self, element, level):
        if level < -1:
            raise ValueError("unbatch_level must be -1 or >= 0")
        if level == 0 or level == -1 and not isinstance(element, list):
            yield element
        elif isinstance(element, list):
            for item in element:
                yield from self._dive(item, level - 1 if level > 0 else -1)
        else:
            raise IndexError(f"unbatch_level {self.unbatch_level} exceeds the depth of the "
                             "DataPipe")


def _check_pipes(datapipes):
    if len(datapipes) == 0:
        raise ValueError("Expected at least one DataPipe, but got nothing")
    if not all(isinstance(dp, IterDataPipe) for dp in datapipes):
        raise TypeError("Expected all inputs to be `IterDataPipe`")


@functional_datapipe("concat")
class ConcaterIterDataPipe(IterDataPipe):
    """The elements of each DataPipe, one after the other."""

    def __init__(self, *datapipes):
        _check_pipes(datapipes)
        self.datapipes = datapipes

    def __iter__(self):
        for dp in self.datapipes:
            yield from dp

    def __len__(self):
        return _len(self, lambda: sum(len(dp) for dp in self.datapipes))


@functional_datapipe("zip")
class ZipperIterDataPipe(IterDataPipe):
    """Tuples of the DataPipes' elements, up to the shortest."""

    def __init__(self, *datapipes):
        if not all(isinstance(dp, IterDataPipe) for dp in datapipes):
            raise TypeError("All inputs are required to be `IterDataPipe` for `ZipIterDataPipe`.")
        self.datapipes = datapipes

    def __iter__(self):
        yield from zip(*self.datapipes)

    def __len__(self):
        return _len(self, lambda: min(len(dp) for dp in self.datapipes))


@functional_datapipe("collate")
class CollatorIterDataPipe(MapperIterDataPipe):
    """Each element (a batch) through ``collate_fn`` (``default_collate`` by default)."""

    def __init__(self, datapipe, conversion=None, collate_fn=None):
        from ..collate import default_collate
        super().__init__(datapipe, fn=collate_fn or default_collate)


@functional_datapipe("shuffle")
class ShufflerIterDataPipe(IterDataPipe):
    """The elements in random order, through a buffer of ``buffer_size``; its generator is
    seeded from ember's at each iteration (``set_seed`` fixes it), as torch's."""

    def __init__(self, datapipe, *, buffer_size=10000, unbatch_level=0):
        if buffer_size <= 0:
            raise AssertionError("buffer_size should be larger than 0")
        self.datapipe = datapipe if unbatch_level == 0 else datapipe.unbatch(unbatch_level)
        self.buffer_size, self._enabled, self._seed, self._rng = buffer_size, True, None, \
            random.Random()

    def set_shuffle(self, shuffle=True):
        self._enabled = shuffle
        return self

    def set_seed(self, seed):
        self._seed = seed
        return self

    def __iter__(self):
        if not self._enabled:
            yield from self.datapipe
            return
        buffer = []
        for x in self.datapipe:
            if len(buffer) == self.buffer_size:
                idx = self._rng.randint(0, len(buffer) - 1)
                val, buffer[idx] = buffer[idx], x
                yield val
            else:
                buffer.append(x)
        while buffer:
            idx = self._rng.randint(0, len(buffer) - 1)
            yield buffer.pop(idx)

    def __len__(self):
        return _len(self, lambda: len(self.datapipe))

    def reset(self):
        if self._enabled:
            import ember
            if self._seed is None:
                self._seed = int(ember.empty((), dtype=ember.int64).random_().item())
            self._rng.seed(self._seed)
            self._seed = None


@functional_datapipe("sharding_filter")
class ShardingFilterIterDataPipe(IterDataPipe):
    """Every ``num_of_instances``-th element from ``instance_id`` (``apply_sharding``), so
    each DataLoader worker or rank reads its own share."""

    def __init__(self, source_datapipe, sharding_group_filter=None):
        self.source_datapipe, self.num_of_instances, self.instance_id = source_datapipe, 1, 0

    def apply_sharding(self, num_of_instances, instance_id, sharding_group=None):
        if instance_id >= num_of_instances:
            raise ValueError(f"instance_id({instance_id}) should be smaller than "
                             f"num_of_instances({num_of_instances})")
        self.num_of_instances, self.instance_id = num_of_instances, instance_id

    def __iter__(self):
        for i, item in enumerate(self.source_datapipe):
            if i % self.num_of_instances == self.instance_id:
                yield item

    def __len__(self):
        n = _len(self, lambda: len(self.source_datapipe))
        return n // self.num_of_instances + (1 if self.instance_id < n % self.num_of_instances
                                             else 0)


IterableWrapper = IterableWrapperIterDataPipe
Mapper = MapperIterDataPipe
Filter = FilterIterDataPipe
Batcher = BatcherIterDataPipe
UnBatcher = UnBatcherIterDataPipe
Concater = ConcaterIterDataPipe
Zipper = ZipperIterDataPipe
Collator = CollatorIterDataPipe
Shuffler = ShufflerIterDataPipe
ShardingFilter = ShardingFilterIterDataPipe
