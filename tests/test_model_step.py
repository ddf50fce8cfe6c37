"""Pieces of the training step made faster for the model benchmarks: gradients the graph does
not need are not computed, and what is computed matches the plain path."""
import os
import subprocess
import sys

import numpy as np
import pytest

import ember
from ember._ops import linalg


@pytest.fixture
def count_matmuls(monkeypatch):
    calls = []
    fwd = linalg.matmul.fwd

    def counting(xp, a, b):
        calls.append((a.shape, b.shape))
        return fwd(xp, a, b)
    monkeypatch.setattr(linalg.matmul, "fwd", counting)
    return calls


def test_linear_backward_skips_the_input_gradient_nobody_needs(count_matmuls):
    x = ember.randn(8, 3, 5)
    w = ember.randn(4, 5, requires_grad=True)
    b = ember.randn(4, requires_grad=True)
    y = ember.nn.functional.linear(x, w, b)
    assert len(count_matmuls) == 1 and count_matmuls[0] == ((24, 5), (5, 4))   # one 2-D GEMM
    y.square().sum().backward()
    assert len(count_matmuls) == 2          # the weight's product only, no g @ w for x
    g = 2 * y.detach().numpy().reshape(-1, 4)
    np.testing.assert_allclose(w.grad.numpy(), g.T @ x.numpy().reshape(-1, 5), rtol=1e-5)
    np.testing.assert_allclose(b.grad.numpy(), g.sum(0), rtol=1e-5)


def test_linear_gradients_under_saved_tensor_hooks_that_detach():
    # the hooks hand back tensors without requires_grad: the graph, not the saved tensor,
    # says which gradients are needed
    x = ember.randn(2, 3, 5, requires_grad=True)
    w = ember.randn(4, 5, requires_grad=True)
    with ember.autograd.graph.saved_tensors_hooks(lambda t: t.detach(), lambda t: t):
        y = ember.nn.functional.linear(x, w)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.broadcast_to(w.detach().numpy().sum(0),
                                                               (2, 3, 5)), rtol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(), np.broadcast_to(
        x.detach().numpy().reshape(-1, 5).sum(0), (4, 5)), rtol=1e-5)


def test_needs_input_grad_outside_a_backward_is_true():
    assert ember.autograd.graph.needs_input_grad(0)


_CHURN = """
import resource, numpy as np, ember
def step():         # a forward's activations, all freed by the end of the step
    keep = [np.ones((512, 512), np.float32) for _ in range(40)]
    del keep
step(); step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc settings")
def test_a_steps_freed_arrays_stay_mapped_for_the_next_step():
    from ember._backends import malloc
    if not malloc.tune():
        pytest.skip("not glibc")
    run = subprocess.run([sys.executable, "-c", _CHURN], capture_output=True, text=True,
                         env={k: v for k, v in os.environ.items() if not k.startswith("MALLOC")})
    assert run.returncode == 0, run.stderr
    assert int(run.stdout) < 400         # 40 MiB re-faulted would be ~10,000 pages


def test_malloc_tuning_defers_to_the_users_settings(monkeypatch):
    from ember._backends import malloc
    monkeypatch.setenv("EMBER_MALLOC_TUNING", "0")
    assert not malloc.tune()
    monkeypatch.delenv("EMBER_MALLOC_TUNING")
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    assert not malloc.tune()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
@pytest.mark.parametrize("index_shape,rows", [((40,), 3), ((16, 64), 65), ((50,), 1000)])
def test_row_scatter_add_matches_ufunc_at(dtype, index_shape, rows):
    from ember._backends import _add_rows
    rng = np.random.default_rng(0)
    index = rng.integers(0, rows, index_shape)
    values = rng.standard_normal(index_shape + (5,)).astype(dtype)
    out, ref = np.ones((rows, 5), dtype), np.ones((rows, 5), dtype)
    assert _add_rows(out, (index,), values)
    np.add.at(ref, (index,), values)
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)


def test_row_scatter_add_leaves_other_cases_to_ufunc_at():
    from ember._backends import _add_rows
    out, vals = np.zeros((10, 3)), np.ones((40, 3))
    assert not _add_rows(out, np.full(40, -1), vals)                  # negative: wraps
    assert not _add_rows(out, np.arange(40) % 10, np.ones(3))         # broadcast values
    assert not _add_rows(out, (np.arange(40) % 10, np.zeros(40, int)), np.ones(40))
    assert not out.any()


def test_embedding_backward_sums_repeated_rows():
    w = ember.randn(7, 4, requires_grad=True)
    idx = ember.tensor([[0, 3, 3, 6] * 10, [3, 3, 1, 0] * 10])
    (ember.nn.functional.embedding(idx, w) * 2).sum().backward()
    counts = np.bincount(idx.numpy().reshape(-1), minlength=7)
    np.testing.assert_allclose(w.grad.numpy(), 2 * counts[:, None] * np.ones((7, 4)))


def test_split_backward_joins_fused_attention_gradients_without_a_copy(monkeypatch):
    torch = pytest.importorskip("torch")
    from ember._ops import joining
    joined = []

    def spy(g, dim):
        out = side_by_side(g, dim)
        joined.append(out is not None)
        return out
    side_by_side = joining._side_by_side
    monkeypatch.setattr(joining, "_side_by_side", spy)
    x = np.random.default_rng(0).standard_normal((2, 10, 3 * 8)).astype(np.float32)
    grads = []
    for T in (ember, torch):
        xt = T.tensor(x, requires_grad=True)
        q, k, v = (t.view(2, 10, 2, 4).transpose(1, 2) for t in (xt * 1).split(8, dim=2))
        y = T.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        (y * y).sum().backward()
        grads.append(xt.grad.numpy())
    if ember._C.kernels.kernel("attn_small_fwd", np.float32) is not None:
        assert joined == [True]
    np.testing.assert_allclose(*grads, rtol=1e-5, atol=1e-5)


def test_split_backward_cats_gradients_that_are_not_side_by_side():
    x = ember.randn(4, 6, requires_grad=True)
    a, b, c = x.split(2, dim=1)
    (c * 1 + a * 2 + b * 3).sum().backward()        # each gradient an array of its own
    np.testing.assert_allclose(x.grad.numpy(), np.repeat([[2, 2, 3, 3, 1, 1]], 4, 0))
    with ember.no_grad():
        g = ember.ones(4, 6)
        parts = [g[:, 2:4], g[:, 0:2], g[:, 4:6]]          # side by side, but not in order
        assert ember._ops.joining._side_by_side(parts, 1) is None
        whole = ember._ops.joining._side_by_side([g[:, 0:2], g[:, 2:4], g[:, 4:6]], 1)
        assert whole.shape == (4, 6) and whole._data.ctypes.data == g._data.ctypes.data


def test_linear_backward_in_numpy_matches_the_ember_op_path():
    # without create_graph the gradients come from NumPy directly; with it, from ember ops
    x = np.random.default_rng(1).standard_normal((3, 5, 4))
    w = np.random.default_rng(2).standard_normal((6, 4))
    b = np.random.default_rng(3).standard_normal((1,))           # a broadcast bias
    grads = []
    for create_graph in (False, True):
        ts = [ember.tensor(a, requires_grad=True) for a in (x, w, b)]
        y = ember.nn.functional.linear(*ts)
        y.backward(ember.ones_like(y) * y.detach(), create_graph=create_graph)
        grads.append([t.grad.detach().numpy() for t in ts])
    for a, c in zip(*grads):
        np.testing.assert_allclose(a, c, rtol=1e-12)
    assert grads[0][2].shape == (1,)
