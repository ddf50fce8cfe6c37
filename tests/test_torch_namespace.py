"""The rest of torch.*: in-place function forms, constants, legacy tensor types and typed
storages, empty_strided/frombuffer/scalar_tensor/range, and process flags, against torch."""
import math
import re
import warnings

import numpy as np
import pytest

import ember

torch = pytest.importorskip("torch")
warnings.filterwarnings("ignore", "TypedStorage is deprecated")
warnings.filterwarnings("ignore", "torch.range is deprecated")

X = np.array([[0.1, 0.25, 0.5], [0.7, 0.9, 0.35]])
# the arguments after ``input`` where an in-place function takes some (made with either lib)
ARGS = {
    "clamp_": lambda L: (0.2, 0.5), "clip_": lambda L: (0.2, 0.5),
    "clamp_max_": lambda L: (0.4,), "clamp_min_": lambda L: (0.4,), "fill_": lambda L: (2.5,),
    "ldexp_": lambda L: (L.tensor([[1, 2, 3], [0, -1, 2]]),),
    "xlogy_": lambda L: (L.tensor(X[::-1].copy()),), "logit_": lambda L: (1e-3,),
    "addmv_": lambda L: (L.tensor(X), L.tensor([1.0, 2.0, 3.0], dtype=L.float64)),
    "as_strided_": lambda L: ((3, 2), (1, 3)),
    "index_put_": lambda L: ((L.tensor([1, 0]),), L.tensor([5.0, 6.0, 7.0], dtype=L.float64)),
    "threshold_": lambda L: (0.3, -1.0),
    "resize_as_": lambda L: (L.zeros(3, 2),), "round_": lambda L: (),
    "gcd_": lambda L: (L.tensor([[4, 6, 9], [10, 15, 7]]),),
    "lcm_": lambda L: (L.tensor([[4, 6, 9], [10, 15, 7]]),),
}
INTEGER = {"gcd_", "lcm_"}
NOT_IN_EMBER = {}


def _torch_inplace_functions():
    return sorted(n for n in dir(torch) if n.endswith("_") and not n.startswith("_")
                  and callable(getattr(torch, n)))


def test_every_torch_inplace_function_is_there():
    names = _torch_inplace_functions()
    assert len(names) >= 70
    assert {n for n in names if not hasattr(ember, n)} == set(NOT_IN_EMBER)


@pytest.mark.parametrize("name", [n for n in _torch_inplace_functions() if n not in NOT_IN_EMBER
                                  and "dropout" not in n
                                  and n not in ("rrelu_", "detach_", "embedding_renorm_",
                                                "resize_as_sparse_")])  # (sparse: its own tests)
def test_inplace_function_as_torch(name):
    def run(L):
        x = L.tensor(np.array([[4, 6, 8], [5, 9, 14]]) if name in INTEGER else
                     X[:, 0] if name == "addmv_" else X)
        out = getattr(L, name)(x, *ARGS.get(name, lambda L: ())(L))
        assert out is x
        return x
    mine, theirs = run(ember), run(torch)
    assert mine.shape == theirs.shape and mine.dtype.name == str(theirs.dtype)[6:]
    np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-6, atol=1e-7)


def test_inplace_nn_forms_and_errors():
    for name, args in (("dropout_", (0.5, False)), ("alpha_dropout_", (0.5, False)),
                       ("feature_dropout_", (0.5, False)), ("rrelu_", (0.1, 0.3)),
                       ("feature_alpha_dropout_", (0.5, False))):
        mine, theirs = ember.tensor(X - 0.5), torch.tensor(X - 0.5)
        assert getattr(ember, name)(mine, *args) is mine
        getattr(torch, name)(theirs, *args)
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-6)
    x = ember.ones(2, 4, 3)
    ember.feature_dropout_(x, 0.5, True)      # whole channels zeroed or scaled by 2, in place
    assert set(np.unique(x.numpy())) <= {0.0, 2.0} and (x.numpy().std(-1) == 0).all()
    for name, args in (("celu_", (0.5,)), ("elu_", (0.5,)), ("hardtanh_", (-0.2, 0.3)),
                       ("leaky_relu_", (0.2,)), ("relu_", ()), ("rrelu_", (0.1, 0.3)),
                       ("selu_", ()), ("threshold_", (0.0, -9.0))):
        mine, theirs = ember.tensor(X - 0.5), torch.tensor(X - 0.5)
        assert getattr(ember.nn.functional, name)(mine, *args) is mine
        getattr(torch.nn.functional, name)(theirs, *args)
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-6, err_msg=name)
    w = np.array([[3.0, 4.0], [1.0, 0.0], [6.0, 8.0], [0.3, 0.4]])
    mine, theirs = ember.tensor(w), torch.tensor(w)
    assert ember.embedding_renorm_(mine, ember.tensor([[0, 2], [0, 3]]), 1.0, 2.0) is mine
    torch.embedding_renorm_(theirs, torch.tensor([[0, 2], [0, 3]]), 1.0, 2.0)
    np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-7)
    with pytest.raises(TypeError, match=re.escape(
            "abs_(): argument 'input' (position 1) must be Tensor, not int")):
        ember.abs_(3)


