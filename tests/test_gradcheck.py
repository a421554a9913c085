"""gradcheck must be able to fail: a deliberately wrong backward is caught in both modes, with a useful message."""
import re

import numpy as np
import pytest

import tinyattn as ta
from tinyattn import Function
from conftest import randn


class WrongSquare(Function):
    """x**2 whose backward forgets the factor 2 on one element: the kind of slip gradcheck exists for."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        g = 2 * x * grad
        g.reshape(-1)[0] = x.reshape(-1)[0] * grad.reshape(-1)[0]
        return g


def test_full_jacobian_check_catches_wrong_backward_and_names_place():
    x = randn(2, 3)
    with pytest.raises(ta.GradcheckError, match=r"input 0 \(2, 3\) at element \(0, 0\).*analytic.*numerical"):
        ta.gradcheck(WrongSquare.apply, (x,))


def test_random_direction_check_catches_wrong_backward():
    x = randn(40, 40)
    with pytest.raises(ta.GradcheckError, match="random direction"):
        ta.gradcheck(lambda t: WrongSquare.apply(t) * 100, (x,), full_jacobian=False)


def test_correct_backward_passes_both_modes():
    x = randn(30, 30)
    assert ta.gradcheck(lambda t: (t * t).tanh(), (x,), full_jacobian=False)
    assert ta.gradcheck(lambda t: (t * t).tanh(), (randn(3, 2),), full_jacobian=True)


def test_refuses_float32_and_nothing_to_check():
    with pytest.raises(TypeError, match="float64.*float32"):
        ta.gradcheck(lambda t: t * 2, (ta.ones(3, requires_grad=True),))
    with pytest.raises(ValueError, match="no input requires grad"):
        ta.gradcheck(lambda t: t * 2, (ta.ones(3, dtype="float64"),))


def test_leaves_inputs_untouched():
    x = randn(3)
    before = x.numpy()
    ta.gradcheck(lambda t: t.exp(), (x,))
    np.testing.assert_array_equal(x.numpy(), before)
    assert x.grad is None


# -- what a failure message says -----------------------------------------------------------------------------------
class HalfGradForKey(Function):
    """q @ k whose backward forgets a factor 2 for every element of k: a missing factor, in all of them."""

    @staticmethod
    def forward(ctx, q, k):
        ctx.save_for_backward(q, k)
        return q @ k

    @staticmethod
    def backward(ctx, grad):
        q, k = ctx.saved_tensors
        return grad @ k.T, 0.5 * (q.T @ grad)


class SlipAtOneKey(Function):
    """q @ k whose backward adds to one element of k's gradient as much again as it should have: an index slip."""

    @staticmethod
    def forward(ctx, q, k):
        ctx.save_for_backward(q, k)
        return q @ k

    @staticmethod
    def backward(ctx, grad):
        q, k = ctx.saved_tensors
        grad_k = q.T @ grad
        grad_k[3, 1] *= 2
        return grad @ k.T, grad_k


def test_message_names_inputs_by_argument_name():
    with pytest.raises(ta.GradcheckError, match=r"for k = input 1 \(3, 2\) at element"):
        ta.gradcheck(HalfGradForKey.apply, (randn(2, 3), randn(3, 2)))          # a Function's forward: (ctx, q, k)
    with pytest.raises(ta.GradcheckError, match=r"for key = input 1 \(3, 2\) at element"):
        ta.gradcheck(lambda query, key: HalfGradForKey.apply(query, key), (randn(2, 3), randn(3, 2)))
    with pytest.raises(ta.GradcheckError, match=r"for input 1 \(3, 2\) at element"):
        ta.gradcheck(lambda *both: HalfGradForKey.apply(*both), (randn(2, 3), randn(3, 2)))


def test_message_counts_failures_and_gives_the_ratio():
    with pytest.raises(ta.GradcheckError, match=r"24 of 48 Jacobian entries fail, in 6 of 6 elements of k; "
                                                 r"analytic / numerical 0.5 at every one"):
        ta.gradcheck(HalfGradForKey.apply, (randn(4, 3), randn(3, 2)))
    with pytest.raises(ta.GradcheckError, match=r"at element \(3, 1\).*4 of 144 Jacobian entries fail, in 1 of 12 "
                                                 r"elements of k; analytic / numerical 2 at every one"):
        ta.gradcheck(SlipAtOneKey.apply, (randn(4, 4), randn(4, 3)))


