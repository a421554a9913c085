"""Flash attention's fast twin: the loops of ReferenceFlashAttention (flash_attention.py) arranged for speed on the
CPU. Each row keeps the shift it takes from its first column block (no running maximum, no rescaling), the shift
and the running sum ride on products with an appended column of ones, and the CPU layer shares the blocks among
the threads. Registered with twins here, so that the public function never names this class."""
from .. import cpu
from ..backend import broadcast_shapes, silent_float_errors, xp_of
from ..tensor import Function
from . import twins
from .attention_inputs import group_heads, merge_heads, ungroup_grad
from .flash_attention import ReferenceFlashAttention, _block_bias, _blocks, _visible

# A row's sum l = sum exp(S - m) may grow this many times past its count of keys before the forward makes the row
# block again with the true maximum as m (float32 and float64). float16 allows 16, the fourth root of its largest
# value, so that l and the products of such terms with V and dO mostly stay finite; its finiteness check catches
# the rest.
SHIFT_HEADROOM = 2.0 ** 32


def _appended(x, value, axis):
    """x with one more slice along axis (-1: a column, -2: a row) holding value, an array or a number."""
    xp = xp_of(x)
    shape = list(x.shape)
    shape[axis] = 1
    return xp.concatenate([x, xp.broadcast_to(xp.asarray(value, dtype=x.dtype), tuple(shape))], axis=axis)


def _transposed_block_with_ones(x, cols):
    """One column block of [X^T; 1], a new array in the usual (C) order: S = Q K^T reads K^T about 4% faster so than
    as a transposed view of K (OpenBLAS, 256 x 64 blocks), and stays a product that OpenBLAS's small-product kernels
    take (cpu.attention_block); concatenate would keep the view's order. For K, the row of ones makes
    [Q, -m] [K^T; 1] = S - m: the scores arrive shifted by each row's m, with no pass of their own; for V, it makes
    [dO, -D] [V^T; 1] = dP - D."""
    xp = xp_of(x)
    block = x[..., cols, :]
    out = xp.empty(block.shape[:-2] + (block.shape[-1] + 1, block.shape[-2]), dtype=x.dtype)
    out[..., :-1, :] = xp.swapaxes(block, -1, -2)
    out[..., -1, :] = 1
    return out


def _queries_with_shift(q, batch):
    """An empty [scale Q, -m] (one more column, for each row's -m) over batch: what S - m's products read."""
    return xp_of(q).empty(batch + q.shape[-2:-1] + (q.shape[-1] + 1,), dtype=q.dtype)


def _pieces(rows, cols, is_causal):
    """(rows, cols) pieces of one visible block pair, each worth a product of its own. Under a causal mask a block
    that crosses the diagonal comes as pieces of rows (cpu.causal_row_pieces: MASKED_ROWS long, at most half the
    block), each over only the keys up to its last row: at N=4096 in blocks of 256, the scores above the diagonal
    that are computed only to be masked go from 6.2% of the visible ones (half of each diagonal block) to 1.5% (4
    pieces of 64 rows)."""
    if not is_causal or cols.stop - 1 <= rows.start or rows.stop - rows.start < 2:
        return [(rows, cols)]
    return [(part, slice(cols.start, min(cols.stop, part.stop))) for part in cpu.causal_row_pieces(rows)
            if part.stop - 1 >= cols.start]


def _block_scores(q_aug, k_aug_t, rows, cols, keys, mask, is_causal, shifted):
    """S (+ mask) for one piece, or S - m (+ mask) if shifted: rows of [Q, -m] by keys of one block of [K^T; 1]."""
    head = q_aug.shape[-1] - 1
    s = q_aug[..., rows, :] @ k_aug_t[..., keys] if shifted else q_aug[..., rows, :head] @ k_aug_t[..., :head, keys]
    bias = _block_bias(mask, rows, cols, is_causal, q_aug)
    if bias is not None:
        s += bias
    return s


