"""Adam and AdamW for many parameters in one CUDA kernel: what Adam.step runs when every parameter, gradient and
moment is a contiguous float32 CuPy array.

The array code takes about ten launches per parameter; a GPT has about a hundred parameters, so a thousand launches a
step, each waiting on Python. Here one launch updates every parameter of a group: row y of the grid of thread blocks
updates parameter y, whose addresses (parameter, gradient, both moments) and size it reads from a small table, and
its threads walk the parameter in strides of the whole row. The arithmetic is Adam._update's, in the same order.
"""
import functools
import math

import numpy

from ..backend import float32, is_cupy_array, xp_of

THREADS = 256
MAX_BLOCKS_PER_PARAMETER = 64
_SOURCE = r"""
// table: the addresses of count parameters, then of their gradients, first moments and second moments, then sizes
extern "C" __global__ void adam_step(const long long* table, int count, float one_minus_beta1, float beta1,
                                     float one_minus_beta2, float beta2, float eps, float weight_decay, int decoupled,
                                     float shrink, float bias_correction2_sqrt, float step_size) {
    const int tensor = blockIdx.y;
    float* p = (float*)table[tensor];
    const float* g = (const float*)table[count + tensor];
    float* m = (float*)table[2 * count + tensor];
    float* v = (float*)table[3 * count + tensor];
    const long long size = table[4 * count + tensor];
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < size;
         i += (long long)gridDim.x * blockDim.x) {
        float grad = g[i], weight = p[i];
        if (decoupled) weight *= shrink;                  // AdamW: p *= 1 - lr * wd, outside the moments
        else if (weight_decay != 0.f) grad += weight_decay * weight;   // Adam: the L2 term joins the gradient
        const float m_i = beta1 * m[i] + one_minus_beta1 * grad;
        const float v_i = beta2 * v[i] + one_minus_beta2 * grad * grad;
        m[i] = m_i;
        v[i] = v_i;
        p[i] = weight - step_size * (m_i / (sqrtf(v_i) / bias_correction2_sqrt + eps));
    }
}
"""


def applies(updates, state):
    """True when every parameter, gradient and moment of these (group, parameter, gradient) updates is a contiguous
    float32 CuPy array."""
    arrays = [a for _, p, g in updates for a in (p.array, g, state[p]["exp_avg"], state[p]["exp_avg_sq"])]
    return bool(arrays) and all(is_cupy_array(a) and a.dtype == float32 and a.flags.c_contiguous for a in arrays)


@functools.cache
def _kernel(xp):
    return xp.RawModule(code=_SOURCE).get_function("adam_step")


def step(updates, state, decoupled):
    """One Adam (decoupled: AdamW) step for every update, one launch per group and step count."""
    batches = {}
    for group, p, g in updates:
        state[p]["step"] += 1
        batches.setdefault((id(group), state[p]["step"]), (group, []))[1].append((p, g))
    for (_, t), (group, batch) in batches.items():
        lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        columns = [[p.array.data.ptr for p, _ in batch], [g.data.ptr for _, g in batch],
                   [state[p]["exp_avg"].data.ptr for p, _ in batch], [state[p]["exp_avg_sq"].data.ptr for p, _ in batch],
                   [p.array.size for p, _ in batch]]
        xp = xp_of(batch[0][1])
        table = xp.asarray(numpy.array(columns, dtype=numpy.int64))
        largest = max(p.array.size for p, _ in batch)
        blocks = min(-(-largest // THREADS), MAX_BLOCKS_PER_PARAMETER)
        f32 = numpy.float32
        _kernel(xp)((blocks, len(batch)), (THREADS,),
                    (table, numpy.int32(len(batch)), f32(1 - beta1), f32(beta1), f32(1 - beta2), f32(beta2), f32(eps),
                     f32(wd), numpy.int32(decoupled), f32(1 - lr * wd), f32(math.sqrt(1 - beta2 ** t)),
                     f32(lr / (1 - beta1 ** t))))
    for _, p, _ in updates:
        p._mark_modified()
