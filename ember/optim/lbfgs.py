"""L-BFGS with an optional strong-Wolfe line search (``torch.optim.LBFGS``).

A port of torch's implementation (itself after minFunc) onto flat NumPy vectors: the
parameters are viewed as one vector ``x``, the closure gives the loss and ``grad``.
"""
import numpy as np

from .._backends import array_module, device_of_array
from .._tensor import Tensor
from ..autograd.grad_mode import enable_grad
from .optimizer import Optimizer, _check_lr

__all__ = ["LBFGS"]


def _cubic_interpolate(x1, f1, g1, x2, f2, g2, bounds=None):
    """Minimizer of the cubic through (x1, f1, g1) and (x2, f2, g2), clipped to ``bounds``."""
    lo, hi = bounds if bounds is not None else ((x1, x2) if x1 <= x2 else (x2, x1))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1 ** 2 - g1 * g2
    if d2_square < 0:
        return (lo + hi) / 2.0
    d2 = d2_square ** 0.5
    if x1 <= x2:
        min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else:
        min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    return min(max(min_pos, lo), hi)


def _strong_wolfe(obj_func, x, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9, max_ls=25):
    """Line search along ``d`` for a step ``t`` meeting the strong Wolfe conditions."""
    d_norm = abs(d).max()
    g = g.copy()
    f_new, g_new = obj_func(x, t, d)
    ls_func_evals, ls_iter, done = 1, 0, False
    gtd_new = g_new.dot(d)
    t_prev, f_prev, g_prev, gtd_prev = 0, f, g, gtd
    # bracket an interval containing a point satisfying the conditions
    while ls_iter < max_ls:
        if f_new > (f + c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev) or gtd_new >= 0:
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new.copy()], [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bracket_f, bracket_g, done = [t], [f_new], [g_new], True
            break
        min_step, max_step, tmp = t + 0.01 * (t - t_prev), t * 10, t
        t = _cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new,
                               bounds=(min_step, max_step))
        t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new.copy(), gtd_new
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = g_new.dot(d)
        ls_iter += 1
    if ls_iter == max_ls:
        bracket, bracket_f, bracket_g = [0, t], [f, f_new], [g, g_new]
    # zoom: shrink the bracket until a point satisfies the conditions
    insuf_progress = False
    low, high = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0],
                               bracket[1], bracket_f[1], bracket_gtd[1])
        # NOTE: as torch (and minFunc), a point too close to an end of the bracket is moved
        # 10% inside it when the last step already made too little progress.
        eps = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < eps:
            if insuf_progress or t >= max(bracket) or t <= min(bracket):
                t = max(bracket) - eps if abs(t - max(bracket)) < abs(t - min(bracket)) \
                    else min(bracket) + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = g_new.dot(d)
        ls_iter += 1
        if f_new > (f + c1 * t * gtd) or f_new >= bracket_f[low]:
            bracket[high], bracket_f[high] = t, f_new
            bracket_g[high], bracket_gtd[high] = g_new.copy(), gtd_new
            low, high = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high] - bracket[low]) >= 0:
                bracket[high], bracket_f[high] = bracket[low], bracket_f[low]
                bracket_g[high], bracket_gtd[high] = bracket_g[low], bracket_gtd[low]
            bracket[low], bracket_f[low] = t, f_new
            bracket_g[low], bracket_gtd[low] = g_new.copy(), gtd_new
    return bracket_f[low], bracket_g[low], bracket[low], ls_func_evals


