"""Flash attention: the same result as scaled_dot_product_attention in O(N) memory, block by block with an online
softmax (FlashAttention-2, Dao 2023). ReferenceFlashAttention is the algorithm in its own names (lesson 04 derives
it); the fast twin, the same loops arranged for speed on the CPU, is in flash_attention_fast.py; on the GPU,
float32 inputs run the CUDA kernels of flash_kernel.py. flash_trace.py watches the reference's loops tile by tile
through tile_recorder."""
import contextvars

from .. import cpu
from ..backend import broadcast_shapes, xp_of
from ..tensor import Function, Tensor
from . import flash_kernel, twins
from .attention_inputs import (additive_mask, check_attention_inputs, check_mask_choice, default_scale, group_heads,
                               group_size, merge_heads, split_heads, ungroup_grad, with_row_and_key_axes)


# Called with each visited tile's arrays when set (flash_trace.trace_flash_attention sets it); None costs one check
# per block loop.
tile_recorder = contextvars.ContextVar("flash_attention_tile_recorder", default=None)


def _blocks(n, block_size):
    return [slice(start, min(start + block_size, n)) for start in range(0, n, block_size)]


def _visible(rows, cols, is_causal):
    """Whether any query of the row block may see any key of the column block (causal: key j <= query i)."""
    return not is_causal or cols.start <= rows.stop - 1


def _block_bias(mask, rows, cols, is_causal, like):
    """What to add to one (row block, column block) of scores: 0 where a query may see a key, -inf where not, or a
    float mask's values; None when nothing in the block is masked.

    mask is the user's mask in the grouped layout with size-1 dims left unbroadcast, so a (B, 1, 1, S) padding mask
    costs O(S) however long the queries are; only dims of full size are sliced.
    """
    xp = xp_of(like)
    bias = None
    if is_causal and cols.stop - 1 > rows.start:                        # the block crosses the diagonal
        may_see = xp.arange(cols.start, cols.stop)[None, :] <= xp.arange(rows.start, rows.stop)[:, None]
        bias = additive_mask(may_see, like.dtype)
    if mask is not None:
        part = mask[..., rows if mask.shape[-2] != 1 else slice(None), cols if mask.shape[-1] != 1 else slice(None)]
        part = additive_mask(part, like.dtype)
        bias = part if bias is None else bias + part
    return bias


def handed_out_lse(L, dtype):
    """Each row's log-sum-exp L (..., Hq, T), as a Function keeps it, as return_lse hands it out: in float32 at least
    (float64 for float64 inputs), and -inf, the log of an empty sum, for a row that sees no key, where the Functions
    keep +inf (so that their backward's exp(S - L) is 0 there)."""
    xp = xp_of(L)
    L = L.astype(xp.promote_types(dtype, xp.float32))
    return Tensor(xp.where(L == xp.inf, -xp.inf, L))


def _scores(q_block, k_block, scale, bias):
    """S = scale * Qi Kj^T + mask for one block."""
    s = scale * (q_block @ xp_of(q_block).swapaxes(k_block, -1, -2))
    return s if bias is None else s + bias


