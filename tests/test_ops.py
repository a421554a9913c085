"""Every primitive op: values against NumPy, and gradcheck in float64 on shapes that broadcast."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tinyattn as ta
from conftest import host, randn


def positive(*shape):
    return ta.tensor(np.random.default_rng(1).uniform(0.5, 2.0, shape), requires_grad=True)


BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "pow": lambda a, b: a ** b, "maximum": ta.maximum,
}


@pytest.mark.parametrize("name", BINARY)
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5)), ((), (2, 2))])
def test_binary_ops_gradcheck_with_broadcasting(name, shapes):
    a, b = positive(*shapes[0]), positive(*shapes[1])
    assert ta.gradcheck(BINARY[name], (a, b))


def test_reflected_scalar_and_array_forms():
    x = ta.tensor([1.0, 2.0, 4.0], requires_grad=True)
    np.testing.assert_allclose(host(2 - x), [1.0, 0.0, -2.0])
    np.testing.assert_allclose(host(8 / x), [8.0, 4.0, 2.0])
    np.testing.assert_allclose(host(2 ** x), [2.0, 4.0, 16.0])
    np.testing.assert_allclose(host(-x + 1), [0.0, -1.0, -3.0])
    if x.device == "cpu":
        np.testing.assert_allclose(host(np.ones(3) * x), host(x))
    assert (x * 3.0).dtype == np.float32                       # a Python float never promotes float32


UNARY = {
    "exp": ta.exp, "log": ta.log, "sqrt": ta.sqrt, "abs": ta.abs, "tanh": ta.tanh,
    "sigmoid": ta.sigmoid, "relu": ta.relu, "neg": lambda x: -x, "square": lambda x: x ** 2,
    "rsqrt": lambda x: x ** -0.5,
}


@pytest.mark.parametrize("name", UNARY)
def test_unary_ops_gradcheck(name):
    x = positive(3, 4) if name in ("log", "sqrt", "rsqrt") else randn(3, 4)
    if name in ("abs", "relu"):                                # keep away from the kink at 0
        x = ta.tensor(host(x) + np.sign(host(x)) * 0.1, requires_grad=True)
    assert ta.gradcheck(UNARY[name], (x,))


def test_sigmoid_is_stable_for_large_inputs():
    x = ta.tensor([-1e4, -50.0, 0.0, 50.0, 1e4])
    y = host(ta.sigmoid(x))
    assert np.isfinite(y).all()
    np.testing.assert_allclose(y, [0.0, 1.9287e-22, 0.5, 1.0, 1.0], rtol=1e-3)


@pytest.mark.parametrize("shapes", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)),
                                    ((2, 1, 3, 4), (5, 4, 2)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,))])
def test_matmul_gradcheck(shapes):
    a, b = randn(*shapes[0]), randn(*shapes[1], seed=7)
    np.testing.assert_allclose(host(a @ b), host(a) @ host(b), rtol=1e-12)
    assert ta.gradcheck(lambda a, b: a @ b, (a, b))


@pytest.mark.parametrize("dim,keepdim", [(None, False), (0, False), (1, True), ((0, 2), False), (-1, True)])
def test_reductions_match_numpy_and_gradcheck(dim, keepdim):
    x = randn(2, 3, 4)
    axis = dim
    np.testing.assert_allclose(host(x.sum(dim=dim, keepdim=keepdim)), host(x).sum(axis=axis, keepdims=keepdim))
    np.testing.assert_allclose(host(x.mean(dim=dim, keepdim=keepdim)), host(x).mean(axis=axis, keepdims=keepdim))
    np.testing.assert_allclose(host(x.var(dim=dim, keepdim=keepdim)),
                               host(x).var(axis=axis, keepdims=keepdim, ddof=1))
    for f in (lambda t: t.sum(dim=dim, keepdim=keepdim), lambda t: t.mean(dim=dim, keepdim=keepdim),
              lambda t: t.var(dim=dim, keepdim=keepdim), lambda t: t.var(dim=dim, keepdim=keepdim, correction=0)):
        assert ta.gradcheck(f, (x,))


def test_max_min_with_dim_return_values_and_indices():
    x = randn(3, 5)
    values, indices = x.max(dim=1)
    np.testing.assert_allclose(host(values), host(x).max(axis=1))
    np.testing.assert_array_equal(host(indices), host(x).argmax(axis=1))
    assert x.max(dim=1).values.shape == (3,) and x.min(dim=0, keepdim=True).indices.shape == (1, 5)
    assert ta.gradcheck(lambda t: t.max(dim=1)[0], (x,))
    assert ta.gradcheck(lambda t: t.min(dim=0, keepdim=True)[0], (x,))
    assert ta.gradcheck(lambda t: t.max(), (x,))
    np.testing.assert_array_equal(host(x.argmax(dim=-1)), host(x).argmax(axis=-1))


def test_max_of_ties_shares_gradient():
    x = ta.tensor([1.0, 3.0, 3.0], requires_grad=True)
    x.max().backward()
    np.testing.assert_allclose(host(x.grad), [0.0, 0.5, 0.5])


def test_shape_ops_gradcheck():
    x = randn(2, 3, 4)
    cases = [lambda t: t.reshape(4, 6), lambda t: t.view(-1), lambda t: t.transpose(0, 2),
             lambda t: t.permute(2, 0, 1), lambda t: t.unsqueeze(1).squeeze(1), lambda t: t.flatten(1),
             lambda t: t[:, :1].expand(2, 5, 4), lambda t: t.contiguous(), lambda t: t.mT, lambda t: t.T]
    for f in cases:
        assert ta.gradcheck(f, (x,))
    assert x.permute(2, 0, 1).shape == (4, 2, 3) and x.flatten().shape == (24,)
    assert x.unsqueeze(-1).shape == (2, 3, 4, 1) and x[:, :1].squeeze().shape == (2, 4)


def test_getitem_basic_and_advanced_with_repeated_indices():
    x = randn(5, 4)
    assert ta.gradcheck(lambda t: t[1:4, ::2], (x,))
    assert ta.gradcheck(lambda t: t[..., 1], (x,))
    assert ta.gradcheck(lambda t: t[None, 2], (x,))
    idx = ta.tensor([0, 2, 2, 2, 4])
    assert ta.gradcheck(lambda t: t[idx], (x,))
    assert ta.gradcheck(lambda t: t[[1, 1], [3, 3]], (x,))
    y = ta.tensor(np.ones((3, 2)), requires_grad=True)
    y[ta.tensor([0, 0, 0, 2])].sum().backward()
    np.testing.assert_allclose(host(y.grad), [[3, 3], [0, 0], [1, 1]])   # every repeat counts
    mask = x > 0
    assert ta.gradcheck(lambda t: t[mask], (x,))


def test_cat_stack_split_chunk():
    a, b = randn(2, 3), randn(2, 5, seed=3)
    assert ta.cat([a, b], dim=1).shape == (2, 8)
    assert ta.gradcheck(lambda a, b: ta.cat([a, b], dim=-1), (a, b))
    c = randn(2, 3, seed=4)
    assert ta.stack([a, c], dim=1).shape == (2, 2, 3)
    assert ta.gradcheck(lambda a, c: ta.stack([a, c], dim=1), (a, c))
    x = randn(7, 2)
    pieces = x.split(3)
    assert [p.shape[0] for p in pieces] == [3, 3, 1]
    assert [p.shape[1] for p in x.split([1, 1], dim=1)] == [1, 1]
    assert [p.shape[0] for p in x.chunk(3)] == [3, 3, 1]
    assert ta.gradcheck(lambda t: ta.cat([p * (i + 1) for i, p in enumerate(t.chunk(3))]), (x,))
    with pytest.raises(RuntimeError, match="shapes"):        # PyTorch's error types, so code that catches them ports
        ta.cat([a, randn(3, 3)], dim=1)
    with pytest.raises(RuntimeError, match="add up"):
        x.split([3, 3])


def test_where_masked_fill_repeat_interleave_tril():
    a, b = randn(3, 4), randn(3, 4, seed=5)
    cond = a > b
    np.testing.assert_allclose(host(ta.where(cond, a, b)), np.maximum(host(a), host(b)))
    assert ta.gradcheck(lambda a, b: ta.where(cond, a, b), (a, b))
    assert ta.gradcheck(lambda a: ta.where(cond, a, 0.0), (a,))
    mask = ta.tensor(np.array([True, False, False, True]))
    filled = a.masked_fill(mask, float("-inf"))
    assert np.isneginf(host(filled)[:, 0]).all() and np.isfinite(host(filled)[:, 1]).all()
    assert ta.gradcheck(lambda t: t.masked_fill(mask, 0.0), (a,))
    with pytest.raises(TypeError, match="boolean"):
        a.masked_fill(ta.tensor([1, 0, 0, 1]), 0.0)
    r = a.repeat_interleave(2, dim=1)
    np.testing.assert_allclose(host(r), np.repeat(host(a), 2, axis=1))
    assert ta.gradcheck(lambda t: t.repeat_interleave(3, dim=0), (a,))
    np.testing.assert_allclose(host(ta.tril(a)), np.tril(host(a)))
    np.testing.assert_allclose(host(ta.triu(a, 1)), np.triu(host(a), 1))
    assert ta.gradcheck(lambda t: ta.tril(t, -1) + ta.triu(t, 2), (a,))


def test_comparisons_give_bool_without_grad():
    a = ta.tensor([1.0, 2.0, 3.0], requires_grad=True)
    for result in (a > 2, a >= 2, a < 2, a <= 2, a == 2, a != 2, a.eq(2)):
        assert result.dtype == np.bool_ and not result.requires_grad
    np.testing.assert_array_equal(host(a > 1.5), [False, True, True])


def test_casts_and_int_tensors():
    x = ta.tensor([1.5, 2.5], requires_grad=True)
    d = x.double()
    assert d.dtype == np.float64
    (d * d).sum().backward()
    assert x.grad.dtype == np.float32
    assert x.long().dtype == np.int64 and x.to("float64").dtype == np.float64
    assert ta.arange(5).dtype == np.int64 and ta.arange(0.0, 1.0, 0.25).shape == (4,)


shapes = st.lists(st.integers(1, 3), min_size=0, max_size=3)


@settings(max_examples=25, deadline=None)
@given(shape=shapes, drop=st.lists(st.booleans(), min_size=3, max_size=3), seed=st.integers(0, 10_000))
def test_property_broadcast_mul_add_gradcheck(shape, drop, seed):
    """For any shape and any broadcastable partner (dims set to 1 or dropped), gradients reduce correctly."""
    other = [1 if d else s for s, d in zip(shape, drop)]
    rng = np.random.default_rng(seed)
    a = ta.tensor(rng.standard_normal(shape), requires_grad=True)
    b = ta.tensor(rng.standard_normal(other[len(other) // 2:]), requires_grad=True)
    assert ta.gradcheck(lambda a, b: a * b + b, (a, b))
    assert ta.gradcheck(lambda a, b: (a - b).sum(dim=-1) if a.ndim else a - b, (a, b))


@settings(max_examples=20, deadline=None)
@given(m=st.integers(1, 4), k=st.integers(1, 4), n=st.integers(1, 4), batch=st.integers(1, 3),
       seed=st.integers(0, 10_000))
def test_property_batched_matmul_gradcheck(m, k, n, batch, seed):
    rng = np.random.default_rng(seed)
    a = ta.tensor(rng.standard_normal((batch, m, k)), requires_grad=True)
    b = ta.tensor(rng.standard_normal((k, n)), requires_grad=True)
    assert ta.gradcheck(lambda a, b: a @ b, (a, b))
