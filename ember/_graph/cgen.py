"""C code generation from op-level graphs: ``ember.compile``'s CPU backend.

``build(graph)`` turns a graph whose nodes carry shapes (``meta["val"]``) into a Python function
running it: runs of ops with a C lowering (``LOWER``, or an OpDef's own ``cgen`` attribute)
become one generated C kernel each, others (GEMMs, convolutions, views, indexing...) call their
OpDef. A kernel iterates over rows ``i`` (the leading dims, split over OpenMP threads) and the
last dim ``j`` (SIMD loops): pointwise values are expressions inlined into the loops that read
them, reductions over the last dim (``sum``, ``amax``, and through them softmax, layer_norm,
var) are one loop each, so softmax is three passes over a row kept in cache and GELU(x + b) one
pass; a sum over a polynomial in earlier row results is taken in their loop
(``Kernel._expand``), so layer_norm is two passes each way. Shapes are baked in (the caller
guards on them), but for dynamic sizes: dims that are ``dynamic.Sz`` polynomials are printed
as expressions of the sizes ``_s0``, ``_s1``... the kernels and the runner take at run time.
Kernels of tensors on a GPU are the same loops as CUDA kernels (a block of threads per row,
block reductions). ``toolchain.py`` compiles, caches and loads what this module writes
(docs/graphs.md).
"""
import hashlib
import math
import re

import numpy as np

from .dynamic import Sz
from .ir import GETITEM

_CTYPE = {np.dtype(np.float32): "float", np.dtype(np.float64): "double",
          np.dtype(np.bool_): "unsigned char", np.dtype(np.int64): "int64_t",
          np.dtype(np.int32): "int32_t", np.dtype(np.uint8): "unsigned char"}
_FLOAT, _BOOL = (np.dtype(np.float32), np.dtype(np.float64)), np.dtype(np.bool_)


# elements below which a kernel runs on one thread: splitting a loop of fewer (~0.5 ms) saves
# less than an OpenMP region costs on a busy machine, where the second thread waits to be
# scheduled (the benchmark GPT's kernels, 2^17-2^19 elements: its step 0.75 of the time at 2
# threads, CPU and wall alike)
PAR_MIN = 1 << 20


class Skip(Exception):
    """A lowering refuses this call (the op then runs through its OpDef)."""


class V:
    """A value inside a kernel: a C expression, per row (``row``) or per element."""
    __slots__ = ("name", "expr", "row", "deps", "phase", "red", "shape", "fmt", "args")

    def __init__(self, name, expr, row, deps, phase, red):
        self.name, self.expr, self.row, self.deps, self.phase, self.red = \
            name, expr, row, deps, phase, red
        self.shape = self.fmt = self.args = None


