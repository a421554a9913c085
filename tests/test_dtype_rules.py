"""PyTorch's dtype rules, written down (issues 28 and 31): functions whose result is floating compute integer and
bool inputs in the default float dtype; functions that only take floating tensors refuse others, naming the dtype and
what they take; a few refuse bool; cat, stack, clamp and where promote their operands as PyTorch does."""
import numpy as np
import pytest

import tinyattn as ta
import tinyattn.functional as F

from activations_table import ACTIVATIONS
from conftest import host

# torch.exp(torch.tensor([1, 2])) is float32, and so for every function here, on int64 and bool alike.
FLOATING_FUNCTIONS = {
    "exp": ta.exp, "log": ta.log, "sqrt": ta.sqrt, "rsqrt": ta.rsqrt, "sin": ta.sin, "cos": ta.cos, "tanh": ta.tanh,
    "sigmoid": ta.sigmoid, "Tensor.exp": lambda x: x.exp(), "Tensor.sigmoid": lambda x: x.sigmoid(),
    "F.sigmoid": F.sigmoid, "F.tanh": F.tanh, "true division": lambda x: x / 2, "a float power": lambda x: x ** 0.5,
    "clamp by a float": lambda x: x.clamp(0.5), "logsumexp": lambda x: x.logsumexp(0),
}

# PyTorch refuses these for integer and bool tensors (the error type is PyTorch's for each).
FLOAT_ONLY = {
    "softmax": (lambda x: F.softmax(x, 0), NotImplementedError),
    "log_softmax": (lambda x: F.log_softmax(x, 0), NotImplementedError),
    "Tensor.softmax": (lambda x: x.softmax(0), NotImplementedError),
    **{name: (activation.call, activation.integer_error) for name, activation in ACTIVATIONS.items()},
    "logsigmoid": (F.logsigmoid, NotImplementedError),
    "layer_norm": (lambda x: F.layer_norm(x, (3,)), NotImplementedError),
    "rms_norm": (lambda x: F.rms_norm(x, (3,)), NotImplementedError),
    "cross_entropy": (lambda x: F.cross_entropy(x.reshape(1, 3), ta.tensor([0])), NotImplementedError),
    "mse_loss": (lambda x: F.mse_loss(x, x), NotImplementedError),
    "binary_cross_entropy_with_logits": (lambda x: F.binary_cross_entropy_with_logits(x, x), NotImplementedError),
    "mean": (ta.mean, RuntimeError), "var": (ta.var, RuntimeError), "std": (ta.std, RuntimeError),
    "norm": (ta.norm, RuntimeError), "normalize": (lambda x: F.normalize(x, dim=0), RuntimeError),
    "kl_div": (lambda x: F.kl_div(x, x), RuntimeError), "dropout": (lambda x: F.dropout(x, 0.5), RuntimeError),
}

NO_BOOL = {"relu": ta.relu, "abs": ta.abs, "neg": lambda x: -x}

NON_FLOATING = {"int64": lambda: ta.tensor([1, 2, 3]), "bool": lambda: ta.tensor([True, False, True]),
                "uint8": lambda: ta.tensor([1, 2, 3], dtype="uint8")}


@pytest.mark.filterwarnings("ignore:divide by zero")                  # log(False) = -inf, as in PyTorch
@pytest.mark.parametrize("kind", NON_FLOATING)
@pytest.mark.parametrize("name", FLOATING_FUNCTIONS)
def test_a_floating_function_computes_integers_and_bools_in_the_default_float_dtype(name, kind):
    x = NON_FLOATING[kind]()
    out = FLOATING_FUNCTIONS[name](x)
    assert out.dtype == np.float32
    expected = FLOATING_FUNCTIONS[name](x.float())
    np.testing.assert_allclose(host(out), host(expected), rtol=1e-6)


