"""ember.onnx.export: models written with onnx, checked by onnx.checker, run by onnxruntime and
compared with ember's outputs (1e-5)."""
import io
import math
import os
import sys

import numpy as np
import pytest

import ember

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
nn = ember.nn
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(model, args, *batches, **kw):
    """Export ``model`` on ``args``; run onnxruntime on ``args`` and each of ``batches``;
    return the model proto after checking every output against ember's within 1e-5."""
    buf = io.BytesIO()
    names = kw.pop("input_names", [f"in{i}" for i in range(len(args))])
    prog = ember.onnx.export(model, args, buf, input_names=names, **kw)
    proto = onnx.load_from_string(buf.getvalue())
    onnx.checker.check_model(proto, full_check=True)
    sess = ort.InferenceSession(buf.getvalue())
    was = getattr(model, "training", False)     # (exported in eval mode, whatever its mode)
    for a in (args,) + batches:
        got = sess.run(None, {n: x.numpy() for n, x in zip(names, a)})
        with ember.no_grad():
            want = model.eval()(*a) if isinstance(model, nn.Module) else model(*a)
            model.train(was) if isinstance(model, nn.Module) else None
        want = want if isinstance(want, tuple) else (want,)
        for g, w in zip(got, want):
            assert g.shape == tuple(w.shape)
            np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-5)
    assert prog.model_proto.graph.name
    return proto


def test_mlp_with_dynamic_batch_and_state_dict_names():
    ember.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3), nn.Softmax(-1))
    proto = _run(m, (ember.randn(4, 6),), (ember.randn(7, 6),),
                 dynamic_axes={"in0": {0: "batch"}, "output_0": {0: "batch"}})
    assert [i.name for i in proto.graph.initializer] == list(m.state_dict())
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"


def test_cnn_with_batchnorm_pooling_and_activations():
    ember.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                      nn.MaxPool2d(2), nn.Conv2d(4, 4, 3, stride=2, groups=2), nn.AvgPool2d(1),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 5), nn.GELU(),
                      nn.Tanh(), nn.Sigmoid(), nn.LayerNorm(5), nn.Dropout(0.3), nn.SiLU(),
                      nn.LeakyReLU(), nn.ELU(), nn.Hardtanh(), nn.Softplus(), nn.LogSoftmax(1))
    m[1].running_mean.normal_()
    m[1].running_var.uniform_(0.5, 2.0)
    m.train()           # exported in eval mode (TrainingMode.EVAL), left in training mode
    _run(m, (ember.randn(2, 3, 12, 12),), (ember.randn(5, 3, 12, 12),),
         dynamic_axes={"in0": [0]})
    assert m.training


def test_lstm_classifier():
    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn, self.fc = nn.LSTM(8, 16, 2, batch_first=True), nn.Linear(16, 3)

        def forward(self, x):
            out, (h, c) = self.rnn(x)
            return self.fc(out[:, -1]), h
    ember.manual_seed(0)
    _run(Classifier(), (ember.randn(2, 7, 8),), (ember.randn(4, 7, 8),),
         dynamic_axes={"in0": {0: "batch"}})


def test_transformer_encoder():
    ember.manual_seed(0)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 2)
    # batch * heads in the attention's reshapes: computed from the input's shape at run time
    _run(enc, (ember.randn(2, 5, 16),), (ember.randn(3, 5, 16),), (ember.randn(1, 9, 16),),
         dynamic_axes={"in0": {0: "batch", 1: "seq"}})


