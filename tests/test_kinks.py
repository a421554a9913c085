"""Derivatives at kinks, and losses at 0 (issue 31: binary_cross_entropy_with_logits had the gradient [0, 1] at logit
0 where PyTorch has [-1/2, 1/2], because its form took the slopes of abs and relu at 0).

The convention, PyTorch's, written down: at a kink a piecewise op's gradient is
- abs, relu: 0 at 0 (sign(0) = 0; relu passes only where x > 0);
- clamp: 1 on the bounds (x passes where min <= x <= max, both ends included);
- maximum, minimum of two tensors, and max, min, amax, amin over elements: tied values share the gradient evenly;
- prod: the product of the other elements (0 where two or more are 0);
- max and min along a dim, topk and sort: the gradient goes to the index they return (the first of tied values);
- where, masked_fill: by the condition (an element the condition sends elsewhere gets 0);
- norm: 0 at a zero vector (a subgradient, where the formula is 0/0); p = inf splits among the tied largest |x|.
Central differences see the mean of the two one-sided slopes there, so these are checked as values; gradcheck runs
on both sides of every kink, and every loss is gradchecked at 0 and at the ties of its pieces (all logits equal)."""
import math

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.functional as F

from conftest import host


def grads_at(function, *points):
    inputs = [ta.tensor(p, dtype="float64", requires_grad=True) for p in points]
    function(*inputs).sum().backward()
    return [host(x.grad).tolist() for x in inputs]


# (function, the point(s) at its kink, the gradient PyTorch 2.13 gives there)
AT_KINKS = {
    "abs at 0": (ta.abs, [[0.0, -0.0]], [[0.0, 0.0]]),
    "relu at 0": (ta.relu, [[0.0]], [[0.0]]),
    "clamp on its bounds": (lambda x: x.clamp(0.0, 1.0), [[0.0, 1.0]], [[1.0, 1.0]]),
    "clamp by tensors, x on a bound, x below, lo > hi": (
        lambda x, lo, hi: ta.clamp(x, lo, hi), [[1.0, 0.0, 2.5], [1.0, 1.0, 3.0], [3.0, 3.0, 2.0]],
        [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]),
    "maximum of a tie": (ta.maximum, [[1.0], [1.0]], [[0.5], [0.5]]),
    "minimum of a tie": (ta.minimum, [[1.0], [1.0]], [[0.5], [0.5]]),
    "max of tied elements": (lambda x: x.max(), [[1.0, 1.0, 0.0]], [[0.5, 0.5, 0.0]]),
    "min of tied elements": (lambda x: x.min(), [[0.0, 0.0, 1.0]], [[0.5, 0.5, 0.0]]),
    "amax of tied elements": (lambda x: x.amax(0), [[1.0, 1.0, 0.0]], [[0.5, 0.5, 0.0]]),
    "amin of tied elements": (lambda x: x.amin(0), [[0.0, 0.0, 1.0]], [[0.5, 0.5, 0.0]]),
    "prod with a zero": (lambda x: x.prod(), [[0.0, 2.0, 3.0]], [[6.0, 0.0, 0.0]]),
    "prod with two zeros": (lambda x: x.prod(), [[0.0, 0.0, 3.0]], [[0.0, 0.0, 0.0]]),
    "logsumexp of ties": (lambda x: x.logsumexp(0), [[0.0, 0.0]], [[0.5, 0.5]]),
    "max along a dim, tied": (lambda x: x.max(0).values, [[1.0, 1.0, 0.0]], [[1.0, 0.0, 0.0]]),
    "topk of a tie": (lambda x: x.topk(1).values, [[1.0, 1.0, 0.0]], [[1.0, 0.0, 0.0]]),
    "sort of a tie": (lambda x: x.sort().values * ta.tensor([1.0, 2.0, 3.0], dtype="float64"), [[1.0, 1.0, 0.0]],
                      [[2.0, 3.0, 1.0]]),
    "where at its switch": (lambda x: ta.where(x > 0, x, -x), [[0.0]], [[-1.0]]),
    "masked_fill": (lambda x: x.masked_fill(ta.tensor([True, False]), 0.0), [[0.0, 0.0]], [[0.0, 1.0]]),
    "norm of a zero vector": (lambda x: x.norm(), [[0.0, 0.0]], [[0.0, 0.0]]),
    "1-norm at a zero element": (lambda x: x.norm(p=1), [[0.0, 1.0]], [[0.0, 1.0]]),
    "inf-norm of tied |x|": (lambda x: x.norm(p=math.inf), [[1.0, -1.0, 0.5]], [[0.5, -0.5, 0.0]]),
    "normalize with the norm at eps": (lambda x: F.normalize(x, dim=0, eps=1.0), [[1.0, 0.0]], [[0.0, 1.0]]),
    "x ** 2 at 0": (lambda x: x ** 2, [[0.0]], [[0.0]]),
    "x ** 0 at 0": (lambda x: x ** 0, [[0.0]], [[0.0]]),
    "sqrt at 0": (ta.sqrt, [[0.0]], [[math.inf]]),
    "logsigmoid at 0": (F.logsigmoid, [[0.0]], [[0.5]]),
    "binary_cross_entropy_with_logits at 0": (
        lambda x: F.binary_cross_entropy_with_logits(x, ta.tensor([1.0, 0.0], dtype="float64"), reduction="sum"),
        [[0.0, 0.0]], [[-0.5, 0.5]]),
    "binary_cross_entropy_with_logits at 0, pos_weight 3": (
        lambda x: F.binary_cross_entropy_with_logits(x, ta.tensor([1.0, 0.0, 0.5], dtype="float64"), reduction="sum",
                                                     pos_weight=ta.tensor(3.0, dtype="float64")),
        [[0.0, 0.0, 0.0]], [[-1.5, 0.5, -0.5]]),
}