@pytest.mark.parametrize("name", FLOATING_FUNCTIONS)
def test_a_floating_function_follows_set_default_dtype_and_keeps_floating_dtypes(name):
    function = FLOATING_FUNCTIONS[name]
    ta.set_default_dtype(ta.float64)
    try:
        assert function(ta.tensor([1, 2, 3])).dtype == np.float64
    finally:
        ta.set_default_dtype(ta.float32)
    for dtype in ("float16", "float32", "float64"):
        assert function(ta.tensor([1.0, 2.0, 3.0], dtype=dtype)).dtype == dtype


def test_the_integer_log_of_the_issue_is_float32():
    assert ta.tensor([1, 2]).log().dtype == np.float32                # was float64


@pytest.mark.parametrize("kind", NON_FLOATING)
@pytest.mark.parametrize("name", FLOAT_ONLY)
def test_a_float_only_function_refuses_integers_and_bools_naming_the_dtypes(name, kind):
    function, error = FLOAT_ONLY[name]
    x = NON_FLOATING[kind]()
    with pytest.raises(error, match=rf"takes floating tensors \(float16, float32 or float64\), got {x.dtype}"):
        function(x)


def test_softmax_with_a_dtype_argument_casts_first():
    out = F.softmax(ta.tensor([1, 2, 3]), 0, dtype=ta.float32)
    assert out.dtype == np.float32 and abs(out.sum().item() - 1) < 1e-6


def test_dropout_that_changes_nothing_takes_any_dtype():
    x = ta.tensor([1, 2, 3])
    assert F.dropout(x, 0.5, training=False) is x and F.dropout(x, 0.0) is x


@pytest.mark.parametrize("name", NO_BOOL)
def test_bool_is_refused_where_pytorch_refuses_it(name):
    with pytest.raises(RuntimeError, match=r"does not take bool tensors"):
        NO_BOOL[name](ta.tensor([True, False]))
    assert NO_BOOL[name](ta.tensor([-1, 2])).dtype == np.int64        # integers keep their dtype


def test_a_number_where_a_tensor_belongs_is_a_type_error():
    with pytest.raises(TypeError, match=r"exp\(\) takes a tensor, got int"):
        ta.exp(2)


# -- promotion of several operands ------------------------------------------------------------------------------
def test_clamp_promotes_as_pytorch():
    np.testing.assert_array_equal(host(ta.arange(4).clamp(0.5, 2.5)), [0.5, 1, 2, 2.5])     # was [0, 1, 2, 2]
    assert ta.arange(4).clamp(0.5, 2.5).dtype == np.float32
    assert ta.arange(4).clamp(1, 2).dtype == np.int64
    assert ta.zeros(3, dtype="float16").clamp(0.5).dtype == np.float16
    assert ta.zeros(3).clamp(np.float64(0.5)).dtype == np.float32                 # a NumPy number does not widen
    assert ta.zeros(3).clamp(ta.tensor(0.5, dtype="float64")).dtype == np.float32  # nor does a 0-d tensor
    assert ta.arange(3).clamp(ta.tensor([1.5, 1.5, 1.5])).dtype == np.float32


def test_clamp_in_place_of_an_integer_tensor_by_a_float_is_refused():
    with pytest.raises(RuntimeError, match="cannot be cast to int64"):
        ta.arange(4).clamp_(0.5)


@pytest.mark.parametrize("join", [ta.cat, ta.stack])
def test_cat_and_stack_promote_as_pytorch(join):
    assert join([ta.arange(2), ta.zeros(2)]).dtype == np.float32                  # was float64
    assert join([ta.tensor([True, False]), ta.arange(2)]).dtype == np.int64
    assert join([ta.zeros(2, dtype="float16"), ta.zeros(2, dtype="float64")]).dtype == np.float64
    x = ta.ones(2, requires_grad=True)
    join([ta.arange(2), x]).sum().backward()                                      # the gradient still reaches x
    np.testing.assert_array_equal(host(x.grad), [1, 1])


