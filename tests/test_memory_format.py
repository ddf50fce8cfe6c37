"""Memory formats: clone, contiguous, to, *_like and Module.to lay tensors out as torch does
(strides compared with torch's)."""
import pickle

import pytest

import ember

torch = pytest.importorskip("torch")

CALLS = [
    "x.contiguous(memory_format=T.channels_last)", "x.clone(memory_format=T.channels_last)",
    "x.contiguous(memory_format=T.channels_last).clone()", "x.transpose(1, 3).clone()",
    "x[:, ::2].clone()", "x.permute(2, 0, 3, 1).clone()", "x.transpose(0, 1).contiguous()",
    "x.contiguous(memory_format=T.channels_last) + 1", "x.to(memory_format=T.channels_last)",
    "x.contiguous(memory_format=T.channels_last).to(T.float64)",
    "T.empty_like(x, memory_format=T.channels_last)",
    "T.full_like(x, 2.0, memory_format=T.channels_last)",
    "T.ones_like(x, memory_format=T.channels_last)",
    "x.contiguous(memory_format=T.channels_last).contiguous()",
    "x.unsqueeze(-1).contiguous(memory_format=T.channels_last_3d)",
    "x[0].contiguous(memory_format=T.channels_last)",
    "x.contiguous(memory_format=T.preserve_format)",
    # preserve_format, the *_like default: a dense input's strides, else its dims' order
    "T.zeros_like(x.transpose(1, 3))", "T.ones_like(x.permute(2, 0, 3, 1))",
    "T.full_like(x[:, ::2].transpose(0, 2), 3.0)", "T.empty_like(x[0].expand(2, 3, 4, 5))",
    "T.ones_like(x[:, :, :1].expand(2, 3, 4, 5).transpose(0, 3))",
    "T.zeros_like(x.transpose(0, 1), dtype=T.float64)", "T.empty_like(x[:, :1].transpose(1, 2))",
    "T.ones_like(x.transpose(1, 3), memory_format=T.contiguous_format)",
    "T.zeros_like(x.unsqueeze(4).transpose(0, 4))", "x[:, :, :1].expand(2, 3, 4, 5).clone()",
    "T.empty_like(x.transpose(1, 3), memory_format=T.preserve_format)",
    # flip (and rot90, a flip and a transpose) keeps the input's layout
    "x.transpose(1, 3).flip(1)", "x.permute(2, 0, 3, 1).flip((0, 3))", "x.transpose(2, 3).flip(2)",
    "x.transpose(0, 1).rot90(1, (2, 3))", "x.transpose(2, 3).rot90(-1, (2, 3))",
]


@pytest.mark.parametrize("call", CALLS)
def test_layouts_match_torch(call):
    outcome = []
    for T in (torch, ember):
        x = T.arange(120.0).reshape(2, 3, 4, 5)
        try:
            y = eval(call, {"x": x, "T": T})                          # noqa: S307 (a table)
            outcome.append((tuple(y.stride()), y.is_contiguous(),
                            y.is_contiguous(memory_format=T.channels_last),
                            None if "empty" in call else y.sum().item()))
        except RuntimeError as e:
            outcome.append(str(e))
    assert outcome[0] == outcome[1]


def test_module_to_channels_last_and_back():
    m = ember.nn.Conv2d(3, 4, 3).to(memory_format=ember.channels_last)
    assert m.weight.is_contiguous(memory_format=ember.channels_last) and m.bias.is_contiguous()
    x = ember.randn(2, 3, 8, 8)
    y = m(x.to(memory_format=ember.channels_last))
    m2 = m.to(memory_format=ember.contiguous_format)
    assert m2.weight.is_contiguous()
    ember.testing.assert_close(y, m2(x))


def test_formats_print_and_pickle_as_torch_names():
    assert repr(ember.channels_last) == "torch.channels_last"
    assert pickle.loads(pickle.dumps(ember.channels_last_3d)) is ember.channels_last_3d


@pytest.mark.parametrize("fn", ["rand_like", "randn_like", "randint_like"])
@pytest.mark.parametrize("view", ["x", "x.transpose(0, 2)", "x[:, ::2]"])
def test_random_like_draws_in_the_inputs_layout_as_torch(fn, view):
    """torch fills ``empty_like(input)`` in memory order: other numbers than the factory's."""
    got = []
    for T in (torch, ember):
        x = T.zeros(4, 5, 6)
        T.manual_seed(0)
        y = getattr(T, fn)(eval(view), *((3, 9) if fn == "randint_like" else ()))  # noqa: S307
        got.append((tuple(y.stride()), y.detach().numpy().tolist()))
    assert got[0] == got[1]
