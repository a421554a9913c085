"""Code the exercises hand you, so that each asks only for its own idea.

- flash_forward and flash_backward walk attention in blocks: `blocks` cuts a length into slices, `visible` says
  whether a causal row block may see a column block at all, `block_scores` is one block of masked scores.
- grouped_query reuses attention itself: `attend` and `attend_backward` are lesson 03's forward and backward on
  arrays whose leading dims broadcast, with masks.
- attention's dropout draws the weights it drops with `dropout_scale`, as the library's attention draws them.
- bpe's `split_special` cuts a text at its special tokens, which BPE never splits or merges.
- `trace` lets flash_forward and flash_backward show their block loop: call it at the end of each block step, and
  where a trace is being recorded (`recording_trace`, as the checker does) your values are kept, to be set beside
  the library's (lessons/flash_trace_compare.py); elsewhere it does nothing.
"""
import contextlib
import re

from tinyattn.backend import xp_of
from tinyattn.functional.attention_inputs import additive_mask
from tinyattn.functional.dropout import keep_mask
from tinyattn.functional.softmax import softmax_array


def blocks(n, block_size):
    """[0:b], [b:2b], ... covering range(n); the last block may be shorter."""
    return [slice(start, min(start + block_size, n)) for start in range(0, n, block_size)]


def visible(rows, cols, is_causal):
    """Whether any query of the row block may see any key of the column block (causal: key j <= query i)."""
    return not is_causal or cols.start <= rows.stop - 1


_trace = []                    # the open recordings: recording_trace appends a list, trace adds to the newest


def trace(*arrays):
    """Optional, at the end of each block step: trace(m, l, acc) in flash_forward's loop (after m = m_new),
    trace(p, grad_s) in flash_backward's. Keeps a copy of the arrays while a trace is being recorded; no-op else."""
    if _trace:
        _trace[-1].append(tuple(xp_of(a).array(a, copy=True) for a in arrays))


@contextlib.contextmanager
def recording_trace():
    """Within the block, every trace(...) call is kept, in order, in the list this yields (one tuple per call)."""
    calls = []
    _trace.append(calls)
    try:
        yield calls
    finally:
        _trace.remove(calls)


def block_scores(q, k, mask, rows, cols, scale, is_causal):
    """S = scale * Q[rows] K[cols]^T for one block, plus the mask: -inf where a query may not see a key (causal, or a
    boolean mask that is False), or a float mask's values. The mask broadcasts to the scores; its dims of size 1
    stay size 1, so only the others are sliced."""
    xp = xp_of(q)
    s = scale * (q[..., rows, :] @ xp.swapaxes(k[..., cols, :], -1, -2))
    if is_causal:
        hidden = xp.arange(cols.start, cols.stop)[None, :] > xp.arange(rows.start, rows.stop)[:, None]
        s = xp.where(hidden, xp.asarray(-xp.inf, dtype=s.dtype), s)
    if mask is not None:
        s = s + additive_mask(mask[..., rows if mask.shape[-2] > 1 else slice(None),
                                   cols if mask.shape[-1] > 1 else slice(None)], s.dtype)
    return s


def attend(q, k, v, mask, scale):
    """O = P V with P = softmax(scale * Q K^T + mask) over the keys; a row with every key masked gives P = 0.
    Returns O and P."""
    s = scale * (q @ xp_of(q).swapaxes(k, -1, -2))
    if mask is not None:
        s = s + additive_mask(mask, q.dtype)
    p = softmax_array(s, -1)
    return p @ v, p


def attend_backward(q, k, v, p, grad, scale):
    """dQ, dK, dV and dS (what a float mask, added to S, gets) of attend, given dO = grad. Each keeps the broadcast
    shape of the computation: where k was shared by several query heads, dK still has one slice per query head."""
    xp = xp_of(grad)
    grad_v = xp.swapaxes(p, -1, -2) @ grad
    grad_p = grad @ xp.swapaxes(v, -1, -2)
    grad_s = p * (grad_p - (grad_p * p).sum(axis=-1, keepdims=True))
    return scale * (grad_s @ k), scale * (xp.swapaxes(grad_s, -1, -2) @ q), grad_v, grad_s


def dropout_scale(shape, dropout_p, like):
    """keep / (1 - p) over an array of shape: 0 for each weight dropped (each with probability dropout_p), 1 / (1 - p)
    for each kept, so that the expected weight stays the same. Drawn from tinyattn's seeded generator, with like's
    dtype and device, as the library's attention draws it: with the same seed, yours drops the same weights."""
    return keep_mask(shape, dropout_p, like).astype(like.dtype) * (1.0 / (1.0 - dropout_p))


def split_special(text, special_tokens):
    """text cut at its special tokens: [(stretch, is_special)] in order, the longest special token first where two
    start at the same place. The stretches between them are ordinary text (never empty)."""
    if not special_tokens:
        return [(text, False)] if text else []
    pattern = "(" + "|".join(re.escape(t) for t in sorted(special_tokens, key=len, reverse=True)) + ")"
    return [(part, i % 2 == 1) for i, part in enumerate(re.split(pattern, text)) if part]
