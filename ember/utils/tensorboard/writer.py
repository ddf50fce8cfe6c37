"""``SummaryWriter``: event files TensorBoard reads, as ``torch.utils.tensorboard`` writes them.

The events go through TensorBoard's own ``EventFileWriter`` (a queue flushed by a thread every
``flush_secs``, or when ``max_queue`` events wait); the summaries are TensorBoard's protos, built
as torch builds them (``_summary.py``). See https://pytorch.org/docs/stable/tensorboard.html.
"""
import os
import time

from tensorboard.compat.proto.event_pb2 import Event, SessionLog
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from . import _summary as S

__all__ = ["FileWriter", "SummaryWriter"]


class FileWriter:
    """Writes ``Event`` and ``Summary`` protos to one event file in ``log_dir``.

    Used after ``close()`` it raises ``OSError('Writer is closed')``,
    as torch's does.

    Example:
        >>> import tempfile
        >>> from ember.utils.tensorboard import FileWriter
        >>> w = FileWriter(tempfile.mkdtemp())
        >>> w.close()
    """

    def __init__(self, log_dir, max_queue=10, flush_secs=120, filename_suffix=""):
        self.event_writer = EventFileWriter(str(log_dir), max_queue, flush_secs, filename_suffix)

    def get_logdir(self):
        """The directory the event file is in."""
        return self.event_writer.get_logdir()

    def add_event(self, event, step=None, walltime=None):
        """Adds ``event``, stamped with ``walltime`` (default now) and ``step``."""
        event.wall_time = time.time() if walltime is None else walltime
        if step is not None:
            event.step = int(step)      # numpy and tensor steps too
        self.event_writer.add_event(event)

    def add_summary(self, summary, global_step=None, walltime=None):
        """Adds a ``Summary`` proto, wrapped in an ``Event``."""
        self.add_event(Event(summary=summary), global_step, walltime)

    def flush(self):
        self.event_writer.flush()

    def close(self):
        self.event_writer.close()


