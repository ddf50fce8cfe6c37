"""Train a character-level transformer on *Alice's Adventures in Wonderland* (shipped in
ember/data, public domain), report the held-out loss and print a generated sample."""
import math
import os
import time
from importlib import resources

import numpy as np

import ember
from ember import nn

from .plot import save_curves
from .progress import Progress


def load_text():
    """The book's text (no Project Gutenberg header or licence); see ember/data/SOURCES.md."""
    return resources.files("ember.data").joinpath("alice.txt").read_text(encoding="utf-8")


class CharGPT(nn.Module):
    """A decoder-only transformer over characters: token and position embeddings, pre-norm
    ``TransformerEncoderLayer`` blocks under a causal mask, a final LayerNorm and a linear
    head.

    Args:
        vocab (int): number of distinct characters.
        block (int): the longest context, in characters.
        d_model (int), heads (int), layers (int), dropout (float): the usual sizes.

    Shape:
        input ``(batch, t)`` int64 with ``t <= block``; output ``(batch, t, vocab)`` logits.

    Example:
        >>> from ember.demo.chargpt import CharGPT
        >>> m = CharGPT(vocab=10, block=8, d_model=16, heads=2, layers=1)
        >>> m(ember.zeros(2, 5, dtype=ember.int64)).shape
        torch.Size([2, 5, 10])
    """

    def __init__(self, vocab, block=64, d_model=128, heads=4, layers=3, dropout=0.1):
        super().__init__()
        self.block = block
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(block, d_model)
        # ReLU rather than GPT's GELU: as good at this size, and a third of the step time
        # is GELU's erf on a 2-core CPU
        layer = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout,
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(d_model),
                                            enable_nested_tensor=False)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(ember.arange(t, device=idx.device))
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=idx.device)
        return self.head(self.blocks(x, mask=mask, is_causal=True))

    @ember.no_grad()
    def generate(self, idx, n, temperature=0.8, generator=None):
        """Append ``n`` sampled characters to each row of ``idx``."""
        was_training = self.training
        self.eval()
        for _ in range(n):
            logits = self(idx[:, -self.block:])[:, -1] / temperature
            nxt = ember.multinomial(logits.softmax(-1), 1, generator=generator)
            idx = ember.cat([idx, nxt], 1)
        self.train(was_training)
        return idx


def _batches(data, block, batch_size, rng):
    """Random windows: inputs ``data[i:i+block]`` and targets shifted by one character."""
    starts = rng.integers(0, len(data) - block - 1, batch_size)
    x = np.stack([data[s:s + block] for s in starts])
    y = np.stack([data[s + 1:s + block + 1] for s in starts])
    return ember.tensor(x), ember.tensor(y)


def evaluate(model, data, block, batch_size=64, max_windows=512):
    """Mean cross-entropy (nats per character) over evenly spaced held-out windows."""
    starts = np.linspace(0, len(data) - block - 1, min(max_windows, len(data) // block))
    starts = starts.astype(np.int64)
    total, count, dev = 0.0, 0, model.head.weight.device
    model.eval()
    with ember.no_grad():
        for i in range(0, len(starts), batch_size):
            s = starts[i:i + batch_size]
            x = ember.tensor(np.stack([data[j:j + block] for j in s]), device=dev)
            y = ember.tensor(np.stack([data[j + 1:j + block + 1] for j in s]), device=dev)
            logits = model(x)
            total += nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 y.reshape(-1), reduction="sum").item()
            count += y.numel()
    model.train()
    return total / count


def run(epochs=6, device="cpu", out="ember-demo-out", seed=0, steps_per_epoch=50,
        batch_size=32, block=64, d_model=96, heads=4, layers=3, dropout=0.0, lr=6e-3,
        sample_chars=300, text=None, val_fraction=0.1):
    """Train, evaluate, save ``chargpt.pt`` (loadable by torch.load: weights, vocabulary and
    sizes) and ``chargpt_loss.png`` under ``out``, print a sample. Returns a dict with the
    held-out loss per epoch, the loss of a uniform guess and the sample."""
    ember.manual_seed(seed)
    text = load_text() if text is None else text
    chars = sorted(set(text))
    lookup = {c: i for i, c in enumerate(chars)}
    data = np.array([lookup[c] for c in text], dtype=np.int64)
    n_val = int(len(data) * val_fraction)
    train, val = data[:-n_val], data[-n_val:]             # the book's last pages are held out
    config = dict(vocab=len(chars), block=block, d_model=d_model, heads=heads, layers=layers)
    model = CharGPT(**config, dropout=dropout).to(device)
    opt = ember.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.99))
    total = epochs * steps_per_epoch
    sched = ember.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=total, pct_start=0.1)
    rng = np.random.default_rng(seed)
    print(f"ember demo: char-GPT on Alice in Wonderland, {len(train):,} train / {n_val:,} "
          f"held-out characters, vocabulary {len(chars)}, "
          f"{sum(p.numel() for p in model.parameters()):,} parameters, device {device}")
    history, val_loss, start = {"train loss": []}, [], time.perf_counter()
    for epoch in range(1, epochs + 1):
        bar = Progress(epoch, epochs, steps_per_epoch)
        for _ in range(steps_per_epoch):
            x, y = (t.to(device) for t in _batches(train, block, batch_size, rng))
            logits = model(x)
            loss = nn.functional.cross_entropy(logits.reshape(-1, len(chars)), y.reshape(-1))
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            history["train loss"].append(loss.item())
            bar.update(batch_size, history["train loss"][-1])
        val_loss.append(evaluate(model, val, block))
        bar.close(f"  held-out loss {val_loss[-1]:.3f}")
    os.makedirs(out, exist_ok=True)
    ckpt = os.path.join(out, "chargpt.pt")
    ember.save({"model": model.state_dict(), "config": config, "chars": "".join(chars),
                "epochs": epochs, "val_loss": val_loss[-1]}, ckpt)
    history["held-out loss"] = [v for v in val_loss for _ in range(steps_per_epoch)]
    png = save_curves(os.path.join(out, "chargpt_loss.png"), history)
    prompt = ember.tensor([[lookup[c] for c in "Alice "]], device=device)
    gen = ember.Generator().manual_seed(seed)
    ids = model.generate(prompt, sample_chars, generator=gen)[0, prompt.shape[1]:].tolist()
    sample = "".join(chars[i] for i in ids)
    print(f"held-out loss {val_loss[-1]:.3f} nats/char (uniform guess {math.log(len(chars)):.3f})"
          f" after {epochs} epochs in {time.perf_counter() - start:.1f}s; checkpoint {ckpt}; "
          f"loss curve {png}\nsample:\nAlice {sample}")
    return {"val_loss": val_loss, "uniform": math.log(len(chars)), "sample": sample}
