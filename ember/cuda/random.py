"""Per-GPU random generators (``torch.cuda.manual_seed`` & co.).

Each GPU's default generator is an ``ember.Generator`` on that device
(``ember._ops.random.device_generator``): it draws for random tensors made on the GPU without a
``generator=``. Seeding calls are silently ignored without a GPU, as torch's are.
"""
from .._device import device as _device
from .._ops.random import device_generator


def _gen(device=None):
    from . import _index
    return device_generator(_device("cuda", _index(device)))


def _all():
    from . import device_count
    return [_gen(i) for i in range(device_count())]


def manual_seed(seed):
    """Seed the current GPU's generator (nothing without a GPU).

    Example:
        >>> import ember
        >>> ember.cuda.manual_seed(0)
    """
    from . import is_available
    if is_available():
        _gen().manual_seed(seed)


def manual_seed_all(seed):
    """Seed every GPU's generator (nothing without a GPU)."""
    for g in _all():
        g.manual_seed(seed)


def seed():
    """Seed the current GPU's generator with a random number (nothing without a GPU)."""
    from . import is_available
    if is_available():
        _gen().seed()


def seed_all():
    """Seed every GPU's generator with one random number (nothing without a GPU)."""
    gens = _all()
    if gens:
        s = gens[0].seed()
        for g in gens[1:]:
            g.manual_seed(s)


def initial_seed():
    """The current GPU generator's seed."""
    return _gen().initial_seed()


def get_rng_state(device="cuda"):
    """The state of ``device``'s generator, a uint8 tensor for ``set_rng_state``.

    Example:
        >>> import ember
        >>> if ember.cuda.is_available():
        ...     s = ember.cuda.get_rng_state(); a = ember.rand(2, device="cuda")
        ...     ember.cuda.set_rng_state(s)
        ...     assert ember.equal(a, ember.rand(2, device="cuda"))
    """
    return _gen(device).get_state()


def set_rng_state(new_state, device="cuda"):
    """Restore ``device``'s generator to ``new_state`` (from ``get_rng_state``)."""
    _gen(device).set_state(new_state)


def get_rng_state_all():
    """Every GPU generator's state, in device order."""
    return [g.get_state() for g in _all()]


def set_rng_state_all(new_states):
    """Restore every GPU's generator from ``get_rng_state_all()``'s list."""
    for g, s in zip(_all(), new_states):
        g.set_state(s)