def _gpt(batch, seq=8):
    sys.path.insert(0, ROOT)
    from benchmarks.models import gpt_model

    class Logits(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = gpt_model(ember, vocab=11, block=16, n_layer=2, n_head=2, n_embd=16)

        def forward(self, idx):
            m = self.m
            x = m.tok(idx) + m.pos(ember.arange(idx.shape[1]))
            return m.head(m.ln_f(m.blocks(x)))
    ember.manual_seed(0)
    return Logits(), (ember.randint(0, 11, (batch, seq)),)


def test_small_causal_gpt_with_dynamic_batch_and_sequence():
    # arange(L) for the positions and the causal mask's ones(L, L), made in Python, are
    # rebuilt from the input's shape (Range, ConstantOfShape)
    m, args = _gpt(2)
    proto = _run(m, args, _gpt(5, 8)[1], _gpt(3, 13)[1],
                 dynamic_axes={"in0": {0: "batch", 1: "seq"}})
    assert "m.blocks.0.qkv.weight" in [i.name for i in proto.graph.initializer]


def test_a_python_constant_that_cannot_follow_a_dynamic_axis_is_named():
    def f(x):
        return x + ember.randn(x.shape[0], 1).abs()
    with pytest.raises(ember.onnx.OnnxExporterError,
                       match="dim 0 of input 'x' reaches tensor _tensor_constant0"):
        ember.onnx.export(f, (ember.ones(2, 3),), io.BytesIO(), dynamic_axes={"x": [0]})


def test_an_op_without_a_lowering_names_the_op_and_the_module_path():
    class Odd(nn.Module):
        def forward(self, x):
            return ember.lgamma(x)
    m = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU(), Odd()))
    with pytest.raises(ember.onnx.UnsupportedOperatorError,
                       match=r"'aten::lgamma' .* \(in model\.1\.1\)"):
        ember.onnx.export(m, (ember.ones(1, 2),), io.BytesIO())


def test_export_params_false_makes_parameters_inputs():
    m = nn.Linear(3, 2)
    buf = io.BytesIO()
    ember.onnx.export(m, (ember.ones(1, 3),), buf, export_params=False, input_names=["x"])
    proto = onnx.load_from_string(buf.getvalue())
    assert [i.name for i in proto.graph.input] == ["x", "weight", "bias"]
    assert not proto.graph.initializer
    x = ember.randn(1, 3)
    got = ort.InferenceSession(buf.getvalue()).run(None, {
        "x": x.numpy(), "weight": m.weight.detach().numpy(), "bias": m.bias.detach().numpy()})
    np.testing.assert_allclose(got[0], m(x).detach().numpy(), rtol=1e-6)


# ---- pytorch/examples' word_language_model (model.py, condensed; main.py's export_onnx) -------

class _RNNModel(nn.Module):
    def __init__(self, rnn_type, ntoken=50, ninp=16, nhid=16, nlayers=2):
        super().__init__()
        self.ntoken, self.rnn_type, self.nhid, self.nlayers = ntoken, rnn_type, nhid, nlayers
        self.drop, self.encoder = nn.Dropout(0.5), nn.Embedding(ntoken, ninp)
        self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=0.5) \
            if rnn_type in ("LSTM", "GRU") else nn.RNN(ninp, nhid, nlayers, nonlinearity="tanh")
        self.decoder = nn.Linear(nhid, ntoken)

    def forward(self, input, hidden):
        output, hidden = self.rnn(self.drop(self.encoder(input)), hidden)
        decoded = self.decoder(self.drop(output)).view(-1, self.ntoken)
        return ember.nn.functional.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        h = weight.new_zeros(self.nlayers, bsz, self.nhid)
        return (h, weight.new_zeros(self.nlayers, bsz, self.nhid)) if self.rnn_type == "LSTM" \
            else h


