"""Two paths: every fused Function's fast version equals its reference twin (outputs and every gradient, float64,
1e-10) on random shapes that broadcast, mask, group heads and leave ragged blocks; every twin passes gradcheck; and
the switch (`with ta.reference():`, TINYATTN_REFERENCE=1, impl="reference") picks what it says."""
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tinyattn as ta
import tinyattn.functional as F
from tinyattn import nn
from tinyattn.cpu import split
from tinyattn.functional import activations, twins

from activations_table import ACTIVATIONS, calls_by_twin
from conftest import host

EXAMPLES = settings(max_examples=12, deadline=None, derandomize=True)


def tensor(rng, *shape, scale=1.0, requires_grad=True):
    return ta.tensor(rng.standard_normal(shape) * scale, requires_grad=requires_grad)


def outputs_and_grads(fn, inputs, seed=7):
    """fn's outputs and the gradients of a random weighting of them with respect to every input needing one."""
    for t in inputs:
        t.grad = None
    ta.manual_seed(0)                                        # the same dropout draws on both paths
    out = fn(*inputs)
    weights = ta.tensor(np.random.default_rng(seed).standard_normal(out.shape))
    (out * weights).sum().backward()
    return [host(out)] + [host(t.grad) for t in inputs if t.requires_grad]


def assert_paths_agree(fn, inputs, tol=1e-10):
    fast = outputs_and_grads(fn, inputs)
    with ta.reference():
        reference = outputs_and_grads(fn, inputs)
    assert len(fast) == len(reference)
    for i, (a, b) in enumerate(zip(fast, reference)):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=f"output {i} (0: forward, then gradients)")


def batch_shapes(draw, ndim):
    """Two batch shapes of ndim dims that broadcast against each other (some dims 1 on one side)."""
    full = [draw(st.integers(1, 3)) for _ in range(ndim)]
    return tuple(full), tuple(s if draw(st.booleans()) else 1 for s in full)


# -- one case generator per fused function ----------------------------------------------------------------------
@EXAMPLES
@given(st.data())
def test_softmax_and_log_softmax(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = tensor(rng, *shape, scale=5.0)
    assert_paths_agree(lambda x: F.log_softmax(x, dim), [x])
    masked = host(x).copy()
    masked[(slice(None),) * (dim % len(shape)) + (0,)] = -np.inf    # a slice of rows that is all -inf: zeros
    x = ta.tensor(np.where(rng.random(shape) < 0.3, -np.inf, masked), requires_grad=True)
    assert_paths_agree(lambda x: F.softmax(x, dim), [x])


@EXAMPLES
@given(st.data())
def test_cross_entropy(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    n, classes = data.draw(st.integers(1, 9)), data.draw(st.integers(2, 7))
    logits = tensor(rng, n, classes, scale=4.0)
    target = rng.integers(0, classes, n)
    target[rng.random(n) < 0.3] = -100                                     # ignored rows
    smoothing, reduction = data.draw(st.sampled_from([0.0, 0.2])), data.draw(st.sampled_from(["mean", "sum", "none"]))
    assert_paths_agree(lambda x: F.cross_entropy(x, ta.tensor(target), reduction=reduction,
                                                 label_smoothing=smoothing), [logits])


@EXAMPLES
@given(st.data())
def test_linear_embedding_and_norms(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    lead = tuple(data.draw(st.lists(st.integers(1, 4), min_size=0, max_size=3)))
    d_in, d_out = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 6))
    x, w, b = tensor(rng, *lead, d_in), tensor(rng, d_out, d_in), tensor(rng, d_out)
    assert_paths_agree(F.linear, [x, w, b])
    assert_paths_agree(lambda x, w: F.linear(x, w), [x, w])
    ids = rng.integers(0, 5, lead + (3,))                                   # repeats, and the padding row
    table = tensor(rng, 5, d_out)
    assert_paths_agree(lambda t: F.embedding(ta.tensor(ids), t, padding_idx=2), [table])
    norm_shape = (d_in,) if data.draw(st.booleans()) else (2, d_in)
    x = tensor(rng, *lead, *norm_shape, scale=3.0)
    weight, bias = tensor(rng, *norm_shape), tensor(rng, *norm_shape)
    assert_paths_agree(lambda x, w, b: F.layer_norm(x, norm_shape, w, b), [x, weight, bias])
    assert_paths_agree(lambda x: F.layer_norm(x, norm_shape), [x])
    assert_paths_agree(lambda x, w: F.rms_norm(x, norm_shape, w), [x, weight])


@EXAMPLES
@given(st.data())
def test_activations_and_dropout(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    shape = tuple(data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    x = tensor(rng, *shape, scale=4.0)
    for activation in ACTIVATIONS.values():
        assert_paths_agree(activation.call, [x])
    assert_paths_agree(lambda x: F.dropout(x, 0.3), [x])


def test_exact_gelu_far_into_both_tails():
    """The fast GELU's fitted normal CDF against the reference's erfc, relatively, from -12 to 8 (Phi(-12) ~ 1e-33)."""
    grid = ta.tensor(np.linspace(-12.0, 8.0, 2001))
    with ta.reference():
        exact = host(F.gelu(grid))
    np.testing.assert_allclose(host(F.gelu(grid)), exact, rtol=3e-8, atol=0)
    np.testing.assert_allclose(host(F.gelu(grid.float())), exact, rtol=2e-5, atol=3e-7)
    assert exact[0] < 0 and abs(exact[0] / (-12 * 1.7764821120776e-33) - 1) < 1e-9


@EXAMPLES
@given(st.data())
def test_gru_cell_conv2d_and_additive_scores(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    batch, hidden = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 5))
    inputs = [tensor(rng, batch, 3 * hidden), tensor(rng, batch, hidden), tensor(rng, 3 * hidden, hidden),
              tensor(rng, 3 * hidden)]
    assert_paths_agree(F.gru_cell, inputs)
    channels, out_ch, kh, kw = (data.draw(st.integers(1, 3)) for _ in range(4))
    stride, padding = data.draw(st.integers(1, 2)), data.draw(st.integers(0, 2))
    size = data.draw(st.integers(max(kh, kw), 7))
    images, kernel, bias = tensor(rng, batch, channels, size, size + 1), tensor(rng, out_ch, channels, kh, kw), \
        tensor(rng, out_ch)
    assert_paths_agree(lambda x, w, b: F.conv2d(x, w, b, stride=stride, padding=padding), [images, kernel, bias])
    q_len, keys = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 6))
    assert_paths_agree(F.additive_scores, [tensor(rng, batch, q_len, hidden), tensor(rng, batch, keys, hidden),
                                           tensor(rng, hidden)])


