"""AdaptiveLogSoftmaxWithLoss (Grave et al., 2016, as torch's) and the legacy CrossMapLRN2d."""
import collections
import itertools

from ... import _ops  # noqa: F401  (ember's ops on Tensor)
from .. import functional as F
from .container import ModuleList, Sequential
from .linear import Linear
from .module import Module

_ASMoutput = collections.namedtuple("_ASMoutput", ["output", "loss"])


class AdaptiveLogSoftmaxWithLoss(Module):
    """A log-softmax over ``n_classes`` split at ``cutoffs``: frequent classes in a head,
    the rest in clusters reached through the head with smaller projections (``div_value``).
    ``forward(input, target)`` gives each target's log-probability and the mean loss.

    Example:
        >>> import ember
        >>> m = ember.nn.AdaptiveLogSoftmaxWithLoss(8, 10, cutoffs=[4, 8])
        >>> out = m(ember.randn(3, 8), ember.tensor([0, 5, 9]))
        >>> out.output.shape, out.loss.shape, m.log_prob(ember.randn(2, 8)).shape
        (torch.Size([3]), torch.Size([]), torch.Size([2, 10]))
    """

    def __init__(self, in_features, n_classes, cutoffs, div_value=4.0, head_bias=False,
                 device=None, dtype=None):
        super().__init__()
        cutoffs = list(cutoffs)
        if len(cutoffs) == 0:
            raise ValueError("cutoffs should be a sequence of length larger than 0")
        if cutoffs != sorted(cutoffs) or min(cutoffs) <= 0 or max(cutoffs) > n_classes - 1 or \
                len(set(cutoffs)) != len(cutoffs) or any(int(c) != c for c in cutoffs):
            raise ValueError("cutoffs should be a sequence of unique, positive integers sorted in "
                             "an increasing order, where each value is between 1 and n_classes-1")
        fk = dict(device=device, dtype=dtype)
        self.in_features, self.n_classes, self.cutoffs = in_features, n_classes, \
            cutoffs + [n_classes]
        self.div_value, self.head_bias = div_value, head_bias
        self.shortlist_size, self.n_clusters = self.cutoffs[0], len(self.cutoffs) - 1
        self.head_size = self.shortlist_size + self.n_clusters
        self.head = Linear(in_features, self.head_size, bias=head_bias, **fk)
        self.tail = ModuleList()
        for i in range(self.n_clusters):
            hsz = int(in_features // (div_value ** (i + 1)))
            self.tail.append(Sequential(
                Linear(in_features, hsz, bias=False, **fk),
                Linear(hsz, self.cutoffs[i + 1] - self.cutoffs[i], bias=False, **fk)))

    def reset_parameters(self):
        self.head.reset_parameters()
        for i2h, h2o in self.tail:
            i2h.reset_parameters()
            h2o.reset_parameters()

    def forward(self, input_, target_):
        if target_.dim() == 1:
            if input_.size(0) != target_.size(0):
                raise RuntimeError("Input and target should have the same size in the batch "
                                   "dimension.")
            if input_.dim() != 2:
                raise RuntimeError(f"1D target tensor expects 2D input tensors, but found "
                                   f"inputs with size {input_.size()}")
        elif target_.dim() == 0:
            if input_.dim() != 1:
                raise RuntimeError(f"0D target tensor expects 1D input tensors, but found "
                                   f"inputs with size {input_.size()}")
        else:
            raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
        batched = target_.dim() > 0
        input = input_ if batched else input_.unsqueeze(0)
        target = target_ if batched else target_.unsqueeze(0)
        used, n = 0, target.size(0)
        output, gather = input.new_zeros(n), target.new_empty(n)
        bounds = [0] + self.cutoffs
        for i in range(len(bounds) - 1):
            mask = (target >= bounds[i]) & (target < bounds[i + 1])
            rows = mask.nonzero().squeeze()
            if rows.numel() == 0:
                continue
            if i == 0:
                gather.index_copy_(0, rows, target[mask])
            else:
                logprob = F.log_softmax(self.tail[i - 1](input.index_select(0, rows)), dim=1)
                gather.index_fill_(0, rows, self.shortlist_size + i - 1)
                local = logprob.gather(1, (target[mask] - bounds[i]).unsqueeze(1))
                output.index_copy_(0, rows, local.squeeze(1))
            used += rows.numel()
        if used != n:
            raise RuntimeError(f"Target values should be in [0, {self.n_classes - 1}], but "
                               f"values in range [{target.min().item()}, "
                               f"{target.max().item()}] were found. ")
        head = F.log_softmax(self.head(input), dim=1)
        output += head.gather(1, gather.unsqueeze(1)).squeeze()
        loss = (-output).mean()
        return _ASMoutput(output if batched else output.squeeze(0), loss)

    def _get_full_log_prob(self, input, head_output):
        out = input.new_empty((head_output.size(0), self.n_classes))
        head = F.log_softmax(head_output, dim=1)
        out[:, :self.shortlist_size] = head[:, :self.shortlist_size]
        for i, (start, stop) in enumerate(itertools.pairwise(self.cutoffs)):
            out[:, start:stop] = F.log_softmax(self.tail[i](input), dim=1) + \
                head[:, self.shortlist_size + i].unsqueeze(1)
        return out

    def log_prob(self, input):
        """Log-probabilities of every class, (N, n_classes)."""
        return self._get_full_log_prob(input, self.head(input))

    def predict(self, input):
        """The most likely class per row (the full distribution only where the head's best
        is a cluster)."""
        head = self.head(input)
        output = head.argmax(dim=1)
        far = output >= self.shortlist_size
        if not far.any():
            return output
        if far.all():
            return self._get_full_log_prob(input, head).argmax(dim=1)
        output[far] = self._get_full_log_prob(input[far], head[far]).argmax(dim=1)
        return output


class CrossMapLRN2d(Module):
    """Lua Torch's cross-channel local response normalization of 4-d input:
    ``x / (k + alpha/size * sum of x^2 over neighbouring channels)^beta``, with torch's window
    (``int((size - 1) / 2 + 1) - 1`` channels each side, and channel 0 kept in every later
    window, as torch's running sum does).

    Example:
        >>> import ember
        >>> ember.nn.CrossMapLRN2d(3)(ember.ones(1, 4, 2, 2)).shape
        torch.Size([1, 4, 2, 2])
    """

    def __init__(self, size, alpha=1e-4, beta=0.75, k=1):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input):
        if input.dim() != 4:
            raise ValueError(f"CrossMapLRN2d: Expected input to be 4D, got {input.dim()}D instead.")
        pre = int((self.size - 1) / 2 + 1)
        sq = input * input
        c = input.size(1)
        padded = F.pad(sq, (0, 0, 0, 0, pre - 1, pre - 1))
        total = sum(padded[:, j:j + c] for j in range(2 * pre - 1))
        # NOTE: as torch's running sum, channel 0 never leaves the window once past it
        late = (_ops.creation.arange(c, device=input.device) >= pre).to(input.dtype)
        total = total + sq[:, :1] * late.view(1, c, 1, 1)
        return input * (total * (self.alpha / self.size) + self.k) ** -self.beta

    def extra_repr(self):
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"
