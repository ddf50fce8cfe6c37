"""The built-in map-style DataPipes, each with its functional name: ``SequenceWrapperMapDataPipe``,
``map``, ``batch``, ``concat``, ``zip``, as torch's ``torch.utils.data.datapipes.map``."""
import copy

from .datapipe import _check_unpickable_fn, MapDataPipe, functional_datapipe
from .iter import BatcherIterDataPipe

__all__ = ["SequenceWrapper", "Mapper", "Batcher", "Concater", "Zipper"]


class SequenceWrapperMapDataPipe(MapDataPipe):
    """The items of a sequence (deep-copied unless ``deepcopy=False``)."""

    def __init__(self, sequence, deepcopy=True):
        self.sequence = copy.deepcopy(sequence) if deepcopy else sequence

    def __getitem__(self, index):
        return self.sequence[index]

    def __len__(self):
        return len(self.sequence)


@functional_datapipe("map")
class MapperMapDataPipe(MapDataPipe):
    """``fn`` of each item."""

    def __init__(self, datapipe, fn):
        _check_unpickable_fn(fn)
        self.datapipe, self.fn = datapipe, fn

    def __getitem__(self, index):
        return self.fn(self.datapipe[index])

    def __len__(self):
        return len(self.datapipe)


@functional_datapipe("batch")
class BatcherMapDataPipe(MapDataPipe):
    """Item ``i`` is the ``DataChunk`` of items ``i*batch_size`` on."""

    __init__ = BatcherIterDataPipe.__init__

    def __getitem__(self, index):
        batch = []
        for i in range(index * self.batch_size, (index + 1) * self.batch_size):
            try:
                batch.append(self.datapipe[i])
            except IndexError as e:
                if not self.drop_last and batch:
                    return self.wrapper_class(batch)
                raise IndexError(f"Index {index} is out of bound.") from e
        return self.wrapper_class(batch)

    def __len__(self):
        n = len(self.datapipe)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


def _check_maps(datapipes):
    if len(datapipes) == 0:
        raise ValueError("Expected at least one DataPipe, but got nothing")
    if not all(isinstance(dp, MapDataPipe) for dp in datapipes):
        raise TypeError("Expected all inputs to be `MapDataPipe`")
    return datapipes


@functional_datapipe("concat")
class ConcaterMapDataPipe(MapDataPipe):
    """The items of each DataPipe, one after the other."""

    def __init__(self, *datapipes):
        self.datapipes = _check_maps(datapipes)

    def __getitem__(self, index):
        offset = 0
        for dp in self.datapipes:
            if index - offset < len(dp):
                return dp[index - offset]
            offset += len(dp)
        raise IndexError(f"Index {index} is out of range.")

    def __len__(self):
        return sum(len(dp) for dp in self.datapipes)


@functional_datapipe("zip")
class ZipperMapDataPipe(MapDataPipe):
    """Tuples of the DataPipes' items, up to the shortest."""

    def __init__(self, *datapipes):
        self.datapipes = _check_maps(datapipes)

    def __getitem__(self, index):
        try:
            return tuple(dp[index] for dp in self.datapipes)
        except IndexError as e:
            raise IndexError(f"Index {index} is out of range for one of the input MapDataPipes "
                             f"{self.datapipes}.") from e

    def __len__(self):
        return min(len(dp) for dp in self.datapipes)


SequenceWrapper = SequenceWrapperMapDataPipe
Mapper = MapperMapDataPipe
Batcher = BatcherMapDataPipe
Concater = ConcaterMapDataPipe
Zipper = ZipperMapDataPipe
