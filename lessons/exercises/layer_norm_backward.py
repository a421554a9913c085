"""Exercise · LayerNorm, forward and backward.                     Lesson 05, "The model" (post-norm).

Every Transformer block normalises each token's features: y = (x - mean) / sqrt(var + eps) * w + b, with the mean
and the (biased) variance over that token's features. Write it as a Function, forward and backward.

Shapes
    x: (..., *normalized_shape); n_features = the product of normalized_shape. See x as rows:
    x.reshape(-1, n_features). weight and bias: None, or normalized_shape (n_features values; use .reshape(-1)).
    y has x's shape. eps: a float.

The math to derive
    With x_hat = (x - mean) * rstd, rstd = 1 / sqrt(var + eps), and g = dLoss/dx_hat = dy * w:
    1. dLoss/dw and dLoss/db: sums over the rows.
    2. dLoss/dx for one row of n features. mean and var depend on every x of the row: write
       dx_hat_i / dx_k (three terms, one from x_k itself, one through the mean, one through the variance) and
       contract it with g. The result is rstd * (g - <something>) with two means over the row.

What the checker holds you to
    weight and bias may be None (then their gradients are None); gradients have their inputs' shapes; a row of
    equal values (var = 0) stays finite; float32 stays float32.

Check it:    python -m lessons check layer_norm_backward
Plug it in:  F.use(layer_norm=LayerNorm), and nn.LayerNorm in every model runs yours.
"""
from tinyattn import Function
from tinyattn.backend import xp_of


class LayerNorm(Function):
    @staticmethod
    def forward(ctx, x, weight, bias, n_features, eps):
        xp = xp_of(x)
        rows = x.reshape(-1, n_features)
        # TODO: x_hat per row, then y = x_hat * w + b (skip w or b when None); save what backward needs
        #       (x_hat, rstd, weight; the shapes of x, weight and bias as ctx attributes). Return y in x's shape.
        raise NotImplementedError("not implemented yet")

    @staticmethod
    def backward(ctx, grad):
        # TODO: dx (in x's shape), dw and db (in their own shapes, None when there is none).
        #       Return (dx, dw, db, None, None): one gradient per forward argument after ctx.
        raise NotImplementedError("not implemented yet")
