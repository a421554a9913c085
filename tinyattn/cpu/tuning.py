"""What tinyattn changes in the process for speed, and for how long.

- BLAS is held to one thread while tinyattn's fast code runs (blas_held, and the tuned decorator for the fast
  Functions), and given back its thread count when that code returns. tinyattn's own threads (threads.py) split the
  work instead: a BLAS thread that finished a product keeps spinning on its core for a while, and would slow down
  the elementwise work that tinyattn's threads run next. The hold works from whichever Python thread runs tinyattn,
  so tinyattn's products always run on one BLAS thread and round the same way in every thread (OpenBLAS's AVX2
  kernel rounds most products differently on one thread and on two, in the last bit). Its cost: OpenBLAS (and MKL)
  have one thread count for the whole process, so while any thread is inside tinyattn's fast code, NumPy products of
  one's own in other threads run on one BLAS thread too. NumPy code outside tinyattn sees BLAS as it was otherwise,
  with one exception: in a backward walk where a helper writes a Linear's weight gradient (split.backward_walk), the
  hold lasts from that product to the walk's end, over the backward of one's own Functions too.
- glibc's allocator thresholds change only when tune_allocator() is called: there is no way to read them back and
  restore them, so it is the caller's choice (the lessons and `python -m tinyattn.bench` make it).
"""
import functools
import itertools
import sys
import threading

from ..backend import is_cupy_array

_lock = threading.Lock()
_depth = 0                  # how many blas_held() scopes are open, over all threads
_restore = []               # (a BLAS library's thread-count setter, its count before the outermost scope)


def _thread_count(library):
    """(get, set) of a BLAS library's thread count, callable from any thread. For OpenBLAS running threads of its own,
    OpenBLAS's own functions (under whatever prefix and suffix this build gave their names): threadpoolctl (3.8)
    sets that count only from the first thread that set it, and silently does nothing in the others, since the count
    is one for the whole process, while tinyattn sets it from whichever thread runs its code; calling OpenBLAS
    directly also leaves out threadpoolctl's Python layers, on every outermost hold."""
    if library.internal_api == "openblas" and library.threading_layer != "openmp":
        for prefix, suffix in itertools.product(("", "scipy_"), ("", "64_", "_64")):
            get = getattr(library.dynlib, f"{prefix}openblas_get_num_threads{suffix}", None)
            set_ = getattr(library.dynlib, f"{prefix}openblas_set_num_threads{suffix}", None)
            if get is not None and set_ is not None:
                return get, set_
    return library.get_num_threads, library.set_num_threads


@functools.lru_cache(maxsize=None)
def _blas_controllers():
    """threadpoolctl's controller of every BLAS library loaded in this process, found once."""
    from threadpoolctl import ThreadpoolController
    return tuple(ThreadpoolController().select(user_api="blas").lib_controllers)


@functools.lru_cache(maxsize=None)
def _blas():
    """(get, set) of the thread count of every BLAS library loaded in this process, found once."""
    return [_thread_count(library) for library in _blas_controllers()]


def blas_kernels():
    """(library, kernels) of every BLAS library loaded in this process, in lower case: ("openblas", "skylakex")
    where OpenBLAS runs its kernels for AVX-512 CPUs, ("openblas", "haswell") for AVX2 ones."""
    return [(library.internal_api, str(getattr(library, "architecture", "")).lower())   # MKL's controller has none
            for library in _blas_controllers()]


class blas_held:
    """`with blas_held():` BLAS runs on one thread inside, and on as many as before once the outermost scope closes,
    over all threads (the count is the process's). (A class rather than a generator-based context manager: it is
    entered around every fast Function call, and this costs half as much.)"""

    def __enter__(self):
        global _depth
        with _lock:
            if _depth == 0:
                _restore[:] = [(set_count, get_count()) for get_count, set_count in _blas()]
                for set_count, _ in _restore:
                    set_count(1)
            _depth += 1

    def __exit__(self, *exception):
        global _depth
        with _lock:
            _depth -= 1
            if _depth == 0:
                for set_count, count in _restore:
                    set_count(count)


def _held(method):
    @functools.wraps(method)
    def run(*args, **kwargs):
        # args: (ctx, arrays...) for forward, (ctx, grad) for backward; GPU arrays need no hold
        if len(args) > 1 and is_cupy_array(args[1]):
            return method(*args, **kwargs)
        with blas_held():
            return method(*args, **kwargs)
    return staticmethod(run)


def tuned(function_class):
    """Class decorator for a fast Function: its forward and backward run with BLAS held to one thread."""
    function_class.forward = _held(function_class.forward)
    function_class.backward = _held(function_class.backward)
    return function_class


def tune_allocator():
    """Let glibc keep freed memory for reuse, for the rest of the process (Linux with glibc only).

    NumPy allocates a fresh array for every temporary; glibc serves arrays over its mmap threshold with mmap and
    returns them to the OS on free, and trims the top of its heap when enough is free there, so the next array of
    that size pays a page fault for every 4 KiB. Raising both thresholds keeps those pages: the GPT step of
    `python -m tinyattn.bench train-step` (D=128) ran about 20% faster with it. Returns True when the thresholds were
    changed. The change cannot be undone: glibc has no way to read the old thresholds back.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (musl, for example): nothing to tune
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(libc.mallopt(m_mmap_threshold, 32 << 20) and libc.mallopt(m_trim_threshold, 256 << 20))
