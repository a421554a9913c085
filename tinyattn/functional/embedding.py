"""embedding: rows of a weight table picked by integer ids, as nn.Embedding."""
from .. import cpu
from ..backend import scatter_add, xp_of
from ..tensor import Function, Tensor, as_array
from . import twins


def _table_grad(ids, grad, weight_shape, padding_idx, add_rows):
    """dW[i] = the sum of dy over every position whose id is i; add_rows(target, rows, values) must add repeated
    rows up. The padding row gets no gradient."""
    grad_weight = xp_of(grad).zeros(weight_shape, dtype=grad.dtype)
    add_rows(grad_weight, ids.reshape(-1), grad.reshape(-1, weight_shape[1]))
    if padding_idx is not None:
        grad_weight[padding_idx] = 0
    return grad_weight


class ReferenceEmbedding(Function):
    """y = W[ids]; backward: dW[i] = sum of dy where ids == i (scatter-add: repeated ids add up)."""

    @staticmethod
    def forward(ctx, ids, weight, padding_idx):
        ctx.save_for_backward(ids)
        ctx.weight_shape, ctx.padding_idx = weight.shape, padding_idx
        return weight[ids]

    @staticmethod
    def backward(ctx, grad):
        (ids,) = ctx.saved_tensors
        return None, _table_grad(ids, grad, ctx.weight_shape, ctx.padding_idx, scatter_add), None


@cpu.tuned
class FastEmbedding(ReferenceEmbedding):
    """The same; repeated ids summed by sorting them (cpu.add_rows) rather than one element at a time."""

    @staticmethod
    def backward(ctx, grad):
        (ids,) = ctx.saved_tensors
        return None, _table_grad(ids, grad, ctx.weight_shape, ctx.padding_idx, cpu.add_rows), None


twins.register("embedding", FastEmbedding, ReferenceEmbedding)


def padding_row(padding_idx, rows):
    """padding_idx as a row of a table of rows rows (a negative one counts from the end, as in PyTorch)."""
    if padding_idx is None:
        return None
    if not -rows <= padding_idx < rows:
        raise ValueError(f"padding_idx {padding_idx} must be within the table's {rows} rows "
                         f"({-rows}..{rows - 1})")
    return padding_idx % rows


def embedding(input, weight, padding_idx=None):
    padding_idx = padding_row(padding_idx, weight.shape[0])
    ids = as_array(input)
    if ids.dtype.kind not in "iu":
        raise TypeError(f"embedding needs integer ids, got dtype {ids.dtype}")
    rows = weight.shape[0]
    low, high = _id_range(ids)
    if low < 0 or high >= rows:
        raise IndexError(f"embedding: id {low if low < 0 else high} is out of range for a table of {rows} rows "
                         f"(ids 0..{rows - 1})")
    return twins.implementation("embedding").apply(ids, weight, padding_idx)


def _id_range(ids):
    """The smallest and largest id, read once (each read of a GPU array waits for the GPU); (0, -1) when empty."""
    return (int(ids.min()), int(ids.max())) if ids.size else (0, -1)


def one_hot(tensor, num_classes=-1):
    """Integer class ids as rows of zeros with a 1 at the id (int64), as F.one_hot; num_classes=-1 takes max + 1."""
    ids = as_array(tensor)
    if ids.dtype.kind not in "iu":
        raise TypeError(f"one_hot needs integer ids, got dtype {ids.dtype}")
    xp = xp_of(ids)
    low, high = _id_range(ids)
    if num_classes < 0:
        num_classes = high + 1
    if low < 0 or high >= num_classes:
        raise RuntimeError(f"one_hot: ids must lie in 0..{num_classes - 1}")
    return Tensor((ids[..., None] == xp.arange(num_classes)).astype("int64"))
