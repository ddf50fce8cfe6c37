"""The op registry: every op is one ``OpDef`` holding its forward, backward, meta rule and
test samples. The public functions, Tensor methods, tests and docs are all read off this table.
"""
import inspect
import types


def _parameters(fwd):
    """``(names, {name: default}, indices of the required positional ones)`` of ``fwd``'s
    parameters after ``xp``. Read off the code object of a plain function: inspect.signature
    over the whole registry would slow ``import ember`` noticeably."""
    # as inspect.signature does, read the function a functools.wraps wrapper stands for
    if hasattr(fwd, "__wrapped__"):        # (unwrap only where there is a wrapper: it is slow)
        fwd = inspect.unwrap(fwd, stop=lambda f: hasattr(f, "__signature__"))
    code = fwd.__code__ if type(fwd) is types.FunctionType else None
    if code is None or hasattr(fwd, "__signature__"):
        params = list(inspect.signature(fwd).parameters.values())[1:]
        return (tuple(p.name for p in params),
                {p.name: p.default for p in params if p.default is not p.empty},
                tuple(i for i, p in enumerate(params) if p.default is p.empty and
                      p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)))
    n_pos, n_kw, names = code.co_argcount, code.co_kwonlyargcount, code.co_varnames
    pos, kwonly, rest = names[:n_pos], names[n_pos:n_pos + n_kw], n_pos + n_kw
    var = ()                    # *args sits between the positional and keyword-only names
    if code.co_flags & inspect.CO_VARARGS:
        var, rest = (names[rest],), rest + 1
    varkw = (names[rest],) if code.co_flags & inspect.CO_VARKEYWORDS else ()
    pos_defaults = fwd.__defaults__ or ()
    defaults = dict(zip(pos[n_pos - len(pos_defaults):], pos_defaults))
    defaults.update(fwd.__kwdefaults__ or {})
    return (pos[1:] + var + kwonly + varkw, defaults, tuple(range(n_pos - 1 - len(pos_defaults))))


def node_name(name, overload=0):
    """Torch's name of the node of aten op ``name``: ``node_name("log1p") == "Log1PBackward0"``.

    NOTE: torch's generated names title-case each word, so a letter after a digit is upper
    case too (``Log1P``, ``MaxPool2D``); ``overload`` numbers the op's differentiable overloads
    in torch's order (``SumBackward1`` is ``sum`` with ``dim``)."""
    return name.strip("_").title().replace("_", "") + f"Backward{int(overload)}"


def overload_if_given(name, pos, param, default=None):
    """A ``grad_name_of`` rule: torch's node of ``name`` is its overload 1 when argument
    ``param`` (at position ``pos``) is given (not ``default``), else overload 0: ``sum`` with a
    ``dim`` is SumBackward1."""
    names = node_name(name), node_name(name, 1)

    def rule(*args, **kwargs):
        v = args[pos] if len(args) > pos else kwargs.get(param, default)
        return names[not (v is default or not hasattr(v, "_data") and v == default)]
    return rule


def overload_if_tensor(name, pos, param, tensor=1, number=0):
    """A ``grad_name_of`` rule: torch's node of ``name`` is its overload ``tensor`` when argument
    ``param`` (at position ``pos``) is a tensor, else ``number``: ``clamp_min`` with a tensor
    bound is ClampMinBackward1."""
    names = node_name(name, number), node_name(name, tensor)

    def rule(*args, **kwargs):
        return names[hasattr(args[pos] if len(args) > pos else kwargs.get(param), "_data")]
    return rule


