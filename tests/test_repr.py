"""``repr(tensor)`` against torch's, character for character: integer and float notation,
scientific switching, nan/inf/-0.0, bool, complex, low-precision dtypes, 0-dim and empty
tensors, summarization, line breaking, autograd suffixes, the default dtype and print
options."""
import pytest

import ember
from oracle import torch

nan, inf = float("nan"), float("inf")

# Each case builds a tensor with library L (ember or torch).
CASES = {
    "ints": lambda L: L.tensor([1, 2, 3]),
    "neg_ints": lambda L: L.tensor([-100, 2, 30000]),
    "int_2d": lambda L: L.tensor([[1, -2], [300, 4]]),
    "i32": lambda L: L.tensor([1, 2], dtype=L.int32),
    "u8": lambda L: L.tensor([1, 255], dtype=L.uint8),
    "i8": lambda L: L.tensor([-1, 2], dtype=L.int8),
    "i16": lambda L: L.tensor([1], dtype=L.int16),
    "floats_int_valued": lambda L: L.tensor([1.0, 2.0, -3.0]),
    "floats": lambda L: L.tensor([1.5, 2.25, -3.125]),
    "zeros": lambda L: L.zeros(3),
    "zeros2": lambda L: L.zeros(2, 3),
    "ones_f64": lambda L: L.ones(2, dtype=L.float64),
    "large": lambda L: L.tensor([1e9, 1.0]),
    "large_int_valued": lambda L: L.tensor([1e10, 2e10]),
    "large_ratio": lambda L: L.tensor([1.0, 2000.0]),
    "large_ratio_frac": lambda L: L.tensor([0.5, 2000.0]),
    "small": lambda L: L.tensor([1e-5, 1.0]),
    "tiny": lambda L: L.tensor([1e-10]),
    "huge": lambda L: L.tensor([1e30]),
    "mixed_sci": lambda L: L.tensor([1e-8, 1e8, 123.456]),
    "nan": lambda L: L.tensor([nan, 1.0]),
    "nan_frac": lambda L: L.tensor([nan, 1.5]),
    "inf": lambda L: L.tensor([inf, -inf, 1.0]),
    "inf_frac": lambda L: L.tensor([inf, -inf, 1.25]),
    "all_nan": lambda L: L.tensor([nan, nan]),
    "all_inf": lambda L: L.tensor([inf]),
    "nan_sci": lambda L: L.tensor([nan, 1e-6, 1.0]),
    "neg_zero": lambda L: L.tensor([-0.0, 0.0]),
    "neg_zero_frac": lambda L: L.tensor([-0.0, 1.5]),
    "neg_zero_scalar": lambda L: L.tensor(-0.0),
    "bool": lambda L: L.tensor([True, False]),
    "bool_true": lambda L: L.tensor([True, True]),
    "bool_2d": lambda L: L.tensor([[True], [False]]),
    "bool_0d": lambda L: L.tensor(False),
    "complex": lambda L: L.tensor([1 + 2j, -3.5 - 4j]),
    "complex_0d": lambda L: L.tensor(1 - 1j),
    "complex128": lambda L: L.tensor([1 + 2j], dtype=L.complex128),
    "complex_negzero": lambda L: L.tensor([complex(1, -0.0), complex(-0.0, 0.0)]),
    "complex_sci": lambda L: L.tensor([1e-6 + 1e6j, 1+1j]),
    "complex_int_valued": lambda L: L.tensor([1 + 1j, 2 + 0j]),
    "complex_nan": lambda L: L.tensor([complex(nan, 1), complex(1, inf)]),
    "complex_2d": lambda L: L.tensor([[1+1j, 2-2j], [3.5j, 4]]),
    "bf16": lambda L: L.tensor([1.1, 2.2, 3.3], dtype=L.bfloat16),
    "f16": lambda L: L.tensor([1.1, -2.5], dtype=L.float16),
    "f16_int": lambda L: L.tensor([1, 2], dtype=L.float16),
    "f16_0d": lambda L: L.tensor(1.5, dtype=L.float16),
    "fp8": lambda L: L.tensor([1.0, 0.5], dtype=L.float8_e4m3fn),
    "fp8b": lambda L: L.tensor([3.0, 0.25], dtype=L.float8_e5m2),
    "scalar_f": lambda L: L.tensor(3.5),
    "scalar_i": lambda L: L.tensor(3),
    "scalar_int_valued": lambda L: L.tensor(3.0),
    "scalar_sci": lambda L: L.tensor(1e-7),
    "scalar_f64": lambda L: L.tensor(2.5, dtype=L.float64),
    "scalar_i32": lambda L: L.tensor(7, dtype=L.int32),
    "empty": lambda L: L.tensor([]),
    "empty_int": lambda L: L.tensor([], dtype=L.int64),
    "empty_2d": lambda L: L.zeros(0, 3),
    "empty_3d_int": lambda L: L.zeros(2, 0, 1, dtype=L.int32),
    "empty_f64": lambda L: L.zeros(0, dtype=L.float64),
    "empty_bool": lambda L: L.zeros(0, dtype=L.bool),
    "big1d": lambda L: L.arange(2000),
    "big1d_f": lambda L: L.arange(2000) / 7,
    "big2d": lambda L: L.arange(3000.0).reshape(100, 30),
    "big3d": lambda L: L.arange(4000).reshape(10, 20, 20),
    "big_exact": lambda L: L.arange(1000),
    "big_1001": lambda L: L.arange(1001.),
    "long_row": lambda L: L.arange(30) * 1000,
    "long_row_f": lambda L: L.arange(40) / 3,
    "long_rows_2d": lambda L: (L.arange(60) / 3).reshape(2, 30),
    "3d": lambda L: L.arange(24.0).reshape(2, 3, 4),
    "4d": lambda L: L.arange(16).reshape(2, 2, 2, 2),
    "rg": lambda L: L.tensor([1.0, 2.0], requires_grad=True),
    "rg_0d": lambda L: L.tensor(1.5, requires_grad=True),
    "grad_fn": lambda L: L.tensor([1.0, 2.0], requires_grad=True) * 2,
    "grad_fn_add": lambda L: L.tensor([1.0, 2.0], requires_grad=True) + 1,
    "grad_fn_sum": lambda L: (L.tensor([1.0, 2.0], requires_grad=True) * 3).sum(),
    "rg_f64": lambda L: L.tensor([1.0], dtype=L.float64, requires_grad=True),
    "long_suffix": lambda L: L.arange(20, dtype=L.float64).reshape(2, 10) / 3,
    "long_suffix2":
        lambda L: L.tensor([123456.789, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], dtype=L.float64,
                           requires_grad=True),
    "meta": lambda L: L.ones(2, 3, device="meta"),
    "meta_int": lambda L: L.ones(2, dtype=L.int64, device="meta"),
    "meta_f64": lambda L: L.ones(2, dtype=L.float64, device="meta"),
    "noncontig": lambda L: L.arange(6.0).reshape(2, 3).t(),
    "view": lambda L: L.arange(10)[::3],
    "precision": lambda L: L.tensor([1/3, 2/3, 100/3]),
    "mixed_width": lambda L: L.tensor([1.5, -1234.5, 0.001]),
    "neg_sci": lambda L: L.tensor([-1e-5, 1e5]),
    "max_f32": lambda L: L.tensor([3.4e38, -1]),
    "int_big": lambda L: L.tensor([2**62, -1]),
    "bool_big": lambda L: L.ones(2000, dtype=L.bool),
    "complex_big": lambda L: L.ones(1500, dtype=L.complex64) * (1+2j),
}


