"""How tinyattn's fast Functions cut their work into parts for the threads (threads.py), and into pieces that fit
in a core's cache. A fast Function hands a pure function of one part to these helpers; the cutting stays here.

On the GPU (CuPy arrays) the helpers that cut arrays (matmul, matmuls, for_each_piece, attention_parts) leave them
whole, in the calling thread: the GPU has its own parallelism. for_each_part and sum_over_parts deal out whatever
parts they are given.
"""
import math

from ..backend import broadcast_shapes, is_cupy_array, xp_of
from .threads import get_num_threads, share

# Elementwise work goes in pieces of this many values (1 MiB of float32), so that a chain of in-place passes over
# one piece finds it in the core's cache instead of streaming the whole array from memory pass after pass.
CACHE_PIECE = 1 << 18

# Below this many multiply-adds a matrix product is not worth handing to other threads.
MIN_SHARED_MATMUL = 1 << 21

# Attention parts hold this many scores (2 MiB of float32) when the work is large enough to cut that fine.
SCORES_PER_PART = 1 << 19


def slices(n, size):
    """range(n) as consecutive slices of at most size."""
    return [slice(start, min(start + size, n)) for start in range(0, n, size)]


def one_slice_per_thread(n):
    """range(n) cut into one consecutive slice per thread."""
    return slices(n, max(1, -(-n // get_num_threads())))


def for_each_part(work, parts):
    """[work(part) for part in parts], the parts dealt among the threads; results in the order of parts."""
    parts = list(parts)
    numbered = share(lambda mine: [(i, work(part)) for i, part in mine], enumerate(parts))
    results = [None] * len(parts)
    for i, result in (pair for thread in numbered for pair in thread):
        results[i] = result
    return results


def sum_over_parts(work, parts, new_totals):
    """work(part, totals) for every part, each thread adding into totals of its own (a tuple of arrays that
    new_totals() makes); returns the totals summed over the threads."""
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
    return matmuls((a, b, bias))[0]


def _worth_sharing(a, b):
    return not (is_cupy_array(a) or a.ndim < 2 or b.ndim < 2 or a.shape[-2] < get_num_threads()
                or math.prod(a.shape) * b.shape[-1] < MIN_SHARED_MATMUL)


def matmuls(*products):
    """[a @ b (+ bias) for each (a, b) or (a, b, bias) in products] (None for a product given as None), all in one
    hand-off to the threads: each shared product's rows are cut into (threads / products) slices, so two products on
    two threads run whole, one on each thread (BLAS at full size, one wait instead of two). Small products and GPU
    arrays run as they are."""
    products = [None if p is None else (p[0], p[1], p[2] if len(p) > 2 else None) for p in products]
    shared = {i for i, p in enumerate(products) if p is not None and _worth_sharing(p[0], p[1])}
    slices_each = max(1, get_num_threads() // max(1, len(shared)))
    outs, parts = [], []
    for i, product in enumerate(products):
        if product is None:
            outs.append(None)
        elif i in shared:                   # an empty result now, its slices filled by the threads below
            a, b, bias = product
            xp, rows = xp_of(a), a.shape[-2]
            outs.append(xp.empty(broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (rows, b.shape[-1]),
                                 dtype=xp.result_type(a, b)))
            parts += [(a, b, bias, outs[i], part) for part in slices(rows, -(-rows // slices_each))]
        else:
            a, b, bias = product
            outs.append(a @ b if bias is None else a @ b + bias)

    def product_rows(part):
        a, b, bias, out, rows = part
        xp_of(a).matmul(a[..., rows, :], b, out=out[..., rows, :])
        if bias is not None:
            out[..., rows, :] += bias
    for_each_part(product_rows, parts)
    return outs


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


class AttentionPart:
    """Some batch entries (along the first batch axis) and some query rows of attention's work.

    Arrays that broadcast along those axes (a (1, 1, S) padding mask, keys shared by a batch) are taken whole along
    them. queries(x) is x's share for arrays with a query-row axis (q, scores, masks, outputs), keys(x) for arrays
    whose rows are keys (k, v): every query row reads all of them.
    """

    def __init__(self, entries, rows, batch_ndim, n_rows):
        self.entries, self.rows, self.batch_ndim, self.n_rows = entries, rows, batch_ndim, n_rows

    def keys(self, x):
        if x is None or x.ndim - 2 != self.batch_ndim or x.shape[0] == 1:
            return x
        return x[self.entries]

    def queries(self, x):
        x = self.keys(x)
        return x if x is None or x.shape[-2] != self.n_rows else x[..., self.rows, :]


def attention_parts(batch_shape, n_rows, n_keys, like):
    """Attention's independent parts of work. Along the first batch axis where there is one: as few entries per
    part as keep its scores near SCORES_PER_PART (in cache), but no more parts than the threads need when the work is
    small (each part costs Python time). Else the query rows, cut among the threads. On the GPU, one part: all."""
    whole = slice(None)
    if is_cupy_array(like):
        return [AttentionPart(whole, whole, len(batch_shape), n_rows)]
    if batch_shape and batch_shape[0] > 1:
        scores_per_entry = max(1, math.prod(batch_shape[1:]) * n_rows * n_keys)
        per_part = min(-(-batch_shape[0] // get_num_threads()), max(1, SCORES_PER_PART // scores_per_entry))
        return [AttentionPart(entries, whole, len(batch_shape), n_rows)
                for entries in slices(batch_shape[0], per_part)]
    return [AttentionPart(whole, rows, len(batch_shape), n_rows) for rows in one_slice_per_thread(n_rows)]