def test_cat_of_float32_and_float64_sends_each_gradient_back_in_its_own_dtype():
    a, b = ta.ones(2, requires_grad=True), ta.ones(2, dtype="float64", requires_grad=True)
    out = ta.cat([a, b])
    out.sum().backward()
    assert out.dtype == np.float64 and a.grad.dtype == np.float32 and b.grad.dtype == np.float64


# -- float16 accumulates in float32 -------------------------------------------------------------------------------
def _half_rows():
    return (50 + 0.1 * np.random.default_rng(0).standard_normal((4, 256))).astype(np.float16)


def _layer_norm(rows):
    return (rows - rows.mean(1, keepdims=True)) / np.sqrt(rows.var(1, keepdims=True) + 1e-5)


# (function on a float16 tensor, the same in float64 NumPy on the float16 values, the input)
HALF_ACCUMULATES = {
    "sum": (lambda x: x.sum(), lambda a: a.sum(), lambda: np.full(5000, 0.1, dtype=np.float16)),
    "cumsum": (lambda x: x.cumsum(0), lambda a: a.cumsum(0), lambda: np.full(5000, 0.1, dtype=np.float16)),
    "mean": (lambda x: x.mean(1), lambda a: a.mean(1), _half_rows),
    "var": (lambda x: x.var(1), lambda a: a.var(1, ddof=1), _half_rows),
    "std": (lambda x: x.std(1), lambda a: a.std(1, ddof=1), _half_rows),
    "norm": (lambda x: x.norm(), lambda a: np.sqrt((a * a).sum()), lambda: np.full(5000, 0.1, dtype=np.float16)),
    "logsumexp": (lambda x: x.logsumexp(0), lambda a: np.log(np.exp(a).sum(0)),
                  lambda: np.zeros(5000, dtype=np.float16)),
    "softmax": (lambda x: F.softmax(x, 1), lambda a: np.exp(a - a.max(1, keepdims=True))
                / np.exp(a - a.max(1, keepdims=True)).sum(1, keepdims=True), _half_rows),
    "log_softmax": (lambda x: F.log_softmax(x, 0), lambda a: a - np.log(np.exp(a).sum(0)),
                    lambda: np.zeros(5000, dtype=np.float16)),
    "layer_norm": (lambda x: F.layer_norm(x, (256,)), _layer_norm, _half_rows),
    "layer_norm (reference)": (lambda x: _on_reference(lambda: F.layer_norm(x, (256,))), _layer_norm, _half_rows),
    "layer_norm with weight and bias": (
        lambda x: F.layer_norm(x, (256,), ta.ones(256, dtype="float16"), ta.zeros(256, dtype="float16")),
        _layer_norm, _half_rows),
    "rms_norm": (lambda x: F.rms_norm(x - 50, (256,)),
                 lambda a: (a - 50) / np.sqrt(((a - 50) ** 2).mean(1, keepdims=True) + np.finfo(np.float16).eps),
                 _half_rows),
    "mse_loss": (lambda x: F.mse_loss(x, ta.zeros_like(x)), lambda a: (a * a).mean(),
                 lambda: np.full(5000, 0.1, dtype=np.float16)),
}


def _on_reference(function):
    with F.reference():
        return function()


@pytest.mark.parametrize("name", HALF_ACCUMULATES)
def test_float16_accumulates_in_float32_and_stays_float16(name):
    function, in_float64, make = HALF_ACCUMULATES[name]
    values = make()
    x = ta.tensor(values, requires_grad=True)
    out = function(x)
    assert out.dtype == np.float16
    expected = in_float64(values.astype(np.float64))
    # float16 keeps 11 significant bits: within a few of its ulps of the exact answer (a float16 running sum of 5000
    # times 0.1 stops at 256; LayerNorm of rows around 50 was 0.19 off)
    np.testing.assert_allclose(host(out).astype(np.float64), expected, rtol=2e-3, atol=2e-3)
    out.backward(ta.ones_like(out))
    assert x.grad.dtype == np.float16 and np.isfinite(host(x.grad)).all()

