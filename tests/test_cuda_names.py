"""The rest of ``torch.cuda``'s names on ember: CUDA graphs, memory pools and allocators,
typed storages, streams from elsewhere, NVML queries, NVTX, NCCL, the jiterator, runtime
queries.

Without a GPU ember answers as torch's CUDA build does on a machine without one (compared
with torch 2.13 where torch's CPU build answers the same); the GPU paths run on the cuda TEST
DOUBLE (tests/cuda_double.py: CuPy modelled on NumPy, including stream capture and graph
replay) on every run, and on CuPy itself with ``-m cuda`` (the ``cuda`` fixture's ``gpu``
case, and the tests marked ``cuda``)."""
import ctypes
import gc
import re
import shutil
import subprocess
import sys
import types
import warnings

import numpy as np
import pytest

import ember
from cuda_double import cuda, cuda_double  # noqa: F401  (the fixture)

try:
    import torch            # (the oracle; a GPU machine may lack it: those tests skip there)
except ImportError:
    torch = None
HAS_GPU = ember.cuda.is_available()
needs_torch = pytest.mark.skipif(torch is None, reason="compares with torch")
no_gpu = pytest.mark.skipif(HAS_GPU or torch is None or torch.cuda.is_available(),
                            reason="the no-GPU answers, compared with torch's")
NO_DRIVER = "Found no NVIDIA driver|needs CuPy"      # (CuPy installed, or not)
EC, TC = ember.cuda, torch and torch.cuda


# ---- without a GPU --------------------------------------------------------------------------
@no_gpu
def test_queries_answer_as_torchs_without_a_gpu():
    for name in ("get_arch_list", "get_gencode_flags", "is_initialized", "is_tf32_supported",
                 "host_memory_stats"):
        assert getattr(EC, name)() == getattr(TC, name)(), name
    assert (EC.has_half, EC.has_magma) == (TC.has_half, TC.has_magma) == (True, False)
    assert (EC.cudaStatus.SUCCESS, EC.cudaStatus.ERROR_NOT_READY) == (0, 34)
    for name in ("CudaError", "DeferredCudaCallError"):
        assert [c.__name__ for c in getattr(EC, name).__mro__] == \
            [c.__name__ for c in getattr(TC, name).__mro__]
    for name in ("memory_cached", "max_memory_cached"):
        with pytest.warns(FutureWarning, match="has been renamed to") as w:
            assert getattr(EC, name)() == 0
        with pytest.warns(FutureWarning) as wt:
            getattr(TC, name)()
        assert str(w[0].message) == str(wt[0].message)
    assert EC.caching_allocator_enable(False) is None and EC.caching_allocator_enable() is None
    assert EC.is_current_stream_capturing() is False     # (torch's CUDA build: no context)
    assert EC.memory_snapshot() == []
    EC.check_error(0)
    with EC.device_of(ember.ones(2)):                    # a cpu tensor: a no-op
        pass
    assert sorted(n for n in dir(EC.sparse) if n.endswith("Tensor")) == \
        sorted(n for n in dir(TC.sparse) if n.endswith("Tensor"))
    assert ember.profiler.kineto_available() is False    # (no Kineto in ember)
    assert {k: int(v) for k, v in ember.profiler.DeviceType.__members__.items()} == \
        {k: int(v) for k, v in torch.profiler.DeviceType.__members__.items()}


@no_gpu
def test_gpu_calls_raise_the_no_gpu_error():
    calls = [EC.init, EC.cudart, EC.current_blas_handle, EC.current_solver_handle,
             EC.ipc_collect, EC.get_sync_debug_mode, lambda: EC.set_sync_debug_mode(1),
             lambda: EC.can_device_access_peer(0, 1), lambda: EC.caching_allocator_alloc(8),
             EC.MemPool, EC.CUDAGraph, lambda: EC.ExternalStream(0),
             lambda: EC.get_stream_from_external(0), EC.graph_pool_handle,
             lambda: EC.FloatStorage(2), EC.get_allocator_backend]
    for call in calls:
        with pytest.raises(RuntimeError, match=NO_DRIVER):
            call()
    # the jiterator parses without a GPU and refuses to run, with torch's error
    code = "template <typename T> T my_kernel(T x, T y, T alpha) { return -x + alpha * y; }"
    for lib in (ember, torch):
        fn = lib.cuda.jiterator._create_jit_fn(code, alpha=1.0)
        with pytest.raises(AssertionError, match="Jiterator is only supported on CUDA and ROCm "
                                                 "GPUs, none are available."):
            fn(lib.ones(2), lib.ones(2))
    with pytest.raises(Exception, match="Couldn't parse code"):
        EC.jiterator._create_jit_fn("int f(int x) { return x; }")
    for lib in (ember, torch):
        with pytest.warns(UserWarning):
            assert lib.cuda.nccl.is_available([lib.ones(2)]) is False


