"""DataLoader: batches from a dataset, in the main process or in worker processes, as
``torch.utils.data.DataLoader`` (same arguments, defaults, errors and ``len()`` rules)."""
import math
import multiprocessing
import os
import warnings

from .collate import default_collate, default_convert
from .dataset import IterableDataset
from .graph_settings import _is_datapipe
from .sampler import BatchSampler, RandomSampler, SequentialSampler, _InfiniteConstantSampler

_FROZEN = ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers")


def _check_args(dataset, shuffle, sampler, batch_sampler, batch_size, drop_last, num_workers,
                timeout, prefetch_factor, persistent_workers):
    """Raise torch's ValueError for a bad combination of DataLoader arguments."""
    if num_workers < 0:
        raise ValueError("num_workers option should be non-negative; use num_workers=0 to "
                         "disable multiprocessing.")
    if timeout < 0:
        raise ValueError("timeout option should be non-negative")
    if num_workers == 0 and prefetch_factor is not None:
        raise ValueError("prefetch_factor option could only be specified in multiprocessing."
                         "let num_workers > 0 to enable multiprocessing, otherwise set "
                         "prefetch_factor to None.")
    if prefetch_factor is not None and prefetch_factor < 0:
        raise ValueError("prefetch_factor option should be non-negative")
    if persistent_workers and num_workers == 0:
        raise ValueError("persistent_workers option needs num_workers > 0")
    if isinstance(dataset, IterableDataset):
        # NOTE: an IterableDataset decides its own order; torch refuses these options (an
        # IterDataPipe takes shuffle: it turns its Shufflers on or off)
        if shuffle not in (False, None) and not _is_datapipe(dataset):
            raise ValueError("DataLoader with IterableDataset: expected unspecified shuffle "
                             f"option, but got shuffle={shuffle}")
        if sampler is not None:
            raise ValueError("DataLoader with IterableDataset: expected unspecified sampler "
                             f"option, but got sampler={sampler}")
        if batch_sampler is not None:
            raise ValueError("DataLoader with IterableDataset: expected unspecified "
                             f"batch_sampler option, but got batch_sampler={batch_sampler}")
    if sampler is not None and shuffle:
        raise ValueError("sampler option is mutually exclusive with shuffle")
    if batch_sampler is not None and (batch_size != 1 or shuffle or sampler is not None or
                                      drop_last):
        raise ValueError("batch_sampler option is mutually exclusive with batch_size, "
                         "shuffle, sampler, and drop_last")
    if batch_sampler is None and batch_size is None and drop_last:
        raise ValueError("batch_size=None option disables auto-batching and is mutually "
                         "exclusive with drop_last")


