"""The demo trains, evaluates, writes a checkpoint torch can load and a PNG loss curve."""
import os

from ember.demo import digits
from ember.demo.plot import save_curves
from oracle import torch


def test_digits_demo_short_run_writes_checkpoint_and_plot(tmp_path):
    acc = digits.run(epochs=2, out=str(tmp_path), seed=1)
    assert acc > 0.7            # two epochs; the full demo reaches >= 0.95 (see README)
    ckpt = torch.load(os.path.join(tmp_path, "digits_cnn.pt"), weights_only=True)
    assert ckpt["epochs"] == 2 and "features.0.weight" in ckpt["model"]
    with open(os.path.join(tmp_path, "digits_loss.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_loss_png_is_a_valid_image(tmp_path):
    p = save_curves(str(tmp_path / "c.png"), {"a": [3.0, 2.0, 1.0], "b": [1.0, 1.5, 0.5]},
                    width=64, height=32)
    data = open(p, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    assert int.from_bytes(data[16:20], "big") == 64 and int.from_bytes(data[20:24], "big") == 32