class OpDef:
    """One operator.

    Args:
        name: the torch name (``torch.<name>`` and ``Tensor.<name>``).
        fwd: ``fwd(xp, *args, **kwargs)`` computing arrays from arrays with array module ``xp``.
        promote: ``"common"`` casts tensor and scalar operands to their promoted dtype first,
            ``"float"`` also turns integer results into the default float, None leaves dtypes
            be; or a function ``(args, kwargs) -> mode`` when the mode depends on the call.
        promote_args: positions of the arguments that take part in promotion (default: the
            required positional parameters).
        view: the output is a view sharing the first input's storage; ``"maybe"``: a view
            where the strides allow, else a copy (reshape).
        differentiable: False for ops whose outputs never carry gradients (comparisons...).
        nondiff_outputs: indices of outputs that never require grad (e.g. indices of ``max``).
        method / function: also expose as ``Tensor.<name>`` / ``ember.<name>``.
        inplace: also define the in-place method ``Tensor.<name>_``.
        aliases: other public names of the same op.
        returns: field names of a multi-output op's result (``("values", "indices")``): the
            public function returns the named tuple ``ember.return_types.<name>``, as
            ``torch.return_types``.
        opmath: float16/bfloat16 operands are computed in float32 and the result rounded once,
            as torch's kernels do (default: the ``"pointwise"`` ops). Needs ``promote``.
        ufunc: the NumPy ufunc that ``fwd(numpy, *operands)`` is for float32/float64/complex
            operands without options (``add``: ``numpy.add``). The C fast path calls it directly,
            sparing the forward's Python frame; a registry test holds the two to the same
            results. An in-place call writes it straight into the tensor.
        into: ``into(out, *operands)`` writes what ``fwd(numpy, *operands)`` returns into
            ``out``, the first operand's float32/float64 array, where the op has no ufunc: the
            C path's in-place write without a result array (``_fill``, ``_copy_from``,
            ``index_put``, ``clamp``). It gets arrays (a float one of ``out``'s dtype), tuples
            of index arrays, numbers and plain options, and may refuse a call with ValueError
            or TypeError having written nothing. A registry test holds it to the forward.

    Attributes:
        jvp: the forward-mode rule ``jvp(opdef, args, kwargs, tangents, out)`` (see
            tangents.py), set beside the vjp; by default a pointwise op's derives from its
            vjp and any other op's is the double-vjp fallback.
        grad_name: the name torch gives the node of this op's calls (``type(y.grad_fn).__name__``
            and ``y.grad_fn.name()``): by default the name in torch's camel case,
            ``<Name>Backward0``.
        grad_name_of: where torch's node depends on the call (the aten op that ran, its
            overload), a rule ``(*args, **kwargs) -> name`` taking the op's arguments; else
            None. A name ``torch::autograd::X`` makes a node of type ``X`` (torch's copy nodes).
    """

    def __init__(self, name, fwd, tags=(), promote=None, view=False, differentiable=True,
                 nondiff_outputs=(), method=True, function=True, inplace=False, aliases=(),
                 promote_args=None, returns=None, opmath=None, ufunc=None, into=None):
        self.name, self.fwd, self.tags, self.ufunc = name, fwd, tuple(tags), ufunc
        self.into = into
        self.opmath = "pointwise" in self.tags if opmath is None else opmath
        self.promote = promote
        self.view, self.differentiable = view, differentiable
        self.nondiff_outputs = tuple(nondiff_outputs)
        self.method, self.function, self.inplace, self.aliases = method, function, inplace, aliases
        self.vjp_fn, self.save, self.save_result, self.needed_by = None, (), False, {}
        self.meta, self.samples, self.errors = None, None, ()
        self.kinks, self.tol, self.skips, self.dtypes = (), {}, {}, None
        self.writes_overlap = False     # in place into expanded (overlapping) views, as fill_
        # For the tests: the op reads one triangle of a Hermitian input (eigh, cholesky), so
        # finite differences need (A + A^H) / 2; ``gauge(*outputs)`` picks one representative
        # of outputs defined up to sign or phase (singular vectors, eigenvectors, QR).
        self.hermitian_input, self.gauge = False, None
        # For the tests: float16/bfloat16 results are torch's bit for bit, or within ``ulps``
        # units in the last place where torch's float32 math library rounds differently;
        # ``(None, reason)`` where torch's result is not the one to copy.
        self.half_ulps = (0, "")
        self.sparse = None              # rule for sparse COO operands: see _ops/sparse.py
        self.grad_name, self.grad_name_of = node_name(name), None
        self.params, self.defaults, required = _parameters(fwd)
        # operands are the required positional parameters unless told otherwise
        self.promote_args = promote_args or required
        self.__doc__ = fwd.__doc__
        self.returns = returns          # the named tuple itself is made on first use (__getattr__)

    def vjp(self, save=(), needed_by=None):
        """Decorator registering the backward ``vjp(g, *args, **kwargs)``, written in ember ops.

        ``save`` names the arguments the backward reads; the others reach it as metadata
        (shape, dtype, device) only. ``"result"`` saves the output, passed as ``result=``.
        ``needed_by`` maps a saved argument to the arguments whose gradients read it (e.g.
        ``mul``'s ``input`` only matters for ``other``'s gradient): when none of those requires
        grad, an in-place change to it is no error, as in torch; for ``"result"``, the output is
        then not saved at all (the vjp gets ``result=None``). ``"cross"`` says each saved
        argument is read only by the others' gradients (products: mul, mm, dot...).
        """
        def deco(fn):
            self.vjp_fn = fn
            self.save = tuple(self.params.index(s) for s in save if s != "result")
            self.save_result = "result" in save
            if needed_by == "cross":
                self.needed_by = {i: tuple(j for j in self.save if j != i) for i in self.save}
            else:
                self.needed_by = {-1 if k == "result" else self.params.index(k): tuple(
                    self.params.index(v) for v in ((vs,) if isinstance(vs, str) else vs))
                    for k, vs in (needed_by or {}).items()}
            return fn
        return deco

    def __getattr__(self, name):
        # namedtuple() is slow: made on first use, not for every op at import
        if name == "return_type":
            from ..return_types import make
            self.return_type = make(self.name, self.returns)
            return self.return_type
        if name == "jvp":       # forward mode's rule (see tangents.py), where none was set: a
            from . import tangents      # pointwise op's from its vjp, else the fallback
            self.jvp = tangents.pointwise if "pointwise" in self.tags else tangents.fallback
            return self.jvp
        if name == "simple_type":     # the class of dispatch's SimpleNodes (see graph.py)
            from ..autograd.graph import simple_type
            self.simple_type = simple_type(self)
            return self.simple_type
        raise AttributeError(f"'OpDef' object has no attribute '{name}'")

    def __call__(self, *args, **kwargs):
        if _dispatch is None:
            _bind_dispatch()
        return _dispatch(self, args, kwargs)

    def __repr__(self):
        return f"OpDef({self.name})"

    __str__ = lambda self: self.name  # noqa: E731  (pytest ids)


