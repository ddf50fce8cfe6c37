"""CUDA graphs (``torch.cuda.CUDAGraph``, ``graph``, ``make_graphed_callables``) on CuPy's
stream capture.

Capturing records every kernel and copy ember queues on the capturing stream into a graph
(``cupy.cuda.Stream.begin_capture``/``end_capture``) instead of running it; ``replay``
launches the whole graph at once, reading and writing the same memory as during the
capture. Memory allocated during a capture comes from a private pool (a ``MemPool``) that
keeps those blocks for the graph, so nothing else reuses them between replays.

What cannot be captured, as in torch: anything that waits for the GPU (``.item()``,
``.cpu()``, printing, ``nonzero``, boolean-mask indexing) and copies from pageable host
memory, which includes ember's random ops (ember draws random numbers on the host) and
tensors made from Python data. ember's index bounds checks (gather, scatter, index_select,
embedding, nll_loss) read the GPU, so they are skipped inside a capture: an index out of
range in a captured graph goes unreported (torch checks on the device).
"""
from . import _lazy_init, is_initialized
from .memory import MemPool, _Allocator, _mempools

_MODES = ("global", "thread_local", "relaxed")
_graph_pools = {}       # graph_pool_handle() ids -> [MemPool, graphs using it]


def is_current_stream_capturing():
    """Whether a CUDA graph capture is underway on the current stream (False before CUDA
    is initialized, without initializing it).

    Example:
        >>> import ember
        >>> ember.cuda.is_current_stream_capturing()
        False
    """
    if not is_initialized():
        return False
    return bool(_lazy_init().cuda.get_current_stream().is_capturing())


def graph_pool_handle():
    """A token naming a new private memory pool, for graphs that are to share memory
    (``graph(g, pool=handle)``).

    Example:
        >>> import ember
        >>> if ember.cuda.is_available():
        ...     handle = ember.cuda.graph_pool_handle()
    """
    pool = MemPool()
    _graph_pools[pool.id] = [pool, 0]
    return pool.id


def _pool(handle):
    if handle is None:
        return MemPool()
    handle = tuple(handle)
    pool = _mempools.get(handle)
    if pool is None:
        raise RuntimeError(f"no memory pool with id {handle}: pass graph_pool_handle(), a "
                           "graph's pool() or a MemPool's id")
    return pool


class CUDAGraph:
    """A captured sequence of GPU work, replayed with one launch.

    NOTE: CuPy instantiates the graph when the capture ends whatever ``keep_graph`` says, so
    there is no ``raw_cuda_graph`` (the un-instantiated graph) to keep.

    Example:
        >>> import ember
        >>> if ember.cuda.is_available():
        ...     x = ember.ones(4, device="cuda")
        ...     g = ember.cuda.CUDAGraph()
        ...     with ember.cuda.graph(g):
        ...         y = x * 2 + 1
        ...     x.fill_(3.0); g.replay(); ember.cuda.synchronize()
        ...     assert y.tolist() == [7.0] * 4
    """

    def __init__(self, keep_graph=False):
        _lazy_init()
        self._graph = self._mempool = self._stream = self._alloc = None
        self._debug = False

    def capture_begin(self, pool=None, capture_error_mode="global", check_input_liveness=False):
        """Start capturing the work queued on the current stream (not the default one).

        NOTE: CuPy grows its pools with ``cudaMalloc``, which CUDA counts as potentially
        unsafe during a global or thread-local capture, so ember captures in the relaxed mode
        whatever ``capture_error_mode`` says, as CuPy does (torch's allocator switches to
        relaxed around its own ``cudaMalloc`` for the same reason); only the checks on unsafe
        calls by other threads differ."""
        if check_input_liveness:
            raise NotImplementedError("check_input_liveness: ember does not track whether a "
                                      "graph's inputs are still alive")
        if capture_error_mode not in _MODES:
            raise RuntimeError(f"Unknown capture error mode. Expected `global`, `thread_local`, "
                               f"or `relaxed`, got `{capture_error_mode}`")
        cupy = _lazy_init()
        s = cupy.cuda.get_current_stream()
        if s.ptr == 0:
            raise RuntimeError("CUDA graphs must be captured on a non-default stream. (However, "
                               "after capture, it's ok to replay them on the default stream.)")
        self.reset()
        self._mempool = _pool(pool)
        self._mempool._users += 1
        if self._mempool.id in _graph_pools:
            _graph_pools[self._mempool.id][1] += 1
        self._alloc = cupy.cuda.using_allocator(_Allocator(cupy, self._mempool._pool.malloc))
        self._alloc.__enter__()
        try:
            s.begin_capture(cupy.cuda.runtime.streamCaptureModeRelaxed)
        except BaseException:
            self._alloc.__exit__(None, None, None)
            raise
        self._stream = s

    def capture_end(self):
        """End the capture begun by ``capture_begin`` and instantiate the graph."""
        if self._stream is None:
            raise RuntimeError("capture_end() called without capture_begin()")
        try:
            self._graph = self._stream.end_capture()
        finally:
            self._alloc.__exit__(None, None, None)
            self._stream = self._alloc = None

    def instantiate(self):
        """Make the captured graph launchable: CuPy instantiates it at ``capture_end``, so
        this checks that there is one."""
        if self._graph is None:
            raise RuntimeError("instantiate() called on a CUDAGraph that has not been captured")

    def replay(self):
        """Launch the captured work on the current stream."""
        if self._graph is None:
            raise RuntimeError("Called CUDAGraph::replay without a preceding successful capture.")
        self._graph.launch(_lazy_init().cuda.get_current_stream())

    def reset(self):
        """Drop the graph and its hold on its memory pool."""
        self._graph = None
        if self._mempool is not None:
            self._mempool._users -= 1
            entry = _graph_pools.get(self._mempool.id)
            if entry is not None:
                entry[1] -= 1
                if entry[1] <= 0:
                    del _graph_pools[self._mempool.id]
        self._mempool = None

    def pool(self):
        """The id of the memory pool the capture allocated from, to share with another
        graph (``graph(other, pool=g.pool())``)."""
        if self._mempool is None:
            raise RuntimeError("Called CUDAGraph::pool() without a preceding successful capture.")
        return self._mempool.id

    def enable_debug_mode(self):
        """Keep what ``debug_dump`` writes."""
        self._debug = True

    def debug_dump(self, debug_path):
        """Write the graph, in Graphviz DOT, to ``debug_path``."""
        if not self._debug:
            import warnings
            warnings.warn("CUDA Graphs debug not enabled, set with "
                          "[graph].enable_debug_mode()", stacklevel=2)
            return
        with open(debug_path, "w") as f:
            f.write(self._graph.debug_dot_str())

    def raw_cuda_graph_exec(self):
        """The ``cudaGraphExec_t`` handle, an int."""
        return self._graph.graphExec

    def __del__(self):
        try:
            self.reset()
        except Exception:      # (interpreter shutdown)
            pass


