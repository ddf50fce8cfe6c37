"""Train a small CNN on the 1,797 handwritten 8x8 digits ember ships (scikit-learn's copy of
the UCI set) and report held-out accuracy."""
import os
import time
from importlib import resources

import numpy as np

import ember
from ember import nn

from .plot import save_curves
from .progress import Progress


def load_digits():
    """(images float32 (N, 1, 8, 8) scaled to [0, 1], labels int64 (N,))."""
    with resources.files("ember.data").joinpath("digits.npz").open("rb") as f:
        d = np.load(f)
        return (d["images"].astype(np.float32)[:, None] / 16.0, d["labels"].astype(np.int64))


class DigitsCNN(nn.Module):
    """conv(1->16) relu conv(16->32) relu maxpool -> linear(512->64) relu -> linear(64->10)."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(),
                                        nn.Dropout(0.1), nn.Linear(64, 10))

    def forward(self, x):
        return self.classifier(self.features(x))


def evaluate(model, x, y, batch=256):
    model.eval()
    correct = 0
    with ember.no_grad():
        for i in range(0, len(x), batch):
            logits = model(x[i:i + batch])
            correct += int((logits.argmax(1) == y[i:i + batch]).sum())
    model.train()
    return correct / len(x)


def run(epochs=12, device="cpu", out="ember-demo-out", seed=0, batch_size=32, lr=2e-3,
        test_fraction=0.2):
    """Train, evaluate, save ``digits_cnn.pt`` (loadable by torch.load) and
    ``digits_loss.png`` under ``out``; returns the test accuracy."""
    ember.manual_seed(seed)
    images, labels = load_digits()
    perm = np.random.default_rng(seed).permutation(len(labels))
    n_test = int(len(labels) * test_fraction)
    test, train = perm[:n_test], perm[n_test:]
    xtr, ytr = ember.tensor(images[train], device=device), ember.tensor(labels[train],
                                                                         device=device)
    xte, yte = ember.tensor(images[test], device=device), ember.tensor(labels[test], device=device)
    model = DigitsCNN().to(device)
    opt = ember.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    sched = ember.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
    loss_fn = nn.CrossEntropyLoss()
    steps = (len(train) + batch_size - 1) // batch_size
    print(f"ember demo: digits CNN, {len(train)} train / {n_test} test images, "
          f"{sum(p.numel() for p in model.parameters()):,} parameters, device {device}")
    history, test_acc, start = {"train loss": []}, [], time.perf_counter()
    for epoch in range(1, epochs + 1):
        bar = Progress(epoch, epochs, steps)
        order = ember.randperm(len(train))
        for i in range(0, len(train), batch_size):
            idx = order[i:i + batch_size]
            loss = loss_fn(model(xtr[idx]), ytr[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            history["train loss"].append(loss.item())
            bar.update(len(idx), history["train loss"][-1])
        sched.step()
        test_acc.append(evaluate(model, xte, yte))
        bar.close(f"  test accuracy {test_acc[-1]:.3f}")
    os.makedirs(out, exist_ok=True)
    ckpt = os.path.join(out, "digits_cnn.pt")
    ember.save({"model": model.state_dict(), "epochs": epochs, "test_accuracy": test_acc[-1]}, ckpt)
    per_step = history["train loss"]
    means = [float(np.mean(per_step[i:i + steps])) for i in range(0, len(per_step), steps)]
    history["epoch mean"] = [m for m in means for _ in range(steps)][:len(per_step)]
    png = save_curves(os.path.join(out, "digits_loss.png"), history)
    print(f"test accuracy {test_acc[-1]:.4f} after {epochs} epochs in "
          f"{time.perf_counter() - start:.1f}s; checkpoint {ckpt}; loss curve {png}")
    return test_acc[-1]