class Kernel:
    """One fused loop nest over ``shape`` (rows x last dim) computing in C type ``t``; on a
    cuda ``device``, a CUDA kernel of one thread block per row."""

    def __init__(self, shape, dtype, device="cpu"):
        self.shape, self.dtype, self.t = shape, dtype, _CTYPE[dtype]
        self.device, self.cuda = device, device != "cpu"
        self.n = shape[-1] if shape else 1
        self.m = math.prod(shape[:-1]) if shape else 1
        self.vals, self.loads, self.nodes, self.loaded, self.memo = [], {}, [], {}, {}
        self.vars = sorted({v for d in shape if isinstance(d, Sz) for m in d.terms for v in m})

    @property
    def flat(self):
        """A CUDA kernel without row reductions: its threads take elements, not rows (one row
        of 1M elements would keep one block busy and the GPU idle)."""
        return self.cuda and not any(v.red for v in self.vals)

    # ---- what lowerings call ---------------------------------------------------------------
    def lit(self, c):
        """A Python number (or a dynamic size) as a C constant of the kernel's type."""
        if isinstance(c, Sz):
            return f"(({self.t}){c})"
        c = float(c)
        if math.isnan(c):
            return "NAN"
        if math.isinf(c):
            return "INFINITY" if c > 0 else "(-INFINITY)"
        return f"(({self.t}){c!r})"

    def op(self, fmt, *args, row=None):
        """A value computed by ``fmt`` (``{0}``, ``{1}``... the arguments: values or numbers)."""
        deps = [a for a in args if isinstance(a, V)]
        if not deps or any(d.red == "col" for d in deps):
            raise Skip("no tensor operand, or a column sum (stored only)")
        expr = fmt.format(*[a.name if isinstance(a, V) else self.lit(a) for a in args])
        row = all(d.row for d in deps) if row is None else row
        v = self._new(expr, row, deps, max(d.phase for d in deps), None)
        v.fmt, v.args = fmt, args          # (what _expand reads)
        return v

    def fn(self, name, *args):
        """A math function: float32 exp and erf by vecmath.h (branch-free: vectorised), else
        libm's; ``exp_nonpos`` is exp of an argument known to be <= 0 or NaN (shorter in
        float32)."""
        if self.t == "float":
            if name == "erf":
                return self.op("erf_erfc_f32({0}, 0)", *args)
            name = name + "_f32" if name in ("exp", "exp_nonpos") else name + "f"
        elif name == "exp_nonpos":
            name = "exp"
        return self.op(name + "(" + ", ".join(f"{{{i}}}" for i in range(len(args))) + ")",
                       *args)

    def reduce(self, kind, x):
        """``x`` summed (``"sum"``) or maxed over the last dim: ``"max"`` propagates NaN,
        ``"maxnum"`` skips it (for a caller whose NaN reaches the result anyway: softmax's sum of
        exp(x - max))."""
        if x.row:
            x = self.op("{0}", x, row=False)
        if kind == "sum" and x.phase and self.t == "float":
            try:
                return self._linear_sum(x)
            except Skip:
                pass
        return self._red([x], kind)

    def _red(self, xs, red):
        """The row reduction ``red`` of the product of ``xs``; a sum is one accumulator per
        product, in double (``"dsum"``, the product too) once any caller asked for it, and a
        max one per value (causal attention's softmax and its fully-masked-row test)."""
        kinds = ("sum", "dsum") if "sum" in red else ("max", "maxnum")
        for v in self.vals:
            if v.red in kinds and v.deps == list(xs):
                if red in ("dsum", "max"):      # (a maxnum's caller gets NaN in its result
                    v.red = red                 # anyway: one NaN-propagating max serves both)
                return v
        return self._new(red, True, list(xs), max(x.phase for x in xs) + 1, red)

    # NOTE: a sum over a value that depends on earlier row results (layer_norm's sum of
    # (x - mean)^2, its backward's sum of g * (x - mean) * rstd) would need a loop after theirs.
    # Where the value is a polynomial in those row results with per-element coefficients, the
    # sum is that polynomial over the coefficients' sums, all taken in the earlier loop: two
    # passes over a row instead of three or four. The expanded form cancels (sum x^2 - n mean^2
    # where the mean is large), so its sums and the polynomial are in double, from float32
    # values (float64 kernels keep the passes: nothing wider to sum in).
    def _expand(self, v):
        """``v`` as ``[(coefficient, row values, element values)]``: a sum of products of row
        values and of values per element computed before any reduction."""
        if not isinstance(v, V):
            return [(float(v), (), ())]
        if v.row or not v.phase:
            return [(1.0, (v,), ()) if v.row else (1.0, (), (v,))]
        f, a = v.fmt, v.args or ()
        if f in ("({0} + {1})", "({0} - {1})"):
            s = 1.0 if f[4] == "+" else -1.0
            return self._expand(a[0]) + [(c * s, r, e) for c, r, e in self._expand(a[1])]
        if f in ("(-{0})", "{0}") or f == "({0} / {1})" and not isinstance(a[1], V):
            s = -1.0 if f == "(-{0})" else 1 / a[1] if f == "({0} / {1})" else 1.0
            return [(c * s, r, e) for c, r, e in self._expand(a[0])]
        if f not in ("({0} * {1})", "({0} * {0})"):
            raise Skip("not a polynomial in the row values")
        out = [(c0 * c1, r0 + r1, e0 + e1) for c0, r0, e0 in self._expand(a[0])
               for c1, r1, e1 in self._expand(a[-1])]
        if len(out) > 16:
            raise Skip("too many terms")
        return out

    def _linear_sum(self, x):
        """The row sum of ``x`` through ``_expand``: like terms gathered, the sums of their
        element products taken (in double) in the earlier loop."""
        terms, parts, deps = {}, [], []
        for c, rows, e in self._expand(x):
            rows, e = (tuple(sorted(t, key=lambda r: r.name)) for t in (rows, e))
            key = tuple(r.name for r in rows) + ("*",) + tuple(r.name for r in e)
            terms[key] = (terms[key][0] + c if key in terms else c, rows, e)
        for c, rows, e in terms.values():
            if c == 0:
                continue
            s = self._red(e, "dsum") if e else None
            deps += list(rows) + ([s] if s else [])
            parts.append(" * ".join([f"(double){c * (1 if s else self.n)!r}"] +
                                    [r.name for r in rows] + ([s.name] if s else [])))
        if not deps:
            raise Skip("constant")
        return self._new("(" + " + ".join(parts) + ")", True, deps,
                         max(d.phase for d in deps), None)

    def _new(self, expr, row, deps, phase, red):
        key = (expr, row, red, tuple(d.name for d in deps))
        v = self.memo.get(key)        # (the same expression on the same values: computed once)
        if v is not None and int(v.name[1:]) < len(self.vals) and \
                self.vals[int(v.name[1:])] is v:
            return v
        v = self.memo[key] = V(f"v{len(self.vals)}", expr, row, deps, phase, red)
        self.vals.append(v)
        return v

    # ---- loads and the C source ------------------------------------------------------------
    def load(self, key, shape, dtype):
        """A value read from input array ``key`` of ``shape`` (broadcast to the kernel's)."""
        if dtype not in _CTYPE or len(shape) > len(self.shape):
            raise Skip("input dtype or rank")
        pad = (1,) * (len(self.shape) - len(shape)) + tuple(shape)
        if any(a not in (1, b) for a, b in zip(pad, self.shape)):
            raise Skip("not broadcastable")
        if key not in self.loads:
            self.loads[key] = (len(self.loads), pad, dtype)
        elif (key, shape) in self.loaded:
            return self.loaded[(key, shape)]
        k, _, _ = self.loads[key]
        js = 1 if pad and pad[-1] == self.n and self.n != 1 else 0
        strides = [math.prod(pad[d + 1:]) for d in range(len(pad))]
        if pad[:-1] == self.shape[:-1]:
            ro = f"i * {strides[-2]}" if len(pad) > 1 else "0"
        else:
            terms = []
            for d in range(len(pad) - 1):
                if pad[d] != 1:
                    div = math.prod(self.shape[d + 1:-1])
                    terms.append(f"((i / {div}) % {self.shape[d]}) * {strides[d]}")
            ro = " + ".join(terms) or "0"
        idx = f"{ro} + j" if js else ro
        v = self.loaded[(key, shape)] = self._new(f"({self.t})in{k}[{idx}]", not js, [], 0, None)
        return v

    def source(self, name, outs, bools=(), acc=()):
        """C function ``name(in..., out..., acc, nt)``; ``outs``: the values stored, in order;
        those at the indices ``bools`` are comparisons, stored as bools; those at ``acc`` are
        added to what their array holds where bit k of ``acc`` is set (a ``.grad``). On cuda,
        ``extern "C" __global__ name(in..., out..., acc)``: the block of a row loops over its
        elements by thread, and each row reduction ends in a block reduction."""
        t, lines, cu = self.t, [], self.cuda
        params = [f"const {_CTYPE[dt]} *restrict in{k}" for k, _, dt in
                  sorted(self.loads.values(), key=lambda x: x[0])]
        params += [f"{'unsigned char' if k in bools else t} *restrict out{k}"
                   for k in range(len(outs))] + [f"int64_t _s{v}" for v in self.vars] + \
            ["int acc"] + ["int nt"] * (not cu)
        put = [f"{v.name} != 0" if k in bools else v.name for k, v in enumerate(outs)]
        lines.append(('// cuda\nextern "C" __global__ ' if cu else "") +
                     f"void {name}({', '.join(params)}) {{")
        jloop = "{{" if self.flat else \
            "for (int64_t j = threadIdx.x; j < {0}; j += blockDim.x) {{" if cu else \
            "for (int64_t j = 0; j < {0}; j++) {{"
        cols = [(k, v) for k, v in enumerate(outs) if v.red == "col"]
        par = f"num_threads(nt) if(nt > 1 && {self.m * self.n} >= {PAR_MIN})"
        if cols:        # (column sums: per thread over its rows, then added up)
            lines += [f"  for (int64_t j = 0; j < {self.n}; j++) out{k}[j] = 0;" for k, _ in cols]
            lines += [f"  #pragma omp parallel {par}", "  {"]
            lines += [f"  {t} c{v.name}[{self.n}] = {{0}};" for _, v in cols]
            lines += ["  #pragma omp for schedule(static)"]
        elif not cu:
            lines.append(f"  #pragma omp parallel for {par} schedule(static)")
        lines.append(f"  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < "
                     f"{self.m * self.n}; e += (int64_t)gridDim.x * blockDim.x) {{ const int64_t "
                     f"i = e / {self.n}, j = e % {self.n};" if self.flat else
                     f"  for (int64_t i = blockIdx.x; i < {self.m}; i += gridDim.x) {{" if cu
                     else f"  for (int64_t i = 0; i < {self.m}; i++) {{")
        phases = max((v.phase for v in self.vals), default=0)
        done, kept, cols_at = set(), set(), {}
        # a column sum is added up in the first loop that computes its value: the loop ending
        # the next phase's row reductions where there is one (layer_norm's bias gradient in
        # its backward's first pass), else the last loop
        ends = {v.phase for v in self.vals if v.red not in (None, "col")}
        for _, v in cols:
            cols_at.setdefault(v.phase + 1 if v.phase + 1 in ends else None, []).append(v)
        late = cols_at.get(None, [])

        def need(vs, row):
            """The values of kind ``row`` that ``vs`` read (through values of either kind, not
            through reductions: those ended in an earlier loop), not emitted yet, in order."""
            out, seen = [], set()

            def walk(v):
                if v.name in seen or v.red:
                    return
                seen.add(v.name)
                for d in v.deps if v.name not in kept else ():   # (kept: read back, not redone)
                    walk(d)
                if v.row == row and v.name not in done:
                    out.append(v)
            for v in vs:
                walk(v)
            return out

        def emit(v, ind):
            if v.name in kept:
                lines.append(f"{ind}const {t} {v.name} = s{v.name}[j];")
            elif v.name in scratch:     # (first computed: kept for the later loops)
                lines.append(f"{ind}const {t} {v.name} = {v.expr}; s{v.name}[j] = {v.name};")
                kept.add(v.name)
            else:
                lines.append(f"{ind}const {t} {v.name} = {v.expr};")
        # a math call (exp, erf...) that several loops over a row read is computed once into a
        # row buffer on the stack (softmax's exp), where the row fits
        uses = {}
        for p in range(1, phases + 1):
            for v in need([d for r in self.vals if r.red not in (None, "col") and r.phase == p
                           for d in r.deps] + [c.deps[0] for c in cols_at.get(p, [])], False):
                uses.setdefault(v.name, [v, 0])[1] += 1
        for v in need([v for v in outs if not v.row and not v.red] +
                      [c.deps[0] for c in late], False):
            uses.setdefault(v.name, [v, 0])[1] += 1
        scratch = {name for name, (v, c) in uses.items() if c > 1 and v.expr[:1].isalpha()
                   and type(self.n) is int and self.n <= 4096 and not cu}
        lines += [f"    {t} s{name}[{self.n}];" for name in sorted(scratch)]
        for p in range(phases + 1):
            rows = [v for v in self.vals if v.row and not v.red and v.phase == p]
            reds = [v for v in self.vals if v.red not in (None, "col") and v.phase == p]
            for v in need([d for r in reds for d in r.deps], True):
                emit(v, "    ")
                done.add(v.name)
            for v in reds:           # (the reductions that end this phase)
                lines.append(f"    {'double' if v.red == 'dsum' else t} {v.name} = " +
                             ("0;" if "sum" in v.red else "-INFINITY;") +
                             (f" int {v.name}n = 0;" if v.red == "max" else ""))
            if reds:
                clause = " ".join(f"reduction(+:{v.name})" if "sum" in v.red else
                                  f"reduction(max:{v.name})" + (f" reduction(|:{v.name}n)"
                                                                if v.red == "max" else "")
                                  for v in reds)
                lines += [f"    #pragma omp simd {clause}"] * (not cu) + [
                    "    " + jloop.format(self.n)]
                for v in need([d for r in reds + cols_at.get(p, []) for d in r.deps], False):
                    emit(v, "      ")
                lines += [f"      c{v.name}[j] += {v.deps[0].name};" for v in cols_at.get(p, [])]
                for v in reds:
                    x = ("(double)" if v.red == "dsum" else "") + " * ".join(d.name for d in v.deps)
                    lines.append(f"      {v.name} += {x};" if "sum" in v.red else
                                 f"      {v.name} = {x} > {v.name} ? {x} : {v.name};" +
                                 (f" {v.name}n |= {x} != {x};" if v.red == "max" else ""))
                lines.append("    }")
                for v in reds if cu else ():       # (every thread's part, then the block's)
                    nan = f" {v.name}n = block_reduce({v.name}n, 0);" if v.red == "max" else ""
                    lines.append(f"    {v.name} = block_reduce({v.name}, "
                                 f"{int('max' in v.red)});{nan}")
                for v in reds:
                    if v.red == "max":
                        lines.append(f"    if ({v.name}n) {v.name} = NAN;")
                    done.add(v.name)
            for v in need(rows, True):
                emit(v, "    ")
                done.add(v.name)
        full = [(k, v) for k, v in enumerate(outs) if not v.row and not v.red]
        for v in need([v for _, v in enumerate(outs) if v.row], True):
            emit(v, "    ")
        if full or late:
            lines += ["    #pragma omp simd"] * (not cu) + ["    " + jloop.format(self.n)]
            for v in need([v for _, v in full] + [v.deps[0] for v in late], False):
                emit(v, "      ")
            lines += [f"      out{k}[i * {self.n} + j] = " + (f"(acc >> {k} & 1) ? out{k}[i * "
                      f"{self.n} + j] + {put[k]} : " if k in acc else "") + f"{put[k]};"
                      for k, v in full]
            lines += [f"      c{v.name}[j] += {v.deps[0].name};" for v in late]
            lines.append("    }")
        lines += [f"    {'if (j == 0) ' if self.flat else 'if (threadIdx.x == 0) ' * cu}"
                  f"out{k}[i] = {put[k]};"
                  for k, v in enumerate(outs) if v.row]
        lines.append("  }")
        if cols:
            lines += ["  #pragma omp critical", "  {"]
            lines += [f"  for (int64_t j = 0; j < {self.n}; j++) out{k}[j] += c{v.name}[j];"
                      for k, v in cols]
            lines += ["  }", "  }"]
        lines.append("}")
        src = "\n".join(lines)
        return src.replace("int64_t", "long long").replace("restrict", "__restrict__") if cu \
            else src


