"""An LSTM reads sequences of numbers of different lengths and learns to output their sum:
padding, pack_padded_sequence, a many-to-one recurrent model and gradient clipping.

    python examples/lstm_sum.py --steps 400
"""
import argparse

import ember as torch
from ember import nn
from ember.nn.utils.rnn import pack_padded_sequence, pad_sequence


class Summer(nn.Module):
    def __init__(self, hidden=32, layers=1):
        super().__init__()
        self.lstm = nn.LSTM(1, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, padded, lengths):
        packed = pack_padded_sequence(padded, lengths, batch_first=True, enforce_sorted=False)
        _, (h, _) = self.lstm(packed)
        return self.head(h[-1]).squeeze(1)     # the last layer's state after each sequence


def batch(size, max_len, gen):
    """Random sequences of U(0, 1) numbers, lengths 1..max_len, and their sums."""
    lengths = torch.randint(1, max_len + 1, (size,), generator=gen)
    seqs = [torch.rand(int(n), 1, generator=gen) for n in lengths]
    return pad_sequence(seqs, batch_first=True), lengths, torch.stack([s.sum() for s in seqs])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-len", type=int, default=12)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    model = Summer(args.hidden)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(1, args.steps + 1):
        x, lengths, target = batch(args.batch_size, args.max_len, gen)
        loss = nn.functional.mse_loss(model(x, lengths), target)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % max(args.steps // 10, 1) == 0:
            print(f"step {step}: mse {loss.item():.4f}")

    model.eval()
    with torch.no_grad():
        x, lengths, target = batch(256, args.max_len, gen)
        test = nn.functional.mse_loss(model(x, lengths), target).item()
        # predicting the mean sum for every sequence: what a model that ignores its input gets
        baseline = target.var(correction=0).item()
        print(f"held-out mse {test:.4f} (predicting the mean: {baseline:.4f})")
        x = torch.tensor([[0.5], [0.25], [0.125]]).unsqueeze(0)
        print(f"sum(0.5, 0.25, 0.125) = {model(x, torch.tensor([3])).item():.3f}")
    return {"mse": test, "baseline": baseline}


if __name__ == "__main__":
    main()
