"""A character-level GPT in the style of nanoGPT: causal self-attention written out with
F.scaled_dot_product_attention, pre-norm blocks, weight tying, AdamW with a cosine schedule,
then sampling. Trains on Alice in Wonderland (shipped with ember) or on any text file.

    python examples/char_gpt.py --steps 300
    python examples/char_gpt.py --text my_corpus.txt

(`ember demo chargpt` trains a similar model built from nn.TransformerEncoderLayer, with a
progress bar, a checkpoint and a loss plot.)
"""
import argparse
import math

import ember as torch
import ember.nn.functional as F
from ember import nn
from ember.demo.chargpt import load_text


class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads, dropout):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in self.qkv(x).split(d, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d, heads, dropout):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads, dropout)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * d, d), nn.Dropout(dropout))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, block, d=64, heads=4, layers=2, dropout=0.0):
        super().__init__()
        self.block = block
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.Sequential(*[Block(d, heads, dropout) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight            # weight tying, as GPT-2
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx, targets=None):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t))
        logits = self.lm_head(self.ln_f(self.blocks(x)))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    @torch.no_grad()
    def generate(self, idx, n, temperature=1.0, top_k=None):
        for _ in range(n):
            logits, _ = self(idx[:, -self.block:])
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("inf")
            idx = torch.cat((idx, torch.multinomial(F.softmax(logits, dim=-1), 1)), dim=1)
        return idx


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--text", help="a UTF-8 text file (default: Alice in Wonderland)")
    p.add_argument("--chars", type=int, default=None, help="use only the first N characters")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--block", type=int, default=64)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--sample-chars", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)

    text = open(args.text, encoding="utf-8").read() if args.text else load_text()
    text = text[:args.chars]
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text])
    n = int(0.9 * len(data))
    train_data, val_data = data[:n], data[n:]

    def get_batch(split):
        d = train_data if split == "train" else val_data
        ix = torch.randint(len(d) - args.block - 1, (args.batch_size,))
        x = torch.stack([d[i:i + args.block] for i in ix.tolist()])
        y = torch.stack([d[i + 1:i + args.block + 1] for i in ix.tolist()])
        return x, y

    @torch.no_grad()
    def estimate_loss(split, iters=8):
        model.eval()
        loss = sum(model(*get_batch(split))[1].item() for _ in range(iters)) / iters
        model.train()
        return loss

    model = GPT(len(chars), args.block, args.d_model, layers=args.layers)
    print(f"{sum(q.numel() for q in model.parameters()):,} parameters, "
          f"vocabulary {len(chars)}, {len(train_data):,} training characters")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.99),
                            weight_decay=0.1)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps,
                                                       eta_min=args.lr / 10)
    initial = estimate_loss("val")
    for step in range(1, args.steps + 1):
        _, loss = model(*get_batch("train"))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % max(args.steps // 5, 1) == 0:
            print(f"step {step}: train loss {loss.item():.3f}")
    val = estimate_loss("val")
    print(f"val loss {val:.3f} (before training {initial:.3f}, "
          f"uniform {math.log(len(chars)):.3f})")
    start = torch.tensor([[stoi[text[0]]]])
    out = model.generate(start, args.sample_chars, temperature=0.8, top_k=20)[0, 1:]
    sample = "".join(chars[i] for i in out.tolist())
    print(sample)
    return {"val loss": val, "initial loss": initial, "sample": sample}


if __name__ == "__main__":
    main()
