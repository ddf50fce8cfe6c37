"""ember.compile's dynamic shapes: automatic dynamic (a size that changed compiles one program
whose kernels take the sizes at run time), dynamic=True/False, mark_dynamic/mark_static, sizes
made in Python that follow the dims (arange, a vjp's fills), B * heads reshapes; forward and
gradients equal eager's at every size and the C compiler runs once for the dynamic program."""
import numpy as np
import pytest

import ember
from ember._C import kernels
from ember._graph import toolchain
from benchmarks.models import gpt_model

# (EMBER_NO_C=1: compiled functions run eagerly, no program to look at)
pytestmark = pytest.mark.skipif(toolchain.compiler() is None or kernels._off,
                                reason="no C compiler, or EMBER_NO_C")
nn, F = ember.nn, ember.nn.functional


@pytest.fixture(autouse=True)
def builds(tmp_path, monkeypatch):
    """The C libraries built (a fresh disk cache, so every new source is a build)."""
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(toolchain, "_loaded", {})
    out, build = [], toolchain._build_so
    monkeypatch.setattr(toolchain, "_build_so", lambda *a: out.append(a[1]) or build(*a))
    return out


def _check(compiled, eager, calls, params=(), tol=dict(rtol=2e-5, atol=2e-6)):
    """``compiled`` and ``eager`` give the same outputs and gradients (of the inputs needing
    them and ``params``) on every call in ``calls``."""
    for args in calls:
        got_want = []
        for fn in (compiled, eager):
            ins = [a for a in args if a.requires_grad] + list(params)
            out = fn(*args)
            w = ember.from_numpy(np.random.default_rng(0).standard_normal(out.shape).astype(
                np.float32))
            got_want.append([out] + (list(ember.autograd.grad((out * w).sum(), ins)) if ins
                                     else []))
        for g, w in zip(*got_want):
            np.testing.assert_allclose(g.detach().numpy(), w.detach().numpy(), **tol)


def _progs(f):
    c = getattr(f, "_call", f)
    return list(c.programs.values())


def test_a_changed_batch_size_compiles_once_more_and_then_never(builds):
    w = ember.randn(8, 16, requires_grad=True)

    def f(x):
        return F.layer_norm((x @ w).relu().softmax(-1), (16,)).sum(0)
    cf = ember.compile(f)
    calls = [(ember.randn(b, 8, requires_grad=True),) for b in (4, 6, 9, 13, 2)]
    _check(cf, f, calls[:2], [w])
    assert len(builds) == 2 and [list(p.dyn) for p in _progs(cf)] == [[], [((0, 0),)]]
    assert "int64_t _s0" in builds[1] and "int64_t" not in builds[0].split("{")[0]
    _check(cf, f, calls[2:], [w])           # (no build for a third, fourth... size)
    assert len(builds) == 2 and len(_progs(cf)) == 2
    assert cf.recompile_reasons == ["tensor 'args[0]' size mismatch at index 0. expected 4, "
                                    "actual 6"]
    ember.compiler.reset()                  # (the sizes seen are forgotten too: static again)
    _check(cf, f, calls[2:3], [w])
    assert [list(p.dyn) for p in _progs(cf)] == [[]]


def test_dynamic_false_recompiles_and_the_config_turns_automatic_dynamic_off(builds):
    f = lambda x: (x * 2).sigmoid()                 # noqa: E731
    cf = ember.compile(f, dynamic=False)
    _check(cf, f, [(ember.randn(b, 3),) for b in (2, 3, 4)])
    assert len(_progs(cf)) == 3 and all(not p.dyn for p in _progs(cf))
    old, ember._dynamo.config.automatic_dynamic_shapes = \
        ember._dynamo.config.automatic_dynamic_shapes, False
    try:
        cg = ember.compile(lambda x: (x * 3).sigmoid())
        for b in (2, 3):
            cg(ember.randn(b, 3))
        assert len(_progs(cg)) == 2 and all(not p.dyn for p in _progs(cg))
    finally:
        ember._dynamo.config.automatic_dynamic_shapes = old
    with ember.compiler.config.patch(automatic_dynamic_shapes=False):
        ch = ember.compile(lambda x: (x * 4).sigmoid())
        for b in (2, 3):
            ch(ember.randn(b, 3))
        assert len(_progs(ch)) == 2 and all(not p.dyn for p in _progs(ch))


