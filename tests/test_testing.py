"""ember.testing.assert_close and make_tensor against torch.testing: the same verdicts, errors
and messages."""
import pytest

import ember

torch = pytest.importorskip("torch")

PAIRS = [
    ("T.tensor([1.0, 2.0])", "T.tensor([1.0, 2.0001])"),
    ("T.tensor([1.0, 2.0])", "T.tensor([1.0, 2.0 + 1e-7])"),
    ("T.tensor([1, 2])", "T.tensor([1, 3])"), ("T.tensor(1.0)", "T.tensor(1.5)"),
    ("1.0", "1.5"), ("2", "3"), ("T.tensor([1.0])", "T.tensor([1.0], dtype=T.float64)"),
    ("[T.tensor(1.), T.tensor(2.)]", "[T.tensor(1.), T.tensor(2.5)]"),
    ("{'a': T.ones(2)}", "{'a': T.zeros(2)}"), ("{'a': T.ones(2)}", "{'b': T.ones(2)}"),
    ("T.ones(2, 3)", "T.ones(3, 2)"), ("T.tensor([True, False])", "T.tensor([True, True])"),
    ("T.tensor([1.0, float('nan')])", "T.tensor([1.0, float('nan')])"),
    ("T.tensor([1.0, float('inf')])", "T.tensor([1.0, -float('inf')])"),
    ("T.tensor([1.0, float('inf')])", "T.tensor([1.0, float('inf')])"),
    ("T.tensor([1 + 1j])", "T.tensor([1 + 2j])"), ("T.tensor(0.)", "T.tensor(1e-3)"),
    ("T.tensor([[1.0, 5.0], [3.0, 4.0]])", "T.tensor([[1.0, 2.0], [3.0, 4.5]])"),
    ("T.tensor([1.0, 2.0], dtype=T.float16)", "T.tensor([1.0, 2.001], dtype=T.float16)"),
    ("[1, 2]", "[1, 2, 3]"), ("'a'", "'a'"),
]


@pytest.mark.parametrize("actual,expected", PAIRS)
def test_assert_close_matches_torch(actual, expected):
    outcome = []
    for T in (torch, ember):
        try:
            T.testing.assert_close(eval(actual, {"T": T}), eval(expected, {"T": T}))  # noqa
            outcome.append("ok")
        except Exception as e:          # noqa: BLE001 (torch's verdict is the oracle)
            outcome.append((type(e).__name__, str(e)))
    assert outcome[0] == outcome[1]


def test_assert_close_options():
    a, b = ember.tensor([1.0, float("nan")]), ember.tensor([1.1, float("nan")])
    ember.testing.assert_close(a, b, rtol=0.2, atol=0.0, equal_nan=True)
    with pytest.raises(AssertionError, match="custom"):
        ember.testing.assert_close(a, b, msg="custom")
    with pytest.raises(ValueError, match="must be either specified or omitted"):
        ember.testing.assert_close(a, b, rtol=0.1)
    ember.testing.assert_close(ember.ones(2), ember.ones(2, dtype=ember.float64),
                               check_dtype=False)


def test_make_tensor_honours_its_bounds_and_layout():
    t = ember.testing.make_tensor(50, 3, dtype=ember.float32, low=-1, high=2,
                                  noncontiguous=True)
    assert t.shape == (50, 3) and not t.is_contiguous() and t.min() >= -1 and t.max() < 2
    i = ember.testing.make_tensor((40,), dtype=ember.int64, low=0, high=3, exclude_zero=True)
    assert set(i.tolist()) <= {1, 2}
    assert ember.testing.make_tensor(2, dtype=ember.float32, requires_grad=True).requires_grad
