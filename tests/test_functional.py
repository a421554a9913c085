"""Fused functionals: values against plain NumPy definitions, gradcheck in float64, numerical stability."""
import math

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.functional as F
from activations_table import ACTIVATIONS
from conftest import host, randn


def np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def test_softmax_and_log_softmax_values_and_gradcheck():
    x = randn(3, 5)
    np.testing.assert_allclose(host(F.softmax(x, dim=-1)), np_softmax(host(x)), rtol=1e-12)
    np.testing.assert_allclose(host(F.log_softmax(x, dim=0)), np.log(np_softmax(host(x), 0)), rtol=1e-12)
    assert ta.gradcheck(lambda t: F.softmax(t, dim=0) * ta.arange(5.0, dtype="float64"), (x,))
    assert ta.gradcheck(lambda t: F.log_softmax(t, dim=-1), (x,))
    np.testing.assert_allclose(host(x.softmax(-1)), host(F.softmax(x)))


def test_softmax_family_finite_for_huge_float32_logits():
    logits = ta.tensor([[1e4, -1e4, 0.0], [-1e4, -1e4, -1e4]], requires_grad=True)
    for out in (F.softmax(logits, -1), F.log_softmax(logits, -1)):
        assert np.isfinite(host(out)).all()
    loss = F.cross_entropy(logits, ta.tensor([1, 0]))
    loss.backward()
    assert np.isfinite(loss.item()) and np.isfinite(host(logits.grad)).all()
    np.testing.assert_allclose(loss.item(), (2e4 + math.log(3)) / 2, rtol=1e-6)


def test_softmax_of_fully_masked_row_is_zero_not_nan():
    x = ta.tensor([[-np.inf, -np.inf], [0.0, -np.inf]], requires_grad=True)
    y = F.softmax(x, -1)
    np.testing.assert_array_equal(host(y), [[0.0, 0.0], [1.0, 0.0]])
    (y * ta.tensor([[1.0, 2.0], [3.0, 4.0]])).sum().backward()
    np.testing.assert_array_equal(host(x.grad), [[0.0, 0.0], [0.0, 0.0]])


def np_cross_entropy(logits, target, ignore_index=-100, smoothing=0.0):
    logp = np.log(np_softmax(logits))
    valid = target != ignore_index
    t = np.where(valid, target, 0)
    losses = -(1 - smoothing) * logp[np.arange(len(t)), t] - smoothing * logp.mean(axis=1)
    return losses[valid].mean(), losses * valid


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_matches_definition_with_ignore_index(smoothing):
    logits = randn(6, 4)
    target = ta.tensor([0, 3, -100, 1, 2, -100])
    expected_mean, expected_each = np_cross_entropy(host(logits), host(target), smoothing=smoothing)
    loss = F.cross_entropy(logits, target, label_smoothing=smoothing)
    np.testing.assert_allclose(loss.item(), expected_mean, rtol=1e-12)
    np.testing.assert_allclose(host(F.cross_entropy(logits, target, reduction="none", label_smoothing=smoothing)),
                               expected_each, rtol=1e-12)
    np.testing.assert_allclose(F.cross_entropy(logits, target, reduction="sum").item(),
                               np_cross_entropy(host(logits), host(target))[1].sum(), rtol=1e-12)
    for reduction in ("mean", "sum", "none"):
        assert ta.gradcheck(lambda t: F.cross_entropy(t, target, reduction=reduction, label_smoothing=smoothing),
                            (logits,))


def test_cross_entropy_sequence_layout_and_errors():
    logits = randn(2, 5, 3)                                    # (N, C, d1), as PyTorch
    target = ta.tensor([[0, 4, 1], [2, 2, 3]])
    flat = F.cross_entropy(logits.permute(0, 2, 1).reshape(-1, 5), target.reshape(-1))
    np.testing.assert_allclose(F.cross_entropy(logits, target).item(), flat.item(), rtol=1e-12)
    assert F.cross_entropy(logits, target, reduction="none").shape == (2, 3)
    with pytest.raises(ValueError, match="class indices are an integer tensor"):     # a float target: probabilities
        F.cross_entropy(randn(2, 3), randn(2))
    with pytest.raises(ValueError, match="target shape"):
        F.cross_entropy(randn(2, 3), ta.tensor([0, 1, 2]))
    everything_ignored = F.cross_entropy(randn(2, 3), ta.tensor([-100, -100]))
    assert everything_ignored.item() == 0.0


def test_mse_loss():
    a, b = randn(3, 2), randn(3, 2, seed=9)
    np.testing.assert_allclose(F.mse_loss(a, b).item(), ((host(a) - host(b)) ** 2).mean())
    assert ta.gradcheck(lambda a, b: F.mse_loss(a, b), (a, b))


