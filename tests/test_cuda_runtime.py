"""``ember.cuda``'s runtime: streams, events, the memory API and out-of-memory, per-GPU random
generators, pinned copies and AMP, on the cuda TEST DOUBLE (tests/cuda_double.py: CuPy's pool,
streams and events modelled on NumPy; no GPU) on every run, and on CuPy itself with ``-m cuda``
on a machine with a GPU (the ``cuda`` fixture's ``gpu`` case).

On the double work is synchronous, so these check ember's bookkeeping and the order of calls
against what CuPy answers, not concurrency: ``test_streams_overlap_on_a_gpu`` checks that on a
real GPU only."""
import numpy as np
import pytest

import ember
from cuda_double import cuda  # noqa: F401  (the fixture)

F = ember.nn.functional


def _cupy():
    import cupy
    return cupy


# ---- streams and events ---------------------------------------------------------------------
def test_streams_make_ops_run_on_them(cuda):
    default = ember.cuda.current_stream()
    assert default == ember.cuda.default_stream() and default.cuda_stream == 0
    s1, s2 = ember.cuda.Stream(), ember.cuda.Stream(priority=-1)
    assert s1 != s2 and s1.cuda_stream not in (0, s2.cuda_stream) and len({s1, s2, s1}) == 2
    assert repr(s1).startswith("<torch.cuda.Stream device=cuda:0 cuda_stream=0x")
    assert s1.device == ember.device("cuda:0") and s2.priority == -1
    x = ember.arange(6.0, device="cuda")
    with ember.cuda.stream(s1) as entered:
        assert entered is s1 and ember.cuda.current_stream() == s1
        # the stream is CuPy's current one: every kernel of the block is queued there
        assert _cupy().cuda.get_current_stream().ptr == s1.cuda_stream
        with ember.cuda.stream(s2):
            assert ember.cuda.current_stream() == s2
            y = x * 2
        assert ember.cuda.current_stream() == s1
        s1.wait_stream(s2)
        z = y + 1
    assert ember.cuda.current_stream() == default
    default.wait_stream(s1)
    np.testing.assert_array_equal(z.cpu().numpy(), np.arange(6.0) * 2 + 1)
    with ember.cuda.stream(None):
        assert ember.cuda.current_stream() == default
    ember.cuda.set_stream(s2)
    try:
        assert ember.cuda.current_stream() == s2
    finally:
        ember.cuda.set_stream(default)
    s1.synchronize()
    assert s1.query() and s2.query()
    ember.cuda.synchronize()


def test_events_time_and_order_work(cuda):
    start, end = ember.cuda.Event(enable_timing=True), ember.cuda.Event(enable_timing=True)
    assert start.query() and repr(start) == "<torch.cuda.Event uninitialized>"
    with pytest.raises(RuntimeError, match="Both events must be recorded before calculating"):
        start.elapsed_time(end)
    a = ember.randn(64, 64, device="cuda")
    start.record()
    for _ in range(3):
        a = a @ a / 8
    end.record()
    end.synchronize()
    assert end.query() and start.elapsed_time(end) >= 0.0
    assert repr(end).startswith("<torch.cuda.Event 0x")
    plain = ember.cuda.Event()
    plain.record(ember.cuda.current_stream())
    with pytest.raises(RuntimeError, match="Both events must be created with argument "
                                           "'enable_timing=True'."):
        start.elapsed_time(plain)
    side = ember.cuda.Stream()
    ev = side.record_event()
    ev.wait()                       # the current stream waits for the side stream's work
    ev.wait(side)
    side.wait_event(ev)
    ev.synchronize()
    assert ev.query()


def test_record_stream_keeps_memory_until_the_stream_is_done(cuda):
    from ember.cuda.streams import _pending
    s = ember.cuda.Stream()
    x = ember.ones(1024, device="cuda")
    with ember.cuda.stream(s):
        y = x * 3
    x.record_stream(s)
    assert any(arr is x._data for _, arr in _pending)
    s.synchronize()
    ember.cuda.empty_cache()        # drops what finished streams no longer use
    assert not any(arr is x._data for _, arr in _pending)
    with pytest.raises(RuntimeError, match="unknown parameter type"):
        y.record_stream(None)


