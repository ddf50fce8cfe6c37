"""``torch._dynamo.exc``: the errors ``compile`` raises."""


class TorchDynamoException(RuntimeError):
    """The base of the errors ``compile`` raises."""


class InvalidBackend(TorchDynamoException):
    """``compile`` got a backend name it does not know."""


class Unsupported(TorchDynamoException):
    """``fullgraph=True`` met a graph break."""


class ConstraintViolationError(TorchDynamoException):
    """A dim ``mark_dynamic`` marked got a size outside its range, or the graph cannot follow
    it (torch.fx.experimental.symbolic_shapes.ConstraintViolationError)."""