class graph:
    """Capture the work of the block into ``cuda_graph`` (on ``stream``, a side stream by
    default), allocating from ``pool`` (a new private pool by default).

    NOTE: ``enable_annotations`` has nothing to annotate: ember's profiler does not trace
    GPU kernels.

    Example:
        >>> import ember
        >>> if ember.cuda.is_available():
        ...     g, x = ember.cuda.CUDAGraph(), ember.zeros(3, device="cuda")
        ...     with ember.cuda.graph(g):
        ...         x += 1
        ...     g.replay(); g.replay()
    """

    default_capture_stream = None

    def __init__(self, cuda_graph, pool=None, stream=None, capture_error_mode="global",
                 enable_annotations=False, check_input_liveness=False):
        from .streams import Stream, stream as stream_ctx
        if stream is None and graph.default_capture_stream is None:
            graph.default_capture_stream = Stream()
        self.capture_stream = stream if stream is not None else graph.default_capture_stream
        self.stream_ctx, self.cuda_graph = stream_ctx(self.capture_stream), cuda_graph
        self.pool, self.capture_error_mode = pool, capture_error_mode
        self.check_input_liveness = check_input_liveness

    def __enter__(self):
        from . import synchronize
        from .memory import empty_cache
        synchronize()
        empty_cache()
        self.stream_ctx.__enter__()
        try:
            self.cuda_graph.capture_begin(self.pool, capture_error_mode=self.capture_error_mode,
                                          check_input_liveness=self.check_input_liveness)
        except BaseException:
            self.stream_ctx.__exit__(None, None, None)
            raise

    def __exit__(self, *exc):
        try:
            self.cuda_graph.capture_end()
        finally:
            self.stream_ctx.__exit__(*exc)


def _flatten(x):
    """(leaves, spec) of nested tuples, lists and dicts of tensors."""
    if isinstance(x, (tuple, list)):
        parts = [_flatten(v) for v in x]
        return [leaf for p in parts for leaf in p[0]], (type(x), [p[1] for p in parts])
    if isinstance(x, dict):
        parts = [_flatten(v) for v in x.values()]
        return [leaf for p in parts for leaf in p[0]], (dict, list(x), [p[1] for p in parts])
    return [x], None


def _unflatten(leaves, spec):
    it = iter(leaves)

    def build(spec):
        if spec is None:
            return next(it)
        if spec[0] is dict:
            return dict(zip(spec[1], (build(s) for s in spec[2])))
        return spec[0](build(s) for s in spec[1])
    return build(spec)