def test_non_blocking_copies_from_pinned_memory(cuda):
    host = ember.arange(4096.0).reshape(64, 64)
    pinned = host.pin_memory()
    assert pinned.is_pinned() and not host.is_pinned() and pinned.pin_memory() is pinned
    s = ember.cuda.Stream()
    with ember.cuda.stream(s):
        dev = pinned.to("cuda", non_blocking=True)
        dev2 = pinned.cuda(non_blocking=True)
        out = (dev @ dev2).sum(1)
    s.synchronize()
    np.testing.assert_allclose(out.cpu().numpy(), (host @ host).sum(1).numpy(), rtol=1e-6)
    back = pinned.to("cuda")        # blocking: the host may write the pinned buffer at once
    pinned.fill_(0.0)
    np.testing.assert_array_equal(back.cpu().numpy(), host.numpy())
    np.testing.assert_array_equal(pinned.t().to("cuda").cpu().numpy(), np.zeros((64, 64)))
    for factory in (lambda: ember.empty(3, pin_memory=True),
                    lambda: ember.tensor([1.0, 2.0], pin_memory=True),
                    lambda: ember.randn(2, 2, pin_memory=True)):
        assert factory().is_pinned()


# ---- memory ---------------------------------------------------------------------------------
def test_memory_counters_follow_the_pool(cuda):
    ember.cuda.synchronize()
    ember.cuda.empty_cache()
    base = ember.cuda.memory_allocated()
    ember.cuda.reset_peak_memory_stats()
    assert ember.cuda.max_memory_allocated() == base
    x = ember.empty(1 << 18, device="cuda")                 # 1 MiB
    assert ember.cuda.memory_allocated() == base + (1 << 20)
    assert ember.cuda.memory_reserved() >= ember.cuda.memory_allocated()
    y = ember.empty(1 << 17, device="cuda")
    peak = ember.cuda.memory_allocated()
    del x, y
    assert ember.cuda.memory_allocated() == base
    assert ember.cuda.max_memory_allocated() == peak        # the peak stays until reset
    assert ember.cuda.memory_reserved() >= base + (1 << 20)   # freed blocks stay cached
    ember.cuda.empty_cache()
    assert ember.cuda.memory_reserved() < base + (1 << 20)
    ember.cuda.reset_peak_memory_stats()
    assert ember.cuda.max_memory_allocated() == base
    st = ember.cuda.memory_stats()
    assert st["allocated_bytes.all.current"] == base and st["num_ooms"] >= 0
    assert st["allocated_bytes.all.freed"] == st["allocated_bytes.all.allocated"] - base
    assert list(st) == sorted(st)
    text = ember.cuda.memory_summary()
    assert "memory summary, device ID 0" in text and "Allocated memory" in text
    free, total = ember.cuda.mem_get_info()
    assert 0 < free <= total == ember.cuda.get_device_properties(0).total_memory
    ember.cuda.reset_accumulated_memory_stats()
    assert ember.cuda.memory_stats()["allocation.all.allocated"] == 0


