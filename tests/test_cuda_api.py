"""ember.cuda answers a PyTorch script's questions about the GPU on any machine."""
import contextlib

import pytest

import ember

HAS_GPU = ember.cuda.is_available()


def test_queries_work_without_a_gpu():
    assert isinstance(ember.cuda.is_available(), bool)
    assert ember.cuda.device_count() == (ember.cuda.device_count() if HAS_GPU else 0)
    device = "cuda" if ember.cuda.is_available() else "cpu"
    assert ember.ones(2, device=device).device.type == device
    ember.cuda.manual_seed_all(3)         # (ignored without a GPU, as torch's)
    ember.cuda.manual_seed(3)
    ember.cuda.empty_cache()
    if not HAS_GPU:
        assert ember.cuda.memory_allocated() == ember.cuda.memory_reserved() == 0
        assert ember.cuda.max_memory_allocated() == 0 and ember.cuda.memory_stats() == {}
        assert not ember.cuda.is_bf16_supported()
        assert ember.cuda.get_rng_state_all() == [] and ember.cuda.default_generators == ()


@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU error")
def test_gpu_calls_raise_torchs_error_without_one():
    with pytest.raises(RuntimeError, match="Found no NVIDIA driver"):
        ember.cuda.current_device()
    for call in (ember.cuda.synchronize, ember.cuda.Stream, ember.cuda.Event,
                 ember.cuda.current_stream, ember.cuda.initial_seed, ember.cuda.get_rng_state,
                 ember.cuda.mem_get_info):
        with pytest.raises(RuntimeError, match="Found no NVIDIA driver"):
            call()


def test_cuda_amp_spellings():
    scaler = ember.cuda.amp.GradScaler(init_scale=8.0, enabled=HAS_GPU)
    assert scaler.is_enabled() == HAS_GPU
    if HAS_GPU:
        assert scaler.get_scale() == 8.0
    with pytest.warns(UserWarning) if not HAS_GPU else contextlib.nullcontext():
        with ember.cuda.amp.autocast():
            assert ember.is_autocast_enabled("cuda") == HAS_GPU


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU with CuPy")
def test_device_properties_and_memory():
    props = ember.cuda.get_device_properties(0)
    assert props.total_memory > 0 and ember.cuda.get_device_name(0) == props.name
    before = ember.cuda.memory_allocated()
    x = ember.ones(1 << 20, device="cuda")
    assert ember.cuda.memory_allocated() >= before + 4 * (1 << 20)
    with ember.cuda.device(0):
        ember.cuda.synchronize()
    assert ember.cuda.current_device() == 0
    del x


def test_accelerator_answers_as_torchs_does_without_a_gpu():
    import torch
    if HAS_GPU or torch.cuda.is_available():
        pytest.skip("checks the no-GPU answers")
    for lib in (ember, torch):
        assert lib.accelerator.is_available() is False and lib.accelerator.device_count() == 0
        assert lib.accelerator.current_accelerator(check_available=True) is None
        for call in (lib.accelerator.current_device_index, lib.accelerator.synchronize,
                     lib.accelerator.memory_allocated):
            with pytest.raises(RuntimeError, match="Cannot access accelerator device when "
                                                   "none is available."):
                call()


def test_accelerator_on_the_double():
    from cuda_double import cuda_double
    with cuda_double():
        acc = ember.accelerator
        assert acc.is_available() and acc.device_count() == 1
        assert acc.current_accelerator() == ember.device("cuda") and acc.current_device_idx() == 0
        with acc.device_index(0):
            x = ember.ones(256, device="cuda")
        assert acc.memory_allocated() >= 1024 and acc.max_memory_allocated() >= 1024
        assert acc.current_stream() == ember.cuda.default_stream()
        acc.set_device_index("cuda:0")
        acc.synchronize()
        assert acc.get_memory_info()[1] == ember.cuda.get_device_properties().total_memory
        del x
        acc.empty_cache()


def test_out_of_memory_error_is_torchs():
    import torch
    assert ember.OutOfMemoryError is ember.cuda.OutOfMemoryError
    assert torch.OutOfMemoryError is torch.cuda.OutOfMemoryError
    assert ember.OutOfMemoryError.__mro__[1:] == torch.OutOfMemoryError.__mro__[1:]