class LBFGS(Optimizer):
    """L-BFGS. ``step(closure)`` runs up to ``max_iter`` iterations, calling ``closure`` (which
    must zero the grads, compute the loss, call ``backward`` and return the loss).

    Only one param group is supported, as torch. State (the curvature history) is kept on the
    first parameter, under torch's keys, with the vectors as ember Tensors.
    See https://pytorch.org/docs/stable/generated/torch.optim.LBFGS.html.

    Args:
        params (iterable): parameters to optimize.
        lr (float): learning rate. Default: 1.
        max_iter (int): iterations per ``step``. Default: 20.
        max_eval (int): closure calls per ``step``. Default: ``max_iter * 5 // 4``.
        tolerance_grad (float): stop when ``max|grad| <=`` this. Default: 1e-7.
        tolerance_change (float): stop when the loss or step changes less. Default: 1e-9.
        history_size (int): number of curvature pairs kept. Default: 100.
        line_search_fn (str): ``'strong_wolfe'`` or None. Default: None.

    Example:
        >>> import ember
        >>> w = ember.nn.Parameter(ember.tensor([1.0, -2.0]))
        >>> opt = ember.optim.LBFGS([w], line_search_fn="strong_wolfe")
        >>> def closure():
        ...     opt.zero_grad()
        ...     loss = ((w - 3) ** 2).sum()
        ...     loss.backward()
        ...     return loss
        >>> _ = opt.step(closure)
        >>> [round(v, 4) for v in w.tolist()]
        [3.0, 3.0]
    """

    def __init__(self, params, lr=1, max_iter=20, max_eval=None, tolerance_grad=1e-7,
                 tolerance_change=1e-9, history_size=100, line_search_fn=None):
        _check_lr(lr)
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        defaults = dict(lr=lr, max_iter=max_iter, max_eval=max_eval,
                        tolerance_grad=tolerance_grad, tolerance_change=tolerance_change,
                        history_size=history_size, line_search_fn=line_search_fn)
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]

    def _gather_flat_grad(self):
        xp = array_module(self._params[0]._data)
        return xp.concatenate([xp.zeros(p.numel(), p._data.dtype) if p.grad is None
                               else p.grad._data.reshape(-1) for p in self._params])

    def _add_grad(self, step_size, update):
        offset = 0
        for p in self._params:
            n = p.numel()
            p._data += step_size * update[offset:offset + n].reshape(p._data.shape)
            p._bump_version()
            offset += n

    def _set_param(self, xs):
        for p, x in zip(self._params, xs):
            p._data[...] = x
            p._bump_version()

    def _directional_evaluate(self, closure, x, t, d):
        self._add_grad(t, d)
        loss = float(closure())
        flat_grad = self._gather_flat_grad()
        self._set_param(x)
        return loss, flat_grad

    def step(self, closure):
        """One L-BFGS optimization step (several iterations); returns the first loss."""
        group = self.param_groups[0]
        lr, max_iter, max_eval = float(group["lr"]), group["max_iter"], group["max_eval"]
        tol_grad, tol_change = group["tolerance_grad"], group["tolerance_change"]
        line_search_fn, history_size = group["line_search_fn"], group["history_size"]

        def evaluate():
            with enable_grad():
                return closure()

        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)
        orig_loss = evaluate()
        loss = float(orig_loss)
        current_evals = 1
        state["func_evals"] += 1
        flat_grad = self._gather_flat_grad()
        if abs(flat_grad).max() <= tol_grad:
            return orig_loss
        d, t = _arr(state.get("d")), _num(state.get("t"))
        old_dirs = [_arr(v) for v in state.get("old_dirs") or []]
        old_stps = [_arr(v) for v in state.get("old_stps") or []]
        ro = [_num(v) for v in state.get("ro") or []]
        h_diag, prev_flat_grad = _num(state.get("H_diag")), _arr(state.get("prev_flat_grad"))
        prev_loss = state.get("prev_loss")
        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            if state["n_iter"] == 1:
                d, old_dirs, old_stps, ro, h_diag = -flat_grad, [], [], [], 1
            else:
                y, s = flat_grad - prev_flat_grad, d * t
                ys = y.dot(s)
                if ys > 1e-10:              # update the memory only on positive curvature
                    if len(old_dirs) == history_size:
                        old_dirs.pop(0), old_stps.pop(0), ro.pop(0)
                    old_dirs.append(y), old_stps.append(s), ro.append(1.0 / ys)
                    h_diag = ys / y.dot(y)
                d = _two_loop(-flat_grad, old_dirs, old_stps, ro, h_diag)
            prev_flat_grad = flat_grad.copy()
            prev_loss = loss
            t = min(1.0, 1.0 / abs(flat_grad).sum()) * lr if state["n_iter"] == 1 else lr
            gtd = flat_grad.dot(d)
            if gtd > -tol_change:           # not a descent direction
                break
            ls_func_evals = 0
            if line_search_fn is not None:
                if line_search_fn != "strong_wolfe":
                    raise RuntimeError("only 'strong_wolfe' is supported")
                x_init = [p._data.copy() for p in self._params]
                loss, flat_grad, t, ls_func_evals = _strong_wolfe(
                    lambda x, t, d: self._directional_evaluate(evaluate, x, t, d),
                    x_init, t, d, loss, flat_grad, gtd, max_ls=max_eval - current_evals)
                self._add_grad(t, d)
                opt_cond = abs(flat_grad).max() <= tol_grad
            else:
                self._add_grad(t, d)
                if n_iter != max_iter:
                    loss = float(evaluate())
                    flat_grad = self._gather_flat_grad()
                    opt_cond = abs(flat_grad).max() <= tol_grad
                    ls_func_evals = 1
            current_evals += ls_func_evals
            state["func_evals"] += ls_func_evals
            if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                break
            if abs(d * t).max() <= tol_change or abs(loss - prev_loss) < tol_change:
                break
        state.update(d=_t(d), t=t, old_dirs=[_t(v) for v in old_dirs],
                     old_stps=[_t(v) for v in old_stps], ro=[_t(v) for v in ro],
                     H_diag=_t(h_diag), prev_flat_grad=_t(prev_flat_grad), prev_loss=prev_loss)
        return orig_loss


def _two_loop(q, old_dirs, old_stps, ro, h_diag):
    """The L-BFGS two-loop recursion: ``H @ q`` from the stored curvature pairs."""
    al = [0.0] * len(old_dirs)
    for i in range(len(old_dirs) - 1, -1, -1):
        al[i] = old_stps[i].dot(q) * ro[i]
        q -= al[i] * old_dirs[i]
    r = q * h_diag
    for i in range(len(old_dirs)):
        be_i = old_dirs[i].dot(r) * ro[i]
        r += (al[i] - be_i) * old_stps[i]
    return r


def _t(x):
    # state holds Tensors (as torch's does) so state_dict() and load_state_dict() carry it
    return x if x is None or isinstance(x, Tensor) else Tensor._wrap(
        x if hasattr(x, "shape") else np.asarray(x), device_of_array(x))


def _arr(x):
    return x._data if isinstance(x, Tensor) else x


def _num(x):
    return float(x._data) if isinstance(x, Tensor) else x
