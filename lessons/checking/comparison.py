"""Comparing the learner's numbers with the reference path's, and diagnosing the difference: gradcheck, outputs and
gradients case by case, the verdict on each and the common mistake they match (lessons/mistakes.py), float32."""
import numpy as np

import tinyattn as ta
import tinyattn.functional as F
from lessons.checking.steps import Mismatch, explain
from lessons.checking.submission import Missing
from tinyattn import backend

TOLERANCE = 1e-10          # float64 against float64: the same math agrees to rounding


def assert_close(what, mine, expected, tolerance=TOLERANCE):
    """mine equals expected to within tolerance (absolute and relative), NaN nowhere the reference has none."""
    mine, expected = _host(mine), _host(expected)
    if mine.shape != expected.shape:
        raise Mismatch(f"{what}: shape {mine.shape}, the reference path's is {expected.shape}")
    if mine.dtype == bool or expected.dtype == bool:
        wrong = mine != expected
        if wrong.any():
            where = tuple(int(i) for i in np.argwhere(wrong)[0])
            raise Mismatch(f"{what} differs at {int(wrong.sum())} of {wrong.size} places, first at {where}: yours "
                           f"{mine[where]}, the expected {expected[where]}")
        return
    nan = np.isnan(mine) & ~np.isnan(expected)
    if nan.any():
        where = tuple(int(i) for i in np.argwhere(nan)[0])
        raise Mismatch(f"{what} is NaN at {int(nan.sum())} of {nan.size} places, first at {where}, where the "
                       f"reference path has {expected[where]:.6g}")
    with np.errstate(invalid="ignore"):                  # inf - inf where both are inf: equal, so 0 below
        error = np.where(mine == expected, 0.0, np.abs(mine - expected)) / (1 + np.abs(np.nan_to_num(expected)))
    error = np.nan_to_num(error, nan=np.inf)
    if error.size and error.max() > tolerance:
        where = np.unravel_index(int(error.argmax()), error.shape)
        where = tuple(int(i) for i in where)
        raise Mismatch(f"{what} differs from the reference path at {where}: yours {mine[where]:.10g}, reference "
                       f"{expected[where]:.10g}; {int((error > tolerance).sum())} of {error.size} entries differ by "
                       f"more than {tolerance:g}")


def _host(x):
    """A Tensor, a NumPy or CuPy array, or a value as a NumPy array."""
    return x.numpy() if isinstance(x, ta.Tensor) else backend.to_host(x)


def _arrays_on_host(recorded):
    """What a Function got and gave, its arrays moved to NumPy (the hints compute on NumPy, on any device); tuples
    and lists come back as tuples, dicts as dicts."""
    if isinstance(recorded, (tuple, list)):
        return tuple(_arrays_on_host(value) for value in recorded)
    if isinstance(recorded, dict):
        return {key: _arrays_on_host(value) for key, value in recorded.items()}
    return backend.to_host(recorded) if backend.is_array(recorded) else recorded


def use(**functions):
    """F.use(**functions): the learner's Functions in their slots; one that the file does not give says why."""
    for function in functions.values():
        if isinstance(function, Missing):
            raise LookupError(function._why)
    return F.use(**functions)


def _tensors(arrays, grad_of):
    return [None if a is None else ta.tensor(a, requires_grad=i in grad_of.values()) for i, a in enumerate(arrays)]


def forward_backward(call, arrays, grad_of, expected_shape=None):
    """call(*tensors) on fresh tensors made from arrays, then backward from a fixed random upstream gradient.
    Returns the output and the gradient of every array named in grad_of (a dict name -> position), by name. An
    output that is not of expected_shape (when given) stops there, naming both shapes: the backward would only fail
    on it with an error about broadcasting."""
    tensors = _tensors(arrays, grad_of)
    out = call(*tensors)
    if expected_shape is not None and tuple(out.shape) != tuple(expected_shape):
        inputs = ", ".join(f"{name} {tuple(arrays[i].shape)}" for name, i in grad_of.items())
        raise Mismatch(f"your forward returned an output of shape {tuple(out.shape)}; it must be "
                       f"{tuple(expected_shape)} (inputs: {inputs})")
    upstream = np.random.default_rng(1).standard_normal(out.shape).astype(out.array.dtype)
    out.backward(ta.tensor(upstream))
    return {"output": out.numpy(), **{f"d{name}": tensors[i].grad.numpy() for name, i in grad_of.items()}}


def runs_forward_and_backward(slot, function, call, arrays, grad_of):
    """The first step of a Function's check: in the slot, the learner's forward returns the reference path's output
    shape, and its backward runs."""
    with ta.reference(), ta.no_grad():
        expected = call(*_tensors(arrays, {})).shape
    with use(**{slot: function}):
        forward_backward(call, arrays, grad_of, expected_shape=expected)


