"""gradcheck must be able to fail: a deliberately wrong backward is caught in both modes, with a useful message."""
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