def test_constants():
    for n in ("pi", "e", "inf"):
        assert getattr(ember, n) == getattr(torch, n)
    assert math.isnan(ember.nan) and ember.newaxis is torch.newaxis is None
    assert ember.ones(2, 3)[:, ember.newaxis].shape == (2, 1, 3)


LEGACY = ["FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor", "ByteTensor",
          "CharTensor", "ShortTensor", "IntTensor", "LongTensor", "BoolTensor"]


@pytest.mark.parametrize("name", LEGACY)
def test_legacy_tensor_types(name):
    E, T = getattr(ember, name), getattr(torch, name)
    assert repr(E) == repr(T) and E.dtype.name == str(T.dtype)[6:] and E.is_cuda is False
    for args in ((2, 3), (ember.Size([4]),), ()):
        targs = tuple(torch.Size(a) if isinstance(a, ember.Size) else a for a in args)
        assert tuple(E(*args).shape) == tuple(T(*targs).shape)
    for data in ([[1, 0], [2, 3]], (2, 3), np.array([1.5, 0.0])):
        mine, theirs = E(data), T(data)
        assert mine.dtype.name == str(theirs.dtype)[6:] and mine.tolist() == theirs.tolist()
    assert isinstance(mine, E) and isinstance(theirs, T)
    assert isinstance(mine, ember.Tensor) and not issubclass(E, ember.Tensor)
    other = "LongTensor" if name != "LongTensor" else "IntTensor"
    assert not isinstance(mine, getattr(ember, other))
    assert E(mine) is not mine and E(mine).data_ptr() == mine.data_ptr()   # an alias
    assert mine.type() == theirs.type() == "torch." + name
    assert ember.ones(2).type("torch." + name).dtype is E.dtype
    assert ember.ones(2).type(E).dtype is E.dtype
    for bad in ("ab", 2.5):
        with pytest.raises(TypeError) as expected:
            T(bad)
        with pytest.raises(TypeError, match=re.escape(str(expected.value))):
            E(bad)


def test_tensor_type_conversions_and_errors():
    x, t = ember.tensor([1.5, 2.5]), torch.tensor([1.5, 2.5])
    assert x.type() == t.type() == "torch.FloatTensor"
    for target in ("torch.LongTensor", "torch.DoubleTensor"):
        assert x.type(target).tolist() == t.type(target).tolist()
    assert x.type(ember.int32).dtype is ember.int32
    with pytest.raises(ValueError, match=re.escape("invalid type: 'torch.Foo'")):
        x.type("torch.Foo")
    with pytest.raises(ValueError, match="invalid type"):
        t.type("torch.Foo")
    with pytest.raises(TypeError, match="expected FloatTensor"):
        ember.FloatTensor(ember.ones(2, dtype=ember.float64))
    assert not isinstance(ember.ones(2).to_sparse(), ember.FloatTensor)


def test_typename():
    for obj in (3, "s", [1], ember.ones(2).double()):
        tobj = torch.ones(2).double() if isinstance(obj, ember.Tensor) else obj
        assert ember.typename(obj) == torch.typename(tobj)
    assert ember.typename(ember.nn.Linear(1, 1)).endswith(".Linear")


def test_set_default_tensor_type():
    try:
        for st in (ember.DoubleTensor, "torch.DoubleTensor"):
            with pytest.warns(UserWarning, match="set_default_tensor_type\\(\\) is deprecated"):
                ember.set_default_tensor_type(st)
            assert ember.ones(1).dtype is ember.float64
            ember.set_default_dtype(ember.float32)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(TypeError, match="only floating-point types are supported"):
                ember.set_default_tensor_type(ember.IntTensor)
    finally:
        ember.set_default_dtype(ember.float32)


