"""Flash attention as fused CUDA kernels: what flash_attention runs on the GPU when it can.

The blockwise FlashAttention in attention.py launches a dozen array ops per block, each a pass over memory; on a
GPU the launches and the passes dominate. flash_attention.cu (beside this file) runs the same algorithm with one
thread block per 64 rows and head: forward, and a backward split in two kernels (dQ per query row, dK and dV per
key) so that no two threads ever add into the same gradient. CuPy compiles it at first use, once per head size.
"""
import math
import os

from ..backend import float32, is_cupy_array, xp_of
from ..tensor import Function

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flash_attention.cu")
ROWS = 64                                    # rows per thread block, as in the .cu file
MAX_HEAD_DIM = 128                           # two 32-row tiles of E floats must fit in 48 KiB of shared memory
# Elements of a row each thread holds: fewer mean fewer registers, more shuffles per dot product. Measured on an
# H100 (B=4, H=16, N=4096, E=64, causal): forward 6.4 ms with 32, 10.4 with 16, 10.9 with 64; forward + backward
# 24 ms with 32, 33 with 16 in the backward, 37 with 8.
ELEMENTS_PER_THREAD = 32
_modules = {}


def threads_per_row(head_dim):
    """Threads sharing one row: the fewest (1, 2 or 4) that leave each at most ELEMENTS_PER_THREAD elements in whole
    float4 chunks; None when head_dim cannot be split that way."""
    for threads in (1, 2, 4):
        if head_dim % (4 * threads) == 0 and head_dim // threads <= ELEMENTS_PER_THREAD:
            return threads
    return None


def unsupported(query, key, value, attn_mask):
    """Why the fused kernels cannot run these inputs (a sentence naming what is off), or None when they can."""
    if not query.dtype == key.dtype == value.dtype == float32:
        return f"it computes in float32, got {query.dtype}, {key.dtype}, {value.dtype}"
    if attn_mask is not None:
        return "it takes no attn_mask (is_causal is supported)"
    e = query.shape[-1]
    if key.shape[-1] != e or value.shape[-1] != e:
        return f"query, key and value need one head size, got {query.shape}, {key.shape}, {value.shape}"
    if e > MAX_HEAD_DIM or threads_per_row(e) is None:
        return f"head size {e} is not supported (a multiple of 4 up to 32, of 8 up to 64, of 16 up to 128)"
    if query.ndim < 3 or query.shape[:-3] != key.shape[:-3] or key.shape != value.shape:
        return (f"it needs (..., heads, length, {e}) inputs with the same batch dims, got {query.shape}, "
                f"{key.shape}, {value.shape}")
    if query.shape[-2] == 0 or key.shape[-2] == 0 or math.prod(query.shape[:-2]) > 65535:
        return f"it needs non-empty sequences and at most 65535 batch x heads, got {query.shape}, {key.shape}"
    if not all(is_cupy_array(t.array) for t in (query, key, value)):
        return f"it needs CUDA tensors, got {query.device}, {key.device}, {value.device}"
    return None


def _kernel(xp, name, head_dim):
    """A compiled kernel and its threads per row; one module per head size, compiled at first use."""
    threads = threads_per_row(head_dim)
    if head_dim not in _modules:
        with open(_SOURCE) as f:
            source = f.read()
        _modules[head_dim] = xp.RawModule(
            code=source, options=(f"-DHEAD_DIM={head_dim}", f"-DTHREADS_PER_ROW={threads}"))
    return _modules[head_dim].get_function(name), threads


def _rows_of(x):
    """x as contiguous (batch * heads, length, E) rows, 16-byte aligned for float4 loads."""
    xp = xp_of(x)
    rows = xp.ascontiguousarray(x).reshape(-1, x.shape[-2], x.shape[-1])
    return rows if rows.data.ptr % 16 == 0 else rows.copy()


def _launch(name, blocks, arrays, sizes, scale, is_causal):
    """Run one kernel over (ceil(rows / 64), heads) thread blocks; ints and the scale go as 32-bit scalars."""
    xp = xp_of(arrays[0])
    kernel, threads = _kernel(xp, name, arrays[0].shape[-1])
    rows, heads = blocks
    kernel(((rows + ROWS - 1) // ROWS, heads), (ROWS * threads,),
           (*arrays, *(xp.int32(s) for s in sizes), xp.float32(scale), xp.int32(is_causal)))


class FusedFlashAttention(Function):
    """Forward and backward of FlashAttention-2 in the CUDA kernels of flash_attention.cu."""

    @staticmethod
    def forward(ctx, q, k, v, scale, is_causal, groups):
        xp = xp_of(q)
        heads = q.shape[-3]
        q3, k3, v3 = _rows_of(q), _rows_of(k), _rows_of(v)
        n, m = q3.shape[1], k3.shape[1]
        out = xp.empty_like(q3)
        lse = xp.empty(q3.shape[:2], dtype=q.dtype)
        _launch("flash_forward", (n, q3.shape[0]), (q3, k3, v3, out, lse),
                (n, m, heads, groups), scale, is_causal)
        ctx.save_for_backward(q3, k3, v3, out, lse)
        ctx.options = (scale, is_causal, heads, groups, q.shape, k.shape)
        return out.reshape(q.shape)

    @staticmethod
    def backward(ctx, grad):
        q3, k3, v3, out, lse = ctx.saved_tensors
        scale, is_causal, heads, groups, q_shape, k_shape = ctx.options
        xp = xp_of(grad)
        grad3 = _rows_of(grad)
        n, m = q3.shape[1], k3.shape[1]
        delta = (grad3 * out).sum(axis=-1)                               # D_i = rowsum(dO * O)
        grad_q, grad_k, grad_v = xp.empty_like(q3), xp.empty_like(k3), xp.empty_like(v3)
        sizes = (n, m, heads, groups)
        _launch("flash_backward_q", (n, q3.shape[0]),
                (q3, k3, v3, grad3, lse, delta, grad_q), sizes, scale, is_causal)
        _launch("flash_backward_kv", (m, k3.shape[0]),
                (q3, k3, v3, grad3, lse, delta, grad_k, grad_v), sizes, scale, is_causal)
        return grad_q.reshape(q_shape), grad_k.reshape(k_shape), grad_v.reshape(k_shape), None, None, None
