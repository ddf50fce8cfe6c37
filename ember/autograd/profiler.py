"""``torch.autograd.profiler``: the older spelling of :mod:`ember.profiler`, still common in
code (``record_function`` and ``profile(enabled=..., use_cuda=...)``).

Example:
    >>> import ember
    >>> with ember.autograd.profiler.profile(record_shapes=True) as prof:
    ...     y = ember.ones(2, 3) * 2
    >>> [(e.name, e.input_shapes) for e in prof.function_events]
    [('aten::mul', [[2, 3], []])]
"""
from .. import profiler as _profiler
from ..profiler import EventList, FunctionEvent, FunctionEventAvg, record_function  # noqa: F401


class profile(_profiler.profile):
    """The legacy profiler: ``enabled=False`` turns it off; results are also on
    ``function_events`` and ``table()``. Device options are accepted and record host time."""

    def __init__(self, enabled=True, *, use_cuda=False, use_device=None, record_shapes=False,
                 with_flops=False, profile_memory=False, with_stack=False, with_modules=False,
                 use_kineto=False, use_cpu=True, experimental_config=None, acc_events=False,
                 custom_trace_id_callback=None):
        super().__init__(record_shapes=record_shapes, profile_memory=profile_memory,
                         with_stack=with_stack)
        self.enabled = enabled

    def __enter__(self):
        if self.enabled:
            self.start()
        return self

    def __exit__(self, *exc):
        if self.enabled:
            self.stop()
        return False

    function_events = property(lambda self: self.events())

    def table(self, sort_by=None, row_limit=100, **kwargs):
        """The events (not averaged) as torch's table."""
        return self.events().table(sort_by=sort_by, row_limit=row_limit, **kwargs)

    def __str__(self):
        return self.table()