class _TransformerModel(nn.Transformer):
    def __init__(self, ntoken=50, ninp=16):
        super().__init__(d_model=ninp, nhead=2, dim_feedforward=32, num_encoder_layers=2)
        self.input_emb, self.decoder, self.ninp = nn.Embedding(ntoken, ninp), \
            nn.Linear(ninp, ntoken), ninp
        pe = ember.zeros(100, ninp)
        pos = ember.arange(0, 100, dtype=ember.float).unsqueeze(1)
        div = ember.exp(ember.arange(0, ninp, 2).float() * (-math.log(10000.0) / ninp))
        pe[:, 0::2], pe[:, 1::2] = ember.sin(pos * div), ember.cos(pos * div)
        self.register_buffer("pe", pe.unsqueeze(0).transpose(0, 1))

    def forward(self, src):
        mask = ember.log(ember.tril(ember.ones(len(src), len(src))))
        src = self.input_emb(src) * math.sqrt(self.ninp)
        src = src + self.pe[:src.size(0), :]
        return ember.nn.functional.log_softmax(self.decoder(self.encoder(src, mask=mask)), dim=-1)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN_TANH", "Transformer"])
def test_word_language_model(kind):
    ember.manual_seed(0)
    inp = ember.randint(0, 50, (7, 2))
    if kind == "Transformer":
        _run(_TransformerModel(), (inp,))
        return
    m = _RNNModel(kind)
    hidden = m.init_hidden(2)
    flat = (inp,) + (hidden if kind == "LSTM" else (hidden,))

    class Flat(nn.Module):          # (the inputs as _run feeds them: one tensor each)
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, x, *h):
            out, hid = self.m(x, h if kind == "LSTM" else h[0])
            return (out,) + (hid if kind == "LSTM" else (hid,))
    _run(Flat(), flat)


def test_sorting_padding_pieces_and_einsum():
    def f(x, y):
        v, i = x.topk(2, dim=1)
        s, _ = x.sort(dim=0, descending=True)
        a, b = x.chunk(2, dim=1)
        p = ember.nn.functional.pad(x, (1, 2), value=0.5)
        return v, i, s, a * b, p, ember.einsum("ij,jk->ik", x, y), x.narrow(0, 1, 2), \
            x.unbind(1)[0], x.repeat(2, 1), x.index_select(1, ember.tensor([0, 2]))
    _run(f, (ember.randn(4, 4), ember.randn(4, 3)))


