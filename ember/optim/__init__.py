"""``ember.optim``: optimizers and learning-rate schedulers with torch.optim's API.

Example:
    >>> import ember
    >>> model = ember.nn.Linear(3, 1)
    >>> opt = ember.optim.AdamW(model.parameters(), lr=1e-3)
    >>> sched = ember.optim.lr_scheduler.StepLR(opt, step_size=10)
    >>> type(opt).__name__, sched.get_last_lr()
    ('AdamW', [0.001])
"""
from . import lr_scheduler, swa_utils  # noqa: F401
from .adadelta import Adadelta
from .adafactor import Adafactor, Muon
from .adagrad import Adagrad
from .adam import Adam
from .adamax import Adamax
from .adamw import AdamW
from .asgd import ASGD
from .lbfgs import LBFGS
from .nadam import NAdam
from .optimizer import Optimizer
from .radam import RAdam
from .rmsprop import RMSprop
from .rprop import Rprop
from .sgd import SGD
from .sparse_adam import SparseAdam
from ._stateless import swap_in_optimizer_params_and_state

__all__ = ["ASGD", "Adadelta", "Adafactor", "Adagrad", "Adam", "AdamW", "Adamax", "LBFGS",
           "Muon", "NAdam", "Optimizer", "RAdam", "RMSprop", "Rprop", "SGD", "SparseAdam",
           "lr_scheduler", "swap_in_optimizer_params_and_state"]
