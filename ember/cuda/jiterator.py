"""``torch.cuda.jiterator``: an elementwise CUDA kernel from the C++ of one element's
computation, compiled at run time (CuPy's ``ElementwiseKernel``, through NVRTC).

Example:
    >>> import ember
    >>> code = "template <typename T> T axpy(T x, T y, T a) { return a * x + y; }"
    >>> fn = ember.cuda.jiterator._create_jit_fn(code, a=1.0)
    >>> if ember.cuda.is_available():
    ...     out = fn(ember.ones(3, device="cuda"), ember.ones(3, device="cuda"), a=2.0)
"""
import re

_PATTERN = re.compile(r"\s*template\s*(?P<template_params>\<.+\>)\s*(?P<return_type>\w+)\s+"
                      r"(?P<function_name>\w+)\s*(?P<function_params>\(.+\))\s*"
                      r"(?P<function_body>\{.+\})\s*", re.DOTALL)


class _JittedFunction:
    """A kernel ``_create_jit_fn`` made: call it with up to 8 cuda tensors (broadcast and
    promoted to one dtype, as torch's) and the declared keyword scalars."""

    def __init__(self, code_string, return_by_ref, num_outputs, **kwargs):
        if not (return_by_ref or num_outputs == 1):
            raise AssertionError("Return by value only works for single output.")
        m = _PATTERN.match(code_string)
        if m is None:
            raise Exception(f"Couldn't parse code, please check correctness:\n {code_string}")
        self.code_string, self.kernel_name = code_string, m["function_name"]
        self.return_by_ref, self.num_outputs, self.kwargs_dict = return_by_ref, num_outputs, kwargs
        self._kernels = {}

    def __call__(self, *tensors, **kwargs):
        import ember
        from . import is_available
        if not is_available():
            raise AssertionError("Jiterator is only supported on CUDA and ROCm GPUs, none are "
                                 "available.")
        if len(tensors) > 8:
            raise AssertionError(f"jiterator only supports up to 8 tensor inputs, got "
                                 f"{len(tensors)}")
        args = dict(self.kwargs_dict)
        for k, v in kwargs.items():
            if k not in args:
                raise KeyError(f"{k} is not declared in function definition")
            args[k] = v
        if any(t.device.type != "cuda" for t in tensors):
            raise RuntimeError("jiterator: all input tensors must be on a cuda device, got "
                               f"{', '.join(str(t.device) for t in tensors)}")
        dtype = ember.result_type(*tensors) if len(tensors) > 1 else tensors[0].dtype
        xs = ember.broadcast_tensors(*tensors) if len(tensors) > 1 else tensors
        xs = [x.to(dtype) for x in xs]
        out = ember.empty(xs[0].shape, dtype=dtype, device=xs[0].device)
        self._kernel(len(xs))(*(x._data for x in xs), *args.values(), out._data)
        return out

    def _kernel(self, n):
        """The ``ElementwiseKernel`` for ``n`` tensor inputs: every parameter has the one
        dtype ``T``, and the output is ``name(in0, ..., kwargs...)``."""
        k = self._kernels.get(n)
        if k is None:
            from . import _lazy_init
            cupy = _lazy_init()
            ins = [f"in{i}" for i in range(n)] + list(self.kwargs_dict)
            k = self._kernels[n] = cupy.ElementwiseKernel(
                ", ".join(f"T {p}" for p in ins), "T out0",
                f"out0 = {self.kernel_name}({', '.join(ins)})", f"jiterator_{self.kernel_name}",
                preamble=self.code_string)
        return k


def _create_jit_fn(code_string, **kwargs):
    """A jitted elementwise function from ``code_string``: a C++ function template over
    ``T`` (the last one defined is the entry), taking one element of each tensor and then
    the scalars named in ``kwargs`` (their defaults), and returning the result by value.

    Example:
        >>> import ember
        >>> fn = ember.cuda.jiterator._create_jit_fn(
        ...     "template <typename T> T my_relu(T x) { return x > 0 ? x : 0; }")
        >>> fn.kernel_name
        'my_relu'
    """
    return _JittedFunction(code_string, return_by_ref=False, num_outputs=1, **kwargs)
