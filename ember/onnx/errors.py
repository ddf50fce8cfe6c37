"""The ONNX exporter's errors (``torch.onnx.errors``)."""


class OnnxExporterError(RuntimeError):
    """The exporter could not write the model."""


class UnsupportedOperatorError(OnnxExporterError):
    """An op has no ONNX lowering; the message names it and the module path where it ran."""
