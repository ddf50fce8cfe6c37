"""__torch_function__ and ember.overrides against torch: subclasses, non-tensor objects,
modes, the helpers, and what stays untouched (plain tensors, Parameter)."""
import gc

import pytest

import ember

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _classes_go():
    """The classes a test defines die with it: their dispatch hook goes (the fast path back)."""
    yield
    gc.collect()


def _logged(L):
    class Logged(L.Tensor):
        log = []

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            cls.log.append(func.__name__)
            return super().__torch_function__(func, types, args, kwargs)
    return Logged


def _run_subclass(L):
    Logged = _logged(L)
    x = L.ones(2, 3).as_subclass(Logged)
    out = [type(x + 1).__name__, type(L.add(x, x)).__name__, type(x.sum(0)).__name__,
           type(L.exp(x)).__name__, type(x.matmul(L.ones(3))).__name__,
           type(L.ones(2) * 2).__name__]
    x.mul_(2)
    out.append(type(x).__name__)
    vals, idx = x.max(1)
    out += [type(vals).__name__, type(idx).__name__, type(L.cat([x, x])).__name__]
    return out, [n.lstrip("_") for n in Logged.log]


def test_subclass_results_and_calls_match_torch():
    (e_types, e_log), (t_types, t_log) = _run_subclass(ember), _run_subclass(torch)
    assert e_types == t_types
    # ember reports operators by their function (add for +, mul_ for *=): same op names
    assert [n.replace("matmul", "mm") for n in e_log] == \
        [{"add": "add", "mul": "mul"}.get(n, n).replace("matmul", "mm") for n in t_log]


def test_subclass_gradients_flow():
    for L in (ember, torch):
        Logged = _logged(L)
        w = L.ones(2, requires_grad=True)
        y = (w.as_subclass(Logged) * 3).sum()
        y.backward()
        assert w.grad.tolist() == [3.0, 3.0] and type(y).__name__ == "Logged"


def _obj(L):
    class Obj:
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return ("obj", func.__name__, len(args), tuple(t.__name__ for t in types))
    return Obj


def test_non_tensor_objects_take_calls():
    for L in (ember, torch):
        Obj = _obj(L)
        assert L.add(Obj(), 1) == ("obj", "add", 2, ("Obj",))
        assert L.add(L.ones(1), Obj()) == ("obj", "add", 2, ("Obj",))
        assert L.exp(Obj()) == ("obj", "exp", 1, ("Obj",))
        assert L.cat([L.ones(1), Obj()])[:2] == ("obj", "cat")


def test_not_implemented_everywhere_raises_type_error():
    class Bad:
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return NotImplemented
    with pytest.raises(TypeError, match="no implementation found for 'torch.add' on types "
                                        "that implement __torch_function__"):
        ember.add(Bad(), 1)
    with pytest.raises(TypeError):
        torch.add(Bad(), 1)