@needs_torch
def test_nvml_queries_without_nvml_raise_torchs_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)        # (import pynvml fails)
    for name in ("utilization", "temperature", "power_draw", "clock_rate",
                 "device_memory_used", "memory_usage"):
        for lib in (EC, TC):
            with pytest.raises(ModuleNotFoundError, match="nvidia-ml-py does not seem to be "
                                                          "installed or it can't be imported."):
                getattr(lib, name)()
    assert EC.list_gpu_processes() == TC.list_gpu_processes() == \
        "pynvml module not found, please install nvidia-ml-py"


def test_cuda_errors_and_check_error():
    e = EC.CudaError(2)
    assert isinstance(e, RuntimeError) and e.code == 2 and str(e).endswith(" (2)")
    with pytest.raises(EC.CudaError, match=r"\(1\)"):
        EC.check_error(1)
    with cuda_double():         # CuPy's runtime names the code
        assert str(EC.CudaError(2)) == "out of memory (2)"
        assert EC.cudart().cudaGetErrorString(1) == "invalid argument"


@needs_torch
def test_legacy_cuda_storage_types():
    names = sorted(n for n in dir(TC) if n.endswith("Storage"))
    for n in names:
        cls = getattr(EC, n)
        assert repr(cls) == repr(getattr(TC, n)) and cls.dtype == getattr(ember, n).dtype
        assert cls is not getattr(ember, n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cpu = ember.FloatStorage(2)
        assert not isinstance(cpu, EC.FloatStorage) and isinstance(cpu, ember.FloatStorage)
        assert not isinstance(torch.FloatStorage(2), TC.FloatStorage)
        with pytest.raises(RuntimeError, match="Device of 'wrap_storage' must be cuda"):
            EC.FloatStorage(wrap_storage=ember.ones(2).untyped_storage())


def test_cuda_storages_on_the_gpu(cuda):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = EC.FloatStorage(3)
        assert s.device == ember.device("cuda:0") and s.is_cuda and s.size() == 3
        assert s.type() == "torch.cuda.FloatStorage" and isinstance(s, EC.FloatStorage)
        assert not isinstance(s, ember.FloatStorage) and not isinstance(s, EC.DoubleStorage)
        d = EC.LongStorage([1, 2, 3])
        assert d.tolist() == [1, 2, 3] and d[-1] == 3 and d.dtype is ember.int64
        x = ember.arange(4.0, device="cuda")
        st = x.storage()
        assert isinstance(st, EC.FloatStorage)
        st[1] = 10.0                        # writes the tensor's GPU memory
        assert x.cpu().tolist() == [0.0, 10.0, 2.0, 3.0] and st[1] == 10.0
        st.fill_(7)
        assert x.cpu().tolist() == [7.0] * 4
        w = EC.HalfStorage(wrap_storage=ember.ones(2, device="cuda").untyped_storage())
        assert w.size() == 4 and w.is_cuda
        with pytest.raises(TypeError, match="can't convert a cuda storage"):
            np.asarray(st)


# ---- runtime queries ------------------------------------------------------------------------
def test_runtime_queries(cuda):
    EC.init()
    assert EC.is_initialized() and EC.has_half
    assert EC.can_device_access_peer(0, 0) in (True, False)
    with pytest.raises(AssertionError, match="Invalid peer device id"):
        EC.can_device_access_peer(0, EC.device_count())
    with pytest.raises(AssertionError, match="Invalid device id"):
        EC.can_device_access_peer(-1, 0)
    archs = EC.get_arch_list()
    assert archs and all(a.startswith("sm_") for a in archs)
    # torch's formula, over ember's list
    assert EC.get_gencode_flags() == " ".join(
        f"-gencode compute=compute_{a},code={k}_{a}" for k, a in (x.split("_") for x in archs))
    assert isinstance(EC.current_blas_handle(), int) and EC.current_blas_handle() != 0
    assert isinstance(EC.current_solver_handle(), int)
    assert EC.is_tf32_supported() == (EC.get_device_capability() >= (8, 0))
    rt = EC.cudart()
    assert rt.cudaProfilerStart() == 0 and rt.cudaProfilerStop() == 0
    assert rt.cudaMemGetInfo(0)[1] == EC.mem_get_info(0)[1]
    with EC.profiler.profile():
        (ember.ones(8, device="cuda") * 2).sum()
    EC.ipc_collect()
    x = ember.ones(2, device="cuda")
    with EC.device_of(x):
        assert EC.current_device() == 0
    with EC.device_of(x.untyped_storage()):
        pass


def test_sync_debug_mode_flags_copies_to_the_host(cuda):
    x = ember.ones(3, device="cuda")
    assert EC.get_sync_debug_mode() == 0
    try:
        EC.set_sync_debug_mode("warn")
        assert EC.get_sync_debug_mode() == 1
        with pytest.warns(UserWarning, match="called a synchronizing CUDA operation"):
            x.sum().item()
        EC.set_sync_debug_mode(2)
        with pytest.raises(RuntimeError, match="called a synchronizing CUDA operation"):
            x.cpu()
        y = x * 2                           # work that does not wait is allowed
        with pytest.raises(RuntimeError, match="invalid value of debug_mode"):
            EC.set_sync_debug_mode("loud")
    finally:
        EC.set_sync_debug_mode("default")
    assert y.cpu().tolist() == [2.0] * 3


def test_index_checks_run_on_the_device(cuda, monkeypatch):
    """gather, index_select, embedding, scatter, index_add, index_copy, take_along_dim on cuda
    check their indices without waiting for the GPU; an index out of range raises torch's
    CPU message as a device-side assert at the next copy to the host or synchronize."""
    import cuda_double
    reads = []
    if cuda == "double":            # (each call of the double that waits for the GPU)
        monkeypatch.setattr(cuda_double, "_not_capturing", lambda: reads.append(1))

    def on(*v):
        return [ember.tensor(a, device="cuda") for a in v]
    x, w = ember.arange(12.0).reshape(3, 4).cuda(), ember.ones(5, 2).cuda()
    i1, i2, i3, i4, i5, i6 = on([[0, 3]] * 3, [2, 0], [1], [[2, 0, 1, 0]], [[3], [0], [1]], [[2]])
    one = ember.ones(1, 1).cuda()
    reads.clear()
    outs = [ember.gather(x, 1, i1), ember.index_select(x, 0, i2), ember.index_select(x, 1, i3),
            ember.nn.functional.embedding(i2, w), x.scatter(0, i4, 1.0),
            x.scatter_add(1, i5, one.expand(3, 1)), x[0].index_add(0, i3, one[0]),
            x.index_copy(0, i3, one.expand(1, 4)), ember.take_along_dim(x, i6, 0)]
    assert reads == []
    EC.synchronize()
    cpu = [ember.gather(x.cpu(), 1, i1.cpu()), ember.index_select(x.cpu(), 0, i2.cpu())]
    assert [o.cpu().tolist() for o in outs[:2]] == [c.tolist() for c in cpu]
    bad = (lambda L, d: L.gather(x.to(d), 1, L.tensor([[0, 4]] * 3, device=d)),
           lambda L, d: L.index_select(x.to(d), 0, L.tensor([3], device=d)),
           lambda L, d: L.index_select(x.to(d), 1, L.tensor([-1], device=d)),
           lambda L, d: L.nn.functional.embedding(L.tensor([0, 7, -1], device=d), w.to(d)),
           lambda L, d: x.to(d).scatter(0, L.tensor([[3, 0, 1, 0]], device=d), 1.0),
           lambda L, d: x.to(d).scatter_add(1, L.tensor([[0], [-1], [0]], device=d), x.to(d)),
           lambda L, d: x[0].to(d).index_add(0, L.tensor([4], device=d), x[0, :1].to(d)),
           lambda L, d: x.to(d).index_copy(0, L.tensor([3], device=d), x[:1].to(d)),
           lambda L, d: L.take_along_dim(x.to(d), L.tensor([[-4]], device=d), 0))
    for call in bad:
        with pytest.raises(Exception) as on_cpu:
            call(ember, "cpu")
        out = call(ember, "cuda")               # (CuPy wraps the index around meanwhile)
        with pytest.raises(RuntimeError, match="CUDA error: device-side assert triggered: " +
                           re.escape(str(on_cpu.value))):
            out.cpu()
        assert out.cpu().shape == out.shape     # reported once
    call(ember, "cuda")
    with pytest.raises(RuntimeError, match="device-side assert triggered: index -4 is out"):
        EC.synchronize()


# ---- NVML -----------------------------------------------------------------------------------
def _fake_pynvml(calls):
    """TEST DOUBLE of NVML's bindings: two GPUs with fixed readings, recording each call."""
    nv = types.ModuleType("pynvml")

    class NVMLError_DriverNotLoaded(Exception):
        pass

    def rec(name, value):
        def f(*args):
            calls.append((name,) + args)
            return value(*args) if callable(value) else value
        return f
    nv.NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    nv.nvmlInit = rec("init", None)
    nv.nvmlDeviceGetCount = rec("count", 2)
    nv.nvmlDeviceGetHandleByIndex = rec("handle", lambda i: f"h{i}")
    nv.nvmlDeviceGetUUID = rec("uuid", lambda h: f"GPU-{h}-uuid".encode())
    nv.nvmlDeviceGetUtilizationRates = rec("util", types.SimpleNamespace(gpu=37, memory=12))
    nv.nvmlDeviceGetMemoryInfo = rec("mem", types.SimpleNamespace(used=123 << 20))
    nv.nvmlDeviceGetTemperature = rec("temp", 61)
    nv.nvmlDeviceGetPowerUsage = rec("power", 71500)
    nv.nvmlDeviceGetClockInfo = rec("clock", 1980)
    nv.nvmlDeviceGetComputeRunningProcesses = rec("procs", [
        types.SimpleNamespace(pid=4242, usedGpuMemory=5 << 20)])
    return nv


def test_nvml_queries_read_nvml(cuda, monkeypatch):
    if cuda == "gpu":
        pytest.skip("the NVML double stands in for a GPU's NVML (test_nvml_on_a_gpu is real)")
    calls = []
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(calls))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert (EC.utilization(), EC.memory_usage(), EC.temperature(), EC.power_draw(),
            EC.clock_rate(), EC.device_memory_used()) == (37, 12, 61, 71500, 1980, 123 << 20)
    assert ("temp", "h0", 0) in calls and ("clock", "h0", 1) in calls   # die sensor, SM clock
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")      # cuda:0 is NVML's GPU 1
    calls.clear()
    EC.utilization()
    assert ("handle", 1) in calls
    assert EC.list_gpu_processes() == "GPU:1\nprocess       4242 uses        5.000 MB GPU memory"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-h1")  # by UUID prefix
    calls.clear()
    EC.temperature()
    assert ("handle", 1) in calls[-2:]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    EC.temperature()