def make_graphed_callables(callables, sample_args, num_warmup_iters=3,
                           allow_unused_input=False, pool=None):
    """Graphed versions of ``callables`` (functions or modules, one or a tuple): each runs
    its forward, and its backward, as one replay of a graph captured with ``sample_args``.
    Later calls copy their inputs into the captured ones; outputs are the captured outputs'
    memory, overwritten by the next call. Modules keep their eager forward when their
    ``training`` flag differs from the one they were captured in.

    Example:
        >>> import ember
        >>> if ember.cuda.is_available():
        ...     lin = ember.nn.Linear(4, 4).cuda()
        ...     x = ember.randn(2, 4, device="cuda", requires_grad=True)
        ...     glin = ember.cuda.make_graphed_callables(lin, (x,))
        ...     glin(x).sum().backward()
    """
    import ember
    from ..autograd.function import Function, once_differentiable
    from .streams import Stream, stream
    from . import synchronize
    if ember.is_autocast_enabled() and ember.is_autocast_cache_enabled():
        raise RuntimeError("make_graphed_callables does not support the autocast caching. "
                           "Please set `cache_enabled=False`.")
    one = not isinstance(callables, tuple)
    callables, sample_args = ((callables,), (sample_args,)) if one else (callables, sample_args)
    flat_args = []
    for c, args in zip(callables, sample_args):
        if isinstance(c, ember.nn.Module):
            if c._backward_hooks or c._forward_hooks or c._forward_pre_hooks:
                raise AssertionError("Modules must not have hooks registered at the time they "
                                     "are passed. However, registering hooks on modules after "
                                     "passing them through make_graphed_callables is allowed.")
            if any(b.requires_grad for b in c.buffers()):
                raise AssertionError("In any :class:`~torch.nn.Module` passed to "
                                     ":func:`~make_graphed_callables`, only parameters may be "
                                     "trainable. All buffers must have ``requires_grad=False``.")
        leaves = tuple(_flatten(tuple(args))[0])
        if not all(isinstance(a, ember.Tensor) for a in leaves):
            raise AssertionError("In the beta API, sample_args for each callable must contain "
                                 "only Tensors. Other types are not allowed.")
        flat_args.append(leaves)
    params = [tuple(c.parameters()) if isinstance(c, ember.nn.Module) else () for c in callables]
    surfaces = [a + p for a, p in zip(flat_args, params)]
    mempool = graph_pool_handle() if pool is None else pool

    def grads(outs, surface, grad_outs):
        return ember.autograd.grad(tuple(o for o in outs if o.requires_grad),
                                   tuple(i for i in surface if i.requires_grad),
                                   grad_outputs=grad_outs, only_inputs=True,
                                   allow_unused=allow_unused_input)
    synchronize()
    with stream(Stream()):      # warm up (allocations, lazy loads) outside any capture
        for func, args, surface in zip(callables, sample_args, surfaces):
            for _ in range(num_warmup_iters):
                outs = _flatten(func(*args))[0]
                if any(o.requires_grad for o in outs):
                    grads(outs, surface, tuple(ember.empty_like(o) for o in outs
                                               if o.requires_grad))
    synchronize()
    fwd_graphs = [CUDAGraph() for _ in callables]
    bwd_graphs = [CUDAGraph() for _ in callables]
    static_outs, specs = [], []
    for func, args, g in zip(callables, sample_args, fwd_graphs):
        with graph(g, pool=mempool):
            out = func(*args)
        leaves, spec = _flatten(out)
        static_outs.append(tuple(leaves))
        specs.append(spec)
    static_grad_outs, static_grad_ins = [None] * len(callables), [None] * len(callables)
    for i in reversed(range(len(callables))):       # backwards in reverse order, as they run
        outs, surface = static_outs[i], surfaces[i]
        gouts = tuple(ember.empty_like(o) if o.requires_grad else None for o in outs)
        gins = None
        if any(o.requires_grad for o in outs):
            with graph(bwd_graphs[i], pool=mempool):
                gins = grads(outs, surface, tuple(g for g in gouts if g is not None))
        it = iter(gins or ())
        static_grad_ins[i] = tuple(next(it) if a.requires_grad and gins is not None else None
                                   for a in surface)
        static_grad_outs[i] = gouts

    def graphed(i):
        n_args, surface, outs = len(flat_args[i]), surfaces[i], static_outs[i]

        class Graphed(Function):
            @staticmethod
            def forward(ctx, *inputs):
                for s, x in zip(surface[:n_args], inputs[:n_args]):
                    if s.data_ptr() != x.data_ptr():
                        s.copy_(x)
                fwd_graphs[i].replay()
                return tuple(o.detach() for o in outs)

            @staticmethod
            @once_differentiable
            def backward(ctx, *gs):
                for s, g in zip(static_grad_outs[i], gs):
                    if s is not None and g is not None and s.data_ptr() != g.data_ptr():
                        s.copy_(g)
                bwd_graphs[i].replay()
                return tuple(None if b is None else b.detach() for b in static_grad_ins[i])

        def run(*user_args):
            out = Graphed.apply(*(tuple(_flatten(user_args)[0]) + params[i]))
            return _unflatten(out if isinstance(out, tuple) else (out,), specs[i])
        return run

    ret = []
    for i, func in enumerate(callables):
        fn = graphed(i)
        if isinstance(func, ember.nn.Module):
            def forward(*a, _f=func, _fn=fn, _mode=func.training, _eager=func.forward, **kw):
                return _fn(*a, **kw) if _f.training == _mode else _eager(*a, **kw)
            func.forward = forward
            ret.append(func)
        else:
            ret.append(fn)
    return ret[0] if one else tuple(ret)
