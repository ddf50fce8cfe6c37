"""float16/bfloat16 pointwise ops against torch, bit for bit: torch computes them in float32
("opmath") and rounds once, reads a Python scalar as the tensor's dtype (or, for mul/div's
second operand, in float32), and computes a few (xlogy, logit, ldexp, bf16 pow by 3 or -2) in
the low dtype itself. A seeded grid per op, tensor-tensor, tensor-scalar and scalar-tensor.
An op may allow a few ulps where torch's float32 math library rounds differently
(``OpDef.half_ulps``)."""
import numpy as np
import pytest

import ember
from ember._ops.registry import all_ops
from oracle import torch

OPS = [d for d in all_ops() if "pointwise" in d.tags]
SCALARS = (0.1, 1e-3, 3, -2, -2.5, 1 / 3, 7.3)
_rng = np.random.default_rng(0)
_X = (_rng.standard_normal(2048) * 2).astype(np.float32)
_Y = (_rng.standard_normal(2048) * 2).astype(np.float32)


def _torch_fn(opdef):
    fn = torch
    for part in getattr(opdef, "torch_fn", opdef.name).split("."):
        fn = getattr(fn, part, None) if fn is not None else None
    return fn or getattr(torch.nn.functional, opdef.name, None)


def _ordered(t):
    """Bits of a 16-bit float as integers that count ulps across zero (-0 == +0)."""
    b = t.view(torch.int16).numpy().astype(np.int64)
    return np.where(b < 0, -(b & 0x7FFF), b)


def _cases(opdef, tdt, edt):
    """(ember args, torch args, label): tensors from one float32 grid rounded to the dtype,
    then each operand after the first (and the first of a binary op) as a Python scalar."""
    def pair(a):
        t = torch.from_numpy(a).to(tdt)
        return ember.tensor(t.float().numpy()).to(edt), t
    n = len(opdef.promote_args)
    for x in (_X, np.abs(_X) + 0.01):
        es, ts = zip(*[pair(a) for a in (x, _Y, _Y[::-1].copy())[:n]])
        yield es, ts, "tensors"
        for i in range(1, n):
            for s in SCALARS:
                yield es[:i] + (s,) + es[i + 1:], ts[:i] + (s,) + ts[i + 1:], f"{s} at {i}"
        if n == 2:
            for s in SCALARS:
                yield (s, es[1]), (s, ts[1]), f"{s} at 0"


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("opdef", OPS, ids=str)
def test_half_matches_torch_bitwise(opdef, dt):
    fn = _torch_fn(opdef)
    ulps, reason = opdef.half_ulps
    if fn is None or ulps is None:
        pytest.skip(reason or f"torch has no {opdef.name}")
    tdt, edt = getattr(torch, dt), getattr(ember, dt)
    checked = 0
    for eargs, targs, label in _cases(opdef, tdt, edt):
        try:
            expected = fn(*targs)
        except (RuntimeError, TypeError, NotImplementedError):
            continue
        if not isinstance(expected, torch.Tensor):
            continue
        with np.errstate(all="ignore"):
            got = opdef(*eargs)
        what = f"{opdef.name}({label}) in {dt}"
        assert got.dtype.name == str(expected.dtype).split(".")[1], what
        if expected.dtype not in (torch.float16, torch.bfloat16):
            if expected.dtype.is_floating_point:
                continue    # float_power computes in float64: not a half-precision result
            np.testing.assert_array_equal(got.numpy(), expected.numpy(), err_msg=what)
            checked += 1    # comparisons, isnan...
            continue
        g = torch.from_numpy(got.float().numpy()).to(tdt)
        both_nan = g.isnan().numpy() & expected.isnan().numpy()
        off = np.where(both_nan, 0, np.abs(_ordered(g) - _ordered(expected)))
        assert off.max() <= ulps, f"{what}: {int((off > 0).sum())} elements differ, up to " \
            f"{int(off.max())} ulps (allowed {ulps})"
        checked += 1
    if not checked:
        pytest.skip(f"torch has no {dt} {opdef.name} for these operands")


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_half_operators_match_torch_bitwise(dt):
    """Python operators and in-place forms reach the same kernels: ``0.1 * x`` is
    ``x.mul(0.1)`` in torch (the scalar unrounded), chains round once per op."""
    t = torch.from_numpy(_X).to(getattr(torch, dt))
    e = ember.tensor(t.float().numpy()).to(getattr(ember, dt))
    exprs = {"x * 0.1": lambda x: x * 0.1, "0.1 * x": lambda x: 0.1 * x,
             "x + 1e-3": lambda x: x + 1e-3, "(x / 3).exp()": lambda x: (x / 3).exp(),
             "x.mul_(0.1)": lambda x: x.clone().mul_(0.1), "x /= 7.3": _idiv,
             "x.sigmoid() * 0.7 - 1e-2": lambda x: x.sigmoid() * 0.7 - 1e-2}
    for what, f in exprs.items():
        got = torch.from_numpy(f(e).float().numpy()).to(t.dtype)
        assert torch.equal(got, f(t)), f"{what} in {dt}"


def _idiv(x):
    x = x.clone()
    x /= 7.3
    return x


ACTIVATIONS = ["silu", "softplus", "mish", "hardswish", "hardsigmoid", "logsigmoid", "selu",
               "elu", "celu", "leaky_relu", "softsign", "tanhshrink", "relu6", "hardtanh",
               "softshrink", "hardshrink"]


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_half_activations_match_torch(name, dt):
    """nn.functional's composed activations compute float16/bfloat16 in float32 as torch's
    kernels do: its result, or 1 ulp off where the float32 math library differs."""
    t = torch.from_numpy(_X * 1.5).to(getattr(torch, dt))
    e = ember.tensor(t.float().numpy()).to(getattr(ember, dt))
    got = getattr(ember.nn.functional, name)(e)
    expected = getattr(torch.nn.functional, name)(t)
    off = np.abs(_ordered(torch.from_numpy(got.float().numpy()).to(t.dtype)) - _ordered(expected))
    assert off.max() <= 1, f"{name} in {dt}: {int((off > 0).sum())} elements off"
    assert (off > 0).mean() < 0.01, f"{name} in {dt}: {int((off > 0).sum())} elements off"
