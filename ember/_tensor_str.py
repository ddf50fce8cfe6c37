"""``repr(tensor)`` in torch's format, character for character.

The rules are torch's (``torch/_tensor_str.py``): one formatter per tensor (two for complex)
picks fixed, integer-valued (``1.``) or scientific notation from the finite non-zero values and
pads every element to one width; rows break after a fixed count of elements that fits the line
width; more than ``threshold`` elements print ``edgeitems`` from each end around ``...``.
"""
import contextlib
import math

import numpy as np

from . import _dtype


class _Opts:
    precision, threshold, edgeitems, linewidth, sci_mode = 4, 1000, 3, 80, None


PRINT_OPTS = _Opts()
_PROFILES = {"default": (4, 1000, 3, 80), "short": (2, 1000, 2, 80), "full": (4, math.inf, 3, 80)}


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None,
                     profile=None, sci_mode=None):
    """Set how tensors print, like ``torch.set_printoptions``.

    Args:
        precision: digits after the decimal point (default 4).
        threshold: element count above which the output is summarized (default 1000).
        edgeitems: items shown at each end of a summarized dimension (default 3).
        linewidth: characters per line (default 80).
        profile: ``"default"``, ``"short"`` or ``"full"`` sets all of the above.
        sci_mode: True/False forces scientific notation on/off; None chooses.

    Example:
        >>> import ember
        >>> ember.set_printoptions(precision=2)
        >>> ember.tensor([1.2345, 2.0])
        tensor([1.23, 2.00])
        >>> ember.set_printoptions(profile="default")
    """
    if profile is not None:
        (PRINT_OPTS.precision, PRINT_OPTS.threshold, PRINT_OPTS.edgeitems,
         PRINT_OPTS.linewidth) = _PROFILES[profile]
    for k, v in dict(precision=precision, threshold=threshold, edgeitems=edgeitems,
                     linewidth=linewidth).items():
        if v is not None:
            setattr(PRINT_OPTS, k, v)
    PRINT_OPTS.sci_mode = sci_mode


def get_printoptions():
    """The current print options as a dict (see :func:`set_printoptions`).

    Example:
        >>> from ember._tensor_str import get_printoptions
        >>> get_printoptions()["precision"]
        4
    """
    return {k: getattr(PRINT_OPTS, k) for k in ("precision", "threshold", "edgeitems",
                                                  "linewidth", "sci_mode")}


@contextlib.contextmanager
def printoptions(**kwargs):
    """Print options set for the ``with`` block only.

    Example:
        >>> import ember
        >>> with ember._tensor_str.printoptions(precision=1):
        ...     print(ember.tensor([1.25]))
        tensor([1.2])
    """
    old = get_printoptions()
    set_printoptions(**kwargs)
    try:
        yield
    finally:
        set_printoptions(**old)


class _Formatter:
    """Formats every element of one tensor (or of a complex tensor's real or imaginary part)
    to one width."""

    def __init__(self, a, floating):
        self.floating, self.int_mode, self.sci_mode, self.max_width = floating, True, False, 1
        p = PRINT_OPTS.precision
        flat = a.reshape(-1)
        if not floating:
            self.max_width = max([len(str(v)) for v in flat.tolist()] + [1])
        else:
            vals = flat[np.isfinite(flat) & (flat != 0)]
            if vals.size:
                mag = np.abs(vals)
                lo, hi = float(mag.min()), float(mag.max())
                self.int_mode = bool(np.all(vals == np.ceil(vals)))
                sci = PRINT_OPTS.sci_mode
                self.sci_mode = (hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4) if sci is None \
                    else sci
                if self.sci_mode:
                    spec, extra = f".{p}e", 0
                else:
                    # an integer-valued float prints as "3." : one more character
                    spec, extra = (".0f", 1) if self.int_mode else (f".{p}f", 0)
                self.max_width = max(len(format(v, spec)) + extra for v in vals.tolist())

    def format(self, v):
        if not self.floating:
            s = str(v)
        elif self.sci_mode:
            s = f"{v:{self.max_width}.{PRINT_OPTS.precision}e}"
        elif self.int_mode:
            s = f"{v:.0f}" + ("" if math.isinf(v) or math.isnan(v) else ".")
        else:
            s = f"{v:.{PRINT_OPTS.precision}f}"
        return s.rjust(self.max_width)


def _element(v, f1, f2):
    if f2 is None:
        return f1.format(v)
    imag = (f2.format(v.imag) + "j").lstrip()
    # NOTE: a negative (or -0.0) imaginary part brings its own sign
    return f1.format(v.real) + ("" if imag[0] in "+-" else "+") + imag


def _vector(a, indent, summarize, f1, f2):
    width = f1.max_width + 2 + (f2.max_width + 1 if f2 is not None else 0)
    per_line = max(1, int(math.floor((PRINT_OPTS.linewidth - indent) / width)))
    e = PRINT_OPTS.edgeitems
    if summarize and not e:
        data = ["..."]
    elif summarize and a.shape[0] > 2 * e:
        data = [_element(v, f1, f2) for v in a[:e].tolist()] + [" ..."] + \
            [_element(v, f1, f2) for v in a[-e:].tolist()]
    else:
        data = [_element(v, f1, f2) for v in a.tolist()]
    lines = [", ".join(data[i:i + per_line]) for i in range(0, len(data), per_line)]
    return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"


