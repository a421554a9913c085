"""Solution · LayerNorm, forward and backward (lesson 05)."""
from tinyattn import Function
from tinyattn.backend import xp_of


class LayerNorm(Function):
    @staticmethod
    def forward(ctx, x, weight, bias, n_features, eps):
        xp = xp_of(x)
        rows = x.reshape(-1, n_features)
        centred = rows - rows.mean(axis=1, keepdims=True)
        rstd = 1 / xp.sqrt((centred * centred).mean(axis=1, keepdims=True) + eps)
        x_hat = centred * rstd
        y = x_hat if weight is None else x_hat * weight.reshape(-1)
        y = y if bias is None else y + bias.reshape(-1)
        ctx.save_for_backward(x_hat, rstd, weight)
        ctx.shapes = x.shape, None if weight is None else weight.shape, None if bias is None else bias.shape
        return y.reshape(x.shape)

    @staticmethod
    def backward(ctx, grad):
        x_hat, rstd, weight = ctx.saved_tensors
        x_shape, weight_shape, bias_shape = ctx.shapes
        grad = grad.reshape(x_hat.shape)
        g = grad if weight is None else grad * weight.reshape(-1)              # dLoss/dx_hat
        # x_hat = (x - mean) * rstd: the mean and the variance depend on every x of the row, which gives the two
        # subtracted terms; both are means over the row's n features.
        grad_x = rstd * (g - g.mean(axis=1, keepdims=True) - x_hat * (g * x_hat).mean(axis=1, keepdims=True))
        grad_w = None if weight_shape is None else (grad * x_hat).sum(axis=0).reshape(weight_shape)
        grad_b = None if bias_shape is None else grad.sum(axis=0).reshape(bias_shape)
        return grad_x.reshape(x_shape), grad_w, grad_b, None, None
