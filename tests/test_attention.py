"""Attention in every form: flash against sdpa, additive against its definition, modules, KV cache, positions,
Swin windows. Each ties a form to the plain definition."""
import contextlib
import math
import warnings

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.functional as F
from tinyattn import nn
from tinyattn.cpu import split
from conftest import host, randn


def _grads(out, inputs, weight):
    for t in inputs:
        t.grad = None
    (out * weight).sum().backward()
    return [host(t.grad) for t in inputs]


FLASH_CASES = [  # (B, Hq, Hkv, L, S, block, causal, padding)
    (2, 4, 4, 37, 37, 8, False, False),
    (2, 4, 4, 37, 37, 16, True, False),
    (1, 2, 2, 19, 45, 7, False, True),      # Lq != Lk, lengths not multiples of the block
    (2, 6, 2, 33, 21, 10, False, True),     # GQA with a padding mask
    (2, 4, 1, 40, 40, 9, True, False),      # MQA, causal
    (1, 2, 2, 5, 70, 64, True, False),      # causal with more keys than queries (top-left)
]


@pytest.mark.parametrize("dtype,tol", [("float64", 1e-12), ("float32", 1e-5)])
@pytest.mark.parametrize("case", FLASH_CASES)
def test_flash_equals_sdpa_outputs_and_gradients(case, dtype, tol):
    b, hq, hkv, lq, lk, block, causal, padding = case
    q, k, v = randn(b, hq, lq, 16, dtype=dtype), randn(b, hkv, lk, 16, dtype=dtype, seed=1), \
        randn(b, hkv, lk, 16, dtype=dtype, seed=2)
    mask = None
    if padding:
        keep = np.ones((b, 1, 1, lk), dtype=bool)
        keep[-1, ..., lk // 2:] = False
        mask = ta.tensor(keep)
    kwargs = dict(attn_mask=mask, is_causal=causal, enable_gqa=hq != hkv)
    flash = F.flash_attention(q, k, v, block_size=block, **kwargs)
    sdpa = F.scaled_dot_product_attention(q, k, v, **kwargs)
    assert flash.dtype == np.dtype(dtype)
    np.testing.assert_allclose(host(flash), host(sdpa), atol=tol, rtol=0)
    weight = randn(*sdpa.shape, requires_grad=False, dtype=dtype, seed=3)
    for g_flash, g_sdpa in zip(_grads(flash, (q, k, v), weight), _grads(sdpa, (q, k, v), weight)):
        np.testing.assert_allclose(g_flash, g_sdpa, atol=tol * 10, rtol=0)


@pytest.mark.parametrize("n_rows,n_keys,block", [(512, 512, 256), (256, 256, 64), (37, 37, 16), (5, 70, 64),
                                                 (70, 5, 4), (9, 9, 3), (300, 300, 150)])
def test_flash_causal_pieces_cover_every_visible_score_and_little_above_the_diagonal(n_rows, n_keys, block):
    """The fast flash path computes each block that crosses a causal diagonal in pieces of rows (MASKED_ROWS long,
    at most half the block) over the keys up to their last row: every score a query may see is computed exactly
    once, and of a square diagonal block only a triangle per piece is computed to be masked instead of half."""
    from tinyattn.functional.flash_attention import _blocks, _visible
    from tinyattn.functional.flash_attention_fast import _pieces
    computed = np.zeros((n_rows, n_keys), dtype=int)
    for rows in _blocks(n_rows, block):
        for cols in _blocks(n_keys, block):
            if _visible(rows, cols, True):
                for part_rows, part_cols in _pieces(rows, cols, True):
                    computed[part_rows, part_cols] += 1
    visible = np.tri(n_rows, n_keys, dtype=bool)
    assert (computed[visible] == 1).all() and computed.max() == 1
    piece = min(split.MASKED_ROWS, -(-block // 2))
    if n_rows == n_keys and n_rows % block == 0 and block % piece == 0:   # per piece, a triangle above the diagonal
        assert computed.sum() - visible.sum() == (n_rows // piece) * piece * (piece - 1) // 2


def test_flash_gradcheck_and_float_mask():
    q, k, v = randn(1, 2, 6, 4), randn(1, 2, 7, 4, seed=1), randn(1, 2, 7, 3, seed=2)
    assert ta.gradcheck(lambda q, k, v: F.flash_attention(q, k, v, is_causal=True, block_size=3), (q, k, v))
    bias = ta.tensor(np.random.default_rng(0).standard_normal((2, 6, 7)))
    np.testing.assert_allclose(host(F.flash_attention(q, k, v, attn_mask=bias, block_size=4)),
                               host(F.scaled_dot_product_attention(q, k, v, attn_mask=bias)), atol=1e-12)
    with pytest.raises(ValueError, match="learned bias"):
        F.flash_attention(q, k, v, attn_mask=randn(2, 6, 7))
    with pytest.raises(ValueError, match="not both"):
        F.flash_attention(q, k, v, attn_mask=bias, is_causal=True)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("case", ["later keys score 800 higher", "rows see no key of the first block"])
def test_flash_mends_a_row_block_whose_first_block_gives_no_fit_shift(case, dtype):
    """The fast forward shifts each row's scores by their maximum over the first column block. Where later keys score
    far higher (exp(800) overflows float32 and float64 alike) or a row sees none of the first block's keys and its
    scores lie near -800 (every exp underflows), the row block is made again with the true maxima: output and
    gradients within 64 roundings of float64's, and no warning.
    Integer q and k make every score exact, so that float64 is a fair oracle (as in _large_logit_inputs)."""
    rng = np.random.default_rng(0)
    n, block = 24, 8
    q, k = (rng.integers(-3, 4, (1, 2, n, 4)) for _ in range(2))
    k[..., 0] = 1                                   # scores: q[..., 0] / 2 and a few halves; q carries the large
    mask = None                                     # part, as in _large_logit_inputs, so that dQ loses nothing
    if case == "later keys score 800 higher":
        q[..., 0], k[..., :block, 0] = 1600, 0
    else:
        q[..., 0] = -1600
        mask = ta.tensor(np.arange(n) >= block)     # every row sees the keys after the first block only
    v, weight = rng.standard_normal((1, 2, n, 4)), rng.standard_normal((1, 2, n, 4))
    inputs = [ta.tensor(x.astype(dtype), requires_grad=True) for x in (q, k, v)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        flash = F.flash_attention(*inputs, attn_mask=mask, block_size=block, fused=False)
        got = [host(flash)] + _grads(flash, inputs, ta.tensor(weight.astype(dtype)))
    inputs = [ta.tensor(x.astype("float64"), requires_grad=True) for x in (q, k, v)]
    with ta.reference():
        exact = F.scaled_dot_product_attention(*inputs, attn_mask=mask)
        want = [host(exact)] + _grads(exact, inputs, ta.tensor(weight))
    roundoff = np.finfo(dtype).eps / 2
    for name, g, w in zip(("out", "dq", "dk", "dv"), got, want):
        error = np.abs(g - w).max() / np.abs(w).max()
        assert error < 64 * roundoff, f"{name}: relative error {error:.2e} = {error / roundoff:.0f} roundings"


def test_flash_fully_masked_rows_give_zero_not_nan():
    q, k, v = randn(1, 1, 6, 4), randn(1, 1, 6, 4, seed=1), randn(1, 1, 6, 4, seed=2)
    keep = np.ones((6, 6), dtype=bool)
    keep[2] = False
    out = F.flash_attention(q, k, v, attn_mask=ta.tensor(keep), block_size=4)
    assert np.isfinite(host(out)).all() and (host(out)[0, 0, 2] == 0).all()
    out.sum().backward()
    assert np.isfinite(host(q.grad)).all() and (host(q.grad)[0, 0, 2] == 0).all()
    assert np.isfinite(host(k.grad)).all()


def _large_logit_inputs(dtype, logit, rng, shape=(2, 2, 80, 16)):
    """Integer q and k whose every score is exact in dtype (so that float64 is a fair oracle): a common part near
    logit, and differences of a few units (in float16 multiples of 4, its spacing near 5e3), so that some rows have
    a clear winner and others ties. q carries the large part: k's rows share only a 1, so that dQ = scale dS K,
    whose rows of dS sum to 0, loses nothing to cancellation. dO is small enough that dK stays inside float16."""
    step = 4 if dtype == "float16" else 1
    q, k = (rng.integers(-3, 4, shape) * step for _ in range(2))
    q[..., 0] = round(logit * math.sqrt(shape[-1]) / 16) * 16
    k[..., 0] = 1
    v, grad = rng.standard_normal(shape), rng.standard_normal(shape) / 64
    return [ta.tensor(x.astype(dtype), requires_grad=True) for x in (q, k, v)], ta.tensor(grad.astype(dtype))


@pytest.mark.parametrize("dtype,logit", [("float32", 4e5), ("float16", 5e3)])
@pytest.mark.parametrize("path", ["fast", "reference"])
@pytest.mark.parametrize("function", ["flash_attention", "scaled_dot_product_attention"])
def test_attention_gradients_stay_accurate_at_large_logits(function, path, dtype, logit, monkeypatch):
    """Output, dQ, dK and dV within 64 roundings of float64 (measured: at most 20) on every path. Flash once missed
    by far on these inputs (dQ, dK, dV 8e-3 to 1.5e-2 off in float32, 0.3 to 1.3 in float16): both paths rounded
    L = m + log l to the inputs' dtype, and the fast backward recomputed S - L in one product that rounded otherwise
    than the forward's S."""
    monkeypatch.setattr(split, "MASKED_ROWS", 16)             # SDPA's causal row blocks, several of them
    (q, k, v), grad = _large_logit_inputs(dtype, logit, np.random.default_rng(0))
    extra = {"block_size": 32, "fused": False} if function == "flash_attention" else {}   # ragged blocks of 80 rows
    with ta.reference(path == "reference"):
        out = getattr(F, function)(q, k, v, is_causal=True, **extra)
        out.backward(grad)
    q64, k64, v64 = (ta.tensor(host(t).astype("float64"), requires_grad=True) for t in (q, k, v))
    with ta.reference():
        exact = F.scaled_dot_product_attention(q64, k64, v64, is_causal=True)
        exact.backward(ta.tensor(host(grad).astype("float64")))
    scores = host(q64) @ host(k64).swapaxes(-1, -2) / math.sqrt(q.shape[-1])
    assert 0.95 * logit < np.abs(scores).max() < 1.1 * logit
    roundoff = np.finfo(dtype).eps / 2
    for name, got, want in zip(("out", "dq", "dk", "dv"), (out, q.grad, k.grad, v.grad), (exact, q64.grad,
                                                                                          k64.grad, v64.grad)):
        assert got.dtype == np.dtype(dtype), name
        error = np.abs(host(got) - host(want)).max() / np.abs(host(want)).max()
        assert error < 64 * roundoff, f"{name}: relative error {error:.2e} = {error / roundoff:.0f} roundings"


FUSED_CASES = [  # (B, Hq, Hkv, L, S, head size, causal): lengths off the kernels' 64-row blocks and their tiles
    (2, 4, 4, 100, 100, 64, True),
    (1, 8, 2, 70, 133, 32, False),          # GQA, Lq != Lk
    (1, 4, 4, 130, 50, 16, True),           # causal with more queries than keys
    (2, 6, 3, 65, 65, 80, True),            # head size 80: 32-row tiles
    (3, 2, 1, 33, 97, 128, False),          # MQA, the largest head size
    (1, 2, 2, 40, 90, 20, True),            # head size 20: zeros pad it to mma's 24
]
# Relative errors (Frobenius norm) of the output and of dQ, dK, dV against float64, measured on an H100 over these
# cases: 3xTF32 (the default) 1.6e-7 to 6.8e-7, float32's rounding; one TF32 product (CUPY_TF32=1) rounds every
# operand to 10 bits: 3.2e-4 to 6.5e-4. set_float32_matmul_precision("high") switches the kernels to that TF32 too.
FUSED_BOUNDS = {"3xtf32": 3e-6, "tf32": 2e-3, "high": 2e-3}


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["3xtf32", "tf32", "high"])
@pytest.mark.parametrize("case", FUSED_CASES)
def test_fused_flash_kernels_match_float64_reference(case, precision, monkeypatch, request):
    monkeypatch.setenv("CUPY_TF32", "1" if precision == "tf32" else "0")
    if precision == "high":
        ta.set_float32_matmul_precision("high")
        request.addfinalizer(lambda: ta.set_float32_matmul_precision("highest"))
    b, hq, hkv, lq, lk, e, causal = case
    q64, k64, v64 = (randn(*shape, seed=seed, device="cuda") for seed, shape in
                     enumerate([(b, hq, lq, e), (b, hkv, lk, e), (b, hkv, lk, e)]))
    q, k, v = (ta.tensor(t.detach(), dtype="float32", requires_grad=True) for t in (q64, k64, v64))
    kwargs = dict(is_causal=causal, enable_gqa=hq != hkv)
    fused = F.flash_attention(q, k, v, fused=True, **kwargs)
    reference = F.flash_attention(q64, k64, v64, fused=False, **kwargs)
    weight = randn(*reference.shape, requires_grad=False, seed=9, device="cuda")
    results = [host(fused)] + _grads(fused, (q, k, v), weight.float())
    expected = [host(reference)] + _grads(reference, (q64, k64, v64), weight)
    errors = {}
    for name, got, want in zip(("out", "dq", "dk", "dv"), results, expected):
        assert np.isfinite(got).all(), name
        errors[name] = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert max(errors.values()) < FUSED_BOUNDS[precision], errors
    if precision != "3xtf32":                # the switch took effect: plain TF32 is far from float32's rounding
        assert max(errors.values()) > 1e-5, errors


ATTENTIONS = {"sdpa": F.scaled_dot_product_attention,
              "flash": lambda *a, **kw: F.flash_attention(*a, block_size=3, fused=False, **kw)}


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("path", ["fast", "reference"])
@pytest.mark.parametrize("name", ["sdpa", "flash"])
def test_any_leading_batch_dims_equal_a_loop_over_them(name, path, causal):
    # as PyTorch's SDPA, (..., heads, T, D): here (2, 3, 4 heads, T, D), with GQA (2 key/value heads at dim -3),
    # key and value batch dims that broadcast to the query's, and a boolean mask with a batch dim of its own
    attend = ATTENTIONS[name]
    q, k, v = randn(2, 3, 4, 5, 8), randn(1, 3, 2, 7, 8, seed=1), randn(2, 1, 2, 7, 6, seed=2)
    keep = np.random.default_rng(3).random((3, 1, 5, 7)) > 0.3
    keep[1, 0, 2] = False                                        # a fully masked row: output and gradient 0
    options = dict(is_causal=True) if causal else dict(attn_mask=ta.tensor(keep))
    weight = randn(2, 3, 4, 5, 6, requires_grad=False, seed=4)
    with ta.reference() if path == "reference" else contextlib.nullcontext():
        out = attend(q, k, v, enable_gqa=True, **options)
        grads = _grads(out, (q, k, v), weight)
        for t in (q, k, v):
            t.grad = None                                        # the loop's slices add theirs up in .grad
        looped = np.zeros(out.shape)
        for i in range(2):
            for j in range(3):
                one = dict(is_causal=True) if causal else dict(attn_mask=ta.tensor(keep[j]))
                part = attend(q[i, j], k[0, j], v[i, 0], enable_gqa=True, **one)
                looped[i, j] = host(part)
                (part * weight[i, j]).sum().backward()
        if not causal:
            assert np.abs(looped[:, 1, :, 2]).max() == 0
        np.testing.assert_allclose(host(out), looped, rtol=1e-12, atol=1e-12)
        for got, t in zip(grads, (q, k, v)):
            np.testing.assert_allclose(got, host(t.grad), rtol=1e-12, atol=1e-12)
        assert ta.gradcheck(lambda *a: attend(*a, enable_gqa=True, **options), (q, k, v), full_jacobian=False)


def _materialized_logsumexp(q, k, keep, causal, groups):
    """Each row's log-sum-exp of the scaled, masked scores, from the whole score matrix (-inf for an empty row)."""
    k = np.repeat(k, groups, axis=-3)
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        keep = np.tril(np.ones(scores.shape[-2:], dtype=bool))
    if keep is not None:
        scores = np.where(keep, scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0)
    with np.errstate(divide="ignore"):
        return (top + np.log(np.exp(scores - top).sum(axis=-1, keepdims=True)))[..., 0]


@pytest.mark.parametrize("case", ["padding", "causal", "large logits"])
def test_flash_attention_returns_each_rows_log_sum_exp(case):
    # GQA over leading dims, blocks that leave ragged ends; padding leaves query rows with no key at all; logits of
    # some 300 make the fast twin's shift from the first block too small, and it makes the rows again
    q, k, v = randn(2, 3, 4, 13, 8), randn(2, 3, 2, 11, 8, seed=1), randn(2, 3, 2, 11, 8, seed=2)
    keep = None
    if case == "padding":
        keep = np.random.default_rng(0).random((2, 1, 1, 13, 11)) > 0.4
        keep[0, 0, 0, 5] = False                                        # query 5 of the first entry sees no key
    if case == "large logits":
        q = randn(2, 3, 4, 13, 8) * 40.0
    causal = case == "causal"
    options = dict(attn_mask=None if keep is None else ta.tensor(keep), is_causal=causal, enable_gqa=True,
                   block_size=4)
    expected = _materialized_logsumexp(host(q), host(k), keep, causal, 2)
    out_fast, fast = F.flash_attention(q, k, v, return_lse=True, **options)
    with ta.reference():
        out_reference, reference = F.flash_attention(q, k, v, return_lse=True, **options)
    assert fast.shape == reference.shape == (2, 3, 4, 13) and fast.dtype == reference.dtype == ta.float64
    assert not fast.requires_grad and not reference.requires_grad                   # no gradient: documented
    for lse in (fast, reference):
        np.testing.assert_allclose(host(lse), expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(host(out_fast), host(F.flash_attention(q, k, v, **options)))   # out as without
    if case == "padding":
        assert (host(fast)[0, :, :, 5] == -np.inf).all() and (host(reference)[0, :, :, 5] == -np.inf).all()
        assert np.isfinite(expected[1]).all()
    out32, lse32 = F.flash_attention(q.float(), k.float(), v.float(), return_lse=True, **options)
    assert lse32.dtype == ta.float32
    np.testing.assert_allclose(host(lse32), expected, rtol=1e-5)


@pytest.mark.gpu
def test_fused_flash_kernels_take_leading_dims_and_return_the_log_sum_exp(monkeypatch):
    monkeypatch.setenv("CUPY_TF32", "0")
    q64, k64, v64 = (randn(*shape, seed=seed, device="cuda") for seed, shape in
                     enumerate([(2, 3, 4, 70, 32), (2, 3, 2, 90, 32), (2, 3, 2, 90, 32)]))
    q, k, v = (ta.tensor(t.detach(), dtype="float32") for t in (q64, k64, v64))
    out, lse = F.flash_attention(q, k, v, is_causal=True, enable_gqa=True, fused=True, return_lse=True)
    want_out, want = F.flash_attention(q64, k64, v64, is_causal=True, enable_gqa=True, fused=False, return_lse=True)
    assert lse.shape == (2, 3, 4, 70) and lse.dtype == ta.float32 and not lse.requires_grad
    np.testing.assert_allclose(host(lse), host(want), rtol=3e-6, atol=3e-6)      # a first causal row: L = S_00
    assert np.linalg.norm(host(out) - host(want_out)) / np.linalg.norm(host(want_out)) < FUSED_BOUNDS["3xtf32"]


def test_return_lse_refuses_a_function_of_ones_own():
    from tinyattn.functional.flash_attention import ReferenceFlashAttention

    class Mine(ReferenceFlashAttention):
        pass
    q = randn(1, 2, 5, 4)
    with F.use(flash_attention=Mine):
        assert F.flash_attention(q, q, q).shape == (1, 2, 5, 4)
        with pytest.raises(ValueError, match="return_lse needs the library's flash attention; Mine"):
            F.flash_attention(q, q, q, return_lse=True)


def test_fused_flash_kernels_say_why_they_cannot_run():
    q = randn(1, 2, 8, 16, dtype="float32")
    with pytest.raises(ValueError, match="attn_mask"):
        F.flash_attention(q, q, q, attn_mask=ta.ones(8, 8, dtype="bool"), fused=True)
    with pytest.raises(ValueError, match="head size 6"):
        F.flash_attention(*[randn(1, 2, 8, 6, dtype="float32")] * 3, fused=True)
    with pytest.raises(ValueError, match="float32"):
        F.flash_attention(*[randn(1, 2, 8, 16)] * 3, fused=True)
    with pytest.raises(ValueError, match="same batch dims"):
        F.flash_attention(q, *[randn(2, 2, 8, 16, dtype="float32")] * 2, fused=True)
    with pytest.raises(ValueError, match="non-empty"):
        F.flash_attention(q, *[randn(1, 2, 0, 16, dtype="float32")] * 2, fused=True)


def test_fused_flash_kernels_need_cuda_tensors():
    q = randn(1, 2, 8, 16, dtype="float32", device="cpu")
    with pytest.raises(ValueError, match="needs CUDA tensors, got cpu"):
        F.flash_attention(q, q, q, fused=True)
    np.testing.assert_allclose(host(F.flash_attention(q, q, q)), host(F.flash_attention(q, q, q, fused=False)))


def test_additive_attention_matches_definition_and_gradcheck():
    b, s, dq, dk, h = 2, 5, 3, 4, 6
    query, key, value = randn(b, dq), randn(b, s, dk, seed=1), randn(b, s, 2, seed=2)
    wq, wk, v = randn(h, dq, seed=3), randn(h, dk, seed=4), randn(h, seed=5)
    keep = np.ones((b, s), dtype=bool)
    keep[1, 3:] = False
    context, weights = F.additive_attention(query, key, value, wq, wk, v, mask=ta.tensor(keep))
    scores = np.tanh(host(query)[:, None, :] @ host(wq).T + host(key) @ host(wk).T) @ host(v)
    scores = np.where(keep, scores, -np.inf)
    expected = np.exp(scores - scores.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(host(weights), expected, rtol=1e-12)
    np.testing.assert_allclose(host(context), np.einsum("bs,bsd->bd", expected, host(value)), rtol=1e-12)
    assert ta.gradcheck(lambda *a: F.additive_attention(*a, mask=ta.tensor(keep))[0],
                        (query, key, value, wq, wk, v), full_jacobian=False)
    module = nn.AdditiveAttention(dq, dk, h)
    ctx, w = module(query.float(), key.float(), value.float(), key_proj=module.project_keys(key.float()))
    assert ctx.shape == (b, 2) and w.shape == (b, s)


# -- multi-head attention module -----------------------------------------------------------------------
def test_self_attention_is_permutation_equivariant_without_positions():
    mha = nn.Attention(16, 4).double()
    x = randn(2, 7, 16, requires_grad=False)
    perm = np.random.default_rng(0).permutation(7)
    out = host(mha(x))
    np.testing.assert_allclose(host(mha(x[:, perm])), out[:, perm], rtol=1e-10, atol=1e-12)
    causal = host(mha(x, is_causal=True))                      # a causal mask breaks the symmetry
    assert not np.allclose(host(mha(x[:, perm], is_causal=True)), causal[:, perm])


@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])
def test_mha_sdpa_and_flash_agree_and_heads_share(num_kv_heads):
    sdpa = nn.Attention(16, 4, num_kv_heads=num_kv_heads).double()
    flash = nn.Attention(16, 4, num_kv_heads=num_kv_heads, impl="flash").double()
    flash.load_state_dict(sdpa.state_dict())
    x = randn(2, 9, 16)
    pad = np.zeros((2, 9), dtype=bool)
    pad[0, 6:] = True
    for kwargs in ({"is_causal": True}, {"key_padding_mask": ta.tensor(pad)}):
        np.testing.assert_allclose(host(flash(x, **kwargs)), host(sdpa(x, **kwargs)), atol=1e-12)
    head_dim = 4
    assert sdpa.qkv.weight.shape == (16 + 2 * num_kv_heads * head_dim, 16)
    assert sdpa.kv_cache_bytes_per_token() == 2 * num_kv_heads * head_dim * 4
    assert ta.gradcheck(lambda x, *p: sdpa(x, is_causal=True), (x, *sdpa.parameters()), full_jacobian=False)


def test_key_padding_mask_hides_padded_keys_and_weights_for_plots():
    mha = nn.Attention(8, 2).double()
    x = randn(1, 6, 8, requires_grad=False)
    pad = ta.tensor(np.array([[False, False, False, False, True, True]]))
    out = host(mha(x, key_padding_mask=pad, need_weights=True))
    changed = host(x).copy()
    changed[:, 4:] = 100.0                                     # whatever sits in the padded keys...
    out_changed = host(mha(ta.tensor(changed), key_padding_mask=pad))
    np.testing.assert_allclose(out_changed[:, :4], out[:, :4], rtol=1e-10)   # ...real queries do not see it
    weights = host(mha.last_weights)
    assert weights.shape == (1, 2, 6, 6)
    np.testing.assert_allclose(weights.sum(-1), 1.0)
    assert (weights[..., 4:] == 0).all()
    with pytest.raises(TypeError, match="boolean"):
        mha(x, key_padding_mask=ta.tensor([[0, 0, 0, 0, 1, 1]]))


@pytest.mark.parametrize("impl", ["sdpa", "reference", "flash"])
@pytest.mark.parametrize("mask", ["causal", "padding", "float", None])
def test_asking_for_weights_changes_the_road_not_the_output(impl, mask, monkeypatch):
    """need_weights=True forms attention in the open through hook_pattern (the fused paths' output plus a pass for
    the weights before): outputs and gradients agree with the fused path's to 1e-12 in float64, on thin parts (keys a
    causal mask hides left out of them), with grouped heads; the weights kept are the heads' softmax weights."""
    monkeypatch.setattr(split, "MIN_SHARED_MATMUL", 0)          # many parts, each skipping the keys it cannot see
    monkeypatch.setattr(split, "SCORES_PER_PART", 64)
    mha = nn.Attention(16, 4, num_kv_heads=2, impl=impl).double()
    x, weight = randn(3, 37, 16), randn(3, 37, 16, requires_grad=False, seed=1)
    kwargs = {"causal": dict(is_causal=True), None: {}, "float": dict(attn_mask=randn(37, 37, requires_grad=False)),
              "padding": dict(key_padding_mask=ta.tensor(np.arange(37)[None, :] >= np.array([37, 20, 5])[:, None]))}
    fused = mha(x, **kwargs[mask])
    fused_grads = _grads(fused, (x, *mha.parameters()), weight)
    seen = {}
    handles = [getattr(mha, f"hook_{n}").register_forward_hook(lambda m, a, out, n=n: seen.update({n: out}))
               for n in ("q", "k", "v")]
    opened = mha(x, need_weights=True, **kwargs[mask])
    for handle in handles:
        handle.remove()
    np.testing.assert_allclose(host(opened), host(fused), rtol=1e-12, atol=1e-12)
    for a, b in zip(_grads(opened, (x, *mha.parameters()), weight), fused_grads):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    assert not mha.hook_pattern.hooked                              # hooked for that call only
    weights = host(mha.last_weights)
    assert weights.shape == (3, 4, 37, 37) and mha.last_weights.grad_fn is None
    expected = F.attention_weights(seen["q"], seen["k"], enable_gqa=True,
                                   attn_mask=ta.tensor(np.tri(37, dtype=bool)) if mask == "causal" else
                                   kwargs["float"]["attn_mask"] if mask == "float" else
                                   ta.tensor(~host(kwargs["padding"]["key_padding_mask"])[:, None, None]) if mask else None)
    np.testing.assert_allclose(weights, host(expected), rtol=1e-12, atol=1e-15)


def test_the_weights_kept_are_what_the_heads_read_and_no_second_pass_runs(monkeypatch):
    calls = []
    second_pass = F.attention_weights
    monkeypatch.setattr(F, "attention_weights", lambda *a, **kw: calls.append(1) or second_pass(*a, **kw))
    mha = nn.Attention(16, 4, impl="flash").eval()
    x = ta.randn(2, 9, 16)
    halved = mha.hook_pattern.register_forward_hook(lambda module, args, pattern: pattern * 0.5)
    with ta.no_grad():
        out = mha(x, is_causal=True, need_weights=True)
    halved.remove()
    weights = host(mha.last_weights)
    assert not calls and weights.shape == (2, 4, 9, 9) and np.allclose(weights.sum(-1), 0.5, atol=1e-6)
    assert np.all(np.triu(weights, k=1) == 0)                                      # causal: nothing above the diagonal
    with ta.no_grad():
        plain = mha(x, is_causal=True)                         # not asked for: the weights kept stay those of before
    assert np.array_equal(host(mha.last_weights), weights)
    assert not np.allclose(host(plain), host(out), atol=1e-3)                      # what the heads read was halved


def test_cross_attention_shapes_and_errors():
    cross = nn.Attention(8, 2, cross=True, kv_dim=6)
    out = cross(ta.randn(2, 3, 8), context=ta.randn(2, 5, 6), need_weights=True)
    assert out.shape == (2, 3, 8) and cross.last_weights.shape == (2, 2, 3, 5)
    with pytest.raises(ValueError, match="cross-attention needs a context"):
        cross(ta.randn(2, 3, 8))
    with pytest.raises(ValueError, match="divisible"):
        nn.Attention(10, 4)
    with pytest.raises(ValueError, match="dropout"):
        nn.Attention(8, 2, impl="flash", dropout=0.1)


@pytest.mark.parametrize("impl", ["sdpa", "flash", "reference"])
def test_multi_head_attention_takes_any_leading_batch_dims(impl):
    mha = nn.Attention(16, 4, num_kv_heads=2, impl=impl, rotary=nn.RotaryEmbedding(4, max_len=32)).double()
    x, weight = randn(2, 3, 5, 16), randn(2, 3, 5, 16, requires_grad=False, seed=1)
    pad = np.zeros((2, 3, 5), dtype=bool)
    pad[0, 1, 3:] = True
    bias = randn(3, 1, 5, 5, requires_grad=False, seed=2)         # a float mask with a batch dim of its own (x's 2nd)
    ids = np.random.default_rng(0).integers(0, 32, (2, 3, 5))
    out = mha(x, key_padding_mask=pad, attn_mask=bias, position_ids=ids, need_weights=True)
    assert out.shape == (2, 3, 5, 16) and mha.last_weights.shape == (2, 3, 4, 5, 5)
    weights, (grad,) = host(mha.last_weights), _grads(out, (x,), weight)
    x.grad = None
    for i in range(2):
        for j in range(3):
            part = mha(x[i, j][None], key_padding_mask=pad[i, j][None], attn_mask=bias[j][None],
                       position_ids=ids[i, j][None], need_weights=True)
            np.testing.assert_allclose(host(part)[0], host(out)[i, j], rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(host(mha.last_weights)[0], weights[i, j], rtol=1e-12, atol=1e-12)
            (part[0] * weight[i, j]).sum().backward()
    np.testing.assert_allclose(grad, host(x.grad), rtol=1e-12, atol=1e-12)
    one = x[1, 2].detach()                                         # no batch dim at all: one sequence (L, d_model)
    np.testing.assert_array_equal(host(mha(one, is_causal=True)), host(mha(one[None], is_causal=True))[0])
    for bad, message in [(dict(key_padding_mask=pad[0]), r"key_padding_mask with the same leading dims \(2, 3\)"),
                         (dict(attn_mask=ta.ones(4, 1, 5, 5, dtype="bool")), r"\(4, 1, 5, 5\) has batch dims that do "
                                                                              r"not broadcast to x's leading dims"),
                         (dict(position_ids=ids[0]), r"position_ids with the same leading dims")]:
        with pytest.raises(ValueError, match=message):
            mha(x, **bad)
    with pytest.raises(ValueError, match=r"x of shape \(\.\.\., length, d_model=16\)"):
        mha(randn(16))
    cross = nn.Attention(8, 2, cross=True, kv_dim=6)
    assert cross(ta.randn(4, 2, 3, 8), context=ta.randn(4, 2, 7, 6)).shape == (4, 2, 3, 8)
    with pytest.raises(ValueError, match="context with the same leading dims"):
        cross(ta.randn(4, 2, 3, 8), context=ta.randn(2, 7, 6))


@pytest.mark.parametrize("impl", ["sdpa", "flash"])
@pytest.mark.parametrize("rotary", [False, True])
def test_kv_cache_decoding_equals_full_sequence(impl, rotary):
    rope = nn.RotaryEmbedding(4, max_len=32) if rotary else None
    mha = nn.Attention(16, 4, num_kv_heads=2, impl=impl, rotary=rope)
    x = ta.randn(2, 10, 16)
    with ta.no_grad():
        full = host(mha(x, is_causal=True))
        cache = nn.KVCache()
        prefix = host(mha(x[:, :4], is_causal=True, cache=cache))     # prefill 4 tokens at once
        steps = [host(mha(x[:, t:t + 1], is_causal=True, cache=cache)) for t in range(4, 8)]
        chunk = host(mha(x[:, 8:], is_causal=True, cache=cache))      # 2 queries against 10 keys: end-aligned
    decoded = np.concatenate([prefix] + steps + [chunk], axis=1)
    assert len(cache) == 10
    np.testing.assert_allclose(decoded, full, atol=1e-6)


# -- positions ----------------------------------------------------------------------------------------
def test_sinusoidal_table_and_2d_table():
    table = host(nn.sinusoidal_table(50, 8))
    pos, i = 7, 1
    np.testing.assert_allclose(table[pos, 2 * i], np.sin(pos / 10000 ** (2 * i / 8)), rtol=1e-6)
    np.testing.assert_allclose(table[pos, 2 * i + 1], np.cos(pos / 10000 ** (2 * i / 8)), rtol=1e-6)
    grid = host(nn.sincos_2d_table(3, 4, 8))
    half = host(nn.sinusoidal_table(4, 4))
    assert grid.shape == (12, 8)
    np.testing.assert_allclose(grid[6, :4], half[1], rtol=1e-6)          # patch (row 1, col 2): row half...
    np.testing.assert_allclose(grid[6, 4:], half[2], rtol=1e-6)          # ...and column half
    enc = nn.SinusoidalPositionalEncoding(8, max_len=10)
    assert enc(ta.zeros(1, 4, 8), offset=2).shape == (1, 4, 8)
    with pytest.raises(ValueError, match="max_len"):
        enc(ta.zeros(1, 11, 8))
    learned = nn.LearnedPositionalEmbedding(10, 8).double()
    assert ta.gradcheck(lambda x, w: learned(x, offset=3), (randn(2, 4, 8), learned.weight))


def test_rope_makes_scores_depend_on_relative_position_only():
    rope = nn.RotaryEmbedding(8, max_len=64).double()
    q, k = randn(1, 1, 1, 8, requires_grad=False), randn(1, 1, 1, 8, requires_grad=False, seed=1)
    score = lambda m, n: (host(rope(q, offset=m)) * host(rope(k, offset=n))).sum()
    assert score(10, 3) == pytest.approx(score(27, 20), rel=1e-10)
    assert score(10, 3) != pytest.approx(score(10, 4), rel=1e-3)
    np.testing.assert_allclose(np.linalg.norm(host(rope(q, offset=5))), np.linalg.norm(host(q)))   # a rotation
    assert ta.gradcheck(lambda x: rope(x, offset=2), (randn(1, 2, 3, 8),))


def _rope_by_complex_numbers(x, positions, base):
    """The RoPE paper's form (its eq. 12 to 15): channels (2i, 2i + 1) as the complex number x_2i + j x_2i+1, times
    exp(j position theta_i), theta_i = base^(-2i/D): the interleaved pairing, computed another way."""
    d = x.shape[-1]
    theta = base ** (-np.arange(0, d, 2) / d)
    turned = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * positions[:, None] * theta)
    return np.stack([turned.real, turned.imag], axis=-1).reshape(x.shape)


@pytest.mark.parametrize("base", [10000.0, 500000.0])
def test_rope_pairings_are_one_rotation_under_a_channel_permutation(base):
    x = randn(2, 3, 7, 8)
    interleaved = nn.RotaryEmbedding(8, max_len=32, base=base, interleaved=True).double()
    halves = nn.RotaryEmbedding(8, max_len=32, base=base).double()
    by_complex_numbers = _rope_by_complex_numbers(host(x), np.arange(4, 11), base)
    np.testing.assert_allclose(host(interleaved(x, offset=4)), by_complex_numbers, rtol=1e-12, atol=1e-12)
    order = np.r_[0:8:2, 1:8:2]                   # channel order (0, 2, 4, 6, 1, 3, 5, 7): pairs (2i, 2i+1) -> (i, i+4)
    np.testing.assert_allclose(host(halves(x[..., order], offset=4)), host(interleaved(x, offset=4))[..., order],
                               rtol=1e-12, atol=1e-12)
    assert not np.allclose(host(halves(x, offset=4)), host(interleaved(x, offset=4)), atol=1e-3)  # not the same
    assert "interleaved=True" in repr(interleaved) and f"base={base}" in repr(interleaved)
    assert ta.gradcheck(lambda t: interleaved(t, offset=2), (randn(1, 2, 3, 8),))


def test_rope_position_ids_pick_each_sequences_positions():
    rope = nn.RotaryEmbedding(8, max_len=32, interleaved=True).double()
    x = randn(2, 3, 5, 8)                                                    # (B, heads, T, head_dim)
    np.testing.assert_array_equal(host(rope(x, position_ids=np.arange(6, 11))), host(rope(x, offset=6)))
    ids = np.array([[0, 1, 2, 3, 4], [9, 2, 30, 2, 0]])                      # each sequence at positions of its own
    both = host(rope(x, position_ids=ta.tensor(ids)))
    for b in range(2):
        np.testing.assert_allclose(both[b], _rope_by_complex_numbers(host(x)[b], ids[b], 10000.0), rtol=1e-12,
                                   atol=1e-12)
    np.testing.assert_array_equal(host(rope(x, position_ids=ids[1:])), host(rope(x, position_ids=ids[1])))  # (1, T)
    assert ta.gradcheck(lambda t: rope(t, position_ids=ids), (randn(2, 1, 5, 8),))
    for bad, error, message in [
            (ids.astype(float), TypeError, "must be integers, got dtype float64"),
            (np.array([0, 1, 2, 3, 32]), ValueError, r"lie in 0 \.\. max_len - 1 = 31, got 0 \.\. 32"),
            (np.array([-1, 0, 1, 2, 3]), ValueError, "lie in 0"),                # -1 would read the last row
            (np.arange(4), ValueError, r"shape \(4,\) do not fit x of shape \(2, 3, 5, 8\)"),
            (np.zeros((3, 5), int), ValueError, r"shape \(3, 5\) do not fit")]:
        with pytest.raises(error, match=message):
            rope(x, position_ids=bad)
    with pytest.raises(ValueError, match="either offset"):
        rope(x, offset=1, position_ids=ids)
    with pytest.raises(ValueError, match="head_dim 8 got x of shape"):
        rope(randn(1, 5, 6))


@pytest.mark.parametrize("table", ["learned", "sinusoidal"])
def test_absolute_positions_take_position_ids(table):
    module = nn.LearnedPositionalEmbedding(12, 4).double() if table == "learned" else \
        nn.SinusoidalPositionalEncoding(4, max_len=12).double()
    x = randn(2, 3, 4, requires_grad=False)
    ids = np.array([[5, 6, 7], [0, 0, 11]])
    out = host(module(x, position_ids=ids))
    for b in range(2):
        for t in range(3):
            np.testing.assert_array_equal(out[b, t], host(module(x[b:b + 1, t:t + 1], offset=int(ids[b, t])))[0, 0])
    np.testing.assert_array_equal(host(module(x, position_ids=ids[0])), host(module(x, offset=5)))
    with pytest.raises(ValueError, match="exceed max_len 12"):
        module(x, offset=10)
    if table == "learned":
        assert ta.gradcheck(lambda w: module(x, position_ids=ids), (module.weight,))       # position 0 read twice


def test_interpolate_pos_embed():
    pos = ta.tensor(np.random.default_rng(0).standard_normal((1, 1 + 16, 6)))
    same = nn.interpolate_pos_embed(pos, 4, 4, num_prefix_tokens=1)
    np.testing.assert_allclose(host(same), host(pos), rtol=1e-12)
    bigger = host(nn.interpolate_pos_embed(pos, 4, 8, num_prefix_tokens=1))
    assert bigger.shape == (1, 65, 6)
    np.testing.assert_array_equal(bigger[:, 0], host(pos)[:, 0])            # the class token is kept
    ramp = ta.tensor(np.tile(np.arange(4.0), 4).reshape(1, 16, 1))         # linear in x: stays linear
    resized = host(nn.interpolate_pos_embed(ramp, 4, 8)).reshape(8, 8)
    np.testing.assert_allclose(resized[0, 1:7], np.arange(6) / 2 + 0.25, rtol=1e-12)


# -- Swin windows -------------------------------------------------------------------------------------
def test_window_partition_round_trip_and_roll():
    x = randn(2, 4, 6, 3, requires_grad=False)
    windows = nn.window_partition(x, 2)
    assert windows.shape == (12, 4, 3)
    np.testing.assert_array_equal(host(windows[1]), host(x)[0, 0:2, 2:4].reshape(4, 3))
    np.testing.assert_array_equal(host(nn.window_reverse(windows, 2, 4, 6)), host(x))
    assert ta.gradcheck(lambda t: ta.roll(t, (1, -2), (1, 2)), (randn(1, 3, 4, 2),))


def test_one_window_over_the_whole_grid_is_full_attention_with_bias():
    attn = nn.WindowAttention(8, 4, 2).double()
    x = randn(1, 4, 4, 8, requires_grad=False)
    windowed = host(nn.window_reverse(attn(nn.window_partition(x, 4)), 4, 4, 4))
    tokens = x.reshape(1, 16, 8)
    q, k, v = attn.qkv(tokens).reshape(1, 16, 3, 2, 4).permute(2, 0, 3, 1, 4).chunk(3, dim=0)
    full = F.scaled_dot_product_attention(q.squeeze(0), k.squeeze(0), v.squeeze(0), attn_mask=attn.relative_bias())
    full = host(attn.proj(full.transpose(1, 2).reshape(1, 16, 8))).reshape(1, 4, 4, 8)
    np.testing.assert_allclose(windowed, full, rtol=1e-10)
    small = nn.WindowAttention(8, 2, 2).double()
    mask = nn.shifted_window_mask(4, 4, 2, 1)
    assert ta.gradcheck(lambda w, *p: small(w, mask=mask), (randn(4, 4, 8), *small.parameters()),
                        full_jacobian=False)
    with pytest.raises(ValueError, match=r"\(B \* nW, 4, 8\)"):
        small(randn(4, 16, 8))


def test_shifted_windows_never_attend_across_region_boundaries():
    h = w = 8
    window, shift = 4, 2
    attn = nn.WindowAttention(8, window, 2)
    rolled = ta.roll(ta.randn(1, h, w, 8), (-shift, -shift), (1, 2))
    attn(nn.window_partition(rolled, window), mask=nn.shifted_window_mask(h, w, window, shift), need_weights=True)
    weights = host(attn.last_weights)                                       # (nW, H, N, N)
    # Where each token of the rolled map came from: it is in region r if its source row/col wrapped around.
    ys, xs = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    source_y, source_x = (ys + shift) % h, (xs + shift) % w
    wrapped = (source_y < shift) * 2 + (source_x < shift)                   # 4 groups of true neighbours
    groups = host(nn.window_partition(ta.tensor(wrapped[None, :, :, None].astype(float)), window))[..., 0]
    across = groups[:, :, None] != groups[:, None, :]
    assert across.any()                                                     # the shift does create boundaries
    assert (weights[np.broadcast_to(across[:, None], weights.shape)] == 0).all()
    assert (weights[np.broadcast_to(~across[:, None], weights.shape)] > 0).all()


def test_self_attention_in_a_cnn():
    block = nn.SelfAttention2d(6, num_heads=2).double()
    x = randn(2, 6, 3, 4)
    np.testing.assert_array_equal(host(block(x)), host(x))                  # gamma starts at 0: the identity
    block.gamma.array[...] = 0.5
    assert ta.gradcheck(lambda x, *p: block(x), (x, *block.parameters()), full_jacobian=False)