# ---- lowerings: op name -> fn(kernel, *args, **kwargs) over kernel values and numbers ----

def _last(k, x, dim, keepdim=True):
    """Check ``dim`` is the kernel's last dim (reductions run along rows only)."""
    nd = len(k.shape)
    dims = (dim,) if isinstance(dim, int) else tuple(dim) if dim is not None else \
        tuple(range(nd))
    if nd == 0 or [d % nd for d in dims] != [nd - 1] or x.shape != k.shape:
        raise Skip("reduction over other than the last dim")


def _sum(k, input, dim=None, keepdim=False, dtype=None):
    if dtype is not None:
        raise Skip("dtype")
    nd = len(k.shape)
    dims = (dim,) if isinstance(dim, int) else tuple(dim) if dim is not None else ()
    if nd >= 2 and sorted(d % nd for d in dims) == list(range(nd - 1)) and type(k.n) is int \
            and k.n <= 4096 and not k.cuda and \
            input.shape == k.shape:         # (a bias gradient: a column sum, stored only)
        x = input if not input.row else k.op("{0}", input, row=False)
        return k._new("col", False, [x], x.phase, "col")
    _last(k, input, dim)
    return k.reduce("sum", input)


def _mean(k, input, dim=None, keepdim=False, dtype=None):
    _last(k, input, dim)
    return k.op("({0} / {1})", _sum(k, input, dim, keepdim, dtype), k.n)


