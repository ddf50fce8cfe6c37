"""``ZeroRedundancyOptimizer``: each rank keeps the optimizer state of, and updates, only its
partition of the parameters, then broadcasts them (ZeRO stage 1), as torch's."""
from ... import distributed as dist
from ...optim.optimizer import Optimizer


class ZeroRedundancyOptimizer(Optimizer):
    """Wrap ``optimizer_class`` so its state is partitioned over the group: parameters are
    assigned to ranks greedily (largest first, to the rank with the fewest elements so far,
    as torch); ``step`` updates this rank's partition and broadcasts every partition from its
    owner, so all ranks end with the same parameters.

    Args:
        params: parameters or parameter groups, as for any optimizer.
        optimizer_class (type): the local optimizer, e.g. ``ember.optim.AdamW``.
        process_group (ProcessGroup): default: the default group.
        **defaults: the local optimizer's arguments (``lr=...``).

    Example:
        >>> import ember, ember.distributed as dist
        >>> from ember.distributed.optim import ZeroRedundancyOptimizer
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> lin = ember.nn.Linear(2, 1)
        >>> opt = ZeroRedundancyOptimizer(lin.parameters(), ember.optim.AdamW, lr=0.1)
        >>> lin(ember.ones(1, 2)).sum().backward(); opt.step()
        >>> opt.consolidate_state_dict(to=0); sorted(opt.state_dict()["state"])
        [0, 1]
        >>> dist.destroy_process_group()
    """

    def __init__(self, params, optimizer_class, process_group=None,
                 parameters_as_bucket_view=False, overlap_with_ddp=False, **defaults):
        if overlap_with_ddp:
            raise NotImplementedError("ZeroRedundancyOptimizer(overlap_with_ddp=True) is not "
                                      "implemented in ember")
        super().__init__(params, defaults)
        self.process_group = process_group or dist.group.WORLD
        self.world_size = dist.get_world_size(self.process_group)
        self.rank = dist.get_rank(self.process_group)
        self.global_rank = dist.get_rank()
        self._optimizer_class, self._defaults = optimizer_class, defaults
        self._all_state_dicts = None
        self._partition()

    def _partition(self):
        sizes, self._owner = [0] * self.world_size, {}
        for g in self.param_groups:
            for p in sorted(g["params"], key=lambda t: t.numel(), reverse=True):
                r = sizes.index(min(sizes))
                self._owner[id(p)] = r
                sizes[r] += p.numel()
        local = [dict(g, params=[p for p in g["params"] if self._owner[id(p)] == self.rank])
                 for g in self.param_groups]
        self._local_groups = [i for i, g in enumerate(local) if g["params"]]
        self.optim = self._optimizer_class([local[i] for i in self._local_groups],
                                           **self._defaults) if self._local_groups else None
        for g in self.param_groups:             # the local optimizer's defaults, as torch
            for k, v in (self.optim.defaults if self.optim else {}).items():
                g.setdefault(k, v)

    def add_param_group(self, param_group):
        super().add_param_group(param_group)
        if hasattr(self, "_owner"):             # (not during __init__)
            self._partition()

    def _sync_hyperparams(self):
        for gi, lg in zip(self._local_groups, self.optim.param_groups if self.optim else ()):
            lg.update({k: v for k, v in self.param_groups[gi].items() if k != "params"})

    def step(self, closure=None, **kwargs):
        """Update this rank's partition, then broadcast each partition from its owner."""
        loss = None
        if self.optim is not None:
            self._sync_hyperparams()
            loss = self.optim.step(closure, **kwargs) if closure is not None else \
                self.optim.step(**kwargs)
        elif closure is not None:
            loss = closure()
        from ...nn.parallel.distributed import _broadcast_coalesced
        for r in range(self.world_size):
            mine = [p for g in self.param_groups for p in g["params"] if self._owner[id(p)] == r]
            if mine:
                _broadcast_coalesced(mine, self.process_group, src=self.process_group.ranks[r])
        return loss

    def _local_to_global(self, rank):
        """Global parameter indices (torch's numbering) of ``rank``'s local optimizer's."""
        index = [i for i, p in enumerate(p for g in self.param_groups for p in g["params"])
                 if self._owner[id(p)] == rank]
        return dict(enumerate(index))

    def consolidate_state_dict(self, to=0):
        """Gather every rank's optimizer state on rank ``to`` (call it on all ranks)."""
        sd = self.optim.state_dict() if self.optim is not None else {"state": {}}
        out = [None] * self.world_size if self.global_rank == to else None
        dist.gather_object(sd, out, dst=to, group=self.process_group)
        self._all_state_dicts = out

    def state_dict(self):
        """The whole optimizer's state, numbered as a plain optimizer over the same
        parameters; only on the rank ``consolidate_state_dict`` gathered to."""
        if self._all_state_dicts is None:
            raise RuntimeError("Optimizer state has not been consolidated on this rank. Please "
                               "call `consolidate_state_dict(to)` on all ranks beforehand if "
                               "you meant to save the global state.")
        state = {}
        for r, sd in enumerate(self._all_state_dicts):
            to_global = self._local_to_global(r)
            state.update({to_global[k]: v for k, v in sd["state"].items()})
        sd = super().state_dict()
        sd["state"] = dict(sorted(state.items()))
        return sd

    def load_state_dict(self, state_dict):
        """Load a ``state_dict()``: each rank keeps the state of its own partition."""
        for g, s in zip(self.param_groups, state_dict["param_groups"]):
            g.update({k: v for k, v in s.items() if k != "params"})
        if self.optim is None:
            return
        local = {li: state_dict["state"][gi] for li, gi in self._local_to_global(self.rank)
                 .items() if gi in state_dict["state"]}
        groups, n = [], 0
        for gi in self._local_groups:
            g = {k: v for k, v in state_dict["param_groups"][gi].items() if k != "params"}
            k = len(self.optim.param_groups[len(groups)]["params"])
            groups.append(dict(g, params=list(range(n, n + k))))
            n += k
        self.optim.load_state_dict({"state": local, "param_groups": groups})
