"""The demo trains, evaluates, writes a checkpoint torch can load and a PNG loss curve."""
import os
import signal
import subprocess
import sys

import ember
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


def test_chargpt_demo_tiny_run_learns_saves_and_samples(tmp_path, capsys):
    from ember.demo import chargpt
    res = chargpt.run(epochs=2, steps_per_epoch=12, batch_size=8, block=24, d_model=32,
                      heads=2, layers=1, lr=1e-2, sample_chars=50, out=str(tmp_path), seed=3)
    assert res["val_loss"][-1] < res["uniform"] - 0.7        # ~4.26 nats for a uniform guess
    assert len(res["sample"]) == 50 and set(res["sample"]) <= set(chargpt.load_text())
    printed = capsys.readouterr().out
    assert "held-out loss" in printed and "Alice " + res["sample"] in printed
    ckpt = torch.load(os.path.join(tmp_path, "chargpt.pt"), weights_only=True)
    assert ckpt["config"] == dict(vocab=71, block=24, d_model=32, heads=2, layers=1)
    assert len(ckpt["chars"]) == 71 and ckpt["model"]["tok.weight"].shape == (71, 32)
    # the checkpoint rebuilds the model, which gives the logits ember's model gives
    m = chargpt.CharGPT(**ckpt["config"])
    m.load_state_dict(ember.load(os.path.join(tmp_path, "chargpt.pt"))["model"])
    assert m(ember.zeros(1, 5, dtype=ember.int64)).shape == (1, 5, 71)
    with open(os.path.join(tmp_path, "chargpt_loss.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_corpus_is_the_book_without_the_gutenberg_licence():
    from ember.demo import chargpt
    text = chargpt.load_text()
    assert text.startswith("ALICE'S ADVENTURES IN WONDERLAND") and "THE END" in text[-40:]
    assert "gutenberg" not in text.lower() and len(text) < 1_000_000 and text.isascii()


def test_ctrl_c_leaves_no_checkpoint(tmp_path):
    proc = subprocess.Popen([sys.executable, "-u", "-m", "ember", "demo", "chargpt", "--out",
                             str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().startswith("ember demo: char-GPT")   # training started
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130 and "interrupted: no checkpoint written" in err
    assert os.listdir(tmp_path) == []


def test_make_demo_installs_the_runtime_dependencies_only(tmp_path):
    # a newcomer's first command: ember, numpy and ml_dtypes (~70 MB), not the test extra
    import shutil
    import tomllib
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    assert sorted(d.split(">")[0].split("=")[0] for d in deps) == ["ml_dtypes", "numpy"]
    if shutil.which("make") is None:
        return
    plan = subprocess.run(["make", "-n", "demo", f"VENV={tmp_path / 'venv'}"], cwd=root,
                          capture_output=True, text=True, check=True).stdout
    installs = [line for line in plan.splitlines() if "pip install" in line]
    assert any(line.endswith("pip install -q -e .") for line in installs), plan
    assert "[test]" not in plan and "torch" not in plan and "ember demo" in plan
    # and the demo itself loads nothing beyond them
    out = subprocess.run([sys.executable, "-c", "import sys, ember.demo.digits, "
                          "ember.demo.chargpt, ember.demo.plot, ember.demo.progress; "
                          "print(*{m.split('.')[0] for m in sys.modules} - "
                          "set(sys.stdlib_module_names))"],
                         capture_output=True, text=True, check=True).stdout
    # (names with an underscore: the interpreter's and site's own hooks; cython_runtime:
    # the module Cython-compiled extensions such as numpy.random share)
    assert {m for m in out.split() if m[0] != "_"} <= {"ember", "numpy", "ml_dtypes",
                                                       "cython_runtime"}, out
