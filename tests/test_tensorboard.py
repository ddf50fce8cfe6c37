"""ember.utils.tensorboard against torch.utils.tensorboard: the same calls write the same events
(TensorBoard's own reader reads them back), the same files, the same errors."""
import os
import re

import numpy as np
import pytest

pytest.importorskip("tensorboard")
torch = pytest.importorskip("torch")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader  # noqa
from torch.utils.tensorboard import SummaryWriter as TorchWriter  # noqa: E402

import ember  # noqa: E402
from ember.utils.tensorboard import FileWriter, SummaryWriter  # noqa: E402

R = np.random.default_rng(0)
IMG = R.random((3, 6, 5), dtype=np.float32)
BATCH = R.random((3, 3, 4, 4), dtype=np.float32)
VALUES = R.standard_normal(200)


def _events(logdir):
    """Every event of every event file directly in ``logdir``, wall times dropped."""
    out = []
    for f in sorted(os.listdir(logdir)):
        if f.startswith("events.out.tfevents"):
            for e in EventFileLoader(os.path.join(logdir, f)).Load():
                e.ClearField("wall_time")
                out.append(e)
    return out


def _log_everything(w, lib):
    t = lib.tensor
    w.add_scalar("loss", 0.5, 0, walltime=1.0)
    w.add_scalar("loss", t(0.25), 1)
    w.add_scalar("loss", np.float32(0.125), 2)
    w.add_scalar("new", t([3.5]), 0, new_style=True)
    w.add_scalar("new64", 1 / 3, 0, new_style=True, double_precision=True)
    w.add_histogram("hist", t(VALUES), 0)
    w.add_histogram("hist_auto", t(VALUES), 1, bins="auto")
    w.add_histogram("hist_max", t(VALUES), 1, bins=64, max_bins=10)
    w.add_histogram("hist_int", t(np.arange(20)), 1)
    w.add_histogram_raw("raw", 0.0, 3.0, 4, 6.0, 14.0, [1.0, 2.0, 3.0], [1, 2, 1], 2)
    w.add_image("chw", t(IMG), 0)
    w.add_image("hwc", t((IMG * 255).astype(np.uint8).transpose(1, 2, 0)), 0, dataformats="HWC")
    w.add_image("hw", t(IMG[0]), 0, dataformats="HW")
    w.add_image("1hw", t(IMG[:1]), 0)
    w.add_images("nchw", t(BATCH), 0)
    w.add_images("nhwc", t(BATCH.transpose(0, 2, 3, 1)), 0, dataformats="NHWC")
    w.add_image_with_boxes("boxes", t(IMG), t([[0.0, 0.0, 3.0, 4.0]]), 0)
    w.add_text("note", "**hello** ünïcode", 3)
    labels, preds = R.integers(0, 2, 50), R.random(50)
    w.add_pr_curve("pr", t(labels), t(preds), 0)
    w.add_pr_curve("pr_w", t(labels), t(preds), 1, num_thresholds=10, weights=np.linspace(0, 1, 50))
    w.add_audio("sound", t(np.sin(np.linspace(0, 20, 400))), 0, sample_rate=8000)
    for dt in ("float32", "float64", "int64", "int32", "bool", "float16", "bfloat16",
               "complex64", "uint8"):
        w.add_tensor("tensor_" + dt, t([[1, 0, 2]]).to(getattr(lib, dt)), 0)
    w.add_custom_scalars_multilinechart(["loss", "new"], category="cat", title="lines")
    w.add_custom_scalars_marginchart(["loss", "new", "new64"])


def test_same_events_as_torch(tmp_path):
    R.bit_generator.state = np.random.default_rng(1).bit_generator.state
    with SummaryWriter(tmp_path / "ember") as w:
        _log_everything(w, ember)
    R.bit_generator.state = np.random.default_rng(1).bit_generator.state
    with TorchWriter(tmp_path / "torch") as w:
        _log_everything(w, torch)
    mine, theirs = _events(tmp_path / "ember"), _events(tmp_path / "torch")
    assert len(mine) == len(theirs) > 30
    for a, b in zip(mine, theirs):
        assert a == b, (a.summary.value[0].tag if a.HasField("summary") else a)


