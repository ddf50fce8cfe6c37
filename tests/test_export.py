"""ember.export: ExportedProgram, Dim ranges, module(), save/load; torch.export as the oracle for
the signature."""
import io
import os
import sys

import numpy as np
import pytest
import torch

import ember
from ember.export import Dim, export

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _mlp(T):
    T.manual_seed(0)
    m = T.nn.Sequential(T.nn.Linear(4, 8), T.nn.BatchNorm1d(8), T.nn.ReLU(), T.nn.Linear(8, 2))
    return m.eval()


def test_signature_matches_torch_export():
    ep = export(_mlp(ember), (ember.randn(3, 4),))
    tep = torch.export.export(_mlp(torch), (torch.randn(3, 4),))
    ours, theirs = ep.graph_signature, tep.graph_signature
    assert ours.parameters == list(theirs.parameters)
    assert set(ours.buffers) <= set(theirs.buffers) and "1.running_mean" in ours.buffers
    assert [s.arg for s in ours.input_specs if s.kind.name == "PARAMETER"] == \
        [s.arg.name for s in theirs.input_specs if s.kind.name == "PARAMETER"]
    assert set(ep.state_dict) <= set(tep.state_dict)
    with pytest.raises(RuntimeError, match="Unable to call ExportedProgram directly"):
        ep(ember.ones(3, 4))
    x = ember.randn(3, 4)
    np.testing.assert_allclose(ep.module()(x).detach().numpy(),
                               _mlp(ember)(x).detach().numpy(), rtol=1e-6)
    lifted = ep.graph_module(*[ep.state_dict[s.target] for s in ep.graph_signature.input_specs
                               if s.target is not None], x)
    np.testing.assert_allclose(lifted.detach().numpy(), _mlp(ember)(x).detach().numpy(),
                               rtol=1e-6)


def test_dynamic_batch_in_range_and_checks():
    sys.path.insert(0, ROOT)
    from tests.test_onnx import _gpt
    model, args = _gpt(2)
    ep = export(model, args, dynamic_shapes={"idx": {0: Dim("batch", min=1, max=16)}})
    assert ep.range_constraints == {"batch": (1, 16)}
    gm = ep.module()
    for b in (1, 5, 16):
        x = ember.randint(0, 11, (b, 8))
        np.testing.assert_allclose(gm(x).detach().numpy(), model(x).detach().numpy(),
                                   rtol=1e-5, atol=1e-6)
    assert "idx.size(0)" in gm.code
    with pytest.raises(RuntimeError, match=r"shape\[0\] to be <= 16, but got 17"):
        gm(ember.randint(0, 11, (17, 8)))
    with pytest.raises(RuntimeError, match=r"shape\[1\] to be equal to 8, but got 9"):
        gm(ember.randint(0, 11, (2, 9)))
    with pytest.raises(RuntimeError, match="Constraints violated"):
        export(model, args, dynamic_shapes={"idx": {0: Dim("batch", min=4)}})
    with pytest.raises(ValueError, match="must be >= lower bound"):
        Dim("bad", min=3, max=2)


def test_save_load_and_run_decompositions():
    ep = export(_mlp(ember), (ember.randn(3, 4),), dynamic_shapes=({0: Dim("b")},))
    buf = io.BytesIO()
    ember.export.save(ep, buf)
    buf.seek(0)
    ep2 = ember.export.load(buf)
    x = ember.randn(6, 4)
    np.testing.assert_allclose(ep2.module()(x).detach().numpy(), ep.module()(x).detach().numpy())
    assert ep2.graph_signature.parameters == ep.graph_signature.parameters
    dec = ep.run_decompositions()
    assert str(dec.graph) == str(ep.graph)
    with pytest.raises(TypeError, match="expects an ExportedProgram"):
        ember.export.save(_mlp(ember), io.BytesIO())