@pytest.mark.parametrize("name", CASES)
def test_repr_matches_torch(name):
    assert repr(CASES[name](ember)) == repr(CASES[name](torch))


def test_str_is_repr():
    x = ember.tensor([1.5, 2.0])
    assert str(x) == repr(x) == str(torch.tensor([1.5, 2.0]))


@pytest.fixture
def default_dtype(request):
    ember.set_default_dtype(getattr(ember, request.param))
    torch.set_default_dtype(getattr(torch, request.param))
    yield request.param
    ember.set_default_dtype(ember.float32)
    torch.set_default_dtype(torch.float32)


DEFAULT_DTYPE_CASES = ["floats", "ints", "empty", "f16", "bf16", "meta", "meta_int",
                       "scalar_f", "ones_f64", "complex128", "empty_f64", "grad_fn"]


@pytest.mark.parametrize("default_dtype", ["float64", "float16", "bfloat16"], indirect=True)
@pytest.mark.parametrize("name", DEFAULT_DTYPE_CASES)
def test_repr_under_other_default_dtype(name, default_dtype):
    assert repr(CASES[name](ember)) == repr(CASES[name](torch))


@pytest.fixture
def printoptions(request):
    ember.set_printoptions(**request.param)
    torch.set_printoptions(**request.param)
    yield
    ember.set_printoptions(profile="default")
    torch.set_printoptions(profile="default")


OPTIONS = [dict(precision=2), dict(threshold=5), dict(edgeitems=1, threshold=5),
           dict(edgeitems=0, threshold=5), dict(linewidth=40), dict(sci_mode=True),
           dict(sci_mode=False), dict(profile="short")]


@pytest.mark.parametrize("printoptions", OPTIONS, indirect=True, ids=str)
def test_repr_under_print_options(printoptions):
    for name, make in CASES.items():
        assert repr(make(ember)) == repr(make(torch)), name


def test_printoptions_context_restores():
    with ember._tensor_str.printoptions(precision=1):
        assert repr(ember.tensor([1.25])) == "tensor([1.2])"
    assert repr(ember.tensor([1.25])) == "tensor([1.2500])"
