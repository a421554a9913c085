"""Attention: naive scaled dot-product attention (exactly PyTorch's definition), the weights for plots,
Bahdanau's additive attention, and blockwise online-softmax ("flash") attention in O(N) memory."""
import math

from .. import threads
from ..backend import is_cupy_array, xp_of
from ..tensor import Function, Tensor
from . import flash_kernel
from .layers import keep_mask, last_axis_sum
from .softmax import softmax_array


def _group_size(q_shape, k_shape, v_shape, enable_gqa):
    """How many query heads share each key/value head (1 without grouping); an error for counts that don't fit."""
    hq, hkv = q_shape[-3] if len(q_shape) >= 3 else 1, k_shape[-3] if len(k_shape) >= 3 else 1
    if hq == hkv:
        return 1
    if not enable_gqa:
        raise ValueError(f"query has {hq} heads but key/value have {hkv}: pass enable_gqa=True for grouped-query "
                         f"attention (q {q_shape}, k {k_shape}, v {v_shape})")
    if hq % hkv:
        raise ValueError(f"grouped-query attention needs query heads ({hq}) divisible by key/value heads ({hkv})")
    return hq // hkv


def _grouped(q, k, v, mask, enable_gqa):
    """Views that let Hq query heads share Hkv key/value heads without copying K and V.

    q (..., Hq, L, E) becomes (..., Hkv, G, L, E); k and v gain a size-1 group axis that broadcasts; the mask is
    viewed the same way. Returns the views and G (1 when there is no grouping).
    """
    groups = _group_size(q.shape, k.shape, v.shape, enable_gqa)
    if groups == 1:
        return q, k, v, mask, 1
    hq, hkv = q.shape[-3], k.shape[-3]
    xp = xp_of(q)
    if mask is not None:
        mask = mask.reshape((1,) * (q.ndim - mask.ndim) + mask.shape)
        head = mask.shape[-3]
        split = (hkv, groups) if head == hq else (1, 1)
        mask = mask.reshape(mask.shape[:-3] + split + mask.shape[-2:])
    q = q.reshape(q.shape[:-3] + (hkv, groups) + q.shape[-2:])
    k, v = xp.expand_dims(k, -3), xp.expand_dims(v, -3)
    return q, k, v, mask, groups


def additive_mask(mask, dtype):
    """A mask as something to add to scores: boolean True (may attend) -> 0, False -> -inf; a float mask as it is."""
    if mask is None or mask.dtype != bool:
        return mask
    xp = xp_of(mask)
    return xp.where(mask, xp.zeros((), dtype=dtype), xp.asarray(-xp.inf, dtype=dtype))


def _scores(q_scaled, k_t, bias):
    """q k^T (q already scaled) plus a mask bias, added in place: attention's largest array is made only once."""
    scores = q_scaled @ k_t
    if bias is not None:
        scores += bias
    return scores


def _masked_scores(q, k, mask, scale):
    """scale * q k^T plus the mask as an additive bias."""
    return _scores(q * scale, xp_of(q).swapaxes(k, -1, -2), additive_mask(mask, q.dtype))


def causal_mask(query_len, key_len, xp, offset=0):
    """Boolean (L, S) mask, True where query i may see key j: j <= i + offset (offset 0: PyTorch's top-left)."""
    return xp.tril(xp.ones((query_len, key_len), dtype=bool), offset)


