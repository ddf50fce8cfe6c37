"""Variable-length sequences for recurrent layers: ``PackedSequence`` and the pack / pad
helpers of ``torch.nn.utils.rnn``.

A packed batch stores, time step by time step, only the rows still running: with the batch
sorted by decreasing length, step ``t`` holds the first ``batch_sizes[t]`` sequences.
"""
from collections import namedtuple

import numpy as np

import ember

from ..._tensor import Tensor


def invert_permutation(permutation):
    """The inverse of a 1-D index permutation (None stays None)."""
    if permutation is None:
        return None
    inv = np.empty(permutation.numel(), dtype=np.int64)
    inv[permutation.cpu().numpy()] = np.arange(permutation.numel())
    return ember.tensor(inv, device=permutation.device)


_PackedSequenceBase = namedtuple("PackedSequence",
                                 ["data", "batch_sizes", "sorted_indices", "unsorted_indices"])


class PackedSequence(_PackedSequenceBase):
    """Data and per-step batch sizes of a packed batch of sequences; build it with
    :func:`pack_padded_sequence` or :func:`pack_sequence`, not by hand.

    Attributes:
        data (Tensor): the rows of all sequences, step by step, shape ``(sum(lengths), *)``.
        batch_sizes (Tensor): int64 on the CPU, how many sequences run at each step.
        sorted_indices (Tensor, optional): the order that sorted the batch by length.
        unsorted_indices (Tensor, optional): its inverse, restoring the original order.

    Example:
        >>> import ember
        >>> from ember.nn.utils.rnn import pack_sequence
        >>> p = pack_sequence([ember.tensor([1, 2, 3]), ember.tensor([4, 5])])
        >>> p.data, p.batch_sizes
        (tensor([1, 4, 2, 5, 3]), tensor([2, 2, 1]))
    """

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if unsorted_indices is None:
            unsorted_indices = invert_permutation(sorted_indices)
        if batch_sizes is None:
            # NOTE: torch also accepts ``PackedSequence((data, batch_sizes), ...)``.
            data, batch_sizes = data
        elif batch_sizes.device.type != "cpu":
            raise ValueError("batch_sizes should always be on CPU. Instances of PackedSequence "
                             "should never be created manually. They should be instantiated "
                             "by functions like pack_sequence and pack_padded_sequences in "
                             "nn.utils.rnn. https://pytorch.org/docs/stable/nn.html#torch.nn."
                             "utils.rnn.pack_sequence")
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def to(self, *args, **kwargs):
        """Move/cast ``data`` like ``Tensor.to``; the indices follow its device, while
        ``batch_sizes`` stays on the CPU."""
        data = self.data.to(*args, **kwargs)
        if data is self.data:
            return self
        move = lambda t: None if t is None else t.to(data.device)  # noqa: E731
        return type(self)(data, self.batch_sizes, move(self.sorted_indices),
                          move(self.unsorted_indices))

    def cuda(self, *args, **kwargs):
        return self.to(ember.device("cuda", *args), **kwargs)

    def cpu(self, *args, **kwargs):
        return self.to("cpu")

    def double(self):
        return self.to(dtype=ember.float64)

    def float(self):
        return self.to(dtype=ember.float32)

    def half(self):
        return self.to(dtype=ember.float16)

    def long(self):
        return self.to(dtype=ember.int64)

    def int(self):
        return self.to(dtype=ember.int32)

    is_cuda = property(lambda self: self.data.is_cuda)

    def is_pinned(self):
        return False