def attention_case(data, rng):
    """q, k, v and mask arguments for one random attention problem."""
    (batch_q, batch_kv) = batch_shapes(data.draw, data.draw(st.integers(0, 2)))
    if data.draw(st.booleans()):
        batch_q, batch_kv = batch_kv, batch_q
    hkv = data.draw(st.integers(1, 2))
    hq = hkv * data.draw(st.integers(1, 3))
    n, m, e = data.draw(st.integers(1, 9)), data.draw(st.integers(1, 9)), data.draw(st.integers(1, 5))
    q, k, v = tensor(rng, *batch_q, hq, n, e), tensor(rng, *batch_kv, hkv, m, e), \
        tensor(rng, *batch_kv, hkv, m, data.draw(st.integers(1, 4)))
    kind = data.draw(st.sampled_from(["none", "causal", "bool", "padding", "float"]))
    mask, causal = None, kind == "causal"
    if kind == "bool":
        mask = ta.tensor(rng.random((hq, n, m)) < 0.7)                      # some rows masked everywhere
    elif kind == "padding":
        mask = ta.tensor(rng.random(batch_q + (1, 1, m)) < 0.7)
    elif kind == "float":
        mask = tensor(rng, n, m, requires_grad=False)
    return q, k, v, mask, causal, hq != hkv


@EXAMPLES
@given(st.data())
def test_scaled_dot_product_attention(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    q, k, v, mask, causal, gqa = attention_case(data, rng)
    dropout = data.draw(st.sampled_from([0.0, 0.25]))

    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, dropout_p=dropout,
                                              enable_gqa=gqa)
    masked_rows = split.MASKED_ROWS
    split.MASKED_ROWS = data.draw(st.sampled_from([masked_rows, 2, 3]))    # small: blocks of rows see fewer keys
    try:
        assert_paths_agree(attend, [q, k, v])
    finally:
        split.MASKED_ROWS = masked_rows
    if mask is not None and mask.dtype != bool:                              # a learned bias gets dS
        bias = ta.tensor(host(mask), requires_grad=True)
        assert_paths_agree(lambda q, k, v, b: F.scaled_dot_product_attention(q, k, v, attn_mask=b, enable_gqa=gqa),
                           [q, k, v, bias])


