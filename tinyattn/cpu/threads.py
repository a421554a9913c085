"""tinyattn's own threads: work dealt out among a few helper threads and the calling thread.

NumPy releases the GIL inside its ufunc loops and BLAS calls, so plain Python threads run array code side by side.
As in PyTorch, set_num_threads(n) (or TINYATTN_NUM_THREADS) picks how many cores tinyattn uses; 1 runs everything
in the calling thread, exactly as written.
"""
import os
import queue
import threading

from . import tuning

_num_threads = None                 # set by set_num_threads; None: $TINYATTN_NUM_THREADS, else one per core
_tasks = queue.SimpleQueue()        # (work, items, index, done queue) for the helper threads
_helpers = []
_this_thread = threading.local()    # .sharing is True while a thread works on its share (no nested sharing)


def _cores():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def set_num_threads(n):
    """How many threads (cores) tinyattn's CPU work uses, as torch.set_num_threads."""
    global _num_threads
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"set_num_threads takes an int, got {n!r}")
    if n < 1:
        raise RuntimeError(f"set_num_threads needs at least 1 thread, got {n}")
    _num_threads = n


def get_num_threads():
    if _num_threads is None:
        wanted = os.environ.get("TINYATTN_NUM_THREADS", "")
        if wanted and not wanted.isdigit():
            raise RuntimeError(f"TINYATTN_NUM_THREADS must be a whole number, got {wanted!r}")
        set_num_threads(int(wanted or 0) or _cores())
    return _num_threads


def _helper_loop():
    """A helper thread: runs shares of work as they come (forever; a daemon thread ends with the process)."""
    _this_thread.sharing = True
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


def _dealt(items, n):
    """items dealt to n threads back and forth, as in a snake draft: thread t gets the t-th item of each even round
    of n and the t-th from the end of each odd round. Work that grows along items (causal attention's blocks) then
    evens out: on 2 threads, 16 row blocks that see 1 .. 16 column blocks give 68 and 68 (round-robin: 64 and 72)."""
    shares = [[] for _ in range(n)]
    for i, item in enumerate(items):
        lap, t = divmod(i, n)
        shares[n - 1 - t if lap % 2 else t].append(item)
    return shares


def share(work, items):
    """work(share) on each thread's share of items, dealt back and forth (_dealt); the results in thread order.
    Dealing rather than cutting in halves balances work that grows along items (causal attention).

    The calling thread does the first share itself while helper threads do the others: each call costs a hand-off
    through a queue (tens of microseconds), not a Future per share. BLAS is held to one thread meanwhile, so that
    the threads do not each start BLAS threads of their own.
    """
    items = list(items)
    n = min(get_num_threads(), len(items))
    if n <= 1 or getattr(_this_thread, "sharing", False):
        return [work(items)]
    _start_helpers(n - 1)
    with tuning.blas_held():
        done = queue.SimpleQueue()
        shares = _dealt(items, n)
        for t in range(1, n):
            _tasks.put((work, shares[t], t, done))
        results = [None] * n
        _this_thread.sharing = True
        try:
            results[0] = work(shares[0])
        finally:
            _this_thread.sharing = False
            errors = []
            for _ in range(1, n):           # wait for every helper, even after an error here
                index, result, error = done.get()
                results[index] = result
                errors.append(error)
    for error in errors:
        if error is not None:
            raise error
    return results