def _coverage():
    """(name, model, args) for each layer and op family the exporter covers."""
    x = ember.randn(2, 6, 5, 5)
    acts = ["ReLU", "ReLU6", "LeakyReLU", "ELU", "SELU", "CELU", "GELU", "SiLU", "Mish",
            "Hardswish", "Hardsigmoid", "Hardtanh", "Sigmoid", "Tanh", "Softplus", "Softsign",
            "Softshrink", "Hardshrink", "Tanhshrink", "LogSigmoid", "PReLU", "RReLU", "Softmin"]
    out = [(a, getattr(nn, a)(), (x,)) for a in acts]
    mha, lstm = nn.MultiheadAttention(8, 2, batch_first=True), \
        nn.LSTM(4, 6, batch_first=True, bidirectional=True)
    mask = ember.triu(ember.ones(5, 5, dtype=ember.bool), 1)
    out += [
        ("GLU", nn.GLU(1), (x,)), ("Threshold", nn.Threshold(0.1, 0.5), (x,)),
        ("Conv1d", nn.Conv1d(6, 4, 3, padding=1), (ember.randn(2, 6, 9),)),
        ("Conv3d", nn.Conv3d(6, 4, 3), (ember.randn(1, 6, 5, 5, 5),)),
        ("ConvTranspose2d", nn.ConvTranspose2d(6, 4, 3, 2, 1, output_padding=1), (x,)),
        ("GroupNorm", nn.GroupNorm(3, 6), (x,)),
        ("InstanceNorm2d", nn.InstanceNorm2d(6, affine=True), (x,)),
        ("RMSNorm", nn.RMSNorm(5), (x,)), ("LayerNorm", nn.LayerNorm([5, 5]), (x,)),
        ("AvgPool2d", nn.AvgPool2d(3, stride=2, padding=1), (x,)),
        ("AvgPool2d_ceil", nn.AvgPool2d(2, 2, 1, ceil_mode=True, count_include_pad=False), (x,)),
        ("AvgPool2d_divisor", nn.AvgPool2d(2, divisor_override=3), (ember.randn(6, 5, 5),)),
        ("AvgPool1d", nn.AvgPool1d(3, 2, 1), (ember.randn(2, 6, 9),)),
        ("MaxPool1d", nn.MaxPool1d(2), (ember.randn(2, 6, 9),)),
        ("AdaptiveAvgPool2d", nn.AdaptiveAvgPool2d(2), (ember.randn(2, 6, 6, 6),)),
        ("AdaptiveMaxPool2d", nn.AdaptiveMaxPool2d(1), (x,)),
        ("Upsample", nn.Upsample(scale_factor=2), (x,)),
        ("MultiheadAttention", lambda q: mha(q, q, q, attn_mask=mask, need_weights=False)[0],
         (ember.randn(2, 5, 8),)),
        ("TransformerDecoder", nn.TransformerDecoder(nn.TransformerDecoderLayer(
            8, 2, 16, batch_first=True), 1), (ember.randn(2, 5, 8), ember.randn(2, 4, 8))),
        ("GRU", nn.GRU(4, 6, batch_first=True), (ember.randn(2, 5, 4),)),
        ("LSTM bidirectional", lambda x: lstm(x)[0], (ember.randn(2, 5, 4),)),
        ("RNN relu", nn.RNN(4, 6, nonlinearity="relu"), (ember.randn(5, 2, 4),)),
        ("sdpa with a float mask", lambda q, m: nn.functional.scaled_dot_product_attention(
            q, q, q, attn_mask=m), (ember.randn(2, 3, 5, 8), ember.randn(5, 5))),
        ("reductions", lambda x: (x.sum(), x.mean(-1), x.amax(1), x.std(1), x.var(0),
                                  x.prod(1), x.norm(dim=1), x.logsumexp(1), x.argmax(1),
                                  x.min(1).values), (ember.randn(3, 4),)),
        ("cumsum, where, masked_fill", lambda x: (x.cumsum(1), ember.where(x > 0, x, 0.0),
                                                  x.masked_fill(x < 0, 1.0)), (ember.randn(3, 4),)),
        ("indexing", lambda x: (x[1:, ::2], x[:, None, 0], x[ember.tensor([0, 2])], x.flip(0),
                                x.roll(1, 0), x.roll(3), x.t()), (ember.randn(3, 4),)),
        ("math", lambda x: (x.abs().log(), x.abs().sqrt(), x.pow(2), x.sin(), x.atan(),
                            x.floor(), x.round(), x.sign(), x.clamp(-0.5, 0.5)),
         (ember.randn(3, 4),))]
    return out


_COVERAGE = _coverage()


@pytest.mark.parametrize("name,model,args", _COVERAGE, ids=[c[0] for c in _COVERAGE])
def test_coverage(name, model, args):
    _run(model, args)


@pytest.mark.parametrize("opset", [13, 18, 21])
def test_other_opsets(opset):
    ember.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 6), nn.LayerNorm(6), nn.GELU(), nn.RMSNorm(6))
    _run(m, (ember.randn(3, 4),), opset_version=opset)
    _run(lambda x: (x.mean(1), x.amax(0), x.std(1), x.norm(dim=0), x.max(1).values),
         (ember.randn(3, 4),), opset_version=opset)
    with pytest.raises(ValueError, match="opset versions 13 to 21"):
        ember.onnx.export(m, (ember.randn(3, 4),), io.BytesIO(), opset_version=11)


def test_training_mode_refuses_a_random_mask_and_dynamic_shapes_are_accepted():
    m = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    with pytest.raises(ember.onnx.OnnxExporterError, match="random mask"):
        ember.onnx.export(m, (ember.randn(2, 4),), io.BytesIO(),
                          training=ember.onnx.TrainingMode.TRAINING)
    from ember.export import Dim
    proto = _run(m, (ember.randn(2, 4),), (ember.randn(6, 4),),
                 dynamic_shapes={"in0": {0: Dim("batch")}})
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
