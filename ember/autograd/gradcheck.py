"""Check analytic gradients against central finite differences, as ``torch.autograd.gradcheck``.

The numerical Jacobian perturbs one input element at a time by ``±eps`` and re-runs ``func``;
the analytic one runs backward once per output element with a one-hot ``grad_output``.
Both are ``(input numel, output numel)`` float64 matrices, like torch's (complex values count
as (real, imaginary) pairs).
See https://pytorch.org/docs/stable/autograd.html#numerical-gradient-checking
"""
import warnings

import numpy as np

from .. import _dtype


class GradcheckError(RuntimeError):
    """Raised by ``gradcheck``/``gradgradcheck`` when the gradients do not match."""


def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _is_tensor(x):
    from .._tensor import Tensor
    return isinstance(x, Tensor)


def _host(t):
    """A float64-or-complex NumPy copy of ``t``'s values (outputs may alias the inputs)."""
    a = np.array(t.detach().to("cpu").numpy(), copy=True)
    return a if a.dtype.kind == "c" else a.astype(np.float64)


def _diff_outputs(func, inputs):
    outs = _as_tuple(func(*inputs))
    return [o for o in outs if _is_tensor(o) and o.requires_grad], outs


def _real_view(a):
    """Values flattened, complex ones as interleaved (real, imag) pairs: every Jacobian is
    then the real one of the map on R^n."""
    a = a.reshape(-1)
    return np.stack([a.real, a.imag], -1).reshape(-1) if a.dtype.kind == "c" else a


def _numerical(func, inputs, diff_idx, eps):
    """Per differentiable input: d(all outputs)/d(input) by central differences (a complex
    element is stepped along its real and then its imaginary axis)."""
    def evaluate():
        return [_real_view(_host(o)) for o in _as_tuple(func(*inputs))
                if _is_tensor(o) and o.dtype.category >= _dtype._FLOAT]
    sizes = [o.size for o in evaluate()]
    jac = []
    for i in diff_idx:
        arr = inputs[i]._data
        steps = (eps, eps * 1j) if arr.dtype.kind == "c" else (eps,)
        J = [np.zeros((arr.size * len(steps), n)) for n in sizes]
        for j in range(arr.size):
            idx = np.unravel_index(j, arr.shape)
            orig = arr[idx].item()
            for s, step in enumerate(steps):
                # NOTE: written into the array itself (no version bump): func must see the
                # perturbed value through every view of the input, and the graph is not kept.
                arr[idx] = orig - step
                lo = evaluate()
                arr[idx] = orig + step
                hi = evaluate()
                arr[idx] = orig
                for k, (a, b) in enumerate(zip(lo, hi)):
                    J[k][j * len(steps) + s] = (b - a) / (2 * eps)
        jac.append(J)
    return jac          # jac[input][output] is (input numel, output numel), complex doubled


def _analytical(outputs, inputs, diff_idx):
    """The same Jacobians from backward. NOTE: with torch's convention the gradient of a real
    L reaching z = a + ib is dL/da + i dL/db, and grad_output u gives L = Re(conj(u) * y):
    u = 1 yields the column of Re(y), u = 1j the column of Im(y)."""
    from .. import autograd
    from .._memory_format import contiguous_format
    from .._ops.creation import zeros_like
    diff_in = [inputs[i] for i in diff_idx]
    width = [2 if t.dtype.is_complex else 1 for t in diff_in]
    jac = [[np.zeros((t.numel() * w, o.numel() * (2 if o.dtype.is_complex else 1)))
            for o in outputs] for t, w in zip(diff_in, width)]
    for k, o in enumerate(outputs):
        units = (1, 1j) if o.dtype.is_complex else (1,)
        for j in range(o.numel()):
            for u, unit in enumerate(units):
                g = zeros_like(o, memory_format=contiguous_format)     # (row-major: j is flat)
                g._data.reshape(-1)[j] = unit
                grads = autograd.grad(o, diff_in, g, retain_graph=True, allow_unused=True)
                for n, gi in enumerate(grads):
                    if gi is not None:
                        jac[n][k][:, j * len(units) + u] = _real_view(_host(gi))
    return jac


def _fail(msg, raise_exception):
    if raise_exception:
        raise GradcheckError(msg)
    return False


