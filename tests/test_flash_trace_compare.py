"""lessons/flash_trace_compare.py: a learner's trace(...) calls set beside the library's traced reference, naming
the first tile where they differ; no trace calls, no comparison (never a failure)."""
import numpy as np
import pytest

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
    # Causal blocks of 16 over 40 rows: tile 1 of 6 is rows 0-15 alone; tile 2, rows 16-31 against keys 0-15, has
    # acc from one block only; tile 3 (keys 16-31; index 2) is the first that adds to an acc summed against an older
    # max.
    assert found is not None and found["tile"] == 2 and found["name"] == "acc"
    assert found["rows"] == (16, 32) and found["cols"] == (16, 32)
    assert found["label"] == "forward tile 3 of 6 (query rows 16-31, keys 16-31)"
    assert found["text"].startswith("forward tile 3 of 6 (query rows 16-31, keys 16-31): acc differs")
    assert found["yours"].shape == found["library"].shape == (1, 2, 16, 8)
    # Beside it, what explains it: each row's m before and after the tile and alpha; acc is off exactly in the rows
    # whose alpha < 1 (where the tile moved the max), and the text says so.
    record = [r for r in compare.trace_flash_attention(*compare.small_case(), is_causal=True, block_size=16,
                                                       grad_output=np.ones((1, 2, 40, 8))).records][2]
    header, *rows = found["table"]
    assert header.split() == ["row", "m", "before", "m", "alpha", "acc", "(head", "0)"] and len(rows) == 16
    alpha = record["alpha"][0, 0, :, 0]
    assert [float(r.split()[3]) for r in rows] == pytest.approx(alpha, abs=5e-5)
    assert [r.split()[4] for r in rows] == ["differs" if a < 1 else "agrees" for a in alpha]
    assert 0 < (alpha < 1).sum() < 16
    assert f"differs in exactly the {(alpha < 1).sum()} rows (of head 0) whose alpha < 1" in found["text"]


def test_a_wrong_l_is_named_after_its_row_blocks_last_tile_with_m_l_and_m_plus_log_l():
    """trace(m, l, acc) right throughout, L = m + l: the first row block to end (rows 0-15, after the causal
    trace's first tile) is named, with each row's m, l, m + log l and the learner's L; a right L, or none, passes."""
    q, k, v = compare.small_case()
    reference = compare.trace_flash_attention(q, k, v, is_causal=True, block_size=16).records
    calls = [(r["m"], r["l"], r["acc"]) for r in reference if r["pass"] == "forward"]
    m, l = compare.last_m_and_l(reference)
    assert compare.first_difference(calls, reference, "forward", learner_lse=m + np.log(l)) is None
    found = compare.first_difference(calls, reference, "forward", learner_lse=m + l)
    assert found["name"] == "L" and found["tile"] == 0 and found["rows"] == (0, 16)
    assert found["text"].startswith("L of query rows 0-15, after forward tile 1 of 6 (query rows 0-15, keys 0-15): "
                                    "L differs")
    header, *rows = found["table"]
    assert header.split() == ["row", "m", "l", "m", "+", "log", "l", "yours"] and len(rows) == 16
    row = [float(x) for x in rows[3].split()]
    assert row[0] == 3 and row[1] + row[2] == pytest.approx(row[4], abs=2e-4)
    assert row[1] + np.log(row[2]) == pytest.approx(row[3], abs=2e-4)
    later = m + np.log(l)
    later[..., 20, 0] += 1.0                                   # only in the second row block (rows 16-31)
    found = compare.first_difference(calls, reference, "forward", learner_lse=later)
    assert found["text"].startswith("L of query rows 16-31, after forward tile 3 of 6")


def test_the_solutions_saved_l_comes_back_with_its_trace():
    q, k, v = compare.small_case()
    grad = np.ones_like(q)
    forward, backward, lse = compare.record_trace(flash_forward.FlashAttention, q, k, v, grad, True, 16)
    m, l = compare.last_m_and_l(compare.trace_flash_attention(q, k, v, is_causal=True, block_size=16).records)
    assert len(forward) == 6 and len(backward) == 0 and lse.shape == (1, 2, 40, 1)
    np.testing.assert_allclose(lse, m + np.log(l), rtol=1e-12)
    _, backward, lse = compare.record_trace(flash_backward.FlashAttention, q, k, v, grad, True, 16)
    assert len(backward) == 6 and lse.shape == (1, 2, 40, 1)          # the library's forward saves it too


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
    assert short["text"].startswith("forward tile 5 of 9 (query rows 16-31, keys 16-31): your loop")
    long = compare.first_difference(calls + calls[:1], reference, "forward")
    assert long["text"].startswith("after forward tile 9 of 9 (query rows 32-39, keys 32-39): your loop called "
                                   "trace 10 times")
    wrong_arity = compare.first_difference([c[:2] for c in calls], reference, "forward")
    assert wrong_arity["tile"] == 0 and "m, l, acc" in wrong_arity["text"]
