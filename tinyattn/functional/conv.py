"""conv2d: input (B, C, H, W), weight (O, C, kh, kw) -> (B, O, H', W'), as torch.nn.functional.conv2d; and unfold,
the windows a convolution reads as columns (im2col), which the fast conv2d multiplies by its weight."""
from .. import cpu
from ..backend import xp_of
from ..tensor import Function
from . import twins


def _padded(x, padding):
    ph, pw = padding
    return xp_of(x).pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))


def _output_size(x_shape, weight_shape, stride, padding):
    (sh, sw), (ph, pw) = stride, padding
    return (x_shape[2] + 2 * ph - weight_shape[2]) // sh + 1, (x_shape[3] + 2 * pw - weight_shape[3]) // sw + 1


def _window(i, j, stride, out_h, out_w):
    """The positions that kernel offset (i, j) reads for every output pixel: a strided slice of the padded input."""
    (sh, sw) = stride
    return (slice(None), slice(None), slice(i, i + sh * out_h, sh), slice(j, j + sw * out_w, sw))


def im2col(x, kernel, stride, padding):
    """(B, C, H, W) -> (B, C, kh, kw, H', W'): [:, :, i, j] is the window that kernel offset (i, j) reads for every
    output pixel (zeros beyond the border)."""
    xp = xp_of(x)
    padded = _padded(x, padding)
    out_h, out_w = _output_size(x.shape, (None, None) + tuple(kernel), stride, padding)
    cols = xp.empty(x.shape[:2] + tuple(kernel) + (out_h, out_w), dtype=x.dtype)
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            cols[:, :, i, j] = padded[_window(i, j, stride, out_h, out_w)]
    return cols


def col2im(cols, x_shape, stride, padding):
    """The adjoint of im2col: every window's values added back where it was read (overlapping windows add up)."""
    (ph, pw), (kh, kw), (out_h, out_w) = padding, cols.shape[2:4], cols.shape[4:]
    padded = xp_of(cols).zeros(x_shape[:2] + (x_shape[2] + 2 * ph, x_shape[3] + 2 * pw), dtype=cols.dtype)
    for i in range(kh):
        for j in range(kw):
            padded[_window(i, j, stride, out_h, out_w)] += cols[:, :, i, j]
    return padded[:, :, ph:ph + x_shape[2], pw:pw + x_shape[3]]


class Unfold(Function):
    """x (B, C, H, W) -> (B, C * kh * kw, H' * W'): each output pixel's window as a column (im2col), as
    torch.nn.functional.unfold; backward adds each window's gradient back where it was read."""

    @staticmethod
    def forward(ctx, x, kernel, stride, padding):
        cols = im2col(x, kernel, stride, padding)
        ctx.geometry = (x.shape, cols.shape, stride, padding)
        return cols.reshape(cols.shape[0], -1, cols.shape[-2] * cols.shape[-1])

    @staticmethod
    def backward(ctx, grad):
        x_shape, cols_shape, stride, padding = ctx.geometry
        return col2im(grad.reshape(cols_shape), x_shape, stride, padding), None, None, None