def _amax(k, input, dim=(), keepdim=False):
    _last(k, input, None if dim == () else dim)
    return k.reduce("max", input)


def _var(k, input, dim=None, unbiased=None, keepdim=False, correction=None):
    corr = correction if correction is not None else (0 if unbiased is False else 1)
    d = k.op("({0} - {1})", input, _mean(k, input, dim))
    return k.op("({0} / {1})", k.reduce("sum", k.op("({0} * {0})", d)), max(k.n - corr, 0))


def _softmax(k, input, dim, dtype=None, log=False):
    _last(k, input, dim)
    if dtype is not None:
        raise Skip("dtype")
    s = k.op("({0} - {1})", input, k.reduce("maxnum", input))
    e = k.reduce("sum", k.fn("exp_nonpos", s))
    return k.op("({0} - {1})", s, k.fn("log", e)) if log else \
        k.op("({0} * {1})", k.fn("exp_nonpos", s), k.op("(1 / {0})", e))


def _layer_norm(k, input, normalized_shape, weight=None, bias=None, eps=1e-5, rms=False):
    if len(tuple(normalized_shape)) != 1:
        raise Skip("normalized over several dims")
    _last(k, input, -1)
    d = input if rms else k.op("({0} - {1})", input, _mean(k, input, -1))
    var = k.op("({0} / {1})", k.reduce("sum", k.op("({0} * {0})", d)), k.n)
    y = k.op("({0} * ({2}1 / sqrt{3}({1} + {4})))".replace("{2}", f"({k.t})").replace(
        "{3}", "f" if k.t == "float" else "").replace("{4}", k.lit(eps)), d, var)
    y = k.op("({0} * {1})", y, weight) if weight is not None else y
    return k.op("({0} + {1})", y, bias) if bias is not None else y