@pytest.mark.filterwarnings("ignore:divide by zero")                 # sqrt's slope at 0 is inf, as in PyTorch
@pytest.mark.parametrize("name", AT_KINKS)
def test_the_gradient_at_a_kink_is_pytorchs(name):
    function, points, expected = AT_KINKS[name]
    assert grads_at(function, *points) == expected


# Piecewise ops on both sides of their kinks: x = kink +- 1e-3, far beyond gradcheck's step of 1e-6.
NEAR_KINKS = {
    "abs": (ta.abs, 0.0), "relu": (ta.relu, 0.0), "clamp min": (lambda x: x.clamp(min=0.5), 0.5),
    "clamp max": (lambda x: x.clamp(max=-0.5), -0.5), "maximum": (lambda x: ta.maximum(x, ta.zeros_like(x)), 0.0),
    "minimum": (lambda x: ta.minimum(x, ta.zeros_like(x)), 0.0), "where": (lambda x: ta.where(x > 0, x * 3, -x), 0.0),
    "max": (lambda x: ta.stack([x, ta.zeros_like(x)]).max(0).values, 0.0),
    "norm": (lambda x: x.norm(p=1), 0.0), "logsigmoid": (F.logsigmoid, 0.0),
    "normalize": (lambda x: F.normalize(ta.stack([x, ta.zeros_like(x)]), dim=0, eps=1.0), 1.0),
}


@pytest.mark.parametrize("side", [-1e-3, 1e-3])
@pytest.mark.parametrize("name", NEAR_KINKS)
def test_gradcheck_on_both_sides_of_a_kink(name, side):
    function, kink = NEAR_KINKS[name]
    x = ta.tensor([kink + side, kink + 10 * side], dtype="float64", requires_grad=True)
    assert ta.gradcheck(function, (x,))


def zeros(*shape):
    return ta.zeros(*shape, dtype="float64", requires_grad=True)


def probabilities(*shape):
    return ta.tensor(np.random.default_rng(0).dirichlet(np.ones(shape[-1]), shape[:-1]), dtype="float64")


