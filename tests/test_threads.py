"""CPU threads (tinyattn/threads.py): sharing work, and layers that give the same answers on one thread or several."""
import threading

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.functional as F
from tinyattn import threads

from conftest import host, randn

cpu_only = pytest.mark.skipif(ta.get_default_device() != "cpu", reason="threads share CPU work only")


@pytest.fixture
def thread_count():
    """Set tinyattn's thread count for one test, with small cache pieces so that small arrays still come in many."""
    before, piece = threads.get_num_threads(), threads.CACHE_PIECE
    threads.CACHE_PIECE = 37
    yield threads.set_num_threads
    threads.set_num_threads(before)
    threads.CACHE_PIECE = piece


@cpu_only
def test_share_deals_items_round_robin_to_different_threads(thread_count):
    thread_count(2)
    seen = threads.share(lambda items: (list(items), threading.get_ident()), range(5), np.zeros(1))
    assert [items for items, _ in seen] == [[0, 2, 4], [1, 3]]
    assert seen[0][1] != seen[1][1]
    thread_count(1)
    assert threads.share(lambda items: list(items), range(5), np.zeros(1)) == [[0, 1, 2, 3, 4]]


@cpu_only
def test_share_raises_what_a_helper_raised_and_keeps_working(thread_count):
    thread_count(2)

    def work(items):
        if 1 in items:
            raise ValueError("helper failed")
        return items
    with pytest.raises(ValueError, match="helper failed"):
        threads.share(work, range(2), np.zeros(1))
    assert threads.share(lambda items: items, range(4), np.zeros(1)) == [[0, 2], [1, 3]]


@cpu_only
def test_share_inside_a_share_runs_on_the_same_thread(thread_count):
    thread_count(2)
    inner = threads.share(lambda items: threads.share(lambda inner: len(inner), range(6), np.zeros(1)),
                          range(2), np.zeros(1))
    assert inner == [[6], [6]]


def test_set_num_threads_rejects_zero():
    with pytest.raises(ValueError, match="at least 1 thread"):
        ta.set_num_threads(0)


@cpu_only
@pytest.mark.parametrize("a_shape, b_shape", [((300, 200), (200, 100)), ((3, 64, 128), (128, 300)),
                                              ((2, 1, 50, 64), (3, 64, 400)), ((257, 300), (4, 300, 90))])
def test_matmul_shared_by_rows_matches_numpy(thread_count, a_shape, b_shape):
    thread_count(3)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
    np.testing.assert_allclose(threads.matmul(a, b), a @ b, rtol=1e-12, atol=1e-12)


@cpu_only
def test_map_rows_puts_pieces_back_together(thread_count):
    thread_count(2)
    x = np.arange(500.0).reshape(100, 5)
    total, doubled = threads.map_rows(lambda rows: (rows.sum(axis=1, keepdims=True), 2 * rows), x)
    np.testing.assert_array_equal(total, x.sum(axis=1, keepdims=True))
    np.testing.assert_array_equal(doubled, 2 * x)
    assert threads.map_rows(lambda rows: rows + 1, np.zeros((0, 3))).shape == (0, 3)


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
])
def test_layers_give_the_same_answers_on_one_thread_or_three(thread_count, name, fn, shapes):
    thread_count(1)
    one = _forward_backward(fn, *shapes)
    thread_count(3)
    three = _forward_backward(fn, *shapes)
    for a, b in zip(one, three):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-14, err_msg=name)


@cpu_only
def test_matmul_adds_the_bias_to_every_row(thread_count):
    thread_count(2)
    rng = np.random.default_rng(1)
    a, b, bias = rng.standard_normal((400, 300)), rng.standard_normal((300, 50)), rng.standard_normal(50)
    np.testing.assert_allclose(threads.matmul(a, b, bias), a @ b + bias, rtol=1e-12, atol=1e-12)
    small = a[:2, :3]
    np.testing.assert_allclose(threads.matmul(small, b[:3], bias), small @ b[:3] + bias, rtol=1e-12)
