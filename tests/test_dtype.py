"""dtypes against torch: names and aliases, promote_types, result_type, can_cast, finfo/iinfo,
the default dtype, and the dtypes binary ops actually produce."""
import itertools
import operator

import pytest

import ember
from ember import _dtype
from oracle import torch

NAMES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float8_e4m3fn", "float8_e5m2",
         "float16", "bfloat16", "float32", "float64", "complex64", "complex128"]
ALIASES = ["half", "float", "double", "short", "int", "long", "cfloat", "cdouble", "bool"]
PAIRS = list(itertools.product(_dtype.ALL, _dtype.ALL))
# (uint16/32/64 are torch's shell dtypes, where most arithmetic raises NotImplementedError:
# test_shell_unsigned_dtypes covers what they do)
NO_FP8 = [d for d in _dtype.ALL if "float8" not in d.name and d not in _dtype._SHELL]


def T(d):
    """The torch dtype of an ember dtype."""
    return getattr(torch, d.name)


def outcome(fn, *args):
    """``str`` of the result, or the exception type: what we compare with torch."""
    try:
        return str(fn(*args)).removeprefix("torch.")
    except Exception as e:          # noqa: BLE001  (the type is what is compared)
        return type(e).__name__


def test_all_dtypes_and_aliases_exist():
    for n in NAMES:
        d = getattr(ember, n)
        assert isinstance(d, ember.dtype) and repr(d) == repr(getattr(torch, n))
        assert d.itemsize == getattr(torch, n).itemsize
        assert d.is_floating_point == getattr(torch, n).is_floating_point
        assert d.is_complex == getattr(torch, n).is_complex
        assert d.is_signed == getattr(torch, n).is_signed
    for a in ALIASES:
        assert repr(getattr(ember, a)) == repr(getattr(torch, a)), a


def test_promote_types_every_pair():
    for a, b in PAIRS:
        assert outcome(ember.promote_types, a, b) == outcome(torch.promote_types, T(a), T(b)), \
            (a, b)


def test_float8_promotion_error_message():
    with pytest.raises(RuntimeError, match="attempted to promote Char and Float8_e5m2"):
        ember.promote_types(ember.int8, ember.float8_e5m2)


def test_can_cast_every_pair():
    for a, b in PAIRS:
        assert ember.can_cast(a, b) == torch.can_cast(T(a), T(b)), (a, b)


def _make(lib, d, ndim):
    return lib.ones((2,) * ndim, dtype=getattr(lib, d.name))


SCALARS = [True, 3, 2.5, 1 + 2j]


def test_result_type_tensors_and_zero_dim():
    for a, b in itertools.product(NO_FP8, NO_FP8):
        for na, nb in [(1, 1), (1, 0), (0, 1), (0, 0)]:
            e = outcome(ember.result_type, _make(ember, a, na), _make(ember, b, nb))
            t = outcome(torch.result_type, _make(torch, a, na), _make(torch, b, nb))
            if t != "complex32":       # torch's complex32 has no ember twin
                assert e == t, (a, b, na, nb)


def test_result_type_with_scalars():
    for d, s, nd in itertools.product(_dtype.ALL, SCALARS, (0, 1)):
        e = outcome(ember.result_type, _make(ember, d, nd), s)
        t = outcome(torch.result_type, _make(torch, d, nd), s)
        if t != "complex32":
            assert e == t, (d, s, nd)


def test_result_type_examples():
    i32, f32 = ember.ones(2, dtype=ember.int32), ember.ones(2)
    assert ember.result_type(i32, 2.5) is ember.float32
    assert (i32 * 2.5).dtype is ember.float32
    assert (ember.ones(2, dtype=ember.uint8) + ember.ones(2, dtype=ember.int8)).dtype \
        is ember.int16
    assert (f32 + ember.tensor(1.0, dtype=ember.float64)).dtype is ember.float32
    assert (i32 + ember.tensor(1.0, dtype=ember.float64)).dtype is ember.float64
    assert (ember.ones(2, dtype=ember.uint8) + 300).tolist() == [45, 45]      # wraps like torch


OPS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
       "truediv": operator.truediv, "eq": operator.eq, "lt": operator.lt,
       "ge": operator.ge, "pow": operator.pow, "and": operator.and_, "or": operator.or_}
# NOTE: differences owned by the op definitions (ember/_ops/pointwise.py), kept visible here:
# torch refuses any bool operand of `-` and bool ** bool; ember only refuses bool - bool and
# gives int8 for bool ** bool (NumPy's rule).
KNOWN = {("sub", "bool"), ("pow", "bool")}


def _dtype_or_error(fn, *args):
    try:
        return str(fn(*args).dtype).removeprefix("torch.")
    except NotImplementedError:     # torch's "not implemented for 'Float'" is a RuntimeError
        return "RuntimeError"
    except Exception as e:          # noqa: BLE001
        return type(e).__name__


def _known(name, *dts):
    return any((name, d.name) in KNOWN for d in dts)