def _rms_norm(k, input, normalized_shape, weight=None, eps=None):
    eps = float(np.finfo(k.dtype).eps) if eps is None else eps     # (torch's default)
    return _layer_norm(k, input, normalized_shape, weight, None, eps, rms=True)


def _gelu(k, input, approximate="none", grad=None):
    f = "f32" if k.t == "float" else "f64"
    if grad is not None:        # (gelu_backward: the eager kernel's Phi(x) + x phi(x))
        if approximate == "tanh":
            raise Skip("tanh GELU's backward")
        return k.op(f"({{0}} * gelu_grad_{f}({{1}}))", grad, input)
    if approximate == "tanh":
        return k.op("({2} * {0} * (1 + {1}))", input, k.fn("tanh", k.op(
            "({1} * ({0} + {2} * {0} * {0} * {0}))", input, math.sqrt(2 / math.pi), 0.044715)),
            0.5)
    # (x Phi(x) by vecmath.h's phi_cdf, as the eager kernel: erfc's fit, no erf series)
    return k.op(f"gelu_exact_{f}({{0}})", input)


def _add(c):
    def add(k, input, other, alpha=1):
        if alpha != 1:
            other = k.op("({0} * {1})", other, alpha) if isinstance(other, V) else other * alpha
        return k.op(f"({{0}} {c} {{1}})", input, other)
    return add


def _div(k, input, other, rounding_mode=None):
    if rounding_mode is not None:
        raise Skip("rounding_mode")
    if isinstance(other, V) and other.row and not (isinstance(input, V) and input.row):
        # (by a row's value: its reciprocal once per row, a multiply per element)
        return k.op("({0} * {1})", input, k.op("(1 / {0})", other))
    return k.op("({0} / {1})", input, other)


def _pow(k, input, exponent):
    if not isinstance(input, V):
        raise Skip("scalar base")
    if exponent == 2:
        return k.op("({0} * {0})", input)
    if exponent == 1:
        return k.op("{0}", input)
    if exponent == 0.5:
        return k.fn("sqrt", input)
    return k.fn("pow", input, exponent)


