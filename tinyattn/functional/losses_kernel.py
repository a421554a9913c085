"""Softmax with cross-entropy as CUDA kernels: what FastCrossEntropy runs on float32 CuPy logits.

The array code makes log_softmax (a max, a subtraction, an exponential, a sum, a logarithm: a pass each) and keeps
it for the backward. Here the forward is one kernel that reads each row of logits once (one warp per row; the lanes
read in strides of 32 and combine with shuffles) and keeps only each row's log-sum-exp L; the backward is one
elementwise pass that makes softmax = exp(logit - L) again where it needs it.

With label smoothing eps over C classes, row i's loss is
    -(1 - eps) log p[t] - eps mean_c log p[c] = L - (1 - eps) logit[t] - eps mean_c logit[c],
and its gradient p - (1 - eps) onehot(t) - eps / C; rows whose target is ignore_index count for nothing.
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

__device__ __forceinline__ float warp_max(float x) {
    for (int offset = 16; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
    return x;
}

extern "C" __global__ void cross_entropy_forward(const float* logits, const long long* target, float* losses,
                                                 float* lse, int rows, int classes, long long ignore_index,
                                                 float smoothing) {
    const int row = blockIdx.x * WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    logits += (size_t)row * classes;
    float largest = -__int_as_float(0x7f800000);
    for (int c = lane; c < classes; c += 32) largest = fmaxf(largest, logits[c]);
    largest = warp_max(largest);
    float exps = 0.f, total = 0.f;   // exp(logit - max) subtracts the max first: no overflow
    for (int c = lane; c < classes; c += 32) {
        exps += expf(logits[c] - largest);
        total += logits[c];
    }
    const float row_lse = largest + logf(warp_sum(exps));
    total = warp_sum(total);
    if (lane > 0) return;
    lse[row] = row_lse;
    const long long t = target[row];
    losses[row] = t == ignore_index ? 0.f : row_lse - (1.f - smoothing) * logits[t] - smoothing * total / classes;
}
"""
# grad = upstream * (exp(logit - L) - (1 - eps) onehot(t) - eps / C) on valid rows, 0 on ignored ones; i is the
# index of the element in the contiguous (rows, classes) output, so i % classes is its class
_BACKWARD = ("grad = valid ? upstream * (expf(logit - lse) - (i % classes == target ? 1.f - smoothing : 0.f)"
             " - smoothing / classes) : 0.f")


def applies(logits):
    """True where these kernels run: float32 logits on the GPU."""
    return is_cupy_array(logits) and logits.dtype == float32


@functools.cache
def _forward_kernel(xp):
    return xp.RawModule(code=_SOURCE).get_function("cross_entropy_forward")


@functools.cache
def _backward_kernel(xp):
    return xp.ElementwiseKernel(
        "float32 logit, float32 lse, int64 target, bool valid, float32 upstream, int32 classes, float32 smoothing",
        "float32 grad", _BACKWARD, "tinyattn_cross_entropy_grad")


def cross_entropy(logits, target, ignore_index, label_smoothing):
    """(per-row losses, per-row log-sum-exp) of contiguous (rows, classes) logits and int64 targets."""
    xp = xp_of(logits)
    rows, classes = logits.shape
    losses, lse = xp.empty(rows, dtype=logits.dtype), xp.empty(rows, dtype=logits.dtype)
    _forward_kernel(xp)(((rows + WARPS - 1) // WARPS,), (32 * WARPS,),
                        (logits, target, losses, lse, xp.int32(rows), xp.int32(classes), xp.int64(ignore_index),
                         xp.float32(label_smoothing)))
    return losses, lse


def cross_entropy_grad(logits, target, valid, lse, upstream, label_smoothing):
    """d loss / d logits; upstream is d(loss)/d(row loss): a scalar, or a column for reduction='none'."""
    return _backward_kernel(xp_of(logits))(logits, lse[:, None], target[:, None], valid[:, None],
                                           upstream.astype(logits.dtype, copy=False), logits.shape[1],
                                           label_smoothing)
