"""Fused recurrent cells: one LSTM step's gate nonlinearities and state update as one op.

An LSTM step written with ember ops is about a dozen dispatches forward and twice that
backward, per layer and time step; over a sequence the per-op overhead, not the arithmetic,
is the cost. ``_lstm_cell`` does the step's pointwise work in one forward and one fused
backward (``_lstm_cell_backward``). When the backward itself must be differentiable
(``create_graph``), the vjp is the same maths written in ember ops instead.
"""
import numpy as np

import ember

from .._C import kernels as _C
from .._backends import blas
from .meta import empty
from .registry import op
from .tangents import decomposed
from .samples import Sample, make


def _check(name, igates, hgates, cx):
    if igates.shape != hgates.shape or igates.shape[-1] != 4 * cx.shape[-1] or \
            igates.shape[:-1] != cx.shape[:-1]:
        raise RuntimeError(f"{name}: expected input gates and hidden gates of shape (*, 4 * "
                           f"hidden) and a cell state of shape (*, hidden), got "
                           f"{tuple(igates.shape)}, {tuple(hgates.shape)} and {tuple(cx.shape)}")


def _activate(xp, act):
    """In place on summed gate pre-activations: sigmoid(i), sigmoid(f), tanh(g), sigmoid(o),
    with one tanh pass (sigmoid(x) = (1 + tanh(x / 2)) / 2, which never overflows).
    Returns the four gate views."""
    h = act.shape[-1] // 4
    sig = (act[..., :2 * h], act[..., 3 * h:])
    for s in sig:
        s *= 0.5
    xp.tanh(act, out=act)
    for s in sig:
        s *= 0.5
        s += 0.5
    return act[..., :h], act[..., h:2 * h], act[..., 2 * h:3 * h], act[..., 3 * h:]


@op("_lstm_cell", method=False, function=False)
def lstm_cell(xp, igates, hgates, cx):
    """One LSTM step: gates ``igates + hgates`` in torch's (input, forget, cell, output) order
    and cell state ``cx`` give ``(hy, cy)`` with ``cy = f * cx + i * g``, ``hy = o * tanh(cy)``.
    """
    _check("_lstm_cell", igates, hgates, cx)
    if (r := _cell_c(igates, hgates, cx)) is not None:
        return r
    i, f, g, o = _activate(xp, igates + hgates)
    cy = f * cx + i * g
    return o * xp.tanh(cy), cy


