"""The CUDA kernels that the fast Functions run on float32 CuPy arrays, each against its reference twin in float64
on the same values (GELU, LayerNorm, cross-entropy, dropout), and the multi-tensor Adam/AdamW against the array code
on the CPU. Each test also checks that the kernel ran: a fast path that quietly fell back would pass the rest."""
import numpy as np
import pytest

import tinyattn as ta
import tinyattn.functional as F
from tinyattn.functional import activations_kernel, dropout_kernel, losses_kernel, normalization_kernel
from tinyattn.optim import adam_kernel
from conftest import host

pytestmark = pytest.mark.gpu


def _spy(monkeypatch, module, name):
    """Count the calls of module.name."""
    calls = []
    original = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *args: calls.append(1) or original(*args))
    return calls


def _leaves(arrays, dtype):
    return [ta.tensor(a.astype(dtype), requires_grad=True, device="cuda") for a in arrays]


def _run(fn, arrays, weight, dtype):
    """fn's output and the gradients of sum(output * weight) for every input, as NumPy arrays."""
    inputs = _leaves(arrays, dtype)
    out = fn(*inputs)
    (out * ta.tensor(weight.astype(dtype), device="cuda")).sum().backward()
    return [host(out)] + [host(t.grad) for t in inputs]


def _assert_close_to_reference(fn, arrays, weight, bound=1e-5):
    """float32 on the fast path against float64 on the reference twins: relative error (norm) below bound for the
    output and every gradient."""
    fast = _run(fn, arrays, weight, "float32")
    with ta.reference():
        reference = _run(fn, arrays, weight, "float64")
    for i, (got, want) in enumerate(zip(fast, reference)):
        assert got.dtype == np.float32 and np.isfinite(got).all(), i
        error = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert error < bound, (i, error)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_kernels_match_the_reference(approximate, monkeypatch):
    forward, backward = _spy(monkeypatch, activations_kernel, "gelu"), _spy(monkeypatch, activations_kernel,
                                                                               "gelu_grad")
    rng = np.random.default_rng(0)
    x = np.concatenate([3 * rng.standard_normal(995), [-30.0, -10.0, -5.0, 0.0, 5.0, 10.0]]).reshape(-1, 7)
    _assert_close_to_reference(lambda x: F.gelu(x, approximate=approximate), [x], rng.standard_normal(x.shape))
    assert forward and backward


def test_layer_norm_kernels_match_the_reference(monkeypatch):
    forward = _spy(monkeypatch, normalization_kernel, "layer_norm")
    backward = _spy(monkeypatch, normalization_kernel, "layer_norm_grad")
    rng = np.random.default_rng(1)
    x = 5 + 2 * rng.standard_normal((3, 11, 40))            # rows off zero mean: the variance is taken about the mean
    w, b = 1 + 0.1 * rng.standard_normal(40), rng.standard_normal(40)
    _assert_close_to_reference(lambda x, w, b: F.layer_norm(x, (40,), w, b), [x, w, b], rng.standard_normal(x.shape))
    assert forward and backward


@pytest.mark.parametrize("reduction,label_smoothing", [("mean", 0.0), ("sum", 0.1), ("none", 0.2)])
def test_cross_entropy_kernels_match_the_reference(reduction, label_smoothing, monkeypatch):
    forward = _spy(monkeypatch, losses_kernel, "cross_entropy")
    backward = _spy(monkeypatch, losses_kernel, "cross_entropy_grad")
    rng = np.random.default_rng(2)
    logits = 4 * rng.standard_normal((37, 45))              # more classes than a warp's 32 lanes
    target = rng.integers(0, 45, 37)
    target[[3, 17]] = -100                                  # ignored rows
    target = ta.tensor(target, device="cuda")
    weight = rng.standard_normal(37) if reduction == "none" else np.array(1.5)
    _assert_close_to_reference(
        lambda x: F.cross_entropy(x, target, reduction=reduction, label_smoothing=label_smoothing), [logits], weight)
    assert forward and backward


def test_dropout_kernel_matches_the_reference(monkeypatch):
    calls = _spy(monkeypatch, dropout_kernel, "masked_scale")
    rng = np.random.default_rng(3)
    x, weight = rng.standard_normal((64, 33)), rng.standard_normal((64, 33))
    ta.manual_seed(5)
    fast = _run(lambda x: F.dropout(x, 0.3), [x], weight, "float32")
    ta.manual_seed(5)                                       # the same mask for the twin
    with ta.reference():
        reference = _run(lambda x: F.dropout(x, 0.3), [x], weight, "float32")
    for got, want in zip(fast, reference):
        np.testing.assert_allclose(got, want, rtol=1e-7, atol=0)
    assert 0.6 < (fast[0] != 0).mean() < 0.8 and len(calls) == 2


@pytest.mark.parametrize("optimizer", [ta.optim.Adam, ta.optim.AdamW])
def test_multi_tensor_adam_matches_the_array_code(optimizer, monkeypatch):
    calls = _spy(monkeypatch, adam_kernel, "step")
    rng = np.random.default_rng(4)
    shapes = [(3, 4), (5,), (2, 3, 70), (1,)]
    start = [rng.standard_normal(s) for s in shapes]
    grads = [[rng.standard_normal(s) for s in shapes] for _ in range(3)]
    results = {}
    for device in ("cuda", "cpu"):
        params = [ta.tensor(a.astype("float32"), requires_grad=True, device=device) for a in start]
        opt = optimizer(params, lr=0.01, weight_decay=0.1)
        for step_grads in grads:
            for p, g in zip(params, step_grads):
                p.grad = ta.tensor(g.astype("float32"), device=device)
            opt.step()
        results[device] = [host(p) for p in params] + [host(ta.tensor(opt.state[p][name])) for p in params
                                                       for name in ("exp_avg", "exp_avg_sq")]
    for got, want in zip(results["cuda"], results["cpu"]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert len(calls) == 3                                  # one launch per step for all four parameters
