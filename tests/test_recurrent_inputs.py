"""What the recurrent layers take, as PyTorch's: initial states of exactly the documented shape (issue 31: a (1, 1, H)
state for a batch of 3 was broadcast, and the second layer of a (2, B, H) state for one layer silently ignored), and
one unbatched sequence (T, input), as nn.RNN/GRU/LSTM take it."""
import numpy as np
import pytest

import tinyattn as ta
from tinyattn import nn

from conftest import host, randn

LAYERS = {"RNN": nn.RNN, "GRU": nn.GRU, "LSTM": nn.LSTM}
CELLS = {"RNNCell": nn.RNNCell, "GRUCell": nn.GRUCell, "LSTMCell": nn.LSTMCell}


def states(kind, *shape):
    h = randn(*shape, requires_grad=False)
    return (h, h) if kind == "LSTM" else h


@pytest.mark.parametrize("shape", [(1, 1, 4), (2, 3, 4), (1, 3, 5), (3, 4)])
@pytest.mark.parametrize("kind", LAYERS)
def test_an_initial_state_of_another_shape_is_refused(kind, shape):
    layer = LAYERS[kind](3, 4).double()
    name = "hidden\\[0\\]" if kind == "LSTM" else "hidden"
    with pytest.raises(RuntimeError, match=rf"expected {name} of size \(1, 3, 4\), got"):
        layer(randn(5, 3, 3), states(kind, *shape))


def test_an_lstm_cell_state_of_another_shape_is_refused_too():
    lstm = nn.LSTM(3, 4).double()
    with pytest.raises(RuntimeError, match=r"expected hidden\[1\] of size \(1, 3, 4\), got \(1, 1, 4\)"):
        lstm(randn(5, 3, 3), (randn(1, 3, 4), randn(1, 1, 4)))
    with pytest.raises(ValueError, match=r"takes hx as hidden\[0\] and hidden\[1\], got 1"):
        lstm(randn(5, 3, 3), (randn(1, 3, 4),))


@pytest.mark.parametrize("kind", CELLS)
def test_a_cell_refuses_a_state_of_another_size_or_batch(kind):
    cell = CELLS[kind](3, 4).double()
    for shape in [(2, 5), (3, 4), (4,)]:
        state = randn(*shape, requires_grad=False)
        with pytest.raises(RuntimeError, match=r"expected hidden(\[0\])? of size \(2, 4\)"):
            cell(randn(2, 3), (state, state) if kind == "LSTMCell" else state)


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("kind", LAYERS)
def test_an_unbatched_sequence_equals_a_batch_of_one(kind, bidirectional, batch_first):
    layer = LAYERS[kind](3, 4, num_layers=2, bidirectional=bidirectional, batch_first=batch_first).double()
    x = randn(5, 3)
    directions = 2 if bidirectional else 1
    h0 = states(kind, 2 * directions, 4)
    out, h_n = layer(x, h0)
    batch_axis = 0 if batch_first else 1
    h0_batched = tuple(h.unsqueeze(1) for h in h0) if kind == "LSTM" else h0.unsqueeze(1)
    out_b, h_n_b = layer(x.unsqueeze(batch_axis), h0_batched)
    assert out.shape == (5, 4 * directions)
    np.testing.assert_allclose(host(out), host(out_b.squeeze(batch_axis)), rtol=1e-12)
    for h, h_b in zip(h_n, h_n_b) if kind == "LSTM" else [(h_n, h_n_b)]:
        assert h.shape == (2 * directions, 4)
        np.testing.assert_allclose(host(h), host(h_b.squeeze(1)), rtol=1e-12)


def test_an_unbatched_sequence_takes_an_unbatched_state_only():
    gru = nn.GRU(3, 4).double()
    with pytest.raises(RuntimeError, match=r"expected hidden of size \(1, 4\), got \(1, 1, 4\)"):
        gru(randn(5, 3), randn(1, 1, 4))
    assert gru(randn(5, 3))[1].shape == (1, 4)


def test_gradcheck_through_an_unbatched_gru():
    gru = nn.GRU(2, 3).double()
    assert ta.gradcheck(lambda x, h: gru(x, h)[0], (randn(4, 2), randn(1, 3)))
