"""The CPU layer (tinyattn/cpu): sharing work among threads, cutting it into parts and pieces, BLAS held only while
tinyattn's fast code runs, and the fast Functions giving the same answers on one thread or several."""
import ast
import contextlib
import math
import threading
import time
import weakref
from pathlib import Path

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.functional as F
from tinyattn import cpu
from tinyattn.cpu import split, threads, tuning

from conftest import host, randn

LIBRARY_MIN_LANE_ENTRIES = split.MIN_LANE_ENTRIES      # before any test's thread_count fixture sets it to 1
cpu_only = pytest.mark.skipif(ta.get_default_device() != "cpu", reason="threads share CPU work only")


@pytest.fixture
def thread_count(monkeypatch):
    """Set tinyattn's thread count for one test, with small cache pieces so that small arrays still come in many,
    and small products and attention still shared among the threads, flash's heads in lanes however few."""
    before = threads.get_num_threads()
    monkeypatch.setattr(split, "CACHE_PIECE", 37)
    monkeypatch.setattr(split, "MIN_SHARED_MATMUL", 1)
    monkeypatch.setattr(split, "MIN_LANE_ENTRIES", 1)
    yield threads.set_num_threads
    threads.set_num_threads(before)


@cpu_only
def test_share_deals_items_back_and_forth_to_different_threads(thread_count):
    thread_count(2)
    seen = threads.share(lambda items: (list(items), threading.get_ident()), range(5))
    assert [items for items, _ in seen] == [[0, 3, 4], [1, 2]]
    assert seen[0][1] != seen[1][1]
    # causal flash attention's 16 row blocks, block i seeing i + 1 column blocks: an even split (round-robin: 64, 72)
    assert threads.share(lambda blocks: sum(i + 1 for i in blocks), range(16)) == [68, 68]
    thread_count(1)
    assert threads.share(lambda items: list(items), range(5)) == [[0, 1, 2, 3, 4]]


@cpu_only
def test_share_raises_what_a_helper_raised_and_keeps_working(thread_count):
    thread_count(2)

    def work(items):
        if 1 in items:
            raise ValueError("helper failed")
        return items
    with pytest.raises(ValueError, match="helper failed"):
        threads.share(work, range(2))
    assert threads.share(lambda items: items, range(4)) == [[0, 3], [1, 2]]


@cpu_only
def test_a_helper_lets_go_of_a_shares_arrays_once_done_not_when_the_next_task_comes(thread_count):
    thread_count(2)
    activation = np.ones(1000)                         # as a backward's saved array, read by both shares
    threads.share(lambda items, held=activation: float(held[list(items)].sum()), range(2))
    gone = weakref.ref(activation)
    del activation
    deadline = time.monotonic() + 5                    # the helper may still be on its way back to the queue
    while gone() is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert gone() is None


@cpu_only
def test_share_inside_a_share_runs_on_the_same_thread(thread_count):
    thread_count(2)
    inner = threads.share(lambda items: threads.share(lambda inner: len(inner), range(6)), range(2))
    assert inner == [[6], [6]]


@contextlib.contextmanager
def _busy_helper():
    """A helper thread busy with a Later job for the block (on two threads one job runs at a time)."""
    started, release = threading.Event(), threading.Event()
    job = threads.Later(lambda: (started.set(), release.wait(10))).start()
    try:
        assert started.wait(10)
        yield
    finally:
        release.set()
        job.wait()


@cpu_only
def test_a_later_job_runs_once_on_the_thread_that_comes_to_it_first(thread_count):
    thread_count(2)
    ran = []
    job = threads.Later(lambda: ran.append(threading.get_ident())).start()
    job.wait()
    job.wait()                                      # waiting again neither runs it again nor blocks
    assert len(ran) == 1
    with _busy_helper():
        job = threads.Later(lambda: ran.append(threading.get_ident())).start()
        job.wait()                                  # no helper has begun it: the waiting thread runs it
        assert ran[-1] == threading.get_ident() and len(ran) == 2
        # shares that the busy helper has not begun are done by the calling thread, each result in its place
        assert threads.share(lambda items: (list(items), threading.get_ident()), range(4)) == \
            [([0, 3], threading.get_ident()), ([1, 2], threading.get_ident())]
    with pytest.raises(ZeroDivisionError):
        threads.Later(lambda: 1 / 0).start().wait()
    thread_count(1)
    threads.Later(lambda: ran.append(threading.get_ident())).start()             # one thread: run at once
    assert ran[-1] == threading.get_ident() and len(ran) == 3


@cpu_only
def test_waiting_for_a_later_job_a_helper_has_begun_waits_until_it_is_done(thread_count):
    thread_count(2)
    started, release, finished = threading.Event(), threading.Event(), []
    job = threads.Later(lambda: (started.set(), release.wait(10), finished.append(True))).start()
    assert started.wait(10)
    waiter = threading.Thread(target=job.wait)
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive() and not finished      # the helper is inside the job: wait() must not return yet
    release.set()
    waiter.join(10)
    assert not waiter.is_alive() and finished


@cpu_only
def test_no_more_later_jobs_run_at_once_than_the_thread_count_leaves_room_for(thread_count):
    thread_count(4)
    threads.share(lambda items: items, range(4))            # three helpers started
    thread_count(2)                                         # one may run a job now, whatever helpers exist
    running, most, lock = [0], [0], threading.Lock()

    def job():
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1
    jobs = []
    for _ in range(4):                                      # one by one, while the first still runs
        jobs.append(threads.Later(job).start())
        time.sleep(0.004)
    for j in jobs:
        j.wait()
    assert most[0] == 1


