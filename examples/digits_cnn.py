"""Classify the 8x8 handwritten digits ember ships with a small CNN, written as a PyTorch
program: Dataset/DataLoader, nn.Module, an optimizer, a scheduler, train/eval loops, save.

    python examples/digits_cnn.py --epochs 10
"""
import argparse

import ember as torch
import ember.nn.functional as F
from ember import nn
from ember.demo.digits import load_digits
from ember.utils.data import DataLoader, TensorDataset, random_split


class Net(nn.Module):
    def __init__(self, width=16):
        super().__init__()
        self.conv1 = nn.Conv2d(1, width, 3, padding=1)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, padding=1)
        self.bn = nn.BatchNorm2d(2 * width)
        self.fc = nn.Linear(2 * width * 4 * 4, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.bn(self.conv2(x))), 2)
        return self.fc(torch.flatten(x, 1))


def accuracy(model, loader):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
            total += len(y)
    model.train()
    return correct / total


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--limit", type=int, default=None, help="use only this many images")
    p.add_argument("--save", default=None, help="write the state_dict here")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    torch.manual_seed(args.seed)
    images, labels = load_digits()
    data = TensorDataset(torch.tensor(images[:args.limit]), torch.tensor(labels[:args.limit]))
    n_test = len(data) // 5
    train_set, test_set = random_split(data, [len(data) - n_test, n_test])
    train = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    test = DataLoader(test_set, batch_size=256)

    model = Net(args.width)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=max(args.epochs // 2, 1), gamma=0.3)
    for epoch in range(args.epochs):
        total = 0.0
        for x, y in train:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(y)
        sched.step()
        print(f"epoch {epoch + 1}: train loss {total / len(train_set):.4f}, "
              f"test accuracy {accuracy(model, test):.3f}")
    if args.save:
        torch.save(model.state_dict(), args.save)
    return {"loss": total / len(train_set), "accuracy": accuracy(model, test)}


if __name__ == "__main__":
    main()
