"""layer_norm and rms_norm over the trailing normalized_shape dims, as PyTorch: the reference twins, then the fast
versions. Both see x as rows: every leading dim a row, the normalised dims its n_features columns."""
import math
from functools import partial

from .. import cpu, ops
from ..backend import xp_of
from ..tensor import Function
from . import normalization_kernel, twins


def _shapes(x, weight, bias):
    return x.shape, None if weight is None else weight.shape, None if bias is None else bias.shape


def _affine(normed, weight, bias):
    """normed * weight + bias over the feature columns (either may be absent), a new array: normed is kept for
    backward."""
    y = normed.copy() if weight is None else normed * weight.reshape(-1)
    return y if bias is None else y + bias.reshape(-1)


def _affine_grads(grad, normed, weight_shape, bias_shape, column_sum):
    """dw = sum over rows of dy * x_hat, db = sum over rows of dy (None where there is no weight or bias)."""
    grad_w = None if weight_shape is None else column_sum(grad * normed).reshape(weight_shape)
    grad_b = None if bias_shape is None else column_sum(grad).reshape(bias_shape)
    return grad_w, grad_b


def _plain_column_sum(rows):
    return rows.sum(axis=0)


class ReferenceLayerNorm(Function):
    """y = x_hat * w + b, x_hat = (x - mean) / sqrt(var + eps), mean and (biased) var over each row.

    Backward: with g = dy * w, dx = (g - mean(g) - x_hat * mean(g * x_hat)) / sqrt(var + eps); dw = sum of
    dy * x_hat over the rows, db = sum of dy.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, n_features, eps):
        xp = xp_of(x)
        rows = x.reshape(-1, n_features)
        centred = rows - rows.mean(axis=1, keepdims=True)
        rstd = 1 / xp.sqrt((centred * centred).mean(axis=1, keepdims=True) + eps)
        normed = centred * rstd
        ctx.save_for_backward(normed, rstd, weight)
        ctx.shapes = _shapes(x, weight, bias)
        return _affine(normed, weight, bias).reshape(x.shape)

    @staticmethod
    def backward(ctx, grad):
        normed, rstd, weight = ctx.saved_tensors
        x_shape, weight_shape, bias_shape = ctx.shapes
        grad = grad.reshape(normed.shape)
        g = grad if weight is None else grad * weight.reshape(-1)
        grad_x = rstd * (g - g.mean(axis=1, keepdims=True) - normed * (g * normed).mean(axis=1, keepdims=True))
        return (grad_x.reshape(x_shape), *_affine_grads(grad, normed, weight_shape, bias_shape, _plain_column_sum),
                None, None)


class ReferenceRMSNorm(Function):
    """y = x_hat * w, x_hat = x / sqrt(mean(x^2) + eps) over each row.

    Backward: with g = dy * w, dx = (g - x_hat * mean(g * x_hat)) / sqrt(mean(x^2) + eps); dw = sum of dy * x_hat.
    """

    @staticmethod
    def forward(ctx, x, weight, n_features, eps):
        xp = xp_of(x)
        rows = x.reshape(-1, n_features)
        rstd = 1 / xp.sqrt((rows * rows).mean(axis=1, keepdims=True) + eps)
        normed = rows * rstd
        ctx.save_for_backward(normed, rstd, weight)
        ctx.shapes = _shapes(x, weight, None)
        return _affine(normed, weight, None).reshape(x.shape)

    @staticmethod
    def backward(ctx, grad):
        normed, rstd, weight = ctx.saved_tensors
        x_shape, weight_shape, _ = ctx.shapes
        grad = grad.reshape(normed.shape)
        g = grad if weight is None else grad * weight.reshape(-1)
        grad_x = rstd * (g - normed * (g * normed).mean(axis=1, keepdims=True))
        grad_w, _ = _affine_grads(grad, normed, weight_shape, None, _plain_column_sum)
        return grad_x.reshape(x_shape), grad_w, None, None


# -- the fast versions: rows in cache-sized pieces on the CPU threads (a norm treats each row on its own), each
# piece's results written into the arrays given, means as BLAS row sums, in place. The weight and bias gradients sum
# over all rows and come after the pieces.
def _affine_into(y, normed, weight, bias):
    """y = normed * weight + bias over the feature columns (either may be absent)."""
    if weight is None:
        y[...] = normed
    else:
        xp_of(y).multiply(normed, weight.reshape(-1), out=y)
    if bias is not None:
        y += bias.reshape(-1)


def _layer_norm_piece(rows, y, normed, rstd, weight, bias, eps):
    xp = xp_of(rows)
    xp.subtract(rows, cpu.row_mean(rows), out=normed)
    xp.sqrt(cpu.row_mean(normed * normed) + eps, out=rstd)
    xp.divide(1.0, rstd, out=rstd)
    normed *= rstd  # a constant row gives 0 here, not NaN: eps keeps rstd finite
    _affine_into(y, normed, weight, bias)


def _layer_norm_grad_piece(grad, normed, rstd, grad_x, weight):
    g = grad if weight is None else grad * weight.reshape(-1)
    xp_of(g).subtract(g, cpu.row_mean(g), out=grad_x)
    grad_x -= normed * cpu.row_mean(g * normed)
    grad_x *= rstd


def _rms_norm_piece(rows, y, normed, rstd, weight, eps):
    xp = xp_of(rows)
    xp.sqrt(cpu.row_mean(rows * rows) + eps, out=rstd)
    xp.divide(1.0, rstd, out=rstd)
    xp.multiply(rows, rstd, out=normed)
    _affine_into(y, normed, weight, None)


def _rms_norm_grad_piece(grad, normed, rstd, grad_x, weight):
    g = grad if weight is None else grad * weight.reshape(-1)
    xp_of(g).subtract(g, normed * cpu.row_mean(g * normed), out=grad_x)
    grad_x *= rstd


def _norm_outputs(rows):
    """Empty arrays for a norm's pieces to fill: the output and x_hat shaped like rows, 1/std a column."""
    xp = xp_of(rows)
    return [xp.empty_like(rows), xp.empty_like(rows), xp.empty((rows.shape[0], 1), dtype=rows.dtype)]


