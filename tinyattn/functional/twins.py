"""Which implementation a public function of tinyattn.functional runs.

Every fused Function has two: the reference twin (plain array code, forward and backward as the lessons derive
them; the oracle the tests hold the fast one to) and the fast version (the same math arranged for speed, with the
CPU layer's help). The fast one runs unless `with ta.reference():` is open in this thread, or TINYATTN_REFERENCE=1
is set for the whole run: then every public function runs its reference twin.
"""
import contextlib
import os
import threading

_twins = {}                      # public name -> (fast Function, reference Function)
_this_thread = threading.local()


def register(name, fast, reference):
    """Declare the two implementations behind the public function `name`."""
    _twins[name] = (fast, reference)


def names():
    """The public functions that have twins, sorted."""
    return sorted(_twins)


def reference_enabled():
    """True inside `with ta.reference():`, or (outside any such block) when TINYATTN_REFERENCE=1."""
    enabled = getattr(_this_thread, "reference", None)
    return os.environ.get("TINYATTN_REFERENCE") == "1" if enabled is None else enabled


@contextlib.contextmanager
def reference(enabled=True):
    """Run every fused function on its reference twin inside the block (enabled=False: on the fast path)."""
    previous = getattr(_this_thread, "reference", None)
    _this_thread.reference = bool(enabled)
    try:
        yield
    finally:
        _this_thread.reference = previous


def implementation(name):
    """The Function that the public function `name` runs now."""
    fast, twin = _twins[name]
    return twin if reference_enabled() else fast