def _cell_c(igates, hgates, cx, ghy=None, gcy=None):
    """``_lstm_cell``'s (hy, cy), or with ``ghy``, ``gcy`` its backward's (dgates, dcx), by
    lstm.h's ``lstm_cell``: one pass where NumPy's are ~14 (~27 backward); None where it does
    not apply."""
    arrays = (igates, hgates, cx) + (() if ghy is None else (ghy, gcy))
    fn = _C.kernel("lstm_cell", cx.dtype) if cx.size and all(
        type(a) is np.ndarray and a.dtype == cx.dtype for a in arrays) and \
        (ghy is None or ghy.shape == gcy.shape == cx.shape) else None
    if fn is None:
        return None
    keep = [_C.contiguous(a) for a in arrays]       # (held while the kernel reads them)
    o1, o2 = np.empty((igates if ghy is not None else cx).shape, cx.dtype), np.empty_like(keep[2])
    if fn(*[_C.ptr(a) for a in keep], *[0] * (5 - len(keep)), _C.ptr(o1), _C.ptr(o2),
          cx.size // cx.shape[-1], cx.shape[-1], _C.num_threads()):
        return None
    return o1, o2


def _gate_grads(dh, dc, i, f, g, o, c_prev, tc):
    """One LSTM step's backward from its activated gates, incoming cell state and
    ``tc = tanh(c)``: the four gate gradients (i, f, g, o) and the gradient of ``c_prev``.
    Plain arithmetic, so it serves NumPy arrays and ember tensors alike."""
    dcy = dh * o * (1 - tc * tc) + dc
    return (dcy * g * i * (1 - i), dcy * c_prev * f * (1 - f), dcy * i * (1 - g * g),
            dh * tc * o * (1 - o)), dcy * f


def _lstm_cell_grads(ghy, gcy, igates, hgates, cx):
    """(dgates, dcx) of ``_lstm_cell`` in ember ops: the differentiable backward."""
    i, f, g, o = (igates + hgates).chunk(4, -1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    parts, dcx = _gate_grads(ghy, gcy, i, f, g, o, cx, (f * cx + i * g).tanh())
    return ember.cat(list(parts), -1), dcx


@lstm_cell.vjp(save=("igates", "hgates", "cx"))
def _(grads, igates, hgates, cx):
    ghy, gcy = grads
    if ghy is None:
        ghy = ember.zeros_like(cx)
    if gcy is None:
        gcy = ember.zeros_like(cx)
    if ember.is_grad_enabled():
        dgates, dcx = _lstm_cell_grads(ghy, gcy, igates, hgates, cx)
    else:
        dgates, dcx = lstm_cell_backward(ghy, gcy, igates, hgates, cx)
    return dgates, dgates, dcx


# (not differentiable: it runs only where the backward is not recorded; a differentiable
# backward takes _lstm_cell_grads)
@op("_lstm_cell_backward", method=False, function=False, differentiable=False)
def lstm_cell_backward(xp, grad_hy, grad_cy, igates, hgates, cx):
    """``_lstm_cell``'s gradients (d gates, d cx) in one pass, the activations recomputed
    from the inputs (cheaper than keeping them)."""
    _check("_lstm_cell_backward", igates, hgates, cx)
    if (r := _cell_c(igates, hgates, cx, grad_hy, grad_cy)) is not None:
        return r
    i, f, g, o = _activate(xp, igates + hgates)
    parts, dcx = _gate_grads(grad_hy, grad_cy, i, f, g, o, cx, xp.tanh(f * cx + i * g))
    return xp.concatenate(parts, -1), dcx


def _torch_cell(torch, igates, hgates, cx):
    i, f, g, o = (igates + hgates).chunk(4, -1)
    cy = f.sigmoid() * cx + i.sigmoid() * g.tanh()
    return o.sigmoid() * cy.tanh(), cy


def _torch_cell_backward(torch, ghy, gcy, igates, hgates, cx):
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_() for t in (igates, hgates, cx)]
        hy, cy = _torch_cell(torch, *leaves)
        d = torch.autograd.grad((hy, cy), leaves, (ghy, gcy))
    return d[0], d[2]


def _cell_samples(shape, dt, n):
    lead, h = shape[:-1], shape[-1]
    gates = [make(lead + (4 * h,), dt, seed=k) for k in range(2)]
    return [make(shape, dt, seed=10 + k) for k in range(n)] + gates + [make(shape, dt, seed=3)]


lstm_cell.meta = lambda ig, hg, cx: (empty(cx.shape, cx.dtype), empty(cx.shape, cx.dtype))
lstm_cell.torch_ref = _torch_cell
lstm_cell.samples = lambda dev, dt: [] if dt.category != 2 else [
    Sample(*_cell_samples((3, 2), dt, 0)), Sample(*_cell_samples((2, 3, 4), dt, 0))]
lstm_cell_backward.meta = lambda gh, gc, ig, hg, cx: (empty(ig.shape, ig.dtype),
                                                      empty(cx.shape, cx.dtype))
lstm_cell_backward.torch_ref = _torch_cell_backward
lstm_cell_backward.samples = lambda dev, dt: [] if dt.category != 2 else [
    Sample(*_cell_samples((3, 2), dt, 2)), Sample(*_cell_samples((2, 3, 4), dt, 2))]


# ---- a whole LSTM layer (one direction) over a sequence ---------------------------------------
# Per step, even the fused cell leaves a linear, a cell and their backwards to dispatch and
# record; over a sequence that overhead rivals the GEMMs. ``_lstm_layer`` runs the time loop
# inside one op (its outputs include the activations and cell states, which its backward
# reads), and its backward computes the recurrent weight's gradient as one GEMM over all steps.
# On NumPy in float32/64 both time loops are C kernels (``lstm_fwd`` / ``lstm_bwd`` in
# ember/_C/kernels/lstm.h: per step one product with the weight and one fused pass over the gates);
# the NumPy loops below are their reference and the fallback.

def _steps(T, reverse):
    return range(T - 1, -1, -1) if reverse else range(T)


@op("_lstm_layer", method=False, function=False, nondiff_outputs=(3, 4))
def lstm_layer(xp, xproj, h0, c0, w_hh, b_hh, reverse=False):
    """One direction of an LSTM layer: ``xproj`` (T, B, 4H) holds every step's input
    projection; returns (outputs (T, B, H), h_n, c_n, activated gates (T, B, 4H), cell states
    in processing order (T + 1, B, H)). Grouped weights (g, 4H, H) and biases (g, 4H) give
    each of g runs of B / g rows its own (vmap's per-example weights)."""
    T, B, G = xproj.shape
    g = w_hh.shape[0] if w_hh.ndim == 3 else int(w_hh.ndim == 2)
    if h0.shape != c0.shape or h0.shape != (B, G // 4) or w_hh.shape[-2:] != (G, G // 4) or \
            G % 4 or not g or B % g:
        raise RuntimeError(f"_lstm_layer: expected input projections (T, B, 4H), states (B, H)"
                           f" and a hidden weight (4H, H) or (g, 4H, H) with g dividing B, got "
                           f"{tuple(xproj.shape)}, {tuple(h0.shape)}, {tuple(c0.shape)} and "
                           f"{tuple(w_hh.shape)}")
    dt = xproj.dtype
    cd = xp.float32 if dt.itemsize < 4 else dt      # (no BLAS below float32)
    out, act = xp.empty((T, B, G // 4), cd), xp.empty((T, B, G), cd)
    cs = xp.empty((T + 1, B, G // 4), cd)
    w1, b1 = _shared(w_hh, b_hh)
    fn = _layer_kernel("lstm_fwd", xp, cd) if w1 is not None else None
    if fn is not None:
        x, h0c, c0c = (_C.contiguous(a, cd) for a in (xproj, h0, c0))
        b = xp.zeros(G, cd) if b1 is None else _C.contiguous(b1, cd)
        wt = xp.ascontiguousarray(w1.T, dtype=cd)
        _check_status("_lstm_layer", fn(
            *(_C.ptr(a) for a in (x, b, h0c, c0c, wt, act, out, cs)), T, B, G // 4,
            int(reverse), *blas.pointer(cd), _C.num_threads()))
    else:
        _lstm_layer_numpy(xp, *_grouped(g, xproj, h0, c0), w_hh.reshape(g, G, -1),
                          None if b_hh is None else b_hh.reshape(g, 1, G), reverse,
                          *_grouped(g, out, act, cs))
    last = out[_steps(T, reverse)[-1]] if T else h0
    return tuple(r.astype(dt, copy=False) for r in (out, last.copy(), cs[T].copy(), act, cs))


def _grouped(g, *arrays):
    """Each (..., B, n) array as (..., g, B / g, n): views of g runs of rows."""
    return [a.reshape(*a.shape[:-2], g, a.shape[-2] // g, a.shape[-1]) for a in arrays]


def _shared(w_hh, b_hh):
    """The one weight (and bias) every row uses: a 2-d weight, or grouped ones that are one
    expanded (stride 0: per-sample gradients' weights) run as it, by the C kernels; else
    (None, None)."""
    if w_hh.ndim == 2:
        return w_hh, b_hh
    if all(a is None or a.shape[0] == 1 or a.strides[0] == 0 for a in (w_hh, b_hh)):
        return w_hh[0], None if b_hh is None else b_hh[0]
    return None, None


def _hidden(h, w_hh, b_hh):
    """``h @ w_hh.T + b_hh``, each run of rows by its own weight where they are grouped. In
    tensor methods, for ember's tensors and torch's (the test reference)."""
    if w_hh.dim() == 2:
        return h @ w_hh.T if b_hh is None else h @ w_hh.T + b_hh
    y = h.reshape(w_hh.shape[0], -1, h.shape[-1]) @ w_hh.transpose(1, 2)
    return (y if b_hh is None else y + b_hh.unsqueeze(1)).reshape(h.shape[0], -1)


def _layer_kernel(name, xp, dtype):
    """The C kernel ``name`` (``lstm.h``) for arrays of ``dtype``, or None (not NumPy, not
    float32/64, library not built or turned off, no BLAS to call): the NumPy loop runs."""
    if xp is not np:
        return None
    fn = _C.kernel(name, np.dtype(dtype))
    return fn if fn is not None and blas.pointer(dtype) is not None else None


def _check_status(name, status):
    if status != 0:
        raise MemoryError(f"{name}: cannot allocate the C kernel's packed weight")


def _lstm_layer_numpy(xp, xproj, h0, c0, w_hh, b_hh, reverse, out, act, cs):
    """``_lstm_layer``'s time loop in NumPy (the reference of ``lstm_fwd``), filling ``out``,
    ``act`` and ``cs``: every array grouped (``_grouped``), a weight (g, 4H, H) per group,
    so that a step is one batched product."""
    T, cd = xproj.shape[0], act.dtype
    # (BLAS runs faster on it than a view)
    w_t = xp.ascontiguousarray(xp.swapaxes(w_hh, -1, -2), dtype=cd)
    cs[0], h = c0, h0.astype(cd, copy=False)
    for k, t in enumerate(_steps(T, reverse)):
        a = act[t]
        xp.matmul(h, w_t, out=a)
        a += xproj[t]
        if b_hh is not None:
            a += b_hh
        i, f, g, o = _activate(xp, a)
        c = cs[k + 1]
        xp.multiply(f, cs[k], out=c)
        c += i * g
        h = out[t]
        xp.tanh(c, out=h)
        h *= o


@lstm_layer.vjp(save=("xproj", "h0", "c0", "w_hh", "b_hh", "result"))
def _(grads, xproj, h0, c0, w_hh, b_hh, reverse=False, result=None):
    gout, ghn, gcn = grads[:3]
    if ember.is_grad_enabled():
        return _lstm_layer_graph_vjp(gout, ghn, gcn, xproj, h0, c0, w_hh, b_hh, reverse)
    out, _, _, act, cs = result
    dx, dh0, dc0, dw = lstm_layer_backward(gout, ghn, gcn, h0, w_hh, out, act, cs, reverse)
    g = w_hh.shape[0] if w_hh.dim() == 3 else 1
    return dx, dh0, dc0, dw, None if b_hh is None else dx.reshape(
        dx.shape[0], g, dx.shape[1] // g, -1).sum((0, 2)).reshape(b_hh.shape)


def _lstm_layer_graph_vjp(gout, ghn, gcn, xproj, h0, c0, w_hh, b_hh, reverse):
    """A differentiable vjp (``create_graph``): the layer replayed step by step with ember ops
    and differentiated by autograd."""
    ins = [t for t in (xproj, h0, c0, w_hh, b_hh) if t is not None and t.requires_grad]
    h, c, outs = h0, c0, [None] * xproj.shape[0]
    for t in _steps(xproj.shape[0], reverse):
        h, c = lstm_cell(xproj[t], _hidden(h, w_hh, b_hh), c)
        outs[t] = h
    pairs = [(o, g) for o, g in ((ember.stack(outs) if outs else None, gout), (h, ghn),
                                 (c, gcn)) if g is not None and o is not None]
    got = iter(ember.autograd.grad([o for o, _ in pairs], ins, [g for _, g in pairs],
                                   create_graph=True, allow_unused=True) if ins and pairs
               else [None] * len(ins))
    return tuple(next(got) if t is not None and t.requires_grad else None
                 for t in (xproj, h0, c0, w_hh, b_hh))


@op("_lstm_layer_backward", method=False, function=False, differentiable=False)
def lstm_layer_backward(xp, grad_out, grad_hn, grad_cn, h0, w_hh, out, act, cs, reverse=False):
    """``_lstm_layer``'s gradients (xproj, h0, c0, w_hh) by backpropagation through time over
    the saved activations (the hidden bias's is the xproj one summed)."""
    T, B, G = act.shape
    H, dt = G // 4, (xp.float32 if act.dtype.itemsize < 4 else act.dtype)
    act, cs, out = (a.astype(dt, copy=False) for a in (act, cs, out))
    dh = xp.zeros((B, H), dt) if grad_hn is None else grad_hn.astype(dt, copy=True)
    dc = xp.zeros((B, H), dt) if grad_cn is None else grad_cn.astype(dt, copy=True)
    dgates = xp.empty_like(act)
    w1, ng = _shared(w_hh, None)[0], w_hh.shape[0] if w_hh.ndim == 3 else 1
    fn = _layer_kernel("lstm_bwd", xp, dt) if w1 is not None else None
    if fn is not None:
        dh, dc = _C.contiguous(dh), _C.contiguous(dc)
        # no output gradient: a zero row block read at every step (step stride 0)
        g = xp.zeros((B, H), dt) if grad_out is None else _C.contiguous(grad_out, dt)
        act, cs, w = _C.contiguous(act), _C.contiguous(cs), _C.contiguous(w1, dt)
        scratch = xp.empty((B, H), dt)           # (named: it must outlive the call)
        _check_status("_lstm_layer_backward", fn(
            _C.ptr(g), 0 if grad_out is None else B * H,
            *(_C.ptr(a) for a in (act, cs, w, dh, dc, dgates, scratch)),
            T, B, H, int(reverse), *blas.pointer(dt), _C.num_threads()))
    else:
        dh, dc = (d.reshape(B, H) for d in _lstm_layer_bptt(
            xp, None if grad_out is None else _grouped(ng, grad_out)[0], *_grouped(ng, dh, dc),
            w_hh.reshape(ng, G, H).astype(dt, copy=False), *_grouped(ng, act, cs, dgates),
            reverse))
    # dW_hh = sum over steps of dgates_t^T @ h_prev_t (per group of rows), where h_prev is the
    # previous step's output and h0 for the step processed first: two batched GEMMs, no
    # stacked copy of the h's
    first, rest = (T - 1, slice(0, T - 1)) if reverse else (0, slice(1, T))
    prev = slice(1, T) if reverse else slice(0, T - 1)
    dw = xp.zeros((ng, G, H), dt) if T == 0 else _summed_outer(
        xp, *_grouped(ng, dgates[first], h0.astype(dt, copy=False)))
    if T > 1:
        dw += _summed_outer(xp, *_grouped(ng, dgates[rest], out[prev]))
    back = h0.dtype
    return (dgates.astype(back, copy=False), dh.astype(back, copy=False),
            dc.astype(back, copy=False), dw.reshape(w_hh.shape).astype(back, copy=False))


def _summed_outer(xp, d, h):
    """Per group, the sum over steps and rows of ``d_row^T h_row``: grouped (..., g, b, 4H)
    and (..., g, b, H) in, (g, 4H, H) out."""
    d, h = (xp.moveaxis(a, -3, 0).reshape(a.shape[-3], -1, a.shape[-1]) for a in (d, h))
    return xp.matmul(xp.swapaxes(d, 1, 2), h)


def _lstm_layer_bptt(xp, grad_out, dh, dc, w, act, cs, dgates, reverse):
    """``_lstm_layer_backward``'s time loop in NumPy (the reference of ``lstm_bwd``) on
    grouped arrays (``_grouped``), a weight per group: fills ``dgates`` and returns the
    gradients of h0 and c0."""
    H = w.shape[-1]
    order = list(_steps(act.shape[0], reverse))
    for k in range(len(order) - 1, -1, -1):
        t = order[k]
        if grad_out is not None:
            dh += grad_out[t]
        a, d = act[t], dgates[t]
        parts, dc = _gate_grads(dh, dc, a[..., :H], a[..., H:2 * H], a[..., 2 * H:3 * H],
                                a[..., 3 * H:], cs[k], xp.tanh(cs[k + 1]))
        for j, part in enumerate(parts):
            d[..., j * H:(j + 1) * H] = part
        dh = d @ w
    return dh, dc


def _torch_layer(torch, xproj, h0, c0, w_hh, b_hh, reverse=False):
    h, c, outs, acts, cs = h0, c0, [None] * xproj.shape[0], [None] * xproj.shape[0], [c0]
    for t in _steps(xproj.shape[0], reverse):
        gates = xproj[t] + _hidden(h, w_hh, b_hh)
        i, f, g, o = gates.chunk(4, -1)
        i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
        c = f * c + i * g
        h = outs[t] = o * c.tanh()
        acts[t] = torch.cat([i, f, g, o], -1)
        cs.append(c)
    return (torch.stack(outs), h, c, torch.stack(acts).detach(), torch.stack(cs).detach())


def _layer_sample(dt, T, B, H, bias, reverse, groups=()):
    return Sample(make((T, B, 4 * H), dt), make((B, H), dt, seed=1), make((B, H), dt, seed=2),
                  make(groups + (4 * H, H), dt, seed=3, low=-1, high=1),
                  make(groups + (4 * H,), dt, seed=4) if bias else None, reverse)


lstm_layer.meta = lambda x, h0, c0, w, b, reverse=False: (
    empty(x.shape[:2] + h0.shape[-1:], x.dtype), empty(h0.shape, x.dtype),
    empty(h0.shape, x.dtype), empty(x.shape, x.dtype),
    empty((x.shape[0] + 1,) + h0.shape, x.dtype))
lstm_layer.torch_ref = _torch_layer
lstm_layer.samples = lambda dev, dt: [] if dt.category != 2 else [
    _layer_sample(dt, 3, 2, 2, True, False), _layer_sample(dt, 4, 1, 3, False, True),
    _layer_sample(dt, 3, 4, 2, True, True, groups=(2,))]
# NOTE: torch's cpu LSTM layer in float32 or a half type is oneDNN's, one node as this op's
# (its other types run a composed layer: see tests/test_grad_names.py's UNREACHED)
lstm_layer.grad_name_of = lambda xproj, *args: "MkldnnRnnLayerBackward0" if \
    xproj.dtype.itemsize <= 4 else lstm_layer.grad_name


# ---- forward mode (tangents.py): the cell's and the recurrence's tangents, step by step


def _cell_tangent(act, dpre, c_prev, dc_prev, c):
    """(dh, dc) of one step from its activated gates, the gates' pre-activation tangent and
    the cell states before and after."""
    i, f, g, o = act.chunk(4, -1)
    di, df, dg, do = dpre.chunk(4, -1)
    di, df, do, dg = di * i * (1 - i), df * f * (1 - f), do * o * (1 - o), dg * (1 - g * g)
    dc = df * c_prev + f * dc_prev + di * g + i * dg
    tc = c.tanh()
    return do * tc + o * (1 - tc * tc) * dc, dc


def _lstm_cell_jvp(a, t, out):
    pre = a["igates"] + a["hgates"]
    i, f, g, o = pre.chunk(4, -1)
    act = ember.cat([i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()], -1)
    return _cell_tangent(act, t["igates"] + t["hgates"], a["cx"], t["cx"], out[1])


def _lstm_layer_jvp(a, t, out):
    w, outs, act, cs = a["w_hh"], out[0], out[3], out[4]
    h, dh, dc = a["h0"], t["h0"], t["c0"]
    steps = _steps(a["xproj"].shape[0], a["reverse"])
    douts = [None] * len(steps)
    for k, s in enumerate(steps):
        dpre = t["xproj"][s] + _hidden(dh, w, None) + _hidden(
            h, t["w_hh"], None if a["b_hh"] is None else t["b_hh"])
        dh, dc = _cell_tangent(act[s], dpre, cs[k], dc, cs[k + 1])
        douts[s], h = dh, outs[s]
    return (ember.stack(douts) if douts else ember.zeros_like(outs)), dh, dc, None, None


lstm_cell.jvp = decomposed(_lstm_cell_jvp)
lstm_layer.jvp = decomposed(_lstm_layer_jvp)