def compare_paths(slot, function, call, arrays, grad_of, diagnose=None):
    """Output and gradients with the learner's Function in the slot against the reference path's: a verdict on each
    (see wrong)."""
    with ta.reference():
        expected = forward_backward(call, arrays, grad_of)
        with use(**{slot: function}):
            mine = forward_backward(call, arrays, grad_of, expected_shape=expected["output"].shape)
    verdicts = {what: failure(assert_close, what, mine[what], expected[what]) for what in expected}
    if any(verdicts.values()):
        raise wrong(verdicts, _diagnosis(diagnose, slot, function, call, arrays, grad_of, verdicts))


def gradcheck(slot, function, call, arrays, grad_of, diagnose=None):
    """ta.gradcheck in float64 of call with the learner's Function in the slot (call's argument names name the
    inputs in its messages). When it fails, every input is checked on its own, so that the message says which
    gradients are right as well as which are wrong (see wrong)."""
    try:
        _gradcheck(slot, function, call, arrays, grad_of)
    except ta.GradcheckError as error:
        verdicts = {f"d{name}": failure(_gradcheck, slot, function, call, arrays, {name: i})
                    for name, i in grad_of.items()} if len(grad_of) > 1 else {f"d{next(iter(grad_of))}": str(error)}
        if not any(verdicts.values()):
            raise
        raise wrong(verdicts, _diagnosis(diagnose, slot, function, call, arrays, grad_of, verdicts)) from None


def _gradcheck(slot, function, call, arrays, grad_of):
    with use(**{slot: function}):
        gradcheck_along_directions_first(call, lambda: _tensors(arrays, grad_of))


def gradcheck_along_directions_first(call, tensors):
    """ta.gradcheck of call on tensors(), along a few random directions first: a dozen forwards, where the full
    Jacobian takes two per input element, each a round trip to the learner's process. Only when they fail does the
    full check run, for its message (which entries fail, and how)."""
    try:
        ta.gradcheck(call, tensors(), full_jacobian=False)
    except ta.GradcheckError:
        ta.gradcheck(call, tensors())


def failure(check, *args):
    """What check(*args) found wrong, as text; None when it passed."""
    try:
        check(*args)
    except Exception as error:
        return explain(error)
    return None


def _diagnosis(diagnose, slot, function, call, arrays, grad_of, verdicts):
    """The hints of diagnose (lessons/mistakes.py) on what the learner's Function got and gave in this case."""
    if diagnose is None:
        return []
    seen = {}

    class Recorded(function):
        @staticmethod
        def forward(ctx, *args):
            seen["args"], seen["output"] = args, function.forward(ctx, *args)
            return seen["output"]

        @staticmethod
        def backward(ctx, grad):
            seen["upstream"], seen["grads"] = grad, function.backward(ctx, grad)
            return seen["grads"]
    try:
        with F.use(**{slot: Recorded}):
            forward_backward(call, arrays, grad_of)
        return diagnose(_arrays_on_host(seen), {what for what, why in verdicts.items() if why})
    except Exception:        # a hint is a bonus: when the learner's code cannot give one, the verdicts stand alone
        return []


def wrong(verdicts, hints=None):
    """A Mismatch from verdicts (output or gradient name -> None when right, else what is wrong): the wrong and the
    right ones on the first line, with what the first hint says that pattern points at, then each wrong one's
    message, then the other hints (a common mistake the numbers match exactly, say)."""
    bad = [what for what, why in verdicts.items() if why]
    good = [what for what in verdicts if what not in bad]
    hints = list(hints or [])
    verdict = f"{_listed(bad)} wrong" + (f", {_listed(good)} right" if good else "")
    details = [verdicts[what] if verdicts[what].startswith(what) else f"{what}: {verdicts[what]}" for what in bad]
    first = verdict + (f": {hints.pop(0)}" if hints else "")
    error = Mismatch("\n".join([first] + [f"  {line}" for line in details + hints]))
    error.verdict = verdict              # what another case's line repeats
    return error


def _listed(names):
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)


def assert_stays_float32(slot, function, call, arrays):
    """The learner's forward and backward, called by the engine on float32 arrays, return float32 arrays (the engine
    would quietly cast a float64 gradient back, so each return value is looked at before it does)."""
    returned = []

    class Watched(function):
        @staticmethod
        def backward(ctx, grad):
            grads = function.backward(ctx, grad)
            returned.extend(g for g in (grads if isinstance(grads, tuple) else (grads,)) if g is not None)
            return grads

    tensors = [a if a is None else ta.tensor(a.astype(np.float32) if a.dtype == np.float64 else a,
                                             requires_grad=a.dtype == np.float64) for a in arrays]
    with F.use(**{slot: Watched}):
        out = call(*tensors)
        out.sum().backward()
    dtypes = [out.dtype] + [g.dtype for g in returned]
    if any(d != np.float32 for d in dtypes):
        raise Mismatch(f"float32 inputs gave {'a float64 output' if out.dtype != np.float32 else 'float64 gradients'}"
                       f" (forward {out.dtype}, backward {[str(g.dtype) for g in returned]}): a float64 array or a "
                       f"NumPy float64 scalar got into the math; mix float32 arrays with Python floats only")
