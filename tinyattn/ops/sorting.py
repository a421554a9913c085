"""Sorting and picking the largest: sort, argsort, topk. Values come out through gather, so their gradients go back
to the places they were taken from."""
from ..backend import xp_of
from ..tensor import Tensor
from .dims import dim_index
from .indexing import Gather
from .reductions import ValuesIndices


def argsort(x, dim=-1, descending=False, stable=True):
    """Indices that sort x along dim (ties keep their order: a stable sort)."""
    dim = dim_index(dim, x.ndim)
    xp = xp_of(x.array)
    kind = "stable" if stable else None
    if descending:     # sort x reversed, then reverse the order: ties stay first-come, and no -x (bool, uint8)
        order = x.shape[dim] - 1 - xp.flip(xp.argsort(xp.flip(x.array, dim), axis=dim, kind=kind), dim)
    else:
        order = xp.argsort(x.array, axis=dim, kind=kind)
    return Tensor(order.astype("int64"))


def sort(x, dim=-1, descending=False, stable=True):
    """(values, indices) of x sorted along dim, as torch.sort."""
    indices = argsort(x, dim, descending, stable)
    return ValuesIndices(Gather.apply(x, indices.array, dim_index(dim, x.ndim)), indices)


def topk(x, k, dim=-1, largest=True, sorted=True):
    """(values, indices) of the k largest (or smallest) elements along dim, best first, as torch.topk."""
    dim = dim_index(dim, x.ndim)
    if not 0 <= k <= x.shape[dim]:
        raise RuntimeError(f"topk: k={k} is out of range for a dim of size {x.shape[dim]}")
    order = argsort(x, dim, descending=largest).array
    indices = xp_of(order).take(order, range(k), axis=dim)
    return ValuesIndices(Gather.apply(x, indices, dim), Tensor(indices))
