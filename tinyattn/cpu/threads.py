"""tinyattn's own threads: work dealt out among a few helper threads and the calling thread.

NumPy releases the GIL inside its ufunc loops and BLAS calls, so plain Python threads run array code side by side.
As in PyTorch, set_num_threads(n) (or TINYATTN_NUM_THREADS) picks how many cores tinyattn uses, by default one per
physical core; 1 runs everything in the calling thread, exactly as written.

Two kinds of work go to the helpers, through one queue. share() deals one piece of work out and waits for it all.
A Later job is work the calling thread does not wait for (a Linear's weight gradient, which nothing reads until the
backward walk reaches the weight): a helper runs it when no share is waiting, and whoever needs its result first
waits for it, or runs it if no helper has begun it. While jobs are unfinished, the calling thread does the shares no
helper has begun itself, instead of waiting for a helper that may be busy with a job.
"""
import collections
import os
import queue
import threading

from . import tuning

_num_threads = None                 # set by set_num_threads; None: $TINYATTN_NUM_THREADS, else physical_cores()
_tasks = queue.SimpleQueue()        # shares, as (work, items, index, done queue, claim), and Later jobs
_helpers = []
_outstanding = set()                # Later jobs not yet finished
_running_jobs = set()               # Later jobs a helper runs now
_this_thread = threading.local()    # .sharing is True while a thread works on its share (no nested sharing)


def physical_cores(cpus=None, sysfs="/sys/devices/system/cpu"):
    """How many physical cores the CPUs this process may run on (cpus: their numbers) belong to: tinyattn's default
    thread count, as PyTorch's. The hyperthreads (SMT) of one core share its vector units, so a thread on each adds
    hand-offs and thinner shares rather than speed. Read from Linux's CPU topology (the CPUs that share a core list
    the same siblings); where that cannot be read, every CPU counts as a core."""
    if cpus is None:
        cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    siblings = set()
    for number in cpus:
        try:
            with open(os.path.join(sysfs, f"cpu{number}", "topology", "thread_siblings_list")) as f:
                siblings.add(f.read().strip())
        except OSError:
            return max(len(cpus), 1)
    return max(len(siblings), 1)


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
        set_num_threads(int(wanted or 0) or physical_cores())
    return _num_threads


def _helper_loop():
    """A helper thread: runs shares as they come, and the Later jobs it has taken when no share is waiting and fewer
    jobs run than set_num_threads leaves it room for; a share or job another thread has begun is passed over (forever;
    a daemon thread ends with the process)."""
    _this_thread.sharing = True
    jobs = collections.deque()          # jobs this helper took from the queue and has not run
    while True:
        room = jobs and len(_running_jobs) < get_num_threads() - 1
        try:
            task = _tasks.get(block=not room)
        except queue.Empty:             # no share waiting: a job
            job = jobs.popleft()
            _running_jobs.add(job)
            try:
                job.run()
            finally:
                _running_jobs.discard(job)
            continue
        if isinstance(task, Later):
            jobs.append(task)
        else:
            _run_share(*task)
        # A share's work holds the arrays it reads and writes (a backward's saved activations among them): let them
        # go now, not when the next task comes, which may be a whole layer later.
        task = None


def _run_share(work, items, index, done, claim):
    """A helper's turn at one share of share(), unless the calling thread has begun it."""
    if not claim.acquire(blocking=False):
        return
    try:
        done.put((index, work(items), None))
    except BaseException as error:      # handed to the caller, which raises it
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
    the threads do not each start BLAS threads of their own. While any Later job is unfinished (a helper may be
    busy with one), the calling thread then does the shares no helper has begun itself, instead of waiting for them.
    """
    items = list(items)
    n = min(get_num_threads(), len(items))
    if n <= 1 or getattr(_this_thread, "sharing", False):
        return [work(items)]
    _start_helpers(n - 1)
    with tuning.blas_held():
        done = queue.SimpleQueue()
        shares, begun = _dealt(items, n), [threading.Lock() for _ in range(n)]        # begun[t]: share t begun
        for t in range(1, n):
            _tasks.put((work, shares[t], t, done, begun[t]))
        results, errors, waiting = [None] * n, [], n - 1
        _this_thread.sharing = True
        try:
            results[0] = work(shares[0])
            for t in range(1, n):
                if _outstanding and begun[t].acquire(blocking=False):
                    waiting -= 1
                    try:
                        results[t] = work(shares[t])
                    except BaseException as error:
                        errors.append(error)
        except BaseException:
            for t in range(1, n):           # after an error here, the shares no helper has begun are not begun
                if begun[t].acquire(blocking=False):
                    waiting -= 1
            raise
        finally:
            _this_thread.sharing = False
            for _ in range(waiting):        # wait for every helper, even after an error here
                index, result, error = done.get()
                results[index] = result
                errors.append(error)
    for error in errors:
        if error is not None:
            raise error
    return results


class Later:
    """A job that a helper thread runs when it comes to it, while the thread that started it goes on."""

    def __init__(self, job):
        self._job, self._claim, self._done, self._error = job, threading.Lock(), threading.Event(), None

    def run(self):
        """Run the job here, unless another thread has begun it; True when this call ran it."""
        if not self._claim.acquire(blocking=False):
            return False
        try:
            with tuning.blas_held():
                self._job()
        except BaseException as error:   # raised by wait()
            self._error = error
        finally:
            self._job = None             # let go of what it read and wrote: a helper may hold this Later a while
            _outstanding.discard(self)
            self._done.set()
        return True

    def wait(self):
        """Return once the job is done: run it here if no helper has begun it, else wait for the helper. Raises the
        job's error, if it had one."""
        if not self.run():
            self._done.wait()
        if self._error is not None:
            raise self._error

    def start(self):
        """Hand the job to the helper threads; with one thread, or inside a share of work, run it now. Returns self."""
        if get_num_threads() <= 1 or getattr(_this_thread, "sharing", False):
            self.run()
            return self
        _start_helpers(get_num_threads() - 1)
        _outstanding.add(self)
        _tasks.put(self)
        return self