def test_typed_storages():
    x, t = ember.arange(4.0), torch.arange(4.0)
    s, ts = x.storage(), t.storage()
    assert isinstance(s, ember.TypedStorage) and isinstance(s, ember.FloatStorage)
    assert not isinstance(s, ember.DoubleStorage) and ember.is_storage(s)
    assert repr(s) == repr(ts) and s.type() == ts.type() == "torch.FloatStorage"
    assert (s.size(), len(s), s.nbytes(), s.element_size(), s.tolist()) == \
        (ts.size(), len(ts), ts.nbytes(), ts.element_size(), ts.tolist())
    s[0], ts[0] = 9, 9
    assert x.tolist() == t.tolist() == [9.0, 1.0, 2.0, 3.0]
    assert x[1:].storage().size() == 4 and s.data_ptr() == x.data_ptr()
    s.fill_(1)
    assert x.tolist() == [1.0] * 4 and list(s) == [1.0] * 4
    assert ember.FloatStorage().size() == 0 and ember.FloatStorage(3).size() == 3
    assert ember.TypedStorage([1, 2], dtype=ember.int64).tolist() == [1, 2]
    assert ember.LongStorage([1, 2]).dtype is ember.int64
    assert ember.tensor(ember.FloatStorage([1, 2])).tolist() == [1.0, 2.0]
    assert ember.is_storage(x.untyped_storage()) and not ember.is_storage(x)
    for bad, exc in ((lambda S: S[10], IndexError), (lambda S: S[1:2], RuntimeError)):
        with pytest.raises(exc) as expected:
            bad(ts)
        with pytest.raises(exc, match=re.escape(str(expected.value))):
            bad(s)
    with pytest.raises(RuntimeError, match="Keyword argument 'dtype' cannot be specified"):
        ember.FloatStorage(2, dtype=ember.int64)
    with pytest.raises(TypeError, match="invalid data type 'str'"):
        ember.TypedStorage("a")


def test_typed_storage_warns_once_unless_warn_always():
    from ember import _storage
    assert not ember.is_warn_always_enabled()
    _storage._warned[0] = False
    with pytest.warns(UserWarning, match="TypedStorage is deprecated"):
        ember.ones(1).storage()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ember.ones(1).storage()              # once per process
        ember.set_warn_always(True)
        try:
            with pytest.raises(UserWarning, match="TypedStorage is deprecated"):
                ember.ones(1).storage()
        finally:
            ember.set_warn_always(False)


def _same_error(fn):
    with pytest.raises(Exception) as expected:
        fn(torch)
    with pytest.raises(type(expected.value), match=re.escape(str(expected.value))):
        fn(ember)


def test_creation_functions_as_torch():
    for call in (lambda L: L.range(0, 3), lambda L: L.range(1, 2, 0.5),
                 lambda L: L.range(5, 1, -2), lambda L: L.range(0, 3, dtype=L.int64),
                 lambda L: L.range(0, 1, 0.3), lambda L: L.scalar_tensor(3),
                 lambda L: L.scalar_tensor(True), lambda L: L.scalar_tensor(2, dtype=L.int32),
                 lambda L: L.frombuffer(bytearray(b"\x01\x00\x02\x00"), dtype=L.int16),
                 lambda L: L.frombuffer(bytearray(np.arange(4, dtype=np.float32).tobytes()),
                                        dtype=L.float32, count=2, offset=4)):
        mine, theirs = call(ember), call(torch)
        assert mine.dtype.name == str(theirs.dtype)[6:] and mine.tolist() == theirs.tolist()
    e, te = ember.empty_strided((2, 3), (1, 2)), torch.empty_strided((2, 3), (1, 2))
    assert e.stride() == te.stride() and e.untyped_storage().nbytes() == \
        te.untyped_storage().nbytes() == 24
    assert ember.empty_strided((0, 3), (3, 1)).untyped_storage().nbytes() == 0
    assert ember.empty_strided((2,), (1,), dtype=ember.float64, requires_grad=True).requires_grad
    b = bytearray(8)
    t = ember.frombuffer(b, dtype=ember.float32)
    t[1] = 1.0
    assert b[4:] == bytearray(np.float32(1).tobytes())      # shares the buffer's memory
    for bad in (lambda L: L.range(3), lambda L: L.range(0, 3, 0), lambda L: L.range(3, 0),
                lambda L: L.scalar_tensor(L.ones(1)), lambda L: L.scalar_tensor(1 + 2j),
                lambda L: L.empty_strided((2, 3), (1,)),
                lambda L: L.empty_strided((2, 3), (1, -1)),
                lambda L: L.frombuffer(bytearray(3), dtype=L.int16),
                lambda L: L.frombuffer(bytearray(0), dtype=L.int16),
                lambda L: L.frombuffer(bytearray(8), dtype=L.float32, offset=9),
                lambda L: L.frombuffer(bytearray(8), dtype=L.float32, count=3),
                lambda L: L.frombuffer([1, 2], dtype=L.uint8)):
        _same_error(bad)