@cpu.tuned
class FastLayerNorm(Function):
    @staticmethod
    def forward(ctx, x, weight, bias, n_features, eps):
        ctx.fused = normalization_kernel.applies(x, weight, bias)        # float32 on the GPU: one CUDA kernel
        if ctx.fused:
            out, normed, rstd = normalization_kernel.layer_norm(x, weight, bias, n_features, eps)
        else:
            rows = x.reshape(-1, n_features)
            out, normed, rstd = cpu.for_each_piece(partial(_layer_norm_piece, weight=weight, bias=bias, eps=eps),
                                                   [rows], _norm_outputs(rows))
        ctx.save_for_backward(normed, rstd, weight)
        ctx.shapes = _shapes(x, weight, bias)
        return out.reshape(x.shape)

    @staticmethod
    def backward(ctx, grad):
        normed, rstd, weight = ctx.saved_tensors
        x_shape, weight_shape, bias_shape = ctx.shapes
        grad = grad.reshape(normed.shape)
        if ctx.fused:
            grad_x = normalization_kernel.layer_norm_grad(grad, normed, rstd, weight)
        else:
            (grad_x,) = cpu.for_each_piece(partial(_layer_norm_grad_piece, weight=weight), [grad, normed, rstd],
                                           [xp_of(grad).empty_like(normed)])
        return (grad_x.reshape(x_shape), *_affine_grads(grad, normed, weight_shape, bias_shape, cpu.leading_axes_sum),
                None, None)


@cpu.tuned
class FastRMSNorm(Function):
    @staticmethod
    def forward(ctx, x, weight, n_features, eps):
        rows = x.reshape(-1, n_features)
        out, normed, rstd = cpu.for_each_piece(partial(_rms_norm_piece, weight=weight, eps=eps), [rows],
                                               _norm_outputs(rows))
        ctx.save_for_backward(normed, rstd, weight)
        ctx.shapes = _shapes(x, weight, None)
        return out.reshape(x.shape)

    @staticmethod
    def backward(ctx, grad):
        normed, rstd, weight = ctx.saved_tensors
        x_shape, weight_shape, _ = ctx.shapes
        grad = grad.reshape(normed.shape)
        (grad_x,) = cpu.for_each_piece(partial(_rms_norm_grad_piece, weight=weight), [grad, normed, rstd],
                                       [xp_of(grad).empty_like(normed)])
        grad_w, _ = _affine_grads(grad, normed, weight_shape, None, cpu.leading_axes_sum)
        return grad_x.reshape(x_shape), grad_w, None, None


twins.register("layer_norm", FastLayerNorm, ReferenceLayerNorm)
twins.register("rms_norm", FastRMSNorm, ReferenceRMSNorm)


def _n_features(x, normalized_shape):
    """How many values each normalised row holds: the product of the trailing dims named by normalized_shape."""
    normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if x.shape[x.ndim - len(normalized_shape):] != normalized_shape:
        raise ValueError(f"normalized_shape {normalized_shape} does not match the input's trailing dims {x.shape}")
    return math.prod(normalized_shape)


@ops.float_only(NotImplementedError)
def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    ops.check_one_dtype("layer_norm", input, weight=weight, bias=bias)
    return ops.in_float32_if_half(twins.implementation("layer_norm").apply, input, weight, bias,
                                  _n_features(input, normalized_shape), eps)


@ops.float_only(NotImplementedError)
def rms_norm(input, normalized_shape, weight=None, eps=None):
    """x / sqrt(mean(x^2) + eps) * weight; eps=None uses the dtype's machine epsilon, as PyTorch."""
    ops.check_one_dtype("rms_norm", input, weight=weight)
    if eps is None:
        eps = float(xp_of(input.array).finfo(input.dtype).eps)
    return ops.in_float32_if_half(twins.implementation("rms_norm").apply, input, weight,
                                  _n_features(input, normalized_shape), eps)


@ops.float_only()
def normalize(input, p=2.0, dim=1, eps=1e-12):
    """input / max(||input||_p over dim, eps), as F.normalize: rows of length 1 (a zero row stays zero). The max is
    clamp's, as PyTorch's clamp_min: a norm equal to eps keeps its whole gradient (maximum would give it half)."""
    return input / ops.clamp(ops.norm(input, p, dim, keepdim=True), min=eps)
