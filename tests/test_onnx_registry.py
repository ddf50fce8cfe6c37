"""Every registry op with an ONNX lowering, on each of its float32 samples: exported alone,
run by onnxruntime, equal to the op's result (1e-4 relative, 1e-5 absolute), or refused with
the exporter's error naming what it cannot write. Generated from the registry."""
import io

import numpy as np
import pytest

import ember
from ember._graph.record import flatten_tensors
from ember._ops.registry import all_ops
from helpers import accepted_samples

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from ember.onnx._lowerings import LOWERINGS  # noqa: E402

OPS = [d for d in all_ops() if d.name in LOWERINGS and d.samples is not None]


@pytest.mark.parametrize("opdef", OPS, ids=str)
def test_lowering_matches_the_op(opdef):
    ran = 0
    for s, args, kwargs, want in accepted_samples(opdef, ember.float32):
        buf = io.BytesIO()
        try:
            ember.onnx.export(lambda *a, **k: opdef(*a, **k), args, buf, kwargs=kwargs)
        except ember.onnx.OnnxExporterError as e:
            assert "not supported" in str(e), e
            continue
        sess = ort.InferenceSession(buf.getvalue())
        feeds = {i.name: t.numpy() for i, t in zip(sess.get_inputs(),
                                                    flatten_tensors((args, kwargs)))}
        for got, w in zip(sess.run(None, feeds), flatten_tensors(want)):
            np.testing.assert_allclose(got, w.detach().numpy(), rtol=1e-4, atol=1e-5,
                                       equal_nan=True, err_msg=f"{opdef.name}({s})")
            assert got.shape == tuple(w.shape), (opdef.name, s)
        ran += 1
    if not ran:
        pytest.skip(f"{opdef.name}: no float32 sample it exports")
