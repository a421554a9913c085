"""How tinyattn's fast Functions cut their work into parts for the threads (threads.py), and into pieces that fit
in a core's cache. A fast Function hands a pure function of one part to these helpers; the cutting stays here.

On the GPU (CuPy arrays) the helpers that cut arrays (matmul, matmuls, for_each_piece, attention_parts) leave them
whole, in the calling thread: the GPU has its own parallelism. for_each_part runs its parts in the calling thread
when told the work is on GPU arrays (like=); sum_over_parts deals out whatever parts it is given.
"""
import contextlib
import dataclasses
import functools
import math
import threading

from ..backend import broadcast_shapes, is_cupy_array, xp_of
from .threads import Later, get_num_threads, share
from .tuning import blas_held, blas_kernels

# Elementwise work goes in pieces of this many values (512 KiB of float32), so that a chain of in-place passes over
# one piece, with its companions of the same size, finds them in the core's cache (docs/performance-log.md).
CACHE_PIECE = 1 << 17

# Below this many multiply-adds a matrix product is not worth handing to other threads.
MIN_SHARED_MATMUL = 1 << 21

# Under a causal mask, attention works in blocks of this many query rows, each over only the keys it may see.
MASKED_ROWS = 64

# Attention parts hold this many scores (2 MiB of float32) when the work is large enough to cut that fine.
SCORES_PER_PART = 1 << 19

# Flash attention's blocks: this many query rows and keys each, unless the BLAS has small-product kernels.
ATTENTION_BLOCK = 256

# OpenBLAS's kernels for AVX-512 CPUs (SkylakeX, and Cooperlake and SapphireRapids, which build on them) multiply a
# product of at most this many multiply-adds straight from its operands: no copying them into packed panels first,
# no zeroing of the output. They take a product whose operands are both untransposed, or whose second is transposed
# (in OpenBLAS's column-major view: NumPy's row-major a.T @ b qualifies, a @ b.T only when tiny), as every product
# of FastFlashAttention is. Other CPUs' small-product kernels (ARM SVE, POWER10) were not measured and get
# ATTENTION_BLOCK (docs/performance-log.md).
SMALL_PRODUCT = 10 ** 6
SMALL_PRODUCT_KERNELS = ("skylakex", "cooperlake", "sapphirerapids")

# Blocks smaller than this cost more in Python calls and thin products than the small-product kernels save
# (docs/performance-log.md).
MIN_SMALL_PRODUCT_BLOCK = 100

# A lane of flash attention's backward (batch_lanes) holds at least this many entries (batch entries x heads), else
# the whole batch goes as one lane: thinner lanes make more, smaller NumPy calls, each taking the GIL, and cost
# more than the dQ per thread that one lane needs (docs/performance-log.md).
MIN_LANE_ENTRIES = 4


def slices(n, size, start=0):
    """range(start, n) as consecutive slices of at most size."""
    return [slice(first, min(first + size, n)) for first in range(start, n, size)]