# Every loss at logits 0 (all classes tied: the max that softmax subtracts has a kink there) and at other ties.
LOSSES_AT_ZERO = {
    "cross_entropy": lambda: (lambda x: F.cross_entropy(x, ta.tensor([0, 2])), [zeros(2, 3)]),
    "cross_entropy, sum": lambda: (lambda x: F.cross_entropy(x, ta.tensor([0, 2]), reduction="sum"), [zeros(2, 3)]),
    "cross_entropy, none, ignore_index": lambda: (
        lambda x: F.cross_entropy(x, ta.tensor([0, -100]), reduction="none"), [zeros(2, 3)]),
    "cross_entropy, label_smoothing": lambda: (
        lambda x: F.cross_entropy(x, ta.tensor([0, 2]), label_smoothing=0.2), [zeros(2, 3)]),
    "cross_entropy, tied rows": lambda: (
        lambda x: F.cross_entropy(x, ta.tensor([0, 1])), [ta.tensor([[1.0, 1.0, 0.0], [2.0, 2.0, 2.0]],
                                                                    dtype="float64", requires_grad=True)]),
    "cross_entropy, (N, C, d) input": lambda: (
        lambda x: F.cross_entropy(x, ta.tensor([[0, 1], [2, 0]])), [zeros(2, 3, 2)]),
    "cross_entropy, class probabilities": lambda: (
        lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1), [zeros(2, 3), zeros(2, 3)]),
    "nll_loss": lambda: (lambda x: F.nll_loss(x, ta.tensor([0, 2])), [zeros(2, 3)]),
    "kl_div": lambda: (lambda x: F.kl_div(x, probabilities(2, 3), reduction="batchmean"), [zeros(2, 3)]),
    "kl_div, log_target": lambda: (
        lambda x, t: F.kl_div(x, t, reduction="sum", log_target=True), [zeros(2, 3), zeros(2, 3)]),
    "binary_cross_entropy_with_logits": lambda: (
        lambda x: F.binary_cross_entropy_with_logits(x, ta.tensor([1.0, 0.0, 0.5], dtype="float64")), [zeros(3)]),
    "binary_cross_entropy_with_logits, target, weight, pos_weight": lambda: (
        lambda x, t: F.binary_cross_entropy_with_logits(x, t, weight=ta.tensor([1.0, 2.0, 3.0], dtype="float64"),
                                                        pos_weight=ta.tensor([0.5, 1.0, 4.0], dtype="float64")),
        [zeros(3), ta.tensor([1.0, 0.0, 0.5], dtype="float64", requires_grad=True)]),
    "mse_loss, input equal to target": lambda: (lambda x, t: F.mse_loss(x, t), [zeros(3), zeros(3)]),
    "nn.CrossEntropyLoss": lambda: (lambda x: ta.nn.CrossEntropyLoss()(x, ta.tensor([1, 2])), [zeros(2, 3)]),
    "nn.BCEWithLogitsLoss": lambda: (
        lambda x: ta.nn.BCEWithLogitsLoss()(x, ta.tensor([1.0, 0.0], dtype="float64")), [zeros(2)]),
}


@pytest.mark.parametrize("name", LOSSES_AT_ZERO)
def test_gradcheck_every_loss_at_zero(name):
    function, inputs = LOSSES_AT_ZERO[name]()
    assert ta.gradcheck(function, inputs)


def test_a_zero_initialised_logistic_head_takes_pytorchs_first_step():
    x = ta.zeros(2, requires_grad=True)
    F.binary_cross_entropy_with_logits(x, ta.tensor([1.0, 0.0]), reduction="sum").backward()
    np.testing.assert_array_equal(host(x.grad), [-0.5, 0.5])                         # was [0, 1]


def test_binary_cross_entropy_with_logits_is_stable_at_large_logits():
    x = ta.tensor([-1000.0, 1000.0, -1000.0, 1000.0], requires_grad=True)
    loss = F.binary_cross_entropy_with_logits(x, ta.tensor([1.0, 0.0, 0.0, 1.0]), reduction="none")
    loss.sum().backward()
    np.testing.assert_allclose(host(loss), [1000, 1000, 0, 0])
    np.testing.assert_allclose(host(x.grad), [-1, 1, 0, 0])