def _clamp(k, input, min=None, max=None):
    if isinstance(min, V) or isinstance(max, V):
        raise Skip("tensor bounds")
    y = input
    if min is not None:       # (NaN stays NaN, as torch's clamp)
        y = k.op("({0} < {1} ? {1} : {0})", y, min)
    if max is not None:
        y = k.op("({0} > {1} ? {1} : {0})", y, max)
    return y


def _where(k, condition, input=None, other=None):
    if input is None or other is None:
        raise Skip("where(condition) alone")
    return k.op("({0} ? {1} : {2})", condition, input, other)


def _un(fmt):
    return lambda k, input: k.op(fmt, input)


def _bin(c):
    return lambda k, input, other: k.op(f"({{0}} {c} {{1}})", input, other)


def _math(name):
    return lambda k, input: k.fn(name, input)


_PICK = "({0} != {0} ? {0} : {1} != {1} ? {1} : {0} {2} {1} ? {0} : {1})"
LOWER = {
    "add": _add("+"), "sub": _add("-"), "mul": _bin("*"),
    "div": _div, "pow": _pow, "neg": _un("(-{0})"), "abs": _math("fabs"),
    "exp": _math("exp"), "log": _math("log"), "log1p": _math("log1p"),
    "expm1": _math("expm1"), "sqrt": _math("sqrt"), "sin": _math("sin"), "cos": _math("cos"),
    "tanh": _math("tanh"), "erf": _math("erf"), "square": _un("({0} * {0})"),
    "rsqrt": lambda k, input: k.op("(1 / {0})", k.fn("sqrt", input)),
    "reciprocal": _un("(1 / {0})"),
    "sigmoid": lambda k, input: k.op("(1 / (1 + {0}))", k.fn("exp", k.op("(-{0})", input))),
    "silu": lambda k, input: k.op("({0} / (1 + {1}))", input,
                                  k.fn("exp", k.op("(-{0})", input))),
    "relu": _un("({0} < 0 ? 0 : {0})"), "gelu": _gelu, "clamp": _clamp,
    "gelu_backward": lambda k, grad_output, input, approximate="none": _gelu(
        k, input, approximate, grad_output),
    "threshold_backward": lambda k, grad_output, input, threshold: k.op(
        "({0} * ({1} > {2}))", grad_output, input, threshold),       # (eager's multiply)
    "maximum": lambda k, input, other: k.op(_PICK.replace("{2}", ">"), input, other),
    "minimum": lambda k, input, other: k.op(_PICK.replace("{2}", "<"), input, other),
    "masked_fill": lambda k, input, mask, value: k.op("({1} ? {2} : {0})", input, mask, value),
    "where": _where, "detach": lambda k, input: input,
    "eq": _bin("=="), "ne": _bin("!="), "lt": _bin("<"), "le": _bin("<="), "gt": _bin(">"),
    "ge": _bin(">="), "logical_not": _un("({0} == 0)"),
    "sum": _sum, "mean": _mean, "amax": _amax, "var": _var, "softmax": _softmax,
    "log_softmax": lambda k, input, dim, dtype=None: _softmax(k, input, dim, dtype, log=True),
    "layer_norm": _layer_norm, "rms_norm": _rms_norm,
}


def lowering(target):
    """The C lowering of an OpDef (its own ``cgen`` attribute, else the table's), or None; of a
    method call, ``detach``'s only (an identity in a kernel)."""
    if isinstance(target, str):
        return LOWER["detach"] if target == "detach" else None
    return getattr(target, "cgen", None) or LOWER.get(getattr(target, "name", None))


# ---- scheduling a graph into kernels and OpDef calls ------------------------------------

def _meta(n):
    v = n.meta.get("val") if hasattr(n, "meta") else None
    return v if v is not None and hasattr(v, "shape") and not isinstance(v, list) else None


def _fusable(device):
    """Whether ops on ``device`` fuse: the cpu's (C), a GPU's where CuPy compiles kernels and
    ember's fused CUDA kernels are on (``EMBER_CUDA_FUSED``)."""
    if device.type == "cpu":
        return True
    if device.type != "cuda":
        return False
    from .._backends import backend
    from ..cuda._kernels import enabled
    return enabled(backend(device).xp)


def _is_node(a):
    return hasattr(a, "op") and hasattr(a, "users")


def _broadcast(shapes):
    """``np.broadcast_shapes`` of shapes that may hold ``Sz`` dims; None where they do not
    broadcast (or there are none)."""
    dims = [{s[d] for s in shapes if len(s) >= -d} - {1}
            for d in range(-max(map(len, shapes), default=0), 0)]
    return tuple(x.pop() if x else 1 for x in dims) if shapes and max(map(len, dims),
                                                                      default=0) < 2 else None


