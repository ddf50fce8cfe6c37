"""``ember.special``: torch.special's functions. Most are OpDefs in ``ember/_ops/special.py``
(also reachable as ``ember.<name>`` where torch has that name); the others are torch.special's
aliases of ops ember already has.
"""
import ember as _ember

from ._ops import _function
from ._ops import lazy as _lazy
from ._ops.registry import loaded_ops as _loaded_ops

for _family in ("special", "bessel", "polynomials"):     # the families holding torch.special's
    _lazy.load(_family)                                   # ops (not all: see _ops/lazy.py)

# torch.special.<name> -> the ember function it is
_ALIASES = {"digamma": "digamma", "psi": "digamma", "gammaln": "lgamma", "polygamma": "polygamma",
            "multigammaln": "mvlgamma", "erf": "erf", "erfc": "erfc", "erfinv": "erfinv",
            "exp2": "exp2", "expm1": "expm1", "log1p": "log1p", "expit": "sigmoid",
            "logit": "logit", "sinc": "sinc", "round": "round", "xlogy": "xlogy",
            "logsumexp": "logsumexp", "softmax": "softmax", "log_softmax": "log_softmax",
            "i0": "i0", "gammainc": "igamma", "gammaincc": "igammac"}

globals().update({k: getattr(_ember, v) for k, v in _ALIASES.items() if hasattr(_ember, v)})
globals().update({d.public_name: _function(d, d.public_name) for d in _loaded_ops()
                  if getattr(d, "torch_fn", "").startswith("special.")})
