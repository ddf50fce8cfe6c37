"""``ShapeProp``: run a graph and note each value's shape and dtype on its node."""
from typing import NamedTuple

from ..._graph.interpreter import Interpreter
from ..._graph.ir import TensorMeta
from ..._tensor import Tensor


class TensorMetadata(NamedTuple):
    """What ``ShapeProp`` stores in ``node.meta['tensor_meta']`` (torch's fields)."""
    shape: tuple
    dtype: object
    requires_grad: bool
    stride: tuple
    memory_format: object
    is_quantized: bool
    qparams: dict


def _extract(t):
    fmt = None
    if t.device.type != "meta":
        import ember
        fmt = next((f for f in (ember.contiguous_format, ember.channels_last,
                                ember.channels_last_3d) if t.is_contiguous(memory_format=f)), None)
    return TensorMetadata(t.shape, t.dtype, t.requires_grad, t.stride(), fmt, False, {})


def _map(v, fn):
    if isinstance(v, Tensor):
        return fn(v)
    if isinstance(v, (tuple, list)):
        return type(v)(_map(x, fn) for x in v) if not hasattr(v, "_fields") else \
            tuple(_map(x, fn) for x in v)
    return {k: _map(x, fn) for k, x in v.items()} if isinstance(v, dict) else None


class ShapeProp(Interpreter):
    """``ShapeProp(gm).propagate(*args)`` runs ``gm`` and sets ``node.meta['tensor_meta']``
    (shape, dtype, requires_grad, stride, memory_format) and ``node.meta['val']`` on every
    node whose value is a tensor (or a structure of them). Meta-device inputs give the shapes
    of ember's meta rules without computing anything.

    Example:
        >>> import ember
        >>> from ember import fx
        >>> from ember.fx.passes.shape_prop import ShapeProp
        >>> gm = fx.symbolic_trace(ember.nn.Sequential(ember.nn.Linear(3, 5)))
        >>> _ = ShapeProp(gm).propagate(ember.ones(2, 3))
        >>> [n.meta["tensor_meta"].shape for n in gm.graph.nodes if n.op != "output"]
        [torch.Size([2, 3]), torch.Size([2, 5])]
    """

    def run_node(self, n):
        result = super().run_node(n)
        meta = _map(result, _extract)
        if meta is not None:
            n.meta["tensor_meta"] = meta
            n.meta["val"] = _map(result, TensorMeta.of)
        n.meta["type"] = type(result)
        return result

    def propagate(self, *args):
        return super().run(*args)