class _SlowNumpy:
    """numpy, whose matmul waits to be let go once it has begun (a helper caught in the middle of a product)."""

    def __init__(self):
        self.begun, self.release = threading.Event(), threading.Event()

    def matmul(self, a, b, out):
        self.begun.set()
        assert self.release.wait(10)
        return np.matmul(a, b, out=out)

    def __getattr__(self, name):
        return getattr(np, name)


@cpu_only
@pytest.mark.parametrize("helper", ["free", "busy", "in the middle of it"])
def test_matmul_later_is_the_product_once_settled_through_the_array_or_a_view(thread_count, monkeypatch, helper):
    thread_count(2)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 48)).astype(np.float32), rng.standard_normal((48, 32)).astype(np.float32)
    with ta.cpu.tuning.blas_held():
        expected = a @ b
        np.testing.assert_array_equal(cpu.matmul_later(a, b), expected)     # outside a backward walk: at once
    assert not split._being_written
    slow = _SlowNumpy()
    if helper == "in the middle of it":
        monkeypatch.setattr(split, "xp_of", lambda _: slow)
    with cpu.backward_walk(), (_busy_helper() if helper == "busy" else contextlib.nullcontext()):
        out = cpu.matmul_later(a, b)
        if helper == "busy":
            assert id(out) in split._being_written      # queued behind the busy helper's job: not written yet
        if helper == "in the middle of it":
            assert slow.begun.wait(10)
            got = []
            reader = threading.Thread(target=lambda: got.append(cpu.settled(out.T).T.copy()))
            reader.start()
            reader.join(0.2)
            assert reader.is_alive()                     # settled waits for the helper to finish writing
            slow.release.set()
            reader.join(10)
            np.testing.assert_array_equal(got[0], expected)
        np.testing.assert_array_equal(cpu.settled(out.T).T, expected)
    assert not split._being_written
    assert cpu.settled(None) is None and cpu.settled(3.0) == 3.0


@cpu_only
def test_blas_is_held_from_the_first_product_left_to_a_helper_to_the_end_of_the_walk(thread_count):
    from threadpoolctl import threadpool_limits
    thread_count(2)
    a = np.ones((64, 48), dtype=np.float32)
    with threadpool_limits(2, user_api="blas"):
        with cpu.backward_walk():
            assert set(_blas_threads()) == {2}
            cpu.settled(cpu.matmul_later(a, a.T))
            assert set(_blas_threads()) == {1}             # a plain Function's product in the walk: one thread too
        assert set(_blas_threads()) == {2}


@cpu_only
@pytest.mark.parametrize("helper_busy", [False, True])
def test_the_backward_walk_reads_a_linear_weights_gradient_only_once_written(thread_count, helper_busy):
    """FastLinear leaves dW to a helper thread; the walk settles it wherever it reads it: a weight used twice (two
    dW added), a weight computed from a parameter (its dW goes on into Mul's backward) and a leaf's .grad."""
    thread_count(2)
    rng = np.random.default_rng(1)
    x, y = (ta.tensor(rng.standard_normal((2, 5, 24))) for _ in range(2))
    shared, scaled = (ta.tensor(rng.standard_normal((16, 24)), requires_grad=True) for _ in range(2))

    def grads():
        shared.grad = scaled.grad = None
        loss = (F.linear(x, shared) * F.linear(y, shared)).sum() + (F.linear(x, scaled * 3.0) ** 2).sum()
        with _busy_helper() if helper_busy else contextlib.nullcontext():
            loss.backward()
        assert not split._being_written
        return host(shared.grad), host(scaled.grad)
    fast = grads()
    with ta.reference():
        expected = grads()
    for got, want in zip(fast, expected):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def _topology(root, siblings):
    """A sysfs CPU tree in Linux's layout: cpuN/topology/thread_siblings_list names the CPUs that share N's core."""
    for number, listed in siblings.items():
        folder = root / f"cpu{number}" / "topology"
        folder.mkdir(parents=True)
        (folder / "thread_siblings_list").write_text(listed + "\n")
    return str(root)


