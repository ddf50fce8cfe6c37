"""``torch.optim.swap_in_optimizer_params_and_state``: run an optimizer's API on other
parameters and a ``state_dict``-shaped state, the live ones restored after."""
import contextlib
from collections import defaultdict

_PRE = "swap_in_optimizer_params_and_state requires "


def _prepare(optimizer, params, osd):
    """(state by packed id, [(live group, swap-in group, swap-in params)]) after torch's
    checks of the ``state_dict`` shape against the live optimizer."""
    from .._tensor import Tensor
    if not optimizer.state:
        raise RuntimeError(_PRE + "initialized optimizer state.")
    if not isinstance(osd, dict):
        raise RuntimeError(_PRE + "a DCP-style optimizer state_dict.")
    state, groups = osd.get("state"), osd.get("param_groups")
    if not isinstance(state, dict):
        raise RuntimeError(_PRE + "swapin_optim_state['state'] to be a dict mapping packed "
                           f"parameter ids to per-param state dicts, got {type(state).__name__}.")
    if any(isinstance(k, Tensor) for k in state):
        raise RuntimeError(_PRE + "optimizer.state_dict()-style state keyed by packed parameter "
                           "ids.")
    if any(isinstance(k, int) and not isinstance(v, dict) for k, v in state.items()):
        raise RuntimeError(_PRE + "per-parameter optimizer state entries to be dictionaries.")
    if not isinstance(groups, list):
        raise RuntimeError(_PRE + "swapin_optim_state['param_groups'] to be a list of "
                           f"param-group dicts, got {type(groups).__name__}.")
    if len(optimizer.param_groups) != len(groups):
        raise RuntimeError("swapin_optim_state has a different number of parameter groups than "
                           "the live optimizer.")
    flat, offset, seen, infos = list(params.values()), 0, set(), []
    for idx, (group, new) in enumerate(zip(optimizer.param_groups, groups)):
        if not isinstance(new, dict):
            raise RuntimeError(_PRE + "each optimizer param group to be a dictionary.")
        ids = new.get("params")
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            raise RuntimeError(_PRE + "optimizer.state_dict()-style param_groups[*]['params'] "
                               "entries keyed by packed parameter ids.")
        if len(group["params"]) != len(ids):
            raise RuntimeError(f"swapin_optim_state param group {idx} has a different number "
                               "of params than the live optimizer param group.")
        only_new, only_live = [k for k in new if k not in group], [k for k in group if k not in new]
        if only_new or only_live:
            raise RuntimeError(_PRE + "optimizer.state_dict()-style param group keys to exactly "
                               f"match the live optimizer group keys for group {idx}. Keys only "
                               f"in swap-in: {only_new}. Keys only in live: {only_live}.")
        seen.update(ids)
        if offset + len(ids) > len(flat):
            raise RuntimeError(_PRE + "the explicit parameter state to match "
                               "optimizer.param_groups ordering.")
        infos.append((group, new, flat[offset:offset + len(ids)]))
        offset += len(ids)
    extra = [k for k in state if k not in seen]
    if extra:
        raise RuntimeError(_PRE + "swapin_optim_state['state'] to be keyed only by packed "
                           f"parameter ids from param_groups[*]['params']; got extra keys "
                           f"{extra!r}.")
    return state, infos


@contextlib.contextmanager
def swap_in_optimizer_params_and_state(optimizer, swapin_parameters, swapin_optim_state):
    """Within the block, ``optimizer``'s parameters are ``swapin_parameters`` (a dict, in the
    order of the optimizer's parameters) and its groups and state those of
    ``swapin_optim_state`` (an ``optimizer.state_dict()``); ``step()`` updates them. In-place
    updates of the given state's tensors show in it; the live optimizer is restored on exit.

    Example:
        >>> import ember
        >>> p = ember.nn.Parameter(ember.ones(2))
        >>> opt = ember.optim.SGD([p], lr=0.1, momentum=0.9)
        >>> p.grad = ember.ones(2); opt.step()
        >>> q = ember.nn.Parameter(ember.zeros(2)); q.grad = ember.ones(2)
        >>> with ember.optim.swap_in_optimizer_params_and_state(opt, {"w": q}, opt.state_dict()):
        ...     opt.step()
        >>> q, p
        (Parameter containing:
        tensor([-0.1900, -0.1900], requires_grad=True), Parameter containing:
        tensor([0.9000, 0.9000], requires_grad=True))
    """
    state, infos = _prepare(optimizer, swapin_parameters, swapin_optim_state)
    original, snapshots = optimizer.state, [dict(g) for g in optimizer.param_groups]
    try:
        swapped = defaultdict(dict)
        for live, new, params in infos:
            live["params"] = params
            live.update((k, v) for k, v in new.items() if k != "params")
            for p, pid in zip(params, new["params"]):
                # (a shallow copy: in-place updates reach the caller's tensors, new keys don't)
                swapped[p] = dict(state.get(pid, {}))
        optimizer.state = swapped
        yield
    finally:
        for g, snap in zip(optimizer.param_groups, snapshots):
            g.clear()
            g.update(snap)
        optimizer.state = original
