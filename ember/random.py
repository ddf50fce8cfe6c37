"""``torch.random``: seeding and the state of the default generator, and ``fork_rng``.

ember draws on the host (see ``ember/_ops/random.py``): the cpu's default generator and one per
GPU, made on first use.
"""
import contextlib

from ._ops.random import (default_generator, get_rng_state, initial_seed,  # noqa: F401
                          manual_seed, seed, set_rng_state)


@contextlib.contextmanager
def fork_rng(devices=None, enabled=True, _caller="fork_rng", _devices_kw="devices",
             device_type=None):
    """Run the block with a copy of the random state and restore it afterwards, so random
    numbers drawn inside do not change those drawn after.

    Args:
        devices (iterable of devices, optional): the GPUs whose generators to save as well;
            by default every GPU generator made so far (torch: every visible GPU).
        enabled (bool): if False, the block runs on the live state. Default: True.
        device_type (str, optional): accepted for torch's signature.

    Example:
        >>> import ember
        >>> _ = ember.manual_seed(0)
        >>> with ember.random.fork_rng():
        ...     _ = ember.rand(3)
        >>> a = ember.rand(1); _ = ember.manual_seed(0)
        >>> bool((a == ember.rand(1)).all())
        True
    """
    if not enabled:
        yield
        return
    from ._device import to_device
    from ._ops.random import cuda_generators, device_generator
    gens = list(cuda_generators.values()) if devices is None else \
        [device_generator(to_device(d if not isinstance(d, int) else f"cuda:{d}"))
         for d in devices]
    state, saved = get_rng_state(), [g.get_state() for g in gens]
    try:
        yield
    finally:
        set_rng_state(state)
        for g, s in zip(gens, saved):
            g.set_state(s)


def thread_safe_generator():
    """The generator of the DataLoader thread worker this runs in, for transforms that draw
    random numbers; None elsewhere (the default generator is then used). NOTE: ember's
    DataLoader runs its workers as processes (each seeded on its own), so this is None there
    as well, as torch's is in process workers.

    Example:
        >>> import ember
        >>> ember.randint(0, 10, (3,), generator=ember.thread_safe_generator()).shape
        torch.Size([3])
    """
    from .utils.data import get_worker_info
    info = get_worker_info()
    if info is not None and getattr(info, "worker_method", None) == "thread" and \
            getattr(info, "rng", None) is not None:
        return info.rng.torch_generator
    return None
