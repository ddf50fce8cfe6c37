"""Thread counts (reaching the BLAS NumPy loaded), deterministic mode, matmul precision and
the torch.backends flags programs set."""
import ctypes
import importlib

import pytest

import ember
from ember import _config


@pytest.fixture
def restore_threads():
    n = ember.get_num_threads()
    yield
    ember.set_num_threads(n)


def test_set_num_threads_reaches_the_blas(restore_threads):
    blas = [(f, get) for f, _, get in _config._controls() if f != "omp"]
    for n in (1, 2):
        ember.set_num_threads(n)
        assert ember.get_num_threads() == n
        for _, get in blas:
            assert get() == n
    # NumPy's matmul still gives the same answer whichever the count
    a = ember.randn(64, 64)
    ember.set_num_threads(1)
    one = a @ a
    ember.set_num_threads(2)
    assert (one.numpy() == (a @ a).numpy()).all()


def test_blas_is_found_when_numpy_ships_openblas():
    import numpy as np
    cfg = np.show_config(mode="dicts")["Build Dependencies"]["blas"]["name"]
    if "openblas" not in cfg:
        pytest.skip(f"NumPy uses {cfg}")
    assert any(f == "openblas" for f, _, _ in _config._controls())
    assert all(isinstance(g, ctypes._CFuncPtr) for _, _, g in _config._controls())


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_set_num_threads_rejects_non_positive_integers(bad):
    with pytest.raises(RuntimeError, match="positive integer"):
        ember.set_num_threads(bad)
    with pytest.raises(RuntimeError, match="positive integer"):
        ember.set_num_interop_threads(bad)


def test_interop_threads_are_kept():
    ember.set_num_interop_threads(3)
    assert ember.get_num_interop_threads() == 3


def test_deterministic_mode():
    assert not ember.are_deterministic_algorithms_enabled()
    try:
        ember.use_deterministic_algorithms(True, warn_only=True)
        assert ember.are_deterministic_algorithms_enabled()
        assert ember.is_deterministic_algorithms_warn_only_enabled()
        assert ember.get_deterministic_debug_mode() == 1
        ember.set_deterministic_debug_mode("error")
        assert ember.get_deterministic_debug_mode() == 2
        assert not ember.is_deterministic_algorithms_warn_only_enabled()
        with pytest.raises(TypeError, match="mode"):
            ember.use_deterministic_algorithms(1)
        with pytest.raises(RuntimeError, match="debug_mode"):
            ember.set_deterministic_debug_mode("loud")
    finally:
        ember.use_deterministic_algorithms(False)
    assert ember.get_deterministic_debug_mode() == 0


def test_float32_matmul_precision():
    try:
        ember.set_float32_matmul_precision("medium")
        assert ember.get_float32_matmul_precision() == "medium"
        with pytest.raises(RuntimeError, match="precision"):
            ember.set_float32_matmul_precision("low")
    finally:
        ember.set_float32_matmul_precision("highest")


def test_backend_flags_are_plain_attributes():
    b = ember.backends
    assert (b.cudnn.enabled, b.cudnn.benchmark, b.cudnn.deterministic) == (True, False, False)
    b.cudnn.benchmark = True
    try:
        assert importlib.import_module("ember.backends.cudnn").benchmark is True
    finally:
        b.cudnn.benchmark = False
    with b.cudnn.flags(enabled=False, deterministic=True):
        assert not b.cudnn.enabled and b.cudnn.deterministic
    assert b.cudnn.enabled and not b.cudnn.deterministic
    assert b.cuda.matmul.allow_tf32 is False
    b.cuda.matmul.allow_tf32 = True
    b.cuda.matmul.allow_tf32 = False
    b.cuda.enable_flash_sdp(False)
    assert not b.cuda.flash_sdp_enabled()
    b.cuda.enable_flash_sdp(True)
    assert b.mkldnn.enabled and not b.mkldnn.is_available() and not b.cudnn.is_available()
    assert b.opt_einsum.enabled == b.opt_einsum.is_available()
    assert b.opt_einsum.strategy == ("auto" if b.opt_einsum.enabled else None)
    assert not b.mps.is_available()
    assert isinstance(b.mkl.is_available(), bool) and isinstance(b.openmp.is_available(), bool)


def test_torch_has_the_same_backend_flags():
    torch = pytest.importorskip("torch")
    for mod, names in {"cudnn": ("enabled", "benchmark", "deterministic", "allow_tf32"),
                       "mkldnn": ("enabled",), "opt_einsum": ("enabled", "strategy")}.items():
        for n in names:
            assert getattr(getattr(ember.backends, mod), n) == \
                getattr(getattr(torch.backends, mod), n), f"{mod}.{n}"
    assert ember.backends.cuda.matmul.allow_tf32 == torch.backends.cuda.matmul.allow_tf32