def _lengths_list(lengths):
    if isinstance(lengths, Tensor):
        return [int(n) for n in lengths.cpu().tolist()]
    return [int(n) for n in lengths]


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """Pack a padded batch ``(T, B, *)`` (or ``(B, T, *)``) of sequences of ``lengths``.

    Args:
        input (Tensor): padded sequences.
        lengths (Tensor or list of int): each sequence's length, all > 0.
        batch_first (bool): input is ``(B, T, *)``. Default: False.
        enforce_sorted (bool): require lengths in decreasing order; otherwise the batch is
            sorted here and the order kept in ``sorted_indices``. Default: True.

    Example:
        >>> import ember
        >>> from ember.nn.utils.rnn import pack_padded_sequence
        >>> x = ember.tensor([[1, 2, 0], [3, 4, 5]])
        >>> p = pack_padded_sequence(x, [2, 3], batch_first=True, enforce_sorted=False)
        >>> p.data, p.batch_sizes, p.sorted_indices
        (tensor([3, 1, 4, 2, 5]), tensor([2, 2, 1]), tensor([1, 0]))
    """
    lens = _lengths_list(lengths)
    sorted_indices = None
    if enforce_sorted:
        if any(a < b for a, b in zip(lens, lens[1:])):
            raise RuntimeError("`lengths` array must be sorted in decreasing order when "
                               "`enforce_sorted` is True. You can pass `enforce_sorted=False` "
                               "to pack_padded_sequence and/or pack_sequence to sidestep this "
                               "requirement if you do not need ONNX exportability.")
    else:
        order = np.argsort(-np.asarray(lens, dtype=np.int64), kind="stable")
        sorted_indices = ember.tensor(order, device=input.device)
        lens = [lens[i] for i in order]
        input = input.index_select(0 if batch_first else 1, sorted_indices)
    if lens and lens[-1] <= 0:
        raise RuntimeError("Length of all samples has to be greater than 0, but found an "
                           "element in 'lengths' that is <= 0")
    x = input.transpose(0, 1) if batch_first else input
    if lens and lens[0] > x.shape[0]:
        raise RuntimeError(f"Expected sequence length to be larger than or equal to "
                           f"{lens[0]}, got {x.shape[0]} (pack_padded_sequence)")
    batch_sizes = [sum(n > t for n in lens) for t in range(lens[0] if lens else 0)]
    data = ember.cat([x[t, :bs] for t, bs in enumerate(batch_sizes)])
    return PackedSequence(data, ember.tensor(batch_sizes, dtype=ember.int64), sorted_indices, None)


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """Inverse of :func:`pack_padded_sequence`: ``(padded, lengths)`` in the original order.

    Args:
        sequence (PackedSequence): the batch to pad.
        batch_first (bool): return ``(B, T, *)``. Default: False (``(T, B, *)``).
        padding_value (float): value of the padded positions. Default: 0.
        total_length (int, optional): pad to this many steps instead of the longest length.

    Example:
        >>> import ember
        >>> from ember.nn.utils.rnn import pack_sequence, pad_packed_sequence
        >>> p = pack_sequence([ember.tensor([1, 2]), ember.tensor([3, 4, 5])],
        ...                   enforce_sorted=False)
        >>> pad_packed_sequence(p, batch_first=True)
        (tensor([[1, 2, 0],
                [3, 4, 5]]), tensor([2, 3]))
    """
    batch_sizes = sequence.batch_sizes.tolist()
    steps = len(batch_sizes)
    if total_length is not None:
        if total_length < steps:
            raise ValueError("Expected total_length to be at least the length of the longest "
                             f"sequence in input, but got total_length={total_length} and max "
                             f"sequence length being {steps}")
        steps = total_length
    data = sequence.data
    batch = batch_sizes[0] if batch_sizes else 0
    pad = lambda n: ember.full((n, *data.shape[1:]), padding_value, dtype=data.dtype,  # noqa
                               device=data.device)
    rows, start = [], 0
    for bs in batch_sizes:
        rows.append(data[start:start + bs] if bs == batch else
                    ember.cat([data[start:start + bs], pad(batch - bs)]))
        start += bs
    rows += [pad(batch)] * (steps - len(batch_sizes))
    padded = ember.stack(rows, 1 if batch_first else 0)
    lengths = ember.tensor([sum(bs > b for bs in batch_sizes) for b in range(batch)],
                           dtype=ember.int64)
    if sequence.unsorted_indices is not None:
        padded = padded.index_select(0 if batch_first else 1, sequence.unsorted_indices)
        lengths = lengths[sequence.unsorted_indices.cpu()]
    return padded, lengths


def pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    """Stack sequences of shape ``(L_i, *)`` into ``(T, B, *)`` (or ``(B, T, *)``), padding
    each to the longest on ``padding_side`` with ``padding_value``.

    Example:
        >>> import ember
        >>> from ember.nn.utils.rnn import pad_sequence
        >>> pad_sequence([ember.tensor([1, 2, 3]), ember.tensor([4])], batch_first=True,
        ...              padding_value=-1, padding_side="left")
        tensor([[ 1,  2,  3],
                [-1, -1,  4]])
    """
    if not hasattr(sequences, "__iter__"):
        raise RuntimeError("pad_sequence: Expected iterable for input sequences, but got arg "
                           f"of type: {type(sequences)}")
    if padding_side not in ("left", "right"):
        raise RuntimeError("Expected padding_side to be one of left or right, but got "
                           f"{padding_side}.")
    sequences = list(sequences)
    longest = max(s.shape[0] for s in sequences)
    out = []
    for s in sequences:
        n = longest - s.shape[0]
        if n:
            fill = ember.full((n, *s.shape[1:]), padding_value, dtype=s.dtype, device=s.device)
            s = ember.cat([s, fill] if padding_side == "right" else [fill, s])
        out.append(s)
    return ember.stack(out, 0 if batch_first else 1)


def unpad_sequence(padded_sequences, lengths, batch_first=False):
    """Split a padded batch back into a list of sequences of ``lengths``.

    Example:
        >>> import ember
        >>> from ember.nn.utils.rnn import unpad_sequence
        >>> unpad_sequence(ember.tensor([[1, 2], [3, 0]]), ember.tensor([2, 1]),
        ...                batch_first=True)
        [tensor([1, 2]), tensor([3])]
    """
    x = padded_sequences if batch_first else padded_sequences.transpose(0, 1)
    return [x[i, :n] for i, n in enumerate(_lengths_list(lengths))]


def pack_sequence(sequences, enforce_sorted=True):
    """Pack a list of sequences of shape ``(L_i, *)``; see :func:`pack_padded_sequence`."""
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences):
    """The list of sequences in a PackedSequence, in their original order.

    Example:
        >>> import ember
        >>> from ember.nn.utils.rnn import pack_sequence, unpack_sequence
        >>> unpack_sequence(pack_sequence([ember.tensor([1]), ember.tensor([2, 3])],
        ...                               enforce_sorted=False))
        [tensor([1]), tensor([2, 3])]
    """
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)


# torch's names for the namedtuple base and its optional-map helper
PackedSequence_ = _PackedSequenceBase


def bind(optional, fn):
    """``fn(optional)``, or None when ``optional`` is None.

    Example:
        >>> from ember.nn.utils.rnn import bind
        >>> bind(None, abs), bind(-2, abs)
        (None, 2)
    """
    return None if optional is None else fn(optional)
