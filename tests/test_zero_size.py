"""Zero-size dims, as PyTorch takes them: every shape op runs forward and backward on a tensor with a dim of size 0
and gives a gradient of the input's (empty) shape; gradcheck passes on each (issue 28: vit-pytorch's zero-row class
token, repeated, failed in backward). The expected shapes are PyTorch's, written down."""
import warnings

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.functional as F

from conftest import host, randn


def empty(*shape):
    return ta.zeros(*shape, dtype="float64", requires_grad=True)


# (op, inputs (a shape is a float64 tensor: zero-size ones empty, others random), output shape in PyTorch)
SHAPE_OPS = {
    "reshape": (lambda x: x.reshape(0, 3), [(2, 0, 3)], (0, 3)),
    "reshape -1": (lambda x: x.reshape(-1, 3), [(2, 0, 3)], (0, 3)),
    "view": (lambda x: x.view(3, 0), [(0, 3)], (3, 0)),
    "view_as": (lambda x: x.view_as(ta.zeros(3, 0)), [(0, 3)], (3, 0)),
    "permute": (lambda x: x.permute(2, 0, 1), [(2, 0, 3)], (3, 2, 0)),
    "transpose": (lambda x: x.transpose(0, 1), [(2, 0)], (0, 2)),
    "t": (lambda x: x.t(), [(0, 3)], (3, 0)),
    "mT": (lambda x: x.mT, [(2, 0, 3)], (2, 3, 0)),
    "unsqueeze": (lambda x: x.unsqueeze(1), [(0, 3)], (0, 1, 3)),
    "squeeze": (lambda x: x.squeeze(), [(0, 1, 3)], (0, 3)),
    "flatten": (lambda x: x.flatten(), [(2, 0, 3)], (0,)),
    "expand (a 0-size dim kept)": (lambda x: x.expand(4, 0, 3), [(1, 0, 3)], (4, 0, 3)),
    "expand (a size-1 dim to 0)": (lambda x: x.expand(0, 3), [(1, 3)], (0, 3)),
    "contiguous": (lambda x: x.contiguous(), [(0, 3)], (0, 3)),
    "cat of empties": (lambda x: ta.cat([x, x]), [(0, 3)], (0, 3)),
    "cat with a non-empty tensor": (lambda x, y: ta.cat([x, y]), [(0, 3), (2, 3)], (2, 3)),
    "stack": (lambda x: ta.stack([x, x], 1), [(0, 3)], (0, 2, 3)),
    "repeat_interleave": (lambda x: x.repeat_interleave(2, dim=0), [(0, 3)], (0, 3)),
    "repeat_interleave 0 times": (lambda x: x.repeat_interleave(0, dim=1), [(2, 3)], (2, 0)),
    "split": (lambda x: x.split(2, 1)[0], [(0, 3)], (0, 2)),
    "chunk": (lambda x: x.chunk(2, 1)[1], [(0, 3)], (0, 1)),
    "unbind": (lambda x: ta.stack(x.unbind(1)), [(0, 3)], (3, 0)),
    "flip": (lambda x: x.flip(0), [(0, 3)], (0, 3)),
    "roll": (lambda x: x.roll(1, 1), [(0, 3)], (0, 3)),
    "repeat": (lambda x: x.repeat(3, 1), [(0, 3)], (0, 3)),
    "repeat 0 times": (lambda x: x.repeat(0, 1), [(2, 3)], (0, 3)),
    "repeat with new dims (vit's empty class token)": (lambda x: x.repeat(4, 1, 1), [(1, 0, 3)], (4, 0, 3)),
    "pad the empty dim": (lambda x: F.pad(x, (0, 0, 1, 1)), [(0, 3)], (2, 3)),
    "pad another dim": (lambda x: F.pad(x, (1, 1)), [(0, 3)], (0, 5)),
    "getitem slice": (lambda x: x[1:], [(0, 3)], (0, 3)),
    "getitem an empty slice of a non-empty tensor": (lambda x: x[:, 3:], [(2, 3)], (2, 0)),
    "getitem integer index": (lambda x: x[:, [0, 2]], [(0, 3)], (0, 2)),
    "getitem empty integer index": (lambda x: x[ta.zeros(0, dtype="int64")], [(2, 3)], (0, 3)),
    "tril": (lambda x: x.tril(), [(0, 3)], (0, 3)),
    "triu": (lambda x: x.triu(), [(2, 0)], (2, 0)),
    "meshgrid": (lambda x: ta.meshgrid(x, ta.ones(2, dtype="float64"))[0], [(0,)], (0, 2)),
    "gather": (lambda x: x.gather(1, ta.zeros(2, 0, dtype="int64")), [(2, 3)], (2, 0)),
    "scatter": (lambda x, src: x.scatter(1, ta.zeros(2, 0, dtype="int64"), src), [(2, 3), (2, 0)], (2, 3)),
    "index_select": (lambda x: x.index_select(0, ta.zeros(0, dtype="int64")), [(2, 3)], (0, 3)),
    "scatter_add": (lambda x, src: x.scatter_add(1, ta.zeros(2, 0, dtype="int64"), src), [(2, 3), (2, 0)], (2, 3)),
    "masked_fill": (lambda x: x.masked_fill(ta.zeros(0, 3, dtype="bool"), 1.0), [(0, 3)], (0, 3)),
    "where": (lambda x: ta.where(x > 0, x, 0.0), [(0, 3)], (0, 3)),
    "matmul (empty rows)": (lambda x, y: x @ y, [(0, 3), (3, 2)], (0, 2)),
    "matmul (empty inner dim)": (lambda x, y: x @ y, [(2, 0), (0, 3)], (2, 3)),
    "einsum": (lambda x, y: ta.einsum("ij,jk->ik", x, y), [(0, 3), (3, 2)], (0, 2)),
    "einsum over an empty letter": (lambda x, y: ta.einsum("ij,jk->ik", x, y), [(2, 0), (0, 3)], (2, 3)),
    "sum over the empty dim": (lambda x: x.sum(0), [(0, 3)], (3,)),
    "sum over another dim": (lambda x: x.sum(1), [(0, 3)], (0,)),
    "cumsum": (lambda x: x.cumsum(0), [(0, 3)], (0, 3)),
    "max along a non-empty dim": (lambda x: x.max(1).values, [(0, 3)], (0,)),
    "amax along a non-empty dim": (lambda x: x.amax(1), [(0, 3)], (0,)),
    "prod over the empty dim": (lambda x: x.prod(0), [(0, 3)], (3,)),
    "logsumexp over another dim": (lambda x: x.logsumexp(1), [(0, 3)], (0,)),
    "softmax": (lambda x: x.softmax(-1), [(0, 3)], (0, 3)),
    "layer_norm": (lambda x: F.layer_norm(x, (3,)), [(0, 3)], (0, 3)),
}


