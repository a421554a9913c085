"""LayerNorm's forward and its backward for x as single CUDA kernels: what FastLayerNorm runs on float32 CuPy
arrays with a weight and a bias (nn.LayerNorm's; without them it runs the array code).

The array code takes a dozen launches per direction, each a pass over the activations; these kernels read each row
once from memory. One warp per row: the lanes read it in strides of 32 (coalesced) and sum with shuffles; the
second and third passes over the row (variance about the mean, output) find it in the L1 cache. The weight and
bias gradients, sums over all rows, stay array code (two products with a ones vector).
"""
import functools

from ..backend import float32, is_cupy_array, xp_of

WARPS = 4                        # rows per thread block
_SOURCE = r"""
#define WARPS 4
__device__ __forceinline__ float warp_sum(float x) {
    for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
}

// normed = (x - mean) / sqrt(var + eps), y = normed * weight + bias, rstd = 1 / sqrt(var + eps), per row of n
extern "C" __global__ void layer_norm_forward(const float* x, const float* weight, const float* bias, float* y,
                                              float* normed, float* rstd, int rows, int n, float eps) {
    const int row = blockIdx.x * WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    x += (size_t)row * n; y += (size_t)row * n; normed += (size_t)row * n;
    float sum = 0.f;
    for (int c = lane; c < n; c += 32) sum += x[c];
    const float mean = warp_sum(sum) / n;
    float squares = 0.f;   // about the mean, not E[x^2] - mean^2, which cancels
    for (int c = lane; c < n; c += 32) squares += (x[c] - mean) * (x[c] - mean);
    const float r = 1.f / sqrtf(warp_sum(squares) / n + eps);
    for (int c = lane; c < n; c += 32) {
        const float h = (x[c] - mean) * r;
        normed[c] = h;
        y[c] = h * weight[c] + bias[c];
    }
    if (lane == 0) rstd[row] = r;
}

// with g = dy * weight: dx = rstd * (g - mean(g) - normed * mean(g * normed)), per row
extern "C" __global__ void layer_norm_backward(const float* grad, const float* normed, const float* rstd,
                                               const float* weight, float* grad_x, int rows, int n) {
    const int row = blockIdx.x * WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    grad += (size_t)row * n; normed += (size_t)row * n; grad_x += (size_t)row * n;
    float sum = 0.f, dot = 0.f;
    for (int c = lane; c < n; c += 32) {
        const float g = grad[c] * weight[c];
        sum += g;
        dot += g * normed[c];
    }
    const float mean = warp_sum(sum) / n, mean_dot = warp_sum(dot) / n, r = rstd[row];
    for (int c = lane; c < n; c += 32) grad_x[c] = r * (grad[c] * weight[c] - mean - normed[c] * mean_dot);
}
"""


def applies(x, weight, bias):
    """True where these kernels run: float32 CuPy arrays, with a weight and a bias."""
    return (is_cupy_array(x) and weight is not None and bias is not None
            and x.dtype == weight.dtype == bias.dtype == float32)


@functools.cache
def _kernel(xp, name):
    return xp.RawModule(code=_SOURCE).get_function(name)


def _launch(name, rows, args):
    xp = xp_of(args[0])
    _kernel(xp, name)(((rows + WARPS - 1) // WARPS,), (32 * WARPS,), args)


def layer_norm(x, weight, bias, n_features, eps):
    """(y, normed, rstd) for x as (rows, n_features); rstd as a column."""
    xp = xp_of(x)
    rows = xp.ascontiguousarray(x).reshape(-1, n_features)
    y, normed = xp.empty_like(rows), xp.empty_like(rows)
    rstd = xp.empty((rows.shape[0], 1), dtype=x.dtype)
    _launch("layer_norm_forward", rows.shape[0], (rows, xp.ascontiguousarray(weight), xp.ascontiguousarray(bias), y,
                                                  normed, rstd, xp.int32(rows.shape[0]), xp.int32(n_features),
                                                  xp.float32(eps)))
    return y, normed, rstd


def layer_norm_grad(grad, normed, rstd, weight):
    """dx for the rows of normed (contiguous, as layer_norm made them)."""
    xp = xp_of(grad)
    grad = xp.ascontiguousarray(grad)
    grad_x = xp.empty_like(normed)
    _launch("layer_norm_backward", normed.shape[0], (grad, normed, rstd, xp.ascontiguousarray(weight), grad_x,
                                                     xp.int32(normed.shape[0]), xp.int32(normed.shape[1])))
    return grad_x
