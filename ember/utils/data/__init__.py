"""Datasets, samplers and the DataLoader, with ``torch.utils.data``'s names and behaviour."""
from .collate import default_collate, default_convert
from .dataloader import DataLoader
from .dataset import (ChainDataset, ConcatDataset, Dataset, IterableDataset, StackDataset,
                      Subset, TensorDataset, random_split)
from .distributed import DistributedSampler
from .sampler import (BatchSampler, RandomSampler, Sampler, SequentialSampler,
                      SubsetRandomSampler, WeightedRandomSampler)
from .worker import WorkerInfo, get_worker_info

_DATAPIPE_NAMES = ("DFIterDataPipe", "DataChunk", "IterDataPipe", "MapDataPipe",
                   "argument_validation", "functional_datapipe", "guaranteed_datapipes_determinism",
                   "non_deterministic", "runtime_validation", "runtime_validation_disabled")


def __getattr__(name):
    # DataPipes load on first use (most programs use the DataLoader only)
    if name in _DATAPIPE_NAMES or name == "datapipes":
        import importlib     # (not ``from . import``: its hasattr would call this again)
        datapipes = importlib.import_module(".datapipes", __name__)
        globals().update({n: getattr(datapipes, n) for n in _DATAPIPE_NAMES}, datapipes=datapipes)
        return globals()[name]
    raise AttributeError(f"module 'ember.utils.data' has no attribute '{name}'")

__all__ = ["BatchSampler", "ChainDataset", "ConcatDataset", "DataLoader", "Dataset",
           "DistributedSampler", "IterableDataset", "RandomSampler", "Sampler",
           "SequentialSampler", "StackDataset", "Subset", "SubsetRandomSampler",
           "TensorDataset", "WeightedRandomSampler", "WorkerInfo", "default_collate",
           "default_convert", "get_worker_info", "random_split", *_DATAPIPE_NAMES]