def test_out_of_memory_raises_torchs_error_and_the_program_goes_on(cuda):
    ember.cuda.empty_cache()
    total = ember.cuda.get_device_properties(0).total_memory
    fraction = 0.01 if cuda == "double" else 1 / 64
    ember.cuda.set_per_process_memory_fraction(fraction)
    try:
        assert ember.cuda.get_per_process_memory_fraction() == pytest.approx(fraction, 1e-6)
        keep = ember.ones(1 << 16, device="cuda")
        ooms = ember.cuda.memory_stats()["num_ooms"]
        with pytest.raises(ember.cuda.OutOfMemoryError) as e:
            ember.empty(int(total * fraction) // 4 + (1 << 20), device="cuda")
        msg = str(e.value)
        assert isinstance(e.value, RuntimeError) and msg.startswith(
            "CUDA out of memory. Tried to allocate ") and "GPU 0 has a total capacity of " in msg
        assert "is allocated by ember" in msg and "(the process is limited to " in msg
        assert ember.cuda.memory_stats()["num_ooms"] == ooms + 1
        w = ember.randn(256, 256, device="cuda")           # an op's output runs out too
        with pytest.raises(ember.cuda.OutOfMemoryError):
            ember.ones(int(total * fraction) // 4 // 256, 256, device="cuda") @ w
        z = (keep * 2).sum()                                # and afterwards all goes on
        assert z.item() == 2.0 * (1 << 16)
    finally:
        ember.cuda.set_per_process_memory_fraction(1.0)
    with pytest.raises(ValueError, match="Invalid fraction value"):
        ember.cuda.set_per_process_memory_fraction(1.5)
    with pytest.raises(TypeError):
        ember.cuda.set_per_process_memory_fraction(1)


# ---- random generators ----------------------------------------------------------------------
def test_each_gpu_has_a_generator_seeded_with_the_cpus(cuda):
    ember.manual_seed(7)
    a = ember.rand(5, device="cuda")
    cpu = ember.rand(5)
    # the same seed gives the cpu's numbers (ember draws on the host for every device)
    np.testing.assert_array_equal(a.cpu().numpy(), cpu.numpy())
    assert ember.cuda.initial_seed() == 7
    gen = ember.cuda.default_generators[0]
    assert gen.device == ember.device("cuda:0") and len(ember.cuda.default_generators) == 1
    # cuda.manual_seed moves the gpu's stream only
    ember.manual_seed(7)
    ember.cuda.manual_seed(3)
    np.testing.assert_array_equal(ember.rand(5).numpy(), cpu.numpy())
    b = ember.rand(5, device="cuda")
    ember.cuda.manual_seed_all(3)
    np.testing.assert_array_equal(ember.rand(5, device="cuda").cpu().numpy(), b.cpu().numpy())
    state = ember.cuda.get_rng_state()
    assert state.dtype is ember.uint8 and state.device.type == "cpu"
    c = ember.randn(4, device="cuda")
    ember.cuda.set_rng_state(state)
    np.testing.assert_array_equal(ember.randn(4, device="cuda").cpu().numpy(), c.cpu().numpy())
    ember.cuda.set_rng_state_all(ember.cuda.get_rng_state_all())
    state = ember.cuda.get_rng_state()
    with ember.random.fork_rng(devices=[0]):
        ember.rand(100, device="cuda")
    after = ember.randn(4, device="cuda")
    ember.cuda.set_rng_state(state)
    assert ember.equal(after, ember.randn(4, device="cuda"))
    ember.cuda.seed_all()
    ember.cuda.seed()
    assert ember.cuda.initial_seed() != 3


def test_generators_on_cuda_and_reproducible_dropout(cuda):
    g = ember.Generator(device="cuda").manual_seed(1)
    x = ember.randn(3, 3, generator=g, device="cuda")
    assert x.device.type == "cuda"
    g.manual_seed(1)
    assert ember.equal(x, ember.randn(3, 3, generator=g, device="cuda"))
    with pytest.raises(RuntimeError, match="Expected a 'cuda' device type for generator but "
                                           "found 'cpu'"):
        ember.randn(2, generator=ember.Generator(), device="cuda")
    h = ember.ones(64, 64, device="cuda")
    ember.manual_seed(0)
    d1 = F.dropout(h, 0.5)
    ember.manual_seed(0)
    d2 = F.dropout(h, 0.5)
    assert ember.equal(d1, d2) and 0.3 < (d1 == 0).float().mean().item() < 0.7
    ember.manual_seed(0)
    w1 = ember.nn.Linear(8, 8, device="cuda").weight
    ember.manual_seed(0)
    assert ember.equal(w1, ember.nn.Linear(8, 8, device="cuda").weight)


# ---- attention ------------------------------------------------------------------------------
def _attention_peak(L, masked):
    q, k, v = (ember.randn(1, 2, L, 64, device="cuda", requires_grad=True) for _ in range(3))
    mask = ember.ones(L, L, dtype=ember.bool, device="cuda").tril() if masked else None
    ember.cuda.synchronize()
    ember.cuda.reset_peak_memory_stats()
    base = ember.cuda.memory_allocated()
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=not masked)
    y.sum().backward()
    return ember.cuda.max_memory_allocated() - base, (q, k, v, y)


def test_long_attention_on_cuda_is_blockwise_with_memory_linear_in_length(cuda):
    """Causal SDPA over 1024+ tokens takes the flash-style path on cuda (online softmax over
    key blocks, recomputed in backward): its peak memory grows about linearly with the length,
    the masked (materialized) path's quadratically; values and gradients are the cpu's."""
    flash1, (q, k, v, y) = _attention_peak(1024, False)
    assert ember.nn._attention.use_flash(q, k, v, None, 0.0)
    qc, kc, vc = (t.detach().cpu().requires_grad_() for t in (q, k, v))
    yc = F.scaled_dot_product_attention(qc, kc, vc, is_causal=True)
    yc.sum().backward()
    for got, want in ((y, yc), (q.grad, qc.grad), (k.grad, kc.grad), (v.grad, vc.grad)):
        np.testing.assert_allclose(got.detach().cpu().numpy(), want.detach().numpy(),
                                   rtol=2e-4, atol=2e-5)
    flash2, _ = _attention_peak(2048, False)
    naive2, _ = _attention_peak(2048, True)
    assert flash2 < 2.6 * flash1 and flash2 < naive2 / 3, (flash1, flash2, naive2)


# ---- AMP ------------------------------------------------------------------------------------
def test_autocast_and_grad_scaler_train_on_cuda(cuda):
    dtype = ember.float16         # (CuPy has no bfloat16: test_cuda_double checks the refusal)
    ember.manual_seed(0)
    nn = ember.nn
    m = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4)).cuda()
    opt = ember.optim.AdamW(m.parameters(), lr=1e-2)
    scaler = ember.amp.GradScaler("cuda", init_scale=2.0 ** 10, growth_interval=2)
    x, y = ember.randn(16, 8, device="cuda"), ember.randint(0, 4, (16,), device="cuda")
    losses = []
    for _ in range(6):
        opt.zero_grad()
        with ember.autocast("cuda", dtype=dtype):
            h = m[0](x)
            out = m(x)
            loss = F.cross_entropy(out, y)
        assert h.dtype is dtype and out.dtype is dtype and loss.dtype is ember.float32
        scaler.scale(loss).backward()
        assert m[0].weight.grad.dtype is ember.float32 and m[0].weight.grad.is_cuda
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    assert losses[-1] < losses[0] and scaler.get_scale() == 2.0 ** 13   # grew every 2 steps
    # an inf gradient skips the step and backs the scale off
    before = [p.detach().clone() for p in m.parameters()]
    opt.zero_grad()
    with ember.autocast("cuda", dtype=dtype):
        loss = F.cross_entropy(m(x), y)
    scaler.scale(loss).backward()
    m[0].weight.grad[0, 0] = float("inf")
    assert scaler.step(opt) is None
    scaler.update()
    assert scaler.get_scale() == 2.0 ** 12
    assert all(ember.equal(a, b) for a, b in zip(before, m.parameters()))
    with ember.autocast("cuda", dtype=dtype):
        q = ember.randn(2, 3, 5, 8, device="cuda")
        att = F.scaled_dot_product_attention(q, q, q, is_causal=True)
        conv = F.conv2d(ember.randn(1, 3, 8, 8, device="cuda"), ember.randn(4, 3, 3, 3,
                                                                           device="cuda"))
    assert att.dtype is dtype and conv.dtype is dtype and conv.is_cuda


# ---- a real GPU only ------------------------------------------------------------------------
@pytest.mark.cuda
def test_streams_overlap_on_a_gpu():
    """A copy from pinned memory on one stream runs while matmuls run on another: events
    show the two intervals intersect."""
    host = ember.randn(1 << 24).pin_memory()            # 64 MiB
    a = ember.randn(4096, 4096, device="cuda")
    copy_s, comp_s = ember.cuda.Stream(), ember.cuda.Stream()

    def timed(fn, stream):
        e0, e1 = ember.cuda.Event(enable_timing=True), ember.cuda.Event(enable_timing=True)
        with ember.cuda.stream(stream):
            e0.record()
            fn()
            e1.record()
        return e0, e1

    def copy():
        host.to("cuda", non_blocking=True)

    def compute():
        for _ in range(4):
            a @ a
    for _ in range(2):      # warm up (kernels, pool)
        copy(), compute()
    ember.cuda.synchronize()
    pair = [timed(copy, copy_s), timed(compute, comp_s)]
    ember.cuda.synchronize()
    # the copy began before the compute ended and ended after it began: they overlapped
    (c0, c1), (k0, k1) = pair
    assert c0.elapsed_time(k1) > 0 and k0.elapsed_time(c1) > 0
