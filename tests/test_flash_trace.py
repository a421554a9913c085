"""Flash attention's reference, traced tile by tile (functional/flash_trace.py): the records are the loop's own."""
import numpy as np
import pytest

import tinyattn as ta
import tinyattn.functional as F
from tinyattn.functional.flash_attention import ReferenceFlashAttention

from conftest import host

N, D, BLOCK = 64, 8, 16


def inputs(seed=0, n=N, m=N, heads=1):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((1, heads, n, D))
    k, v = rng.standard_normal((2, 1, heads, m, D))
    return q, k, v


def naive_scores(q, k, is_causal):
    s = (1 / np.sqrt(D)) * (q @ np.swapaxes(k, -1, -2))
    if is_causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    return s


def final_forward(records):
    """Each row block's last forward record, in row order."""
    last = {}
    for r in records:
        if r["pass"] == "forward":
            last[r["rows"]] = r
    return [last[rows] for rows in sorted(last)]


@pytest.mark.parametrize("is_causal", [False, True])
def test_final_m_is_the_row_max_and_m_plus_log_l_the_log_sum_exp(is_causal):
    q, k, v = inputs()
    trace = F.trace_flash_attention(q, k, v, is_causal=is_causal, block_size=BLOCK)
    ends = final_forward(trace.records)
    m = np.concatenate([r["m"] for r in ends], axis=-2)[..., 0]
    l = np.concatenate([r["l"] for r in ends], axis=-2)[..., 0]
    s = naive_scores(q, k, is_causal)
    assert m.dtype == np.float64
    assert np.array_equal(m, s.max(axis=-1))                              # a max is exact, whatever the order
    lse = s.max(-1) + np.log(np.exp(s - s.max(-1, keepdims=True)).sum(-1))
    assert np.abs(m + np.log(l) - lse).max() <= 1e-12


@pytest.mark.parametrize("is_causal", [False, True])
def test_traced_output_and_gradients_equal_the_untraced_reference_exactly(is_causal):
    q, k, v = inputs(1)
    grad = np.random.default_rng(2).standard_normal(q.shape)
    trace = F.trace_flash_attention(q, k, v, is_causal=is_causal, block_size=BLOCK, grad_output=grad)
    leaves = [ta.tensor(a, requires_grad=True) for a in (q, k, v)]
    out = ReferenceFlashAttention.apply(*leaves, None, 1 / np.sqrt(D), is_causal, False, BLOCK)
    out.backward(ta.tensor(grad))
    assert np.array_equal(host(trace.output), out.numpy())
    for traced, leaf in zip(trace.grads, leaves):
        assert np.array_equal(host(traced), leaf.grad.numpy())


@pytest.mark.parametrize("is_causal, tiles", [(False, 16), (True, 10)])
def test_one_record_per_visited_tile_and_causal_tiles_skipped(is_causal, tiles):
    trace = F.trace_flash_attention(*inputs(), is_causal=is_causal, block_size=BLOCK)
    for which in ("forward", "backward"):
        records = [r for r in trace.records if r["pass"] == which]
        assert len(records) == tiles                                       # 4 x 4 blocks; causal: 4 + 3 + 2 + 1
        assert [r["tile"] for r in records] == list(range(tiles))
        assert all(r["cols"][0] <= r["rows"][1] - 1 for r in records) or not is_causal


def test_records_show_the_rescale_and_the_backward_contributions_sum_to_the_gradients():
    q, k, v = inputs(3, n=40, m=56)                                     # ragged blocks: 16 + 16 + 8 rows
    trace = F.trace_flash_attention(q, k, v, block_size=BLOCK)
    for r in trace.records:
        if r["pass"] == "forward":
            assert np.array_equal(r["alpha"], np.exp(r["m_before"] - r["m"]))
            assert r["scores"].shape[-2:] == (r["rows"][1] - r["rows"][0], r["cols"][1] - r["cols"][0])
            assert r["matrix_bytes"] == 40 * 56 * 8
    dq = np.zeros_like(q)
    dk, dv = np.zeros_like(k), np.zeros_like(v)
    for r in trace.records:
        if r["pass"] == "backward":
            dq[..., slice(*r["rows"]), :] += r["dq"]
            dk[..., slice(*r["cols"]), :] += r["dk"]
            dv[..., slice(*r["cols"]), :] += r["dv"]
    for summed, traced in zip((dq, dk, dv), trace.grads):
        np.testing.assert_allclose(summed, host(traced), rtol=0, atol=1e-13)
    # The last tile of a row block leaves the output the untraced function gives.
    out = np.concatenate([r["partial"] for r in final_forward(trace.records)], axis=-2)
    np.testing.assert_allclose(out, host(trace.output), rtol=0, atol=1e-15)


def test_nothing_is_recorded_outside_a_trace():
    from tinyattn.functional.flash_attention import tile_recorder
    assert tile_recorder.get() is None
    F.trace_flash_attention(*inputs(), block_size=BLOCK)
    assert tile_recorder.get() is None


@pytest.mark.gpu
def test_trace_on_the_gpu_matches_the_cpu():
    q, k, v = inputs(4)
    cpu = F.trace_flash_attention(q, k, v, is_causal=True, block_size=BLOCK)
    gpu = F.trace_flash_attention(*(ta.tensor(a, device="cuda") for a in (q, k, v)), is_causal=True,
                                  block_size=BLOCK)
    assert len(gpu.records) == len(cpu.records)
    for a, b in zip(cpu.records, gpu.records):
        key = "m" if a["pass"] == "forward" else "p"
        assert (b["rows"], b["cols"]) == (a["rows"], a["cols"])
        np.testing.assert_allclose(host(b[key]), a[key], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_every_tile_stays_in_the_inputs_dtype_and_tile_bytes_counts_what_the_loop_holds(dtype):
    """Only L is float64 (backward rounds S - L once); a tile holds S and P (forward: with m and l before and after,
    alpha, acc) or S, P, dP, dS and the three contributions (backward), and tile_bytes is their bytes."""
    q, k, v = (a.astype(dtype) for a in inputs(5, n=40, m=56))          # ragged blocks: 16 + 16 + 8 rows
    trace = F.trace_flash_attention(q, k, v, block_size=BLOCK)
    size = np.dtype(dtype).itemsize
    for r in trace.records:
        rows, cols = r["rows"][1] - r["rows"][0], r["cols"][1] - r["cols"][0]
        assert {a.dtype for a in r.values() if isinstance(a, np.ndarray)} == {np.dtype(dtype)}
        if r["pass"] == "forward":
            held = 2 * rows * cols + 5 * rows + rows * D
        else:
            held = 4 * rows * cols + rows * D + 2 * cols * D
        assert r["tile_bytes"] == held * size
        assert r["matrix_bytes"] == 40 * 56 * size
    assert {r["pass"] for r in trace.records} == {"forward", "backward"}