class DataLoader:
    """Iterate over ``dataset`` in batches, like ``torch.utils.data.DataLoader``.

    Args:
        dataset: a map-style :class:`Dataset` (or anything with ``__getitem__`` and
            ``__len__``) or an :class:`IterableDataset`.
        batch_size (int or None, default 1): samples per batch; ``None`` turns batching off.
        shuffle (bool, default False): reshuffle every epoch (map-style datasets only).
        sampler, batch_sampler: the index order, or the batches of indices, instead of the
            default sequential or random order.
        num_workers (int, default 0): worker processes loading in parallel; 0 loads in the
            main process. Batches come back through shared memory.
        collate_fn: turns a list of samples into a batch (default: :func:`default_collate`,
            or :func:`default_convert` when batching is off).
        pin_memory (bool, default False): pin batches (their tensors in page-locked memory)
            for asynchronous copies to the GPU; without one, like torch, this warns and does
            nothing.
        drop_last (bool, default False): drop the last, short batch.
        timeout (float, default 0): seconds to wait for a worker's batch before raising
            RuntimeError; 0 waits forever (a dead worker still raises at once).
        worker_init_fn: called as ``worker_init_fn(worker_id)`` in each worker after seeding.
        multiprocessing_context: a start method name or context (default: fork on Linux).
        generator: draws the shuffling order and the workers' base seed.
        prefetch_factor (int, default 2 with workers): batches in flight per worker.
        persistent_workers (bool, default False): keep workers alive between epochs.
        in_order (bool, default True): with False, batches come as soon as a worker has one.

    Example:
        >>> import ember
        >>> from ember.utils.data import DataLoader, TensorDataset
        >>> ds = TensorDataset(ember.arange(10.0).reshape(5, 2), ember.arange(5))
        >>> loader = DataLoader(ds, batch_size=2)
        >>> len(loader), [y.tolist() for _, y in loader]
        (3, [[0, 1], [2, 3], [4]])
        >>> next(iter(loader))[0].shape
        torch.Size([2, 2])
    """

    __initialized = False

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor=None, persistent_workers=False, pin_memory_device="",
                 in_order=True):
        _check_args(dataset, shuffle, sampler, batch_sampler, batch_size, drop_last,
                    num_workers, timeout, prefetch_factor, persistent_workers)
        if _is_datapipe(dataset) and shuffle is not None:
            from .graph_settings import apply_shuffle_settings
            dataset, shuffle = apply_shuffle_settings(dataset, shuffle=shuffle), None
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        self.dataset, self.num_workers, self.prefetch_factor = dataset, num_workers, prefetch_factor
        self.pin_memory, self.pin_memory_device, self.timeout = pin_memory, \
            pin_memory_device, timeout
        self.worker_init_fn, self.in_order = worker_init_fn, in_order
        self.multiprocessing_context = multiprocessing_context
        self._iterable = isinstance(dataset, IterableDataset)
        if batch_sampler is not None:
            batch_size, drop_last = None, False
        if sampler is None:
            sampler = (_InfiniteConstantSampler() if self._iterable else
                       RandomSampler(dataset, generator=generator) if shuffle else
                       SequentialSampler(dataset))
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size, self.drop_last, self.sampler = batch_size, drop_last, sampler
        self.batch_sampler, self.generator = batch_sampler, generator
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self.collate_fn, self.persistent_workers = collate_fn, persistent_workers
        self._IterableDataset_len_called = None
        self._iterator = None
        self.__initialized = True
        self.check_worker_number_rationality()

    multiprocessing_context = property(lambda self: self.__multiprocessing_context)

    @multiprocessing_context.setter
    def multiprocessing_context(self, ctx):
        if ctx is not None:
            if self.num_workers == 0:
                raise ValueError("multiprocessing_context can only be used with multi-process "
                                 f"loading (num_workers > 0), but got num_workers=0")
            if isinstance(ctx, str):
                methods = multiprocessing.get_all_start_methods()
                if ctx not in methods:
                    raise ValueError("multiprocessing_context option should specify a valid "
                                     f"start method in {methods!r}, but got "
                                     f"multiprocessing_context={ctx!r}")
                ctx = multiprocessing.get_context(ctx)
            if not isinstance(ctx, multiprocessing.context.BaseContext):
                raise TypeError("multiprocessing_context option should be a valid context "
                                "object or a string specifying the start method, but got "
                                f"multiprocessing_context={ctx}")
        self.__multiprocessing_context = ctx

    def __setattr__(self, attr, val):
        if self.__initialized and attr in _FROZEN:
            raise ValueError(f"{attr} attribute should not be set after "
                             f"{self.__class__.__name__} is initialized")
        super().__setattr__(attr, val)

    _auto_collation = property(lambda self: self.batch_sampler is not None)

    @property
    def _index_sampler(self):
        return self.batch_sampler if self._auto_collation else self.sampler

    def _get_iterator(self):
        from .loader_iter import MultiProcessIter, SingleProcessIter
        return SingleProcessIter(self) if self.num_workers == 0 else MultiProcessIter(self)

    def __iter__(self):
        # Persistent workers live in the one iterator this loader keeps, reset every epoch.
        if not (self.persistent_workers and self.num_workers > 0):
            return self._get_iterator()
        if self._iterator is None:
            self._iterator = self._get_iterator()
        else:
            self._iterator._reset(self)
        return self._iterator

    def __len__(self):
        if not self._iterable:
            return len(self._index_sampler)
        # NOTE: an IterableDataset's own __len__ is trusted (torch does too); the iterator
        # warns if it then yields more batches than this.
        length = self._IterableDataset_len_called = len(self.dataset)
        if self.batch_size is not None:
            length = length // self.batch_size if self.drop_last else \
                math.ceil(length / self.batch_size)
        return length

    def check_worker_number_rationality(self):
        """Warn when there are more workers than CPUs this process may use."""
        if not self.num_workers:
            return
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        if cpus is None or self.num_workers > cpus:
            warnings.warn(f"This DataLoader will create {self.num_workers} worker processes in "
                          f"total. Our suggested max number of worker in current system is "
                          f"{cpus}, which is smaller than what this DataLoader is going to "
                          "create. Please be aware that excessive worker creation might get "
                          "DataLoader running slow or even freeze, lower the worker number to "
                          "avoid potential slowness/freeze if necessary.", stacklevel=2)

