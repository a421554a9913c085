"""Exercise · cross-entropy with label smoothing, forward and backward.  Lesson 08 (the ViT trains with it).

Label smoothing (Szegedy et al. 2016) trains against a softened target: 1 - eps + eps/C on the true class and eps/C
on each of the others, so the model is never pushed to infinite logits. Write cross-entropy with it as a Function.

Shapes
    logits (N, C); target (N,) integer classes; a row whose target is ignore_index counts for nothing (padding).
    label_smoothing eps in [0, 1). reduction: "mean" (over the rows that count; 0 when none does, not NaN), "sum"
    or "none" (losses (N,), 0 for ignored rows). Output: a 0-d array, or (N,) for "none".
    Row loss: loss_i = -(1 - eps) log p_i[t_i] - eps * mean_c log p_i[c], with p_i = softmax(logits_i).

The math to derive
    1. d log p_c / d logit_k (log p = logits - logsumexp(logits)).
    2. d loss_i / d logits_i: it comes out as p_i minus the smoothed target. Show it.
    3. What each reduction does to the gradient: backward receives grad (0-d for mean and sum, (N,) for none).

What the checker holds you to
    log-softmax without overflow (logits of 1000); ignored rows get gradient 0; a mean over no counted row is 0
    with gradient 0; float32 stays float32 (counts in the logits' dtype).

Check it:    python -m lessons check label_smoothing
Plug it in:  F.use(cross_entropy=CrossEntropy); every F.cross_entropy, and the models' losses, run yours.
"""
from tinyattn import Function
from tinyattn.backend import xp_of


class CrossEntropy(Function):
    @staticmethod
    def forward(ctx, logits, target, ignore_index, reduction, label_smoothing):
        xp = xp_of(logits)
        # TODO: log softmax of each row (subtract the max); which rows count; the row losses; the reduction.
        #       Save what backward needs.
        raise NotImplementedError("not implemented yet")

    @staticmethod
    def backward(ctx, grad):
        # TODO: d loss / d logits, (N, C). Return it and None for target, ignore_index, reduction, label_smoothing.
        raise NotImplementedError("not implemented yet")
