"""CPU parallelism: tinyattn shares its large array work among a few threads of its own.

NumPy releases the GIL inside ufunc loops and BLAS calls, so plain Python threads run array code side by side. One
thread per core does all of it, matrix products included: BLAS itself is held to one thread (via threadpoolctl),
because a BLAS thread that finished a product keeps spinning on its core for a while and would slow down the
elementwise work that follows it; so importing tinyattn leaves NumPy's BLAS single-threaded from the first CPU
product on. As in PyTorch, set_num_threads(n) (or TINYATTN_NUM_THREADS) picks how many cores tinyattn uses. Work on
CuPy arrays runs as it is: the GPU has its own parallelism.
"""
import math
import os
import queue
import threading

from threadpoolctl import threadpool_limits

from .backend import is_cupy_array, xp_of

# Elementwise work goes in pieces of this many values (1 MiB of float32), so that a chain of in-place passes over
# one piece finds it in the core's cache instead of streaming the whole array from memory pass after pass.
CACHE_PIECE = 1 << 18

# Below this many multiply-adds a matrix product is not worth handing to other threads.
_MIN_SHARED_MATMUL = 1 << 21


def _cores():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


_num_threads = int(os.environ.get("TINYATTN_NUM_THREADS", 0)) or _cores()
_blas_limit = None
_tasks = queue.SimpleQueue()        # (work, items, index, done queue) for the helper threads
_helpers = []
_this_thread = threading.local()   # .shared is True while a thread works on its share (no nested sharing)


def set_num_threads(n):
    """How many threads (cores) tinyattn's CPU work uses, as torch.set_num_threads; 1 runs everything serially."""
    global _num_threads
    if int(n) < 1:
        raise ValueError(f"set_num_threads needs at least 1 thread, got {n}")
    _num_threads = int(n)


def get_num_threads():
    return _num_threads


def _hold_blas_to_one_thread():
    global _blas_limit
    if _blas_limit is None:
        _blas_limit = threadpool_limits(1, user_api="blas")


def _helper_loop():
    """A helper thread: runs shares of work as they come (forever; a daemon thread ends with the process)."""
    _this_thread.shared = True
    while True:
        work, items, index, done = _tasks.get()
        try:
            done.put((index, work(items), None))
        except BaseException as error:  # handed to the caller, which raises it
            done.put((index, None, error))


def _start_helpers(count):
    while len(_helpers) < count:
        helper = threading.Thread(target=_helper_loop, name=f"tinyattn-{len(_helpers) + 1}", daemon=True)
        helper.start()
        _helpers.append(helper)


def share(work, items, like):
    """work(share) on each thread's share of items, dealt round-robin (thread t gets items[t::n]); the results in
    thread order. Dealing rather than cutting in halves balances work that grows along items (causal attention).
    like is an array of the work: for CuPy arrays everything runs in the calling thread, in order.

    The calling thread does the first share itself while helper threads do the others: each call costs a hand-off
    through a queue (tens of microseconds), not a Future per share.
    """
    items = list(items)
    if is_cupy_array(like):
        return [work(items)]
    _hold_blas_to_one_thread()
    n = min(_num_threads, len(items))
    if n <= 1 or getattr(_this_thread, "shared", False):
        return [work(items)]
    _start_helpers(n - 1)
    done = queue.SimpleQueue()
    for t in range(1, n):
        _tasks.put((work, items[t::n], t, done))
    results = [None] * n
    _this_thread.shared = True
    try:
        results[0] = work(items[0::n])
    finally:
        _this_thread.shared = False
        errors = []
        for _ in range(1, n):           # wait for every helper, even after an error here
            index, result, error = done.get()
            results[index] = result
            errors.append(error)
    for error in errors:
        if error is not None:
            raise error
    return results


def pieces(n, size=CACHE_PIECE):
    """range(n) as consecutive slices of at most size."""
    return [slice(start, min(start + size, n)) for start in range(0, n, size)]


def one_part_per_thread(n):
    """range(n) cut into one consecutive slice per thread."""
    return pieces(n, max(1, -(-n // _num_threads)))


def map_rows(fn, *arrays):
    """fn(*arrays) for an fn that treats each row (index along the first axis) on its own, computed on cache-sized
    pieces of rows shared among the threads, its results (an array or a tuple of them) put back together. Piece by
    piece, a chain of elementwise passes finds its piece in cache instead of streaming the whole array each time."""
    n = arrays[0].shape[0]
    parts = pieces(n, max(1, CACHE_PIECE // max(1, math.prod(arrays[0].shape[1:]))))
    if is_cupy_array(arrays[0]) or len(parts) <= 1:
        return fn(*arrays)
    probe = fn(*(a[:1] for a in arrays))                # one row tells the shapes and dtypes of the results
    single = not isinstance(probe, tuple)
    results = tuple(xp_of(r).empty((n,) + r.shape[1:], dtype=r.dtype) for r in ((probe,) if single else probe))

    def run(share_of_parts):
        for part in share_of_parts:
            values = fn(*(a[part] for a in arrays))
            for result, value in zip(results, (values,) if single else values):
                result[part] = value
    share(run, parts, arrays[0])
    return results[0] if single else results


def matmul(a, b, bias=None):
    """a @ b (+ bias, added to every row) with a's rows (axis -2) shared among the threads, b whole; small products
    and GPU arrays as they are. Each thread adds the bias to its rows while they are still in cache."""
    rows = a.shape[-2] if a.ndim >= 2 else 1
    if not is_cupy_array(a):
        _hold_blas_to_one_thread()
    if (is_cupy_array(a) or a.ndim < 2 or b.ndim < 2 or rows < _num_threads
            or math.prod(a.shape) * b.shape[-1] < _MIN_SHARED_MATMUL):
        out = a @ b
        if bias is not None:
            out += bias
        return out
    xp = xp_of(a)
    out = xp.empty(xp.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (rows, b.shape[-1]),
                   dtype=xp.result_type(a, b))

    def rows_of(share_of_slices):
        for part in share_of_slices:
            xp.matmul(a[..., part, :], b, out=out[..., part, :])
            if bias is not None:
                out[..., part, :] += bias
    share(rows_of, one_part_per_thread(rows), a)
    return out
