"""``MaskedTensor``: a tensor with a bool mask of the elements that count, as
``torch.masked.MaskedTensor`` (a prototype in torch too). Pointwise ops act on the data and
keep the mask (operands' masks must match); reductions (``sum``, ``mean``, ``amax``...) ignore
masked-out elements and mask the results that saw none."""
import warnings

from .._tensor import Tensor

_REDUCTIONS = {"sum", "mean", "amax", "amin", "argmax", "argmin", "prod", "logsumexp",
               "median", "norm", "var", "std"}
_NORMALIZATIONS = {"softmax", "log_softmax", "softmin", "cumsum", "cumprod"}


def _str(data, mask, fmt):
    if data.dim() == 1:
        elems = [fmt.format(v) if isinstance(v, float) else str(v) for v in data.tolist()]
        width = max(8 if not m else len(e) for e, m in zip(elems, mask.tolist()))
        return "[" + ", ".join(e if m else "--".rjust(width)
                               for e, m in zip(elems, mask.tolist())) + "]"
    subs = ["\n".join("  " + line for line in _str(d, m, fmt).split("\n"))
            for d, m in zip(data, mask)]
    return "[\n" + ",\n".join(subs) + "\n]"


class MaskedTensor(Tensor):
    """``data`` where ``mask`` is True.

    Example:
        >>> import ember
        >>> from ember.masked import masked_tensor
        >>> mt = masked_tensor(ember.tensor([1., 2., 3.]), ember.tensor([True, False, True]))
        >>> mt * 2
        MaskedTensor(
          [  2.0000,       --,   6.0000]
        )
        >>> mt.sum()
        MaskedTensor(  4.0000, True)
    """

    def __new__(cls, data, mask, requires_grad=False):
        return object.__new__(cls)

    def __init__(self, data, mask, requires_grad=False):
        if is_masked_tensor(data) or not isinstance(data, Tensor):
            raise TypeError("data must be a Tensor")
        if is_masked_tensor(mask) or not isinstance(mask, Tensor):
            raise TypeError("mask must be a Tensor")
        if mask.dtype.name != "bool":
            raise TypeError("mask must have dtype bool.")
        if tuple(mask.shape) != tuple(data.shape):
            raise ValueError("data and mask must have the same shape.")
        self._data, self.dtype, self._storage = data._data, data.dtype, data._get_storage()
        if data.device.type != "cpu":
            self.device = data.device
        self._masked_data, self._masked_mask = data, mask
        if requires_grad:
            self.requires_grad_(True)

    def get_data(self):
        """The data, masked-out elements included."""
        return self._masked_data

    def get_mask(self):
        """The bool mask (True: the element counts)."""
        return self._masked_mask

    def to_tensor(self, value):
        """A plain tensor with ``value`` in the masked-out places."""
        return self.get_data().masked_fill(~self.get_mask(), value)

    def __repr__(self):
        fmt = "{0:8.4f}"
        if self.dim() == 0:
            v = self.get_data().item()
            s = fmt.format(v) if isinstance(v, float) else str(v)
            return f"MaskedTensor({s if self.get_mask().item() else '--'}, " \
                   f"{self.get_mask().item()})"
        s = "\n".join("  " + line for line in _str(self.get_data(), self.get_mask(),
                                                    fmt).split("\n"))
        return "MaskedTensor(\n" + s + "\n)"

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        from .. import masked
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in _REDUCTIONS | _NORMALIZATIONS and args and is_masked_tensor(args[0]):
            return getattr(masked, name)(*args, **kwargs)
        masks = [a.get_mask() for a in (*args, *kwargs.values()) if is_masked_tensor(a)]
        for m in masks[1:]:
            if not (tuple(m.shape) == tuple(masks[0].shape) and bool((m == masks[0]).all())):
                raise ValueError("Input masks must match. If you need support for this, please "
                                 "open an issue on Github.")
        out = func(*(a.get_data() if is_masked_tensor(a) else a for a in args),
                   **{k: v.get_data() if is_masked_tensor(v) else v for k, v in kwargs.items()})
        if isinstance(out, Tensor) and tuple(out.shape) == tuple(masks[0].shape):
            return MaskedTensor(out, masks[0])
        return out


def is_masked_tensor(obj):
    """Whether ``obj`` is a MaskedTensor.

    Example:
        >>> import ember
        >>> from ember.masked import is_masked_tensor, masked_tensor
        >>> is_masked_tensor(masked_tensor(ember.ones(2), ember.ones(2).bool()))
        True
    """
    return isinstance(obj, MaskedTensor)


def _warn():
    warnings.warn("The PyTorch API of MaskedTensors is in prototype stage and will change in "
                  "the near future. Please open a Github issue for features requests and see "
                  "our documentation on the torch.masked module for further information about "
                  "the project.", UserWarning, stacklevel=3)


def masked_tensor(data, mask, requires_grad=False):
    """A MaskedTensor of ``data`` (detached; use :func:`as_masked_tensor` to keep its graph)
    and ``mask``."""
    _warn()
    return MaskedTensor(data.detach(), mask, requires_grad)


def as_masked_tensor(data, mask):
    """A MaskedTensor sharing ``data`` (differentiable back to it) with ``mask``."""
    _warn()
    out = MaskedTensor(data, mask)
    if data.requires_grad:
        out.grad_fn, out._output_nr, out._requires_grad = data.grad_fn, data._output_nr, True
    return out