def _shifted_scores(q_aug, k_aug_t, rows, cols, keys, mask, is_causal, take_m=False):
    """exp's argument for one piece, S - m (+ mask), made alike in both passes, so that they round alike. In the
    first column block (which every row sees) S comes plain and the rows' -m, kept in q_aug's last column, is added
    in a pass of its own; with take_m, m is first set to these scores' row maxima (0 for a row that sees none of
    them). Every other block gets S - m straight from the product [Q, -m] [K^T; 1]."""
    first = cols.start == 0
    s = _block_scores(q_aug, k_aug_t, rows, cols, keys, mask, is_causal, shifted=not first)
    if first:
        minus_m = q_aug[..., rows, -1:]
        if take_m:
            xp = xp_of(s)
            m = s.max(axis=-1, keepdims=True)
            xp.negative(xp.where(m == -xp.inf, 0, m), out=minus_m)
        s += minus_m
    return s


@cpu.tuned
class FastFlashAttention(Function):
    """The same result as the reference, its loops arranged for the CPU. Each block step is vectorised over batch
    and heads and in place on its scores buffer. As in FlashAttention-2, the CPU threads share out row blocks in
    forward (each is independent: the threads claim them as they come free, the last, which under a causal mask sees
    the most keys, first) and column blocks in backward (each owns its dK and dV). In backward the heads come in
    lanes, one per thread (cpu.batch_lanes), each with all its column blocks, so that every dQ row is added to by
    one thread; where the threads do not divide the heads, or a lane would hold too few (cpu.split's
    MIN_LANE_ENTRIES: thin lanes make many small NumPy calls), each thread sums a dQ of its own. Under a causal
    mask, a block that crosses the diagonal goes in pieces of rows, each over the keys up to its last row (_pieces),
    in both passes.

    The shift. Each row's m, the number its scores are shifted by before exp, is the maximum of its scores in the
    first column block, and stays so for the rest of the row: no running maximum, no rescaling of the sums, and the
    product `[Q, -m] [K^T; 1]` gives S - m with no pass of its own (_shifted_scores). Later keys may score higher than
    m; that is safe while each row's sum l = sum exp(S - m) stays within [1/2, keys * SHIFT_HEADROOM]: no exp
    overflows, the largest term is not far below 1, and in float32 and float64 1/l stays far from underflowing. A
    row block whose sums leave that range (later scores rising some 22 + log(keys) past the first block's; a row
    that sees none of the first block's keys, m = 0, and sums far from 1; a row that sees no key at all, l = 0), or
    are not finite, is made again with each row's true maximum over all its keys as m.

    The forward's running sum l rides on its product with V: P [V, 1] = [P V, rowsum P], no pass over P of its own.
    The backward recomputes each piece's S - m by the very products the forward made (_shifted_scores: the same
    operands, so the same rounding) and takes P = exp(S - m) / l, not exp(S - L): at large logits a rounded
    L = m + log l is off by up to half its last place (1/64 at |L| ~ 4e5 in float32, 2 at 5e3 in float16), and exp
    makes that a relative error of P as large, while S - m rounds no worse than S itself. 1/l rides on dO's rows:
    dV += exp(S - m)^T (dO / l) and dS = exp(S - m) * ([dO, -D] / l [v, 1]^T), where the extra column folds the
    row offset D into the product (dP and D are of one size, so this rounds as dP - D would)."""

    @staticmethod
    def forward(ctx, q, k, v, mask, scale, is_causal, enable_gqa, block_size, lse_into=None):
        xp = xp_of(q)
        q, k, v, mask, groups = group_heads(q, k, v, mask, enable_gqa)
        batch = broadcast_shapes(q.shape[:-2], k.shape[:-2])
        head = q.shape[-1]
        q_aug = _queries_with_shift(q, batch)                            # [scale Q, -m], m: a row's shift
        column_blocks = _blocks(k.shape[-2], block_size)
        # Each column block's ([K^T; 1], [V, 1]), made by the threads together: P [V, 1] = [P V, rowsum P], the
        # running sum rides on the product.
        augmented = cpu.for_each_part(
            lambda cols: (_transposed_block_with_ones(k, cols), _appended(v[..., cols, :], 1, axis=-1)), column_blocks,
            like=k)
        zero = xp.zeros((), dtype=q.dtype)
        out = cpu.laid_out_like(q, batch + (q.shape[-2], v.shape[-1]), q.dtype)     # as q is, often (B, T, H, E)
        row_sum_inverse = xp.empty(batch + (q.shape[-2], 1), dtype=q.dtype)     # 1 / l, 0 for a row that sees no key
        sum_range = (0.5, k.shape[-2] * min(SHIFT_HEADROOM, float(xp.finfo(q.dtype).max) ** 0.25))

        def visible_pieces(rows):
            for cols, (k_t, v_block) in zip(column_blocks, augmented):
                if not _visible(rows, cols, is_causal):
                    break                                                 # the rest lie above the diagonal too
                for part_rows, part_cols in _pieces(rows, cols, is_causal):
                    keys = slice(0, part_cols.stop - cols.start)
                    yield (slice(part_rows.start - rows.start, part_rows.stop - rows.start), part_rows, part_cols,
                           k_t, keys, v_block[..., keys, :])

        def sums(rows, m_known):
            """[sum_j exp(S_j - m) V_j, l] for one row block; m from the first column block unless m_known."""
            acc = xp.zeros(batch + (rows.stop - rows.start, v.shape[-1] + 1), dtype=q.dtype)     # [P V, l]
            for mine, part_rows, part_cols, k_t, keys, v_keys in visible_pieces(rows):
                p = _shifted_scores(q_aug, k_t, part_rows, part_cols, keys, mask, is_causal, take_m=not m_known)
                cpu.exp_in_place(p)
                acc[..., mine, :] += p @ v_keys
            return acc

        def true_max(rows):
            """Each row's largest score over all the keys it sees; 0 for a row that sees none."""
            m = xp.full(batch + (rows.stop - rows.start, 1), -xp.inf, dtype=q.dtype)
            for mine, part_rows, part_cols, k_t, keys, _ in visible_pieces(rows):
                s = _block_scores(q_aug, k_t, part_rows, part_cols, keys, mask, is_causal, shifted=False)
                xp.maximum(m[..., mine, :], s.max(axis=-1, keepdims=True), out=m[..., mine, :])
            return xp.where(m == -xp.inf, zero, m)

        def forward_rows(rows):                                          # one row block, all its column blocks
            xp.multiply(q[..., rows, :], scale, out=q_aug[..., rows, :head])
            with silent_float_errors(q_aug, overflow=True):              # an overflow is seen below, and mended
                acc = sums(rows, m_known=False)
            l = acc[..., -1:]
            if not (bool(((l >= sum_range[0]) & (l <= sum_range[1])).all()) and bool(xp.isfinite(acc).all())):
                q_aug[..., rows, head:] = -true_max(rows)
                acc = sums(rows, m_known=True)
                l = acc[..., -1:]
            empty = l == 0
            inverse = row_sum_inverse[..., rows, :]
            inverse[...] = xp.where(empty, zero, 1 / xp.where(empty, 1, l))
            xp.multiply(acc[..., :-1], inverse, out=out[..., rows, :])
        # The threads claim row blocks as they come free, the last first: under a causal mask it sees the most keys.
        cpu.for_each_part(forward_rows, _blocks(q.shape[-2], block_size)[::-1], claimed=True, like=q)
        if lse_into is not None:         # L = m + log l from the rows' shifts and 1 / l; +inf where 1 / l = 0 (no key)
            inverse = row_sum_inverse.astype(xp.promote_types(q.dtype, xp.float32))
            seen = inverse != 0
            L = xp.where(seen, -q_aug[..., -1:] - xp.log(xp.where(seen, inverse, 1)), xp.inf)
            lse_into.append(merge_heads(L, groups)[..., 0])
        # Backward gets q itself (in a model a view of the projection that k and v keep alive too) and the rows'
        # shifts, and makes [scale Q, -m] again, bit for bit: q_aug would be a copy of q kept to the end of the step.
        ctx.save_for_backward(q, q_aug[..., head:].copy(), k, v, out, row_sum_inverse, mask)
        ctx.options = (scale, is_causal, block_size, groups)
        return merge_heads(out, groups)

    @staticmethod
    def backward(ctx, grad):
        q, minus_m, k, v, out, row_sum_inverse, mask = ctx.saved_tensors
        scale, is_causal, block_size, groups = ctx.options
        xp = xp_of(grad)
        grad = grad.reshape(out.shape)
        q_aug = _queries_with_shift(q, minus_m.shape[:-2])
        xp.multiply(q, scale, out=q_aug[..., :-1])                           # as forward made it: products round alike
        q_aug[..., -1:] = minus_m
        grad_aug = xp.empty(out.shape[:-1] + (v.shape[-1] + 1,), dtype=q_aug.dtype)   # [dO, -D] / l

        def scaled_grad_rows(rows):                            # by the threads together, a row block each
            inverse = row_sum_inverse[..., rows, :]
            xp.multiply(grad[..., rows, :], inverse, out=grad_aug[..., rows, :-1])
            d = cpu.last_axis_sum(grad[..., rows, :] * out[..., rows, :])           # D = rowsum(dO * O)
            xp.multiply(d, -inverse, out=grad_aug[..., rows, -1:])
        cpu.for_each_part(scaled_grad_rows, _blocks(out.shape[-2], block_size), like=grad_aug)
        # One slot per query head (k and v are broadcast over the group axis), summed over each group at the end.
        grad_k = xp.zeros(out.shape[:-2] + k.shape[-2:], dtype=q_aug.dtype)
        grad_v = xp.zeros(out.shape[:-2] + v.shape[-2:], dtype=q_aug.dtype)

        lanes = cpu.batch_lanes(out.shape[:-2], grad)

        def backward_columns(part, sums):                # one column block of one lane, all the rows that see it
            lane, cols = lanes[part[0]], part[1]
            q_aug_l, k_l, v_l, grad_aug_l, mask_l, grad_q, grad_k_l, grad_v_l = (
                lane(x) for x in (q_aug, k, v, grad_aug, mask, *sums, grad_k, grad_v))
            v_aug_t = _transposed_block_with_ones(v_l, cols)               # this block's [v, 1]^T
            k_aug_t = _transposed_block_with_ones(k_l, cols)
            k_scaled = k_l[..., cols, :] * scale
            for block_rows in _blocks(q_aug.shape[-2], block_size):
                if not _visible(block_rows, cols, is_causal):
                    continue
                for rows, part_cols in _pieces(block_rows, cols, is_causal):    # the forward's very pieces
                    mine = slice(part_cols.start - cols.start, part_cols.stop - cols.start)
                    p = _shifted_scores(q_aug_l, k_aug_t, rows, part_cols, mine, mask_l, is_causal)
                    cpu.exp_in_place(p)                                          # l P
                    grad_v_l[..., part_cols, :] += xp.swapaxes(p, -1, -2) @ grad_aug_l[..., rows, :-1]
                    grad_s = grad_aug_l[..., rows, :] @ v_aug_t[..., mine]       # (dP - D) / l, made dS in place
                    grad_s *= p
                    grad_q[..., rows, :] += grad_s @ k_scaled[..., mine, :]
                    grad_k_l[..., part_cols, :] += xp.swapaxes(grad_s, -1, -2) @ q_aug_l[..., rows, :-1]
        grad_q_shape = out.shape[:-1] + (q_aug.shape[-1] - 1,)
        # Lanes of the batch (its heads or entries), one per thread, add into places of their own: one dQ for all.
        # With one lane (cpu.batch_lanes), each thread sums a dQ of its own.
        parts = [(number, cols) for number in range(len(lanes)) for cols in _blocks(k.shape[-2], block_size)]
        (grad_q,) = cpu.sum_over_parts(backward_columns, parts, lambda: (xp.zeros(grad_q_shape, dtype=q_aug.dtype),),
                                       group=lambda part: part[0])
        return (merge_heads(grad_q, groups), ungroup_grad(grad_k, groups), ungroup_grad(grad_v, groups),
                None, None, None, None, None)


twins.register("flash_attention", FastFlashAttention, ReferenceFlashAttention)
