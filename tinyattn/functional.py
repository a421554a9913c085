"""Fused Functions with hand-derived backward: softmax family, losses, linear, embedding, norms, activations,
dropout, and naive scaled dot-product attention. Import it as ``import tinyattn.functional as F``.

Each Function's backward is the derivative written out once on paper, so the graph holds one node per call
instead of a chain of small ops. Every one is gradchecked in float64 (tests/test_functional.py).
"""
import math

from . import ops
from .backend import generator, scatter_add, xp_of
from .tensor import Function, Tensor

relu = ops.relu
sigmoid = ops.sigmoid
tanh = ops.tanh


def _safe_max(x, axis):
    """Row max for shifting exponents; 0 where the whole row is -inf, so exp gives 0 rather than NaN."""
    xp = xp_of(x)
    m = x.max(axis=axis, keepdims=True)
    return xp.where(xp.isfinite(m), m, xp.zeros((), dtype=x.dtype))


def softmax_array(x, axis=-1):
    """Softmax on a raw array; a row that is -inf everywhere gives zeros (nothing to attend to), not NaN."""
    xp = xp_of(x)
    e = xp.exp(x - _safe_max(x, axis))
    total = e.sum(axis=axis, keepdims=True)
    return e / xp.where(total == 0, xp.ones((), dtype=x.dtype), total)


def _softmax_backward(y, grad, axis):
    """d softmax: y * (g - sum(g * y))."""
    return y * (grad - (grad * y).sum(axis=axis, keepdims=True))


class Softmax(Function):
    @staticmethod
    def forward(ctx, x, dim):
        y = softmax_array(x, dim)
        ctx.save_for_backward(y)
        ctx.dim = dim
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return _softmax_backward(y, grad, ctx.dim), None


def log_softmax_array(x, axis=-1):
    xp = xp_of(x)
    shifted = x - _safe_max(x, axis)
    return shifted - xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))


class LogSoftmax(Function):
    @staticmethod
    def forward(ctx, x, dim):
        y = log_softmax_array(x, dim)
        ctx.save_for_backward(y)
        ctx.dim = dim
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad - xp_of(y).exp(y) * grad.sum(axis=ctx.dim, keepdims=True), None


def softmax(input, dim=-1):
    return Softmax.apply(input, dim)


def log_softmax(input, dim=-1):
    return LogSoftmax.apply(input, dim)


class CrossEntropy(Function):
    """Cross-entropy of (N, C) logits against N class indices, with ignore_index and label smoothing."""

    @staticmethod
    def forward(ctx, logits, target, ignore_index, reduction, label_smoothing):
        xp = xp_of(logits)
        n, classes = logits.shape
        log_probs = log_softmax_array(logits, -1)
        valid = target != ignore_index
        safe_target = xp.where(valid, target, 0)
        nll = -log_probs[xp.arange(n), safe_target]
        if label_smoothing:
            nll = (1 - label_smoothing) * nll - label_smoothing * log_probs.mean(axis=-1)
        nll = xp.where(valid, nll, xp.zeros((), dtype=logits.dtype))
        # Mean over the targets that count; a batch where none count gives 0 rather than 0/0.
        count = xp.maximum(valid.sum(dtype=logits.dtype), 1)
        ctx.save_for_backward(log_probs, safe_target, valid, count)
        ctx.reduction, ctx.smoothing = reduction, label_smoothing
        if reduction == "none":
            return nll
        total = nll.sum()
        return total / count if reduction == "mean" else total

    @staticmethod
    def backward(ctx, grad):
        log_probs, target, valid, count = ctx.saved_tensors
        xp = xp_of(log_probs)
        n, classes = log_probs.shape
        d_logits = xp.exp(log_probs)
        d_logits[xp.arange(n), target] -= 1 - ctx.smoothing
        if ctx.smoothing:
            d_logits -= ctx.smoothing / classes
        d_logits *= valid[:, None]
        if ctx.reduction == "none":
            d_logits *= grad[:, None]
        else:
            d_logits *= grad / count if ctx.reduction == "mean" else grad
        return d_logits, None, None, None, None


