"""Mixed-precision training with autocast and GradScaler: a small transformer classifies the
8x8 digits read as sequences of 8 rows, once in float32 and once under autocast, and the two
runs are compared.

    python examples/mixed_precision.py --dtype bfloat16 --epochs 4

Under autocast, matmuls and linear layers run in the low-precision dtype while softmax, layer
norm and the loss stay in float32 (torch's op policies). float16 needs a GradScaler so small
gradients do not underflow; bfloat16 has float32's range and does not.
"""
import argparse
import time

import ember as torch
from ember import nn
from ember.demo.digits import load_digits


class RowTransformer(nn.Module):
    def __init__(self, d=64, heads=4, layers=2):
        super().__init__()
        self.embed = nn.Linear(8, d)
        self.pos = nn.Parameter(torch.zeros(8, d))
        layer = nn.TransformerEncoderLayer(d, heads, 2 * d, dropout=0.0, batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, 10)

    def forward(self, x):                              # x: (batch, 8 rows, 8 pixels)
        return self.head(self.encoder(self.embed(x) + self.pos).mean(1))


def train(images, labels, dtype, epochs, batch_size, seed):
    torch.manual_seed(seed)
    model = RowTransformer()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    amp = dtype is not None
    scaler = torch.amp.GradScaler("cpu", enabled=dtype is torch.float16)
    n_train = len(labels) * 4 // 5
    start = time.perf_counter()
    for _ in range(epochs):
        for idx in torch.randperm(n_train).split(batch_size):
            with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=amp):
                logits = model(images[idx])
                loss = nn.functional.cross_entropy(logits, labels[idx])
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.unscale_(opt)                       # clip the true gradients
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
    seconds = time.perf_counter() - start
    model.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=amp):
        test = model(images[n_train:])
        test_loss = nn.functional.cross_entropy(test.float(), labels[n_train:]).item()
        acc = (test.argmax(1) == labels[n_train:]).float().mean().item()
    return {"loss": test_loss, "accuracy": acc, "seconds": seconds,
            "logits dtype": str(logits.dtype)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", choices=["bfloat16", "float16"], default="bfloat16")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--limit", type=int, default=None, help="use only this many images")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    images, labels = load_digits()
    perm = torch.randperm(len(labels), generator=torch.Generator().manual_seed(args.seed))
    images = torch.tensor(images[:, 0])[perm][:args.limit]
    labels = torch.tensor(labels)[perm][:args.limit]
    results = {}
    for name, dtype in (("float32", None), (args.dtype, getattr(torch, args.dtype))):
        r = results[name] = train(images, labels, dtype, args.epochs, args.batch_size, args.seed)
        print(f"{name:>8}: test loss {r['loss']:.4f}, accuracy {r['accuracy']:.3f}, "
              f"logits {r['logits dtype']}, {r['seconds']:.1f}s")
    return results


if __name__ == "__main__":
    main()