def test_tensorboard_reads_the_values_back(tmp_path):
    with SummaryWriter(tmp_path) as w:
        for step, v in enumerate([1.0, 0.5, 0.25]):
            w.add_scalar("train/loss", ember.tensor(v), step)
        w.add_histogram("w", ember.tensor(VALUES), 7)
        w.add_image("img", ember.tensor(IMG), 1)
        w.add_audio("a", ember.zeros(100), 2, sample_rate=1000)
        w.add_text("t", "hi", 4)
    acc = EventAccumulator(str(tmp_path), size_guidance={k: 0 for k in
                                                         ("scalars", "histograms", "images",
                                                          "audio", "tensors")}).Reload()
    tags = acc.Tags()
    assert tags["scalars"] == ["train/loss"] and tags["histograms"] == ["w"]
    assert [(e.step, e.value) for e in acc.Scalars("train/loss")] == [(0, 1.0), (1, 0.5),
                                                                      (2, 0.25)]
    h = acc.Histograms("w")[0]
    assert h.step == 7 and h.histogram_value.num == 200
    assert h.histogram_value.sum == pytest.approx(VALUES.sum())
    img = acc.Images("img")[0]
    assert (img.step, img.width, img.height) == (1, 5, 6)
    from PIL import Image
    import io
    png = np.asarray(Image.open(io.BytesIO(img.encoded_image_string)))
    np.testing.assert_array_equal(png, (IMG * 255).clip(0, 255).astype(np.uint8).transpose(1, 2, 0))
    a = acc.Audio("a")[0]
    assert (a.step, a.sample_rate, a.length_frames, a.content_type) == (2, 1000, 100, "audio/wav")
    t = acc.Tensors("t/text_summary")[0]
    assert t.step == 4 and t.tensor_proto.string_val == [b"hi"]


def test_add_scalars_writes_a_run_per_tag(tmp_path):
    with SummaryWriter(tmp_path / "ember") as w, TorchWriter(tmp_path / "torch") as tw:
        for writer in (w, tw):
            writer.add_scalars("run/a", {"x": 1.0, "y": 2.0}, 0, walltime=5.0)
            writer.add_scalars("run/a", {"x": 3.0}, 1)
    runs = [sorted(f for f in os.listdir(tmp_path / d) if not f.startswith("events"))
            for d in ("ember", "torch")]
    assert runs[0] == runs[1] == ["run_a_x", "run_a_y"]
    for sub in ("run_a_x", "run_a_y"):
        assert _events(tmp_path / "ember" / sub) == _events(tmp_path / "torch" / sub)
    acc = EventAccumulator(str(tmp_path / "ember" / "run_a_x")).Reload()
    assert [(e.step, e.value) for e in acc.Scalars("run/a")] == [(0, 1.0), (1, 3.0)]


def test_add_hparams_as_torch(tmp_path):
    hp = {"lr": 0.1, "opt": "adam", "bn": True, "layers": 3, "none": None,
          "t": torch.tensor([0.5])}
    domain = {"opt": ["adam", "sgd"], "layers": [2, 3]}
    with SummaryWriter(tmp_path / "ember") as w, TorchWriter(tmp_path / "torch") as tw:
        w.add_hparams({**hp, "t": ember.tensor([0.5])}, {"hp/acc": 0.9}, domain, run_name="r",
                      global_step=2)
        tw.add_hparams(hp, {"hp/acc": 0.9}, domain, run_name="r", global_step=2)
    assert _events(tmp_path / "ember" / "r") == _events(tmp_path / "torch" / "r")
    acc = EventAccumulator(str(tmp_path / "ember" / "r")).Reload()
    assert acc.Scalars("hp/acc")[0].value == pytest.approx(0.9)
    with pytest.raises(TypeError, match="hparam_dict and metric_dict should be dictionary"):
        w.add_hparams([1], {})
    with pytest.raises(TypeError, match=r"hparam_domain_discrete\[lr\] should be a list"):
        w.add_hparams({"lr": 0.1}, {}, {"lr": ["x"]})
    with pytest.raises(ValueError, match="value should be one of int, float, str, bool"):
        w.add_hparams({"lr": [0.1]}, {})


