"""Losses: cross-entropy (a fused Function with its reference twin) and the mean squared error."""
import warnings

from .. import cpu, ops
from ..backend import xp_of
from ..tensor import Function, Tensor, as_array
from . import losses_kernel, twins
from .softmax import log_softmax, log_softmax_array, log_softmax_last


def _reduce(losses, valid_count, reduction):
    """The per-row losses summed, averaged over the rows that count (0 when none does, not 0/0), or as they are."""
    if reduction == "none":
        return losses
    total = losses.sum()
    return total / xp_of(losses).maximum(valid_count, 1) if reduction == "mean" else total


def _upstream(grad, valid_count, reduction):
    """What d(loss)/d(row loss) is for each row: the incoming gradient, divided by the count for the mean."""
    if reduction == "none":
        return grad[:, None]
    return grad / xp_of(grad).maximum(valid_count, 1) if reduction == "mean" else grad


class ReferenceCrossEntropy(Function):
    """Row i: loss_i = -(1 - eps) log p_i[t_i] - eps * mean_c log p_i[c], with p_i = softmax(logits_i) and eps the
    label smoothing; rows whose target is ignore_index count for nothing.

    Backward: d loss_i / d logits_i = p_i - (1 - eps) onehot(t_i) - eps / C, zero for ignored rows.
    """

    @staticmethod
    def forward(ctx, logits, target, ignore_index, reduction, label_smoothing):
        xp = xp_of(logits)
        log_p = log_softmax_array(logits, -1)
        valid = target != ignore_index
        target = xp.where(valid, target, 0)
        picked = log_p[xp.arange(len(target)), target]
        losses = -(1 - label_smoothing) * picked - label_smoothing * log_p.mean(axis=-1)
        losses = xp.where(valid, losses, xp.zeros((), dtype=logits.dtype))
        count = valid.sum(dtype=logits.dtype)
        ctx.save_for_backward(log_p, target, valid, count)
        ctx.reduction, ctx.label_smoothing = reduction, label_smoothing
        return _reduce(losses, count, reduction)

    @staticmethod
    def backward(ctx, grad):
        log_p, target, valid, count = ctx.saved_tensors
        xp = xp_of(log_p)
        eps, classes = ctx.label_smoothing, log_p.shape[-1]
        onehot = (xp.arange(classes) == target[:, None]).astype(log_p.dtype)
        grad_logits = xp.exp(log_p) - (1 - eps) * onehot - eps / classes
        grad_logits = grad_logits * valid[:, None] * _upstream(grad, count, ctx.reduction)
        return grad_logits, None, None, None, None


@cpu.tuned
class FastCrossEntropy(Function):
    """The same loss; its gradient built in place in one (N, C) array."""

    @staticmethod
    def forward(ctx, logits, target, ignore_index, reduction, label_smoothing):
        xp = xp_of(logits)
        ctx.reduction, ctx.label_smoothing = reduction, label_smoothing
        ctx.fused = losses_kernel.applies(logits)                        # float32 on the GPU: CUDA kernels
        if ctx.fused:                                                    # keeping each row's log-sum-exp only
            logits, target = xp.ascontiguousarray(logits), xp.ascontiguousarray(target, dtype=xp.int64)
            losses, lse = losses_kernel.cross_entropy(logits, target, ignore_index, label_smoothing)
            valid = target != ignore_index
            count = valid.sum(dtype=logits.dtype)
            ctx.save_for_backward(logits, target, valid, count, lse)
            return _reduce(losses, count, reduction)
        log_p = log_softmax_last(logits)
        valid = target != ignore_index
        target = xp.where(valid, target, 0)
        losses = -log_p[xp.arange(len(target)), target]
        if label_smoothing:
            losses *= 1 - label_smoothing
            losses -= label_smoothing / log_p.shape[-1] * cpu.last_axis_sum(log_p)[:, 0]
        losses *= valid
        count = valid.sum(dtype=logits.dtype)
        ctx.save_for_backward(log_p, target, valid, count)
        return _reduce(losses, count, reduction)

    @staticmethod
    def backward(ctx, grad):
        if ctx.fused:
            logits, target, valid, count, lse = ctx.saved_tensors
            return (losses_kernel.cross_entropy_grad(logits, target, valid, lse, _upstream(grad, count, ctx.reduction),
                                                     ctx.label_smoothing), None, None, None, None)
        log_p, target, valid, count = ctx.saved_tensors
        xp = xp_of(log_p)
        grad_logits = xp.exp(log_p)
        grad_logits[xp.arange(len(target)), target] -= 1 - ctx.label_smoothing
        if ctx.label_smoothing:
            grad_logits -= ctx.label_smoothing / log_p.shape[-1]
        grad_logits *= valid[:, None]
        grad_logits *= _upstream(grad, count, ctx.reduction)
        return grad_logits, None, None, None, None


twins.register("cross_entropy", FastCrossEntropy, ReferenceCrossEntropy)


def _check_arguments(caller, weight=None, size_average=None, reduce=None, reduction="mean",
                     reductions=("mean", "sum", "none")):
    """Refuse what PyTorch's losses take (in PyTorch's order, so positional calls mean the same) but these do not:
    class weights, and size_average / reduce (deprecated in PyTorch for reduction); check the reduction."""
    if weight is not None:
        raise NotImplementedError(f"{caller}: class weights are not supported")
    if size_average is not None or reduce is not None:
        raise NotImplementedError(f"{caller}: size_average and reduce are deprecated in PyTorch; pass "
                                  f"reduction= one of {', '.join(map(repr, reductions))}")
    if reduction not in reductions:
        raise ValueError(f"{caller}: reduction must be one of {', '.join(map(repr, reductions))}, got {reduction!r}")