def _nested(a, indent, summarize, f1, f2):
    if a.ndim == 0:
        return _element(a.item(), f1, f2)
    if a.ndim == 1:
        return _vector(a, indent, summarize, f1, f2)
    e = PRINT_OPTS.edgeitems
    if summarize and a.shape[0] > 2 * e:
        rows = [_nested(a[i], indent + 1, summarize, f1, f2) for i in range(e)] + ["..."] + \
            [_nested(a[i], indent + 1, summarize, f1, f2)
             for i in range(a.shape[0] - e, a.shape[0])]
    else:
        rows = [_nested(x, indent + 1, summarize, f1, f2) for x in a]
    return "[" + ("," + "\n" * (a.ndim - 1) + " " * (indent + 1)).join(rows) + "]"


def _summarized(a):
    """The elements a summarized print shows (the formatter's width comes from these)."""
    e = PRINT_OPTS.edgeitems
    if a.ndim == 0:
        return a
    if a.ndim == 1:
        return np.concatenate([a[:e], a[-e:]]) if a.shape[0] > 2 * e else a
    if not e:
        return np.empty((0,) * a.ndim, a.dtype)
    rows = list(range(e)) + list(range(a.shape[0] - e, a.shape[0])) \
        if a.shape[0] > 2 * e else range(a.shape[0])
    return np.stack([_summarized(a[i]) for i in rows])


def _tensor_str(a, dt, indent):
    summarize = a.size > PRINT_OPTS.threshold
    if dt.category == _dtype._FLOAT and dt.itemsize < 4:     # fp16, bf16, fp8 print as float
        a = a.astype(np.float32)
    shown = _summarized(a) if summarize else a
    if dt.category == _dtype._COMPLEX:
        f1 = _Formatter(shown.real, True)
        f2 = _Formatter(shown.imag, True)
        return _nested(a, indent, summarize, f1, f2)
    return _nested(a, indent, summarize, _Formatter(shown, dt.category == _dtype._FLOAT), None)


def _add_suffixes(text, suffixes, indent, force_newline=False):
    out = [text]
    last = len(text) - text.rfind("\n") + 1
    for s in suffixes:
        if force_newline or last + len(s) + 2 > PRINT_OPTS.linewidth:
            force_newline = False
            out.append(",\n" + " " * indent + s)
            last = indent + len(s)
        else:
            out.append(", " + s)
            last += len(s) + 2
    return "".join(out) + ")"


def tensor_repr(t, prefix=None):
    """``repr(t)`` as torch prints it.

    Example:
        >>> import ember
        >>> ember.tensor([[1.5, 2.0], [3.0, 4.25]], dtype=ember.float64)
        tensor([[1.5000, 2.0000],
                [3.0000, 4.2500]], dtype=torch.float64)
    """
    from ._backends import backend
    if prefix is None:
        plain = type(t).__name__ in ("Tensor", "Parameter")
        prefix = "tensor(" if plain else f"{type(t).__name__}("
    indent, dt, default = len(prefix), t.dtype, _dtype.get_default_dtype()
    suffixes = []
    if t.device.type != "cpu":
        suffixes.append(f"device='{t.device}'")
    # (a number-like default: the default float, int64, bool, the default's complex)
    plain_dtype = dt in (default, _dtype.int64, _dtype.bool_, default.to_complex()
                         if default is _dtype.float64 else _dtype.complex64)
    if t.layout.name != "strided":
        body = _sparse_str(t, indent, suffixes, not plain_dtype)
    elif t.device.type == "meta":
        suffixes.append(f"size={tuple(t.shape)}")
        if dt is not default:
            suffixes.append(f"dtype={dt!r}")
        body = "..."
    elif t.numel() == 0:
        if t.dim() != 1:
            suffixes.append(f"size={tuple(t.shape)}")
        if dt is not default:
            suffixes.append(f"dtype={dt!r}")
        body = "[]"
    else:
        if not PRINT_OPTS.edgeitems:
            suffixes.append(f"size={tuple(t.shape)}")
        if not plain_dtype:
            suffixes.append(f"dtype={dt!r}")
        data = backend(t.device).to_host(t._data)
        if dt is _dtype.float4_e2m1fn_x2:      # NOTE: torch prints each packed byte's value
            data, dt = data.view(np.uint8).astype(np.float32), _dtype.float32
        body = _tensor_str(data, dt, indent)
    if t.grad_fn is not None:
        suffixes.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t.requires_grad:
        suffixes.append("requires_grad=True")
    return _add_suffixes(prefix + body, suffixes, indent, force_newline=t.is_sparse)


def _sparse_str(t, indent, suffixes, show_dtype):
    """torch's ``indices=tensor(...), values=tensor(...)`` body, and the size/nnz/layout
    suffixes, of a sparse COO tensor; ``crow_indices=...`` & co. for a compressed one."""
    from ._backends import backend
    meta = t.device.type == "meta"
    suffixes.append(f"size={tuple(t.shape)}")
    if not meta:
        suffixes.append(f"nnz={t._nnz()}")
    if show_dtype:
        suffixes.append(f"dtype={t.dtype!r}")
    suffixes.append(f"layout={t.layout!r}")
    parts, texts = [("indices", t._indices())] if t.is_sparse else [
        (n, getattr(t, n)()) for n in (("crow_indices", "col_indices") if t.layout.name in (
            "sparse_csr", "sparse_bsr") else ("ccol_indices", "row_indices"))], []
    for name, p in parts + [("values", t._values() if t.is_sparse else t.values().detach())]:
        pre = f"{name}=tensor("
        if meta:
            text = "..."
        elif p.numel() == 0:
            text = "[]"
        else:
            text = _tensor_str(backend(p.device).to_host(p._data), p.dtype, indent + len(pre))
        if meta or p.numel() == 0:
            text += f", size={tuple(p.shape)}"
        texts.append(pre + text + ")")
    return (",\n" + " " * indent).join(texts)
