"""linear: y = x W^T + b with W shaped (out_features, in_features), as nn.Linear."""
from .. import cpu, ops
from ..tensor import Function
from . import twins


def _rows(a):
    """Every leading dim as a row: (..., features) -> (rows, features)."""
    return a.reshape(-1, a.shape[-1])


class ReferenceLinear(Function):
    """y = x W^T + b; backward: dx = dy W, dW = dy^T x and db = dy, each summed over every row (batch, time...)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        y = x @ weight.T
        return y if bias is None else y + bias

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        return grad @ weight, _rows(grad).T @ _rows(x), _rows(grad).sum(axis=0)


@cpu.tuned
class FastLinear(Function):
    """One 2-D product over all rows (faster than the stacked product NumPy runs for a 3-D input), its rows shared
    among the CPU threads, the bias added to each part in cache; the bias gradient as ones @ rows.

    Backward shares dx's rows among the threads and leaves dW to a helper thread (cpu.matmul_later): nothing needs
    dW until the walk reaches the weight, and meanwhile the calling thread goes on with the layers below, much of
    whose work (LayerNorm, Python) it does alone. The backward walk reads dW through cpu.settled."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        rows = _rows(x)
        ctx.save_for_backward(rows, weight)
        ctx.x_shape = x.shape
        return cpu.matmul(rows, weight.T, bias).reshape(x.shape[:-1] + weight.shape[:1])

    @staticmethod
    def backward(ctx, grad):
        rows, weight = ctx.saved_tensors
        grad = _rows(grad)
        need_x, need_w, need_b = ctx.needs_input_grad
        grad_w = cpu.matmul_later(grad.T, rows) if need_w else None
        grad_x = cpu.matmul(grad, weight).reshape(ctx.x_shape) if need_x else None
        grad_b = cpu.leading_axes_sum(grad) if need_b else None
        return grad_x, grad_w, grad_b


twins.register("linear", FastLinear, ReferenceLinear)


def linear(input, weight, bias=None):
    ops.check_one_dtype("linear", input, weight=weight, bias=bias)
    if input.shape[-1] != weight.shape[-1]:
        raise ValueError(f"linear: input's last dim {input.shape[-1]} does not match weight shape "
                         f"{weight.shape} (out_features, in_features)")
    return twins.implementation("linear").apply(input, weight, bias)
