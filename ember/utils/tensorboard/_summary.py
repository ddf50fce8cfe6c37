"""Summary protocol buffers for ``SummaryWriter``, built as ``torch.utils.tensorboard.summary``
builds them, on TensorBoard's own protos (so TensorBoard reads them as torch's).
"""
import io
import math
import os

import numpy as np
from tensorboard.compat.proto.summary_pb2 import HistogramProto, Summary, SummaryMetadata
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto

from ..._tensor import Tensor


def make_np(x):
    """``x`` (a Tensor, an ndarray or a Python number) as an ndarray, as torch's ``make_np``."""
    if isinstance(x, np.ndarray):
        return x
    if np.isscalar(x):
        return np.array([x])
    if isinstance(x, Tensor):
        x = x.detach()
        return (x.half() if x.dtype.name == "bfloat16" else x).cpu().numpy()
    raise NotImplementedError(f"Got {type(x)}, but numpy array or torch tensor are expected.")


def _plugin(name, content=b""):
    return SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name=name,
                                                                  content=content))


def _tensor_value(tag, dtype, shape, metadata=None, **values):
    # (a shape of None leaves the field unset, as torch's scalars do)
    shape = None if shape is None else \
        TensorShapeProto(dim=[TensorShapeProto.Dim(size=d) for d in shape])
    return Summary(value=[Summary.Value(tag=tag, metadata=metadata, tensor=TensorProto(
        dtype=dtype, tensor_shape=shape, **values))])


def scalar(name, value, new_style=False, double_precision=False):
    value = make_np(value).squeeze()
    if value.ndim != 0:
        raise AssertionError(f"Tensor should contain one element (0 dimensions). Was given "
                             f"size: {value.size} and {value.ndim} dimensions.")
    value = float(value)
    if not new_style:
        return Summary(value=[Summary.Value(tag=name, simple_value=value)])
    kind = ("DT_DOUBLE", "double_val") if double_precision else ("DT_FLOAT", "float_val")
    return _tensor_value(name, kind[0], None, _plugin("scalars"), **{kind[1]: [value]})


# ember dtype name -> (TensorProto dtype, its value field); half types as their bit patterns
_TENSOR_TYPES = {"float16": ("DT_HALF", "half_val"), "bfloat16": ("DT_BFLOAT16", "half_val"),
                 "float32": ("DT_FLOAT", "float_val"), "float64": ("DT_DOUBLE", "double_val"),
                 "int8": ("DT_INT8", "int_val"), "uint8": ("DT_UINT8", "uint32_val"),
                 "int16": ("DT_INT16", "int_val"), "int32": ("DT_INT32", "int_val"),
                 "int64": ("DT_INT64", "int64_val"), "bool": ("DT_BOOL", "bool_val"),
                 "complex64": ("DT_COMPLEX64", "scomplex_val"),
                 "complex128": ("DT_COMPLEX128", "dcomplex_val")}


def tensor_proto(tag, tensor):
    if tensor.numel() * tensor.element_size() >= 1 << 31:
        raise ValueError("tensor is bigger than protocol buffer's hard limit of 2GB in size")
    if tensor.dtype.name not in _TENSOR_TYPES:
        raise ValueError(f"{tag} has unsupported tensor dtype {tensor.dtype}")
    dtype, field = _TENSOR_TYPES[tensor.dtype.name]
    a = tensor.detach().cpu().numpy().reshape(-1)
    if field == "half_val":
        # NOTE: torch stores each half value as the int of its float32 bit pattern
        a = a.astype(np.float32).view(np.int32)
    elif a.dtype.kind == "c":
        a = a.view(a.real.dtype)
    return _tensor_value(tag, dtype, tensor.shape, _plugin("tensor"), **{field: a.tolist()})


def histogram(name, values, bins, max_bins=None):
    return Summary(value=[Summary.Value(tag=name, histo=make_histogram(
        make_np(values).astype(float), bins, max_bins))])


def histogram_raw(name, min, max, num, sum, sum_squares, bucket_limits, bucket_counts):
    return Summary(value=[Summary.Value(tag=name, histo=HistogramProto(
        min=min, max=max, num=num, sum=sum, sum_squares=sum_squares,
        bucket_limit=bucket_limits, bucket=bucket_counts))])


