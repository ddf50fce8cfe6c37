"""Activation modules: thin wrappers over ``nn.functional`` with torch's names and reprs."""
from ..._ops.creation import full
from .. import functional as F
from ..parameter import Parameter
from .module import Module


def _activation(name, fn, params=(), inplace=False, doc=""):
    """Build a Module class calling ``fn(input, *params)`` with torch's constructor."""
    names = [p[0] for p in params]

    def __init__(self, *args, **kwargs):
        Module.__init__(self)
        values = dict(params)
        if inplace:
            values["inplace"] = False
        keys = list(values)
        if len(args) > len(keys):
            raise TypeError(f"{name}() takes at most {len(keys)} arguments ({len(args)} given)")
        values.update(zip(keys, args))
        for k, v in kwargs.items():
            if k not in values:
                raise TypeError(f"{name}.__init__() got an unexpected keyword argument '{k}'")
            values[k] = v
        for k, v in values.items():
            setattr(self, k, v)

    def forward(self, input):
        kw = {k: getattr(self, k) for k in names}
        if inplace:
            kw["inplace"] = self.inplace
        return fn(input, **kw)

    def extra_repr(self):
        parts = [f"{k}={getattr(self, k)!r}" if isinstance(getattr(self, k), str) else
                 f"{k}={getattr(self, k)}" for k in names]
        if inplace and self.inplace:
            parts.append("inplace=True")
        return ", ".join(parts)

    return type(name, (Module,), {"__init__": __init__, "forward": forward,
                                  "extra_repr": extra_repr, "__doc__": doc or
                                  f"Applies ``nn.functional.{fn.__name__}`` element-wise."})


ReLU = _activation("ReLU", F.relu, inplace=True)
ReLU6 = _activation("ReLU6", F.relu6, inplace=True)
LeakyReLU = _activation("LeakyReLU", F.leaky_relu, [("negative_slope", 0.01)], True)
ELU = _activation("ELU", F.elu, [("alpha", 1.0)], True)
SELU = _activation("SELU", F.selu, inplace=True)
CELU = _activation("CELU", F.celu, [("alpha", 1.0)], True)
GELU = _activation("GELU", F.gelu, [("approximate", "none")])
SiLU = _activation("SiLU", F.silu, inplace=True)
Mish = _activation("Mish", F.mish, inplace=True)
Softplus = _activation("Softplus", F.softplus, [("beta", 1.0), ("threshold", 20.0)])
Softsign = _activation("Softsign", F.softsign)
Softshrink = _activation("Softshrink", F.softshrink, [("lambd", 0.5)])
Hardshrink = _activation("Hardshrink", F.hardshrink, [("lambd", 0.5)])
Tanhshrink = _activation("Tanhshrink", F.tanhshrink)
Hardtanh = _activation("Hardtanh", F.hardtanh, [("min_val", -1.0), ("max_val", 1.0)], True)
Hardsigmoid = _activation("Hardsigmoid", F.hardsigmoid, inplace=True)
Hardswish = _activation("Hardswish", F.hardswish, inplace=True)
LogSigmoid = _activation("LogSigmoid", F.logsigmoid)
Sigmoid = _activation("Sigmoid", F.sigmoid)
Tanh = _activation("Tanh", F.tanh)
Threshold = _activation("Threshold", F.threshold, [("threshold", 0.0), ("value", 0.0)], True)
GLU = _activation("GLU", F.glu, [("dim", -1)])
Softmax = _activation("Softmax", F.softmax, [("dim", None)])
LogSoftmax = _activation("LogSoftmax", F.log_softmax, [("dim", None)])
Softmin = _activation("Softmin", F.softmin, [("dim", None)])
RReLU = _activation("RReLU", F.rrelu, [("lower", 1.0 / 8), ("upper", 1.0 / 3)], True)


def _rrelu_forward(self, input):
    return F.rrelu(input, self.lower, self.upper, self.training, self.inplace)


RReLU.forward = _rrelu_forward


class Softmax2d(Module):
    """Softmax over the channel dimension of (N, C, H, W) or (C, H, W) input."""

    def forward(self, input):
        if input.dim() not in (3, 4):
            raise ValueError(f"Softmax2d: expected input to be 3D or 4D, got {input.dim()}D "
                             "instead")
        return F.softmax(input, -3)


class PReLU(Module):
    """``max(0, x) + a * min(0, x)`` with a learnable slope ``a`` (one or per channel)."""

    def __init__(self, num_parameters=1, init=0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters, self.init = num_parameters, init
        self.weight = Parameter(full((num_parameters,), init, device=device, dtype=dtype))

    def reset_parameters(self):
        from .. import init
        init.constant_(self.weight, self.init)

    def forward(self, input):
        return F.prelu(input, self.weight)

    def extra_repr(self):
        return f"num_parameters={self.num_parameters}"
