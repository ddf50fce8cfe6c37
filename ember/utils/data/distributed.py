"""DistributedSampler: each of ``num_replicas`` processes reads its own share of a dataset,
as ``torch.utils.data.distributed.DistributedSampler``."""
import math

import numpy as np

from .sampler import Sampler


def _world(what):
    try:
        from ... import distributed as dist
    except ImportError:
        dist = None
    if dist is None or not getattr(dist, "is_available", lambda: False)():
        raise RuntimeError("Requires distributed package to be available")
    return dist.get_world_size() if what == "size" else dist.get_rank()


def _torch_randperm(n, seed):
    """``torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()``.

    NOTE: the shuffle must be torch's to the index, so a job that mixes ember and torch ranks,
    or resumes a torch run, reads the same samples: torch's CPU generator is MT19937 seeded
    with the low 32 bits of the seed (NumPy's legacy RandomState seeds the same way), and its
    randperm is a Fisher-Yates pass taking ``random() % (n - i)``."""
    draws = np.random.RandomState(seed & 0xFFFFFFFF).randint(0, 2 ** 32, max(n - 1, 0),
                                                              dtype=np.uint32).tolist()
    p = list(range(n))
    for i, r in enumerate(draws):
        z = i + r % (n - i)
        p[i], p[z] = p[z], p[i]
    return p


class DistributedSampler(Sampler):
    """Indices for replica ``rank`` of ``num_replicas``: every ``num_replicas``-th index of
    one (shuffled, if ``shuffle``) order, padded by repetition to an equal share, or trimmed
    with ``drop_last``. Call ``set_epoch`` every epoch so the shuffle changes; every replica
    must use the same ``seed``.

    Example:
        >>> from ember.utils.data.distributed import DistributedSampler
        >>> [list(DistributedSampler(range(5), num_replicas=2, rank=r, shuffle=False))
        ...  for r in (0, 1)]
        [[0, 2, 4], [1, 3, 0]]
    """

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False):
        num_replicas = _world("size") if num_replicas is None else num_replicas
        rank = _world("rank") if rank is None else rank
        if rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval [0, "
                             f"{num_replicas - 1}]")
        self.dataset, self.num_replicas, self.rank, self.epoch = dataset, num_replicas, rank, 0
        self.drop_last, self.shuffle, self.seed = drop_last, shuffle, seed
        n = len(dataset)
        if drop_last and n % num_replicas:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self):
        n = len(self.dataset)
        indices = _torch_randperm(n, self.seed + self.epoch) if self.shuffle else list(range(n))
        if self.drop_last:
            indices = indices[:self.total_size]
        else:                 # repeat from the front until every replica has a full share
            indices = (indices * math.ceil(self.total_size / n))[:self.total_size]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch):
        """Set the epoch, which seeds this epoch's shuffle (with ``seed``)."""
        self.epoch = epoch