def gradcheck(func, inputs, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True,
              nondet_tol=0.0, check_undefined_grad=True, check_grad_dtypes=False,
              check_batched_grad=False, check_batched_forward_grad=False,
              check_forward_ad=False, check_backward_ad=True, fast_mode=False, masked=None):
    """Check the gradients of ``func`` at ``inputs`` (the tensors with ``requires_grad``)
    against finite differences; returns True, or raises ``GradcheckError`` (or returns False
    with ``raise_exception=False``) naming the output and input whose Jacobians differ.

    Example:
        >>> import ember
        >>> x = ember.tensor([0.5, 1.5], dtype=ember.float64, requires_grad=True)
        >>> ember.autograd.gradcheck(lambda t: t.sin() * t, (x,))
        True
    """
    if check_forward_ad:
        raise NotImplementedError("gradcheck: ember has no forward-mode AD (check_forward_ad)")
    inputs = _as_tuple(inputs)
    diff_idx = [i for i, t in enumerate(inputs) if _is_tensor(t) and t.requires_grad]
    if not diff_idx:
        raise ValueError("gradcheck expects at least one input tensor to require gradient, but "
                         "none of them have requires_grad=True.")
    for i in diff_idx:
        if inputs[i].dtype not in (_dtype.float64, _dtype.complex128):
            warnings.warn(f"Input #{i} requires gradient and is not a double precision floating "
                          "point or complex. This check will likely fail if all the inputs are "
                          "not of double precision floating point or complex.", stacklevel=2)
    outputs, _ = _diff_outputs(func, inputs)
    numerical = _numerical(func, inputs, diff_idx, eps)
    if not outputs:
        for n, J in zip(diff_idx, numerical):
            if any(np.abs(j).max(initial=0) > atol for j in J):
                return _fail(f"Numerical gradient for function expected to be zero (input {n})",
                             raise_exception)
        return True
    analytical = _analytical(outputs, inputs, diff_idx)
    for n, (i, Jn, Ja) in enumerate(zip(diff_idx, numerical, analytical)):
        for k, (num, ana) in enumerate(zip(Jn, Ja)):
            if not np.allclose(ana, num, rtol=rtol, atol=atol):
                from .._ops.creation import tensor
                return _fail(f"Jacobian mismatch for output {k} with respect to input {i},\n"
                             f"numerical:{tensor(num)!r}\nanalytical:{tensor(ana)!r}\n",
                             raise_exception)
    again = _analytical(outputs, inputs, diff_idx)
    for Ja, Jb in zip(analytical, again):
        for a, b in zip(Ja, Jb):
            if np.abs(a - b).max(initial=0) > nondet_tol:
                return _fail("Backward is not reentrant, i.e., running backward with same input "
                             "and grad_output multiple times gives different values, although "
                             "analytical gradient matches numerical gradient. The tolerance for "
                             f"nondeterminism was {nondet_tol}.", raise_exception)
    return _check_zero_grad_output(outputs, inputs, diff_idx, raise_exception)


def _check_zero_grad_output(outputs, inputs, diff_idx, raise_exception):
    from .. import autograd
    from .._ops.creation import zeros_like
    grads = autograd.grad(outputs, [inputs[i] for i in diff_idx],
                          [zeros_like(o) for o in outputs], allow_unused=True)
    if any(g is not None and np.abs(_host(g)).max(initial=0) != 0 for g in grads):
        return _fail("backward not multiplied by grad_output", raise_exception)
    return True


def gradgradcheck(func, inputs, grad_outputs=None, *, eps=1e-6, atol=1e-5, rtol=1e-3,
                  gen_non_contig_grad_outputs=False, raise_exception=True, nondet_tol=0.0,
                  check_undefined_grad=True, check_grad_dtypes=False, check_batched_grad=False,
                  check_fwd_over_rev=False, check_rev_over_rev=True, fast_mode=False, masked=False):
    """Check second derivatives: ``gradcheck`` of the map ``(inputs, grad_outputs) ->`` the
    gradients of ``func``. Without ``grad_outputs``, fixed random ones are used.

    Example:
        >>> import ember
        >>> x = ember.tensor([0.5, 1.5], dtype=ember.float64, requires_grad=True)
        >>> ember.autograd.gradgradcheck(lambda t: t ** 3, (x,))
        True
    """
    from .. import autograd
    from .._ops.creation import tensor
    inputs = _as_tuple(inputs)
    outputs, _ = _diff_outputs(func, inputs)
    if grad_outputs is None:
        rng = np.random.default_rng(0)
        grad_outputs = tuple(tensor(rng.uniform(-1, 1, tuple(o.shape)), dtype=o.dtype,
                                    device=o.device, requires_grad=True) for o in outputs)
    grad_outputs = _as_tuple(grad_outputs)
    n = len(inputs)
    diff_in = [i for i, t in enumerate(inputs) if _is_tensor(t) and t.requires_grad]

    def first_grads(*args):
        outs, _ = _diff_outputs(func, args[:n])
        grads = autograd.grad(outs, [args[i] for i in diff_in], args[n:], create_graph=True,
                              allow_unused=True)
        return tuple(g for g in grads if g is not None)

    return gradcheck(first_grads, inputs + grad_outputs, eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception, nondet_tol=nondet_tol)