class _Plan:
    """Splits a graph's nodes into steps: ("call", node) or ("kernel", Kernel, outs)."""

    def __init__(self, graph):
        self.steps, self.k, self.vals, self.owner = [], None, {}, {}
        for n in graph.nodes:
            if (n.op == "call_function" or n.op == "call_method" and n.target == "detach") \
                    and self._try(n):
                continue
            if self.k is not None and (n.is_impure() or any(self.owner.get(a) is self.k
                                                            for a in n.all_input_nodes)):
                self.flush()      # (a write must not pass the kernel's reads of its target)
            if n.op not in ("placeholder", "output"):
                self.steps.append(("call", n))
        self.flush()

    def _try(self, n):
        low, out = lowering(n.target), _meta(n)
        if low is None or out is None or not _fusable(out.device) or \
                out.dtype.np not in _FLOAT + (_BOOL,):
            return False
        shapes, dev = [], str(out.device)
        for a in n.all_input_nodes:
            m = _meta(a)
            if m is None or str(m.device) != dev:
                return False
            shapes.append(tuple(m.shape))
        full = _broadcast(shapes)   # (a reduction's output is smaller: its input sets the loop)
        if full is None:
            return False
        dt, k = out.dtype.np, self.k
        if dt == _BOOL:     # (a comparison: 0/1 in its float operands' type, or the kernel's)
            fl = {_meta(a).dtype.np for a in n.all_input_nodes} - {_BOOL}
            if len(fl) > 1 or not fl <= set(_FLOAT) or not fl and (
                    k is None or full not in (k.shape, k.shape[:-1] + (1,))):
                return False        # (integers: not exact in a float loop)
            dt = fl.pop() if fl else k.dtype
        if k is not None and (k.dtype != dt or k.device != dev or
                              full not in (k.shape, k.shape[:-1] + (1,))):
            self.flush()
            k = None
        fresh = k is None
        if fresh:
            k = Kernel(full, dt, dev)
        mark, loads, loaded = len(k.vals), dict(k.loads), dict(k.loaded)
        try:
            def val(a):
                if not _is_node(a):
                    if isinstance(a, (tuple, list)):
                        return type(a)(val(x) for x in a)
                    if isinstance(a, (int, float, bool, str, type(None), Sz)) and \
                            not isinstance(a, complex):
                        return a
                    raise Skip("argument kind")
                if self.owner.get(a) is k:
                    v = self.vals[a]
                    if v.shape not in (k.shape, k.shape[:-1] + (1,)) or v.red == "col":
                        raise Skip("in-kernel value of another shape")
                    return v
                m = _meta(a)
                v = k.load(a, tuple(m.shape), m.dtype.np)
                v.shape = tuple(m.shape)
                return v
            args = val(tuple(n.args))
            kwargs = {key: val(v) for key, v in n.kwargs.items()}
            v = low(k, *args, **kwargs)
        except (Skip, TypeError):
            del k.vals[mark:]
            k.loads, k.loaded = loads, loaded
            return False
        v.shape = tuple(out.shape)
        if v.row and v.shape == k.shape and k.n != 1:     # (a row value stored per element)
            v = k.op("{0}", v, row=False)
            v.shape = tuple(out.shape)
        if not v.row and v.shape != k.shape and v.red != "col":
            del k.vals[mark:]
            k.loads, k.loaded = loads, loaded
            return False
        if fresh:
            self.k = k
        k.nodes.append(n)
        self.vals[n], self.owner[n] = v, k
        return True

    def flush(self):
        k, self.k = self.k, None
        if k is None:
            return
        outs = [n for n in k.nodes if any(self.owner.get(u) is not k for u in n.users)]
        self.steps.append(("kernel", k, outs))


# ---- the generated Python around the kernels -------------------------------------------