def test_add_embedding_writes_torch_files(tmp_path):
    mat = R.standard_normal((4, 3)).astype(np.float32)
    imgs = R.random((4, 3, 5, 5), dtype=np.float32)
    meta = [["a", 1], ["b", 2], ["c", 3], ["d", 4]]
    with SummaryWriter(tmp_path / "ember") as w, TorchWriter(tmp_path / "torch") as tw:
        for writer, lib in ((w, ember), (tw, torch)):
            writer.add_embedding(lib.tensor(mat), metadata=meta, label_img=lib.tensor(imgs),
                                 global_step=3, tag="emb/1", metadata_header=["l", "n"])
            writer.add_embedding(lib.tensor(mat), metadata=["p", "q", "r", "s"])
    files = sorted(os.path.relpath(os.path.join(d, f), tmp_path / "torch")
                   for d, _, fs in os.walk(tmp_path / "torch") for f in fs
                   if not f.startswith("events"))
    assert "00003/emb%2f1/sprite.png" in files and "projector_config.pbtxt" in files
    for f in files:
        assert (tmp_path / "ember" / f).read_bytes() == (tmp_path / "torch" / f).read_bytes(), f
    with pytest.raises(AssertionError, match="#labels should equal with #data points"):
        w.add_embedding(ember.tensor(mat), metadata=["a"], global_step=9)
    with pytest.raises(AssertionError, match="mat should be 2D"):
        w.add_embedding(ember.zeros(4), global_step=10)


def test_add_figure_renders_the_figure(tmp_path):
    plt = pytest.importorskip("matplotlib.pyplot")
    figs = []
    with SummaryWriter(tmp_path / "ember") as w, TorchWriter(tmp_path / "torch") as tw:
        for writer in (w, tw):
            fig = plt.figure(figsize=(2, 1.5), dpi=20)
            plt.plot([0, 1], [1, 0])
            writer.add_figure("fig", fig, 0)
            figs.append(fig)
    assert _events(tmp_path / "ember") == _events(tmp_path / "torch")


def test_log_dir_naming_as_torch(tmp_path, monkeypatch):
    import socket
    monkeypatch.chdir(tmp_path)
    w = SummaryWriter(comment="_lr0.1")
    assert re.fullmatch(r"runs/[A-Z][a-z]{2}\d\d_\d\d-\d\d-\d\d_" + re.escape(
        socket.gethostname()) + "_lr0.1", w.get_logdir())
    w.close()
    assert os.listdir(w.get_logdir())[0].startswith("events.out.tfevents")
    w = SummaryWriter(tmp_path / "given", comment="ignored", filename_suffix=".ember")
    assert w.get_logdir() == tmp_path / "given"
    w.close()
    assert os.listdir(tmp_path / "given")[0].endswith(".ember")


def test_purge_step_as_torch(tmp_path):
    for writer, d in ((SummaryWriter, "ember"), (TorchWriter, "torch")):
        with writer(tmp_path / d, purge_step=5) as w:
            w.add_scalar("x", 1.0, 5, walltime=1.0)
    ev = _events(tmp_path / "ember")
    assert ev == _events(tmp_path / "torch")
    assert ev[1].step == 5 and ev[1].file_version == "brain.Event:2"
    assert ev[2].session_log.status == ev[2].session_log.START


def test_close_flush_and_use_after_close(tmp_path):
    w = SummaryWriter(tmp_path, flush_secs=10_000)
    w.add_scalar("x", 1.0, 0)
    w.flush()
    assert len(_events(tmp_path)) == 2         # the file version event and the scalar
    w.close()
    w.close()                                   # closing twice is fine, as in torch
    # NOTE: as torch, a closed SummaryWriter opens a new event file on the next add_*
    w.add_scalar("x", 2.0, 1)
    w.close()
    assert len([f for f in os.listdir(tmp_path) if f.startswith("events")]) == 2
    fw = FileWriter(tmp_path / "fw")
    fw.close()
    with pytest.raises(OSError, match="Writer is closed"):
        fw.add_summary(None)


