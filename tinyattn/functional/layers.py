"""Fused layer Functions: linear, embedding, layer/RMS norm, GELU, SiLU, dropout, conv2d."""
import math

from .. import ops, threads
from ..backend import device_of, generator, scatter_add, xp_of
from ..tensor import Function, Tensor


class Linear(Function):
    """y = x W^T + b with W shaped (out_features, in_features), as nn.Linear."""

    # Every leading dimension is a batch of rows: one large 2-D matmul over all of them is faster than the
    # stacked matmul NumPy would run for a 3-D input.
    @staticmethod
    def forward(ctx, x, weight, bias):
        rows = x.reshape(-1, x.shape[-1])
        ctx.save_for_backward(rows, weight)
        ctx.x_shape = x.shape
        y = threads.matmul(rows, weight.T, bias)
        return y.reshape(x.shape[:-1] + weight.shape[:1])

    @staticmethod
    def backward(ctx, grad):
        rows, weight = ctx.saved_tensors
        grad = grad.reshape(-1, grad.shape[-1])
        grad_x = threads.matmul(grad, weight).reshape(ctx.x_shape) if ctx.needs_input_grad[0] else None
        grad_w = threads.matmul(grad.T, rows) if ctx.needs_input_grad[1] else None
        grad_b = leading_axes_sum(grad) if ctx.needs_input_grad[2] else None
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


class GRUCell(Function):
    """One GRU step given x_proj = x W_ih^T + b_ih (computed for all steps at once by the caller):
    r = s(x_r + h_r), z = s(x_z + h_z), n = tanh(x_n + r * h_n), h' = (1 - z) n + z h, with h_* = h W_h*^T + b_h*.
    Fused: one graph node per time step instead of about seventeen."""

    @staticmethod
    def forward(ctx, x_proj, h, w_hh, b_hh):
        from ..ops import stable_sigmoid
        xp = xp_of(h)
        size = h.shape[-1]
        gh = h @ w_hh.T
        if b_hh is not None:
            gh += b_hh
        r = stable_sigmoid(x_proj[..., :size] + gh[..., :size])
        z = stable_sigmoid(x_proj[..., size:2 * size] + gh[..., size:2 * size])
        h_n = gh[..., 2 * size:]
        n = xp.tanh(x_proj[..., 2 * size:] + r * h_n)
        ctx.save_for_backward(h, r, z, n, h_n, w_hh)
        return n + z * (h - n)

    @staticmethod
    def backward(ctx, grad):
        h, r, z, n, h_n, w_hh = ctx.saved_tensors
        xp = xp_of(grad)
        d_n = grad * (1 - z) * (1 - n * n)                      # through tanh
        d_r = d_n * h_n * r * (1 - r)                            # through the reset gate's sigmoid
        d_z = grad * (h - n) * z * (1 - z)
        d_x = xp.concatenate([d_r, d_z, d_n], axis=-1)           # gradient of x_proj
        d_gh = xp.concatenate([d_r, d_z, d_n * r], axis=-1)      # gradient of h W_hh^T + b_hh
        d_h = grad * z + d_gh @ w_hh
        d_w = d_gh.reshape(-1, d_gh.shape[-1]).T @ h.reshape(-1, h.shape[-1]) if ctx.needs_input_grad[2] else None
        d_b = d_gh.reshape(-1, d_gh.shape[-1]).sum(axis=0) if ctx.needs_input_grad[3] else None
        return d_x, d_h, d_w, d_b


def gru_cell(x_proj, h, w_hh, b_hh=None):
    return GRUCell.apply(x_proj, h, w_hh, b_hh)


def _n_features(x, normalized_shape):
    """How many values each normalised row holds: the product of the trailing dims named by normalized_shape."""
    normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if x.shape[x.ndim - len(normalized_shape):] != normalized_shape:
        raise ValueError(f"normalized_shape {normalized_shape} does not match the input's trailing dims {x.shape}")
    return math.prod(normalized_shape)


def last_axis_sum(x):
    """x summed over its last axis, keeping that axis (size 1). A matrix-vector product with ones: BLAS does it ~4x
    faster than NumPy's reduction along a short contiguous axis (norms, softmax and attention rows)."""
    return x @ xp_of(x).ones((x.shape[-1], 1), dtype=x.dtype)


