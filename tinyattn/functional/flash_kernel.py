"""Flash attention as fused CUDA kernels on the tensor cores: what flash_attention runs on the GPU when it can.

The blockwise FlashAttention in flash_attention.py launches a dozen array ops per block, each a pass over memory; on
a GPU the launches and the passes dominate. flash_attention.cu (beside this file) runs the same algorithm with one
thread block per 64 rows and head, every block product on the tensor cores (mma.sync in TF32 with float32 sums):
forward, and a backward split in two kernels (dQ per query row, dK and dV per key) so that no two threads ever add
into the same gradient. CuPy compiles it at first use, once per head size and precision.

Precision: by default each float32 operand goes in as two TF32 numbers and each product as three (3xTF32, as
CUTLASS does and PyTorch's float32 attention kernels too): float32's accuracy, 2e-7 to 8e-7 relative against float64
(measured on an H100), so the GPU path passes the same tests as the CPU's. With CuPy's TF32 switch on (CUPY_TF32=1,
which also lets CuPy's own matrix products use TF32) or ta.set_float32_matmul_precision("high") one TF32 product:
about twice as fast, with errors of 3e-4 to 7e-4 relative. tests/test_attention.py bounds both.
"""
import math
import os

from ..backend import float32, get_float32_matmul_precision, is_cupy_array, xp_of
from ..tensor import Function

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flash_attention.cu")
ROWS = 64                                    # rows per thread block, as in the .cu file
THREADS = 128                                # 4 warps of 16 rows
MAX_HEAD_DIM = 128
_modules, _kernels = {}, {}


def tile_rows(head_dim):
    """Rows of K and V (forward, dQ) or of Q and dO (dK, dV) per shared-memory tile. Measured on an H100 (B=4,
    H=16, N=4096, causal, forward + backward): at head size 64, 64-row tiles beat 32 by 6-8%; at 128, 32-row tiles
    beat 64 by 12% and leave the dK/dV kernel, which holds 2 x 16 x E accumulators per warp, within 255 registers."""
    return 64 if head_dim <= 64 else 32


def uses_tf32():
    """True when CuPy's TF32 switch is on, or set_float32_matmul_precision allows less than "highest": then the
    kernels multiply in plain TF32."""
    return os.environ.get("CUPY_TF32", "0") != "0" or get_float32_matmul_precision() != "highest"


def unsupported(query, key, value, attn_mask):
    """Why the fused kernels cannot run these inputs (a sentence naming what is off), or None when they can."""
    if not query.dtype == key.dtype == value.dtype == float32:
        return f"it computes in float32, got {query.dtype}, {key.dtype}, {value.dtype}"
    if attn_mask is not None:
        return "it takes no attn_mask (is_causal is supported)"
    e = query.shape[-1]
    if key.shape[-1] != e or value.shape[-1] != e:
        return f"query, key and value need one head size, got {query.shape}, {key.shape}, {value.shape}"
    if e > MAX_HEAD_DIM or e % 4:
        return f"head size {e} is not supported (a multiple of 4 up to {MAX_HEAD_DIM})"
    if query.ndim < 3 or query.shape[:-3] != key.shape[:-3] or key.shape != value.shape:
        return (f"it needs (..., heads, length, {e}) inputs with the same batch dims, got {query.shape}, "
                f"{key.shape}, {value.shape}")
    if query.shape[-2] == 0 or key.shape[-2] == 0 or math.prod(query.shape[:-2]) > 65535:
        return f"it needs non-empty sequences and at most 65535 batch x heads, got {query.shape}, {key.shape}"
    if not all(is_cupy_array(t.array) for t in (query, key, value)):
        return f"it needs CUDA tensors, got {query.device}, {key.device}, {value.device}"
    capability = xp_of(query.array).cuda.Device().compute_capability
    if int(capability) < 80:
        return f"it needs tensor cores with TF32 (compute capability 8.0 or newer), got {capability}"
    return None


def _shared_bytes(name, head_dim, tile):
    """Dynamic shared memory of one thread block: rows of (E rounded up to 8) + 4 floats, as in the .cu file."""
    stride = -(-head_dim // 8) * 8 + 4
    rows = {"flash_forward": ROWS + 2 * tile, "flash_backward_q": 2 * ROWS + 2 * tile,
            "flash_backward_kv": 2 * ROWS + 2 * tile}[name]
    extra = 2 * tile if name == "flash_backward_kv" else 0          # its tiles of L and D
    return 4 * (rows * stride + extra)


def _kernel(xp, name, head_dim):
    """A compiled kernel and its shared memory in bytes. One module per head size and precision, compiled at first
    use (CuPy keeps the binary on disk too)."""
    split, tile = int(not uses_tf32()), tile_rows(head_dim)
    if (name, head_dim, split) not in _kernels:
        options = (f"-DHEAD_DIM={head_dim}", f"-DTILE={tile}", f"-DSPLIT={split}")
        if options not in _modules:
            with open(_SOURCE) as f:
                _modules[options] = xp.RawModule(code=f.read(), options=options)
        kernel, shared = _modules[options].get_function(name), _shared_bytes(name, head_dim, tile)
        kernel.max_dynamic_shared_size_bytes = shared                    # above 48 KiB it must be asked for
        _kernels[name, head_dim, split] = kernel, shared
    return _kernels[name, head_dim, split]


def _rows_of(x):
    """x as contiguous (batch * heads, length, E) rows, 16-byte aligned for float4 loads."""
    xp = xp_of(x)
    rows = xp.ascontiguousarray(x).reshape(-1, x.shape[-2], x.shape[-1])
    return rows if rows.data.ptr % 16 == 0 else rows.copy()


def _launch(name, blocks, arrays, sizes, scale, is_causal):
    """Run one kernel over (ceil(rows / 64), heads) thread blocks; ints and the scale go as 32-bit scalars."""
    xp = xp_of(arrays[0])
    kernel, shared = _kernel(xp, name, arrays[0].shape[-1])
    rows, heads = blocks
    kernel(((rows + ROWS - 1) // ROWS, heads), (THREADS,),
           (*arrays, *(xp.int32(s) for s in sizes), xp.float32(scale), xp.int32(is_causal)), shared_mem=shared)


class FusedFlashAttention(Function):
    """Forward and backward of FlashAttention-2 in the CUDA kernels of flash_attention.cu."""

    @staticmethod
    def forward(ctx, q, k, v, scale, is_causal, groups, lse_into=None):
        xp = xp_of(q)
        heads = q.shape[-3]
        q3, k3, v3 = _rows_of(q), _rows_of(k), _rows_of(v)
        n, m = q3.shape[1], k3.shape[1]
        out = xp.empty_like(q3)
        lse = xp.empty(q3.shape[:2], dtype=q.dtype)
        _launch("flash_forward", (n, q3.shape[0]), (q3, k3, v3, out, lse),
                (n, m, heads, groups), scale, is_causal)
        if lse_into is not None:                # the kernel's L: each row's log-sum-exp, +inf for a row with no key
            lse_into.append(lse.reshape(q.shape[:-1]))
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
