"""``torch.utils.tensorboard``: ``SummaryWriter`` writes event files TensorBoard reads.

Needs the ``tensorboard`` package (``pip install 'ember[tensorboard]'``), as torch's does; it
loads only when this module is imported. See https://pytorch.org/docs/stable/tensorboard.html.
"""
try:
    import tensorboard as _tensorboard  # noqa: F401
except ImportError:
    raise ImportError("ember.utils.tensorboard needs the tensorboard package: "
                      "pip install 'ember[tensorboard]' (or pip install tensorboard)") from None

from tensorboard.summary.writer.record_writer import RecordWriter  # noqa: E402

from .writer import FileWriter, SummaryWriter  # noqa: E402

__all__ = ["FileWriter", "RecordWriter", "SummaryWriter"]