class ReferenceConv2d(Function):
    """out[b, o, y, x] = bias[o] + sum over c, i, j of w[o, c, i, j] * in[b, c, y*sh + i, x*sw + j] (input padded).

    Written as a sum over kernel offsets (i, j): each adds w[:, :, i, j] times the input window it reads. Backward
    follows the same sum: dw[:, :, i, j] = dout . window(i, j); the window (i, j) gets w[:, :, i, j]^T dout, and
    windows that overlap add up; db = dout summed over batch and pixels.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, stride, padding):
        xp = xp_of(x)
        padded = _padded(x, padding)
        out_h, out_w = _output_size(x.shape, weight.shape, stride, padding)
        out = xp.zeros((x.shape[0], weight.shape[0], out_h, out_w), dtype=x.dtype)
        for i in range(weight.shape[2]):
            for j in range(weight.shape[3]):
                out += xp.einsum("oc,bcyx->boyx", weight[:, :, i, j], padded[_window(i, j, stride, out_h, out_w)])
        ctx.save_for_backward(padded, weight)
        ctx.geometry = (x.shape, stride, padding)
        return out if bias is None else out + bias[:, None, None]

    @staticmethod
    def backward(ctx, grad):
        padded, weight = ctx.saved_tensors
        x_shape, stride, (ph, pw) = ctx.geometry
        xp = xp_of(grad)
        out_h, out_w = grad.shape[2:]
        grad_w = xp.zeros_like(weight)
        grad_padded = xp.zeros_like(padded)
        for i in range(weight.shape[2]):
            for j in range(weight.shape[3]):
                window = _window(i, j, stride, out_h, out_w)
                grad_w[:, :, i, j] = xp.einsum("boyx,bcyx->oc", grad, padded[window])
                grad_padded[window] += xp.einsum("oc,boyx->bcyx", weight[:, :, i, j], grad)
        grad_x = grad_padded[:, :, ph:ph + x_shape[2], pw:pw + x_shape[3]]
        return grad_x, grad_w, grad.sum(axis=(0, 2, 3)), None, None


@cpu.tuned
class FastConv2d(Function):
    """im2col: the kernel offsets' windows gathered into one array, then one matmul for all of them."""

    @staticmethod
    def forward(ctx, x, weight, bias, stride, padding):
        cols = im2col(x, weight.shape[2:], stride, padding)
        batch, out_ch, (out_h, out_w) = x.shape[0], weight.shape[0], cols.shape[-2:]
        cols = cols.reshape(batch, -1, out_h * out_w)
        out = weight.reshape(out_ch, -1) @ cols
        if bias is not None:
            out += bias[:, None]
        ctx.save_for_backward(cols, weight)
        ctx.geometry = (x.shape, stride, padding)
        return out.reshape(batch, out_ch, out_h, out_w)

    @staticmethod
    def backward(ctx, grad):
        cols, weight = ctx.saved_tensors
        xp = xp_of(grad)
        x_shape, stride, padding = ctx.geometry
        out_ch = weight.shape[0]
        g = grad.reshape(grad.shape[0], out_ch, -1)
        grad_w = (g @ xp.swapaxes(cols, 1, 2)).sum(axis=0).reshape(weight.shape)
        grad_b = g.sum(axis=(0, 2)) if ctx.needs_input_grad[2] else None
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_cols = (weight.reshape(out_ch, -1).T @ g).reshape(x_shape[:2] + weight.shape[2:] + grad.shape[2:])
            grad_x = col2im(grad_cols, x_shape, stride, padding)
        return grad_x, grad_w, grad_b, None, None


twins.register("conv2d", FastConv2d, ReferenceConv2d)


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """Each output pixel's kernel_size window as a column: (B, C, H, W) -> (B, C * kh * kw, L), channel-major, as
    torch.nn.functional.unfold (dilation 1 only)."""
    if dilation not in (1, (1, 1)):
        raise NotImplementedError("unfold with dilation is not supported")
    if input.ndim != 4:
        raise ValueError(f"unfold needs an input (B, C, H, W), got {input.shape}")
    return Unfold.apply(input, _pair(kernel_size), _pair(stride), _pair(padding))


def conv2d(input, weight, bias=None, stride=1, padding=0):
    """input (B, C, H, W), weight (O, C, kh, kw) -> (B, O, H', W'), as torch.nn.functional.conv2d."""
    if input.ndim != 4 or weight.ndim != 4 or input.shape[1] != weight.shape[1]:
        raise ValueError(f"conv2d needs input (B, C, H, W) and weight (O, C, kh, kw) with equal C, got "
                         f"{input.shape} and {weight.shape}")
    stride, padding = _pair(stride), _pair(padding)
    if min(stride) <= 0 or min(padding) < 0:
        raise RuntimeError(f"conv2d needs positive strides and non-negative padding, got stride {stride} and "
                           f"padding {padding}")
    return twins.implementation("conv2d").apply(input, weight, bias, stride, padding)
