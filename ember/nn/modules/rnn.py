"""Recurrent layers: RNN, LSTM, GRU and their cells, with torch's parameter names and gate
order, so checkpoints load both ways."""
import math

import ember

from ..._ops.creation import empty, zeros
from ..._ops.recurrent import lstm_cell, lstm_layer
from ...autograd.graph import rename_node
from .. import functional as F
from .. import init
from ..parameter import Parameter
from ..utils.rnn import PackedSequence
from .module import Module, _changed

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _lstm_cell(x_proj, h, c, w_hh, b_hh, w_hr=None):
    h, c = lstm_cell(x_proj, F.linear(h, w_hh, b_hh), c)    # one fused op per step
    if w_hr is not None:
        h = F.linear(h, w_hr)
    return h, c


def _gru_cell(x_proj, h, w_hh, b_hh):
    xr, xz, xn = x_proj.chunk(3, -1)
    hr, hz, hn = F.linear(h, w_hh, b_hh).chunk(3, -1)
    r, z = (xr + hr).sigmoid(), (xz + hz).sigmoid()
    n = (xn + r * hn).tanh()
    return (1 - z) * n + z * h


def _rnn_cell(x_proj, h, w_hh, b_hh, relu):
    pre = x_proj + F.linear(h, w_hh, b_hh)
    return pre.relu() if relu else pre.tanh()