def cross_entropy(input, target, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """PyTorch's F.cross_entropy for class-index targets: input (N, C) or (N, C, d1, ...), target (N, d1, ...)."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    target_data = target.data if isinstance(target, Tensor) else target
    if target_data.dtype.kind not in "iu":
        raise TypeError(f"cross_entropy needs integer class targets, got dtype {target_data.dtype}")
    extra_shape = ()
    if input.ndim == 1:
        input, target_data = ops.unsqueeze(input, 0), target_data.reshape(1)
    elif input.ndim > 2:
        extra_shape = (input.shape[0],) + input.shape[2:]
        input = ops.reshape(ops.permute(input, (0,) + tuple(range(2, input.ndim)) + (1,)), (-1, input.shape[1]))
        target_data = target_data.reshape(-1)
    if target_data.shape != input.shape[:1]:
        raise ValueError(f"cross_entropy: target shape {tuple(target.shape)} does not match input shape "
                         f"{tuple(input.shape)}")
    loss = CrossEntropy.apply(input, target_data, ignore_index, reduction, float(label_smoothing))
    return ops.reshape(loss, extra_shape) if reduction == "none" and extra_shape else loss


def mse_loss(input, target, reduction="mean"):
    squared = (input - target) ** 2
    return {"mean": ops.mean, "sum": ops.sum, "none": lambda x: x}[reduction](squared)


class Linear(Function):
    """y = x W^T + b with W shaped (out_features, in_features), as nn.Linear."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        y = x @ weight.T
        return y if bias is None else y + bias

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grad_x = grad @ weight if ctx.needs_input_grad[0] else None
        grad_w = None
        if ctx.needs_input_grad[1]:
            # Every leading dimension is a batch of rows: one large matmul over all of them.
            grad_w = grad.reshape(-1, grad.shape[-1]).T @ x.reshape(-1, x.shape[-1])
        grad_b = grad.reshape(-1, grad.shape[-1]).sum(axis=0) if ctx.needs_input_grad[2] else None
        return grad_x, grad_w, grad_b


def linear(input, weight, bias=None):
    if input.shape[-1] != weight.shape[-1]:
        raise ValueError(f"linear: input's last dim {input.shape[-1]} does not match weight shape "
                         f"{weight.shape} (out_features, in_features)")
    return Linear.apply(input, weight, bias)


class Embedding(Function):
    @staticmethod
    def forward(ctx, ids, weight, padding_idx):
        ctx.save_for_backward(ids)
        ctx.weight_shape, ctx.padding_idx = weight.shape, padding_idx
        return weight[ids]

    @staticmethod
    def backward(ctx, grad):
        (ids,) = ctx.saved_tensors
        xp = xp_of(grad)
        grad_weight = xp.zeros(ctx.weight_shape, dtype=grad.dtype)
        scatter_add(grad_weight, ids.reshape(-1), grad.reshape(-1, ctx.weight_shape[1]))  # repeated ids add up
        if ctx.padding_idx is not None:
            grad_weight[ctx.padding_idx] = 0
        return None, grad_weight, None


def embedding(input, weight, padding_idx=None):
    ids = input.data if isinstance(input, Tensor) else input
    if ids.dtype.kind not in "iu":
        raise TypeError(f"embedding needs integer ids, got dtype {ids.dtype}")
    return Embedding.apply(ids, weight, padding_idx)


def _normalized_axes(x, normalized_shape):
    normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if x.shape[x.ndim - len(normalized_shape):] != normalized_shape:
        raise ValueError(f"normalized_shape {normalized_shape} does not match the input's trailing dims {x.shape}")
    return tuple(range(x.ndim - len(normalized_shape), x.ndim))


class LayerNorm(Function):
    @staticmethod
    def forward(ctx, x, weight, bias, axes, eps):
        xp = xp_of(x)
        centred = x - x.mean(axis=axes, keepdims=True)
        rstd = 1 / xp.sqrt((centred * centred).mean(axis=axes, keepdims=True) + eps)
        normed = centred * rstd  # a constant row gives 0 here, not NaN: eps keeps rstd finite
        ctx.save_for_backward(normed, rstd, weight)
        ctx.axes = axes
        out = normed if weight is None else normed * weight
        return out if bias is None else out + bias

    @staticmethod
    def backward(ctx, grad):
        normed, rstd, weight = ctx.saved_tensors
        axes = ctx.axes
        g = grad if weight is None else grad * weight
        grad_x = rstd * (g - g.mean(axis=axes, keepdims=True)
                         - normed * (g * normed).mean(axis=axes, keepdims=True))
        grad_w = grad * normed if ctx.needs_input_grad[1] else None  # the engine sums over the batch dims
        return grad_x, grad_w, (grad if ctx.needs_input_grad[2] else None), None, None


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    return LayerNorm.apply(input, weight, bias, _normalized_axes(input, normalized_shape), eps)


class RMSNorm(Function):
    @staticmethod
    def forward(ctx, x, weight, axes, eps):
        xp = xp_of(x)
        rstd = 1 / xp.sqrt((x * x).mean(axis=axes, keepdims=True) + eps)
        normed = x * rstd
        ctx.save_for_backward(normed, rstd, weight)
        ctx.axes = axes
        return normed if weight is None else normed * weight

    @staticmethod
    def backward(ctx, grad):
        normed, rstd, weight = ctx.saved_tensors
        g = grad if weight is None else grad * weight
        grad_x = rstd * (g - normed * (g * normed).mean(axis=ctx.axes, keepdims=True))
        return grad_x, (grad * normed if ctx.needs_input_grad[1] else None), None, None


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """x / sqrt(mean(x^2) + eps) * weight; eps=None uses the dtype's machine epsilon, as PyTorch."""
    if eps is None:
        eps = float(xp_of(input.data).finfo(input.dtype).eps)
    return RMSNorm.apply(input, weight, _normalized_axes(input, normalized_shape), eps)


def _erfc(x):
    """Complementary error function to about 1e-7 relative error (NumPy has none built in).

    A Chebyshev-fitted form, erfc(z) ~ t exp(-z^2 + poly(t)) with t = 1 / (1 + z/2) for z >= 0, and
    erfc(-z) = 2 - erfc(z). Good to float32 precision everywhere; used by the exact GELU.
    """
    xp = xp_of(x)
    z = xp.abs(x)
    t = 1 / (1 + 0.5 * z)
    poly = 0.17087277
    for c in (-0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806, 0.09678418, 0.37409196,
              1.00002368, -1.26551223):
        poly = c + t * poly
    tail = t * xp.exp(-z * z + poly)
    return xp.where(x >= 0, tail, 2 - tail)


_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


class Gelu(Function):
    @staticmethod
    def forward(ctx, x, approximate):
        xp = xp_of(x)
        ctx.save_for_backward(x)
        ctx.approximate = approximate
        if approximate == "tanh":
            return 0.5 * x * (1 + xp.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)))
        return 0.5 * x * _erfc(-x * (1 / math.sqrt(2)))

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        xp = xp_of(x)
        if ctx.approximate == "tanh":
            inner = _SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)
            th = xp.tanh(inner)
            d_inner = _SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x * x)
            return grad * (0.5 * (1 + th) + 0.5 * x * (1 - th * th) * d_inner), None
        cdf = 0.5 * _erfc(-x * (1 / math.sqrt(2)))
        pdf = xp.exp(-0.5 * x * x) * (1 / math.sqrt(2 * math.pi))
        return grad * (cdf + x * pdf), None


