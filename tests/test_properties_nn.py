"""Property tests against torch (hypothesis): conv and pooling over random geometry, gradients
of random programs, losses and optimizers with random options, sparse COO with random
entries."""
import numpy as np
import pytest

from properties import arange, same_outcome, settings

torch = pytest.importorskip("torch")
hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies
pytestmark = [pytest.mark.filterwarnings("ignore:reduction. .mean. divides the total loss"),
              pytest.mark.filterwarnings("ignore:Sparse invariant checks")]


# ---- convolution, pooling, padding and resizing with random geometry -----------------------

@settings
@hypothesis.given(st.sampled_from(["conv2d", "conv1d", "conv_transpose2d", "max_pool2d",
                                   "avg_pool2d", "max_pool1d", "adaptive_avg_pool2d",
                                   "adaptive_max_pool2d", "lp_pool2d", "pad", "interpolate",
                                   "unfold", "pixel_shuffle"]), st.data())
def test_conv_and_pooling_geometry_matches_torch(name, data):
    d = data.draw
    n, c, h, w = d(st.integers(1, 2)), d(st.integers(1, 4)), d(st.integers(1, 7)), \
        d(st.integers(1, 7))
    k, s, p, dil = d(st.integers(1, 4)), d(st.integers(1, 3)), d(st.integers(0, 2)), \
        d(st.integers(1, 2))
    groups = d(st.sampled_from([g for g in (1, 2, 4) if c % g == 0]))
    out_c = groups * d(st.integers(1, 2))
    flag = d(st.booleans())
    mode = d(st.sampled_from(["constant", "reflect", "replicate", "circular"]))
    resize = d(st.sampled_from(["nearest", "bilinear", "bicubic", "nearest-exact", "area"]))
    size = (d(st.integers(1, 9)), d(st.integers(1, 9)))

    def run(T):
        F = T.nn.functional
        x = (arange(T, (n, c, h, w)) % 5) - 2.0
        if name in ("conv2d", "conv_transpose2d"):
            wt = (arange(T, (out_c, c // groups, k, k)) % 3) - 1.0
            if name == "conv2d":
                return F.conv2d(x, wt, None, s, p, dil, groups)
            return F.conv_transpose2d(x, wt.transpose(0, 1).reshape(c, out_c // groups, k, k),
                                      None, s, p, min(p, s - 1), groups, dil)
        if name == "conv1d":
            return F.conv1d(x[:, :, 0], (arange(T, (out_c, c // groups, k)) % 3) - 1.0,
                            None, s, p, dil, groups)
        if name == "max_pool2d":
            return F.max_pool2d(x, k, s, min(p, k // 2), dil, ceil_mode=flag)
        if name == "avg_pool2d":
            return F.avg_pool2d(x, k, s, min(p, k // 2), ceil_mode=flag,
                                count_include_pad=mode == "constant")
        if name == "max_pool1d":
            return F.max_pool1d(x[:, :, 0], k, s, min(p, k // 2), dil, ceil_mode=flag)
        if name == "adaptive_avg_pool2d":
            return F.adaptive_avg_pool2d(x, size)
        if name == "adaptive_max_pool2d":
            return F.adaptive_max_pool2d(x, size)
        if name == "lp_pool2d":
            return F.lp_pool2d(x, 2.0, k, s, ceil_mode=flag)
        if name == "pad":
            return F.pad(x, (p, k - 1, s - 1, p), mode=mode)
        if name == "interpolate":
            return F.interpolate(x, size=size, mode=resize,
                                 align_corners=flag if resize in ("bilinear", "bicubic") else None)
        if name == "unfold":
            return F.unfold(x, k, dil, p, s)
        return F.pixel_shuffle(arange(T, (n, 4 * c, h, w)), 2)
    same_outcome(run)


# ---- autograd through random programs -------------------------------------------------------

_UNARY = {"tanh": lambda T, x: x.tanh(), "sin": lambda T, x: x.sin(),
          "square": lambda T, x: x * x, "relu": lambda T, x: T.relu(x),
          "softmax": lambda T, x: T.softmax(x, -1), "exp_neg": lambda T, x: T.exp(-x.abs()),
          "sum_keep": lambda T, x: x.sum(-1, keepdim=True),
          "mean0": lambda T, x: x.mean(0) if x.dim() > 1 else x.mean(),
          "transpose": lambda T, x: x.transpose(0, -1), "flip": lambda T, x: x.flip(-1),
          "slice": lambda T, x: x[..., ::2], "clamp": lambda T, x: x.clamp(-0.5, 0.7),
          "cumsum": lambda T, x: x.cumsum(-1), "amax": lambda T, x: x.amax(-1, keepdim=True),
          "norm": lambda T, x: x / (1 + x.norm()), "unsqueeze_cat": lambda T, x: T.cat(
              [x, x.unsqueeze(0).squeeze(0)], -1), "inplace_mul": lambda T, x: x.clone().mul_(
              2).add_(1)}
_BINARY = {"add": lambda T, x, y: x + y, "mul": lambda T, x, y: x * y,
           "div": lambda T, x, y: x / (1.5 + y.abs()), "where": lambda T, x, y: T.where(
               x > y, x, y), "maximum": lambda T, x, y: T.maximum(x, y),
           "atan2": lambda T, x, y: T.atan2(x, y + 3)}


@settings
@hypothesis.given(st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple),
                  st.lists(st.tuples(st.sampled_from(sorted(_UNARY) + sorted(_BINARY)),
                                     st.integers(0, 9)), min_size=1, max_size=6))
def test_gradients_of_random_programs_match_torch(shape, program):
    def run(T):
        leaves = [((arange(T, shape) * (0.37 + 0.11 * i)) % 2.1 - 1.0).requires_grad_()
                  for i in range(2)]
        values = list(leaves)
        for name, pick in program:
            x = values[pick % len(values)]
            if name in _BINARY:
                y = values[(pick // 2) % len(values)]
                try:
                    T.broadcast_shapes(tuple(x.shape), tuple(y.shape))
                except RuntimeError:
                    y = y.sum()
                values.append(_BINARY[name](T, x, y))
            else:
                values.append(_UNARY[name](T, x))
        out = values[-1]
        grads = T.autograd.grad((out * (arange(T, tuple(out.shape)) % 3 - 1)).sum(), leaves,
                                allow_unused=True)
        return T.cat([out.reshape(-1)] + [g.reshape(-1) for g in grads if g is not None])
    same_outcome(run)


# ---- losses with random options -------------------------------------------------------------

@settings
@hypothesis.given(st.sampled_from(["cross_entropy", "cross_entropy_probs", "nll_loss",
                                   "bce_logits", "bce", "mse", "l1", "smooth_l1", "huber",
                                   "kl_div", "margin_ranking", "hinge_embedding",
                                   "multilabel_soft_margin", "poisson_nll", "gaussian_nll",
                                   "cosine_embedding", "multi_margin", "soft_margin",
                                   "triplet_margin"]),
                  st.sampled_from(["mean", "sum", "none"]), st.data())
def test_losses_with_random_options_match_torch(name, reduction, data):
    d = data.draw
    n, c, extra = d(st.integers(1, 4)), d(st.integers(2, 5)), d(st.sampled_from([(), (3,)]))
    ignore = d(st.sampled_from([-100, 0, 1]))
    smoothing = d(st.sampled_from([0.0, 0.1]))
    weighted, flag = d(st.booleans()), d(st.booleans())
    beta = d(st.sampled_from([0.5, 1.0, 2.0]))
    labels = d(st.lists(st.integers(0, c - 1), min_size=n * int(np.prod(extra)),
                        max_size=n * int(np.prod(extra))))

    def run(T):
        F = T.nn.functional
        x = (((arange(T, (n, c) + extra) * 0.37) % 2.3) - 1.1).requires_grad_()
        y = (((arange(T, (n, c) + extra) * 0.53) % 1.7) - 0.6)
        p = T.sigmoid(y)
        t = T.tensor(labels).reshape((n,) + extra)
        w = T.arange(1.0, c + 1, dtype=T.float64) if weighted else None
        if name == "cross_entropy":
            out = F.cross_entropy(x, t, w, ignore_index=ignore, reduction=reduction,
                                  label_smoothing=smoothing)
        elif name == "cross_entropy_probs":
            out = F.cross_entropy(x, T.softmax(y, 1), w, reduction=reduction,
                                  label_smoothing=smoothing)
        elif name == "nll_loss":
            out = F.nll_loss(T.log_softmax(x, 1), t, w, ignore_index=ignore, reduction=reduction)
        elif name == "bce_logits":
            out = F.binary_cross_entropy_with_logits(
                x, p, reduction=reduction,
                pos_weight=T.arange(1.0, c + 1, dtype=T.float64).reshape((c,) + (1,) * len(extra))
                if flag else None)
        elif name == "bce":
            out = F.binary_cross_entropy(T.sigmoid(x), p, reduction=reduction)
        elif name in ("mse", "l1"):
            out = getattr(F, name + "_loss")(x, y, reduction=reduction)
        elif name == "smooth_l1":
            out = F.smooth_l1_loss(x, y, reduction=reduction, beta=beta)
        elif name == "huber":
            out = F.huber_loss(x, y, reduction=reduction, delta=beta)
        elif name == "kl_div":
            out = F.kl_div(T.log_softmax(x, 1), T.log_softmax(y, 1) if flag else
                           T.softmax(y, 1), reduction=reduction, log_target=flag)
        elif name == "margin_ranking":
            out = F.margin_ranking_loss(x, y, T.sign(y - 0.1), margin=beta - 0.5,
                                        reduction=reduction)
        elif name == "hinge_embedding":
            out = F.hinge_embedding_loss(x, T.where(y > 0, 1.0, -1.0), margin=beta,
                                         reduction=reduction)
        elif name == "multilabel_soft_margin":
            out = F.multilabel_soft_margin_loss(x, (y > 0).double(), w, reduction=reduction)
        elif name == "poisson_nll":
            out = F.poisson_nll_loss(x, p * 3, log_input=flag, full=weighted,
                                     reduction=reduction)
        elif name == "gaussian_nll":
            out = F.gaussian_nll_loss(x, y, p + 0.1, full=flag, reduction=reduction)
        elif name == "cosine_embedding":
            out = F.cosine_embedding_loss(x.reshape(n, -1), y.reshape(n, -1),
                                          T.where(T.arange(n) % 2 == 0, 1.0, -1.0),
                                          margin=beta - 1, reduction=reduction)
        elif name == "multi_margin":
            out = F.multi_margin_loss(x.reshape(n, -1)[:, :c], t.reshape(n, -1)[:, 0],
                                      p=1 if flag else 2, margin=beta, weight=w,
                                      reduction=reduction)
        elif name == "soft_margin":
            out = F.soft_margin_loss(x, T.where(y > 0, 1.0, -1.0), reduction=reduction)
        else:
            out = F.triplet_margin_loss(x.reshape(n, -1), y.reshape(n, -1),
                                        p.reshape(n, -1), margin=beta, swap=flag,
                                        reduction=reduction)
        (g,) = T.autograd.grad(out.sum(), x)
        return T.cat([out.reshape(-1), g.reshape(-1)])
    same_outcome(run)


# ---- optimizers with random hyperparameters -------------------------------------------------

@settings
@hypothesis.given(st.sampled_from(["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta",
                                   "Adamax", "NAdam", "RAdam", "ASGD", "Rprop"]),
                  st.sampled_from([0.0, 0.01]), st.booleans(), st.booleans(),
                  st.sampled_from([0.0, 0.9]), st.sampled_from([1e-3, 0.1]))
def test_optimizers_with_random_hyperparameters_match_torch(name, decay, flag, maximize,
                                                            momentum, lr):
    options = {"SGD": dict(momentum=momentum, nesterov=flag and momentum > 0,
                           dampening=0.0 if flag else 0.1),
               "Adam": dict(amsgrad=flag), "AdamW": dict(amsgrad=flag),
               "RMSprop": dict(centered=flag, momentum=momentum), "Adagrad": dict(lr_decay=0.01),
               "Adadelta": {}, "Adamax": {}, "NAdam": dict(decoupled_weight_decay=flag),
               "RAdam": dict(decoupled_weight_decay=flag), "ASGD": dict(t0=2), "Rprop": {}}[name]
    if name != "Rprop":
        options.update(weight_decay=decay, maximize=maximize)

    def run(T):
        p = (arange(T, (3, 4)) * 0.3 - 1.0).requires_grad_()
        opt = getattr(T.optim, name)([p], lr=lr, **options)
        for step in range(4):
            opt.zero_grad()
            ((p - 0.5) ** 2 * (1 + step) + p.sin()).sum().backward()
            opt.step()
        return p.detach()
    same_outcome(run)


# ---- sparse COO with random (duplicate) entries ---------------------------------------------

@settings
@hypothesis.given(st.data(), st.sampled_from(["to_dense", "coalesce", "add", "mul_scalar",
                                              "mm", "sum", "sum_dim", "transpose",
                                              "grad_mm", "grad_values"]))
def test_sparse_coo_with_random_entries_matches_torch(data, name):
    rows, cols = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    nnz = data.draw(st.integers(0, 6))
    idx = np.array([data.draw(st.lists(st.integers(0, n - 1), min_size=nnz, max_size=nnz))
                    for n in (rows, cols)], dtype=np.int64).reshape(2, nnz)
    vals = np.arange(1.0, nnz + 1) * 0.5

    def run(T):
        s = T.sparse_coo_tensor(T.tensor(idx), T.tensor(vals), (rows, cols))
        dense = arange(T, (cols, 3)) * 0.25
        if name == "to_dense":
            return s.to_dense()
        if name == "coalesce":
            c = s.coalesce()
            return T.cat([c.indices().double().reshape(-1), c.values()])
        if name == "add":
            return (s + s.coalesce()).to_dense()
        if name == "mul_scalar":
            return (s * 2.5).to_dense()
        if name == "mm":
            return T.sparse.mm(s, dense)
        if name == "sum":
            return T.sparse.sum(s)
        if name == "sum_dim":
            return T.sparse.sum(s, 1).to_dense()
        if name == "transpose":
            return s.t().to_dense()
        d = dense.requires_grad_()
        v = T.tensor(vals).requires_grad_()
        s = T.sparse_coo_tensor(T.tensor(idx), v, (rows, cols))
        T.sparse.mm(s, d).sum().backward()
        return d.grad if name == "grad_mm" else v.grad
    same_outcome(run)


# ---- in-place ops on views inside autograd --------------------------------------------------

_INPLACE_STEPS = {
    "mul_view": lambda T, v: v[0].mul_(2), "add_all": lambda T, v: v[-1].add_(1),
    "exp_saved": lambda T, v: v.append(v[-1].exp()) or v[-2].add_(1),
    "sigmoid_out": lambda T, v: v.append(v[-1].sigmoid()) or v[-1].mul_(3),
    "view_then_inplace": lambda T, v: v.append(v[-1].view(-1)) or v[-1][1:].zero_(),
    "transpose_inplace": lambda T, v: v.append(v[-1].t()) or v[-1].sub_(0.5),
    "leaf_inplace": lambda T, v: v[0].add_(1),
    "detach_inplace": lambda T, v: v[-1].detach().mul_(0),
    "clone": lambda T, v: v.append(v[-1].clone()),
    "tanh": lambda T, v: v.append(v[-1].tanh()), "square": lambda T, v: v.append(v[-1] ** 2),
    "unbind_inplace": lambda T, v: v.append(v[-1] * 1) or v[-1].unbind(0)[0].mul_(2),
    "no_grad_inplace": lambda T, v: _no_grad(T, lambda: v[-1].mul_(2)),
    "setitem": lambda T, v: v.append(v[-1] + 0) or v[-1].__setitem__((0, 0), 5.0),
}


def _no_grad(T, f):
    with T.no_grad():
        f()


@settings
@hypothesis.given(st.lists(st.sampled_from(sorted(_INPLACE_STEPS)), min_size=1, max_size=5))
def test_in_place_ops_under_autograd_match_torch(steps):
    def run(T):
        leaf = (arange(T, (2, 3)) * 0.3 - 0.4).requires_grad_()
        values = [leaf, leaf * 1.0]
        for name in steps:
            _INPLACE_STEPS[name](T, values)
        (g,) = T.autograd.grad(values[-1].sum() + values[1].sum(), leaf, allow_unused=True)
        return T.cat([values[-1].detach().reshape(-1), (g if g is not None else
                                                          T.zeros(6, dtype=T.float64)).reshape(-1)])
    same_outcome(run)
