"""The softmax family and the losses built on it, each a fused Function with a hand-derived backward."""
from .. import ops
from ..backend import xp_of
from ..tensor import Function, Tensor
from .layers import last_axis_sum


def _safe_max(x, axis):
    """Row max for shifting exponents; 0 where the whole row is -inf, so exp gives 0 rather than NaN."""
    xp = xp_of(x)
    m = x.max(axis=axis, keepdims=True)
    return xp.where(xp.isfinite(m), m, xp.zeros((), dtype=x.dtype))


def softmax_array(x, axis=-1, inplace=False):
    """Softmax on a raw array; a row that is -inf everywhere gives zeros (nothing to attend to), not NaN.

    inplace=True overwrites x, for a caller that owns it (attention scores): no second array of that size.
    """
    xp = xp_of(x)
    e = xp.subtract(x, _safe_max(x, axis), out=x if inplace else None)
    xp.exp(e, out=e)
    total = last_axis_sum(e) if axis in (-1, x.ndim - 1) else e.sum(axis=axis, keepdims=True)
    e /= xp.where(total == 0, xp.ones((), dtype=x.dtype), total)
    return e


def softmax_backward(y, grad, axis):
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
        return softmax_backward(y, grad, ctx.dim), None


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
