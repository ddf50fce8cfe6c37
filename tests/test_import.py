"""`import ember` is light: no torch, no optional extras, and fast."""
import os
import subprocess
import sys

OPTIONAL = ("torch", "onnx", "onnxruntime", "cupy", "mpi4py", "safetensors", "tqdm", "scipy",
            "numba", "matplotlib", "tensorboard", "google.protobuf")


def _loaded_after_import():
    code = "import sys, ember; print(','.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    return set(out.split(","))


def test_import_does_not_load_torch():
    assert "torch" not in _loaded_after_import()


def test_import_loads_no_optional_package():
    mods = _loaded_after_import()
    loaded = [m for m in OPTIONAL if m in mods]
    assert not loaded, f"import ember loaded optional packages: {loaded}"


def test_import_leaves_ml_dtypes_for_first_use():
    # (a tenth of the import time) bfloat16 and float8 load it the first time they are used
    assert "ml_dtypes" not in _loaded_after_import()
    out = _run("import sys, ember; d = ember.bfloat16; ember.zeros(2); ember.full((2,), 3.0); "
               "print('ml_dtypes' in sys.modules); "
               "x = ember.ones(2, dtype=d) * 1.5; print(x.dtype, x.tolist(), "
               "'ml_dtypes' in sys.modules, ember.finfo(ember.float8_e4m3fn).max)")
    assert out.splitlines() == ["False", "torch.bfloat16 [1.5, 1.5] True 448.0"]


def test_an_ml_dtypes_array_made_before_ember_uses_it_converts():
    out = _run("import ml_dtypes, numpy as np, ember; "
               "a = np.array([1.5, -2], ml_dtypes.float8_e5m2); t = ember.from_numpy(a); "
               "print(t.dtype, t.tolist(), ember.tensor(a.astype(ml_dtypes.bfloat16)).dtype)")
    assert out == "torch.float8_e5m2 [1.5, -2.0] torch.bfloat16"


def _run(code):
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_import_leaves_the_lazy_op_families_unloaded():
    from ember._ops import lazy
    from ember._ops.lazy import FAMILIES
    mods = _loaded_after_import()
    loaded = [f for f in FAMILIES if lazy.module_name(f) in mods]
    assert not loaded, f"import ember loaded lazy op families: {loaded}"
    # only the error samples of ops used numpy.random at import (~10% of the import time)
    assert "numpy.random" not in mods


def test_import_leaves_the_subpackages_for_first_use():
    # ember.nn, ember.func (and vmap's rules), ember.optim... load on first attribute access
    import ember
    mods = _loaded_after_import()
    loaded = [n for n in ember._SUBMODULES if f"ember.{n}" in mods]
    assert not loaded, f"import ember loaded: {loaded}"
    assert ember.func.vmap(ember.sin)(ember.zeros(2)).tolist() == [0.0, 0.0]


def test_lazy_index_is_current():
    # after adding an op to a lazy family, rewrite it:
    # python -c "from ember._ops import lazy; lazy.write_index()"
    code = ("import os; from ember._ops import lazy; text = lazy.index_source(lazy.build_index());"
            "path = os.path.join(os.path.dirname(lazy.__file__), '_lazy_index.py');"
            "print(text == open(path).read())")
    assert _run(code) == "True", "ember/_ops/_lazy_index.py is out of date: see ember/_ops/lazy.py"


def test_one_name_loads_its_family_only():
    code = """if 1:
        import sys, math, ember
        x = ember.tensor([0.5, 2.0])
        assert "lgamma" in dir(ember) and "lgamma_" in dir(ember.Tensor)  # listed, not loaded
        assert "ember._ops.special" not in sys.modules
        got = x.lgamma().tolist()                       # a Tensor method loads the family
        assert got == [math.lgamma(0.5), math.lgamma(2.0)] or max(
            abs(a - math.lgamma(b)) for a, b in zip(got, [0.5, 2.0])) < 1e-6, got
        assert "ember._ops.special" in sys.modules and "ember._ops.fft" not in sys.modules
        assert ember.lgamma.opdef.name == "lgamma" and ember.Tensor.lgamma_.__name__ == "lgamma_"
        y = x.clone(); y.digamma_(); assert y.tolist() == ember.digamma(x).tolist()
        assert hasattr(ember, "sinc") and hasattr(x, "logit") and not hasattr(x, "no_such_op")
        print(sorted(m[11:] for m in sys.modules if m[11:] in ("special", "bessel", "fft")))
    """
    assert _run(code) == "['special']"


def test_each_way_in_loads_the_op():
    code = """if 1:
        import sys, ember
        from ember._ops import registry
        a = ember.tensor([[2., 1.], [1., 3.]])
        assert ember.einsum("ij,ij->", a, a).item() == 15.0         # plain function
        assert registry.get("special_zeta").name == "special_zeta"  # the registry
        s = ember.sparse_coo_tensor([[0, 1], [1, 0]], [2., 3.], (2, 2))
        assert s.to_dense().tolist() == [[0., 2.], [3., 0.]]        # methods set by the module
        assert abs(a.svd()[1].sum().item() - 5.0) < 1e-5
        assert ember.special.i0(ember.tensor([0.])).item() == 1.0  # a namespace
        assert ember.fft.fft(ember.ones(4)).real.tolist() == [4., 0., 0., 0.]
        print("ok")
    """
    assert _run(code) == "ok"


def test_a_stale_stub_raises_attribute_error():
    from ember._ops import lazy

    class T:
        pass
    T.no_such_method = lazy._LazyMethod("special", "no_such_method")
    assert not hasattr(T(), "no_such_method")
    assert "no_such_method" not in T.__dict__
