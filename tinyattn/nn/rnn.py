"""Recurrent cells and layers with PyTorch's parameter names, layouts and gate order.

weight_ih is (G*H, input_size) and weight_hh is (G*H, hidden_size), with the G gates stacked in PyTorch's order:
GRU r, z, n; LSTM i, f, g, o. Weights copied from PyTorch therefore give the same outputs.
The sequence layers project the whole input sequence in one matmul and loop in Python only over time steps.
A batch of right-padded sequences goes in as pack_padded_sequence(x, lengths) (as in PyTorch): each sequence then
stops at its own length, and the reverse direction of a bidirectional layer starts at its last real step.
"""
from collections import namedtuple

from .. import backend, functional as F
from .. import ops
from ..creation import zeros
from ..tensor import Tensor, as_array
from .module import Module
from .layers import _parameter
from . import init


class PackedSequence(namedtuple("PackedSequence", ["padded", "lengths", "batch_first"])):
    """A batch of right-padded sequences and each one's length. Unlike PyTorch's, it keeps the padded layout (so no
    .data / .batch_sizes of the packed one); pack_padded_sequence, pad_packed_sequence and the RNN layers take it."""


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """Mark a padded batch (T, B, *) or (B, T, *) with the real length of each sequence, as torch.nn.utils.rnn."""
    lengths = backend.to_host(as_array(lengths)).astype(backend.int64).reshape(-1)
    batch, steps = (input.shape[0], input.shape[1]) if batch_first else (input.shape[1], input.shape[0])
    if lengths.shape != (batch,) or lengths.min(initial=1) < 1 or lengths.max(initial=0) > steps:
        raise ValueError(f"lengths {lengths.tolist()} must give one length in 1..{steps} for each of the {batch} "
                         f"sequences of an input of shape {input.shape}")
    if enforce_sorted and (lengths[:-1] < lengths[1:]).any():
        raise ValueError("lengths must be sorted longest first, or pass enforce_sorted=False")
    return PackedSequence(input, lengths, batch_first)


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """(padded output, lengths) of an RNN's packed output, positions past each length set to padding_value."""
    x = sequence.padded if sequence.batch_first == batch_first else sequence.padded.transpose(0, 1)
    steps = backend.numpy.arange(x.shape[1 if batch_first else 0])
    past_end = steps[None, :] >= sequence.lengths[:, None]                                 # (B, T)
    past_end = past_end if batch_first else past_end.T
    xp = backend.xp_of(x.array)
    x = ops.masked_fill(x, xp.asarray(past_end.reshape(past_end.shape + (1,) * (x.ndim - 2))), padding_value)
    if total_length is not None and total_length > x.shape[1 if batch_first else 0]:
        extra = list(x.shape)
        extra[1 if batch_first else 0] = total_length - x.shape[1 if batch_first else 0]
        x = ops.cat([x, Tensor(xp.full(tuple(extra), padding_value, dtype=x.dtype))], dim=1 if batch_first else 0)
    return x, Tensor(sequence.lengths)


def reverse_within_length(x, lengths):
    """Flip each sequence's first lengths[b] steps of x (B, T, ...) and leave its padding where it is."""
    xp = backend.xp_of(x.array)
    lengths = xp.asarray(lengths)
    steps = xp.arange(x.shape[1])[None, :]
    index = xp.where(steps < lengths[:, None], lengths[:, None] - 1 - steps, steps)     # (B, T)
    return x[xp.arange(x.shape[0])[:, None], index]

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def rnn_step(x_proj, h, w_hh, b_hh, nonlinearity="tanh"):
    """h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh), given x_proj = x W_ih^T + b_ih."""
    pre = x_proj + F.linear(h, w_hh, b_hh)
    return ops.tanh(pre) if nonlinearity == "tanh" else ops.relu(pre)


def gru_step(x_proj, h, w_hh, b_hh):
    """r = s(x_r + h_r), z = s(x_z + h_z), n = tanh(x_n + r * h_n), h' = (1 - z) n + z h (fused: F.gru_cell)."""
    return F.gru_cell(x_proj, h, w_hh, b_hh)


def lstm_step(x_proj, state, w_hh, b_hh):
    """i, f, o = s(.), g = tanh(.), c' = f c + i g, h' = o tanh(c'). Returns (h', c')."""
    h, c = state
    i, f, g, o = (x_proj + F.linear(h, w_hh, b_hh)).chunk(4, dim=-1)
    c = ops.sigmoid(f) * c + ops.sigmoid(i) * ops.tanh(g)
    return ops.sigmoid(o) * ops.tanh(c), c


def _check_state(module, state, expected, what="hidden"):
    """PyTorch's check of an initial state: a state of another shape would broadcast over the batch, or leave a
    layer's part unused, without a word."""
    if tuple(state.shape) != tuple(expected):
        raise RuntimeError(f"{type(module).__name__}: expected {what} of size {tuple(expected)}, got {state.shape}")
    return state