class RNNBase(Module):
    """Shared machinery of RNN, LSTM and GRU: parameters per layer and direction, the time
    loop, batch_first, bidirectional, inter-layer dropout, unbatched input."""

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__()
        if not 0 <= dropout <= 1 or isinstance(dropout, bool):
            raise ValueError("dropout should be a number in range [0, 1] representing the "
                             "probability of an element being zeroed")
        if hidden_size <= 0 or num_layers <= 0:
            raise ValueError("hidden_size and num_layers must be greater than zero")
        if proj_size < 0 or (proj_size and proj_size >= hidden_size):
            raise ValueError("proj_size has to be a positive integer smaller than hidden_size")
        if proj_size and mode != "LSTM":
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        self.mode, self.input_size, self.hidden_size = mode, input_size, hidden_size
        self.num_layers, self.bias, self.batch_first = num_layers, bias, batch_first
        self.dropout, self.bidirectional, self.proj_size = float(dropout), bidirectional, proj_size
        g, dirs = _GATES[mode] * hidden_size, 2 if bidirectional else 1
        real_h = proj_size or hidden_size
        self._flat_weights_names = []
        kw = dict(device=device, dtype=dtype)
        for layer in range(num_layers):
            for d in range(dirs):
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                in_size = input_size if layer == 0 else real_h * dirs
                names = [("weight_ih" + sfx, (g, in_size)), ("weight_hh" + sfx, (g, real_h))]
                if bias:
                    names += [("bias_ih" + sfx, (g,)), ("bias_hh" + sfx, (g,))]
                if proj_size:
                    names.append(("weight_hr" + sfx, (proj_size, hidden_size)))
                for name, shape in names:
                    setattr(self, name, Parameter(empty(*shape, **kw)))
                    self._flat_weights_names.append(name)
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for p in self.parameters():
            init.uniform_(p, -stdv, stdv)

    def extra_repr(self):
        return f"{self.input_size}, {self.hidden_size}" + _changed(self, dict(
            proj_size=0, num_layers=1, bias=True, batch_first=False, dropout=0,
            bidirectional=False))

    def _weights(self, layer, d):
        sfx = f"_l{layer}" + ("_reverse" if d else "")
        get = lambda n: getattr(self, n + sfx, None)  # noqa: E731
        return get("weight_ih"), get("weight_hh"), get("bias_ih"), get("bias_hh"), get("weight_hr")

    def _check_input(self, input):
        if input.dim() not in (2, 3):
            raise ValueError(f"{type(self).__name__}: Expected input to be 2D or 3D, got "
                             f"{input.dim()}D instead")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected "
                               f"{self.input_size}, got {input.shape[-1]}")

    def _run(self, input, hx):
        """Returns (output, (h_n, c_n)); a PackedSequence input gives a PackedSequence output
        and final states taken at each sequence's own last step."""
        packed = isinstance(input, PackedSequence)
        if packed:
            if input.data.shape[-1] != self.input_size:
                raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected "
                                   f"{self.input_size}, got {input.data.shape[-1]}")
            x, batch_sizes = input.data, input.batch_sizes.tolist()
            steps, batch, unbatched = len(batch_sizes), batch_sizes[0], False
        else:
            self._check_input(input)
            unbatched = input.dim() == 2
            x = input.unsqueeze(1) if unbatched else (input.transpose(0, 1) if self.batch_first
                                                      else input)
            # time-major (steps, batch, features): a packed batch where every sequence runs
            # every step (a packed input's data are its rows)
            steps, batch = x.shape[0], x.shape[1]
            batch_sizes = [batch] * steps
        h0, c0 = self._initial_states(x, hx, batch, unbatched)
        if packed and input.sorted_indices is not None:
            h0 = h0.index_select(1, input.sorted_indices)
            c0 = c0.index_select(1, input.sorted_indices) if c0 is not None else None
        dirs = 2 if self.bidirectional else 1
        finals_h, finals_c = [], []
        for layer in range(self.num_layers):
            outs = []
            for d in range(dirs):
                k = layer * dirs + d
                out, h, c = self._scan(x, batch_sizes, layer, d, h0[k],
                                       c0[k] if c0 is not None else None)
                outs.append(out)
                finals_h.append(h)
                finals_c.append(c)
            x = outs[0] if dirs == 1 else ember.cat(outs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        hn = ember.stack(finals_h, 0)
        cn = ember.stack(finals_c, 0) if c0 is not None else None
        if packed:
            if input.unsorted_indices is not None:
                hn = hn.index_select(1, input.unsorted_indices)
                cn = cn.index_select(1, input.unsorted_indices) if cn is not None else None
            return PackedSequence(x, input.batch_sizes, input.sorted_indices,
                                  input.unsorted_indices), (hn, cn)
        if self.batch_first and not unbatched:
            x = x.transpose(0, 1)
            # NOTE: torch's RNN and GRU transpose in place (TransposeBackward1), its LSTM not
            rename_node(x.grad_fn, None if self.mode == "LSTM" else "TransposeBackward1")
        out = x.squeeze(1) if unbatched else x
        if unbatched:
            hn, cn = hn.squeeze(1), (cn.squeeze(1) if cn is not None else None)
        return out, (hn, cn)

    def _initial_states(self, x, hx, batch, unbatched):
        dirs = 2 if self.bidirectional else 1
        real_h = self.proj_size or self.hidden_size
        lstm = self.mode == "LSTM"
        if hx is None:
            kw = dict(dtype=x.dtype, device=x.device)
            h0 = zeros(self.num_layers * dirs, batch, real_h, **kw)
            return h0, (zeros(self.num_layers * dirs, batch, self.hidden_size, **kw) if lstm
                        else None)
        h0, c0 = hx if lstm else (hx, None)
        if unbatched:
            h0, c0 = h0.unsqueeze(1), (c0.unsqueeze(1) if c0 is not None else None)
        expect = (self.num_layers * dirs, batch, real_h)
        if tuple(h0.shape) != expect:
            raise RuntimeError(f"Expected hidden size {expect}, got {tuple(h0.shape)}")
        return h0, c0

    def _scan(self, x, batch_sizes, layer, d, h, c):
        """One direction of one layer over time-major ``x``: (steps, batch, features), or a
        packed batch's rows, step ``t`` owning the next ``batch_sizes[t]``. Rows past a
        sequence's end keep their state, so the final state of each sequence is the one at its
        own last step (first step when reversed). Returns (outputs in x's layout, final h,
        final c)."""
        w_ih, w_hh, b_ih, b_hh, w_hr = self._weights(layer, d)
        if self.mode == "LSTM" and w_hr is None and x.dim() == 3:
            # every sequence runs every step: the whole time loop is one op
            out, h, c, _, _ = lstm_layer(F.linear(x, w_ih, b_ih), h, c, w_hh, b_hh, bool(d))
            return out, h, c
        # all time steps' input projections at once, split in one op: per-step slicing would
        # give each step a backward that scatters into a zeros array the size of all steps
        proj = F.linear(x, w_ih, b_ih)
        proj = proj.unbind(0) if x.dim() == 3 else proj.split(batch_sizes)
        seq = [None] * len(batch_sizes)
        for t in (reversed(range(len(batch_sizes))) if d else range(len(batch_sizes))):
            bs = batch_sizes[t]
            xt = proj[t]
            full = bs == h.shape[0]
            ht, ct = (h, c) if full else (h[:bs], c[:bs] if c is not None else None)
            if self.mode == "LSTM":
                ht, ct = _lstm_cell(xt, ht, ct, w_hh, b_hh, w_hr)
            elif self.mode == "GRU":
                ht = _gru_cell(xt, ht, w_hh, b_hh)
            else:
                ht = _rnn_cell(xt, ht, w_hh, b_hh, self.mode == "RNN_RELU")
            seq[t] = ht
            h = ht if full else ember.cat([ht, h[bs:]])
            if c is not None:
                c = ct if full else ember.cat([ct, c[bs:]])
        return (ember.stack if x.dim() == 3 else ember.cat)(seq, 0), h, c

    def flatten_parameters(self):
        """Nothing to do: ember has no cuDNN weight buffer to pack the weights into."""

    @property
    def all_weights(self):
        dirs = 2 if self.bidirectional else 1
        return [[p for p in self._weights(layer, d) if p is not None]
                for layer in range(self.num_layers) for d in range(dirs)]


class RNN(RNNBase):
    """Elman RNN: ``h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)`` (or relu).

    Example:
        >>> import ember
        >>> rnn = ember.nn.RNN(10, 20, 2)
        >>> out, h = rnn(ember.randn(5, 3, 10))
        >>> out.shape, h.shape
        (torch.Size([5, 3, 20]), torch.Size([2, 3, 20]))
    """

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or "
                             "'relu'.")
        self.nonlinearity = nonlinearity
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size,
                         hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         device=device, dtype=dtype)

    def forward(self, input, hx=None):
        out, (h, _) = self._run(input, hx)
        return out, h