def build(graph):
    """``(python_source, c_source, table, attrs, sigs)``: ``make(python_source, table, sigs,
    load(c_source))`` is the function running ``graph``, taking its placeholders, then one
    value per ``get_attr`` target in ``attrs``."""
    plan = _Plan(graph)
    nodes = list(graph.nodes)
    last = {}            # (by step: a call the kernel does not wait for may run before it)
    for i, s in enumerate(plan.steps):
        for a in (s[1].all_input_nodes if s[0] == "call" else s[1].loads):
            last[a] = i
    out = [n for n in nodes if n.op == "output"][0]
    for a in out.all_input_nodes:
        last[a] = len(plan.steps)
    # a result returned once and read by nothing else (a gradient) may be added into an array
    # the caller hands in (``run(..., _acc={position: array})``: the leaf's ``.grad``)
    res = out.args[0] if type(out.args[0]) is tuple else ()
    into = {a: p for p, a in enumerate(res) if _is_node(a) and res.count(a) == 1 and
            len(a.users) == 1}
    dying = {}
    for a, i in last.items():
        dying.setdefault(i, []).append(a)
    places = [n for n in nodes if n.op == "placeholder"]
    attrs = sorted({n.target for n in nodes if n.op == "get_attr"})
    py, c, table = [], ["#include <math.h>", "#include <stdint.h>", '#include "vecmath.h"'], []
    sigs = {}

    def src(a):
        if _is_node(a):
            return a.name
        if isinstance(a, Sz):
            return repr(a)
        if type(a) in (tuple, list):
            inner = ", ".join(src(x) for x in a)
            return f"[{inner}]" if type(a) is list else f"({inner},)" if a else "()"
        if type(a) is dict:
            return "{" + ", ".join(f"{k!r}: {src(v)}" for k, v in a.items()) + "}"
        table.append(a)
        return f"_k[{len(table) - 1}]"
    args = [n.name for n in places] + [f"_a{i}" for i in range(len(attrs))]
    py.append(f"def run({', '.join(args + ['_acc=_none', '_s=()'])}):")
    for n in nodes:
        if n.op == "get_attr":
            py.append(f"    {n.name} = _a{attrs.index(n.target)}")
    ki = 0
    for si, step in enumerate(plan.steps):
        if step[0] == "call":
            n = step[1]
            if n.op == "get_attr":
                continue
            if n.op == "call_function" and n.target is GETITEM:
                line = f"{n.name} = {src(n.args[0])}[{src(n.args[1])}]"
            elif n.op == "call_function":
                table.append(n.target)
                line = f"{n.name} = _k[{len(table) - 1}]({src(tuple(n.args))[1:-1].rstrip(',')}" \
                    + "".join(f", {k}={src(v)}" for k, v in n.kwargs.items()) + ")"
            elif n.op == "call_method":
                line = f"{n.name} = {src(n.args[0])}.{n.target}(" + \
                    ", ".join(src(a) for a in n.args[1:]) + ")"
            else:
                raise NotImplementedError(f"codegen: node kind {n.op}")
            py.append("    " + line)
        else:
            _, k, outs = step
            dts = [_meta(o).dtype.np for o in outs]
            acc = [j for j, o in enumerate(outs) if o in into and dts[j] != _BOOL and
                   not plan.vals[o].row and plan.vals[o].red is None]
            body = k.source("KERNEL", [plan.vals[o] for o in outs],
                            [j for j, dt in enumerate(dts) if dt == _BOOL], acc)
            fname = "k" + hashlib.sha1(body.encode()).hexdigest()[:16]   # (layers share one)
            if fname not in sigs:
                c.append(body.replace("KERNEL", fname, 1))
            ki += 1
            ins = sorted(k.loads.items(), key=lambda kv: kv[1][0])
            sigs[fname] = (len(ins) + len(outs), len(k.vars)) + ("cuda",) * k.cuda
            xp = ", _xp(_i0)" if k.cuda else ""
            for j, (a, _) in enumerate(ins):
                py.append(f"    _i{j} = _c({a.name}._data)")
            for j, o in enumerate(outs):
                shape, dt = tuple(_meta(o).shape), dts[j]
                b = f"_buf({ki}, {j}, {shape!r}, _{dt.name}{xp})"
                py.append(f"    _o{j} = {b}" if j not in acc else
                          f"    _a{j} = _into(_acc, {into[o]}, {shape!r}, _{dt.name})\n"
                          f"    _o{j} = {b} if _a{j} is None else _a{j}")
            flags = " | ".join(f"(_a{j} is not None) << {j}" for j in acc) or "0"
            arrays = [f"_i{j}" for j in range(len(ins))] + [f"_o{j}" for j in range(len(outs))]
            if k.cuda:      # (a block of threads per row, a power of two: block_reduce halves)
                block = 256 if type(k.n) is not int or k.flat else max(32, min(256, 1 << (
                    k.n - 1).bit_length()))
                grid = f"({k.m * k.n} + 255) // 256" if k.flat else k.m
                py.append(f"    _lib.{fname}((max(min({grid}, 65535), 1),), ({block},), ("
                          + ", ".join(arrays + [f"_i64(_s{v})" for v in k.vars] +
                                      [f"_i32({flags})"]) + "))")
            else:
                py.append(f"    _lib.{fname}(" + ", ".join(
                    [f"_p({a})" for a in arrays] + [f"_s{v}" for v in k.vars]
                    + [flags, "_nt()"]) + ")")
            dev = f", {ins[0][0].name}.device" if k.cuda else ""
            py += [f"    {o.name} = _w(_o{j}{dev})" for j, o in enumerate(outs)]
            tmp = [f"_i{j}" for j in range(len(ins))] + [f"_o{j}" for j in range(len(outs))]
            py.append("    del " + ", ".join(tmp) if tmp else "    pass")
        if dying.get(si):
            py.append("    del " + ", ".join(sorted({a.name for a in dying[si]})))
    py.append(f"    return {src(out.args[0])}")
    used = sorted({int(v) for v in re.findall(r"\b_s(\d+)\b", "\n".join(py))})
    py[1:1] = [f"    _s{v} = _s[{v}]" for v in used]     # (the dynamic sizes it reads)
    return "\n".join(py), "\n\n".join(c), table, attrs, sigs