@pytest.mark.cuda
def test_nvml_on_a_gpu():
    pytest.importorskip("pynvml")
    assert 0 <= EC.utilization() <= 100 and 0 <= EC.memory_usage() <= 100
    assert 0 < EC.temperature() < 120 and EC.power_draw() > 0 and EC.clock_rate() > 0
    x = ember.ones(1 << 20, device="cuda")
    assert EC.device_memory_used() >= x.nbytes
    assert EC.list_gpu_processes().startswith("GPU:")


# ---- streams from elsewhere -----------------------------------------------------------------
def test_external_streams(cuda):
    import cupy
    s = EC.Stream()
    ext = EC.ExternalStream(s.cuda_stream)
    assert ext == s and ext.device == s.device and isinstance(ext, EC.Stream)
    assert s.__cuda_stream__() == (0, s.cuda_stream)
    same = EC.get_stream_from_external(s.cuda_stream, device=0)
    assert same == s
    with EC.stream(ext):
        assert cupy.cuda.get_current_stream().ptr == s.cuda_stream
        y = ember.ones(4, device="cuda") + 1
    ext.synchronize()
    assert y.cpu().tolist() == [2.0] * 4 and EC.ExternalStream(0) == EC.default_stream()


# ---- memory pools and allocators ------------------------------------------------------------
def test_mem_pool_serves_allocations_in_its_block(cuda):
    gc.collect()        # (an earlier test's tensors in cycles would be freed mid-test)
    EC.empty_cache()
    base = EC.memory_allocated()
    pool = EC.MemPool()
    assert pool.id[0] == 0 and pool.allocator is None and pool.use_count() == 1
    with EC.use_mem_pool(pool):
        assert pool.use_count() == 2
        x = ember.empty(1 << 18, device="cuda")          # 1 MiB, from the pool
    y = ember.empty(1 << 10, device="cuda")             # from the default pool again
    snap = {s["segment_pool_id"]: s for s in pool.snapshot()}
    assert snap[pool.id]["allocated_size"] == 1 << 20 and pool.use_count() == 1
    assert EC.memory_allocated() == base + (1 << 20) + 4096
    assert any(s["segment_pool_id"] == (0, 0) for s in EC.memory_snapshot())
    del x
    assert EC.memory_allocated() == base + 4096 and EC.memory_reserved() >= base + (1 << 20)
    del y, pool
    with pytest.raises(NotImplementedError, match="always splits"):
        EC.MemPool(no_split=True)
    with pytest.raises(TypeError, match="expected a MemPool"):
        with EC.use_mem_pool(None):
            pass


