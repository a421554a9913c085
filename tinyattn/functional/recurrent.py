"""One GRU step as a fused Function: one graph node per time step instead of about seventeen."""
from .. import cpu
from ..backend import xp_of
from ..ops import sigmoid_array
from ..tensor import Function
from . import twins


class ReferenceGRUCell(Function):
    """One GRU step given x_proj = x W_ih^T + b_ih (computed for all steps at once by the caller), with
    h_r, h_z, h_n the three parts of h W_hh^T + b_hh, in PyTorch's gate order:
    r = s(x_r + h_r), z = s(x_z + h_z), n = tanh(x_n + r * h_n), h' = (1 - z) n + z h.

    Backward: dn = dh' (1 - z) (1 - n^2), dz = dh' (h - n) z (1 - z), dr = dn h_n r (1 - r); x_proj gets
    [dr, dz, dn], h W_hh^T + b_hh gets [dr, dz, dn * r], and through it h, W_hh and b_hh; h also gets dh' z.
    """

    @staticmethod
    def forward(ctx, x_proj, h, w_hh, b_hh):
        xp = xp_of(h)
        gh = h @ w_hh.T if b_hh is None else h @ w_hh.T + b_hh
        x_r, x_z, x_n = xp.split(x_proj, 3, axis=-1)
        h_r, h_z, h_n = xp.split(gh, 3, axis=-1)
        r, z = sigmoid_array(x_r + h_r), sigmoid_array(x_z + h_z)
        n = xp.tanh(x_n + r * h_n)
        ctx.save_for_backward(h, r, z, n, h_n, w_hh)
        return (1 - z) * n + z * h

    @staticmethod
    def backward(ctx, grad):
        h, r, z, n, h_n, w_hh = ctx.saved_tensors
        xp = xp_of(grad)
        d_n = grad * (1 - z) * (1 - n * n)
        d_z = grad * (h - n) * z * (1 - z)
        d_r = d_n * h_n * r * (1 - r)
        d_x = xp.concatenate([d_r, d_z, d_n], axis=-1)
        d_gh = xp.concatenate([d_r, d_z, d_n * r], axis=-1)
        rows_of_d_gh, rows_of_h = d_gh.reshape(-1, d_gh.shape[-1]), h.reshape(-1, h.shape[-1])
        return d_x, grad * z + d_gh @ w_hh, rows_of_d_gh.T @ rows_of_h, rows_of_d_gh.sum(axis=0)


@cpu.tuned
class FastGRUCell(ReferenceGRUCell):
    """The same step; the sigmoid's choice of formula made by arithmetic instead of where() (cpu.sigmoid) and the
    bias added in place. The backward is the reference's."""

    @staticmethod
    def forward(ctx, x_proj, h, w_hh, b_hh):
        xp = xp_of(h)
        size = h.shape[-1]
        gh = h @ w_hh.T
        if b_hh is not None:
            gh += b_hh
        r = cpu.sigmoid(x_proj[..., :size] + gh[..., :size])
        z = cpu.sigmoid(x_proj[..., size:2 * size] + gh[..., size:2 * size])
        h_n = gh[..., 2 * size:]
        n = xp.tanh(x_proj[..., 2 * size:] + r * h_n)
        ctx.save_for_backward(h, r, z, n, h_n, w_hh)
        return n + z * (h - n)


twins.register("gru_cell", FastGRUCell, ReferenceGRUCell)


def gru_cell(x_proj, h, w_hh, b_hh=None):
    return twins.implementation("gru_cell").apply(x_proj, h, w_hh, b_hh)