class ReferenceFlashAttention(Function):
    """Never forms the N x M scores. Forward, for each row block Qi: m = -inf, l = 0, acc = 0; then for each
    column block Kj, Vj that it may see:
        S = scale Qi Kj^T + mask;  m_new = max(m, rowmax S);  P = exp(S - m_new);  alpha = exp(m - m_new)
        l = alpha l + rowsum P;  acc = alpha acc + P Vj;  m = m_new
    and Oi = acc / l, Li = m + log l (each row's log-sum-exp). Only Q, K, V, O and L are kept for backward, which
    recomputes every block's P exactly as exp(S - Li) and, with D = rowsum(dO * O) (= rowsum(dP * P)):
        dVj += P^T dOi;  dP = dOi Vj^T;  dS = P * (dP - Di);  dQi += scale dS Kj;  dKj += scale dS^T Qi
    A row that has seen only masked keys keeps m = -inf, so exp is taken against 0 there (no -inf - -inf = NaN); a
    row with every key masked ends with l = 0: output 0 and L = +inf, so its recomputed P is 0. L is kept in float64:
    in the inputs' dtype, m + log l would round to half of L's last place (1/64 at logits of 4e5 in float32, 2 at
    5e3 in float16), and exp(S - L) would pass that error on to every P of the row. lse_into, a list, receives L
    (..., Hq, T) for return_lse.
    """

    @staticmethod
    def forward(ctx, q, k, v, mask, scale, is_causal, enable_gqa, block_size, lse_into=None):
        xp = xp_of(q)
        q, k, v, mask, groups = group_heads(q, k, v, mask, enable_gqa)
        batch = broadcast_shapes(q.shape[:-2], k.shape[:-2])
        out = xp.zeros(batch + (q.shape[-2], v.shape[-1]), dtype=q.dtype)
        L = xp.zeros(batch + (q.shape[-2], 1), dtype=xp.float64)
        zero = xp.zeros((), dtype=q.dtype)
        record = tile_recorder.get()
        for rows in _blocks(q.shape[-2], block_size):
            m = xp.full(batch + (rows.stop - rows.start, 1), -xp.inf, dtype=q.dtype)
            l = xp.zeros_like(m)
            acc = xp.zeros(batch + (rows.stop - rows.start, v.shape[-1]), dtype=q.dtype)
            for cols in _blocks(k.shape[-2], block_size):
                if not _visible(rows, cols, is_causal):
                    continue
                s = _scores(q[..., rows, :], k[..., cols, :], scale, _block_bias(mask, rows, cols, is_causal, q))
                m_new = xp.maximum(m, s.max(axis=-1, keepdims=True))
                shift = xp.where(m_new == -xp.inf, zero, m_new)
                p = xp.exp(s - shift)
                alpha = xp.exp(m - shift)
                l_new = alpha * l + p.sum(axis=-1, keepdims=True)
                acc = alpha * acc + p @ v[..., cols, :]
                if record is not None:
                    record("forward", rows, cols, scores=s, p=p, m_before=m, m=m_new, l_before=l, l=l_new,
                           alpha=alpha, acc=acc)
                m, l = m_new, l_new
            empty = l == 0
            out[..., rows, :] = xp.where(empty, zero, acc / xp.where(empty, 1, l))
            L[..., rows, :] = xp.where(empty, xp.inf, m.astype(L.dtype) + xp.log(xp.where(empty, 1, l)))
        if lse_into is not None:
            lse_into.append(merge_heads(L, groups)[..., 0])
        ctx.save_for_backward(q, k, v, out, L, mask)
        ctx.options = (scale, is_causal, block_size, groups)
        return merge_heads(out, groups)

    @staticmethod
    def backward(ctx, grad):
        q, k, v, out, L, mask = ctx.saved_tensors
        scale, is_causal, block_size, groups = ctx.options
        xp = xp_of(grad)
        grad = split_heads(grad, groups)
        D = (grad * out).sum(axis=-1, keepdims=True)
        grad_q = xp.zeros(out.shape[:-1] + q.shape[-1:], dtype=q.dtype)
        grad_k = xp.zeros(out.shape[:-2] + k.shape[-2:], dtype=q.dtype)
        grad_v = xp.zeros(out.shape[:-2] + v.shape[-2:], dtype=q.dtype)
        record = tile_recorder.get()
        for cols in _blocks(k.shape[-2], block_size):
            for rows in _blocks(q.shape[-2], block_size):
                if not _visible(rows, cols, is_causal):
                    continue
                s = _scores(q[..., rows, :], k[..., cols, :], scale, _block_bias(mask, rows, cols, is_causal, q))
                # S - L in L's float64, rounded once to the inputs' dtype: P, dP, dS and the products stay in it
                p = xp.exp((s - L[..., rows, :]).astype(s.dtype))
                dv = xp.swapaxes(p, -1, -2) @ grad[..., rows, :]
                dp = grad[..., rows, :] @ xp.swapaxes(v[..., cols, :], -1, -2)
                ds = p * (dp - D[..., rows, :])
                dq = scale * (ds @ k[..., cols, :])
                dk = scale * (xp.swapaxes(ds, -1, -2) @ q[..., rows, :])
                if record is not None:
                    record("backward", rows, cols, scores=s, p=p, dp=dp, ds=ds, dq=dq, dk=dk, dv=dv)
                grad_q[..., rows, :] += dq
                grad_k[..., cols, :] += dk
                grad_v[..., cols, :] += dv
        return (merge_heads(grad_q, groups), ungroup_grad(grad_k, groups), ungroup_grad(grad_v, groups),
                None, None, None, None, None)


