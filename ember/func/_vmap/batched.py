"""vmap's batched tensors: a ``BatchedTensor`` holds a tensor with one more (leading) dim per
vmap level and shows the per-example ("logical") shape. The helpers move between the two
views: ``lift`` and ``lower`` for every active level (grad, vjp and jvp inside vmap), and the
rules' own, which wrap results and batch (or expand) operands at one level."""
import ember

from ..._size import Size
from ..._tensor import Tensor

_STACK = []         # active vmap levels, outermost first: [level, batch size, randomness]


class BatchedTensor(Tensor):
    """A tensor inside ``vmap``: ``_value`` holds every example (the batch dim first, then the
    example's dims); shape, size and dim are the example's."""

    def __repr__(self):
        return f"BatchedTensor(lvl={self._level}, bdim=0, value=\n{self._value!r}\n)"

    shape = property(lambda self: Size(self._value.shape[1:]))

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self):
        return self._value.dim() - 1

    ndimension = dim
    ndim = property(dim)

    def numel(self):
        return self.shape.numel()

    def stride(self, dim=None):
        st = self._value.stride()[1:]
        return st if dim is None else st[dim]

    @property
    def _data(self):
        raise RuntimeError("vmap: this operation reads a tensor's data directly and has no "
                           "batching rule; move it out of the vmapped function")

    requires_grad = property(lambda self: self._value.requires_grad)

    grad_fn = property(lambda self: self._value.grad_fn)

    is_leaf = property(lambda self: self._value.is_leaf)

    def detach(self):
        return _wrap(self._value.detach(), self._level)

    def requires_grad_(self, requires_grad=True):
        self._value.requires_grad_(requires_grad)
        return self

    def item(self):
        raise RuntimeError("vmap: It looks like you're calling .item() on a Tensor. We don't "
                           "support vmap over calling .item() on a Tensor, please try to "
                           "rewrite what you're doing with other operations.")

    tolist = numpy = __bool__ = __index__ = __int__ = __float__ = item


def _wrap(value, level):
    t = object.__new__(BatchedTensor)
    t._value, t._level, t.dtype = value, level, value.dtype
    if value.device.type != "cpu":
        t.device = value.device
    return t


def _level_of(x):
    return x._level if type(x) is BatchedTensor else 0


def _levels(args, kwargs):
    """The innermost vmap level among the operands (0: none batched). Every op dispatched
    while a vmap runs asks, the physical ops of the rules too: kept to plain loops."""
    top = 0
    for a in (*args, *kwargs.values()) if kwargs else args:
        t = type(a)
        if t is BatchedTensor:
            if a._level > top:
                top = a._level
        elif t is list or t is tuple:
            for b in a:
                if type(b) is BatchedTensor and b._level > top:
                    top = b._level
    return top


def lift(t, stack=None):
    """``t`` as a physical tensor with a leading dim for every active vmap level (outermost
    first), expanded along the levels it is not batched at."""
    have, v = [], t
    while isinstance(v, BatchedTensor):
        have.append(v._level)
        v = v._value
    have.reverse()
    for i, (level, n, _) in enumerate(_STACK if stack is None else stack):
        if level not in have:       # (expand adds a leading dim itself: one op, not two)
            v = v.expand(n, *v.shape) if i == 0 else v.unsqueeze(i).expand(
                *v.shape[:i], n, *v.shape[i:])
    return v


def lower(p, stack=None):
    """The inverse of ``lift``: ``p``'s leading dims as the active vmap levels."""
    for level, _, _ in _STACK if stack is None else stack:
        p = _wrap(p, level)
    return p


def batched_over(t, k):
    """``t`` as a tensor of the outermost ``k`` vmap levels' physical dims, still batched
    (a BatchedTensor) at the levels inside them: a vjp made at ``k`` levels and called
    inside more (jacrev's vmap of a vjp) runs its backward once, through the batching rules,
    on cotangents that are batched over the new levels only."""
    if len(_STACK) == k:
        return lift(t)
    p = lift(t)
    return lower(p.movedim(tuple(range(k, len(_STACK))), tuple(range(len(_STACK) - k))), _STACK[k:])


def unbatched_over(g, k):
    """The inverse of ``batched_over``: the gradient of the outermost ``k`` levels' physical
    tensors, batched (or not) at the levels inside them, as seen at every level."""
    if len(_STACK) == k:
        return lower(g)
    n = len(_STACK) - k
    p = lift(g, _STACK[k:])
    return lower(p.movedim(tuple(range(n)), tuple(range(k, k + n))))


def _size(level):
    return next(n for lv, n, _ in _STACK if lv == level)


def _map_out(res, level):
    if isinstance(res, Tensor):
        return _wrap(res, level)
    if isinstance(res, (list, tuple)):
        out = [_map_out(r, level) for r in res]
        return type(res)(*out) if hasattr(res, "_fields") else type(res)(out)
    return res


def _map_tensors(res, f):
    return _zip_tensors(res, res, lambda r, _: f(r))


def _zip_tensors(res, like, f):
    """``f(r, l)`` on the tensors of ``res`` and the ones of the same structure ``like``."""
    if isinstance(res, Tensor):
        return f(res, like)
    out = [_zip_tensors(r, m, f) for r, m in zip(res, like)]
    return type(res)(*out) if hasattr(res, "_fields") else type(res)(out)


def lift_one(x, level, n):
    return x._value if _level_of(x) == level else x.expand(n, *x.shape)


def _lifted(level, *ts):
    n = _size(level)
    return [None if t is None else lift_one(t, level, n) if isinstance(t, Tensor) else t
            for t in ts]


def _pad(x, level, rank):
    """``x``'s value with the batch dim first and ones up to ``rank`` example dims, so that
    it broadcasts as the example does against unbatched operands; unbatched ``x`` as it is."""
    if _level_of(x) != level:
        return x
    v = x._value
    return v if rank == x.dim() else v.reshape(v.shape[0], *(1,) * (rank - x.dim()), *v.shape[1:])


def _stack_rows(rows):
    r0 = rows[0]
    if isinstance(r0, Tensor):
        return ember.stack(rows)
    if isinstance(r0, (list, tuple)):
        out = [_stack_rows([r[i] for r in rows]) for i in range(len(r0))]
        return type(r0)(*out) if hasattr(r0, "_fields") else type(r0)(out)
    raise RuntimeError("vmap: the batching fallback got a non-tensor result")
