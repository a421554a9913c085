"""Solution · softmax, forward and backward (lesson 03)."""
from tinyattn import Function
from tinyattn.backend import xp_of


class Softmax(Function):
    @staticmethod
    def forward(ctx, x, dim):
        xp = xp_of(x)
        row_max = x.max(axis=dim, keepdims=True)
        row_max = xp.where(xp.isfinite(row_max), row_max, 0)      # a row of -inf: exp(-inf - 0) = 0, never NaN
        e = xp.exp(x - row_max)
        total = e.sum(axis=dim, keepdims=True)
        y = e / xp.where(total == 0, 1, total)
        ctx.save_for_backward(y)
        ctx.dim = dim
        return y

    @staticmethod
    def backward(ctx, grad):
        # dy_i/dx_k = y_i (delta_ik - y_k), so dx_k = sum_i g_i y_i (delta_ik - y_k) = y_k (g_k - sum_i g_i y_i).
        (y,) = ctx.saved_tensors
        return y * (grad - (grad * y).sum(axis=ctx.dim, keepdims=True)), None
