"""A learner's flash attention loop beside the library's, tile by tile: where the exercises flash_forward and
flash_backward call `trace(...)` (lessons/exercises/given.py), compare_traces runs their Function on a small case
with the trace recorded, runs the library's traced reference (tinyattn.functional.trace_flash_attention) on the same
inputs, and names the first tile where the two differ (with each row's m, its rescale alpha and, after a row
block's last tile, its L beside the learner's), with both sides' arrays. A Function that never calls trace
has no trace to compare: the answer is then None, never a failure.

    difference = compare_traces(FlashAttention)          # None: no trace, or the same as the library's throughout
    if difference is not None:
        print(difference["text"])
"""
import numpy as np

import tinyattn as ta
from tinyattn import backend
from tinyattn.functional import trace_flash_attention

from lessons.exercises.given import recording_trace

NAMES = {"forward": ("m", "l", "acc"), "backward": ("p", "ds")}


def first_difference(learner_calls, reference_records, which, learner_lse=None, rtol=1e-9, atol=1e-12):
    """The first tile where the learner's trace calls differ from the reference's records of one pass, as a dict:
    "tile" (the reference record's index in its pass), "label" (how the tile is named: the record's label),
    "rows", "cols", "name" (the first quantity that differs), "yours" and "library" (that quantity's arrays, or
    None where one side has no such tile), "max_abs_difference", "text" (a paragraph saying so) and "table" (lines
    that explain it, or none). learner_lse: the L (..., N, 1) that the learner's forward saved for backward (None:
    not compared); each row block's L is compared after its last tile, with m + log l there (+inf where l = 0).
    None when every tile (and L) agrees to rtol/atol (NaN agreeing with NaN, inf with inf of the same sign) or
    there are no learner calls."""
    if not learner_calls:
        return None
    names = NAMES[which]
    reference = [r for r in reference_records if r["pass"] == which]
    for tile in range(max(len(learner_calls), len(reference))):
        ours = reference[tile] if tile < len(reference) else None
        theirs = learner_calls[tile] if tile < len(learner_calls) else None
        if ours is None or theirs is None:
            record = ours or reference[-1]
            return {"tile": tile, "label": record["label"], "rows": ours and ours["rows"],
                    "cols": ours and ours["cols"], "name": None, "yours": theirs,
                    "library": ours and tuple(ours[n] for n in names), "max_abs_difference": None, "table": [],
                    "text": ("" if ours else "after ") + f"{record['label']}: your loop called trace "
                            f"{len(learner_calls)} times, the library visits {len(reference)} tiles" +
                            (" (a causal row block visits only the key blocks it may see)"
                             if len(learner_calls) > len(reference) else "")}
        if len(theirs) != len(names):
            return {"tile": tile, "label": ours["label"], "rows": ours["rows"], "cols": ours["cols"], "name": None,
                    "yours": theirs, "library": tuple(ours[n] for n in names), "max_abs_difference": None,
                    "table": [], "text": f"{ours['label']}: trace was called with {len(theirs)} arrays; it takes "
                                         f"{', '.join(names)}"}
        for name, mine in zip(names, theirs):
            found = _difference(ours, name, _host(mine), _host(ours[name]), rtol, atol)
            if found is not None:
                return found
        last_of_rows = tile + 1 == len(reference) or reference[tile + 1]["rows"] != ours["rows"]
        if which == "forward" and learner_lse is not None and last_of_rows:
            found = _difference(ours, "L", _host(learner_lse)[..., slice(*ours["rows"]), :], lse_of(ours), rtol,
                                atol)
            if found is not None:
                return found
    return None


def lse_of(record):
    """Each row's log-sum-exp L = m + log l after a forward record's tile (+inf where l = 0: no key seen)."""
    m, l = _host(record["m"]), _host(record["l"])
    with np.errstate(divide="ignore"):
        return np.where(l > 0, m + np.log(np.where(l > 0, l, 1)), np.inf)


def last_m_and_l(records):
    """Each row's m and l after its row block's last forward tile, as two arrays (..., N, 1)."""
    last = {r["rows"]: r for r in records if r["pass"] == "forward"}          # each row block's last tile wins
    return tuple(np.concatenate([_host(last[rows][name]) for rows in sorted(last)], axis=-2) for name in ("m", "l"))


def _host(array):
    return array.get() if hasattr(array, "get") else np.asarray(array)


def _difference(record, name, mine, expected, rtol, atol):
    """The report on quantity name of record's tile (mine against expected), or None when they agree."""
    where = f"L of query rows {record['rows'][0]}-{record['rows'][1] - 1}, after {record['label']}" \
        if name == "L" else record["label"]
    report = {"tile": record["tile"], "label": record["label"], "rows": record["rows"], "cols": record["cols"],
              "name": name, "yours": mine, "library": expected, "max_abs_difference": None, "table": []}
    if mine.shape != expected.shape:
        return {**report, "text": f"{where}: {name} has shape {mine.shape}, the library's {expected.shape}"}
    off = ~np.isclose(mine, expected, rtol=rtol, atol=atol, equal_nan=True)
    if not off.any():
        return None
    both = np.isfinite(mine) & np.isfinite(expected)
    gap = float(np.abs(mine - expected)[both].max()) if both.any() else float("nan")
    first = tuple(int(i) for i in np.argwhere(off)[0])
    text = (f"{where}: {name} differs, by up to {gap:.3g}; first at index {first}: yours {float(mine[first]):.10g}, "
            f"the library's {float(expected[first]):.10g}")
    if record["pass"] == "forward" and name == "L":
        report["table"] = _lse_table(record, _rows(mine))
    elif record["pass"] == "forward":
        wrong, alpha = _rows(off).any(axis=-1), _rows(_host(record["alpha"]))[:, 0]
        report["table"] = _rescale_table(record, name, wrong)
        if (alpha < 1).any() and (wrong == (alpha < 1)).all():
            text += (f". It differs in exactly the {int(wrong.sum())} rows (of head 0) whose alpha < 1, where this "
                     f"tile moved the max: what was summed against the old max must be rescaled by alpha")
    return {**report, "max_abs_difference": gap, "text": text}