def test_mlp_dynamic_true_specializes_feature_dims_and_sizes_0_1(builds):
    ember.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))
    cm = ember.compile(m, dynamic=True)
    calls = [(ember.randn(b, 8, requires_grad=True),) for b in (3, 5, 7)]
    _check(cm, m, calls, list(m.parameters()), dict(rtol=1e-4, atol=1e-5))
    # the feature dim cannot follow (the Linear's weight is fixed): static; the batch follows
    assert [p.dyn for p in _progs(cm)] == [[((0, 0),)]] and len(builds) == 1
    _check(cm, m, [(ember.randn(1, 8, requires_grad=True),)], list(m.parameters()),
           dict(rtol=1e-4, atol=1e-5))       # (size 1 is specialized, as torch does)
    assert [p.dyn for p in _progs(cm)] == [[((0, 0),)], []]


def test_small_gpt_at_several_batch_sizes_and_lengths_equals_eager(builds):
    """B and T change: one program for both (the position arange and cross-entropy's fills
    follow T and B * T), a third program only once both have changed."""
    ember.manual_seed(0)
    m = gpt_model(ember, vocab=65, block=32, n_layer=2, n_head=4, n_embd=32)
    cm = ember.compile(m)

    def ids(b, t):
        return ember.randint(0, 65, (b, t)), ember.randint(0, 65, (b, t))
    _check(cm, m, [ids(2, 8), ids(3, 8), ids(5, 8)], list(m.parameters()),
           dict(rtol=1e-4, atol=1e-6))
    assert len(_progs(cm)) == 2
    n = len(builds)
    _check(cm, m, [ids(3, 12), ids(4, 16), ids(6, 5)], list(m.parameters()),
           dict(rtol=1e-4, atol=1e-6))
    assert len(_progs(cm)) == 3 and len(builds) == n + 1
    assert _progs(cm)[-1].dyn == [((0, 0), (1, 0)), ((0, 1), (1, 1))]