def test_the_default_thread_count_is_one_per_physical_core_of_the_cpus_this_process_may_use(tmp_path, monkeypatch):
    smt = _topology(tmp_path / "smt", {0: "0,2", 1: "1,3", 2: "0,2", 3: "1,3"})      # 2 cores, 2 hyperthreads each
    assert threads.physical_cores({0, 1, 2, 3}, smt) == 2
    assert threads.physical_cores({0, 2}, smt) == 1                                  # both threads of one core
    assert threads.physical_cores({0, 1}, smt) == 2
    ranged = _topology(tmp_path / "ranged", {0: "0-1", 1: "0-1", 2: "2-3", 3: "2-3"})
    assert threads.physical_cores(range(4), ranged) == 2
    assert threads.physical_cores({0, 1, 2}, str(tmp_path / "none")) == 3           # unreadable: each CPU a core
    monkeypatch.setattr(threads, "_num_threads", None)
    monkeypatch.delenv("TINYATTN_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "physical_cores", lambda: 3)
    assert threads.get_num_threads() == 3
    monkeypatch.setattr(threads, "_num_threads", None)
    monkeypatch.setenv("TINYATTN_NUM_THREADS", "5")
    assert threads.get_num_threads() == 5


@pytest.mark.parametrize("bad, error", [(0, RuntimeError), (-2, RuntimeError), (1.5, TypeError), ("2", TypeError),
                                        (True, TypeError)])
def test_set_num_threads_rejects_what_is_not_a_count(bad, error):
    with pytest.raises(error, match="set_num_threads"):       # PyTorch's error types
        ta.set_num_threads(bad)


@cpu_only
@pytest.mark.parametrize("a_shape, b_shape", [((300, 200), (200, 100)), ((3, 64, 128), (128, 300)),
                                              ((2, 1, 50, 64), (3, 64, 400)), ((257, 300), (4, 300, 90))])
def test_matmul_shared_by_rows_matches_numpy(thread_count, a_shape, b_shape):
    thread_count(3)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
    np.testing.assert_allclose(cpu.matmul(a, b), a @ b, rtol=1e-12, atol=1e-12)


@cpu_only
@pytest.mark.parametrize("count", [1, 2, 3, 4])
def test_matmul_cuts_a_large_product_once_among_the_threads_and_leaves_a_small_one_whole(thread_count, count,
                                                                                         monkeypatch):
    thread_count(count)
    monkeypatch.setattr(split, "MIN_SHARED_MATMUL", 2 ** 21)        # the library's: the small product is not shared
    handoffs, share = [], threads.share

    def counted_share(work, items):
        items = list(items)
        handoffs.append(len(items))
        return share(work, items)
    monkeypatch.setattr(split, "share", counted_share)
    rng = np.random.default_rng(2)
    a, b, bias, small = (rng.standard_normal(s) for s in ((400, 300), (300, 60), 60, (2, 3)))
    np.testing.assert_allclose(cpu.matmul(a, b, bias), a @ b + bias, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(cpu.matmul(small, b[:3]), small @ b[:3], rtol=1e-12, atol=1e-12)
    assert handoffs == [count]                      # one hand-off, a slice of rows per thread; the small one: none


def test_row_sums_by_blas_keep_the_dtype_and_their_ones_cannot_be_changed():
    """The ones that last_axis_sum and leading_axes_sum multiply by are made once per shape and dtype, and kept."""
    from tinyattn.cpu import arrays
    rng = np.random.default_rng(5)
    for dtype in (np.float64, np.float32, np.float64):
        x = rng.standard_normal((3, 4, 5)).astype(dtype)
        rows, columns = cpu.last_axis_sum(x), cpu.leading_axes_sum(x)
        assert rows.dtype == columns.dtype == dtype and rows.shape == (3, 4, 1) and columns.shape == (5,)
        np.testing.assert_allclose(rows, x.sum(axis=-1, keepdims=True), rtol=1e-6, atol=1e-5)   # sums that cancel
        np.testing.assert_allclose(columns, x.sum(axis=(0, 1)), rtol=1e-6, atol=1e-5)
    kept = arrays._ones(x, (5, 1))
    assert kept is arrays._ones(x, (5, 1)) and not kept.flags.writeable


def test_laid_out_like_keeps_the_order_of_the_axes_in_memory():
    like = np.zeros((2, 5, 3, 4)).transpose(0, 2, 1, 3)                      # (B, H, T, E) laid out as (B, T, H, E)
    for make in ("empty", "zeros"):
        made = cpu.laid_out_like(like, like.shape, np.float32, make)
        assert made.shape == like.shape and made.dtype == np.float32 and made.transpose(0, 2, 1, 3).flags.c_contiguous
    assert not cpu.laid_out_like(like, like.shape, np.float64, "zeros").any()
    # otherwise in the usual order: another shape, a broadcast axis, rows that would not stay rows
    for other, shape in ((like, (2, 3, 5, 5)), (np.broadcast_to(np.zeros((1, 3, 5, 4)), (2, 3, 5, 4)), (2, 3, 5, 4)),
                         (np.zeros((2, 4, 3, 5)).transpose(0, 2, 3, 1), (2, 3, 5, 4))):
        assert cpu.laid_out_like(other, shape, np.float64).flags.c_contiguous


@cpu_only
def test_for_each_piece_fills_every_row_of_the_outputs(thread_count):
    thread_count(2)
    x, y = np.arange(500.0).reshape(100, 5), np.ones((100, 1))

    def piece(x, y, total, doubled):
        np.add(x.sum(axis=1, keepdims=True), y, out=total)
        np.multiply(x, 2, out=doubled)
    outputs = [np.full((100, 1), np.nan), np.full((100, 5), np.nan)]
    total, doubled = cpu.for_each_piece(piece, [x, y], outputs)
    assert total is outputs[0] and doubled is outputs[1]
    np.testing.assert_array_equal(total, x.sum(axis=1, keepdims=True) + 1)
    np.testing.assert_array_equal(doubled, 2 * x)
    (empty,) = cpu.for_each_piece(lambda rows, out: np.add(rows, 1, out=out), [np.zeros((0, 3))], [np.zeros((0, 3))])
    assert empty.shape == (0, 3)


def _forward_backward(fn, *shapes):
    inputs = [randn(*s, seed=i) for i, s in enumerate(shapes)]
    out = fn(*inputs)
    out.backward(randn(*out.shape, requires_grad=False, seed=99))
    return [host(out)] + [host(t.grad) for t in inputs]


@cpu_only
@pytest.mark.parametrize("name, fn, shapes", [
    ("gelu", F.gelu, [(6, 50)]),
    ("layer_norm", lambda x, w, b: F.layer_norm(x, (40,), w, b), [(3, 7, 40), (40,), (40,)]),
    ("rms_norm", lambda x, w: F.rms_norm(x, (40,), w), [(3, 7, 40), (40,)]),
    ("sdpa, batch entries", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
     [(3, 2, 9, 4), (3, 2, 9, 4), (3, 2, 9, 5)]),
    ("sdpa, query rows, grouped", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
     [(1, 4, 11, 4), (1, 2, 7, 4), (1, 2, 7, 3)]),
    ("sdpa, learned bias", F.scaled_dot_product_attention, [(2, 3, 6, 4), (2, 3, 5, 4), (2, 3, 5, 4), (3, 6, 5)]),
    ("flash, causal, grouped", lambda q, k, v: F.flash_attention(q, k, v, is_causal=True, enable_gqa=True,
                                                                block_size=4), [(2, 4, 19, 8), (2, 2, 19, 8),
                                                                                (2, 2, 19, 8)]),
    ("flash, heads in lanes, padded", lambda q, k, v: F.flash_attention(
        q, k, v, attn_mask=ta.tensor(np.arange(19) < 15), block_size=4), [(1, 3, 19, 8)] * 3),
    ("flash, grouped heads in lanes, causal", lambda q, k, v: F.flash_attention(q, k, v, is_causal=True,
                                                                               enable_gqa=True, block_size=4),
     [(1, 6, 19, 8), (1, 3, 19, 8), (1, 3, 19, 8)]),
])
def test_layers_give_the_same_answers_on_one_thread_or_three(thread_count, name, fn, shapes):
    thread_count(1)
    one = _forward_backward(fn, *shapes)
    thread_count(3)
    three = _forward_backward(fn, *shapes)
    for a, b in zip(one, three):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-14, err_msg=name)


@cpu_only
def test_batch_lanes_cut_the_first_axis_the_threads_divide_and_leave_broadcast_axes_whole(thread_count):
    def indices(lanes):
        return [lane.index for lane in lanes]
    thread_count(2)
    whole = slice(None)
    assert indices(split.batch_lanes((1, 8), np.zeros(1))) == [(whole, slice(0, 4)), (whole, slice(4, 8))]
    assert indices(split.batch_lanes((3, 5), np.zeros(1))) == [()]          # nothing two threads divide evenly
    thread_count(3)
    lanes = split.batch_lanes((1, 3, 2), np.zeros(1))                       # (batch, key heads, group) of GQA
    assert indices(lanes) == [(whole, slice(i, i + 1)) for i in range(3)]
    queries = np.arange(3 * 2 * 5 * 8).reshape(1, 3, 2, 5, 8)
    np.testing.assert_array_equal(lanes[1](queries), queries[:, 1:2])
    keys = np.zeros((1, 3, 1, 19, 8))                                       # broadcast along the group axis
    assert lanes[1](keys).shape == (1, 1, 1, 19, 8)
    assert lanes[1](np.zeros((19, 19))).shape == (19, 19)                   # a mask without batch axes
    assert lanes[1](None) is None
    thread_count(1)
    (one,) = split.batch_lanes((4, 8), np.zeros(1))
    assert one.index == () and one(keys) is keys                            # the whole batch


@cpu_only
def test_shares_through_sends_every_hand_off_through_the_wrapper_and_puts_share_back(thread_count):
    thread_count(2)
    seen, plain = [], split.share

    def wrapper(share, work, items):
        seen.append(list(items))
        return share(work, seen[-1])
    with pytest.raises(ZeroDivisionError):
        with cpu.shares_through(wrapper):
            assert cpu.for_each_part(lambda part: part * 2, [1, 2, 3]) == [2, 4, 6]
            1 / 0
    assert seen == [list(enumerate([1, 2, 3]))] and split.share is plain
    cpu.for_each_part(lambda part: part, [1, 2])
    assert len(seen) == 1                                                   # outside the block: share itself


@cpu_only
@pytest.mark.parametrize("count, shape, lanes", [(2, (1, 8), 2), (4, (1, 8), 1), (8, (1, 8), 1), (4, (4, 8), 4),
                                                 (4, (1, 16), 4), (4, (6, 8), 4), (2, (3, 4), 2), (4, (2, 2, 4), 4),
                                                 (4, (1, 2, 4), 1)])
def test_batch_lanes_hold_at_least_four_entries_else_the_batch_goes_whole(thread_count, monkeypatch, count, shape,
                                                                          lanes):
    """Lanes of fewer entries (batch entries x heads; a lane cuts one axis and keeps the others whole) than
    MIN_LANE_ENTRIES make many small NumPy calls under the GIL: the batch then goes as one lane (8 heads: in lanes
    of 4 on 2 threads, whole on 4 or 8; batch 6 x 8 heads on 4 threads: lanes of 12)."""
    thread_count(count)
    monkeypatch.setattr(split, "MIN_LANE_ENTRIES", LIBRARY_MIN_LANE_ENTRIES)  # not the fixture's 1
    assert len(split.batch_lanes(shape, np.zeros(1))) == lanes


@cpu_only
def test_attention_parts_leave_out_the_keys_a_boolean_mask_hides(monkeypatch, thread_count):
    thread_count(2)
    monkeypatch.setattr(split, "MASKED_ROWS", 4)
    causal = np.tril(np.ones((10, 10), dtype=bool))
    parts = split.attention_parts((3, 2), 10, 10, causal, causal)
    assert [(p.rows, p.seen.stop) for p in parts[::2]] == [(slice(0, 4), 4), (slice(4, 8), 8), (slice(8, 10), 10)]
    hidden_start = causal.copy()
    hidden_start[:4] = False                                  # the first block may see no key at all
    assert [p.seen.stop for p in split.attention_parts((1, 2), 10, 10, causal, hidden_start)] == [0, 8, 10]
    padding = np.ones((4, 1, 1, 10), dtype=bool)
    padding[:2, ..., 6:] = False                              # entries 0 and 1 hold 6 keys, 2 and 3 hold 10
    assert [p.seen.stop for p in split.attention_parts((4, 2), 10, 10, padding, padding)] == [6, 10]
    float_mask = np.zeros((10, 10))
    assert all(p.seen.stop is None for p in split.attention_parts((3, 2), 10, 10, float_mask, float_mask))
    # work under MIN_SHARED_MATMUL multiply-adds: one part, on the calling thread, still without the hidden keys
    monkeypatch.setattr(split, "MIN_SHARED_MATMUL", 4 * 2 * 10 * 10 * 10 + 1)
    padding[2:, ..., 8:] = False
    assert [(p.rows, p.seen.stop) for p in split.attention_parts((4, 2), 10, 10, padding, padding)] == \
        [(slice(None), 8)]
    assert len(split.attention_parts((4, 2), 10, 10, padding[..., :9], padding[..., :9])) == 1
    monkeypatch.setattr(split, "MIN_SHARED_MATMUL", 4 * 2 * 10 * 10 * 10)
    assert len(split.attention_parts((4, 2), 10, 10, padding, padding)) == 2


class _Controller:
    """A stand-in for one of threadpoolctl's BLAS controllers: what blas_kernels reads of it."""

    def __init__(self, internal_api, architecture=None):
        self.internal_api = internal_api
        if architecture is not None:                  # MKL's controller has no architecture
            self.architecture = architecture


@pytest.mark.parametrize("libraries, small", [
    ([_Controller("openblas", "SkylakeX")], True), ([_Controller("openblas", "SapphireRapids")], True),
    ([_Controller("openblas", "Haswell")], False), ([_Controller("mkl")], False), ([], False),
    ([_Controller("openblas", "SkylakeX"), _Controller("mkl")], False)])    # NumPy may multiply with either
def test_flash_blocks_keep_every_product_within_the_small_product_kernels_where_the_blas_has_them(monkeypatch,
                                                                                                  libraries, small):
    monkeypatch.setattr(tuning, "_blas_controllers", lambda: tuple(libraries))
    for head_size in (8, 16, 64, 99):
        block = split.attention_block(head_size, np.zeros(1))
        if not small:
            assert block == split.ATTENTION_BLOCK
            continue
        deepest = block * block * (head_size + 1)       # S = [Q, -m] [K^T; 1] and dS - D: rows x (head + 1) x keys
        assert deepest <= split.SMALL_PRODUCT
        assert block == split.ATTENTION_BLOCK or (block + 1) ** 2 * (head_size + 1) > split.SMALL_PRODUCT, block
    assert split.attention_block(64, np.zeros(1)) == (124 if small else 256)
    # heads so large that the small-product blocks would be under MIN_SMALL_PRODUCT_BLOCK: the usual blocks
    assert split.attention_block(100, np.zeros(1)) == split.attention_block(128, np.zeros(1)) == 256


@cpu_only
@pytest.mark.parametrize("architecture, block", [("SkylakeX", 124), ("Haswell", 256)])
def test_flash_attention_without_a_block_size_runs_with_the_one_the_cpu_layer_picks(monkeypatch, architecture,
                                                                                     block):
    monkeypatch.setattr(split, "blas_kernels", lambda: [("openblas", architecture.lower())])
    rng = np.random.default_rng(0)
    q, k, v = (ta.tensor(rng.standard_normal((1, 2, 300, 64)).astype(np.float32)) for _ in range(3))
    chosen = F.flash_attention(q, k, v, is_causal=True)
    np.testing.assert_array_equal(host(chosen), host(F.flash_attention(q, k, v, is_causal=True, block_size=block)))
    other = 256 if block == 124 else 124                  # the two blocks round differently: the test can tell them
    assert not np.array_equal(host(chosen), host(F.flash_attention(q, k, v, is_causal=True, block_size=other)))
    if block == 124:                   # values with longer heads than the queries': the block fits the longer
        wide = ta.tensor(rng.standard_normal((1, 2, 300, 64)).astype(np.float32))
        narrow_q, narrow_k = q[..., :32], k[..., :32]
        chosen = F.flash_attention(narrow_q, narrow_k, wide, is_causal=True)
        np.testing.assert_array_equal(host(chosen), host(F.flash_attention(narrow_q, narrow_k, wide, is_causal=True,
                                                                           block_size=124)))
        assert not np.array_equal(host(chosen), host(F.flash_attention(narrow_q, narrow_k, wide, is_causal=True,
                                                                       block_size=174)))


@cpu_only
def test_matmul_adds_the_bias_to_every_row(thread_count):
    thread_count(2)
    rng = np.random.default_rng(1)
    a, b, bias = rng.standard_normal((400, 300)), rng.standard_normal((300, 50)), rng.standard_normal(50)
    np.testing.assert_allclose(cpu.matmul(a, b, bias), a @ b + bias, rtol=1e-12, atol=1e-12)
    small = a[:2, :3]
    np.testing.assert_allclose(cpu.matmul(small, b[:3], bias), small @ b[:3] + bias, rtol=1e-12)


@cpu_only
def test_for_each_part_keeps_the_order_of_parts_and_sum_over_parts_adds_every_thread(thread_count):
    thread_count(3)
    assert split.for_each_part(lambda part: part * part, range(7)) == [0, 1, 4, 9, 16, 25, 36]

    def add(part, totals):
        totals[0][part] += 1.0
    (counts,) = split.sum_over_parts(add, range(10), lambda: (np.zeros(10),))
    np.testing.assert_array_equal(counts, np.ones(10))


@cpu_only
def test_claimed_parts_go_to_whichever_thread_comes_free_first(thread_count):
    """With claimed=True a thread held up by a part leaves the rest to the other: part 0 waits until the nine
    others are done. Dealt out beforehand (snake order), its thread would still owe parts 3, 4, 7 and 8, and the
    wait would time out."""
    thread_count(2)
    ran_by, others_done, lock = {}, threading.Event(), threading.Lock()

    def work(part):
        with lock:
            ran_by[part] = threading.get_ident()
        if part == 0:
            assert others_done.wait(timeout=10), "the other thread did not take the remaining parts"
        elif len(ran_by) == 10:
            others_done.set()
        return part * part
    assert split.for_each_part(work, range(10), claimed=True) == [part * part for part in range(10)]
    assert [part for part, thread in ran_by.items() if thread == ran_by[0]] == [0]
    assert split.for_each_part(work, [], claimed=True) == []
    thread_count(1)
    assert split.for_each_part(lambda part: part + 1, range(4), claimed=True) == [1, 2, 3, 4]


@cpu_only
def test_after_a_claimed_part_raises_no_more_parts_are_claimed(thread_count):
    """Part 0 fails once the other thread is busy with parts of its own; that thread then stops claiming (without
    the stop it would run all 99 others before the error reached the caller)."""
    thread_count(2)
    ran, other_began = [], threading.Event()

    def work(part):
        ran.append(part)
        if part == 0:
            other_began.wait(timeout=10)
            raise ValueError("part 0 failed")
        other_began.set()
        time.sleep(0.01)
    with pytest.raises(ValueError, match="part 0 failed"):
        split.for_each_part(work, range(100), claimed=True)
    assert len(ran) < 50


def test_for_each_part_runs_gpu_work_in_the_calling_thread(thread_count, monkeypatch):
    """The GPU has its own parallelism: parts of work on its arrays run one after another here, claimed or not."""
    thread_count(2)
    gpu_array = object()
    monkeypatch.setattr(split, "is_cupy_array", lambda x: x is gpu_array)
    for claimed in (False, True):
        threads_seen = split.for_each_part(lambda part: threading.get_ident(), range(6), claimed, like=gpu_array)
        assert threads_seen == [threading.get_ident()] * 6


@cpu_only
@pytest.mark.parametrize("n_groups,totals_made", [(6, 1), (3, 1), (4, 3), (1, 3)])
def test_sum_over_parts_gives_each_group_of_parts_to_one_thread_and_one_set_of_totals(thread_count, n_groups,
                                                                                     totals_made):
    """Parts grouped by the places they add into: where the threads divide the groups evenly, every group's parts
    run on one thread and all add into the same totals (made once, nothing summed after); else each thread sums
    its own and the totals are added up. Either way every part counts once."""
    thread_count(3)
    made, threads_of_group = [], {}

    def new_totals():
        made.append(1)
        return (np.zeros(12),)

    def add(part, totals):
        threads_of_group.setdefault(part % n_groups, set()).add(threading.get_ident())
        totals[0][part] += part + 1
    (total,) = split.sum_over_parts(add, (part for part in range(12)), new_totals, group=lambda part: part % n_groups)
    np.testing.assert_array_equal(total, np.arange(12) + 1)
    assert len(made) == totals_made
    if totals_made == 1:
        assert all(len(seen) == 1 for seen in threads_of_group.values())


def _blas_threads():
    from threadpoolctl import threadpool_info
    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


@cpu_only
def test_blas_keeps_its_thread_count_outside_tinyattn_calls(thread_count):
    """Importing tinyattn and running its fast code leaves NumPy's BLAS as it was; inside, BLAS runs on one thread."""
    from threadpoolctl import threadpool_limits
    thread_count(2)
    seen_inside = []

    def product_rows(part):
        seen_inside.extend(_blas_threads())
    with threadpool_limits(2, user_api="blas"):
        before = _blas_threads()
        model = ta.nn.Sequential(ta.nn.Linear(64, 256), ta.nn.GELU(), ta.nn.LayerNorm(256), ta.nn.Linear(256, 8))
        loss = F.cross_entropy(model(ta.randn(512, 64)), ta.randint(0, 8, (512,)))
        loss.backward()
        ta.optim.AdamW(model.parameters()).step()
        split.for_each_part(product_rows, range(2))
        assert _blas_threads() == before == [2] * len(before)
    assert seen_inside and set(seen_inside) == {1}


@cpu_only
def test_blas_is_held_from_any_thread_and_for_the_whole_process():
    """The rule: a fast Function holds BLAS to one thread whichever Python thread runs it (threadpoolctl would set
    it only from the first thread that set it, here the main one), and the count is the process's: while it runs,
    another thread's NumPy sees one BLAS thread too; afterwards, the count it had."""
    from threadpoolctl import threadpool_limits
    inside, main_may_look, finish = [], threading.Event(), threading.Event()

    @ta.cpu.tuned
    class Probe(ta.Function):
        @staticmethod
        def forward(ctx, x):
            inside.extend(_blas_threads())
            main_may_look.set()
            finish.wait(10)
            return x

        @staticmethod
        def backward(ctx, grad):
            return grad

    with threadpool_limits(2, user_api="blas"):                  # the main thread controls BLAS for threadpoolctl
        worker = threading.Thread(target=Probe.apply, args=(ta.randn(3),))
        worker.start()
        assert main_may_look.wait(10)
        seen_by_main = _blas_threads()
        finish.set()
        worker.join()
        assert _blas_threads() == [2] * len(seen_by_main)
    assert inside and set(inside) == {1} and set(seen_by_main) == {1}


@cpu_only
def test_models_trained_in_threads_at_once_equal_their_runs_one_after_another():
    """Every product in a GPT's step runs in a fast Function on one BLAS thread, so four models trained at once in
    four threads end bit for bit where the same four end trained one after another (with BLAS free to use two
    threads, OpenBLAS's AVX2 kernel rounded the first Linear's product otherwise: up to 2.7e-3 apart after three
    steps)."""
    from threadpoolctl import threadpool_limits
    from tinyattn.models import GPT, GPTConfig

    def model_and_step(seed):                   # made one after another: the random numbers are the process's
        ta.manual_seed(seed)
        model = GPT(GPTConfig(vocab_size=64, block_size=32, n_layer=2, num_heads=4, d_model=64))
        ids = ta.randint(0, 64, (4, 33))                          # products large enough for BLAS to use threads
        optimizer = ta.optim.AdamW(model.parameters(), lr=1e-2)

        def train():
            for _ in range(3):
                optimizer.zero_grad()
                model(ids[:, :-1], ids[:, 1:])[1].backward()
                optimizer.step()
        return model, train

    with threadpool_limits(2, user_api="blas"):
        made = [model_and_step(seed) for seed in range(4)]
        for _, train in made:
            train()
        alone = [[p.numpy().copy() for p in model.parameters()] for model, _ in made]
        made = [model_and_step(seed) for seed in range(4)]
        workers = [threading.Thread(target=train) for _, train in made]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    for (model, _), expected in zip(made, alone):
        for p, want in zip(model.parameters(), expected):
            np.testing.assert_array_equal(p.numpy(), want)


@cpu_only
def test_fast_gelu_keeps_only_its_slope_and_makes_none_without_a_gradient(monkeypatch):
    """The backward keeps one array, Phi(x) + x phi(x), instead of x, Phi(x) and exp(-x^2 / 2); with no gradient
    wanted the forward makes no slope at all."""
    from tinyattn.functional import activations
    made = []
    piece = activations._gelu_piece
    monkeypatch.setattr(activations, "_gelu_piece", lambda *arrays: made.append(len(arrays)) or piece(*arrays))
    x = randn(5, 300, seed=0, requires_grad=True)
    with ta.reference(False):                      # the fast GELU, even under TINYATTN_REFERENCE=1
        y = F.gelu(x)
        assert made == [3]
        with ta.no_grad():
            F.gelu(x)
        F.gelu(x.detach())
        assert made == [3, 2, 2]
    (slope,) = y._node.ctx.saved_tensors
    wide = host(x).astype(np.float64)
    exact = 0.5 * np.vectorize(math.erfc)(-wide / math.sqrt(2)) + wide * np.exp(-wide * wide / 2) / math.sqrt(
        2 * math.pi)
    np.testing.assert_allclose(host(slope).reshape(wide.shape), exact, rtol=1e-6, atol=1e-7)


def test_the_normal_cdf_polynomial_is_what_its_fit_script_makes():
    from tinyattn.cpu import arrays, fit_normal_cdf
    unit, coefficients = fit_normal_cdf.fit()
    assert (unit, coefficients) == (arrays.NORMAL_TAIL_UNIT, arrays.NORMAL_TAIL_POLY)
    assert fit_normal_cdf.largest_relative_error(unit, coefficients, points=20001) < 2.0 ** -24   # float32's rounding
    # beyond |x| = 14, where float32's Phi has underflowed, the tail stays positive and tiny: never a sign flip or NaN
    far = np.array([-14.5, -20.0, -40.0, -1e6], dtype=np.float32)
    cdf, _ = arrays.normal_cdf(far)
    assert ((cdf >= 0) & (cdf < 1e-44)).all()
    assert (fit_normal_cdf.normal_cdf(np.array([-14.5, -20.0, -37.0]), unit, coefficients) > 0).all()


@pytest.mark.parametrize("by_exp2", [True, False])
def test_exp_in_place_is_within_the_rounding_of_its_argument(by_exp2, monkeypatch):
    """float32 exp, by exp2(x log2 e) (NumPy's AVX-512 loop is twice as fast) or by exp itself: within
    4 + 1.5 |x| float32 roundings of the exact value (the rounding of x log2 e, half a unit in its last place, grows
    with |x|: measured 54 at |x| = 48, 64 at 87), within 5 where |x| < 5; float64 is NumPy's exp, bit for bit."""
    from tinyattn.cpu import arrays
    monkeypatch.setattr(arrays, "_exp2_runs_avx512", lambda: by_exp2)
    x = np.linspace(-87, 5, 200001).astype(np.float32)
    exact = np.exp(x.astype(np.float64))
    got = arrays.exp_in_place(x.copy())
    assert got.dtype == np.float32
    roundings = np.abs(got - exact) / np.spacing(exact.astype(np.float32))
    assert (roundings <= 4 + 1.5 * np.abs(x)).all() and roundings[np.abs(x) < 5].max() <= 5
    x64 = np.linspace(-700, 5, 1001)
    np.testing.assert_array_equal(arrays.exp_in_place(x64.copy()), np.exp(x64))


def test_the_cpu_is_named_with_its_family_and_model_numbers_and_its_widest_vector_instructions(tmp_path, monkeypatch):
    from tinyattn.tools import environment
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
                   "model name\t: AMD EPYC\nflags\t\t: fpu sse4_2 avx avx2 avx512f\n\n"
                   "processor\t: 1\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC\n")
    assert environment.cpu_model(str(x86)) == ("AMD EPYC, family 25 model 17", "AVX-512")
    arm = tmp_path / "arm"                          # Linux on ARM: no model name or family, flags as Features
    arm.write_text("processor\t: 0\nBogoMIPS\t: 48.00\nFeatures\t: fp asimd evtstrm aes\nCPU part\t: 0xd0c\n")
    monkeypatch.setattr(environment.platform, "processor", lambda: "")
    monkeypatch.setattr(environment.platform, "machine", lambda: "aarch64")
    assert environment.cpu_model(str(arm)) == ("aarch64", "NEON")
    arm.write_text("processor\t: 0\nFeatures\t: half thumb fastmult vfp edsp neon vfpv3\n")      # 32-bit ARM
    assert environment.cpu_model(str(arm)) == ("aarch64", "NEON")