def make_inputs(shapes):
    return [empty(*shape) if 0 in shape else randn(*shape) for shape in shapes]


@pytest.mark.parametrize("name", SHAPE_OPS)
def test_forward_and_backward_take_zero_size_dims(name):
    op, shapes, expected = SHAPE_OPS[name]
    inputs = make_inputs(shapes)
    out = op(*inputs)
    assert out.shape == expected
    (out * randn(*out.shape, requires_grad=False)).sum().backward()
    for x in inputs:
        assert x.grad.shape == x.shape                 # empty where x is: nothing to divide by, nothing lost
        if out.numel() == 0:
            np.testing.assert_array_equal(host(x.grad), np.zeros(x.shape))


@pytest.mark.parametrize("name", SHAPE_OPS)
def test_gradcheck_with_zero_size_dims(name):
    op, shapes, _ = SHAPE_OPS[name]
    assert ta.gradcheck(op, make_inputs(shapes))


def test_split_and_chunk_of_a_zero_size_dim_give_pytorchs_pieces():
    x = ta.zeros(0, 3)
    assert [p.shape for p in x.split(2, 0)] == [(0, 3)]                # one empty piece
    assert [p.shape for p in x.chunk(2, 0)] == [(0, 3), (0, 3)]        # chunks empty pieces
    assert [p.shape for p in x.split(2, 1)] == [(0, 2), (0, 1)]
    assert x.unbind(0) == ()


def test_max_and_argmax_refuse_to_reduce_no_elements_but_reduce_other_dims():
    x = ta.zeros(0, 3)
    assert x.max(1).values.shape == (0,) and x.argmax(1).shape == (0,)
    for reduce in (lambda: x.max(), lambda: x.min(), lambda: x.argmax(), lambda: x.argmin()):
        with pytest.raises(RuntimeError, match=r"empty tensor of shape \(0, 3\).*name a dim"):
            reduce()
    for reduce in (lambda: x.max(0), lambda: x.argmin(0)):
        with pytest.raises(RuntimeError, match=r"reduction dim 0 to have non-zero size"):
            reduce()


def test_mean_and_var_over_no_elements_are_nan_quietly_as_in_pytorch():
    x = empty(0, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)              # no NumPy warning leaks out
        mean = x.mean(0)
        mean.sum().backward()
        assert np.isnan(host(mean)).all() and mean.shape == (3,) and x.grad.shape == (0, 3)
        assert x.mean(1).shape == (0,)
        with pytest.warns(UserWarning, match="degrees of freedom is <= 0"):
            assert np.isnan(host(x.var(0))).all()


def test_std_of_one_element_is_nan_with_a_warning_and_a_nan_gradient():
    x = ta.tensor([1.0], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.warns(UserWarning, match=r"std\(\): degrees of freedom is <= 0"):
            s = x.std()
        s.backward()                                                # was ZeroDivisionError
    assert np.isnan(s.item()) and np.isnan(host(x.grad)).all()
    assert x.std(correction=0).item() == 0.0                        # the population std of one element