# OpDef.half_ulps of the ops whose float32 math (glibc, NumPy's SIMD loops, ember's own series)
# rounds the odd value differently from torch's (Sleef and its own vectorized code)
LIBM_ULP = (1, "torch's float32 math library rounds the odd value differently")
_REGISTRY = {}
_dispatch = None        # dispatch.dispatch, bound on the first call (dispatch imports this module)


def _bind_dispatch():
    global _dispatch
    from .dispatch import dispatch
    _dispatch = dispatch


def op(name, **options):
    """Decorator: register ``fwd`` as the op ``name`` and return its ``OpDef``."""
    def deco(fwd):
        if name in _REGISTRY:
            raise ValueError(f"op {name!r} is defined twice")
        d = OpDef(name, fwd, **options)
        _REGISTRY[name] = d
        return d
    return deco


def get(name):
    try:
        return _REGISTRY[name]
    except KeyError:
        from . import lazy      # an op of a family not loaded yet (see lazy.py)
        if name not in lazy.OPS:
            raise
        lazy.load(lazy.OPS[name])
        return _REGISTRY[name]


def loaded_ops():
    """The OpDefs registered so far (the lazy families' only once loaded), sorted by name."""
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def all_ops():
    """Every OpDef, sorted by name: loads the lazy op families first (see lazy.py)."""
    from . import lazy
    lazy.load_all()
    return loaded_ops()