def leading_axes_sum(x):
    """x summed over every axis but the last (a bias gradient), as ones @ rows: ~2x faster than sum(axis=0)."""
    rows = x.reshape(-1, x.shape[-1])
    return xp_of(x).ones(rows.shape[0], dtype=x.dtype) @ rows


def _row_mean(rows):
    """Each row's mean, as a column; summing before dividing keeps the mean of a constant row exact."""
    return last_axis_sum(rows) / rows.shape[1]


def _affine(normed, weight, bias):
    """normed * weight + bias over the feature columns, into a new array (normed is kept for backward)."""
    out = normed * weight.reshape(-1) if weight is not None else normed.copy()
    if bias is not None:
        out += bias.reshape(-1)
    return out


def _affine_grads(ctx, grad, normed, weight):
    grad_w = leading_axes_sum(grad * normed).reshape(weight.shape) if ctx.needs_input_grad[1] else None
    grad_b = leading_axes_sum(grad).reshape(ctx.bias_shape) if ctx.needs_input_grad[2] else None
    return grad_w, grad_b


# Both norms work on a 2-D (rows, features) view: every leading dim is a row, the normalised dims are the columns.
# Rows are independent, so threads.map_rows runs each norm on pieces of rows; weight and bias gradients sum over
# all rows and come after.
def _layer_norm_rows(rows, weight, bias, eps):
    normed = rows - _row_mean(rows)
    rstd = 1 / xp_of(rows).sqrt(_row_mean(normed * normed) + eps)
    normed *= rstd  # a constant row gives 0 here, not NaN: eps keeps rstd finite
    return _affine(normed, weight, bias), normed, rstd


def _layer_norm_grad_rows(grad, normed, rstd, weight):
    g = grad if weight is None else grad * weight.reshape(-1)
    grad_x = g - _row_mean(g)                            # rstd * (g - mean(g) - normed * mean(g * normed))
    grad_x -= normed * _row_mean(g * normed)
    grad_x *= rstd
    return grad_x


class LayerNorm(Function):
    @staticmethod
    def forward(ctx, x, weight, bias, n_features, eps):
        out, normed, rstd = threads.map_rows(lambda rows: _layer_norm_rows(rows, weight, bias, eps),
                                             x.reshape(-1, n_features))
        ctx.save_for_backward(normed, rstd, weight)
        ctx.x_shape, ctx.bias_shape = x.shape, None if bias is None else bias.shape
        return out.reshape(x.shape)

    @staticmethod
    def backward(ctx, grad):
        normed, rstd, weight = ctx.saved_tensors
        grad = grad.reshape(normed.shape)
        grad_x = threads.map_rows(lambda *rows: _layer_norm_grad_rows(*rows, weight), grad, normed, rstd)
        return (grad_x.reshape(ctx.x_shape), *_affine_grads(ctx, grad, normed, weight), None, None)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    return LayerNorm.apply(input, weight, bias, _n_features(input, normalized_shape), eps)


def _rms_norm_rows(rows, weight, eps):
    rstd = 1 / xp_of(rows).sqrt(_row_mean(rows * rows) + eps)
    normed = rows * rstd
    return _affine(normed, weight, None), normed, rstd


def _rms_norm_grad_rows(grad, normed, rstd, weight):
    g = grad if weight is None else grad * weight.reshape(-1)
    grad_x = g - normed * _row_mean(g * normed)          # rstd * (g - normed * mean(g * normed))
    grad_x *= rstd
    return grad_x


class RMSNorm(Function):
    @staticmethod
    def forward(ctx, x, weight, n_features, eps):
        out, normed, rstd = threads.map_rows(lambda rows: _rms_norm_rows(rows, weight, eps), x.reshape(-1, n_features))
        ctx.save_for_backward(normed, rstd, weight)
        ctx.x_shape, ctx.bias_shape = x.shape, None
        return out.reshape(x.shape)

    @staticmethod
    def backward(ctx, grad):
        normed, rstd, weight = ctx.saved_tensors
        grad = grad.reshape(normed.shape)
        grad_x = threads.map_rows(lambda *rows: _rms_norm_grad_rows(*rows, weight), grad, normed, rstd)
        grad_w, _ = _affine_grads(ctx, grad, normed, weight)
        return grad_x.reshape(ctx.x_shape), grad_w, None, None


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """x / sqrt(mean(x^2) + eps) * weight; eps=None uses the dtype's machine epsilon, as PyTorch."""
    if eps is None:
        eps = float(xp_of(input.data).finfo(input.dtype).eps)
    return RMSNorm.apply(input, weight, _n_features(input, normalized_shape), eps)