def test_mem_pool_use_on_oom_serves_what_the_default_pool_cannot(cuda):
    EC.empty_cache()
    fraction = 0.01 if cuda == "double" else 1 / 64
    limit = int(EC.get_device_properties(0).total_memory * fraction)
    pool = EC.MemPool(use_on_oom=True)
    with EC.use_mem_pool(pool):             # the pool caches a block bigger than the limit
        big = ember.empty(limit // 4 + (1 << 20), device="cuda")
    del big
    EC.set_per_process_memory_fraction(fraction)
    try:
        ooms = EC.memory_stats()["num_ooms"]
        x = ember.empty(limit // 4 + (1 << 20), device="cuda")   # over the limit: from the pool
        assert EC.memory_stats()["num_ooms"] == ooms
        assert pool.snapshot()[0]["allocated_size"] >= x.nbytes
        del x, pool
        plain = EC.MemPool()                # a pool without use_on_oom does not step in
        with pytest.raises(EC.OutOfMemoryError):
            ember.empty(limit // 4 + (1 << 20), device="cuda")
        del plain
    finally:
        EC.set_per_process_memory_fraction(1.0)


def test_caching_allocator_alloc_and_delete(cuda):
    gc.collect()
    base = EC.memory_allocated()
    p = EC.caching_allocator_alloc(1000)
    q = EC.caching_allocator_alloc(10, device=0, stream=EC.Stream())
    assert isinstance(p, int) and p != q and EC.memory_allocated() == base + 1024 + 512
    EC.caching_allocator_delete(p)
    EC.caching_allocator_delete(q)
    assert EC.memory_allocated() == base
    with pytest.raises(RuntimeError, match="invalid device pointer"):
        EC.caching_allocator_delete(p)
    with pytest.raises(TypeError, match="Invalid type for stream argument"):
        EC.caching_allocator_alloc(8, stream="s")


def test_caching_allocator_disabled_frees_at_once(cuda):
    EC.empty_cache()
    base_alloc, base_res = EC.memory_allocated(), EC.memory_reserved()
    with EC.caching_allocator_disabled():
        x = ember.empty(1 << 18, device="cuda")
        assert EC.memory_allocated() - base_alloc == EC.memory_reserved() - base_res >= 1 << 20
        del x                               # back to the driver: nothing stays reserved
        assert EC.memory_reserved() == base_res
    y = ember.empty(1 << 18, device="cuda")  # cached again
    del y
    assert EC.memory_reserved() >= base_res + (1 << 20)


ALLOC_C = r"""
#include <stdlib.h>
#include <sys/types.h>
long n_alloc = 0, n_free = 0, live = 0;
void* my_malloc(ssize_t size, int device, void* stream) {
    n_alloc++; live += size; return malloc(size);
}
void my_free(void* ptr, ssize_t size, int device, void* stream) {
    n_free++; live -= size; free(ptr);
}
"""


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_pluggable_allocator_is_called_for_every_block(tmp_path):
    """A shared library's allocator (host malloc here: only on the double, whose "device"
    memory is host memory) allocates and frees each cuda tensor's block."""
    src = tmp_path / "alloc.c"
    src.write_text(ALLOC_C)
    so = tmp_path / "alloc.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    lib = ctypes.CDLL(str(so))
    count = {k: ctypes.c_long.in_dll(lib, k) for k in ("n_alloc", "n_free", "live")}
    with pytest.raises(AttributeError):
        EC.CUDAPluggableAllocator(str(so), "no_such_fn", "my_free")
    with cuda_double() as cp:
        prev = cp.cuda.get_allocator()
        alloc = EC.CUDAPluggableAllocator(str(so), "my_malloc", "my_free")
        assert EC.get_allocator_backend() == "native"
        gc.collect()
        base = EC.memory_allocated()
        try:
            EC.change_current_allocator(alloc)
            assert EC.get_allocator_backend() == "pluggable"
            x = ember.empty(1000, device="cuda")
            assert count["n_alloc"].value == 1 and count["live"].value == 4000
            assert EC.memory_allocated() == base + 4000
            del x
            assert count["n_free"].value == 1 and count["live"].value == 0
        finally:
            cp.cuda.set_allocator(prev)
            ember.cuda.memory._backend["allocator"] = None
        pool = EC.MemPool(alloc)            # a pool grown by the library's allocator
        with EC.use_mem_pool(pool):
            y = ember.empty(256, device="cuda")
        assert count["n_alloc"].value == 2 and pool.allocator is alloc
        del y, pool
        with pytest.raises(TypeError, match="expected a CUDAPluggableAllocator"):
            EC.change_current_allocator(object())


def test_host_memory_stats_count_pinned_tensors(cuda):
    ember.ones(1).to("cuda")                # (initializes CUDA)
    EC.reset_accumulated_host_memory_stats()
    before = EC.host_memory_stats()
    assert list(before) == sorted(before) and "active_bytes.current" in before
    x = ember.ones(256).pin_memory()
    st = EC.host_memory_stats()
    assert st["active_requests.current"] == before["active_requests.current"] + 1
    assert st["active_bytes.current"] == before["active_bytes.current"] + 1024
    assert st["active_bytes.peak"] >= st["active_bytes.current"]
    del x
    st = EC.host_memory_stats()
    assert st["active_bytes.current"] == before["active_bytes.current"]
    assert st["active_bytes.freed"] == 1024 and st["active_requests.allocated"] == 1
    EC.reset_peak_host_memory_stats()
    assert EC.host_memory_stats()["active_bytes.peak"] == st["active_bytes.current"]


def test_deprecated_cached_names(cuda):
    x = ember.ones(1024, device="cuda")
    with pytest.warns(FutureWarning, match="renamed to `torch.cuda.memory_reserved`"):
        assert EC.memory_cached() == EC.memory_reserved()
    with pytest.warns(FutureWarning, match="renamed to `torch.cuda.max_memory_reserved`"):
        assert EC.max_memory_cached() == EC.max_memory_reserved()
    with pytest.warns(FutureWarning, match="now calls torch.cuda.reset_peak_memory_stats"):
        EC.reset_max_memory_cached()
    assert EC.max_memory_reserved() == EC.memory_reserved()
    del x


# ---- CUDA graphs ----------------------------------------------------------------------------
def test_graph_capture_and_replay(cuda):
    x = ember.ones(4, device="cuda")
    g = EC.CUDAGraph()
    assert not EC.is_current_stream_capturing()
    with EC.graph(g):
        assert EC.is_current_stream_capturing()
        y = (x * 2 + 1).exp().log()
    assert not EC.is_current_stream_capturing()
    x.fill_(3.0)            # replay reads the captured input's memory as it is now
    g.replay()
    EC.synchronize()
    np.testing.assert_allclose(y.cpu().numpy(), [7.0] * 4, rtol=1e-6)
    z = ember.zeros(3, device="cuda")
    g2 = EC.CUDAGraph()
    with EC.graph(g2, pool=g.pool()):       # in-place work: each replay adds once more
        z.add_(1)
    for _ in range(3):
        g2.replay()
    EC.synchronize()
    assert z.cpu().tolist() == [3.0] * 3 and g2.pool() == g.pool()
    g2.instantiate()
    g2.reset()
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        g2.replay()


def test_graph_replays_gathers_and_scatters(cuda):
    x = ember.arange(6.0, device="cuda")
    idx = ember.tensor([4, 0, 4], device="cuda")
    acc = ember.zeros(6, device="cuda")
    g = EC.CUDAGraph()
    with EC.graph(g):
        y = x[idx] * 2
        acc.index_add_(0, idx, ember.ones(3, device="cuda"))
    x.copy_(ember.arange(6.0, device="cuda") * 10)
    g.replay()
    g.replay()
    EC.synchronize()
    assert y.cpu().tolist() == [80.0, 0.0, 80.0]
    assert acc.cpu().tolist() == [2.0, 0.0, 0.0, 0.0, 4.0, 0.0]


def test_graphed_language_model_step_equals_eager(cuda):
    """Embedding, layer norm, linear and cross-entropy, forward and backward, graphed: the
    loss and every gradient equal the eager copy's (the index bounds checks, which read the
    GPU, are skipped inside a capture)."""
    nn, F = ember.nn, ember.nn.functional

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.ln, self.out = nn.Embedding(10, 8), nn.LayerNorm(8), nn.Linear(8, 10)

        def forward(self, idx, tgt):
            return F.cross_entropy(self.out(self.ln(self.emb(idx))).view(-1, 10), tgt.view(-1))
    ember.manual_seed(0)
    m, ref = LM().cuda(), LM().cuda()
    ref.load_state_dict(m.state_dict())
    batch = lambda: ember.randint(0, 10, (4, 5), device="cuda")     # noqa: E731
    gm = EC.make_graphed_callables(m, (batch(), batch()))
    for _ in range(2):
        idx, tgt = batch(), batch()
        loss, want = gm(idx, tgt), ref(idx, tgt)
        loss.backward()
        want.backward()
        assert loss.item() == pytest.approx(want.item(), rel=1e-6)
    for p, q in zip(m.parameters(), ref.parameters()):
        np.testing.assert_allclose(p.grad.cpu().numpy(), q.grad.cpu().numpy(), rtol=1e-5,
                                   atol=1e-7)


def test_graph_errors(cuda, tmp_path):
    g = EC.CUDAGraph()
    with pytest.raises(RuntimeError, match="must be captured on a non-default stream"):
        g.capture_begin()
    with pytest.raises(RuntimeError, match="Unknown capture error mode"):
        with EC.graph(g, capture_error_mode="strict"):
            pass
    with pytest.raises(NotImplementedError, match="check_input_liveness"):
        with EC.graph(g, check_input_liveness=True):
            pass
    with pytest.raises(RuntimeError, match="no memory pool with id"):
        with EC.graph(g, pool=(5, 5)):
            pass
    x = ember.ones(4, device="cuda")
    with pytest.raises(RuntimeError):           # waiting for the GPU cannot be captured
        with EC.graph(g):
            (x * 2).sum().item()
    assert not EC.is_current_stream_capturing()
    h = EC.graph_pool_handle()
    with EC.graph(g, pool=h):
        y = x + 1
    assert g.pool() == h
    with pytest.warns(UserWarning, match="CUDA Graphs debug not enabled"):
        g.debug_dump(str(tmp_path / "g.dot"))
    g.enable_debug_mode()
    g.debug_dump(str(tmp_path / "g.dot"))
    assert (tmp_path / "g.dot").read_text().startswith("digraph")
    assert isinstance(g.raw_cuda_graph_exec(), int)
    del y


def test_make_graphed_callables(cuda):
    ember.manual_seed(0)
    nn = ember.nn
    mod = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 3)).cuda()
    ref = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 3)).cuda()
    ref.load_state_dict(mod.state_dict())
    fn = lambda a, b: (a * b).tanh()                    # noqa: E731
    sample = ember.randn(2, 4, device="cuda", requires_grad=True)
    a, b = (ember.randn(3, device="cuda", requires_grad=True) for _ in range(2))
    gmod, gfn = EC.make_graphed_callables((mod, fn), ((sample,), (a, b)))
    assert gmod is mod
    for _ in range(2):      # new inputs each call: copied into the captured ones
        x = ember.randn(2, 4, device="cuda")
        xg, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
        out, want = gmod(xg), ref(xe)
        out.sum().backward()
        want.sum().backward()
        np.testing.assert_allclose(out.detach().cpu().numpy(), want.detach().cpu().numpy(),
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(xg.grad.cpu().numpy(), xe.grad.cpu().numpy(), rtol=1e-5,
                                   atol=1e-6)
    for p, q in zip(mod.parameters(), ref.parameters()):
        np.testing.assert_allclose(p.grad.cpu().numpy(), q.grad.cpu().numpy(), rtol=1e-5,
                                   atol=1e-6)
    a2, b2 = (ember.randn(3, device="cuda", requires_grad=True) for _ in range(2))
    r = gfn(a2, b2)
    r.sum().backward()
    np.testing.assert_allclose(r.detach().cpu().numpy(), (a2 * b2).tanh().detach().cpu().numpy(),
                               rtol=1e-6)
    t = (1 - (a2 * b2).tanh() ** 2).detach()
    np.testing.assert_allclose(a2.grad.cpu().numpy(), (t * b2).detach().cpu().numpy(),
                               rtol=1e-5)
    mod.eval()              # captured in training mode: eval runs the eager forward
    np.testing.assert_allclose(mod(x).detach().cpu().numpy(), ref(x).detach().cpu().numpy(),
                               rtol=1e-6)


def test_make_graphed_callables_refuses_what_torch_refuses(cuda):
    lin = ember.nn.Linear(2, 2).cuda()
    lin.register_forward_hook(lambda *a: None)
    x = ember.randn(1, 2, device="cuda")
    with pytest.raises(AssertionError, match="Modules must not have hooks registered"):
        EC.make_graphed_callables(lin, (x,))
    with pytest.raises(AssertionError, match="sample_args for each callable must contain only "
                                             "Tensors"):
        EC.make_graphed_callables(lambda a, n: a * n, (x, 3))
    bn = ember.nn.BatchNorm1d(2).cuda()
    bn.running_mean.requires_grad_(True)
    with pytest.raises(AssertionError, match="only parameters may be trainable"):
        EC.make_graphed_callables(bn, (x,))


# ---- NVTX, NCCL, the jiterator --------------------------------------------------------------
def _nvtx_available():
    try:
        from cupy.cuda import nvtx
        return nvtx.available
    except ImportError:
        return False


def test_nvtx_ranges():
    if not _nvtx_available():
        with pytest.raises(RuntimeError, match="NVTX functions not installed"):
            EC.nvtx.range_push("x")
        return
    # NVTX needs CuPy's library, not a GPU: these are the real calls
    assert EC.nvtx.range_push("outer") == 0 and EC.nvtx.range_push("inner") == 1
    assert EC.nvtx.range_pop() == 1 and EC.nvtx.range_pop() == 0 and EC.nvtx.range_pop() == -1
    with EC.nvtx.range("step {} of {n}", 1, n=3):
        EC.nvtx.mark("here")
    r = EC.nvtx.range_start("across threads")
    assert isinstance(r, int)
    EC.nvtx.range_end(r)


def test_nccl_version_and_availability():
    nccl = EC.nccl._nccl()
    if nccl is None:
        with pytest.raises(RuntimeError, match="NCCL is not available"):
            EC.nccl.version()
        with pytest.warns(UserWarning, match="no NCCL"):
            assert EC.nccl.is_available([ember.ones(2)]) is False
        return
    v = EC.nccl.version()
    assert len(v) == 3 and v[0] >= 2
    assert EC.nccl.is_available([ember.ones(2)]) is False       # a cpu tensor


def test_nccl_version_decoding(monkeypatch):
    for code, want in ((2804, (2, 8, 4)), (21805, (2, 18, 5)), (22703, (2, 27, 3))):
        monkeypatch.setattr(EC.nccl, "_nccl", lambda c=code: types.SimpleNamespace(
            get_version=lambda: c))
        assert EC.nccl.version() == want


def test_jiterator_builds_cupys_elementwise_kernel():
    """On the double: the kernel ember asks CuPy to compile (the double cannot run it)."""
    code = "template <typename T> T my_kernel(T x, T y, T alpha) { return -x + alpha * y; }"
    fn = EC.jiterator._create_jit_fn(code, alpha=1.0)
    with cuda_double():
        a, b = ember.ones(3, device="cuda"), ember.ones(1, device="cuda", dtype=ember.float64)
        with pytest.raises(NotImplementedError, match="cannot compile CUDA C"):
            fn(a, b, alpha=2.0)
        k = fn._kernels[2]
        assert (k.in_params, k.out_params) == ("T in0, T in1, T alpha", "T out0")
        assert k.operation == "out0 = my_kernel(in0, in1, alpha)" and k.preamble == code
        with pytest.raises(KeyError, match="beta is not declared"):
            fn(a, b, beta=1.0)
        with pytest.raises(AssertionError, match="up to 8 tensor inputs"):
            fn(*[a] * 9)
        with pytest.raises(RuntimeError, match="must be on a cuda device"):
            fn(a, ember.ones(3))


@pytest.mark.cuda
def test_jiterator_on_a_gpu():
    code = "template <typename T> T my_kernel(T x, T y, T alpha) { return -x + alpha * y; }"
    fn = EC.jiterator._create_jit_fn(code, alpha=1.0)
    a = ember.rand(3, 1, device="cuda")
    b = ember.rand(4, device="cuda", dtype=ember.float64)
    out = fn(a, b, alpha=3.0)
    assert out.dtype is ember.float64 and out.shape == (3, 4)
    want = -a.double().cpu().numpy() + 3.0 * b.cpu().numpy()
    np.testing.assert_allclose(out.cpu().numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(fn(a, a).cpu().numpy(), np.zeros((3, 1)))


def test_legacy_sparse_cuda_types(cuda):
    t = EC.sparse.FloatTensor(ember.tensor([[0, 1]], device="cuda"),
                              ember.tensor([1.0, 2.0], device="cuda"), (3,))
    assert t.is_sparse and t.is_cuda and isinstance(t, EC.sparse.FloatTensor)
    assert t.to_dense().cpu().tolist() == [1.0, 2.0, 0.0]
    assert not isinstance(t, ember.sparse.FloatTensor)


@needs_torch
def test_names_present():
    """Every torch.cuda name ember was missing is there (GreenContext and tunable aside)."""
    for name in ("CUDAGraph", "graph", "graphs", "make_graphed_callables", "graph_pool_handle",
                 "is_current_stream_capturing", "ExternalStream", "get_stream_from_external",
                 "MemPool", "use_mem_pool", "CUDAPluggableAllocator", "change_current_allocator",
                 "memory_snapshot", "nvtx", "nccl", "jiterator", "profiler", "sparse",
                 "cudart", "BFloat16Storage", "ComplexDoubleStorage"):
        assert hasattr(EC, name), name
    assert set(TC.graphs.__all__) <= set(dir(EC.graphs))


def test_the_double_models_only_what_cupy_has():
    """Each name the double's ``cupy.cuda`` offers is one CuPy 14.2.0 has
    (tests/cupy_names.json, read from the installed package)."""
    import cuda_double as d
    public = lambda names: {n for n in names if not n.startswith("_")}   # noqa: E731
    for key, names in (("cupy.cuda", vars(d.cupy.cuda)), ("cupy.cuda.runtime", vars(d._runtime)),
                       ("cupy.cuda.device", vars(d.cupy.cuda.device)),
                       ("cupy.cuda.nvrtc", vars(d.cupy.cuda.nvrtc)),
                       ("cupy.cuda.Stream", vars(d.Stream)),
                       ("cupy.cuda.MemoryPool", vars(d.MemoryPool)),
                       ("cupy.cuda.graph.Graph", vars(d.Graph))):
        assert public(names) <= d.CUPY_NAMES[key], (key, public(names) - d.CUPY_NAMES[key])


def test_uncached_allocations_run_out_with_torchs_error():
    with cuda_double() as cp:
        def refuse(size):
            raise cp.cuda.runtime.CUDARuntimeError(2)       # cudaMalloc's out of memory
        with EC.caching_allocator_disabled():
            from cuda_double import _runtime
            saved, _runtime.malloc = _runtime.malloc, refuse
            try:
                with pytest.raises(EC.OutOfMemoryError, match="CUDA out of memory. Tried to "
                                                              "allocate 4.00 MiB"):
                    ember.empty(1 << 20, device="cuda")
            finally:
                _runtime.malloc = saved
