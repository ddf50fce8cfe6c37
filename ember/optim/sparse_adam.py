"""SparseAdam: Adam that updates only the rows a sparse gradient touches
(``torch.optim.SparseAdam``)."""
import math

from .._backends import backend
from .._tensor import Tensor
from .optimizer import Optimizer, _run_closure

__all__ = ["SparseAdam"]


class SparseAdam(Optimizer):
    """Adam masked to the entries of sparse gradients (``nn.Embedding(sparse=True)``): the
    moments and the parameter change only where the gradient stores a value.

    See https://pytorch.org/docs/stable/generated/torch.optim.SparseAdam.html.

    Args:
        params (iterable): dense parameters (whose gradients are sparse) or param groups.
        lr (float): learning rate, > 0. Default: 1e-3.
        betas (tuple[float, float]): decay rates of the moments, each in [0, 1).
            Default: (0.9, 0.999).
        eps (float): added to the denominator, > 0. Default: 1e-8.
        maximize (bool): ascend instead of descend. Default: False.

    Example:
        >>> import ember
        >>> emb = ember.nn.Embedding(4, 2, sparse=True)
        >>> opt = ember.optim.SparseAdam(emb.parameters(), lr=0.1)
        >>> before = emb.weight.detach().clone()
        >>> emb(ember.tensor([1, 3])).sum().backward()
        >>> opt.step()
        >>> (emb.weight.detach() != before).any(1).tolist()   # only the rows looked up
        [False, True, False, True]
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, maximize=False):
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not 0.0 < lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 < eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        for i, b in enumerate(betas):
            if not 0.0 <= b < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {b}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, maximize=maximize))
        for kind, test, why in (("Sparse", lambda p: p.is_sparse,
                                 "SparseAdam requires dense parameter tensors"),
                                ("Complex", lambda p: p.is_complex(),
                                 "SparseAdam does not support complex parameters")):
            bad = [[i, j] for i, g in enumerate(self.param_groups)
                   for j, p in enumerate(g["params"]) if test(p)]
            if bad:
                raise ValueError(f"{kind} params at indices {bad}: {why}")

    def __setstate__(self, state):
        super().__setstate__(state)
        for st in self.state.values():      # NOTE: torch's SparseAdam counts steps in an int
            if isinstance(st, dict) and isinstance(st.get("step"), Tensor):
                st["step"] = int(st["step"].item())

    def step(self, closure=None):
        """Update every parameter that has a (sparse) gradient; returns ``closure()`` if
        given."""
        loss = _run_closure(closure)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if not p.grad.is_sparse:
                    raise RuntimeError("SparseAdam does not support dense gradients, please "
                                       "consider Adam instead")
                state = self.state[p]
                if not state:
                    # NOTE: torch keeps this optimizer's step as a Python int
                    state["step"] = 0
                    state["exp_avg"] = Tensor._wrap(p._data * 0, p.device)
                    state["exp_avg_sq"] = Tensor._wrap(p._data * 0, p.device)
                state["step"] += 1
                self._update_rows(p, state, group)
        return loss

    @staticmethod
    def _update_rows(p, state, group):
        # torch's _functional.sparse_adam, operation for operation (the rounding matches)
        g = p.grad.coalesce()
        vals = g._values()._data
        if vals.size == 0:
            return
        rows = tuple(g._indices()._data)
        if group["maximize"]:
            vals = -vals
        beta1, beta2 = group["betas"]
        lr = group["lr"].item() if isinstance(group["lr"], Tensor) else group["lr"]
        exp_avg, exp_avg_sq = state["exp_avg"]._data, state["exp_avg_sq"]._data
        old = exp_avg[rows]
        update = (vals - old) * (1 - beta1)
        exp_avg[rows] = old + update
        old_sq = exp_avg_sq[rows]
        update_sq = (vals ** 2 - old_sq) * (1 - beta2)
        exp_avg_sq[rows] = old_sq + update_sq
        numer = update + old
        denom = backend(p.device).xp.sqrt(update_sq + old_sq) + group["eps"]
        step = state["step"]
        step_size = lr * math.sqrt(1 - beta2 ** step) / (1 - beta1 ** step)
        p._data[rows] += -step_size * (numer / denom)
        p._bump_version()
        state["exp_avg"]._bump_version()
        state["exp_avg_sq"]._bump_version()
