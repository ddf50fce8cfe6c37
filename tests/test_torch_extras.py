"""Top-level extras against torch: generic Stream/Event on the cpu, exception classes, build
flags, legacy storage names, cond and while_loop run eagerly."""
import pytest

import ember

torch = pytest.importorskip("torch")


def test_stream_and_event_behave_as_torch_on_cpu():
    for L in (ember, torch):
        s, e, e2 = L.Stream(), L.Event(), L.Event(enable_timing=True)
        assert repr(s) == "torch.Stream device_type=cpu, device_index=-1, stream_id=0"
        assert s.query() and e.query() and s == L.Stream("cpu") and s != 3
        assert s.device.type == "cpu" and s.stream_id == 0 and e.event_id == 0
        s.synchronize(), e.synchronize(), s.wait_event(e), e.wait(s), e.wait()
        for call in (lambda: s.record_event(e), lambda: e.record(s), lambda: s.wait_stream(s)):
            with pytest.raises(RuntimeError, match="cpu backend doesn't support events."):
                call()
        with pytest.raises(ValueError, match="enable_timing=True"):
            e.elapsed_time(e2)
        assert repr(L.Stream("meta")) == "torch.Stream device_type=meta, device_index=-1, " \
                                         "stream_id=0"
    assert repr(ember.Event()) == repr(torch.Event())


def test_exception_classes_and_flags():
    for name in ("OutOfMemoryError", "AcceleratorError", "FatalError", "JITException"):
        e, t = getattr(ember, name), getattr(torch, name)
        assert [c.__name__ for c in e.__mro__[1:]] == [c.__name__ for c in t.__mro__[1:]]
    with pytest.raises(RuntimeError):
        raise ember.OutOfMemoryError("out of memory")
    assert ember.has_lapack is torch.has_lapack is True and ember.has_spectral is True
    assert isinstance(ember.has_mkl, bool) and isinstance(ember.has_openmp, bool)
    assert ember.Storage.__name__ == torch.Storage.__name__ == "FloatStorage"
    assert isinstance(ember.ones(2).untyped_storage(), ember.StorageBase)
    assert ember.init_num_threads() is None


def test_cond_and_while_loop_match_torch():
    outs = []
    for L in (ember, torch):
        x = L.arange(4.0)
        a = L.cond(x.sum() > 1, lambda t: t * 2, lambda t: t - 1, (x,))
        b = L.cond(False, lambda t, u: t + u, lambda t, u: t - u, [x, x])
        c = L.while_loop(lambda i, t: i < 5, lambda i, t: (i + 1, t + i), (L.tensor(0), x))
        outs.append([a.tolist(), b.tolist(), [v.tolist() for v in c]])
        with pytest.raises(RuntimeError, match="Expected pred to be bool or single-element "
                                               "tensor"):
            L.cond(L.tensor([True, False]), lambda t: t, lambda t: t, (x,))
    assert outs[0] == outs[1]
    x = ember.ones(2, requires_grad=True)
    ember.cond(True, lambda t: (t * 3).sum(), lambda t: t.sum(), (x,)).backward()
    assert x.grad.tolist() == [3.0, 3.0]