class LSTM(RNNBase):
    """Long short-term memory (gates i, f, g, o as torch), optional ``proj_size``."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, proj_size, device, dtype)

    def forward(self, input, hx=None):
        out, (h, c) = self._run(input, hx)
        return out, (h, c)


class GRU(RNNBase):
    """Gated recurrent unit (gates r, z, n as torch)."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, device=None, dtype=None):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, device=device, dtype=dtype)

    def forward(self, input, hx=None):
        out, (h, _) = self._run(input, hx)
        return out, h


class RNNCellBase(Module):
    def __init__(self, input_size, hidden_size, bias, num_chunks, device=None, dtype=None):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        kw = dict(device=device, dtype=dtype)
        self.weight_ih = Parameter(empty(num_chunks * hidden_size, input_size, **kw))
        self.weight_hh = Parameter(empty(num_chunks * hidden_size, hidden_size, **kw))
        for name in ("bias_ih", "bias_hh"):
            self.register_parameter(name, Parameter(empty(num_chunks * hidden_size, **kw))
                                    if bias else None)
        self.reset_parameters()

    reset_parameters = RNNBase.reset_parameters

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s

    def _h0(self, input, hx):
        if hx is not None:
            return hx
        shape = (input.shape[0], self.hidden_size) if input.dim() == 2 else (self.hidden_size,)
        return zeros(*shape, dtype=input.dtype, device=input.device)


class RNNCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None,
                 dtype=None):
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)

    def forward(self, input, hx=None):
        return _rnn_cell(F.linear(input, self.weight_ih, self.bias_ih), self._h0(input, hx),
                         self.weight_hh, self.bias_hh, self.nonlinearity == "relu")


class LSTMCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input, hx=None):
        h, c = hx if hx is not None else (self._h0(input, None), self._h0(input, None))
        return _lstm_cell(F.linear(input, self.weight_ih, self.bias_ih), h, c, self.weight_hh,
                          self.bias_hh)


class GRUCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input, hx=None):
        return _gru_cell(F.linear(input, self.weight_ih, self.bias_ih), self._h0(input, hx),
                         self.weight_hh, self.bias_hh)