@EXAMPLES
@given(st.data())
def test_flash_attention_both_paths_equal_reference_attention(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    q, k, v, mask, causal, gqa = attention_case(data, rng)
    block = data.draw(st.integers(1, 4))                                     # ragged blocks at these lengths

    def flash(q, k, v):
        return F.flash_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=gqa, block_size=block)
    assert_paths_agree(flash, [q, k, v])
    with ta.reference():
        sdpa = outputs_and_grads(lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=gqa), [q, k, v])
    for a, b in zip(outputs_and_grads(flash, [q, k, v]), sdpa):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("function", ["scaled_dot_product_attention", "flash_attention"])
def test_attention_on_heads_split_from_one_projection(function):
    """As a model calls attention: q, k, v are (B, T, H, E) slices of one (B, T, 3D) projection viewed as (B, H, T,
    E). Both paths agree, and the fast output is laid out as the queries are, so the model's transpose back to
    (B, T, H, E) is contiguous and its reshape to (B, T, D) copies nothing (SDPA's dQ and dK come back the same way)."""
    rng = np.random.default_rng(4)
    qkv = tensor(rng, 2, 7, 3 * 3 * 4)

    def attend(qkv):
        q, k, v = (t.reshape(2, 7, 3, 4).transpose(1, 2) for t in qkv.split(12, dim=-1))
        extra = {"block_size": 3} if function == "flash_attention" else {}
        return getattr(F, function)(q, k, v, is_causal=True, **extra).transpose(1, 2).reshape(2, 7, 12)
    assert_paths_agree(attend, [qkv])
    q = qkv.detach().reshape(2, 7, 9, 4).transpose(1, 2)[:, :3]
    out = getattr(F, function)(q, q, q)
    assert out.transpose(1, 2).array.flags.c_contiguous


def test_attention_over_no_keys_and_with_masks_of_fewer_than_two_dims():
    rng = np.random.default_rng(3)
    q = tensor(rng, 2, 3, 5, 4)
    k, v = tensor(rng, 2, 3, 0, 4), tensor(rng, 2, 3, 0, 4)
    assert_paths_agree(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), [q, k, v])
    k, v = tensor(rng, 2, 3, 6, 4), tensor(rng, 2, 3, 6, 4)
    for mask in (ta.tensor(np.array([True] * 4 + [False] * 2)), ta.tensor(True)):  # a row of keys, one flag
        assert_paths_agree(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), [q, k, v])
        assert_paths_agree(lambda q, k, v: F.flash_attention(q, k, v, attn_mask=mask, block_size=4), [q, k, v])
    bias = tensor(rng, 6)                                                     # a learned bias per key gets dS
    assert_paths_agree(lambda q, k, v, b: F.scaled_dot_product_attention(q, k, v, attn_mask=b), [q, k, v, bias])


# -- every twin gradchecks, and every twin is tested above ---------------------------------------------------------
def _small(rng, *shape):
    return tensor(rng, *shape)


REFERENCE_GRADCHECKS = {
    "softmax": lambda r: (lambda x: F.softmax(x, 0), [_small(r, 3, 4)]),
    "log_softmax": lambda r: (lambda x: F.log_softmax(x, -1), [_small(r, 3, 4)]),
    "cross_entropy": lambda r: (lambda x: F.cross_entropy(x, ta.tensor([1, -100, 0]), label_smoothing=0.1),
                                [_small(r, 3, 4)]),
    "linear": lambda r: (F.linear, [_small(r, 2, 3, 4), _small(r, 5, 4), _small(r, 5)]),
    "embedding": lambda r: (lambda w: F.embedding(ta.tensor([[1, 2, 1], [3, 3, 1]]), w),
                            [_small(r, 4, 3)]),
    "layer_norm": lambda r: (lambda x, w, b: F.layer_norm(x, (4,), w, b), [_small(r, 3, 4), _small(r, 4),
                                                                           _small(r, 4)]),
    "rms_norm": lambda r: (lambda x, w: F.rms_norm(x, (4,), w), [_small(r, 3, 4), _small(r, 4)]),
    "dropout": lambda r: (lambda x: F.dropout(x, 0.5), [_small(r, 3, 4)]),
    "gru_cell": lambda r: (F.gru_cell, [_small(r, 2, 6), _small(r, 2, 2), _small(r, 6, 2), _small(r, 6)]),
    "conv2d": lambda r: (lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1),
                         [_small(r, 1, 2, 4, 3), _small(r, 2, 2, 3, 2), _small(r, 2)]),
    "additive_scores": lambda r: (F.additive_scores, [_small(r, 2, 2, 3), _small(r, 2, 3, 3), _small(r, 3)]),
    "scaled_dot_product_attention": lambda r: (
        lambda q, k, v, b: F.scaled_dot_product_attention(q, k, v, attn_mask=b, enable_gqa=True),
        [_small(r, 1, 2, 3, 2), _small(r, 1, 1, 4, 2), _small(r, 1, 1, 4, 2), _small(r, 3, 4)]),
    "flash_attention": lambda r: (lambda q, k, v: F.flash_attention(q, k, v, is_causal=True, block_size=2),
                                  [_small(r, 1, 2, 5, 2), _small(r, 1, 2, 5, 2), _small(r, 1, 2, 5, 2)]),
}


