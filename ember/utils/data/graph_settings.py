"""``torch.utils.data.graph_settings``: settings applied across a DataPipe graph (what the
DataLoader does with an ``IterDataPipe``): sharding over workers and ranks, shuffling on or
off, and fresh seeds for the random DataPipes each epoch."""
import inspect
import warnings

__all__ = ["apply_random_seed", "apply_sharding", "apply_shuffle_settings",
           "get_all_graph_pipes", "traverse_dps"]


def _is_datapipe(dataset):
    """Whether ``dataset`` is an IterDataPipe (DataPipes load only when a program uses them)."""
    import sys
    mod = sys.modules.get("ember.utils.data.datapipes.datapipe")
    return mod is not None and isinstance(dataset, mod.IterDataPipe)


def _sharding_worker_init_fn(worker_init_fn, world_size, rank, worker_id):
    """A DataLoader worker's init for an IterDataPipe: its share of the data, over all the
    workers of all ranks, then the user's ``worker_init_fn``."""
    from .worker import get_worker_info
    info = get_worker_info()
    apply_sharding(info.dataset, info.num_workers * world_size, worker_id * world_size + rank)
    if worker_init_fn is not None:
        worker_init_fn(worker_id)


def traverse_dps(datapipe):
    """The graph below ``datapipe``: ``{id(dp): (dp, graph of its sources)}``, sources being
    the DataPipes its attributes hold (alone or in lists and tuples)."""
    from .datapipes.datapipe import _DataPipeBase
    out = {}
    for v in vars(datapipe).values() if hasattr(datapipe, "__dict__") else ():
        for dp in v if isinstance(v, (list, tuple)) else (v,):
            if isinstance(dp, _DataPipeBase) and id(dp) not in out:
                out[id(dp)] = (dp, traverse_dps(dp)[id(dp)][1])
    return {id(datapipe): (datapipe, out)}


def get_all_graph_pipes(graph):
    """Every DataPipe of a ``traverse_dps`` graph, once each."""
    seen, out = set(), []

    def walk(g):
        for i, (dp, sub) in g.items():
            if i not in seen:
                seen.add(i)
                out.append(dp)
                walk(sub)
    walk(graph)
    return out


def _has_method(dp, *names):
    return all(inspect.ismethod(getattr(dp, n, None)) for n in names)


def apply_sharding(datapipe, num_of_instances, instance_id, sharding_group=None):
    """Give each ``sharding_filter`` (a DataPipe with ``apply_sharding``) its share; two on
    one branch raise (the data would be sharded twice)."""
    def walk(graph, applied=None):
        for dp, sub in graph.values():
            here = applied
            if _has_method(dp, "apply_sharding"):
                if applied is not None:
                    raise RuntimeError("Sharding twice on a single pipeline is likely unintended "
                                       "and will cause data loss. Sharding already applied to "
                                       f"{applied} while trying to apply to {dp}")
                dp.apply_sharding(num_of_instances, instance_id)
                here = dp
            walk(sub, here)
    walk(traverse_dps(datapipe))
    return datapipe


def apply_shuffle_settings(datapipe, shuffle=None):
    """Turn every Shuffler of the graph on or off (None: leave them); ``shuffle=True`` with
    none adds one at the end, with torch's warning."""
    if shuffle is None:
        return datapipe
    shufflers = [dp for dp in get_all_graph_pipes(traverse_dps(datapipe))
                 if _has_method(dp, "set_shuffle", "set_seed")]
    if not shufflers and shuffle:
        warnings.warn("`shuffle=True` was set, but the datapipe does not contain a `Shuffler`. "
                      "Adding one at the end. Be aware that the default buffer size might not "
                      "be sufficient for your task.", stacklevel=2)
        datapipe = datapipe.shuffle()
        shufflers = [datapipe]
    for s in shufflers:
        s.set_shuffle(shuffle)
    return datapipe


def apply_random_seed(datapipe, rng):
    """Seed each random DataPipe (one with ``set_seed``) of the graph from generator ``rng``."""
    from ..._dtype import int64
    from ..._ops.creation import empty
    for dp in get_all_graph_pipes(traverse_dps(datapipe)):
        if _has_method(dp, "set_seed"):
            dp.set_seed(int(empty((), dtype=int64).random_(generator=rng).item()))
    return datapipe