def test_reshape_by_batch_times_heads_follows_the_batch(builds):
    def attn(x):
        B, T, C = x.shape
        q = x.reshape(B * 2, T, C // 2)             # (B * heads rows)
        a = (q @ q.transpose(1, 2)).softmax(-1) @ q
        return a.reshape(B, T, C).tanh()
    cf = ember.compile(attn, dynamic=True)
    _check(cf, attn, [(ember.randn(b, 5, 8, requires_grad=True),) for b in (2, 3, 6)])
    assert len(_progs(cf)) == 1 and _progs(cf)[0].dyn and len(builds) == 1


def test_mark_dynamic_range_and_mark_static():
    x = ember.randn(6, 4)
    ember._dynamo.mark_dynamic(x, 0, min=2, max=4)
    with pytest.raises(ember._dynamo.exc.ConstraintViolationError, match="not in range"):
        ember.compile(lambda x: x * 2)(x)
    x = ember.randn(3, 4)
    ember._dynamo.mark_dynamic(x, 0, max=5)
    cf = ember.compile(lambda x: x * 2)
    cf(x)
    assert _progs(cf)[0].dyn == [((0, 0),)]
    _check(cf, lambda x: x * 2, [(ember.randn(b, 4),) for b in (2, 5)])
    assert _progs(cf)[0].ranges == [(((0, 0),), 2, 5)]
    # 7 is past the marked range: compiled again, for any size (the program of the same
    # guards it replaces did not fit)
    _check(cf, lambda x: x * 2, [(ember.randn(7, 4),)])
    assert "outside [(2, 5)]" in cf.recompile_reasons[-1]
    assert [p.ranges for p in _progs(cf)] == [[(((0, 0),), 2, float("inf"))]]
    lin = nn.Linear(4, 2)
    y = ember.randn(3, 4)
    ember._dynamo.mark_dynamic(y, 1)        # (the Linear fixes it: torch raises too)
    with pytest.raises(ember._dynamo.exc.ConstraintViolationError):
        ember.compile(lin)(y)
    z = ember.randn(3, 4)
    ember._dynamo.mark_static(z, 0)
    cz = ember.compile(lambda z: z + 1, dynamic=True)
    cz(z)
    assert _progs(cz)[0].dyn == [((0, 1),)]


def test_tied_sizes_must_stay_equal(builds):
    """Two inputs' dims of one size share one dynamic size (duck sizing); a call where they
    differ does not fit it and compiles again."""
    f = lambda x, y: x.sum(0) + y.sum(0) * 2         # noqa: E731
    cf = ember.compile(f, dynamic=True)
    _check(cf, f, [(ember.randn(3, 4), ember.randn(3, 4)), (ember.randn(5, 4),
                                                            ember.randn(5, 4))])
    assert [p.dyn for p in _progs(cf)] == [[((0, 0), (1, 0)), ((0, 1), (1, 1))]]
    _check(cf, f, [(ember.randn(5, 4), ember.randn(6, 4))])
    assert "not equal" in cf.recompile_reasons[-1]
    assert [p.dyn for p in _progs(cf)] == [[((0, 0),), ((0, 1), (1, 1)), ((1, 0),)]]


def test_reduce_overhead_buffers_follow_the_sizes():
    f = lambda x: (x * 2).exp()                      # noqa: E731
    cf = ember.compile(f, mode="reduce-overhead", dynamic=True)
    _check(cf, f, [(ember.randn(b, 3),) for b in (2, 5, 3)])
    assert len(_progs(cf)) == 1


def test_row_kernels_over_a_dynamic_last_dim(builds):
    """layer_norm (its one-pass sums scaled by the row length) and softmax over rows whose
    length is dynamic: the row length is a kernel argument."""
    def f(x):
        return F.layer_norm(x, x.shape[-1:]).softmax(-1) * x
    cf = ember.compile(f, dynamic=True)
    _check(cf, f, [(ember.randn(3, n, requires_grad=True),) for n in (5, 8, 33)])
    assert [p.dyn for p in _progs(cf)] == [[((0, 0),), ((0, 1),)]] and len(builds) == 1
    assert "* ((float)((_s1)))" in builds[0] or "(double)(" in builds[0]


def test_a_returned_python_size_keeps_its_dim_static():
    """A Python number computed from a size is baked into the program: that dim stays static
    (rather than returning the first size's number for every size)."""
    f = lambda x: ((x * 2).sum(), x.shape[0] * 3)     # noqa: E731
    cf = ember.compile(f, dynamic=True)
    for b in (2, 3, 5):
        assert cf(ember.randn(b, 4))[1] == b * 3
    assert all((0, 0) not in [k for g in p.dyn for k in g] for p in _progs(cf))


def test_batchnorm_batch_stays_static_after_two_sizes(monkeypatch):
    """Training BatchNorm's variance correction is a Python float of the batch size: the batch
    cannot be dynamic; after two sizes found so, new sizes compile statically without the
    extra recordings."""
    from ember.compiler import _aot
    records, record = [], _aot._record
    monkeypatch.setattr(_aot, "_record", lambda *a, **k: records.append(1) or record(*a, **k))
    ember.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU())
    ember.manual_seed(0)
    m2 = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU())
    cm = ember.compile(m)
    for b in (4, 6, 9, 5):
        x = ember.randn(b, 4)
        np.testing.assert_allclose(cm(x).detach().numpy(), m2(x).detach().numpy(), rtol=1e-5,
                                   atol=1e-6)
    np.testing.assert_allclose(m[1].running_var.numpy(), m2[1].running_var.numpy(), rtol=1e-6)
    assert all(not p.dyn for p in _progs(cm)) and len(_progs(cm)) == 4
    assert len(records) == 1 + 3 + 3 + 1       # (4; 6 and 9: two failed tries; 5: static)