def _mode_calls(L):
    class Count(L.overrides.TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.calls = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.calls.append(func.__name__)
            return func(*args, **(kwargs or {}))
    x = L.ones(2, 3)
    with Count() as mode:
        y = (x.exp() * 2).sum(dim=1)
        z = L.relu(y)
        x.add_(1)
    assert z.shape == (2,)
    return mode.calls


def test_mode_sees_every_op():
    assert _mode_calls(ember) == [n for n in _mode_calls(torch)]


def test_mode_can_replace_results_and_nests():
    for L in (ember, torch):
        class Zero(L.overrides.TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                if func.__name__ == "exp":
                    return L.zeros(1)
                return func(*args, **(kwargs or {}))
        with Zero(), L.overrides.BaseTorchFunctionMode():
            assert L.exp(L.ones(1)).tolist() == [0.0]
        assert L.exp(L.zeros(1)).tolist() == [1.0]


def test_disable_torch_function():
    for L in (ember, torch):
        Logged = _logged(L)
        x = L.ones(2).as_subclass(Logged)
        with L._C.DisableTorchFunctionSubclass() if L is torch else \
                L.DisableTorchFunctionSubclass():
            y = x + 1
        assert Logged.log == [] and type(y).__name__ in ("Tensor", "Logged")


def test_helpers():
    O = ember.overrides
    Obj = _obj(ember)
    assert not O.has_torch_function((ember.ones(1), 2, "a"))
    assert O.has_torch_function((ember.ones(1), Obj()))
    assert O.has_torch_function_unary(Obj()) and O.has_torch_function_variadic(1, Obj())
    assert ember.nn.functional.has_torch_function_variadic(Obj(), 1)
    assert O.is_tensor_like(ember.ones(1)) and O.is_tensor_like(Obj()) and \
        not O.is_tensor_like(3)
    assert O.resolve_name(ember.add) == torch.overrides.resolve_name(torch.add)
    assert O.resolve_name(ember.Tensor.add_) == torch.overrides.resolve_name(torch.Tensor.add_)
    over = O.get_overridable_functions()
    assert ember.add in over[ember] and ember.Tensor.add_ in over[ember.Tensor]
    assert ember.nn.functional.relu in over[ember.nn.functional]
    assert ember.is_tensor in O.get_ignored_functions() and \
        torch.is_tensor in torch.overrides.get_ignored_functions()
    dummies = O.get_testing_overrides()
    assert dummies[ember.mul](1, 2) == -1
    assert O.is_tensor_method_or_property(ember.Tensor.add)
    calls = []

    @O.wrap_torch_function(lambda x, y=None: (x,))
    def f(x, y=None):
        calls.append(1)
        return "plain"
    assert f(ember.ones(1)) == "plain" and f(Obj())[:2] == ("obj", "f") and calls == [1]
    assert O.redispatch_function(ember.mul, (), (ember.ones(1), 3), {}).tolist() == [3.0]
    with O.enable_reentrant_dispatch():
        pass


def test_plain_tensors_and_parameters_are_untouched():
    _logged(ember)         # a subclass with __torch_function__ exists: the hook is on
    p = ember.nn.Parameter(ember.ones(2))
    assert type(p * 2) is ember.Tensor and type(ember.ones(2) + 1) is ember.Tensor
    y = (p * p).sum()
    y.backward()
    assert p.grad.tolist() == [2.0, 2.0]


class _ArrayLike:
    def __array__(self, dtype=None, copy=None):
        return __import__("numpy").ones(2, dtype)


def test_foreign_tensors_raise_type_error_both_ways():
    """A torch tensor meeting an ember tensor: torch raises TypeError for a foreign array-like
    operand, and so does ember, naming both types; torch's side (``torch_t + ember_t``) ends
    in a TypeError too, never in the two ``__torch_function__`` calling each other."""
    with pytest.raises(TypeError):
        torch.add(torch.ones(2), _ArrayLike())        # the oracle: no conversion
    e, t = ember.ones(2), torch.ones(2)
    Logged = _logged(ember)
    ops = (lambda a, b: a == b, lambda a, b: a + b, lambda a, b: a < b, lambda a, b: a @ b,
           lambda a, b: a ** b, lambda a, b: a - b, lambda a, b: a & b)
    for x in (e, ember.ones(2).as_subclass(Logged)):
        for f in ops:
            for a, b in ((x, t), (t, x)):
                with pytest.raises(TypeError, match=r"ember.Tensor and torch.Tensor"):
                    f(a, b)
        with pytest.raises(TypeError, match=r"argument 2 must be ember.Tensor, not torch\."):
            ember.add(x, torch.nn.Parameter(t))
        with pytest.raises(TypeError, match=r"must hold ember.Tensors, not torch.Tensor"):
            ember.cat([x, t])
        for f in (lambda: torch.add(t, x), lambda: torch.sum(x), lambda: t.mul(x)):
            with pytest.raises(TypeError, match="ember|Logged"):
                f()
    with pytest.raises(TypeError, match=r"must be ember.Tensor, not torch.Tensor"):
        e.add_(t)
    for L in (ember, torch):        # other objects: Python's protocol, as torch
        with pytest.raises(TypeError, match="unsupported operand"):
            L.ones(2) + _ArrayLike()
        assert (L.ones(2) == None) is False     # noqa: E711
    assert ember.equal(e + ember.from_dlpack(t), ember.full((2,), 2.0))