def test_linear_and_embedding():
    x, w, b = randn(2, 3, 4), randn(5, 4, seed=1), randn(5, seed=2)
    np.testing.assert_allclose(host(F.linear(x, w, b)), host(x) @ host(w).T + host(b), rtol=1e-12)
    assert ta.gradcheck(F.linear, (x, w, b))
    assert ta.gradcheck(lambda x, w: F.linear(x, w), (x, w))
    with pytest.raises(ValueError, match=r"\(5, 3\)"):
        F.linear(x, randn(5, 3))
    weight = randn(6, 3)
    ids = ta.tensor([[0, 2, 2], [5, 0, 2]])
    np.testing.assert_allclose(host(F.embedding(ids, weight)), host(weight)[host(ids)])
    assert ta.gradcheck(lambda w: F.embedding(ids, w), (weight,))
    F.embedding(ids, weight, padding_idx=2).sum().backward()
    assert (host(weight.grad)[2] == 0).all() and (host(weight.grad)[0] == 2).all()


def test_layer_norm_and_rms_norm():
    x, w, b = randn(2, 3, 6), randn(6, seed=1), randn(6, seed=2)
    xn = host(x)
    mu, var = xn.mean(-1, keepdims=True), xn.var(-1, keepdims=True)
    np.testing.assert_allclose(host(F.layer_norm(x, (6,), w, b)),
                               (xn - mu) / np.sqrt(var + 1e-5) * host(w) + host(b), rtol=1e-10)
    assert ta.gradcheck(lambda x, w, b: F.layer_norm(x, 6, w, b), (x, w, b))
    assert ta.gradcheck(lambda x: F.layer_norm(x, (3, 6)), (x,))
    eps = np.finfo(np.float64).eps
    np.testing.assert_allclose(host(F.rms_norm(x, (6,), w)),
                               xn / np.sqrt((xn ** 2).mean(-1, keepdims=True) + eps) * host(w), rtol=1e-10)
    assert ta.gradcheck(lambda x, w: F.rms_norm(x, (6,), w, eps=1e-6), (x, w))
    with pytest.raises(ValueError, match="normalized_shape"):
        F.layer_norm(x, (5,))


def test_layer_norm_on_constant_row_is_finite():
    x = ta.tensor(np.full((2, 8), 3.0, dtype=np.float32), requires_grad=True)
    y = F.layer_norm(x, (8,))
    np.testing.assert_array_equal(host(y), np.zeros((2, 8)))
    (y * ta.arange(8.0)).sum().backward()
    assert np.isfinite(host(x.grad)).all()


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activations(name):
    """Each row of tests/activations_table.py: the formula PyTorch documents, and gradcheck."""
    x = randn(4, 5)
    activation = ACTIVATIONS[name]
    np.testing.assert_allclose(host(activation.call(x)), activation.formula(host(x)), rtol=1e-12)
    assert ta.gradcheck(activation.call, (x,))


def test_gelu_at_values_worked_out_by_hand_and_its_approximate_argument():
    with ta.reference():                        # GELU(x) = x Phi(x): at 1, Phi(1) = 0.8413447460685429
        np.testing.assert_allclose(host(F.gelu(ta.tensor([1.0, 0.0, -1.0], dtype="float64"))),
                                   [0.8413447460685429, 0.0, -0.15865525393145707], rtol=1e-15)
    with pytest.raises(ValueError, match="approximate"):
        F.gelu(randn(4, 5), approximate="erf")


def test_dropout_scales_and_masks():
    x = ta.ones(200, 100, requires_grad=True)
    y = F.dropout(x, p=0.3)
    kept = host(y) != 0
    assert abs(kept.mean() - 0.7) < 0.01
    np.testing.assert_allclose(host(y)[kept], 1 / 0.7, rtol=1e-6)
    y.sum().backward()
    np.testing.assert_array_equal(host(x.grad) != 0, kept)     # gradient flows only where kept
    assert F.dropout(x, p=0.3, training=False) is x
    assert (host(F.dropout(x, p=1.0)) == 0).all()


# -- scaled dot-product attention -------------------------------------------------------------------
def np_attention(q, k, v, mask=None, scale=None):
    """The plain definition, written without any of the library: softmax(q k^T s + mask) v."""
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ np.swapaxes(k, -1, -2) * scale
    if mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == bool else scores + mask
    return np_softmax(scores) @ v


@pytest.mark.parametrize("path", ["fast", "reference"])
def test_sdpa_matches_definition_with_masks(path):
    with ta.reference(path == "reference"):
        _sdpa_matches_definition_with_masks()


