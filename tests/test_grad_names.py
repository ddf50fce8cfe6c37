"""Autograd nodes carry torch's names (tutorials print ``grad_fn=<AddmmBackward0>`` and users
compare them): for every OpDef's samples, float64 inputs that require grad, each output's
``type(y.grad_fn).__name__`` and ``y.grad_fn.name()`` are torch's; so are the nodes of the
common module-level calls, and their ``next_functions`` where ember's graph has torch's shape."""
import numpy as np
import pytest

import ember
from ember._ops.registry import all_ops, node_name
from oracle import to_torch, torch
from test_ops import _call, _convert, _ember, _samples

OPS = [d for d in all_ops() if d.samples is not None and d.differentiable]

# Where no rule on the call gives torch's node: the op, and why. Each still differs from torch
# on some sample (the test says when one no longer does).
UNREACHED = {
}


def _names(out):
    """(type name, name()) of each tensor output's node; None for an output without one."""
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [None if o.grad_fn is None else (type(o.grad_fn).__name__, o.grad_fn.name())
            for o in outs if isinstance(o, (ember.Tensor, torch.Tensor))]


@pytest.mark.parametrize("opdef", OPS, ids=str)
def test_node_names_match_torch(opdef):
    differ = []
    for s in _samples(opdef, ember.float64):
        t_args = _convert(s.args, lambda x: to_torch(x, x.dtype.kind in "fc")
                          if isinstance(x, np.ndarray) else x)
        try:
            want = _names(_call(torch, opdef, t_args, s.kwargs))
        except (RuntimeError, TypeError):
            continue        # not a valid call in torch (test_ops checks that ember raises)
        got = _names(_call(ember, opdef, _convert(s.args, lambda x: _ember(x, True)), s.kwargs))
        if got != want:
            differ.append(f"{opdef.name}({s}): ember {got}, torch {want}")
    if opdef.name in UNREACHED:
        assert differ, f"{opdef.name} now names its nodes as torch does: drop it from UNREACHED"
    else:
        assert not differ, "\n".join(differ)


def test_node_name_is_torchs_camel_case():
    assert node_name("log1p") == "Log1PBackward0"
    assert node_name("max_pool2d_with_indices") == "MaxPool2DWithIndicesBackward0"
    assert node_name("sum", 1) == "SumBackward1"


def _graph(y, depth):
    """y's node name and, ``depth`` levels down, those its edges lead to (edges to no node
    left out: torch keeps one for a number operand, ember none)."""
    def walk(fn, d):
        name = type(fn).__name__
        if d == 0:
            return name
        return name, [walk(f, d - 1) for f, _ in fn.next_functions if f is not None]
    return None if y.grad_fn is None else walk(y.grad_fn, depth)


