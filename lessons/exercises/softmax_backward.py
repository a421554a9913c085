"""Exercise · softmax, forward and backward.                    Lesson 03, "The backward pass, by hand".

Attention's weights are a softmax of its scores; every gradient that reaches the queries and keys flows back
through one. Write softmax as a Function: forward and backward on raw arrays.

Shapes
    x: any shape; dim: the axis to normalise over (already made non-negative). y = softmax(x) has x's shape.

The math to derive (on paper first)
    y_i = exp(x_i) / sum_j exp(x_j) along dim.
    1. dy_i / dx_k for one row. Write y_i = exp(x_i) / Z and differentiate the numerator and Z.
    2. With g = dLoss/dy (what backward receives), dLoss/dx_k = sum_i g_i dy_i/dx_k. Simplify it until it needs
       only y, g and one sum over the row: no Jacobian matrix.

What the checker holds you to
    - exp(x - max) rather than exp(x): logits of 1000 must not overflow;
    - a row that is -inf everywhere (a query whose every key is masked) gives y = 0 and gradient 0, never NaN;
    - float32 stays float32 (mix arrays with Python floats, not with float64 arrays).

Check it:    python -m lessons check softmax_backward
Plug it in:  F.use(softmax=Softmax), and every F.softmax (additive attention, MoE routing) runs yours.
"""
from tinyattn import Function
from tinyattn.backend import xp_of


class Softmax(Function):
    @staticmethod
    def forward(ctx, x, dim):
        xp = xp_of(x)                   # numpy, or cupy on a GPU
        # TODO: y = softmax(x) along dim (subtract each row's max first; mind the all -inf row).
        #       Keep what backward needs: ctx.save_for_backward(...) and ctx.dim = dim. Return y.
        raise NotImplementedError("not implemented yet")

    @staticmethod
    def backward(ctx, grad):
        # TODO: dLoss/dx from grad = dLoss/dy. Return it, and None for dim (it gets no gradient).
        raise NotImplementedError("not implemented yet")