def test_add_graph_as_torch(tmp_path):
    def build(L):
        L.manual_seed(0)
        return L.nn.Sequential(L.nn.Linear(3, 5), L.nn.ReLU(), L.nn.Sequential(
            L.nn.Linear(5, 2), L.nn.Tanh()))
    graphs = []
    for L, writer, d in ((ember, SummaryWriter, "ember"), (torch, TorchWriter, "torch")):
        model = build(L)
        with writer(tmp_path / d) as w:
            w.add_graph(model, L.ones(4, 3))
        assert model.training                     # traced in eval mode, then restored
        acc = EventAccumulator(str(tmp_path / d)).Reload()
        assert acc.Tags()["graph"] and acc.Tags()["run_metadata"] == ["step1"]
        assert acc.RunMetadata("step1").step_stats.dev_stats[0].device == "/device:CPU:0"
        graphs.append(acc.Graph())

    def summary(g):
        shape = lambda n: [d.size for d in n.attr["_output_shapes"].list.shape[0].dim] \
            if "_output_shapes" in n.attr else None  # noqa: E731
        ops = [(n.op, shape(n), n.name.rsplit("/", 1)[0]) for n in g.node
               if n.op.startswith("aten::")]
        io = sorted((n.name.split("/")[0], shape(n)) for n in g.node if n.op == "IO Node")
        return ops, io, sum(n.op == "prim::GetAttr" for n in g.node)
    assert summary(graphs[0]) == summary(graphs[1])
    assert summary(graphs[0])[0][2] == ("aten::linear", [4, 2], "Sequential/Sequential[2]/"
                                                                "Linear[0]")


def test_add_video_needs_moviepy(tmp_path):
    pytest.importorskip("moviepy")
    with SummaryWriter(tmp_path) as w:
        w.add_video("v", ember.rand(3, 4, 3, 8, 8), 0, fps=2)
    assert EventAccumulator(str(tmp_path)).Reload().Images("v")[0].width == 16


@pytest.mark.parametrize("call", [
    lambda w, lib: w.add_scalar("s", lib.tensor([1.0, 2.0])),
    lambda w, lib: w.add_scalar("s", "text"),
    lambda w, lib: w.add_image("i", lib.zeros(3, 4, 4), dataformats="CHWN"),
    lambda w, lib: w.add_image("i", lib.zeros(3, 4, 4), dataformats="CCW"),
    lambda w, lib: w.add_images("i", lib.zeros(2, 2, 4, 4)),
    lambda w, lib: w.add_histogram("h", lib.zeros(0)),
    lambda w, lib: w.add_histogram_raw("h", 0, 1, 1, 1, 1, [1.0, 2.0], [1]),
    lambda w, lib: w.add_audio("a", lib.zeros(2, 3)),
    lambda w, lib: w.add_tensor("t", lib.zeros(2, dtype=lib.int16).to(lib.float8_e5m2)),
    lambda w, lib: w.add_custom_scalars_marginchart(["a", "b"]),
    lambda w, lib: w.add_scalar("s", [1.0]),
])
def test_bad_input_raises_as_torch(tmp_path, call):
    with TorchWriter(tmp_path / "torch") as tw:
        with pytest.raises(Exception) as expected:
            call(tw, torch)
    with SummaryWriter(tmp_path / "ember") as w:
        with pytest.raises(type(expected.value)) as got:
            call(w, ember)
    norm = lambda e: re.sub(r"\s+", " ", str(e)).replace("torch.", "").replace("ember.", "")  # noqa
    assert norm(got.value) == norm(expected.value)


def test_missing_tensorboard_says_how_to_install():
    import subprocess
    import sys
    code = ("import sys; sys.modules['tensorboard'] = None\n"
            "try:\n    import ember.utils.tensorboard\n"
            "except ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "pip install 'ember[tensorboard]'" in out
    # and import ember alone never loads it
    out = subprocess.run([sys.executable, "-c", "import sys, ember, ember.utils; "
                          "print('tensorboard' in sys.modules)"], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "False"
