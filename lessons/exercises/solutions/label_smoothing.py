"""Solution · cross-entropy with label smoothing, forward and backward (lesson 08)."""
from tinyattn import Function
from tinyattn.backend import xp_of


class CrossEntropy(Function):
    @staticmethod
    def forward(ctx, logits, target, ignore_index, reduction, label_smoothing):
        xp = xp_of(logits)
        shifted = logits - logits.max(axis=-1, keepdims=True)
        log_p = shifted - xp.log(xp.exp(shifted).sum(axis=-1, keepdims=True))      # log softmax, stable
        counts = (target != ignore_index).astype(logits.dtype)                     # 1 for a row that counts, else 0
        target = xp.where(target != ignore_index, target, 0)                       # any class: the row counts 0
        picked = log_p[xp.arange(len(target)), target]
        losses = (-(1 - label_smoothing) * picked - label_smoothing * log_p.mean(axis=-1)) * counts
        rows = xp.maximum(counts.sum(), 1)                                         # a mean over no row is 0, not NaN
        ctx.save_for_backward(log_p, target, counts, rows)
        ctx.reduction, ctx.label_smoothing = reduction, label_smoothing
        if reduction == "none":
            return losses
        return losses.sum() / rows if reduction == "mean" else losses.sum()

    @staticmethod
    def backward(ctx, grad):
        log_p, target, counts, rows = ctx.saved_tensors
        xp = xp_of(log_p)
        classes = log_p.shape[-1]
        # The smoothed target puts 1 - eps + eps / C on the true class and eps / C on every other; the gradient
        # of -sum_c target_c log p_c with respect to the logits is p - target.
        onehot = (xp.arange(classes) == target[:, None]).astype(log_p.dtype)
        grad_logits = (xp.exp(log_p) - (1 - ctx.label_smoothing) * onehot - ctx.label_smoothing / classes)
        grad_logits = grad_logits * counts[:, None]
        if ctx.reduction == "none":
            return grad_logits * grad[:, None], None, None, None, None
        return grad_logits * (grad / rows if ctx.reduction == "mean" else grad), None, None, None, None