def _modules(lib):
    """{case: (output, depth)}: module-level calls and the depth to which ember's graph has
    torch's shape (0: the output's node only)."""
    rng = np.random.default_rng(0)
    F = lib.nn.functional

    def T(*shape):
        return lib.tensor(rng.standard_normal(shape), dtype=lib.float32, requires_grad=True)
    lib.manual_seed(0)
    x2, x3, x4 = T(3, 4), T(2, 3, 4), T(2, 3, 5, 5)
    p, labels = lib.tensor(rng.random((3, 4)), dtype=lib.float32), lib.tensor([0, 1, 3])
    c = {
        "Linear 2-D": (lib.nn.Linear(4, 2)(x2), 1),
        "Linear 2-D, no bias": (lib.nn.Linear(4, 2, bias=False)(x2), 0),
        "Linear 3-D": (lib.nn.Linear(4, 2)(x3), 0),
        "Linear 3-D, no bias": (lib.nn.Linear(4, 2, bias=False)(x3), 0),
        "x[:, 0]": (x2[:, 0], 1), "x[1:]": (x2[1:], 1), "x[0]": (x2[0], 1),
        "x[idx]": (x2[lib.tensor([0, 2])], 1), "x[mask]": (x2[x2 > 0], 1),
        "x[None]": (x2[None], 1), "x[...]": (x2[...], 1),
        "BCEWithLogitsLoss": (lib.nn.BCEWithLogitsLoss()(x2, p), 1),
        "BCELoss": (lib.nn.BCELoss()(lib.sigmoid(x2), p), 2),
        "CrossEntropyLoss": (lib.nn.CrossEntropyLoss()(x2, labels), 0),
        "NLLLoss": (lib.nn.NLLLoss()(F.log_softmax(x2, 1), labels), 2),
        "MSELoss": (lib.nn.MSELoss()(x2, p), 1),
        "L1Loss": (lib.nn.L1Loss()(x2, p), 0),
        "relu": (lib.relu(x2), 1), "ReLU": (lib.nn.ReLU()(x2), 1),
        "gelu": (F.gelu(x2), 1), "sigmoid": (lib.sigmoid(x2), 1), "tanh": (lib.tanh(x2), 1),
        "softmax": (lib.softmax(x2, 1), 1), "F.softmax": (F.softmax(x2, -1), 1),
        "log_softmax": (F.log_softmax(x2, 1), 1),
        "LayerNorm": (lib.nn.LayerNorm(4)(x2), 1), "layer_norm": (F.layer_norm(x3, (4,)), 0),
        "Conv2d": (lib.nn.Conv2d(3, 2, 3)(x4), 1), "Conv1d": (lib.nn.Conv1d(3, 2, 3)(x3), 1),
        "max_pool2d": (F.max_pool2d(x4, 2), 1),
        "Embedding": (lib.nn.Embedding(5, 3)(lib.tensor([[0, 2], [4, 1]])), 1),
        "Dropout": (lib.nn.Dropout(0.5)(x2), 1), "Dropout, eval": (lib.nn.Dropout().eval()(x2), 1),
        "matmul 2-D": (x2 @ T(4, 5), 1), "matmul 3-D @ 2-D": (x3 @ T(4, 5), 0),
        "matmul 2-D @ 1-D": (x2 @ T(4), 1), "matmul 1-D @ 1-D": (T(4) @ T(4), 1),
        "bmm": (lib.bmm(x3, T(2, 4, 5)), 1), "mm": (lib.mm(x2, T(4, 5)), 1),
        "view": (x2.view(12), 1), "reshape": (x2.reshape(12), 1),
        "reshape of a transpose": (x2.t().reshape(12), 0),
        "transpose": (x2.transpose(0, 1), 1), "permute": (x3.permute(2, 0, 1), 1),
        "t()": (x2.t(), 1), ".T": (x2.T, 1), ".mT": (x3.mT, 1),
        "flatten": (x3.flatten(1), 1), "Flatten": (lib.nn.Flatten()(x4), 1),
        "unsqueeze": (x2.unsqueeze(0), 1), "contiguous": (x2.t().contiguous(), 2),
        "sum()": (x2.sum(), 1), "sum(0)": (x2.sum(0), 1), "mean()": (x2.mean(), 1),
        "mean(1)": (x2.mean(1), 1), "max()": (x2.max(), 1), "max(1)": (x2.max(1).values, 1),
        "x * 2": (x2 * 2, 1), "x / 2": (x2 / 2, 1), "1 - x": (1 - x2, 1), "x ** 2": (x2 ** 2, 1),
        "clamp": (x2.clamp(-1, 1), 1), "norm": (x2.norm(), 1), "var": (x2.var(), 1),
        "cat": (lib.cat([x2, x2]), 1), "stack": (lib.stack([x2, x2]), 1),
        "chunk": (x2.chunk(2)[0], 1), "split": (x2.split(2)[1], 1),
        "double()": (x2.double(), 1), "expand": (x2[:, :1].expand(3, 4), 2),
    }
    return c


TORCH_CASES, EMBER_CASES = _modules(torch), _modules(ember)


@pytest.mark.parametrize("case", list(TORCH_CASES))
def test_module_level_nodes_match_torch(case):
    want, depth = TORCH_CASES[case]
    got, _ = EMBER_CASES[case]
    assert _graph(got, depth) == _graph(want, depth)