@pytest.mark.parametrize("name", OPS)
def test_binary_op_result_dtypes(name):
    f = OPS[name]
    for a, b in itertools.product(NO_FP8, NO_FP8):
        if _known(name, a, b):
            continue
        for na, nb in [(1, 1), (1, 0), (0, 1), (0, 0)]:
            t = _dtype_or_error(f, _make(torch, a, na), _make(torch, b, nb))
            if t == "complex32" or (t == "RuntimeError" and "float16" in (a.name, b.name)
                                    and (a.is_complex or b.is_complex)):
                continue                # complex32 (torch's chalf) has no ember twin
            e = _dtype_or_error(f, _make(ember, a, na), _make(ember, b, nb))
            assert e == t, (name, a, b, na, nb)


@pytest.mark.parametrize("name", OPS)
def test_binary_op_with_scalar_dtypes(name):
    f = OPS[name]
    for d, s, nd in itertools.product(NO_FP8, SCALARS, (0, 1)):
        if _known(name, d) or (name in ("sub", "pow") and s is True):
            continue
        for args_t, args_e in [((_make(torch, d, nd), s), (_make(ember, d, nd), s)),
                               ((s, _make(torch, d, nd)), (s, _make(ember, d, nd)))]:
            t = _dtype_or_error(f, *args_t)
            if t == "complex32" or (d is ember.float16 and isinstance(s, complex)):
                continue
            assert _dtype_or_error(f, *args_e) == t, (name, d, s, nd, args_e[0] is s)


def test_finfo_matches_torch():
    for d in _dtype.ALL:
        if d.category < _dtype._FLOAT:
            with pytest.raises(TypeError):
                ember.finfo(d)
            continue
        e, t = ember.finfo(d), torch.finfo(T(d))
        for k in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype"):
            assert getattr(e, k) == getattr(t, k), (d, k)
        assert repr(e) == repr(t)
    assert ember.finfo().dtype == torch.finfo().dtype == "float32"


def test_iinfo_matches_torch():
    for d in _dtype.ALL:
        if d.category != _dtype._INT:
            with pytest.raises(TypeError):
                ember.iinfo(d)
            continue
        e, t = ember.iinfo(d), torch.iinfo(T(d))
        for k in ("bits", "max", "min", "dtype"):
            assert getattr(e, k) == getattr(t, k), (d, k)
        assert repr(e) == repr(t)


@pytest.fixture
def default_dtype():
    yield
    ember.set_default_dtype(ember.float32)
    torch.set_default_dtype(torch.float32)


@pytest.mark.parametrize("name", ["float64", "float16", "bfloat16", "float32"])
def test_default_dtype_effects(name, default_dtype):
    ember.set_default_dtype(getattr(ember, name))
    torch.set_default_dtype(getattr(torch, name))
    assert repr(ember.get_default_dtype()) == str(torch.get_default_dtype())
    cases = [lambda L: L.tensor([1.5, 2]), lambda L: L.tensor(2.5), lambda L: L.tensor([1, 2]),
             lambda L: L.tensor([True]), lambda L: L.arange(0, 1, 0.5), lambda L: L.arange(3),
             lambda L: L.rand(2), lambda L: L.zeros(2), lambda L: L.ones(2, dtype=L.int32) * 2.5,
             lambda L: L.full((2,), 1.5), lambda L: L.linspace(0, 1, 3), lambda L: L.Tensor([1])]
    for i, c in enumerate(cases):
        assert repr(c(ember).dtype) == str(c(torch).dtype), (name, i)


def test_set_default_dtype_rejects_non_float():
    with pytest.raises(TypeError):
        ember.set_default_dtype(ember.int32)
    with pytest.raises(TypeError):
        torch.set_default_dtype(torch.int32)


@pytest.mark.parametrize("name", ["uint16", "uint32", "uint64"])
def test_shell_unsigned_dtypes(name):
    """torch's uint16/32/64: tensors, casts, comparisons, bitwise ops, sorting and sums work;
    promotion with another integer type raises torch's error."""
    big = {"uint16": 2 ** 16 - 1, "uint32": 2 ** 32 - 1, "uint64": 2 ** 64 - 1}[name]
    outs = []
    for L in (ember, torch):
        d = getattr(L, name)
        x = L.tensor([3, 1, big], dtype=d)
        outs.append([repr(x), repr(x * 2), repr(x.sum()), repr(x.float()), repr(x == x),
                     repr(x & x), repr(x.sort().values), repr(x.to(L.uint8)),
                     repr(L.zeros(2, dtype=d)), d.is_signed, d.itemsize, repr(d),
                     str(L.promote_types(d, L.float32)), repr(L.iinfo(d).max)])
        with pytest.raises(RuntimeError, match="Promotion for uint16, uint32, uint64 types is not "
                                               "supported"):
            L.promote_types(d, L.int64)
    assert outs[0][:-1] == outs[1][:-1] and int(outs[0][-1]) == int(outs[1][-1])