def make_histogram(values, bins, max_bins=None):
    """torch's histogram: numpy's, subsampled to ``max_bins``, trimmed to the nonzero range
    with one empty bucket kept on the left."""
    if values.size == 0:
        raise ValueError("The input has no element.")
    values = values.reshape(-1)
    counts, limits = np.histogram(values, bins=bins)
    if max_bins is not None and len(counts) > max_bins:
        sub = len(counts) // max_bins
        counts = np.pad(counts, [[0, -len(counts) % sub]]).reshape(-1, sub).sum(-1)
        limits = np.append(limits[:-1:sub], limits[-1])
    cum = np.cumsum(np.greater(counts, 0))
    start, end = (int(i) for i in np.searchsorted(cum, [0, cum[-1] - 1], side="right"))
    end += 1
    counts = counts[start - 1:end] if start > 0 else np.concatenate([[0], counts[:end]])
    limits = limits[start:end + 1]
    if counts.size == 0 or limits.size == 0:
        raise ValueError("The histogram is empty, please file a bug report.")
    return HistogramProto(min=values.min(), max=values.max(), num=len(values),
                          sum=values.sum(), sum_squares=values.dot(values),
                          bucket_limit=limits.tolist(), bucket=counts.tolist())


def make_grid(images, ncols=8):
    """NCHW images (1 or 3 channels) tiled into one CHW image, ``ncols`` wide."""
    if images.shape[1] == 1:
        images = np.concatenate([images] * 3, 1)
    if images.ndim != 4 or images.shape[1] != 3:
        raise AssertionError("Input should be a 4D numpy array with 3 channels")
    n, _, h, w = images.shape
    ncols = min(n, ncols)
    nrows = math.ceil(n / ncols)
    canvas = np.zeros((3, h * nrows, w * ncols), dtype=images.dtype)
    for i in range(n):
        y, x = divmod(i, ncols)
        canvas[:, y * h:(y + 1) * h, x * w:(x + 1) * w] = images[i]
    return canvas


def convert_to_HWC(tensor, input_format):
    """An image in ``input_format`` (``NCHW``, ``CHW``, ``HWC``, ``HW``... any order) as HWC
    with 3 channels (a batch tiled by ``make_grid``)."""
    if len(set(input_format)) != len(input_format):
        raise AssertionError("You can not use the same dimension shorthand twice. "
                             f"input_format: {input_format}")
    if len(tensor.shape) != len(input_format):
        raise AssertionError("size of input tensor and input format are different. "
                             f"tensor shape: {tensor.shape}, input_format: {input_format}")
    fmt = input_format.upper()
    if len(fmt) == 4:
        return make_grid(tensor.transpose([fmt.find(c) for c in "NCHW"])).transpose(1, 2, 0)
    if len(fmt) == 3:
        hwc = tensor.transpose([fmt.find(c) for c in "HWC"])
        return np.concatenate([hwc] * 3, 2) if hwc.shape[2] == 1 else hwc
    return np.stack([tensor.transpose([fmt.find(c) for c in "HW"])] * 3, 2)


def _to_uint8(a):
    # NOTE: as torch: uint8 images are taken as they are, anything else as [0, 1] floats
    scale = 1 if a.dtype == np.uint8 else 255
    return (a.astype(np.float32) * scale).clip(0, 255).astype(np.uint8)


def image(tag, tensor, rescale=1, dataformats="NCHW"):
    return Summary(value=[Summary.Value(tag=tag, image=make_image(
        _to_uint8(convert_to_HWC(make_np(tensor), dataformats)), rescale=rescale))])


def image_boxes(tag, tensor_image, tensor_boxes, rescale=1, dataformats="CHW", labels=None):
    img = _to_uint8(convert_to_HWC(make_np(tensor_image), dataformats))
    return Summary(value=[Summary.Value(tag=tag, image=make_image(
        img, rescale=rescale, rois=make_np(tensor_boxes), labels=labels))])


def make_image(tensor, rescale=1, rois=None, labels=None):
    """An HWC uint8 array as a PNG ``Summary.Image`` (boxes ``rois`` drawn in red)."""
    from PIL import Image, ImageDraw, ImageFont
    h, w, c = tensor.shape
    img = Image.fromarray(tensor)
    for i, (x0, y0, x1, y1) in enumerate([] if rois is None else rois):
        draw = ImageDraw.Draw(img)
        draw.line([(x0, y0), (x0, y1), (x1, y1), (x1, y0), (x0, y0)], width=2, fill="Red")
        if labels is not None and labels[i]:
            font = ImageFont.load_default()
            left, top, right, bottom = font.getbbox(labels[i])
            m = np.ceil(0.05 * (bottom - top))
            draw.rectangle([(x0, y1 - (bottom - top) - 2 * m), (x0 + right - left, y1)], fill="Red")
            draw.text((x0 + m, y1 - (bottom - top) - m), labels[i], fill="black", font=font)
    img = img.resize((int(w * rescale), int(h * rescale)), Image.Resampling.LANCZOS)
    out = io.BytesIO()
    img.save(out, format="PNG")
    return Summary.Image(height=h, width=w, colorspace=c, encoded_image_string=out.getvalue())