@ops.float_only(NotImplementedError)
def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
                  label_smoothing=0.0):
    """PyTorch's F.cross_entropy: input (N, C) or (N, C, d1, ...) (or (C,)) with class indices (N, d1, ...), or
    with class probabilities of the input's shape and dtype (a float target, as soft labels or distillation)."""
    _check_arguments("cross_entropy", weight, size_average, reduce, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"cross_entropy: label_smoothing must be between 0.0 and 1.0, got {label_smoothing}")
    target_data = as_array(target)
    if target_data.dtype.kind == "f":
        return _cross_entropy_with_probabilities(input, target, reduction, label_smoothing)
    if target_data.dtype.kind not in "iu":
        raise TypeError(f"cross_entropy needs integer class indices or floating class probabilities as targets, got "
                        f"dtype {target_data.dtype}")
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
    _check_targets("cross_entropy", target_data, input.shape[1], ignore_index)
    loss = twins.implementation("cross_entropy").apply(input, target_data, ignore_index, reduction,
                                                        float(label_smoothing))
    return ops.reshape(loss, extra_shape) if reduction == "none" and extra_shape else loss


def _cross_entropy_with_probabilities(input, target, reduction, label_smoothing):
    """-sum_c t_c log softmax(x)_c over the class dim (1, or 0 for an unbatched (C,) input), with t smoothed to
    (1 - eps) t + eps / C; "mean" divides by the number of rows (every position of (N, d1, ...)), as PyTorch. Its
    gradient, log_softmax's chain rule, is p sum_c t_c - t for the input and -log p for a target that wants one."""
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"cross_entropy: class probabilities {tuple(target.shape)} must have the input's shape "
                         f"{tuple(input.shape)} (class indices are an integer tensor)")
    ops.check_one_dtype("cross_entropy", input, target=target)
    class_dim = 0 if input.ndim == 1 else 1
    if label_smoothing:
        target = target * (1 - label_smoothing) + label_smoothing / input.shape[class_dim]
    losses = -(target * log_softmax(input, class_dim)).sum(class_dim)
    return _reduced(losses, reduction)


def _check_targets(caller, target, classes, ignore_index):
    """IndexError naming the first class index outside 0..classes - 1 that is not ignore_index (a negative one would
    silently pick a class from the end)."""
    outside = (target != ignore_index) & ((target < 0) | (target >= classes))
    if outside.any():
        raise IndexError(f"{caller}: target {int(target[outside][0])} is out of bounds for {classes} classes "
                         f"(targets 0..{classes - 1}, or ignore_index={ignore_index} to skip a row)")


def _reduced(losses, reduction):
    return {"mean": ops.mean, "sum": ops.sum, "none": lambda x: x}[reduction](losses)


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    """-input[n, target[n]] for log-probabilities input (N, C), averaged over the rows whose target is not
    ignore_index, as F.nll_loss (no class weights here)."""
    _check_arguments("nll_loss", weight, size_average, reduce, reduction)
    target = as_array(target)
    _check_targets("nll_loss", target, input.shape[1], ignore_index)
    xp = xp_of(target)
    valid = target != ignore_index
    picked = ops.gather(input, 1, xp.where(valid, target, 0)[:, None])[:, 0]
    losses = ops.where(Tensor(valid), -picked, 0.0)
    if reduction == "mean":
        return losses.sum() / float(max(int(valid.sum()), 1))
    return _reduced(losses, reduction)


@ops.float_only()
def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """sum of target * (log target - input), input being log-probabilities, as F.kl_div; reduction "batchmean"
    divides by the batch size (the KL divergence proper), "mean" by the number of elements (PyTorch's default)."""
    _check_arguments("kl_div", None, size_average, reduce, reduction, ("mean", "batchmean", "sum", "none"))
    if log_target:
        pointwise = ops.exp(target) * (target - input)
    else:
        pointwise = target * (ops.log(ops.clamp(target, min=1e-38)) - input)   # 0 log 0 counts as 0
    if reduction == "batchmean":
        return pointwise.sum() / float(input.shape[0])
    return _reduced(pointwise, reduction)


@ops.float_only(NotImplementedError)
def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None, reduction="mean",
                                     pos_weight=None):
    """-[p t log s(x) + (1 - t) log(1 - s(x))] from logits x, with pos_weight p (1 by default) and weight multiplying
    each element's loss, as in PyTorch. With log s(x) from logsigmoid and log(1 - s(x)) = log s(x) - x, the loss is
    (1 - t) x - (1 + (p - 1) t) log s(x): stable for any x, and its derivative (1 - t) - (1 + (p - 1) t) s(-x)
    (= s(x) - t when p = 1) is exact everywhere, at x = 0 too (a zero-initialised logistic head's first step)."""
    _check_arguments("binary_cross_entropy_with_logits", None, size_average, reduce, reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"binary_cross_entropy_with_logits: target size {tuple(target.shape)} must be the same as "
                         f"input size {tuple(input.shape)}")
    log_p = ops.logsigmoid(input)
    positive = log_p if pos_weight is None else (1 + (pos_weight - 1) * target) * log_p
    losses = (1 - target) * input - positive
    if weight is not None:
        losses = losses * weight
    return _reduced(losses, reduction)


@ops.float_only(NotImplementedError)
def mse_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    _check_arguments("mse_loss", None, size_average, reduce, reduction)
    if tuple(input.shape) != tuple(target.shape):
        warnings.warn(f"mse_loss: a target of shape {tuple(target.shape)} that differs from the input's shape "
                      f"{tuple(input.shape)} broadcasts, which is likely not what you meant (PyTorch warns too)",
                      UserWarning, stacklevel=2)
    return _reduced((input - target) ** 2, reduction)