def flash_attention(query, key, value, attn_mask=None, is_causal=False, scale=None, enable_gqa=False,
                    block_size=None, fused=None, return_lse=False):
    """Blockwise online-softmax attention: the same result as scaled_dot_product_attention, O(N) memory.

    Same arguments and mask conventions as scaled_dot_product_attention (boolean True = may attend, a float mask is
    added, is_causal top-left aligned). A float mask gets no gradient here; use scaled_dot_product_attention for a
    learned bias.

    block_size: query rows and keys per block; it need not divide the lengths. None picks one for the machine
    (cpu.attention_block): 256, or, where OpenBLAS runs its kernels for AVX-512 CPUs, as large as keeps every
    product of a block within those kernels' small-product limit (124 at head size 64, 174 at 32).

    fused picks the implementation on the GPU: the CUDA kernels of flash_kernel.py (True; an error says why when
    they cannot run these inputs), the array code above (False), or the kernels whenever they can and neither the
    reference path nor a Function of one's own (F.use) is on (None: float32 CUDA tensors, no attn_mask, one head
    size, a multiple of 4 up to 128). The kernels multiply on the tensor cores to float32's accuracy (3xTF32), or in
    plain TF32 (errors near 5e-4 relative, about twice as fast) when CuPy's TF32 switch is on (CUPY_TF32=1).

    return_lse=True returns (out, lse): lse (..., Hq, L) holds each query row's log-sum-exp of its scaled, masked
    scores, the L the algorithm keeps for its backward, so that a FlashAttention of one's own can be checked against
    it. lse carries no gradient (as the logsumexp output of PyTorch's private _scaled_dot_product_flash_attention); it
    is in float32 at least (float64 for float64 inputs), and -inf for a row with every key masked (log 0, as
    PyTorch's flex_attention returns it; flash-attn's kernels store +inf there for their own backward).
    """
    check_mask_choice(attn_mask, is_causal)
    check_attention_inputs(query, key, value, attn_mask, enable_gqa, "flash_attention")
    if isinstance(attn_mask, Tensor):
        if attn_mask.requires_grad:
            raise ValueError("flash_attention does not differentiate a float attn_mask; use "
                             "scaled_dot_product_attention for a learned bias")
        attn_mask = attn_mask.array
    attn_mask = with_row_and_key_axes(attn_mask)
    if block_size is None:
        block_size = cpu.attention_block(max(query.shape[-1], value.shape[-1]), query.array)
    if block_size < 1:
        raise ValueError(f"block_size must be positive, got {block_size}")
    scale = default_scale(query, scale)
    lse = [] if return_lse else None
    if fused or (fused is None and twins.runs_fast("flash_attention")):
        reason = flash_kernel.unsupported(query, key, value, attn_mask)
        if reason is None:
            groups = group_size(query.shape, key.shape, value.shape, enable_gqa)
            out = flash_kernel.FusedFlashAttention.apply(query, key, value, scale, bool(is_causal), groups,
                                                         lse_into=lse)
            return (out, handed_out_lse(lse[0], query.dtype)) if return_lse else out
        if fused:
            raise ValueError(f"the fused flash-attention kernels cannot run this: {reason}")
    function = twins.implementation("flash_attention")
    if return_lse and function not in twins.pair("flash_attention"):
        raise ValueError(f"return_lse needs the library's flash attention; {function.__name__}, installed with "
                         "F.use, returns its output only")
    asked = {"lse_into": lse} if return_lse else {}             # nothing more for a Function of one's own
    out = function.apply(query, key, value, attn_mask, scale, bool(is_causal), enable_gqa, int(block_size), **asked)
    return (out, handed_out_lse(lse[0], query.dtype)) if return_lse else out