def test_fill_empty_permuted_from_file(tmp_path):
    for call in (lambda L: L.fill(L.ones(2, dtype=L.int32), 3.7),
                 lambda L: L.fill(L.ones(2), L.tensor(2.0))):
        mine, theirs = call(ember), call(torch)
        assert mine.dtype.name == str(theirs.dtype)[6:] and mine.tolist() == theirs.tolist()
    x = ember.ones(2)
    assert ember.fill(x, 5.0) is not x and x.tolist() == [1.0, 1.0]
    _same_error(lambda L: L.fill(L.ones(2), L.ones(2)))
    for size, order in (((2, 3, 4), (0, 2, 1)), ((2, 3, 4, 5), (0, 2, 3, 1)), ((3,), (0,))):
        assert ember.empty_permuted(size, order).stride() == \
            torch.empty_permuted(size, order).stride()
    _same_error(lambda L: L.empty_permuted((2, 3), (0, 0)))
    _same_error(lambda L: L.empty_permuted((2, 3), (0,)))
    assert ember.legacy_contiguous_format is ember.contiguous_format
    path = str(tmp_path / "data.bin")
    np.arange(6, dtype=np.float32).tofile(path)
    for kw in ({"size": 6, "dtype": "float32"}, {"size": 3, "dtype": "float64"}, {}):
        kw_e = {k: getattr(ember, v) if k == "dtype" else v for k, v in kw.items()}
        kw_t = {k: getattr(torch, v) if k == "dtype" else v for k, v in kw.items()}
        mine, theirs = ember.from_file(path, **kw_e), torch.from_file(path, **kw_t)
        assert mine.dtype.name == str(theirs.dtype)[6:] and mine.tolist() == theirs.tolist()
    _same_error(lambda L: L.from_file(path, size=7, dtype=L.float32))
    copy = ember.from_file(path, shared=False, size=6)
    copy[0] = 5.0
    assert np.fromfile(path, dtype=np.float32)[0] == 0.0
    mapped = ember.from_file(path, shared=True, size=6)
    mapped[0] = 100.0
    assert np.fromfile(path, dtype=np.float32)[0] == 100.0   # writes go to the file


