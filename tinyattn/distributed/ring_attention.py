"""Ring attention (context parallelism): one attention over a sequence spread across the ranks, flash attention's
tiles handed round a ring.

Each rank holds a part of the sequence (dim -2) of q, k and v. Its queries stay; the key/value blocks travel round
the ring, rank r sending to r + 1 and receiving from r - 1, so that after world - 1 passes every rank has seen every
block. Each block is merged into the rank's running result with lesson 04's online softmax: per query row the
running maximum m, the running sum l of exp(S - m) and acc, the running sum of exp(S - m) V; at the end
O = acc / l and L = m + log l (the row's log-sum-exp). Backward recomputes each block's P = exp(S - L) as flash
attention's does, keeps dQ at home, and sends dK and dV round the ring with their block, so that after world passes
each block's gradient is back on the rank that holds it.

Layouts: "contiguous" gives rank r the r-th of world equal chunks. Under a causal mask its queries see chunks 0..r
only, so the last rank works world times as long as the first. "zigzag" cuts the sequence into 2 * world chunks and
gives rank r chunks r and 2 * world - 1 - r (one early, one late), so every rank has the same number of visible
(query chunk, key chunk) pairs. Fully masked pairs are skipped in both.

Two twins, as every fused Function's: ReferenceRingAttention passes each block on (a blocking exchange) and then
computes on it, as lesson 22 derives it; RingAttention starts the next pass before computing on the block it holds,
so that the transfer may overlap the compute (with MPICH it moves only inside MPI calls unless its progress thread
is on: lesson 22 measures it). Neither forms more than one (query piece x key piece) block of scores at a time.
"""
import numpy

from .. import backend
from ..functional import twins
from ..tensor import Function, Tensor
from .collectives import _check_same, irecv, isend
from .process_group import group_or_default

LAYOUTS = ("contiguous", "zigzag")
TAG = 61        # ring attention's messages, apart from a script's own on tag 0


def sequence_pieces(seq_len, rank, world_size, layout="contiguous"):
    """The global positions rank holds, as (start, stop) pieces in its local order."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    chunks = world_size if layout == "contiguous" else 2 * world_size
    if seq_len % chunks:
        raise ValueError(f'layout "{layout}" cuts the sequence into {chunks} equal chunks on a world of {world_size}: '
                         f"the length {seq_len} is not a multiple of {chunks}")
    size = seq_len // chunks
    order = [rank] if layout == "contiguous" else [rank, chunks - 1 - rank]
    return [(c * size, (c + 1) * size) for c in order]


def sequence_indices(seq_len, rank, world_size, layout="contiguous"):
    """The global positions rank holds, in its local order, as one index array."""
    return numpy.concatenate([numpy.arange(a, b) for a, b in sequence_pieces(seq_len, rank, world_size, layout)])


def shard_sequence(x, layout="contiguous", group=None):
    """This rank's part of a whole sequence x (..., seq_len, d), along dim -2 (differentiable)."""
    group = group_or_default(group)
    return x[..., sequence_indices(x.shape[-2], group.rank(), group.size(), layout), :]


def _local_pieces(n_local, rank, world_size, layout):
    """[(local slice, global start)] of rank's pieces, for a local length n_local."""
    pieces, local = [], 0
    for start, stop in sequence_pieces(n_local * world_size, rank, world_size, layout):
        pieces.append((slice(local, local + stop - start), start))
        local += stop - start
    return pieces


def _block_pairs(rank, source, n_local, world_size, layout, is_causal):
    """(rows, cols, bias_needed) for the pieces of rank's queries and source's keys that are not fully masked:
    rows and cols are local slices; under a causal mask a pair on the diagonal (chunks align, so no other pair is
    partly masked) needs its triangle masked, and every query row sees at least its own key there."""
    pairs = []
    for rows, q_start in _local_pieces(n_local, rank, world_size, layout):
        for cols, k_start in _local_pieces(n_local, source, world_size, layout):
            if is_causal and k_start > q_start:
                continue
            pairs.append((rows, cols, is_causal and k_start == q_start))
    return pairs


