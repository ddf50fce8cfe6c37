"""Errors in torch's words: an array library's exception turned into the RuntimeError /
IndexError / TypeError torch raises for the op, naming the op and its operands' shapes,
dtypes and devices (dispatch raises these), and torch's text for shapes that do not
broadcast."""
import opcode
import os

import numpy as np


def _describe(tensors):
    return ", ".join(f"{tuple(t.shape)} {t.dtype.name} {t.device}" for t in tensors)


def _explain(opdef, tensors, e):
    """Turn an array-library error into torch's RuntimeError naming the op and operands; an
    error an ember op raised on purpose is already torch's and passes unchanged."""
    msg = str(e)
    if any(t.dtype.name == "float4_e2m1fn_x2" for t in tensors) and not _raised_by_ember(e):
        # (a storage-only dtype: NumPy has no math for its void bytes)
        return NotImplementedError(f"\"{opdef.name}\" not implemented for 'Float4_e2m1fn_x2'")
    if isinstance(e, TypeError) and "argument" in msg:
        return TypeError(f"{opdef.name}(): {msg}")
    if _raised_by_ember(e):
        return e
    if "could not be broadcast" in msg:
        return RuntimeError(f"{opdef.name}: {_broadcast_error(msg, tensors)}")
    if isinstance(e, np.exceptions.AxisError) and e.ndim is not None:
        n = max(e.ndim, 1)
        return IndexError(f"{opdef.name}: Dimension out of range (expected to be in range of "
                          f"[{-n}, {n - 1}], but got {e.axis})")
    if isinstance(e, IndexError):       # NumPy's words for torch's
        import re
        msg = re.sub(r"too many indices for array: array is (\d+)-dimensional, but \d+ were "
                     r"indexed", r"too many indices for tensor of dimension \1",
                     msg.replace("for axis", "for dimension"))
        return IndexError(f"{opdef.name}: {msg}")
    return RuntimeError(f"{opdef.name}: {msg} (got {_describe(tensors)})")


_EMBER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_RAISE = opcode.opmap["RAISE_VARARGS"]


def _raised_by_ember(e):
    # The innermost frame tells: a `raise` statement in ember's code, or a call into NumPy
    # (whose C code raised) or a frame inside NumPy's own Python code. No frame at all: the C
    # fast path called the op's ufunc itself.
    tb = e.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    return code.co_filename.startswith(_EMBER_DIR) and code.co_code[tb.tb_lasti] == _RAISE


def _broadcast_error(msg, tensors):
    """torch's text for operands that do not broadcast, naming the first clash. The shapes
    come from NumPy's message (batch shapes only, for matmul), else from the tensors."""
    import re
    groups = re.findall(r"->\(([^)]*)\)", msg) or re.findall(r"\(([^)]*)\)",
                                                          msg.partition("shapes")[2])
    shapes = [tuple(int(x) for x in g.split(",") if x.strip().isdigit()) for g in groups] or \
        [tuple(t.shape) for t in tensors]
    shape = shapes[0]
    for other in shapes[1:]:
        clash = broadcast_clash(shape, other)
        if clash:
            return f"{clash} (shapes {', '.join(map(str, shapes))} do not broadcast)"
        shape = np.broadcast_shapes(shape, other)
    return f"operands could not be broadcast together (got {_describe(tensors)})"


def broadcast_clash(a, b):
    """torch's text for the last dimension where shapes ``a`` and ``b`` do not broadcast, or
    None when they do."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    for d in range(n - 1, -1, -1):
        if a[d] != b[d] and 1 not in (a[d], b[d]):
            return (f"The size of tensor a ({a[d]}) must match the size of tensor b ({b[d]}) "
                    f"at non-singleton dimension {d}")
    return None
