"""A learner's flash attention loop beside the library's, tile by tile: where the exercises flash_forward and
flash_backward call `trace(...)` (lessons/exercises/given.py), compare_traces runs their Function on a small case
with the trace recorded, runs the library's traced reference (tinyattn.functional.trace_flash_attention) on the same
inputs, and names the first tile where the two differ, with both sides' arrays. A Function that never calls trace
has no trace to compare: the answer is then None, never a failure.

    difference = compare_traces(FlashAttention)          # None: no trace, or the same as the library's throughout
    if difference is not None:
        print(difference["text"])
"""
import numpy as np

import tinyattn as ta
from tinyattn.functional import trace_flash_attention

from lessons.exercises.given import recording_trace

NAMES = {"forward": ("m", "l", "acc"), "backward": ("p", "ds")}


def first_difference(learner_calls, reference_records, which, rtol=1e-9, atol=1e-12):
    """The first tile where the learner's trace calls differ from the reference's records of one pass, as a dict:
    "tile", "rows", "cols", "name" (the first quantity that differs), "yours" and "library" (that quantity's arrays,
    or None where one side has no such tile), "max_abs_difference", "text" (a paragraph saying so). None when every
    tile agrees to rtol/atol (NaN agreeing with NaN, inf with inf of the same sign) or there are no learner calls."""
    if not learner_calls:
        return None
    names = NAMES[which]
    reference = [r for r in reference_records if r["pass"] == which]
    for tile in range(max(len(learner_calls), len(reference))):
        ours = reference[tile] if tile < len(reference) else None
        theirs = learner_calls[tile] if tile < len(learner_calls) else None
        where = "" if ours is None else f" (query rows {ours['rows'][0]}-{ours['rows'][1] - 1}, keys " \
                                        f"{ours['cols'][0]}-{ours['cols'][1] - 1})"
        if ours is None or theirs is None:
            return {"tile": tile, "rows": ours and ours["rows"], "cols": ours and ours["cols"], "name": None,
                    "yours": theirs, "library": ours and tuple(ours[n] for n in names), "max_abs_difference": None,
                    "text": f"{which} tile {tile}{where}: " + (
                        f"your loop called trace {len(learner_calls)} times, the library visits {len(reference)} "
                        "tiles" + (" (a causal row block visits only the key blocks it may see)"
                                   if len(learner_calls) > len(reference) else ""))}
        if len(theirs) != len(names):
            return {"tile": tile, "rows": ours["rows"], "cols": ours["cols"], "name": None, "yours": theirs,
                    "library": tuple(ours[n] for n in names), "max_abs_difference": None,
                    "text": f"{which} tile {tile}{where}: trace was called with {len(theirs)} arrays; it takes "
                            f"{', '.join(names)}"}
        for name, mine in zip(names, theirs):
            expected = _host(ours[name])
            mine = _host(mine)
            if mine.shape != expected.shape:
                return _report(which, tile, where, ours, name, mine, expected,
                               f"{name} has shape {mine.shape}, the library's {expected.shape}")
            if not np.allclose(mine, expected, rtol=rtol, atol=atol, equal_nan=True):
                return _report(which, tile, where, ours, name, mine, expected, None)
    return None


def _host(array):
    return array.get() if hasattr(array, "get") else np.asarray(array)


def _report(which, tile, where, record, name, mine, expected, why):
    both = np.isfinite(mine) & np.isfinite(expected)
    gap = float(np.abs(mine - expected)[both].max()) if both.any() else float("nan")
    if why is None:
        row = np.argwhere(~np.isclose(mine, expected, rtol=1e-9, atol=1e-12, equal_nan=True))[0]
        first = tuple(int(i) for i in row)
        why = (f"{name} differs, by up to {gap:.3g}; first at index {first}: yours {float(mine[first]):.10g}, "
               f"the library's {float(expected[first]):.10g}")
    return {"tile": tile, "rows": record["rows"], "cols": record["cols"], "name": name, "yours": mine,
            "library": expected, "max_abs_difference": gap, "text": f"{which} tile {tile}{where}: {why}"}


def small_case(seed=0, n=40, m=40, dim=8, heads=2):
    """q, k, v (1, heads, n or m, dim) float64 arrays: two heads and ragged blocks of 16."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((1, heads, n, dim)), rng.standard_normal((1, heads, m, dim)),
            rng.standard_normal((1, heads, m, dim)))


def record_trace(function, q, k, v, grad, is_causal, block_size):
    """The trace(...) calls of function's forward and of its backward from dO = grad, on q, k, v without a mask
    (scale 1/sqrt(E)): two lists, one tuple of arrays per call. The grader's child runs this on the learner's
    Function, so that only the calls' arrays travel back."""
    leaves = [ta.tensor(a, requires_grad=True) for a in (q, k, v)]
    with recording_trace() as calls:
        out = function.apply(*leaves, None, 1 / np.sqrt(q.shape[-1]), is_causal, False, block_size)
        forward_calls = len(calls)
        out.backward(ta.tensor(grad))
    return calls[:forward_calls], calls[forward_calls:]


def compare_traces(function, which="forward", is_causal=True, block_size=16, seed=0, record=None):
    """Run function (a flash attention Function with forward(ctx, q, k, v, mask, scale, is_causal, enable_gqa,
    block_size), as the exercises' FlashAttention) forward and backward on small_case(seed) with trace recorded,
    and the library's traced reference on the same inputs; first_difference of the pass `which` ("forward": the
    calls trace(m, l, acc); "backward": trace(p, grad_s)). None where the learner's code made no trace call, or
    where their trace is the library's to within rounding. record(q, k, v, grad, is_causal, block_size) gives the
    two passes' calls where they are recorded elsewhere (the grader's child); by default record_trace(function, ...)
    here."""
    q, k, v = small_case(seed)
    grad = np.random.default_rng(seed + 1).standard_normal(q.shape)
    record = record or (lambda *arrays_and_options: record_trace(function, *arrays_and_options))
    forward, backward = record(q, k, v, grad, is_causal, block_size)
    reference = trace_flash_attention(q, k, v, is_causal=is_causal, block_size=block_size, grad_output=grad)
    return first_difference(forward if which == "forward" else backward, reference.records, which)