def test_the_machine_record_names_the_simd_targets_numpy_runs_and_what_turned_them_off():
    import json
    import os
    import subprocess
    import sys
    from tinyattn.tools import environment
    described = environment.describe()
    assert described["numpy_simd"] == environment.numpy_simd()
    if not described["numpy_simd"]:
        pytest.skip("NumPy dispatches nothing above its baseline on this CPU")
    widest = described["numpy_simd"][-1]
    script = "import json; from tinyattn.tools import environment; print(json.dumps(environment.describe()))"
    env = dict(os.environ, NPY_DISABLE_CPU_FEATURES=widest)
    narrower = json.loads(subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                                         check=True).stdout)
    assert widest not in narrower["numpy_simd"]
    assert narrower["npy_disable_cpu_features"] == widest


def _names_reached_in_the_cpu_layer():
    """{name: files} for every name of tinyattn.cpu that code outside it reaches (tinyattn and lessons; docstrings
    and comments are not code): X on the cpu module under any name it is imported as (cpu.X, ta.cpu.X,
    tinyattn.cpu.X, c.X after `import tinyattn.cpu as c` or `from .. import cpu as c`), `from .cpu import X` in any
    spelling, and a submodule's name for `from .cpu.split import ...` or `import tinyattn.cpu.split`."""
    root = Path(ta.__file__).parent
    reached = {}
    for path in sorted([*root.rglob("*.py"), *(root.parent / "lessons").rglob("*.py")]):
        if root / "cpu" in path.parents:
            continue
        package = path.relative_to(root.parent).parent.parts
        tree = ast.parse(path.read_text(), str(path))

        def imported_module(node):
            base = package[:len(package) - node.level + 1] if node.level else ()
            return (*base, *(node.module.split(".") if node.module else ()))

        cpu_names = {"cpu"}                        # the names the cpu module goes by in this file
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                cpu_names |= {alias.asname for alias in node.names if alias.name == "tinyattn.cpu" and alias.asname}
            elif isinstance(node, ast.ImportFrom) and imported_module(node) == ("tinyattn",):
                cpu_names |= {alias.asname or alias.name for alias in node.names if alias.name == "cpu"}
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Attribute) and (
                    isinstance(node.value, ast.Name) and node.value.id in cpu_names
                    or isinstance(node.value, ast.Attribute) and node.value.attr == "cpu"
                    and isinstance(node.value.value, ast.Name) and node.value.value.id in ("ta", "tinyattn")):
                names = [node.attr]
            elif isinstance(node, ast.ImportFrom):
                module = imported_module(node)
                if module == ("tinyattn", "cpu"):
                    names = [alias.name for alias in node.names]
                elif module[:2] == ("tinyattn", "cpu"):              # from tinyattn.cpu.split import ...
                    names = [module[2]]
            elif isinstance(node, ast.Import):
                names = [alias.name.split(".")[2] for alias in node.names if alias.name.startswith("tinyattn.cpu.")]
            for name in names:
                reached.setdefault(name, set()).add(str(path.relative_to(root.parent)))
    return reached


def test_the_cpu_layers_door_lists_every_name_the_library_calls_and_no_other():
    """tinyattn.cpu.__all__ is the CPU layer's door: code outside the layer calls only the names it lists (never a
    submodule's insides), and it lists none that nothing calls, so it can neither widen nor keep a dead name
    unnoticed. Its docstring gives each name a line."""
    reached = _names_reached_in_the_cpu_layer()
    assert {"tuned", "for_each_part", "get_num_threads"} <= set(reached)      # the scan sees the calls it must
    behind_the_door = {name: sorted(files) for name, files in reached.items() if name not in cpu.__all__}
    assert not behind_the_door, f"reached past tinyattn.cpu's door (add them to __all__, or call a name in it): " \
                                f"{behind_the_door}"
    assert not set(cpu.__all__) - set(reached), f"in __all__ but called nowhere: {set(cpu.__all__) - set(reached)}"
    assert len(cpu.__all__) == len(set(cpu.__all__))
    listed = [line.split(":")[0].strip("- `") for line in cpu.__doc__.splitlines() if line.startswith("- `")]
    assert sorted(listed) == sorted(cpu.__all__)
