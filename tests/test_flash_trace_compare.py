"""lessons/flash_trace_compare.py: a learner's trace(...) calls set beside the library's traced reference, naming
the first tile where they differ; no trace calls, no comparison (never a failure)."""
import numpy as np

import tinyattn as ta
from lessons import flash_trace_compare as compare
from lessons.exercises.given import recording_trace, trace
from lessons.exercises.solutions import flash_backward, flash_forward


def test_the_solutions_trace_agrees_with_the_library_tile_by_tile():
    for is_causal in (False, True):
        assert compare.compare_traces(flash_forward.FlashAttention, "forward", is_causal=is_causal) is None
        assert compare.compare_traces(flash_backward.FlashAttention, "backward", is_causal=is_causal) is None


def test_the_solution_does_call_trace_once_per_visited_tile():
    q, k, v = compare.small_case()
    reference = compare.trace_flash_attention(q, k, v, is_causal=True, block_size=16)
    with recording_trace() as calls:
        flash_forward.FlashAttention.apply(*(ta.tensor(a) for a in (q, k, v)), None, 0.5, True, False, 16)
    assert len(calls) == sum(r["pass"] == "forward" for r in reference.records) == 6        # 1 + 2 + 3 blocks


class ForgetsToRescaleAcc(flash_forward.FlashAttention):
    """A learner's forward that rescales l but not acc: right in every row block's first tile, wrong after."""

    @staticmethod
    def forward(ctx, q, k, v, mask, scale, is_causal, enable_gqa, block_size):
        xp = np
        n = q.shape[-2]
        out = xp.zeros(q.shape[:-1] + v.shape[-1:])
        for start in range(0, n, block_size):
            rows = slice(start, min(start + block_size, n))
            m = xp.full(q.shape[:-2] + (rows.stop - rows.start, 1), -xp.inf)
            l, acc = xp.zeros_like(m), xp.zeros(m.shape[:-1] + v.shape[-1:])
            for cstart in range(0, k.shape[-2], block_size):
                cols = slice(cstart, min(cstart + block_size, k.shape[-2]))
                if is_causal and cols.start > rows.stop - 1:
                    continue
                s = scale * q[..., rows, :] @ np.swapaxes(k[..., cols, :], -1, -2)
                if is_causal:
                    s = np.where(np.arange(cols.start, cols.stop)[None] > np.arange(rows.start, rows.stop)[:, None],
                                 -np.inf, s)
                m_new = np.maximum(m, s.max(-1, keepdims=True))
                p = np.exp(s - m_new)
                l = np.exp(m - m_new) * l + p.sum(-1, keepdims=True)
                acc = acc + p @ v[..., cols, :]                       # the bug: no exp(m - m_new)
                m = m_new
                trace(m, l, acc)
            out[..., rows, :] = acc / l
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None, None, None, None, None, None


def test_a_wrong_rescale_is_named_at_the_first_tile_where_it_shows():
    found = compare.compare_traces(ForgetsToRescaleAcc, "forward", is_causal=True)
    # Causal blocks of 16 over 40 rows: tile 0 is rows 0-15 alone; tile 1, rows 16-31 against keys 0-15, has acc
    # from one block only; tile 2 (keys 16-31) is the first that adds to an acc summed against an older max.
    assert found is not None and found["tile"] == 2 and found["name"] == "acc"
    assert found["rows"] == (16, 32) and found["cols"] == (16, 32)
    assert "forward tile 2 (query rows 16-31, keys 16-31): acc differs" in found["text"]
    assert found["yours"].shape == found["library"].shape == (1, 2, 16, 8)


def test_no_trace_calls_no_comparison_and_a_short_trace_is_named():
    from tinyattn.functional.flash_attention import ReferenceFlashAttention
    assert compare.compare_traces(ReferenceFlashAttention, "forward") is None          # it never calls trace
    assert compare.first_difference([], [], "forward") is None
    q, k, v = compare.small_case()
    reference = compare.trace_flash_attention(q, k, v, is_causal=False, block_size=16).records
    calls = [(r["m"], r["l"], r["acc"]) for r in reference if r["pass"] == "forward"]
    assert compare.first_difference(calls, reference, "forward") is None
    short = compare.first_difference(calls[:4], reference, "forward")
    assert short["tile"] == 4 and "called trace 4 times, the library visits 9 tiles" in short["text"]
    wrong_arity = compare.first_difference([c[:2] for c in calls], reference, "forward")
    assert wrong_arity["tile"] == 0 and "m, l, acc" in wrong_arity["text"]
