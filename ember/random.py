"""``torch.random``: seeding and the state of the default generator, and ``fork_rng``.

ember's devices all draw from one host generator (see ``ember/_ops/random.py``), so its state
is the whole random state of the process.
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
        devices (iterable of devices, optional): accepted for torch's signature; ember's
            devices share the one generator, which is always saved.
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
    state = get_rng_state()
    try:
        yield
    finally:
        set_rng_state(state)
