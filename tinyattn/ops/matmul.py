"""Matrix products: a @ b with NumPy's (and PyTorch's) rules, forward beside backward."""
from ..backend import broadcast_shapes, xp_of
from ..tensor import Function, Tensor


class MatMul(Function):
    """a @ b with NumPy's rules: 1-D operands are promoted, batch dimensions broadcast."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        xp = xp_of(a)
        a2 = a[None, :] if a.ndim == 1 else a
        b2 = b[:, None] if b.ndim == 1 else b
        # Put back the unit dims NumPy dropped for 1-D operands, so the 2-D formulas below apply.
        if a.ndim == 1 and b.ndim == 1:
            g2 = grad.reshape(1, 1)
        elif a.ndim == 1:
            g2 = xp.expand_dims(grad, -2)
        elif b.ndim == 1:
            g2 = xp.expand_dims(grad, -1)
        else:
            g2 = grad
        grad_a = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_a = g2 @ xp.swapaxes(b2, -1, -2)
            grad_a = grad_a.reshape(grad_a.shape[:-2] + (-1,)) if a.ndim == 1 else grad_a
        if ctx.needs_input_grad[1]:
            if b2.ndim == 2 and a2.ndim > 2:
                # A weight shared by every batch element: one large matmul instead of a batch of small ones.
                grad_b = a2.reshape(-1, a2.shape[-1]).T @ g2.reshape(-1, g2.shape[-1])
            else:
                grad_b = xp.swapaxes(a2, -1, -2) @ g2
            grad_b = grad_b[..., 0] if b.ndim == 1 else grad_b
        return grad_a, grad_b


def matmul(a, b):
    """a @ b for tensors of one dtype (PyTorch mixes none either): 1-D operands are promoted, batch dims broadcast."""
    for x in (a, b):
        if not isinstance(x, Tensor):
            raise TypeError(f"matmul takes tensors, got a {type(x).__name__}")
        if x.ndim == 0:
            raise RuntimeError(f"matmul needs operands with at least one dim, got shapes {a.shape} and {b.shape}")
    if a.dtype == bool or b.dtype == bool:
        raise NotImplementedError(f"matmul does not take bool tensors (shapes {a.shape} and {b.shape}), as PyTorch: "
                           "cast them with .float() or .long() first")
    if a.dtype != b.dtype:
        raise RuntimeError(f"matmul needs operands of one dtype, got {a.dtype} {a.shape} and {b.dtype} {b.shape}: "
                           "cast one with .to(dtype)")
    inner = b.shape[-2] if b.ndim > 1 else b.shape[0]
    if a.shape[-1] != inner:
        raise RuntimeError(f"matmul: shapes {a.shape} and {b.shape} cannot be multiplied "
                           f"({a.shape[-1]} columns against {inner} rows)")
    try:
        broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise RuntimeError(f"matmul: the batch dims of shapes {a.shape} and {b.shape} do not broadcast") from None
    return MatMul.apply(a, b)


def dot(a, b):
    """The inner product of two 1-D tensors of one size and dtype (a 0-d tensor), as torch.dot."""
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"dot: 1D tensors expected, but got {a.ndim}D and {b.ndim}D tensors")
    if a.shape != b.shape:
        raise RuntimeError(f"dot: inconsistent tensor size, expected tensors of one size, got {a.shape[0]} and "
                           f"{b.shape[0]} elements")
    return matmul(a, b)


def bmm(a, b):
    """Batched matrix product of (B, n, m) and (B, m, p) tensors, as torch.bmm."""
    if a.ndim != 3 or b.ndim != 3 or a.shape[0] != b.shape[0]:
        raise RuntimeError(f"bmm needs two 3-D tensors with one batch size, got shapes {a.shape} and {b.shape}")
    return matmul(a, b)