def gelu(input, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return Gelu.apply(input, approximate)


class Silu(Function):
    @staticmethod
    def forward(ctx, x):
        s = ops.stable_sigmoid(x)
        ctx.save_for_backward(x, s)
        return x * s

    @staticmethod
    def backward(ctx, grad):
        x, s = ctx.saved_tensors
        return grad * s * (1 + x * (1 - s))


def silu(input):
    return Silu.apply(input)


class Dropout(Function):
    @staticmethod
    def forward(ctx, x, keep, scale):
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return x * keep * scale

    @staticmethod
    def backward(ctx, grad):
        (keep,) = ctx.saved_tensors
        return grad * keep * ctx.scale, None, None


def _keep_mask(shape, p, like):
    """True where dropout keeps an element, drawn from the seeded generator of like's device."""
    from .backend import device_of
    return generator(device_of(like)).random(shape, dtype=like.dtype) >= p


def dropout(input, p=0.5, training=True):
    """Zero each element with probability p and scale the rest by 1/(1-p); the identity when not training."""
    if not 0 <= p <= 1:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    if not training or p == 0:
        return input
    if p == 1:
        return input * 0.0
    return Dropout.apply(input, _keep_mask(input.shape, p, input.data), 1.0 / (1.0 - p))


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


class Conv2d(Function):
    """2-D convolution as im2col + one matmul: every kernel offset contributes a strided slice of the input."""

    @staticmethod
    def forward(ctx, x, weight, bias, stride, padding):
        xp = xp_of(x)
        (sh, sw), (ph, pw) = stride, padding
        batch, channels, height, width = x.shape
        out_ch, _, kh, kw = weight.shape
        padded = xp.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
        out_h, out_w = (height + 2 * ph - kh) // sh + 1, (width + 2 * pw - kw) // sw + 1
        # cols[b, c, i, j, y, x] = padded[b, c, y * sh + i, x * sw + j]
        cols = xp.empty((batch, channels, kh, kw, out_h, out_w), dtype=x.dtype)
        for i in range(kh):
            for j in range(kw):
                cols[:, :, i, j] = padded[:, :, i:i + sh * out_h:sh, j:j + sw * out_w:sw]
        cols = cols.reshape(batch, channels * kh * kw, out_h * out_w)
        out = weight.reshape(out_ch, -1) @ cols
        if bias is not None:
            out = out + bias[:, None]
        ctx.save_for_backward(cols, weight)
        ctx.geometry = (x.shape, padded.shape, stride, padding, out_h, out_w)
        return out.reshape(batch, out_ch, out_h, out_w)

    @staticmethod
    def backward(ctx, grad):
        cols, weight = ctx.saved_tensors
        xp = xp_of(grad)
        x_shape, padded_shape, (sh, sw), (ph, pw), out_h, out_w = ctx.geometry
        out_ch, channels, kh, kw = weight.shape
        g = grad.reshape(grad.shape[0], out_ch, out_h * out_w)
        grad_w = (g @ xp.swapaxes(cols, 1, 2)).sum(axis=0).reshape(weight.shape)
        grad_b = g.sum(axis=(0, 2)) if ctx.needs_input_grad[2] else None
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_cols = (weight.reshape(out_ch, -1).T @ g).reshape(x_shape[0], channels, kh, kw, out_h, out_w)
            grad_padded = xp.zeros(padded_shape, dtype=grad.dtype)
            for i in range(kh):
                for j in range(kw):  # overlapping windows add up
                    grad_padded[:, :, i:i + sh * out_h:sh, j:j + sw * out_w:sw] += grad_cols[:, :, i, j]
            grad_x = grad_padded[:, :, ph:ph + x_shape[2], pw:pw + x_shape[3]]
        return grad_x, grad_w, grad_b, None, None


def conv2d(input, weight, bias=None, stride=1, padding=0):
    """input (B, C, H, W), weight (O, C, kh, kw) -> (B, O, H', W'), as torch.nn.functional.conv2d."""
    if input.ndim != 4 or weight.ndim != 4 or input.shape[1] != weight.shape[1]:
        raise ValueError(f"conv2d needs input (B, C, H, W) and weight (O, C, kh, kw) with equal C, got "
                         f"{input.shape} and {weight.shape}")
    return Conv2d.apply(input, weight, bias, _pair(stride), _pair(padding))


# -- naive scaled dot-product attention ---------------------------------------------------------------
def _grouped(q, k, v, mask, enable_gqa):
    """Views that let Hq query heads share Hkv key/value heads without copying K and V.

    q (..., Hq, L, E) becomes (..., Hkv, G, L, E); k and v gain a size-1 group axis that broadcasts; the mask is
    viewed the same way. Returns the views and G (1 when there is no grouping).
    """
    hq, hkv = q.shape[-3] if q.ndim >= 3 else 1, k.shape[-3] if k.ndim >= 3 else 1
    if hq == hkv:
        return q, k, v, mask, 1
    if not enable_gqa:
        raise ValueError(f"query has {hq} heads but key/value have {hkv}: pass enable_gqa=True for grouped-query "
                         f"attention (q {q.shape}, k {k.shape}, v {v.shape})")
    if hq % hkv:
        raise ValueError(f"grouped-query attention needs query heads ({hq}) divisible by key/value heads ({hkv})")
    groups = hq // hkv
    xp = xp_of(q)
    if mask is not None:
        mask = mask.reshape((1,) * (q.ndim - mask.ndim) + mask.shape)
        head = mask.shape[-3]
        split = (hkv, groups) if head == hq else (1, 1)
        mask = mask.reshape(mask.shape[:-3] + split + mask.shape[-2:])
    q = q.reshape(q.shape[:-3] + (hkv, groups) + q.shape[-2:])
    k, v = xp.expand_dims(k, -3), xp.expand_dims(v, -3)
    return q, k, v, mask, groups


def _masked_scores(q, k, mask, scale):
    """scale * q k^T with the mask applied: a boolean mask keeps True (False -> -inf), a float mask is added."""
    xp = xp_of(q)
    scores = (q * scale) @ xp.swapaxes(k, -1, -2)
    if mask is None:
        return scores
    if mask.dtype == bool:
        return xp.where(mask, scores, xp.asarray(-xp.inf, dtype=scores.dtype))
    return scores + mask


def causal_mask(query_len, key_len, xp, offset=0):
    """Boolean (L, S) mask, True where query i may see key j: j <= i + offset (offset 0: PyTorch's top-left)."""
    return xp.tril(xp.ones((query_len, key_len), dtype=bool), offset)


class ScaledDotProductAttention(Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, scale, dropout_p, enable_gqa):
        xp = xp_of(q)
        out_shape = q.shape[:-1] + v.shape[-1:]
        q_g, k_g, v_g, mask_g, groups = _grouped(q, k, v, mask, enable_gqa)
        probs = softmax_array(_masked_scores(q_g, k_g, mask_g, scale), -1)
        keep = None
        dropped = probs
        if dropout_p > 0:
            keep = _keep_mask(probs.shape, dropout_p, probs)
            dropped = probs * keep * (1.0 / (1.0 - dropout_p))
        ctx.save_for_backward(q_g, k_g, v_g, probs, keep)
        ctx.scale, ctx.dropout_p, ctx.groups = scale, dropout_p, groups
        ctx.shapes = (q.shape, k.shape, v.shape, None if mask is None else mask.shape)
        return (dropped @ v_g).reshape(out_shape)

    @staticmethod
    def backward(ctx, grad):
        q, k, v, probs, keep = ctx.saved_tensors
        xp = xp_of(grad)
        q_shape, k_shape, v_shape, mask_shape = ctx.shapes
        grad = grad.reshape(q.shape[:-1] + v.shape[-1:])
        dropped = probs if keep is None else probs * keep * (1.0 / (1.0 - ctx.dropout_p))
        grad_v = xp.swapaxes(dropped, -1, -2) @ grad
        grad_probs = grad @ xp.swapaxes(v, -1, -2)
        if keep is not None:
            grad_probs = grad_probs * keep * (1.0 / (1.0 - ctx.dropout_p))
        grad_scores = _softmax_backward(probs, grad_probs, -1)
        grad_q = (grad_scores @ k) * ctx.scale
        grad_k = (xp.swapaxes(grad_scores, -1, -2) @ q) * ctx.scale
        if ctx.groups > 1:  # each key/value head served a group of query heads: their gradients add up
            grad_k, grad_v = grad_k.sum(axis=-3), grad_v.sum(axis=-3)
        grad_mask = None
        if ctx.needs_input_grad[3]:  # a float mask (a learned bias) is added to the scores
            grad_mask = grad_scores.reshape(q_shape[:-1] + (grad_scores.shape[-1],))
        return grad_q.reshape(q_shape), grad_k.reshape(k_shape), grad_v.reshape(v_shape), grad_mask, None, None, None


def _attention_mask(attn_mask, is_causal, query_len, key_len, like):
    if is_causal:
        if attn_mask is not None:
            raise ValueError("pass either attn_mask or is_causal=True, not both (combine them into one mask)")
        return causal_mask(query_len, key_len, xp_of(like))
    return attn_mask


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """softmax(q k^T * scale + mask) v, exactly as torch.nn.functional.scaled_dot_product_attention defines it.

    query (..., Hq, L, E), key (..., Hkv, S, E), value (..., Hkv, S, Ev). attn_mask broadcasts to (..., Hq, L, S):
    boolean True means "may attend", a float mask is added to the scores (and gets a gradient if it requires one).
    is_causal masks j > i (top-left aligned, as PyTorch). scale defaults to 1/sqrt(E). enable_gqa lets Hq be a
    multiple of Hkv. A query row with every key masked gives output 0 and gradient 0, never NaN.
    """
    mask = _attention_mask(attn_mask, is_causal, query.shape[-2], key.shape[-2], query.data)
    if isinstance(mask, Tensor) and mask.dtype == bool:
        mask = mask.data
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    return ScaledDotProductAttention.apply(query, key, value, mask, scale, float(dropout_p), enable_gqa)


def attention_weights(query, key, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """The (..., Hq, L, S) softmax weights of the naive path, for plots (no graph is recorded)."""
    mask = _attention_mask(attn_mask, is_causal, query.shape[-2], key.shape[-2], query.data)
    mask = mask.data if isinstance(mask, Tensor) else mask
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    q, k, _, mask, _ = _grouped(query.data, key.data, key.data, mask, enable_gqa)
    probs = softmax_array(_masked_scores(q, k, mask, scale), -1)
    return Tensor(probs.reshape(query.shape[:-1] + (key.shape[-2],)))


Tensor.softmax = lambda self, dim=-1: softmax(self, dim)
Tensor.log_softmax = lambda self, dim=-1: log_softmax(self, dim)