def test_process_flags():
    try:
        for enabled, check_nan in ((True, False), (True, True), (False, True)):
            ember.set_anomaly_enabled(enabled, check_nan)
            torch.set_anomaly_enabled(enabled, check_nan)
            assert (ember.is_anomaly_enabled(), ember.is_anomaly_check_nan_enabled()) == \
                (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled())
    finally:
        ember.set_anomaly_enabled(False)
        torch.set_anomaly_enabled(False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert ember.get_autocast_cpu_dtype() is ember.bfloat16
        assert ember.get_autocast_gpu_dtype() is ember.float16
        assert ember.is_autocast_cpu_enabled() is torch.is_autocast_cpu_enabled() is False
        ember.set_autocast_cpu_dtype(ember.float16)
        assert ember.get_autocast_dtype("cpu") is ember.float16
        ember.set_autocast_cpu_dtype(ember.bfloat16)
        ember.set_autocast_cpu_enabled(True)
        assert ember.is_autocast_enabled("cpu")
        ember.set_autocast_cpu_enabled(False)
        ember.set_autocast_gpu_dtype(ember.bfloat16)
        assert ember.get_autocast_dtype("cuda") is ember.bfloat16
        ember.set_autocast_gpu_dtype(ember.float16)
    with pytest.warns(DeprecationWarning, match=re.escape(
            "torch.get_autocast_cpu_dtype() is deprecated. Please use "
            "torch.get_autocast_dtype('cpu') instead.")):
        ember.get_autocast_cpu_dtype()
    assert ember.autocast_increment_nesting() == 1 and ember.autocast_increment_nesting() == 2
    assert ember.autocast_decrement_nesting() == 1 and ember.autocast_decrement_nesting() == 0
    assert ember.GradScaler is ember.amp.GradScaler


def test_cpu_device_module():
    import torch.cpu as tcpu
    assert ember.cpu.__all__ == tcpu.__all__
    for fn in ("is_available", "is_initialized", "device_count", "current_device"):
        assert getattr(ember.cpu, fn)() == getattr(tcpu, fn)()
    assert ember.cpu.synchronize() is None and ember.cpu.set_device("cpu") is None
    caps, tcaps = ember.cpu.get_capabilities(), tcpu.get_capabilities()
    shared = set(caps) & set(tcaps)
    assert {"avx2", "avx512_f", "sse4_2", "fma3", "architecture", "num_logical_cores"} <= shared
    assert {k: caps[k] for k in shared} == {k: tcaps[k] for k in shared}
    s, e = ember.cpu.Stream(), ember.cpu.Event()
    assert e.query() is True and e.record(s) is None and s.wait_event(e) is None
    default = ember.cpu.current_stream()
    with ember.cpu.stream(s):
        assert ember.cpu.current_stream() is s
        with ember.cpu.stream(None):
            assert ember.cpu.current_stream() is s
    assert ember.cpu.current_stream() is default
    for dev in ("cpu", ember.device("cpu"), None, "cuda:0"):
        tdev = torch.device(str(dev)) if isinstance(dev, ember.device) else dev
        assert ember.get_device_module(dev).__name__ == \
            torch.get_device_module(tdev).__name__.replace("torch", "ember")
    _same_error(lambda L: L.get_device_module(3))
    _same_error(lambda L: L.get_device_module("meta"))


def test_autograd_variable():
    from ember.autograd import Variable
    t = ember.ones(2, requires_grad=True) * 2
    v = Variable(t)
    assert isinstance(t, Variable) and isinstance(v, Variable) and not isinstance(3, Variable)
    assert v is not t and v.data_ptr() == t.data_ptr() and v.grad_fn is None
    assert not v.requires_grad and Variable(t, requires_grad=True).requires_grad
    assert Variable().shape == (0,)
    with pytest.warns(UserWarning, match="volatile was removed and now has no effect"):
        Variable(t, volatile=True)
    _same_error(lambda L: L.autograd.Variable([1]))
    _same_error(lambda L: L.autograd.variable(1))


@pytest.mark.parametrize("old,args", [
    ("uniform", (-1.0, 1.0)), ("normal", (0.0, 1.0)), ("constant", (0.5,)), ("eye", ()),
    ("dirac", ()), ("xavier_uniform", ()), ("xavier_normal", ()), ("kaiming_uniform", ()),
    ("kaiming_normal", ()), ("orthogonal", ()), ("sparse", (0.5,))])
def test_deprecated_nn_init_names(old, args):
    shape = (3, 3, 3) if old == "dirac" else (4, 3)
    w = ember.empty(*shape)
    with pytest.warns(FutureWarning, match=f"`nn.init.{old}` is now deprecated in favor of "
                                           f"`nn.init.{old}_`"):
        assert getattr(ember.nn.init, old)(w, *args) is w
    if old in ("constant", "eye", "dirac"):       # deterministic: the same values as torch's
        tw = torch.empty(*shape)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            getattr(torch.nn.init, old)(tw, *args)
        assert w.tolist() == tw.tolist()


def test_removable_handle_as_torch():
    import pickle
    from collections import OrderedDict

    from ember.utils.hooks import RemovableHandle, unserializable_hook, warn_if_has_hooks
    hooks, extra = OrderedDict(), OrderedDict()
    h = RemovableHandle(hooks, extra_dict=extra)
    hooks[h.id] = extra[h.id] = print
    with h:
        pass
    assert hooks == extra == {}
    with pytest.raises(TypeError, match="cannot create weak reference to 'dict' object"):
        RemovableHandle({})                 # (as torch's: hook dicts are OrderedDicts)
    h2 = RemovableHandle(hooks, extra_dict=[extra, OrderedDict()])
    assert h2.id == h.id + 1 and len(h2.extra_dict_ref) == 2
    state = pickle.loads(pickle.dumps((hooks, h2)))
    assert state[1].hooks_dict_ref() is state[0] and state[1].id == h2.id
    # module and optimizer hooks return it, as in torch
    m = ember.nn.Linear(2, 2)
    handle = m.register_forward_hook(lambda *a: None)
    assert isinstance(handle, RemovableHandle)
    assert isinstance(torch.nn.Linear(2, 2).register_forward_hook(lambda *a: None),
                      torch.utils.hooks.RemovableHandle)
    handle.remove()
    assert not m._forward_hooks
    t = ember.ones(2, requires_grad=True)
    t.register_hook(lambda g: g)
    with pytest.warns(UserWarning, match="backward hook .* on tensor will not be serialized"):
        warn_if_has_hooks(t)
    u = ember.ones(2, requires_grad=True) * 2
    u.register_hook(unserializable_hook(lambda g: g))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_has_hooks(u)
        warn_if_has_hooks(ember.ones(2))


@pytest.mark.parametrize("name", [n for n in LEGACY if n != "BoolTensor"])
def test_legacy_sparse_types(name):
    E, T = getattr(ember.sparse, name), getattr(torch.sparse, name)
    assert repr(E) == repr(T) and not hasattr(torch.sparse, "BoolTensor")
    i, v = [[0, 1, 1], [2, 0, 1]], [1, 2, 3]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mine = E(ember.tensor(i), ember.tensor(v, dtype=E.dtype), ember.Size([2, 3]))
        theirs = T(torch.tensor(i), torch.tensor(v, dtype=T.dtype), torch.Size([2, 3]))
        assert mine.to_dense().tolist() == theirs.to_dense().tolist()
        assert isinstance(mine, E) and isinstance(theirs, T)
        assert not isinstance(mine, getattr(ember, name)) and not isinstance(mine.to_dense(), E)
        assert mine.type() == theirs.type() == "torch.sparse." + name
        for args in ((2, 3), (ember.Size([4]),)):
            targs = tuple(torch.Size(a) if isinstance(a, ember.Size) else a for a in args)
            e, t = E(*args), T(*targs)
            assert tuple(e.shape) == tuple(t.shape) and e.is_sparse and t.is_sparse
            assert e.dtype.name == str(t.dtype)[6:]
    # values keep their dtype, as torch's
    assert ember.sparse.FloatTensor(ember.tensor(i), ember.tensor(v)).dtype is ember.int64


@pytest.mark.parametrize("name", LEGACY)
def test_legacy_cuda_types(name):
    E, T = getattr(ember.cuda, name), getattr(torch.cuda, name)
    assert repr(E) == repr(T) and E.is_cuda and E.dtype.name == str(T.dtype)[6:]
    x = ember.ones(2, dtype=E.dtype)
    assert not isinstance(x, E) and isinstance(x, getattr(ember, name))
    if ember.cuda.is_available():
        y = E(2, 3)
        assert y.is_cuda and isinstance(y, E) and y.type() == "torch.cuda." + name
        assert x.type("torch.cuda." + name).is_cuda


def test_factories_take_size_keyword():
    """torch's parser takes a factory's size as ``size=``: same shape, dtype and (seeded)
    values as the positional call."""
    calls = (lambda L: L.zeros(size=(2, 3)), lambda L: L.ones(size=[2, 3], dtype=L.int32),
             lambda L: L.empty(size=L.Size([2, 0])), lambda L: L.zeros(size=()),
             lambda L: L.full(size=(2,), fill_value=1.5), lambda L: L.rand(size=(2, 3)),
             lambda L: L.randn(size=(3,), dtype=L.float64), lambda L: L.randint(0, 5, size=(3,)),
             lambda L: L.randint(5, size=(2, 2)), lambda L: L.randint(high=5, size=(2,)),
             lambda L: L.normal(0.0, 1.0, size=(2,)), lambda L: L.rand(size=(2,), generator=None),
             lambda L: L.zeros(size=(2,), out=L.empty(0)),
             lambda L: L.empty_strided(size=(2, 3), stride=(3, 1)).zero_(),
             lambda L: L.ones(1).new_zeros(size=(2,)), lambda L: L.ones(1).new_empty(size=(0,)),
             lambda L: L.ones(1).new_full(size=(2,), fill_value=3))
    for call in calls:
        torch.manual_seed(0), ember.manual_seed(0)
        mine, theirs = call(ember), call(torch)
        assert (mine.dtype.name, mine.shape, mine.tolist()) == \
            (str(theirs.dtype)[6:], theirs.shape, theirs.tolist())
    for bad in (lambda L: L.zeros(size=2), lambda L: L.rand(size=(-1,)),
                lambda L: L.ones(1).new_zeros(2, size=(2,))):
        _same_error(bad)
    with pytest.raises(TypeError, match="invalid combination"):
        torch.rand(2, size=(2,))
    with pytest.raises(TypeError, match="multiple values for argument 'size'"):
        ember.rand(2, size=(2,))