def figure_to_image(figures, close=True):
    """matplotlib figure(s) rendered to a CHW uint8 array (NCHW for a list)."""
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    def render(fig):
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        w, h = fig.canvas.get_width_height()
        rgb = np.frombuffer(canvas.buffer_rgba(), dtype=np.uint8).reshape(h, w, 4)[:, :, :3]
        if close:
            plt.close(fig)
        return np.moveaxis(rgb, 2, 0)
    return np.stack([render(f) for f in figures]) if isinstance(figures, list) else render(figures)


def video(tag, tensor, fps=4):
    v = make_np(tensor)
    if v.dtype == np.uint8:
        v = np.float32(v) / 255.0
    b, t, c, h, w = v.shape
    # a batch of clips is tiled into one, on a grid of a power of two clips
    n = 1 << (b - 1).bit_length()
    v = np.concatenate([v, np.zeros((n - b, t, c, h, w))]) if n != b else v
    rows = 2 ** ((n.bit_length() - 1) // 2)
    v = v.reshape(rows, n // rows, t, c, h, w).transpose(2, 0, 4, 1, 5, 3)
    v = _to_uint8(v.reshape(t, rows * h, n // rows * w, c))
    return Summary(value=[Summary.Value(tag=tag, image=make_video(v, fps))])


def make_video(frames, fps):
    """THWC uint8 frames as an animated GIF ``Summary.Image`` (through moviepy, as torch)."""
    try:
        from moviepy import editor as mpy
    except ImportError:
        try:
            import moviepy as mpy       # moviepy 2 has no editor module
        except ImportError:
            raise ModuleNotFoundError("add_video needs the moviepy package "
                                      "(pip install moviepy)") from None
    import tempfile
    _, h, w, c = frames.shape
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "video.gif")
        mpy.ImageSequenceClip(list(frames), fps=fps).write_gif(path, logger=None)
        with open(path, "rb") as f:
            return Summary.Image(height=h, width=w, colorspace=c, encoded_image_string=f.read())


def audio(tag, tensor, sample_rate=44100):
    import wave
    a = make_np(tensor).squeeze()
    if abs(a).max() > 1:
        print("warning: audio amplitude out of range, auto clipped.")
        a = a.clip(-1, 1)
    if a.ndim != 1:
        raise AssertionError("input tensor should be 1 dimensional.")
    a = (a * np.iinfo(np.int16).max).astype("<i2")
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(a.data)
    return Summary(value=[Summary.Value(tag=tag, audio=Summary.Audio(
        sample_rate=sample_rate, num_channels=1, length_frames=a.shape[-1],
        encoded_audio_string=out.getvalue(), content_type="audio/wav"))])


def text(tag, text):
    from tensorboard.plugins.text.plugin_data_pb2 import TextPluginData
    meta = _plugin("text", TextPluginData(version=0).SerializeToString())
    return _tensor_value(tag + "/text_summary", "DT_STRING", (1,), meta,
                         string_val=[text.encode("utf_8")])


def custom_scalars(layout):
    from tensorboard.plugins.custom_scalar import layout_pb2 as lp
    categories = []
    for title, charts in layout.items():
        out = []
        for name, (kind, tags) in charts.items():
            if kind == "Margin":
                if len(tags) != 3:
                    raise AssertionError("len(tags) != 3")
                out.append(lp.Chart(title=name, margin=lp.MarginChartContent(series=[
                    lp.MarginChartContent.Series(value=tags[0], lower=tags[1], upper=tags[2])])))
            else:
                out.append(lp.Chart(title=name, multiline=lp.MultilineChartContent(tag=tags)))
        categories.append(lp.Category(title=title, chart=out))
    return _tensor_value("custom_scalars__config__", "DT_STRING", (), _plugin("custom_scalars"),
                         string_val=[lp.Layout(category=categories).SerializeToString()])


def pr_curve(tag, labels, predictions, num_thresholds=127, weights=None):
    num_thresholds = min(num_thresholds, 127)
    return pr_curve_raw(tag, *compute_curve(labels, predictions, num_thresholds, weights),
                        num_thresholds=num_thresholds)


def pr_curve_raw(tag, tp, fp, tn, fn, precision, recall, num_thresholds=127, weights=None):
    from tensorboard.plugins.pr_curve.plugin_data_pb2 import PrCurvePluginData
    data = np.stack((tp, fp, tn, fn, precision, recall))
    meta = _plugin("pr_curves", PrCurvePluginData(
        version=0, num_thresholds=min(num_thresholds, 127)).SerializeToString())
    return _tensor_value(tag, "DT_FLOAT", data.shape, meta, float_val=data.reshape(-1).tolist())


def compute_curve(labels, predictions, num_thresholds=None, weights=None):
    """TP, FP, TN, FN, precision and recall at ``num_thresholds`` thresholds in [0, 1]."""
    weights = 1.0 if weights is None else weights
    buckets = np.int32(np.floor(predictions * (num_thresholds - 1)))
    pos = labels.astype(np.float64)
    rng = (0, num_thresholds - 1)
    tp = np.cumsum(np.histogram(buckets, num_thresholds, rng, weights=pos * weights)[0][::-1])
    fp = np.cumsum(np.histogram(buckets, num_thresholds, rng,
                                weights=(1.0 - pos) * weights)[0][::-1])
    tp, fp = tp[::-1], fp[::-1]
    tn, fn = fp[0] - fp, tp[0] - tp
    precision = tp / np.maximum(1e-7, tp + fp)
    recall = tp / np.maximum(1e-7, tp + fn)
    return np.stack((tp, fp, tn, fn, precision, recall))


def hparams(hparam_dict=None, metric_dict=None, hparam_domain_discrete=None):
    """The experiment, session-start and session-end summaries of the hparams plugin."""
    from google.protobuf import struct_pb2
    from tensorboard.plugins.hparams import api_pb2 as api, metadata as md
    from tensorboard.plugins.hparams import plugin_data_pb2 as pd
    for arg, v in (("hparam_dict", hparam_dict), ("metric_dict", metric_dict)):
        if not isinstance(v, dict):
            raise TypeError(f"parameter: {arg} should be a dictionary, nothing logged.")
    domains = hparam_domain_discrete or {}
    if not isinstance(domains, dict):
        raise TypeError("parameter: hparam_domain_discrete should be a dictionary, nothing logged.")
    for k, v in domains.items():
        if k not in hparam_dict or not isinstance(v, list) or \
                not all(isinstance(d, type(hparam_dict[k])) for d in v):
            raise TypeError(f"parameter: hparam_domain_discrete[{k}] should be a list of same "
                            f"type as hparam_dict[{k}].")
    infos, ssi = [], pd.SessionStartInfo()
    for k, v in hparam_dict.items():
        if v is None:
            continue
        if isinstance(v, Tensor):
            v = float(make_np(v)[0])    # (a 0-d tensor fails here, as in torch)
        # NOTE: bool is an int, so (as in torch) True is logged as the number 1.0
        field, dt = ("number_value", "FLOAT64") if isinstance(v, (int, float)) else \
            ("string_value", "STRING") if isinstance(v, str) else (None, None)
        if field is None:
            raise ValueError("value should be one of int, float, str, bool, or torch.Tensor")
        setattr(ssi.hparams[k], field, v)
        dom = struct_pb2.ListValue(values=[struct_pb2.Value(**{field: d}) for d in domains[k]]) \
            if k in domains else None
        infos.append(api.HParamInfo(name=k, type=api.DataType.Value("DATA_TYPE_" + dt),
                                    domain_discrete=dom))

    def summary(tag, **content):
        data = pd.HParamsPluginData(version=md.PLUGIN_DATA_VERSION, **content)
        return Summary(value=[Summary.Value(tag=tag, metadata=_plugin(
            md.PLUGIN_NAME, data.SerializeToString()))])
    exp = api.Experiment(hparam_infos=infos, metric_infos=[
        api.MetricInfo(name=api.MetricName(tag=k)) for k in metric_dict])
    return (summary(md.EXPERIMENT_TAG, experiment=exp),
            summary(md.SESSION_START_INFO_TAG, session_start_info=ssi),
            summary(md.SESSION_END_INFO_TAG, session_end_info=pd.SessionEndInfo(
                status=api.Status.Value("STATUS_SUCCESS"))))