def one_slice_per_thread(n):
    """range(n) cut into one consecutive slice per thread."""
    return slices(n, max(1, -(-n // get_num_threads())))


def for_each_part(work, parts, claimed=False, like=None):
    """[work(part) for part in parts], the parts dealt, or claimed, among the threads; results in the order of parts.

    claimed: instead of dealing the parts out beforehand, each thread claims the next part as it comes free, in
    the order given (costliest first balances best). A thread whose core runs slower then does less: a core that
    another process or the host's other guests share, or an efficiency core. After a part raises, no more are
    claimed. like: an array of the work's; for GPU arrays the parts run one after another in the calling thread."""
    parts = list(parts)
    if is_cupy_array(like):
        return [work(part) for part in parts]
    if claimed:
        claims = _Claims(enumerate(parts))

        def run(_):
            try:
                return [(i, work(part)) for i, part in claims]
            except BaseException:
                claims.stop()
                raise
        numbered = share(run, range(min(get_num_threads(), len(parts))))
    else:
        numbered = share(lambda mine: [(i, work(part)) for i, part in mine], enumerate(parts))
    results = [None] * len(parts)
    for i, result in (pair for thread in numbered for pair in thread):
        results[i] = result
    return results


@contextlib.contextmanager
def shares_through(wrapper):
    """`with shares_through(wrapper):` every hand-off of work to the threads that the helpers here make (for_each_part,
    sum_over_parts, and all that uses them) runs as wrapper(share, work, items) instead of share(work, items), in
    whichever thread makes it; leaving the block puts share back. tools/profiler.py times the hand-offs so."""
    global share
    plain = share
    share = functools.partial(wrapper, plain)
    try:
        yield
    finally:
        share = plain


class _Claims:
    """An iterator that several threads share: each next() hands out one item, to one thread, until stop()."""

    def __init__(self, items):
        self._items, self._lock = iter(items), threading.Lock()

    def __iter__(self):
        return self

    def __next__(self):
        with self._lock:
            return next(self._items)

    def stop(self):
        with self._lock:
            self._items = iter(())


def sum_over_parts(work, parts, new_totals, group=None):
    """work(part, totals) for every part, each thread adding into totals of its own (a tuple of arrays that
    new_totals() makes); returns the totals summed over the threads.

    group(part), where given, names the places of the totals a part adds into: parts of different names add into
    disjoint places (attention's parts of different batch entries). When the threads divide the names evenly, every
    part of one name goes to the same thread and all threads add into one set of totals: no totals per thread to
    zero and sum. (Unevenly, some threads would idle while others finish a name more.)"""
    parts, named = list(parts), {}
    for part in parts if group is not None else ():
        named.setdefault(group(part), []).append(part)
    if named and len(named) % get_num_threads() == 0:
        totals = new_totals()
        share(lambda mine: [work(part, totals) for name in mine for part in named[name]], named)
        return totals

    def run(mine):
        totals = new_totals()
        for part in mine:
            work(part, totals)
        return totals
    first, *others = share(run, parts)
    for totals in others:                  # into the first thread's arrays: no temporary the size of a total
        for total, part in zip(first, totals):
            total += part
    return first


def matmul(a, b, bias=None):
    """a @ b (+ bias, added to every row) with a's rows (axis -2) shared among the threads, b whole; small products
    and GPU arrays as they are. Each thread adds the bias to its rows while they are still in cache."""
    if not _worth_sharing(a, b):
        return a @ b if bias is None else a @ b + bias
    out = _empty_product(a, b)

    def product_rows(rows):
        xp_of(a).matmul(a[..., rows, :], b, out=out[..., rows, :])
        if bias is not None:
            out[..., rows, :] += bias
    for_each_part(product_rows, one_slice_per_thread(a.shape[-2]))
    return out


def _worth_sharing(a, b):
    return not (is_cupy_array(a) or a.ndim < 2 or b.ndim < 2 or a.shape[-2] < get_num_threads()
                or math.prod(a.shape) * b.shape[-1] < MIN_SHARED_MATMUL)


def _empty_product(a, b):
    """A new array for a @ b to be written into."""
    xp = xp_of(a)
    return xp.empty(broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]),
                    dtype=xp.result_type(a, b))


# Products a helper thread is still writing (matmul_later): id(out) -> (its Later, out). Holding out keeps its id.
_being_written = {}
_this_thread = threading.local()        # .walk: the backward_walk this thread is in, if any


class backward_walk:
    """`with backward_walk():` the scope of the backward walk, in which matmul_later may leave products to a helper.

    From the first product it leaves to the end of the walk, BLAS is held to one thread, as inside a fast Function:
    a helper holds it while it writes, and every product of the walk, a plain Function's too, then runs on one BLAS
    thread, whatever the helper is doing at that moment (with OpenBLAS's AVX2 kernel, results would otherwise
    differ in their last bits from run to run). Outside a walk matmul_later is a @ b, so a Function's backward
    called on its own returns finished arrays."""

    def __enter__(self):
        self.outer, self.hold = getattr(_this_thread, "walk", None), None
        _this_thread.walk = self
        return self

    def __exit__(self, *exception):
        _this_thread.walk = self.outer
        if self.hold is not None:
            self.hold.__exit__(*exception)


def matmul_later(a, b):
    """a @ b into a new array that a helper thread writes when it comes to it, while the calling thread goes on
    with the backward walk (backward_walk): pass the array through settled() before reading it. A weight's gradient
    is the use: the walk has other work to do before it reads it, much of it on the calling thread alone. Outside a
    walk, on one thread, for GPU arrays and small products: the product at once. The product must be the gradient
    as it is (the walk reads a gradient's shape and dtype at once, and reduces or casts one that differs)."""
    walk = getattr(_this_thread, "walk", None)
    if walk is None or get_num_threads() <= 1 or not _worth_sharing(a, b):
        return a @ b
    if walk.hold is None:
        walk.hold = blas_held()
        walk.hold.__enter__()
    out = _empty_product(a, b)

    def write():
        try:
            xp_of(a).matmul(a, b, out=out)
        finally:
            _being_written.pop(id(out), None)
    task = Later(write)
    _being_written[id(out)] = (task, out)   # before the job starts: a quick helper may finish it at once
    task.start()
    return out


def settled(x):
    """x once no helper thread is writing it or the array it views (matmul_later); anything else as it is."""
    if _being_written and x is not None:
        for array in (x, getattr(x, "base", None)):
            entry = _being_written.get(id(array))
            if entry is not None and entry[1] is array:
                entry[0].wait()
    return x


def for_each_piece(fn, inputs, outputs):
    """fn(*inputs, *outputs) for an fn that treats each row (index along the first axis) on its own and writes its
    results into outputs (arrays with as many rows), run on cache-sized pieces of rows shared among the threads:
    piece by piece, a chain of elementwise passes finds its piece in cache instead of streaming the whole array each
    time, and each piece's results land where they belong, with nothing to copy afterwards. Returns outputs."""
    n = inputs[0].shape[0]
    pieces = slices(n, max(1, CACHE_PIECE // max(1, math.prod(inputs[0].shape[1:]))))
    if is_cupy_array(inputs[0]) or len(pieces) <= 1:
        fn(*inputs, *outputs)
    else:
        for_each_part(lambda rows: fn(*(a[rows] for a in inputs), *(out[rows] for out in outputs)), pieces)
    return outputs


def attention_block(head_size, like):
    """Query rows and keys per block of flash attention for heads of head_size (the larger of the queries' and the
    values'): where every BLAS library loaded is OpenBLAS with small-product kernels, the largest block whose
    products all stay within SMALL_PRODUCT multiply-adds (head_size + 1 deep at most, the extra column of [Q, -m] and
    [dO, -D]; 124 at head size 64), unless that is under MIN_SMALL_PRODUCT_BLOCK; else ATTENTION_BLOCK, as on the
    GPU. (Every library, not any: which one NumPy multiplies with is not known here.)"""
    if is_cupy_array(like):
        return ATTENTION_BLOCK
    kernels = blas_kernels()
    if not kernels or not all(library == "openblas" and name in SMALL_PRODUCT_KERNELS for library, name in kernels):
        return ATTENTION_BLOCK
    block = min(ATTENTION_BLOCK, math.isqrt(SMALL_PRODUCT // (head_size + 1)))
    return block if block >= MIN_SMALL_PRODUCT_BLOCK else ATTENTION_BLOCK


def batch_lanes(batch_shape, like):
    """The lanes that cut a batch (attention's batch and heads) into one equal lane per thread along its first axis
    whose length the threads divide, for work that is independent from lane to lane and adds into places of its own
    in each; lane(x) is an array's share of a lane. One lane, the whole batch, when no axis divides, when a lane
    would hold fewer than MIN_LANE_ENTRIES entries, on one thread, and on the GPU."""
    n, batch_ndim = get_num_threads(), len(batch_shape)
    if n == 1 or is_cupy_array(like) or math.prod(batch_shape) // n < MIN_LANE_ENTRIES:    # a lane's entries
        return [Lane((), batch_ndim)]
    for axis, size in enumerate(batch_shape):
        if size % n == 0:
            return [Lane((slice(None),) * axis + (part,), batch_ndim) for part in one_slice_per_thread(size)]
    return [Lane((), batch_ndim)]


@dataclasses.dataclass(frozen=True)
class Lane:
    """One lane of batch_lanes: index, the tuple that picks its entries (() for the whole batch) in a batch of
    batch_ndim axes; lane(x) is x's share of the lane, for an array whose axes before its last two broadcast against
    the batch (in_lane)."""
    index: tuple
    batch_ndim: int

    def __call__(self, x):
        return in_lane(x, self.index, self.batch_ndim)


def in_lane(x, index, batch_ndim):
    """x's share of the entries index picks (a Lane's index, or an AttentionPart's entries), for an array whose axes
    before its last two broadcast against a batch of batch_ndim axes: an axis of size 1 or one it lacks is taken
    whole. None stays None."""
    if x is None or not index:
        return x
    axis = x.ndim - 2 - batch_ndim + len(index) - 1
    return x if axis < 0 or x.shape[axis] == 1 else x[(slice(None),) * axis + index[-1:]]


def causal_row_pieces(rows):
    """The rows of one block of flash attention that crosses a causal diagonal (a slice), in pieces of MASKED_ROWS,
    at most half the block each: a piece then computes only the scores up to its last row's key."""
    return slices(rows.stop, min(MASKED_ROWS, -(-(rows.stop - rows.start) // 2)), rows.start)


class AttentionPart:
    """Some batch entries (along the first batch axis), some query rows, and the keys those rows may see.

    Arrays that broadcast along those axes (a (1, 1, S) padding mask, keys shared by a batch) are taken whole along
    them. queries(x) is x's share for arrays with a query-row axis (q, outputs), scores(x) for those whose rows are
    scores over the keys (masks, dropout's keep), keys(x) for arrays whose rows are keys (k, v). Keys that a boolean
    mask hides from every query row of the part are left out (n_seen: the part sees keys 0 .. n_seen - 1).
    """

    def __init__(self, entries, rows, batch_ndim, n_rows, n_seen=None):
        self.entries, self.rows, self.batch_ndim, self.n_rows = entries, rows, batch_ndim, n_rows
        self.seen = slice(None, n_seen)

    def _entries(self, x):
        return in_lane(x, (self.entries,), self.batch_ndim)

    @property
    def batch_entries(self):
        """(start, stop) of the entries along the first batch axis that this part works on ((None, None): all)."""
        return self.entries.start, self.entries.stop

    def keys(self, x):
        x = self._entries(x)
        return x if x is None else x[..., self.seen, :]

    def queries(self, x):
        x = self._entries(x)
        return x if x is None or x.shape[-2] != self.n_rows else x[..., self.rows, :]

    def scores(self, x):
        x = self.queries(x)
        return x if x is None else x[..., self.seen]


def _keys_seen(mask):
    """How many keys, from the first, some query row of a boolean mask's share may see (the keys after the last one
    any of its rows may see are masked for all of them); None for all of them, where the mask broadcasts along the
    keys and lets them be seen."""
    seen = mask.any(axis=tuple(range(mask.ndim - 1)))
    if seen.shape[0] == 1:                              # a mask that broadcasts along the keys
        return None if seen[0] else 0
    last = xp_of(mask).flatnonzero(seen)
    return int(last[-1]) + 1 if last.size else 0


def attention_parts(batch_shape, n_rows, n_keys, like, mask=None):
    """Attention's independent parts of work. Along the first batch axis where there is one: as few entries per
    part as keep a part's scores near SCORES_PER_PART (in cache), but no more parts than the threads need when the
    work is small (each part costs Python time). Else the query rows, cut among the threads. On the GPU, and for
    work under MIN_SHARED_MATMUL multiply-adds (a small model's: a hand-off would cost more), one part.

    With a boolean mask, each part leaves out the keys its rows may not see; where that differs from row to row (a
    causal mask), the query rows come in blocks of MASKED_ROWS, and each block computes only the scores up to the last
    key it may see: under a causal mask, 3/4 of them at 2 blocks, approaching half as the blocks grow in number.
    """
    whole, batch_ndim = slice(None), len(batch_shape)
    if is_cupy_array(like):
        return [AttentionPart(whole, whole, batch_ndim, n_rows)]
    if math.prod(batch_shape) * n_rows * n_keys * like.shape[-1] < MIN_SHARED_MATMUL:    # not worth a hand-off
        part = AttentionPart(whole, whole, batch_ndim, n_rows)
        return [part if mask is None or mask.dtype != bool else
                AttentionPart(whole, whole, batch_ndim, n_rows, _keys_seen(part.queries(mask)))]
    if batch_shape and batch_shape[0] > 1:
        scores_per_entry = max(1, math.prod(batch_shape[1:]) * n_rows * n_keys)
        per_part = min(-(-batch_shape[0] // get_num_threads()), max(1, SCORES_PER_PART // scores_per_entry))
        entries, rows = slices(batch_shape[0], per_part), [whole]
    else:
        entries, rows = [whole], one_slice_per_thread(n_rows)
    if mask is None or mask.dtype != bool:
        return [AttentionPart(e, r, batch_ndim, n_rows) for r in rows for e in entries]
    blocks = slices(n_rows, MASKED_ROWS)
    def seen_by_block(e):
        return [_keys_seen(AttentionPart(e, b, batch_ndim, n_rows).queries(mask)) for b in blocks]
    if mask.ndim - 2 != batch_ndim or mask.shape[0] == 1:     # the same mask for every entry: count once
        seen = [seen_by_block(entries[0])] * len(entries)
    else:
        seen = [seen_by_block(e) for e in entries]
    if all(len(set(row)) == 1 for row in seen):           # the same keys for every row (a padding mask)
        return [AttentionPart(e, r, batch_ndim, n_rows, row[0]) for r in rows for e, row in zip(entries, seen)]
    # block by block, then entry by entry: dealt back and forth, every thread gets its share of each block
    return [AttentionPart(e, b, batch_ndim, n_rows, seen[i][j]) for j, b in enumerate(blocks)
            for i, e in enumerate(entries)]