def _init_weights(module, names, hidden_size):
    for name in names:
        init.default_uniform_(getattr(module, name), hidden_size)


class _Cell(Module):
    kind = "RNN"
    state_names = ("hidden",)

    def __init__(self, input_size, hidden_size, bias=True):
        super().__init__()
        gates = GATES[self.kind] * hidden_size
        self.input_size, self.hidden_size = input_size, hidden_size
        self.weight_ih = _parameter(gates, input_size)
        self.weight_hh = _parameter(gates, hidden_size)
        self.bias_ih = _parameter(gates) if bias else None
        self.bias_hh = _parameter(gates) if bias else None
        _init_weights(self, [n for n, _ in self.named_parameters()], hidden_size)

    def _prepare(self, x, hx):
        """(x, states, batched): unbatched input (input_size,) is treated as a batch of one, as in PyTorch, and its
        state(s) (hidden_size,) too; hx is a state, an (h, c) pair for LSTMCell, or None (zeros)."""
        if x.ndim not in (1, 2) or x.shape[-1] != self.input_size:
            raise ValueError(f"{type(self).__name__} expects input (batch, {self.input_size}) or ({self.input_size},), "
                             f"got shape {x.shape}")
        batched = x.ndim == 2
        x = x if batched else x.unsqueeze(0)
        expected = (x.shape[0], self.hidden_size) if batched else (self.hidden_size,)
        if hx is None:
            states = (zeros(x.shape[0], self.hidden_size, dtype=x.dtype, device=x.device),) * len(self.state_names)
        else:
            hx = hx if isinstance(hx, tuple) else (hx,)
            states = tuple(_check_state(self, s, expected, name) for s, name in zip(hx, self.state_names))
            states = states if batched else tuple(s.unsqueeze(0) for s in states)
        return x, states, batched

    def extra_repr(self):
        return f"{self.input_size}, {self.hidden_size}"


class RNNCell(_Cell):
    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh"):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"unknown nonlinearity {nonlinearity!r}: 'tanh' or 'relu'")
        super().__init__(input_size, hidden_size, bias)
        self.nonlinearity = nonlinearity

    def forward(self, x, hx=None):
        x, (h,), batched = self._prepare(x, hx)
        h = rnn_step(F.linear(x, self.weight_ih, self.bias_ih), h, self.weight_hh, self.bias_hh, self.nonlinearity)
        return h if batched else h.squeeze(0)


class GRUCell(_Cell):
    kind = "GRU"

    def forward(self, x, hx=None):
        x, (h,), batched = self._prepare(x, hx)
        h = gru_step(F.linear(x, self.weight_ih, self.bias_ih), h, self.weight_hh, self.bias_hh)
        return h if batched else h.squeeze(0)


class LSTMCell(_Cell):
    kind = "LSTM"
    state_names = ("hidden[0]", "hidden[1]")

    def forward(self, x, hx=None):
        x, (h, c), batched = self._prepare(x, hx)
        h, c = lstm_step(F.linear(x, self.weight_ih, self.bias_ih), (h, c), self.weight_hh, self.bias_hh)
        return (h, c) if batched else (h.squeeze(0), c.squeeze(0))


