"""ember.compile / ember.compiler / ember._dynamo: the API; a compiled function is never wrong
(a data-dependent branch runs eagerly); explain and fullgraph find graph breaks as torch's do.
tests/test_compile_codegen.py covers the generated code."""
import numpy as np
import pytest
import torch

import ember


def _branchy(T):
    def f(x):
        y = x.sin()
        if y.sum() > 0:
            return y * 2
        return y - 1
    return f


def test_a_branch_that_flips_between_calls_gives_eagers_results():
    f = ember.compile(_branchy(ember))
    for x in (ember.ones(3), -ember.ones(3), ember.ones(3)):
        np.testing.assert_array_equal(f(x).numpy(), _branchy(ember)(x).numpy())


def test_explain_and_fullgraph_find_the_break_as_torch_does():
    ours = ember._dynamo.explain(_branchy(ember))(ember.ones(3))
    torch._dynamo.reset()
    theirs = torch._dynamo.explain(_branchy(torch))(torch.ones(3))
    assert (ours.graph_count, ours.graph_break_count) == (theirs.graph_count,
                                                          theirs.graph_break_count)
    assert "Python boolean" in ours.break_reasons[0].reason
    assert __file__ in ours.break_reasons[0].user_stack[0]
    with pytest.raises(ember._dynamo.exc.Unsupported, match="fullgraph=True"):
        ember.compile(_branchy(ember), fullgraph=True)(ember.ones(3))
    g = ember.compile(lambda x: x.relu() * 2, fullgraph=True)
    assert g(ember.tensor([-1.0, 1.0])).tolist() == [0.0, 2.0]
    assert ember._dynamo.explain(lambda x: x.relu() * 2)(ember.ones(2)).graph_break_count == 0


def test_compiled_module_trains_like_eager():
    def run(compiled):
        ember.manual_seed(0)
        m = ember.nn.Sequential(ember.nn.Linear(4, 8), ember.nn.GELU(), ember.nn.Linear(8, 1))
        model = ember.compile(m) if compiled else m
        opt = ember.optim.AdamW(model.parameters(), lr=1e-2)
        x, y = ember.randn(16, 4), ember.randn(16, 1)
        losses = []
        for _ in range(30):
            opt.zero_grad()
            loss = ember.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, model
    (eager, _), (compiled, model) = run(False), run(True)
    np.testing.assert_allclose(compiled, eager, rtol=0, atol=1e-6)   # (float32, fused C)
    tm = torch.compile(torch.nn.Linear(2, 2))
    assert list(ember.compile(ember.nn.Linear(2, 2)).state_dict()) == list(tm.state_dict())
    assert model.get_submodule("_orig_mod.0").weight.shape == model._orig_mod[0].weight.shape


def test_api_errors_and_decorators():
    with pytest.raises(ember._dynamo.exc.InvalidBackend, match="Invalid backend: 'nope'"):
        ember.compile(lambda x: x, backend="nope")
    with pytest.raises(RuntimeError, match="Unrecognized mode=fast"):
        ember.compile(lambda x: x, mode="fast")
    with pytest.raises(NotImplementedError, match="custom backend"):
        ember.compile(lambda x: x, backend=lambda gm, inputs: gm)

    @ember.compile(mode="reduce-overhead")
    def h(x):
        return x + 1
    assert h(ember.ones(1)).tolist() == [2.0] and h.__name__ == "h"
    assert ember.compiler.disable(h) is h and not ember.compiler.is_compiling()
    assert "inductor" in ember.compiler.list_backends()
    ember.compiler.reset()
    ember._dynamo.reset()