def _every_call_summed(calls):
    return lambda x: sum(call(x) for call in calls)


# the activations from their table (tests/activations_table.py): every way of calling one, summed, on a (3, 4) input
REFERENCE_GRADCHECKS.update({name: lambda r, calls=calls: (_every_call_summed(calls), [_small(r, 3, 4)])
                             for name, calls in calls_by_twin().items()})


def test_every_function_with_twins_is_compared_and_gradchecked_here():
    # the list of twins is stated once, as REFERENCE_GRADCHECKS' keys; twins.names() is the tripwire for a new one
    assert sorted(REFERENCE_GRADCHECKS) == twins.names()


def test_every_activation_with_twins_is_in_the_activations_table():
    # there its fast == reference, gradcheck, formula and dtype rule are all tested; a name given straight to
    # REFERENCE_GRADCHECKS would skip the last two
    registered = {name for name in twins.names() if twins.pair(name)[1].__module__ == activations.__name__}
    assert registered == set(calls_by_twin())


@pytest.mark.parametrize("name", sorted(REFERENCE_GRADCHECKS))
def test_every_reference_twin_passes_gradcheck(name):
    fn, inputs = REFERENCE_GRADCHECKS[name](np.random.default_rng(0))

    def seeded(*args):                                      # dropout: the same mask at every call
        ta.manual_seed(0)
        return fn(*args)
    with ta.reference():
        assert ta.gradcheck(seeded, inputs)


# -- the switch ------------------------------------------------------------------------------------------------
def test_reference_block_picks_the_twins_in_this_thread_only():
    seen = {}
    assert twins.implementation("softmax").__name__ == "FastSoftmax"
    with ta.reference():
        seen["here"] = twins.implementation("softmax").__name__
        other = threading.Thread(target=lambda: seen.update(other=twins.implementation("softmax").__name__))
        other.start()
        other.join()
        with ta.reference(False):
            seen["nested off"] = twins.implementation("softmax").__name__
        seen["restored"] = twins.implementation("softmax").__name__
    assert seen == {"here": "ReferenceSoftmax", "other": "FastSoftmax", "nested off": "FastSoftmax",
                    "restored": "ReferenceSoftmax"}
    assert twins.implementation("softmax").__name__ == "FastSoftmax"


def test_environment_variable_turns_the_reference_path_on_for_a_run(monkeypatch):
    monkeypatch.setenv("TINYATTN_REFERENCE", "1")
    assert twins.implementation("linear").__name__ == "ReferenceLinear"
    with ta.reference(False):
        assert twins.implementation("linear").__name__ == "FastLinear"


def test_modules_take_impl_reference():
    ta.manual_seed(0)
    fast = nn.Attention(8, 2).double()
    reference = nn.Attention(8, 2, impl="reference").double()
    reference.load_state_dict(fast.state_dict())
    x = ta.randn(2, 5, 8, dtype="float64")
    np.testing.assert_allclose(host(reference(x, is_causal=True)), host(fast(x, is_causal=True)), rtol=1e-12)
    with pytest.raises(ValueError, match="impl must be one of"):
        nn.Attention(8, 2, impl="fast")


def test_a_lesson_runs_on_the_reference_path(tmp_path):
    """The whole of lesson 05 (--quick) on the twins: TINYATTN_REFERENCE=1 reaches every Function it uses."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "TINYATTN_REFERENCE": "1", "TINYATTN_PLOTS": str(tmp_path)}
    done = subprocess.run([sys.executable, "lessons/05_transformer.py", "--quick"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.rstrip().splitlines()[-1].startswith("RESULT ")