def _rows(array):
    """Head 0 of an array of (..., rows, columns): (rows, columns)."""
    return array.reshape((-1,) + array.shape[-2:])[0]


def _rescale_table(record, name, wrong):
    """What explains a forward tile's difference, row by row (head 0): the library's m before and after the tile
    and the rescale alpha = exp(m before - m), beside whether the learner's quantity is off in the row (wrong)."""
    m_before, m, alpha = (_rows(_host(record[n]))[:, 0] for n in ("m_before", "m", "alpha"))
    lines = [f"{'row':>5} {'m before':>10} {'m':>10} {'alpha':>8}  {name} (head 0)"]
    return lines + [f"{row:5d} {m_before[i]:10.4f} {m[i]:10.4f} {alpha[i]:8.4f}  "
                    + ("differs" if wrong[i] else "agrees") for i, row in enumerate(range(*record["rows"]))]


def _lse_table(record, mine):
    """Each row's m and l after the row block's last tile, the library's L = m + log l, and the learner's L."""
    m, l = (_rows(_host(record[n]))[:, 0] for n in ("m", "l"))
    expected = _rows(lse_of(record))[:, 0]
    lines = [f"{'row':>5} {'m':>10} {'l':>10} {'m + log l':>10} {'yours':>10}"]
    return lines + [f"{row:5d} {m[i]:10.4f} {l[i]:10.4f} {expected[i]:10.4f} {mine[i, 0]:10.4f}"
                    for i, row in enumerate(range(*record["rows"]))]


def small_case(seed=0, n=40, m=40, dim=8, heads=2):
    """q, k, v (1, heads, n or m, dim) float64 arrays: two heads and ragged blocks of 16."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((1, heads, n, dim)), rng.standard_normal((1, heads, m, dim)),
            rng.standard_normal((1, heads, m, dim)))


def record_trace(function, q, k, v, grad, is_causal, block_size):
    """The trace(...) calls of function's forward and of its backward from dO = grad, on q, k, v without a mask
    (scale 1/sqrt(E)): two lists, one tuple of arrays per call; then the L its forward saved for backward (the fifth
    of q, k, v, out, L, mask, as the exercises' backward reads them; None where it saved something else). The
    grader's child runs this on the learner's Function, so that only the arrays travel back."""
    kept = []
    leaves = [ta.tensor(a, requires_grad=True) for a in (q, k, v)]
    with recording_trace() as calls:
        out = keeping_lse(function, kept).apply(*leaves, None, 1 / np.sqrt(q.shape[-1]), is_causal, False, block_size)
        forward_calls = len(calls)
        out.backward(ta.tensor(grad))
    return calls[:forward_calls], calls[forward_calls:], kept[0]


def keeping_lse(function, kept):
    """function (a flash attention Function) whose forward also appends to the list kept the L it saved for
    backward: the fifth of q, k, v, out, L, mask, as the exercises' given backward reads them (None where it saved
    something else). A stand-in for a Function run in the grader's child says what it saved there
    (runner.py's saved_tensors_of)."""
    class KeepingLse(function):
        @staticmethod
        def forward(ctx, *args):
            out = function.forward(ctx, *args)
            saved = getattr(function, "saved_tensors_of", lambda ctx: ctx.saved_tensors)(ctx)
            kept.append(saved[4] if len(saved) == 6 and backend.is_array(saved[4]) else None)
            return out
    return KeepingLse


def compare_traces(function, which="forward", is_causal=True, block_size=16, seed=0, record=None):
    """Run function (a flash attention Function with forward(ctx, q, k, v, mask, scale, is_causal, enable_gqa,
    block_size), as the exercises' FlashAttention) forward and backward on small_case(seed) with trace recorded,
    and the library's traced reference on the same inputs; first_difference of the pass `which` ("forward": the
    calls trace(m, l, acc), and the L it saved; "backward": trace(p, grad_s)). None where the learner's code made no
    trace call, or where their trace is the library's to within rounding. record(q, k, v, grad, is_causal,
    block_size) gives record_trace's answer where it is recorded elsewhere (the grader's child); by default
    record_trace(function, ...) here."""
    q, k, v = small_case(seed)
    grad = np.random.default_rng(seed + 1).standard_normal(q.shape)
    record = record or (lambda *arrays_and_options: record_trace(function, *arrays_and_options))
    forward, backward, lse = record(q, k, v, grad, is_causal, block_size)
    reference = trace_flash_attention(q, k, v, is_causal=is_causal, block_size=block_size, grad_output=grad)
    if which == "forward":
        return first_difference(forward, reference.records, which, learner_lse=lse)
    return first_difference(backward, reference.records, which)
