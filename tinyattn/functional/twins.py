"""Which implementation a public function of tinyattn.functional runs.

Every fused Function has two: the reference twin (plain array code, forward and backward as the lessons derive
them; the oracle the tests hold the fast one to) and the fast version (the same math arranged for speed, with the
CPU layer's help). The fast one runs unless `with ta.reference():` is open in this thread, or TINYATTN_REFERENCE=1
is set for the whole run: then every public function runs its reference twin.

`use(name=MyFunction)` puts a Function of one's own (an exercise's, say) in place of both: every public function,
module and model then runs it, on either path, until `use()` removes it or the `with use(...)` block ends.
"""
import contextlib
import os
import threading

from ..tensor import Function

_twins = {}                      # public name -> (fast Function, reference Function)
_this_thread = threading.local()
_in_use = {}                     # public name -> a Function of one's own that runs instead of both twins


def register(name, fast, reference):
    """Declare the two implementations behind the public function `name`."""
    _twins[name] = (fast, reference)


def pair(name):
    """The (fast, reference) Functions behind the public function `name`."""
    return _twins[name]


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
    """The Function that the public function `name` runs now: one's own if `use` installed it, else a twin."""
    if name in _in_use:
        return _in_use[name]
    fast, twin = _twins[name]
    return twin if reference_enabled() else fast


def runs_fast(name):
    """True when the public function `name` runs its fast twin now: neither the reference path nor a Function of
    one's own (use) is in place. A public function asks this where it has a still faster way (the GPU's kernels)
    that only stands in for the fast twin, without naming the fast twin's class."""
    return name not in _in_use and not reference_enabled()


def use(**functions):
    """Run Functions of one's own in place of the library's: `use(softmax=MySoftmax)`.

    Each name is a public function with twins (names() lists them); each value a Function subclass whose forward
    takes what the library's does. It replaces both twins for the whole process (every thread, every model) and
    wins over `ta.reference()`. `use()` with no arguments removes every replacement. The returned object is a
    context manager: leaving its block restores whatever was installed before the call.
    """
    unknown = sorted(set(functions) - set(_twins))
    if unknown:
        raise ValueError(f"use: no public function named {', '.join(unknown)}; the ones you can replace are "
                         f"{', '.join(names())}")
    for name, function in functions.items():
        if not (isinstance(function, type) and issubclass(function, Function)):
            raise TypeError(f"use: {name} must be a subclass of tinyattn.Function (with static forward and "
                            f"backward), got {function!r}")
    before = dict(_in_use)
    if functions:
        _in_use.update(functions)
    else:
        _in_use.clear()
    return _Installed(functions, before)


class _Installed:
    """What `use` returns: leaving `with use(...):` puts back what was installed before."""

    def __init__(self, installed, before):
        self.installed, self.before = installed, before

    def __repr__(self):
        return f"use({', '.join(f'{name}={f.__name__}' for name, f in self.installed.items())})"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _in_use.clear()
        _in_use.update(self.before)