# Phi(-|x|) / (t exp(-x^2 / 2)) as a polynomial in t = 1 / (1 + |x| / (2 sqrt 2)), highest power first. Fitted for
# this library (Chebyshev least squares on relative error against mpmath's erfc, t in (0, 1]): Phi to 1.3e-8 relative
# error for every x in float64, float32-rounding limited in float32.
_CDF_TAIL_POLY = (0.0211878045, -0.115482286, 0.24319384, -0.223600246, 0.0636157348, -0.0286437893, 0.046506688,
                  0.0876875786, 0.123440348, 0.141046925, 0.141047397)


def _normal_cdf(x):
    """Phi(x), the standard normal CDF (NumPy has no erf), and exp(-x^2 / 2), which the GELU backward reuses.

    The tail Phi(-|x|) = exp(-x^2 / 2) t P(t) keeps its relative precision far out (Phi(-10) ~ 7.6e-24 comes out to
    1e-8 relative, where 0.5 (1 + erf) would give 0); Phi(|x|) = 1 - Phi(-|x|). Every step works in place, and the
    sign selection is arithmetic: NumPy's where() is slow on mixed signs.
    """
    xp = xp_of(x)
    t = xp.abs(x)
    t *= 1 / (2 * math.sqrt(2))
    t += 1
    xp.reciprocal(t, out=t)
    tail = t * _CDF_TAIL_POLY[0]                         # Horner's rule
    for c in _CDF_TAIL_POLY[1:]:
        tail += c
        tail *= t
    gauss = x * x
    gauss *= -0.5
    xp.exp(gauss, out=gauss)
    tail *= gauss                                        # Phi(-|x|)
    cdf = tail * -2                                      # Phi(x) = tail + [x >= 0] (1 - 2 tail)
    cdf += 1
    cdf *= x >= 0
    cdf += tail
    return cdf, gauss


def _gelu_parts(x):
    """x Phi(x), and the Phi(x) and exp(-x^2 / 2) that its derivative needs."""
    cdf, gauss = _normal_cdf(x)
    return x * cdf, cdf, gauss


def _gelu_grad(grad, x, cdf, gauss):
    """grad * (Phi(x) + x phi(x)), built in one buffer."""
    slope = x * gauss
    slope *= _INV_SQRT_2PI
    slope += cdf
    slope *= grad
    return slope


_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)


class Gelu(Function):
    """GELU(x) = x * Phi(x), Phi the standard normal CDF; its derivative is Phi(x) + x * phi(x)."""

    @staticmethod
    def forward(ctx, x, approximate):
        xp = xp_of(x)
        ctx.approximate = approximate
        if approximate == "tanh":
            ctx.save_for_backward(x)
            return 0.5 * x * (1 + xp.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)))
        out, cdf, gauss = threads.map_rows(_gelu_parts, x.reshape(-1))
        ctx.save_for_backward(x, cdf, gauss)             # kept for backward: the costly part of its derivative
        return out.reshape(x.shape)

    @staticmethod
    def backward(ctx, grad):
        xp = xp_of(grad)
        if ctx.approximate == "tanh":
            (x,) = ctx.saved_tensors
            inner = _SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)
            th = xp.tanh(inner)
            d_inner = _SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x * x)
            return grad * (0.5 * (1 + th) + 0.5 * x * (1 - th * th) * d_inner), None
        x, cdf, gauss = ctx.saved_tensors
        return threads.map_rows(_gelu_grad, grad.reshape(-1), x.reshape(-1), cdf, gauss).reshape(x.shape), None


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


def keep_mask(shape, p, like):
    """True where dropout keeps an element, drawn from the seeded generator of like's device."""
    return generator(device_of(like)).random(shape, dtype=like.dtype) >= p


def dropout(input, p=0.5, training=True):
    """Zero each element with probability p and scale the rest by 1/(1-p); the identity when not training."""
    if not 0 <= p <= 1:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    if not training or p == 0:
        return input
    if p == 1:
        return input * 0.0
    return Dropout.apply(input, keep_mask(input.shape, p, input.data), 1.0 / (1.0 - p))


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
