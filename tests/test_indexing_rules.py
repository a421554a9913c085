"""Indexing as PyTorch does it: an index out of range is an error naming it (issue 31: gather with -1 returned the
last element), index_select and scatter_add (met by people porting PyTorch code) with their gradients, and a tensor
value of masked_fill that gets its gradient (it was turned into a Python float)."""
import numpy as np
import pytest

import tinyattn as ta

from conftest import host, randn


OUT_OF_RANGE = {
    "gather -1": (lambda x: x.gather(1, ta.tensor([[-1], [0]])), RuntimeError, "index -1 is out of bounds for "
                                                                                "dimension 1 with size 3"),
    "gather 3": (lambda x: x.gather(1, ta.tensor([[3], [0]])), RuntimeError, "index 3 is out of bounds"),
    "scatter -1": (lambda x: x.scatter(1, ta.tensor([[-1], [0]]), 0.0), RuntimeError, "index -1 is out of bounds"),
    "scatter_add 3": (lambda x: x.scatter_add(1, ta.tensor([[3], [0]]), ta.ones(2, 1, dtype="float64")),
                      RuntimeError, "index 3 is out of bounds"),
    "index_select -1": (lambda x: x.index_select(0, ta.tensor([-1])), IndexError, "index -1 is out of bounds"),
    "index_select 2": (lambda x: x.index_select(0, ta.tensor([0, 2])), IndexError, "index 2 is out of bounds"),
    "index_add -1": (lambda x: x.index_add(0, ta.tensor([-1]), ta.ones(1, 3, dtype="float64")), IndexError,
                     "index -1 is out of bounds"),
    "gather with fewer dims": (lambda x: x.gather(1, ta.tensor([0])), RuntimeError, "needs the 2 dims"),
    "gather larger than the input elsewhere": (lambda x: x.gather(1, ta.zeros(3, 1, dtype="int64")), RuntimeError,
                                               "no larger size"),
    "index_select with a 2-D index": (lambda x: x.index_select(0, ta.zeros(1, 1, dtype="int64")), IndexError,
                                      "1-D index"),
    "gather with a float index": (lambda x: x.gather(1, ta.zeros(2, 1)), RuntimeError, "integer tensor"),
}


@pytest.mark.parametrize("name", OUT_OF_RANGE)
def test_an_index_outside_the_tensor_is_refused(name):
    call, error, message = OUT_OF_RANGE[name]
    with pytest.raises(error, match=message):
        call(randn(2, 3))


def test_index_select_picks_slices_and_adds_up_the_gradients_of_repeats():
    x = randn(2, 3)
    out = ta.index_select(x, 1, ta.tensor([2, 0, 2]))
    np.testing.assert_array_equal(host(out), host(x)[:, [2, 0, 2]])
    out.sum().backward()
    np.testing.assert_array_equal(host(x.grad), [[1, 0, 2], [1, 0, 2]])
    assert ta.gradcheck(lambda x: x.index_select(0, ta.tensor([1, 1, 0])), (randn(2, 3),))
    assert x.index_select(0, ta.tensor(1)).shape == (1, 3)               # a single index, as PyTorch's


def test_scatter_add_adds_repeats_and_sends_each_src_element_the_gradient_of_its_place():
    src = randn(2, 2)
    out = ta.zeros(2, 3, dtype="float64").scatter_add(1, ta.tensor([[0, 0], [2, 1]]), src)
    s = host(src)
    np.testing.assert_allclose(host(out), [[s[0, 0] + s[0, 1], 0, 0], [0, s[1, 1], s[1, 0]]])
    weights = ta.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype="float64")
    (out * weights).sum().backward()
    np.testing.assert_array_equal(host(src.grad), [[1, 1], [6, 5]])
    assert ta.gradcheck(lambda x, s: ta.scatter_add(x, 0, ta.tensor([[1, 0, 1]]), s), (randn(2, 3), randn(1, 3)))
    x = ta.zeros(2, 3)
    x.scatter_add_(1, ta.tensor([[1], [1]]), ta.ones(2, 1))
    np.testing.assert_array_equal(host(x), [[0, 1, 0], [0, 1, 0]])


def test_masked_fill_with_a_tensor_value_gives_it_the_gradient_of_the_places_it_filled():
    value = ta.tensor(2.0, requires_grad=True)
    x = ta.ones(3, requires_grad=True)
    mask = ta.tensor([True, False, True])
    out = x.masked_fill(mask, value)
    np.testing.assert_array_equal(host(out), [2, 1, 2])
    (out * ta.tensor([1.0, 10.0, 100.0])).sum().backward()
    assert value.grad.item() == 101 and host(x.grad).tolist() == [0, 10, 0]          # was: no gradient for value
    assert ta.gradcheck(lambda x, v: x.masked_fill(mask, v), (randn(3), randn()))
    assert ta.ones(2, dtype="float64").masked_fill(ta.tensor([True, False]), ta.tensor(0.5)).dtype == np.float64


def test_masked_fill_in_place_with_a_tensor_value_records_it():
    value = ta.tensor(3.0, requires_grad=True)
    x = ta.zeros(2) * 1.0
    x.masked_fill_(ta.tensor([True, False]), value)
    x.sum().backward()
    assert value.grad.item() == 1


def test_masked_fill_refuses_a_value_with_dims():
    with pytest.raises(RuntimeError, match=r"a number or a 0-d tensor as its value, got shape \(1,\)"):
        ta.ones(2).masked_fill(ta.tensor([True, False]), ta.ones(1))