def _work_parts(batch_shape, n_keys, n_rows, like):
    """Attention's independent pieces of work, as (batch entries, query rows) pairs. Along the first batch axis where
    there is one: as few entries per piece as keep its scores near 2 MiB (in cache), but no more pieces than the
    threads need when the work is small (each piece costs Python time). Else the query rows cut among the threads.
    On the GPU, one piece: all of it."""
    if is_cupy_array(like):
        return [(slice(None), slice(None))]
    if batch_shape and batch_shape[0] > 1:
        scores_per_entry = math.prod(batch_shape[1:]) * n_rows * n_keys
        per_piece = min(-(-batch_shape[0] // threads.get_num_threads()), max(1, (1 << 19) // scores_per_entry))
        return [(entries, slice(None)) for entries in threads.pieces(batch_shape[0], per_piece)]
    return [(slice(None), rows) for rows in threads.one_part_per_thread(n_rows)]


def _part_of(array, part, batch_ndim, n_rows=None):
    """array's share of a part of the work: its batch entries (all of them where it broadcasts along the first batch
    axis), and when n_rows is given its query rows (all where it broadcasts along them, as a mask may)."""
    if array is None:
        return None
    entries, rows = part
    if array.ndim - 2 == batch_ndim and array.shape[0] != 1:
        array = array[entries]
    return array[..., rows, :] if n_rows is not None and array.shape[-2] == n_rows else array


class ScaledDotProductAttention(Function):
    """Batch entries and query rows are independent of one another, so the threads share them (threads.py) in
    forward and backward; the key and value gradients, sums over all query rows, add up what each thread found."""

    @staticmethod
    def forward(ctx, q, k, v, mask, scale, dropout_p, enable_gqa):
        xp = xp_of(q)
        ctx.input_shapes = (q.shape, k.shape, v.shape)
        out_shape = q.shape[:-1] + v.shape[-1:]
        q, k, v, mask, groups = _grouped(q, k, v, mask, enable_gqa)
        n_rows, batch = q.shape[-2], xp.broadcast_shapes(q.shape[:-2], k.shape[:-2])
        out = xp.empty(batch + (n_rows, v.shape[-1]), dtype=q.dtype)
        keep = keep_mask(batch + (n_rows, k.shape[-2]), dropout_p, q) if dropout_p > 0 else None
        parts = _work_parts(batch, k.shape[-2], n_rows, q)
        # The softmax weights, one array per part of the work: a single array for all of them would often be over
        # 32 MiB, and such arrays get fresh pages from the OS on every call (see backend.keep_freed_memory_for_reuse)
        probs = [None] * len(parts)

        def attend(share):
            for i, part in share:
                def rows_of(x):
                    return _part_of(x, part, len(batch), n_rows)
                k_part, v_part = _part_of(k, part, len(batch)), _part_of(v, part, len(batch))
                p = probs[i] = rows_of(q) * scale @ xp.swapaxes(k_part, -1, -2)
                bias = additive_mask(rows_of(mask), q.dtype)
                if bias is not None:
                    p += bias
                softmax_array(p, -1, inplace=True)
                if keep is not None:
                    p = p * rows_of(keep) * (1.0 / (1.0 - dropout_p))
                xp.matmul(p, v_part, out=rows_of(out))
        threads.share(attend, enumerate(parts), q)
        ctx.save_for_backward(q, k, v, keep, out, *probs)
        ctx.parts = parts
        ctx.scale, ctx.dropout_p, ctx.groups = scale, dropout_p, groups
        return out.reshape(out_shape)

    @staticmethod
    def backward(ctx, grad):
        q, k, v, keep, out, *probs = ctx.saved_tensors
        xp = xp_of(grad)
        q_shape, k_shape, v_shape = ctx.input_shapes
        grad = grad.reshape(out.shape)
        batch, n_rows, n_keys = out.shape[:-2], out.shape[-2], k.shape[-2]
        grad_q = xp.empty(batch + (n_rows, q.shape[-1]), dtype=q.dtype)
        # all of dS, for a float mask that wants its gradient (a learned bias)
        grad_mask = xp.empty(batch + (n_rows, n_keys), dtype=q.dtype) if ctx.needs_input_grad[3] else None

        def attend_backward(share):
            # This thread's sums over its query rows, one slot per query head (k and v broadcast over a group)
            grad_k = xp.zeros(batch + k.shape[-2:], dtype=q.dtype)
            grad_v = xp.zeros(batch + v.shape[-2:], dtype=q.dtype)
            for i, part in share:
                def rows_of(x):
                    return _part_of(x, part, len(batch), n_rows)
                p, g = probs[i], rows_of(grad)
                dropped = p if keep is None else p * rows_of(keep) * (1.0 / (1.0 - ctx.dropout_p))
                _part_of(grad_v, part, len(batch))[...] += xp.swapaxes(dropped, -1, -2) @ g
                grad_scores = g @ xp.swapaxes(_part_of(v, part, len(batch)), -1, -2)   # dP, turned into dS:
                if keep is not None:
                    grad_scores *= rows_of(keep)
                    grad_scores *= 1.0 / (1.0 - ctx.dropout_p)
                # Softmax backward, dS = P * (dP - rowsum(dP * P)), with rowsum(dP * P) = rowsum(dO * O)
                # (FlashAttention's identity, dropout included): a sum over E values per row, not over S.
                grad_scores -= (g * rows_of(out)).sum(axis=-1, keepdims=True)
                grad_scores *= p
                xp.matmul(grad_scores, _part_of(k, part, len(batch)), out=rows_of(grad_q))
                _part_of(grad_k, part, len(batch))[...] += xp.swapaxes(grad_scores, -1, -2) @ rows_of(q)
                if grad_mask is not None:
                    rows_of(grad_mask)[...] = grad_scores
            return grad_k, grad_v
        sums = threads.share(attend_backward, enumerate(ctx.parts), grad)
        grad_k, grad_v = sum(s[0] for s in sums), sum(s[1] for s in sums)
        grad_q *= ctx.scale
        grad_k *= ctx.scale
        if ctx.groups > 1:  # each key/value head served a group of query heads: their gradients add up
            grad_k, grad_v = grad_k.sum(axis=-3), grad_v.sum(axis=-3)
        if grad_mask is not None:  # a float mask (a learned bias) is added to the scores
            grad_mask = grad_mask.reshape(q_shape[:-1] + (grad_mask.shape[-1],))
        return grad_q.reshape(q_shape), grad_k.reshape(k_shape), grad_v.reshape(v_shape), grad_mask, None, None, None


def _attention_mask(attn_mask, is_causal, query_len, key_len, like):
    if is_causal:
        if attn_mask is not None:
            raise ValueError("pass either attn_mask or is_causal=True, not both (combine them into one mask)")
        return causal_mask(query_len, key_len, xp_of(like))
    return attn_mask


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """softmax(q k^T * scale + mask) v, exactly as torch.nn.functional.scaled_dot_product_attention defines it.

    query (..., Hq, L, E), key (..., Hkv, S, E), value (..., Hkv, S, Ev). attn_mask broadcasts to (..., Hq, L, S):
    boolean True means "may attend", a float mask is added to the scores (and gets a gradient if it requires one).
    is_causal masks j > i (top-left aligned, as PyTorch). scale defaults to 1/sqrt(E). enable_gqa lets Hq be a
    multiple of Hkv. A query row with every key masked gives output 0 and gradient 0, never NaN.
    """
    mask = _attention_mask(attn_mask, is_causal, query.shape[-2], key.shape[-2], query.data)
    if isinstance(mask, Tensor) and mask.dtype == bool:
        mask = mask.data
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    return ScaledDotProductAttention.apply(query, key, value, mask, scale, float(dropout_p), enable_gqa)


def attention_weights(query, key, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """The (..., Hq, L, S) softmax weights of the naive path, for plots (no graph is recorded)."""
    mask = _attention_mask(attn_mask, is_causal, query.shape[-2], key.shape[-2], query.data)
    mask = mask.data if isinstance(mask, Tensor) else mask
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    q, k, _, mask, _ = _grouped(query.data, key.data, key.data, mask, enable_gqa)
    probs = softmax_array(_masked_scores(q, k, mask, scale), -1, inplace=True)
    return Tensor(probs.reshape(query.shape[:-1] + (key.shape[-2],)))


# -- additive (Bahdanau) attention ------------------------------------------------------------------
def additive_attention(query, key, value, w_query, w_key, v, mask=None, key_proj=None):
    """Bahdanau et al. (2015): score(q, k) = v^T tanh(W_q q + W_k k), softmax over keys, weighted sum of values.

    query (B, Dq) or (B, Lq, Dq); key (B, S, Dk); value (B, S, Dv); w_query (H, Dq), w_key (H, Dk), v (H,).
    mask (B, S) or broadcastable to (B, Lq, S): True = may attend. key_proj lets a decoder pass W_k k, computed once
    per source sentence, instead of recomputing it at every step. Returns (context, weights):
    context (B, [Lq,] Dv), weights (B, [Lq,] S).
    """
    from .. import ops
    from .layers import linear
    single = query.ndim == 2
    if single:
        query = query.unsqueeze(1)
    if key_proj is None:
        key_proj = linear(key, w_key)                                    # (B, S, H)
    q_proj = linear(query, w_query)                                     # (B, Lq, H)
    features = ops.tanh(q_proj.unsqueeze(2) + key_proj.unsqueeze(1))    # (B, Lq, S, H)
    scores = features @ v                                               # (B, Lq, S)
    if mask is not None:
        mask = mask.data if isinstance(mask, Tensor) else mask
        keep = mask[:, None, :] if mask.ndim == 2 else mask
        scores = ops.masked_fill(scores, ~keep, float("-inf"))
    from .softmax import softmax
    weights = softmax(scores, dim=-1)
    context = weights @ value                                           # (B, Lq, Dv)
    if single:
        return context.squeeze(1), weights.squeeze(1)
    return context, weights


# -- blockwise online-softmax ("flash") attention -------------------------------------------------------
def _block_bias(mask, rows, cols, is_causal, like):
    """What to add to one (row block, column block) of scores: 0 where a query may see a key, -inf where not, or a
    float mask's values; None when nothing in the block is masked.

    mask is the user's mask in the grouped layout with size-1 dims left unbroadcast, so a (B, 1, 1, S) padding mask
    costs O(S) however long the queries are; only dims of full size are sliced. Adding a bias in place is cheaper
    than selecting with where() on every block.
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


def _appended(x, value, axis):
    """x with one more slice along axis (-1: a column, -2: a row) holding value, an array or a number."""
    xp = xp_of(x)
    shape = list(x.shape)
    shape[axis] = 1
    return xp.concatenate([x, xp.broadcast_to(xp.asarray(value, dtype=x.dtype), tuple(shape))], axis=axis)


def _last_column_block(row_stop, key_len, is_causal):
    """Column blocks starting at or after this are entirely above the causal diagonal for these rows."""
    return min(key_len, row_stop) if is_causal else key_len


class FlashAttention(Function):
    """FlashAttention-2 (Dao, 2023) on arrays: never forms the N x M score matrix.

    Forward keeps, per query row, a running max m, a running sum l and an unnormalised output; each key block
    rescales them by exp(m_old - m_new). It saves only Q, K, V, O and the log-sum-exp L = m + log(l), and backward
    recomputes each block's probabilities exactly as exp(S - L). Loops run over blocks in Python; every block step
    is vectorised over batch and heads and works in place on its scores buffer. As in FlashAttention-2, the threads
    share out row blocks in forward and column blocks in backward.
    """

    @staticmethod
    def forward(ctx, q, k, v, mask, scale, is_causal, enable_gqa, block_size):
        xp = xp_of(q)
        out_shape = q.shape[:-1] + v.shape[-1:]
        input_shapes = (q.shape, k.shape, v.shape)
        q, k, v, mask, groups = _grouped(q, k, v, mask, enable_gqa)
        q_scaled, k_t = q * scale, xp.swapaxes(k, -1, -2)
        n, m_len = q.shape[-2], k.shape[-2]
        zero, minus_inf = xp.zeros((), dtype=q.dtype), xp.asarray(-xp.inf, dtype=q.dtype)
        out = xp.empty(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
        lse = xp.empty(q.shape[:-1] + (1,), dtype=q.dtype)

        def forward_rows(share):                                        # row blocks are independent
            for r0 in share:
                rows = slice(r0, min(r0 + block_size, n))
                q_block = q_scaled[..., rows, :]
                running_max = xp.full(q_block.shape[:-1] + (1,), -xp.inf, dtype=q.dtype)
                running_sum = xp.zeros(q_block.shape[:-1] + (1,), dtype=q.dtype)
                acc = xp.zeros(q_block.shape[:-1] + v.shape[-1:], dtype=q.dtype)
                for c0 in range(0, _last_column_block(rows.stop, m_len, is_causal), block_size):
                    cols = slice(c0, min(c0 + block_size, m_len))
                    scores = _scores(q_block, k_t[..., cols], _block_bias(mask, rows, cols, is_causal, q))
                    new_max = xp.maximum(running_max, scores.max(axis=-1, keepdims=True))
                    shift = xp.where(new_max == minus_inf, zero, new_max)   # a row masked so far: exp(-inf)=0
                    scores -= shift
                    probs = xp.exp(scores, out=scores)
                    rescale = xp.exp(running_max - shift)
                    running_sum *= rescale
                    running_sum += last_axis_sum(probs)
                    acc *= rescale
                    acc += probs @ v[..., cols, :]
                    running_max = new_max
                empty = running_sum == 0                                # every key masked: output 0
                out[..., rows, :] = acc / xp.where(empty, 1, running_sum)
                lse[..., rows, :] = xp.where(empty, xp.asarray(xp.inf, dtype=q.dtype),
                                             running_max + xp.log(xp.where(empty, 1, running_sum)))
        threads.share(forward_rows, range(0, n, block_size), q)
        ctx.save_for_backward(q, k, v, out, lse, mask)
        ctx.options = (scale, is_causal, block_size, groups)
        ctx.input_shapes = input_shapes
        return out.reshape(out_shape)

    @staticmethod
    def backward(ctx, grad):
        q, k, v, out, lse, mask = ctx.saved_tensors
        scale, is_causal, block_size, groups = ctx.options
        xp = xp_of(grad)
        grad = grad.reshape(out.shape)
        n, m_len = q.shape[-2], k.shape[-2]
        delta = (grad * out).sum(axis=-1, keepdims=True)                # D_i = rowsum(dO * O)
        k_scaled = k * scale                                            # fold the scale into the operands once
        # Each block needs S - L and dP - D. One extra column folds the row offsets into the matmuls:
        # [q, -L] [k, 1]^T = q k^T - L and [dO, -D] [v, 1]^T = dO v^T - D, instead of two passes over every block.
        q_aug, grad_aug = _appended(q * scale, -lse, axis=-1), _appended(grad, -delta, axis=-1)
        k_aug_t, v_aug_t = (_appended(xp.swapaxes(x, -1, -2), 1, axis=-2) for x in (k, v))
        q_scaled = q_aug[..., :-1]
        # One slot per query head (k and v are broadcast over the group axis), summed over each group at the end.
        grad_k = xp.zeros(q.shape[:-2] + k.shape[-2:], dtype=q.dtype)
        grad_v = xp.zeros(q.shape[:-2] + v.shape[-2:], dtype=q.dtype)

        def backward_columns(share):
            # Column blocks are independent for dK and dV; every one adds to dQ, so each thread sums its own dQ.
            grad_q = xp.zeros_like(q)
            for c0 in share:
                cols = slice(c0, min(c0 + block_size, m_len))
                first_row = (c0 // block_size) * block_size if is_causal else 0   # rows above see none of them
                for r0 in range(first_row, n, block_size):
                    rows = slice(r0, min(r0 + block_size, n))
                    q_block, grad_block = q_scaled[..., rows, :], grad[..., rows, :]
                    # S - L, exact: L holds each row's max and sum (+inf if fully masked, so exp gives 0)
                    bias = _block_bias(mask, rows, cols, is_causal, q)
                    scores = _scores(q_aug[..., rows, :], k_aug_t[..., cols], bias)
                    probs = xp.exp(scores, out=scores)
                    grad_v[..., cols, :] += xp.swapaxes(probs, -1, -2) @ grad_block
                    grad_scores = grad_aug[..., rows, :] @ v_aug_t[..., cols]   # dP - D, made dS in place:
                    grad_scores *= probs                                        # dS = P * (dP - D)
                    grad_q[..., rows, :] += grad_scores @ k_scaled[..., cols, :]
                    grad_k[..., cols, :] += xp.swapaxes(grad_scores, -1, -2) @ q_block
            return grad_q
        grad_q = sum(threads.share(backward_columns, range(0, m_len, block_size), grad))
        q_shape, k_shape, v_shape = ctx.input_shapes
        if groups > 1:  # each key/value head served a group of query heads: their gradients add up
            grad_k, grad_v = grad_k.sum(axis=-3), grad_v.sum(axis=-3)
        return (grad_q.reshape(q_shape), grad_k.reshape(k_shape), grad_v.reshape(v_shape),
                None, None, None, None, None)


def flash_attention(query, key, value, attn_mask=None, is_causal=False, scale=None, enable_gqa=False,
                    block_size=256, fused=None):
    """Blockwise online-softmax attention: the same result as scaled_dot_product_attention, O(N) memory.

    Same arguments and mask conventions as scaled_dot_product_attention (boolean True = may attend, a float mask is
    added, is_causal top-left aligned). block_size need not divide the lengths. A float mask gets no gradient here;
    use scaled_dot_product_attention for a learned bias.

    fused picks the implementation: the CUDA kernels of flash_kernel.py (True; an error says why when they cannot
    run these inputs), the blockwise array code below (False), or the kernels whenever they can (None: float32
    CUDA tensors, no attn_mask, one head size, a multiple of 4 up to 128).
    """
    if is_causal and attn_mask is not None:
        raise ValueError("pass either attn_mask or is_causal=True, not both (combine them into one mask)")
    if isinstance(attn_mask, Tensor):
        if attn_mask.requires_grad:
            raise ValueError("flash_attention does not differentiate a float attn_mask; use "
                             "scaled_dot_product_attention for a learned bias")
        attn_mask = attn_mask.data
    if block_size < 1:
        raise ValueError(f"block_size must be positive, got {block_size}")
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    if fused is not False:
        reason = flash_kernel.unsupported(query, key, value, attn_mask)
        if reason is None:
            groups = _group_size(query.shape, key.shape, value.shape, enable_gqa)
            return flash_kernel.FusedFlashAttention.apply(query, key, value, scale, bool(is_causal), groups)
        if fused:
            raise ValueError(f"the fused flash-attention kernels cannot run this: {reason}")
    return FlashAttention.apply(query, key, value, attn_mask, scale, bool(is_causal), enable_gqa, int(block_size))