def test_message_gives_output_positions_as_index_tuples():
    with pytest.raises(ta.GradcheckError, match=r"at element \(3, 1\) \(output element \(\d, 1\)\)"):
        ta.gradcheck(SlipAtOneKey.apply, (randn(4, 4), randn(4, 3)))
    with pytest.raises(ta.GradcheckError, match=r"\(output 1 element \(\d, 1\)\)"):
        ta.gradcheck(lambda q, k: (q.sum(), SlipAtOneKey.apply(q, k)), (randn(4, 4), randn(4, 3)))


def test_random_direction_failure_locates_the_element_itself():
    q, k = randn(30, 40), randn(40, 50)
    with pytest.raises(ta.GradcheckError) as caught:
        ta.gradcheck(SlipAtOneKey.apply, (q, k), full_jacobian=False)
    message = str(caught.value)
    assert "for k = input 1 (40, 50) in random direction 0" in message
    entry = re.search(r"located element \(3, 1\) of k, at output element \(\d+, 1\): analytic (\S+), "
                      r"numerical (\S+)\.", message)                  # only column 1 of the output reads k[:, 1]
    assert float(entry[1]) == pytest.approx(2 * float(entry[2]))
    assert "1 of 50 elements of k[3, 0:50] fail; analytic / numerical 2 at every one" in message
    with pytest.raises(ta.GradcheckError, match=r"located element \(\d+, \d+\) of k.*50 of 50 elements of "
                                                 r"k\[\d+, 0:50\] fail; analytic / numerical 0.5 at every one"):
        ta.gradcheck(HalfGradForKey.apply, (q, k), full_jacobian=False)


def test_random_direction_failure_spread_thin_says_how_to_see_every_entry():
    class SlightlyOffEverywhere(Function):
        """Each element of the gradient off by 5e-6, under atol, which only the sum over a direction exceeds."""

        @staticmethod
        def forward(ctx, x):
            return x * 1e-3

        @staticmethod
        def backward(ctx, grad):
            return grad * 1e-3 + 5e-6 * np.sign(grad)
    with pytest.raises(ta.GradcheckError, match="passes on its own.*full_jacobian=True on inputs of a few elements"):
        ta.gradcheck(SlightlyOffEverywhere.apply, (randn(40, 40),), full_jacobian=False)


def test_random_direction_nan_says_where():
    class NaNAt(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            grad = grad * 2
            grad[5, 7] = np.nan
            return grad
    with pytest.raises(ta.GradcheckError, match=r"at element \(5, 7\) \(random direction 0\): the analytic.*NaN"):
        ta.gradcheck(NaNAt.apply, (randn(30, 30),), full_jacobian=False)


def test_gradcheck_leaves_every_grad_and_input_as_it_found_them():
    """As PyTorch's: a learner's x.grad from their own backward survives the check, parameters used inside fn get
    no .grad from its many backward passes, and an fn that raises leaves the input unperturbed."""
    from tinyattn import nn
    x = randn(3, 4)
    layer = nn.Linear(4, 2).double()
    (x * 3.0).sum().backward()
    before = x.grad.numpy().copy()
    assert ta.gradcheck(lambda x: layer(x).tanh(), (x,))
    assert np.array_equal(x.grad.numpy(), before)
    assert layer.weight.grad is None and layer.bias.grad is None
    original = x.numpy().copy()
    calls = []

    def breaks_on_the_second_call(x):
        calls.append(1)
        if len(calls) == 3:                      # one call for the shapes, one backward, then the first difference
            raise RuntimeError("boom")
        return x * 2.0
    with pytest.raises(RuntimeError, match="boom"):
        ta.gradcheck(breaks_on_the_second_call, (x,))
    assert np.array_equal(x.numpy(), original)


def test_backward_inputs_fills_only_the_grads_asked_for():
    a, b = randn(3), randn(3)
    (a * b).sum().backward(inputs=[a])
    assert np.allclose(a.grad.numpy(), b.numpy()) and b.grad is None
    with pytest.raises(NotImplementedError, match="create_graph"):
        (a * b).sum().backward(create_graph=True)