def _scores(q, k, rows, cols, diagonal, scale):
    """S = scale * Q K^T for one pair of pieces, with the causal triangle at -inf on the diagonal."""
    xp = backend.xp_of(q)
    s = scale * (q[..., rows, :] @ xp.swapaxes(k[..., cols, :], -1, -2))
    if diagonal:
        n = rows.stop - rows.start
        s = xp.where(xp.tril(xp.ones((n, n), dtype=bool)), s, -xp.inf)
    return s


def _merge(state, q, k, v, pairs, scale):
    """Fold one key/value block into the running (m, l, acc) of the rows it reaches: lesson 04's rescale."""
    m, l, acc = state
    xp = backend.xp_of(q)
    for rows, cols, diagonal in pairs:
        s = _scores(q, k, rows, cols, diagonal, scale)
        m_new = xp.maximum(m[..., rows, :], s.max(axis=-1, keepdims=True))
        p = xp.exp(s - m_new)
        alpha = xp.exp(m[..., rows, :] - m_new)           # how much the old running sums shrink
        l[..., rows, :] = alpha * l[..., rows, :] + p.sum(axis=-1, keepdims=True)
        acc[..., rows, :] = alpha * acc[..., rows, :] + p @ v[..., cols, :]
        m[..., rows, :] = m_new


def _block_grads(q, k, v, grad, D, L, pairs, scale, grad_q, grad_k, grad_v):
    """Add one key/value block's share to dQ (this rank's) and to dK, dV (the block's, travelling with it)."""
    xp = backend.xp_of(q)
    for rows, cols, diagonal in pairs:
        p = xp.exp(_scores(q, k, rows, cols, diagonal, scale) - L[..., rows, :]).astype(q.dtype)
        grad_v[..., cols, :] += xp.swapaxes(p, -1, -2) @ grad[..., rows, :]
        ds = p * (grad[..., rows, :] @ xp.swapaxes(v[..., cols, :], -1, -2) - D[..., rows, :])
        grad_q[..., rows, :] += scale * (ds @ k[..., cols, :])
        grad_k[..., cols, :] += scale * (xp.swapaxes(ds, -1, -2) @ q[..., rows, :])


def _start_pass(arrays, group):
    """Send arrays to the next rank and receive their like from the previous one, without waiting; the returned
    function waits and gives the received arrays."""
    rank, world = group.rank(), group.size()
    after, before = group.ranks[(rank + 1) % world], group.ranks[(rank - 1) % world]
    received = [Tensor(backend.xp_of(a).empty_like(a)) for a in arrays]
    works = [isend(Tensor(a), after, group, tag=TAG) for a in arrays] + \
        [irecv(t, before, group, tag=TAG) for t in received]

    def wait():
        for work in works:
            work.wait()
        return [t.array for t in received]
    return wait


def _pass_on(arrays, group):
    """Send arrays to the next rank and return the previous rank's (a blocking exchange)."""
    return _start_pass(arrays, group)()


def _finish_forward(ctx, q, k, v, state, options):
    xp = backend.xp_of(q)
    m, l, acc = state
    out = acc / l                                        # every row saw at least one key (its own, if causal)
    L = m.astype(xp.float64) + xp.log(l.astype(xp.float64))   # float64, as flash attention's L
    ctx.save_for_backward(q, k, v, out, L)
    ctx.options = options
    return out


def _start_state(q, v):
    xp = backend.xp_of(q)
    rows = q.shape[:-1] + (1,)
    return (xp.full(rows, -xp.inf, dtype=q.dtype), xp.zeros(rows, dtype=q.dtype),
            xp.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype))