class SummaryWriter:
    """Writes scalars, histograms, images, text, hparams... to event files for TensorBoard.

    Args:
        log_dir (str): where the event files go; default ``runs/<Mon>DD_HH-MM-SS_<host><comment>``.
        comment (str): suffix of the default ``log_dir`` (ignored when ``log_dir`` is given).
        purge_step (int): on a resumed run, events at or after this step in the directory's
            older files are hidden by TensorBoard.
        max_queue (int): events waiting before an ``add_*`` call writes them. Default 10.
        flush_secs (int): how often pending events are written. Default 120.
        filename_suffix (str): suffix of the event file names.

    ``close()`` flushes and closes the files; as in torch, an ``add_*`` call after it opens a new
    event file in the same ``log_dir``.

    Example:
        >>> import tempfile
        >>> import ember
        >>> from ember.utils.tensorboard import SummaryWriter
        >>> with SummaryWriter(tempfile.mkdtemp()) as w:
        ...     for step in range(3):
        ...         w.add_scalar("loss", 1.0 / (step + 1), step)
        ...     w.add_histogram("weights", ember.arange(10.0), 0)
    """

    def __init__(self, log_dir=None, comment="", purge_step=None, max_queue=10, flush_secs=120,
                 filename_suffix=""):
        if not log_dir:
            import socket
            from datetime import datetime
            log_dir = os.path.join("runs", datetime.now().strftime("%b%d_%H-%M-%S") + "_" +
                                   socket.gethostname() + comment)
        self.log_dir, self.purge_step = log_dir, purge_step
        self.max_queue, self.flush_secs, self.filename_suffix = max_queue, flush_secs, \
            filename_suffix
        self.file_writer = self.all_writers = None
        self._get_file_writer()
        # torch's default histogram bins (TensorFlow's): +-1e-12 * 1.1**k up to 1e20, and 0
        v, pos = 1e-12, []
        while v < 1e20:
            pos.append(v)
            v *= 1.1
        self.default_bins = [-b for b in reversed(pos)] + [0] + pos

    def _get_file_writer(self):
        # (re)opened on first use, so a writer used after close() writes on into a new file
        if self.all_writers is None or self.file_writer is None:
            self.file_writer = FileWriter(self.log_dir, self.max_queue, self.flush_secs,
                                          self.filename_suffix)
            self.all_writers = {self.file_writer.get_logdir(): self.file_writer}
            if self.purge_step is not None:
                self.file_writer.add_event(Event(step=self.purge_step,
                                                 file_version="brain.Event:2"))
                self.file_writer.add_event(Event(step=self.purge_step, session_log=SessionLog(
                    status=SessionLog.START)))
                self.purge_step = None
        return self.file_writer

    def _add(self, summary, global_step=None, walltime=None):
        self._get_file_writer().add_summary(summary, global_step, walltime)

    def get_logdir(self):
        """The directory the event files are written to."""
        return self.log_dir

    def add_scalar(self, tag, scalar_value, global_step=None, walltime=None, new_style=False,
                   double_precision=False):
        """Logs one number (a Python number, 1-element tensor or array) under ``tag``.

        ``new_style`` stores it as a tensor of the scalars plugin (float64 with
        ``double_precision``) rather than as a ``simple_value``."""
        self._add(S.scalar(tag, scalar_value, new_style, double_precision), global_step, walltime)

    def add_scalars(self, main_tag, tag_scalar_dict, global_step=None, walltime=None):
        """Logs several numbers on one chart: each ``tag`` in its own run directory
        ``<log_dir>/<main_tag>_<tag>``, under the tag ``main_tag``."""
        walltime = time.time() if walltime is None else walltime
        logdir = self._get_file_writer().get_logdir()
        for tag, value in tag_scalar_dict.items():
            key = logdir + "/" + main_tag.replace("/", "_") + "_" + tag
            if key not in self.all_writers:
                self.all_writers[key] = FileWriter(key, self.max_queue, self.flush_secs,
                                                   self.filename_suffix)
            self.all_writers[key].add_summary(S.scalar(main_tag, value), global_step, walltime)

    def add_tensor(self, tag, tensor, global_step=None, walltime=None):
        """Logs a whole tensor (the tensor plugin's ``TensorProto``)."""
        self._add(S.tensor_proto(tag, tensor), global_step, walltime)

    def add_histogram(self, tag, values, global_step=None, bins="tensorflow", walltime=None,
                      max_bins=None):
        """Logs a histogram of ``values``; ``bins`` as ``numpy.histogram`` takes it, or
        ``'tensorflow'`` for TensorFlow's exponential buckets (the default)."""
        if isinstance(bins, str) and bins == "tensorflow":
            bins = self.default_bins
        self._add(S.histogram(tag, values, bins, max_bins=max_bins), global_step, walltime)

    def add_histogram_raw(self, tag, min, max, num, sum, sum_squares, bucket_limits,
                          bucket_counts, global_step=None, walltime=None):
        """Logs a histogram from its statistics and buckets."""
        if len(bucket_limits) != len(bucket_counts):
            raise ValueError("len(bucket_limits) != len(bucket_counts), see the document.")
        self._add(S.histogram_raw(tag, min, max, num, sum, sum_squares, bucket_limits,
                                  bucket_counts), global_step, walltime)

    def add_image(self, tag, img_tensor, global_step=None, walltime=None, dataformats="CHW"):
        """Logs an image: uint8 in [0, 255] or floats in [0, 1], laid out as ``dataformats``
        says (``CHW``, ``HWC``, ``HW``; 1 or 3 channels)."""
        self._add(S.image(tag, img_tensor, dataformats=dataformats), global_step, walltime)

    def add_images(self, tag, img_tensor, global_step=None, walltime=None, dataformats="NCHW"):
        """Logs a batch of images (``NCHW`` or ``NHWC``...), tiled into one grid 8 wide."""
        self._add(S.image(tag, img_tensor, dataformats=dataformats), global_step, walltime)

    def add_image_with_boxes(self, tag, img_tensor, box_tensor, global_step=None,
                             walltime=None, rescale=1, dataformats="CHW", labels=None):
        """Logs an image with boxes ``(xmin, ymin, xmax, ymax)`` drawn on it, each labelled
        when ``labels`` has one label per box."""
        if labels is not None:
            labels = [labels] if isinstance(labels, str) else labels
            labels = labels if len(labels) == box_tensor.shape[0] else None
        self._add(S.image_boxes(tag, img_tensor, box_tensor, rescale=rescale,
                                dataformats=dataformats, labels=labels), global_step, walltime)

    def add_figure(self, tag, figure, global_step=None, close=True, walltime=None):
        """Logs a matplotlib figure (or a list, as a grid) rendered to an image."""
        self.add_image(tag, S.figure_to_image(figure, close), global_step, walltime,
                       dataformats="NCHW" if isinstance(figure, list) else "CHW")

    def add_video(self, tag, vid_tensor, global_step=None, fps=4, walltime=None):
        """Logs a ``(N, T, C, H, W)`` batch of clips as an animated GIF (needs moviepy)."""
        self._add(S.video(tag, vid_tensor, fps), global_step, walltime)

    def add_audio(self, tag, snd_tensor, global_step=None, sample_rate=44100, walltime=None):
        """Logs a mono clip (samples in [-1, 1]) as a 16-bit WAV."""
        self._add(S.audio(tag, snd_tensor, sample_rate=sample_rate), global_step, walltime)

    def add_text(self, tag, text_string, global_step=None, walltime=None):
        """Logs a (markdown) string under ``<tag>/text_summary``."""
        self._add(S.text(tag, text_string), global_step, walltime)

    def add_graph(self, model, input_to_model=None, verbose=False, use_strict_trace=True):
        """Logs the graph of ``model`` run on ``input_to_model`` (a tensor or a tuple), traced
        by ``ember.jit.trace`` in eval mode, for TensorBoard's GRAPHS tab."""
        from tensorboard.compat.proto.event_pb2 import TaggedRunMetadata
        from ._graph import graph
        graph_def, stats = graph(model, input_to_model, verbose, use_strict_trace)
        fw = self._get_file_writer()
        fw.add_event(Event(graph_def=graph_def.SerializeToString()))
        fw.add_event(Event(tagged_run_metadata=TaggedRunMetadata(
            tag="step1", run_metadata=stats.SerializeToString())))

    def add_hparams(self, hparam_dict, metric_dict, hparam_domain_discrete=None, run_name=None,
                    global_step=None):
        """Logs a run's hyperparameters and final metrics for TensorBoard's HPARAMS tab, in the
        run directory ``<log_dir>/<run_name>`` (default the current time)."""
        if type(hparam_dict) is not dict or type(metric_dict) is not dict:
            raise TypeError("hparam_dict and metric_dict should be dictionary.")
        summaries = S.hparams(hparam_dict, metric_dict, hparam_domain_discrete)
        logdir = os.path.join(self._get_file_writer().get_logdir(), run_name or str(time.time()))
        with SummaryWriter(log_dir=logdir) as w:
            for s in summaries:
                w.file_writer.add_summary(s, global_step)
            for k, v in metric_dict.items():
                w.add_scalar(k, v, global_step)

    def add_pr_curve(self, tag, labels, predictions, global_step=None, num_thresholds=127,
                     weights=None, walltime=None):
        """Logs a precision-recall curve of 0/1 ``labels`` against ``predictions`` in [0, 1]."""
        self._add(S.pr_curve(tag, S.make_np(labels), S.make_np(predictions), num_thresholds,
                             weights), global_step, walltime)

    def add_pr_curve_raw(self, tag, true_positive_counts, false_positive_counts,
                         true_negative_counts, false_negative_counts, precision, recall,
                         global_step=None, num_thresholds=127, weights=None, walltime=None):
        """Logs a precision-recall curve from its counts."""
        self._add(S.pr_curve_raw(tag, true_positive_counts, false_positive_counts,
                                 true_negative_counts, false_negative_counts, precision, recall,
                                 num_thresholds, weights), global_step, walltime)

    def add_custom_scalars(self, layout):
        """Logs a custom-scalars layout: ``{category: {chart: ['Multiline', tags] or
        ['Margin', [value, lower, upper]]}}``."""
        self._add(S.custom_scalars(layout))

    def add_custom_scalars_multilinechart(self, tags, category="default", title="untitled"):
        self.add_custom_scalars({category: {title: ["Multiline", tags]}})

    def add_custom_scalars_marginchart(self, tags, category="default", title="untitled"):
        if len(tags) != 3:
            raise AssertionError(f"Expected 3 tags, got {len(tags)}.")
        self.add_custom_scalars({category: {title: ["Margin", tags]}})

    def add_embedding(self, mat, metadata=None, label_img=None, global_step=None, tag="default",
                      metadata_header=None):
        """Writes an ``(N, D)`` embedding for TensorBoard's projector: ``tensors.tsv``, labels
        in ``metadata.tsv``, ``label_img`` ``(N, C, H, W)`` as ``sprite.png``, listed in
        ``projector_config.pbtxt``."""
        from google.protobuf import text_format
        from tensorboard.plugins.projector.projector_config_pb2 import (EmbeddingInfo,
                                                                         ProjectorConfig)
        mat = S.make_np(mat)
        step = 0 if global_step is None else global_step
        enc = tag.replace("%", "%25").replace("/", "%2f").replace("\\", "%5c")
        subdir = f"{str(step).zfill(5)}/{enc}"
        logdir = self._get_file_writer().get_logdir()
        path = os.path.join(logdir, subdir)
        if os.path.isdir(path):
            print("warning: Embedding dir exists, did you set global_step for add_embedding()?")
        elif os.path.exists(path):
            raise NotADirectoryError(f"Path: `{path}` exists, but is a file. Cannot proceed.")
        os.makedirs(path, exist_ok=True)
        info = EmbeddingInfo(tensor_name=f"{tag}:{str(step).zfill(5)}",
                             tensor_path=subdir + "/tensors.tsv")
        if metadata is not None:
            if mat.shape[0] != len(metadata):
                raise AssertionError("#labels should equal with #data points")
            rows = [str(x) for x in metadata] if not metadata_header else \
                ["\t".join(str(e) for e in r) for r in [metadata_header] + list(metadata)]
            if metadata_header and len(metadata_header) != len(metadata[0]):
                raise AssertionError("len of header must be equal to the number of columns in "
                                     "metadata")
            _write(path, "metadata.tsv", "\n".join(rows) + "\n")
            info.metadata_path = subdir + "/metadata.tsv"
        if label_img is not None:
            if mat.shape[0] != label_img.shape[0]:
                raise AssertionError("#images should equal with #data points")
            _write(path, "sprite.png", _sprite(S.make_np(label_img)))
            info.sprite.image_path = subdir + "/sprite.png"
            info.sprite.single_image_dim.extend([label_img.shape[3], label_img.shape[2]])
        if mat.ndim != 2:
            raise AssertionError("mat should be 2D, where mat.size(0) is the number of data points")
        _write(path, "tensors.tsv", "".join("\t".join(str(v.item()) for v in row) + "\n"
                                            for row in mat))
        # the projector's config lists every embedding so far: rewritten whole each time
        if not hasattr(self, "_projector_config"):
            self._projector_config = ProjectorConfig()
        self._projector_config.embeddings.extend([info])
        _write(logdir, "projector_config.pbtxt", text_format.MessageToString(
            self._projector_config))

    def flush(self):
        """Writes every pending event to disk."""
        for w in (self.all_writers or {}).values():
            w.flush()

    def close(self):
        """Flushes and closes every event file; a later ``add_*`` call opens new ones."""
        for w in (self.all_writers or {}).values():
            w.flush()
            w.close()
        self.file_writer = self.all_writers = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _write(directory, name, data):
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def _sprite(images):
    """NCHW images in [0, 1] tiled into the projector's square sprite sheet (PNG bytes)."""
    import io
    import math

    import numpy as np
    from PIL import Image
    grid = S.make_grid(images, ncols=math.ceil(images.shape[0] ** 0.5)).transpose(1, 2, 0)
    square = np.zeros((grid.shape[1], grid.shape[1], 3))
    square[:grid.shape[0]] = grid
    out = io.BytesIO()
    Image.fromarray(np.uint8((square * 255).clip(0, 255))).save(out, format="PNG")
    return out.getvalue()