class _Recurrent(Module):
    """A stack of recurrent layers over a whole sequence: nn.RNN / nn.GRU / nn.LSTM."""

    kind = "RNN"

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, nonlinearity="tanh"):
        super().__init__()
        if num_layers < 1 or hidden_size < 1:
            raise ValueError(f"{type(self).__name__} needs num_layers and hidden_size of at least 1, got num_layers="
                             f"{num_layers}, hidden_size={hidden_size}")
        F.check_probability(f"{type(self).__name__} dropout", dropout)
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"unknown nonlinearity {nonlinearity!r}: 'tanh' or 'relu'")
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.batch_first, self.dropout, self.bidirectional = batch_first, dropout, bidirectional
        self.nonlinearity = nonlinearity
        directions = 2 if bidirectional else 1
        gates = GATES[self.kind] * hidden_size
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else hidden_size * directions
            for suffix in ("", "_reverse")[:directions]:
                setattr(self, f"weight_ih_l{layer}{suffix}", _parameter(gates, layer_input))
                setattr(self, f"weight_hh_l{layer}{suffix}", _parameter(gates, hidden_size))
                if bias:
                    setattr(self, f"bias_ih_l{layer}{suffix}", _parameter(gates))
                    setattr(self, f"bias_hh_l{layer}{suffix}", _parameter(gates))
        _init_weights(self, [n for n, _ in self.named_parameters()], hidden_size)

    def _weights(self, layer, suffix):
        get = lambda name: self._parameters.get(f"{name}_l{layer}{suffix}")
        return get("weight_ih"), get("weight_hh"), get("bias_ih"), get("bias_hh")

    def _run_direction(self, x, state, layer, suffix, lengths):
        """One layer in one direction over x (B, T, In); returns outputs (B, T, H) and the final state. With lengths,
        a sequence's state stops changing past its length, and the reverse direction reads each sequence from its
        own last step (reversed within its length, run forwards, flipped back)."""
        w_ih, w_hh, b_ih, b_hh = self._weights(layer, suffix)
        if suffix and lengths is not None:
            x = reverse_within_length(x, lengths)
        projected = F.linear(x, w_ih, b_ih)                   # every time step's input projection at once
        steps = range(x.shape[1] - 1, -1, -1) if suffix and lengths is None else range(x.shape[1])
        xp = backend.xp_of(x.array)
        outputs = [None] * x.shape[1]
        for t in steps:
            new = self._step(projected[:, t], state, w_hh, b_hh)
            if lengths is not None:                            # past its end, a sequence keeps its last state
                running = xp.asarray(t < lengths)[:, None]
                new = tuple(ops.where(running, n, s) for n, s in zip(new, state)) if self.kind == "LSTM" else \
                    ops.where(running, new, state)
            state = new
            outputs[t] = state[0] if self.kind == "LSTM" else state
        out = ops.stack(outputs, dim=1)
        return (reverse_within_length(out, lengths) if suffix and lengths is not None else out), state

    def _step(self, x_proj, state, w_hh, b_hh):
        if self.kind == "GRU":
            return gru_step(x_proj, state, w_hh, b_hh)
        if self.kind == "LSTM":
            return lstm_step(x_proj, state, w_hh, b_hh)
        return rnn_step(x_proj, state, w_hh, b_hh, self.nonlinearity)

    def forward(self, x, hx=None):
        """x (B, T, In) if batch_first else (T, B, In), a PackedSequence of them, or one unbatched sequence (T, In).
        Returns (output, h_n), h_n of shape (layers*dirs, B, H) (each sequence's state at its own last step), or
        (layers*dirs, H) for an unbatched sequence, as hx is; output is packed when x was. For LSTM, hx and the
        second result are (h, c) pairs."""
        packed = isinstance(x, PackedSequence)
        lengths = x.lengths if packed else None
        if packed:
            x = x.padded if x.batch_first == self.batch_first else x.padded.transpose(0, 1)
        batched = packed or x.ndim != 2
        if x.ndim not in (2, 3) or x.shape[-1] != self.input_size:
            raise ValueError(f"{type(self).__name__} expects a 3-D input (or an unbatched 2-D one) with last dim "
                             f"{self.input_size}, got shape {x.shape}")
        x = x if batched else x.unsqueeze(0)                                     # (1, T, In)
        if batched and not self.batch_first:
            x = x.transpose(0, 1)
        directions = 2 if self.bidirectional else 1
        states = (self.num_layers * directions, x.shape[0], self.hidden_size)
        names = LSTMCell.state_names if self.kind == "LSTM" else _Cell.state_names
        if hx is None:
            h0 = c0 = zeros(*states, dtype=x.dtype, device=x.device)
        else:
            hx = hx if isinstance(hx, tuple) else (hx,)
            if len(hx) != len(names):
                raise ValueError(f"{type(self).__name__} takes hx as {' and '.join(names)}, got {len(hx)} tensors")
            expected = states if batched else (states[0], states[2])
            hx = [_check_state(self, h, expected, name) for h, name in zip(hx, names)]
            h0, c0 = [h if batched else h.unsqueeze(1) for h in hx] + [None] * (2 - len(hx))
        finals_h, finals_c = [], []
        for layer in range(self.num_layers):
            outs = []
            for d, suffix in enumerate(("", "_reverse")[:directions]):
                index = layer * directions + d
                state = (h0[index], c0[index]) if self.kind == "LSTM" else h0[index]
                out, state = self._run_direction(x, state, layer, suffix, lengths)
                outs.append(out)
                finals_h.append(state[0] if self.kind == "LSTM" else state)
                if self.kind == "LSTM":
                    finals_c.append(state[1])
            x = outs[0] if directions == 1 else ops.cat(outs, dim=-1)
            if self.dropout and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, self.training)
        output = x.squeeze(0) if not batched else x if self.batch_first else x.transpose(0, 1)
        if packed:
            output = PackedSequence(output, lengths, self.batch_first)
        finals = [ops.stack(states, dim=0) for states in (finals_h, finals_c) if states]
        finals = finals if batched else [f.squeeze(1) for f in finals]
        return (output, tuple(finals)) if self.kind == "LSTM" else (output, finals[0])

    def flatten_parameters(self):
        """PyTorch packs the weights into one block for cuDNN; each weight here is its own array, so nothing to do
        (word_language_model calls it after loading)."""

    def extra_repr(self):
        return (f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}, "
                f"batch_first={self.batch_first}, bidirectional={self.bidirectional}")


class RNN(_Recurrent):
    kind = "RNN"


class GRU(_Recurrent):
    kind = "GRU"


class LSTM(_Recurrent):
    kind = "LSTM"