class ReferenceRingAttention(Function):
    """The ring as lesson 22 derives it: at step t rank r holds block (r - t) mod world, merges it into its running
    result, then passes it on and receives the next."""

    @staticmethod
    def forward(ctx, q, k, v, scale, is_causal, group, layout):
        rank, world, n = group.rank(), group.size(), q.shape[-2]
        state = _start_state(q, v)
        block = [k, v]
        for step in range(world):
            source = (rank - step) % world
            _merge(state, q, *block, _block_pairs(rank, source, n, world, layout, is_causal), scale)
            if step < world - 1:
                block = _pass_on(block, group)
        return _finish_forward(ctx, q, k, v, state, (scale, is_causal, group, layout))

    @staticmethod
    def backward(ctx, grad):
        q, k, v, out, L = ctx.saved_tensors
        scale, is_causal, group, layout = ctx.options
        xp = backend.xp_of(grad)
        rank, world, n = group.rank(), group.size(), q.shape[-2]
        D = (grad * out).sum(axis=-1, keepdims=True)
        grad_q = xp.zeros_like(q)
        block = [k, v, xp.zeros_like(k), xp.zeros_like(v)]       # K, V and their gradients so far
        for step in range(world):
            source = (rank - step) % world
            _block_grads(q, *block[:2], grad, D, L, _block_pairs(rank, source, n, world, layout, is_causal), scale,
                         grad_q, *block[2:])
            block = _pass_on(block if step < world - 1 else block[2:], group)   # last pass: dK, dV go home
        return grad_q, block[-2], block[-1], None, None, None, None


class RingAttention(Function):
    """The same ring, each pass started before the block in hand is computed on, so that the transfer can overlap
    the compute. Backward sends K and V ahead the same way; dK and dV follow once this rank has added its share."""

    @staticmethod
    def forward(ctx, q, k, v, scale, is_causal, group, layout):
        rank, world, n = group.rank(), group.size(), q.shape[-2]
        state = _start_state(q, v)
        block = [k, v]
        for step in range(world):
            arriving = _start_pass(block, group) if step < world - 1 else None
            _merge(state, q, *block, _block_pairs(rank, (rank - step) % world, n, world, layout, is_causal), scale)
            if arriving is not None:
                block = arriving()
        return _finish_forward(ctx, q, k, v, state, (scale, is_causal, group, layout))

    @staticmethod
    def backward(ctx, grad):
        q, k, v, out, L = ctx.saved_tensors
        scale, is_causal, group, layout = ctx.options
        xp = backend.xp_of(grad)
        rank, world, n = group.rank(), group.size(), q.shape[-2]
        D = (grad * out).sum(axis=-1, keepdims=True)
        grad_q = xp.zeros_like(q)
        block, grads = [k, v], [xp.zeros_like(k), xp.zeros_like(v)]
        for step in range(world):
            arriving = _start_pass(block, group) if step < world - 1 else None
            _block_grads(q, *block, grad, D, L, _block_pairs(rank, (rank - step) % world, n, world, layout,
                                                              is_causal), scale, grad_q, *grads)
            grads = _pass_on(grads, group)
            if arriving is not None:
                block = arriving()
        return grad_q, grads[0], grads[1], None, None, None, None


def ring_attention(query, key, value, is_causal=False, group=None, layout="contiguous", scale=None):
    """Attention over a sequence whose parts (dim -2) are spread over group's ranks (the default group when None):
    each rank passes its local query, key and value (..., n_local, d), every rank the same shapes, and gets the
    output rows of its own queries, equal to scaled_dot_product_attention on the whole sequence. layout says which
    positions each rank holds ("contiguous" or "zigzag", see shard_sequence); is_causal masks by those global
    positions. Every rank of the group must call it (it sends and receives)."""
    group = group_or_default(group)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    shapes = [tuple(t.shape) for t in (query, key, value)]
    if query.ndim < 2 or query.shape[:-2] != key.shape[:-2] or key.shape[:-1] != value.shape[:-1] or \
            query.shape[-2] != key.shape[-2] or query.shape[-1] != key.shape[-1]:
        raise ValueError(f"ring_attention needs query, key and value of shapes (..., n_local, d), (..., n_local, d) "
                         f"and (..., n_local, d_v) with the same leading dims, got {shapes[0]}, {shapes[1]} and "
                         f"{shapes[2]}")
    if len({query.dtype, key.dtype, value.dtype}) != 1:
        raise ValueError(f"ring_attention needs one dtype, got {query.dtype}, {key.dtype} and {value.dtype}")
    sequence_pieces(query.shape[-2] * group.size(), 0, group.size(), layout)      # the length suits the layout
    _check_same(group, "ring_attention", query=query, value=value, is_causal=bool(is_causal), layout=layout)
    scale = 1.0 / float(query.shape[-1]) ** 0.5 if scale is None else float(scale)
    function = ReferenceRingAttention if twins.reference_enabled() else RingAttention
    return function.apply(query, key, value, scale, bool(is_causal), group, layout)