def _sdpa_matches_definition_with_masks():
    q, k, v = randn(2, 3, 4, 8), randn(2, 3, 6, 8, seed=1), randn(2, 3, 6, 5, seed=2)
    out = F.scaled_dot_product_attention(q, k, v)
    np.testing.assert_allclose(host(out), np_attention(host(q), host(k), host(v)), rtol=1e-10)
    bool_mask = np.random.default_rng(0).random((4, 6)) > 0.3
    bool_mask[:, 0] = True
    np.testing.assert_allclose(host(F.scaled_dot_product_attention(q, k, v, attn_mask=ta.tensor(bool_mask))),
                               np_attention(host(q), host(k), host(v), bool_mask), rtol=1e-10)
    float_mask = np.random.default_rng(1).standard_normal((3, 1, 6))
    np.testing.assert_allclose(host(F.scaled_dot_product_attention(q, k, v, attn_mask=ta.tensor(float_mask))),
                               np_attention(host(q), host(k), host(v), float_mask), rtol=1e-10)
    causal = np.tril(np.ones((4, 6), dtype=bool))                # top-left aligned, as PyTorch
    np.testing.assert_allclose(host(F.scaled_dot_product_attention(q, k, v, is_causal=True)),
                               np_attention(host(q), host(k), host(v), causal), rtol=1e-10)
    np.testing.assert_allclose(host(F.scaled_dot_product_attention(q, k, v, scale=0.3)),
                               np_attention(host(q), host(k), host(v), scale=0.3), rtol=1e-10)
    with pytest.raises(ValueError, match="not both"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=ta.tensor(bool_mask), is_causal=True)


def test_sdpa_gradcheck_masks_and_learned_bias():
    q, k, v = randn(2, 2, 3, 4), randn(2, 2, 5, 4, seed=1), randn(2, 2, 5, 3, seed=2)
    assert ta.gradcheck(F.scaled_dot_product_attention, (q, k, v))
    assert ta.gradcheck(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v))
    bias = randn(2, 3, 5, seed=3)                              # broadcast over batch; gets its own gradient
    assert ta.gradcheck(lambda q, k, v, b: F.scaled_dot_product_attention(q, k, v, attn_mask=b), (q, k, v, bias))


def test_sdpa_gqa_equals_repeated_heads_without_copying():
    q, k, v = randn(2, 6, 4, 8), randn(2, 2, 5, 8, seed=1), randn(2, 2, 5, 8, seed=2)
    pad = np.ones((2, 1, 1, 5), dtype=bool)
    pad[1, ..., 3:] = False
    mask = ta.tensor(pad)
    grouped = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    repeated = F.scaled_dot_product_attention(q, k.repeat_interleave(3, dim=1), v.repeat_interleave(3, dim=1),
                                              attn_mask=mask)
    np.testing.assert_allclose(host(grouped), host(repeated), rtol=1e-12)
    assert ta.gradcheck(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True),
                        (q, k, v), full_jacobian=False)
    per_head = ta.tensor(np.random.default_rng(0).standard_normal((6, 4, 5)))
    np.testing.assert_allclose(
        host(F.scaled_dot_product_attention(q, k, v, attn_mask=per_head, enable_gqa=True)),
        host(F.scaled_dot_product_attention(q, k.repeat_interleave(3, dim=1), v.repeat_interleave(3, dim=1),
                                            attn_mask=per_head)), rtol=1e-12)
    with pytest.raises(ValueError, match="enable_gqa"):
        F.scaled_dot_product_attention(q, k, v)
    with pytest.raises(ValueError, match="divisible"):
        F.scaled_dot_product_attention(randn(1, 5, 2, 4), randn(1, 2, 2, 4), randn(1, 2, 2, 4), enable_gqa=True)


def test_sdpa_fully_masked_row_gives_zero_output_and_gradient():
    q, k, v = randn(1, 1, 3, 4), randn(1, 1, 5, 4, seed=1), randn(1, 1, 5, 4, seed=2)
    mask = np.ones((3, 5), dtype=bool)
    mask[1] = False                                            # query 1 may attend to nothing
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=ta.tensor(mask))
    assert np.isfinite(host(out)).all() and (host(out)[0, 0, 1] == 0).all()
    out.sum().backward()
    assert np.isfinite(host(q.grad)).all() and (host(q.grad)[0, 0, 1] == 0).all()
    float_mask = np.where(mask, 0.0, -np.inf)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=ta.tensor(float_mask))
    assert np.isfinite(host(out)).all()


def test_sdpa_dropout_keeps_expected_value():
    q, k, v = randn(1, 1, 2, 4), randn(1, 1, 3, 4, seed=1), randn(1, 1, 3, 4, seed=2)
    full = host(F.scaled_dot_product_attention(q, k, v))
    samples = np.mean([host(F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)) for _ in range(3000)], axis=0)
    np.testing.assert_allclose(samples, full, atol=0.1)


def test_attention_weights_for_plots():
    q, k = randn(2, 3, 4, 8), randn(2, 3, 6, 8, seed=1)
    w = F.attention_weights(q, k, is_causal=True)
    assert w.shape == (2, 3, 4, 6) and not w.requires_grad
    np.testing.assert_allclose(host(w).sum(-1), 1.0)
    assert (np.triu(host(w)[0, 0], 1) == 0).all()
