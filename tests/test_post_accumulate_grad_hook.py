"""Tensor.register_post_accumulate_grad_hook: a leaf's hook runs as soon as its gradient is final, mid-walk."""
import numpy as np
import pytest

import tinyattn as ta
from tinyattn import nn


class Mark(ta.Function):
    """The identity, noting in a log when its backward runs."""

    @staticmethod
    def forward(ctx, x, log, name):
        ctx.log, ctx.name = log, name
        return x.copy()

    @staticmethod
    def backward(ctx, grad):
        ctx.log.append(ctx.name)
        return grad, None, None


def three_layers(log):
    ta.manual_seed(0)
    layers = [nn.Linear(6, 6) for _ in range(3)]
    x = ta.randn(4, 6)

    def loss():
        h = x
        for i, layer in enumerate(layers):
            h = Mark.apply(layer(h), log, f"backward into layer {i}")   # its backward runs just before layer i's
            h = h.relu() if i < 2 else h
        return (h * h).sum()
    return layers, loss


def test_the_last_layers_hooks_fire_before_the_first_layers_backward_runs():
    log = []
    layers, loss = three_layers(log)
    for i, layer in enumerate(layers):
        for name, p in layer.named_parameters():
            p.register_post_accumulate_grad_hook(lambda t, what=f"hook {name} of layer {i}": log.append(what))
    loss().backward()
    assert log.index("hook weight of layer 2") < log.index("backward into layer 1") < \
        log.index("hook weight of layer 1") < log.index("backward into layer 0") < log.index("hook weight of layer 0")
    assert log.index("hook bias of layer 2") < log.index("backward into layer 1")
    assert sum(entry.startswith("hook") for entry in log) == 6


def test_hooks_see_the_final_gradient_and_change_nothing_else():
    plain_log = []
    plain, loss = three_layers(plain_log)
    loss().backward()
    hooked_log, seen = [], {}
    layers, loss = three_layers(hooked_log)
    for i, layer in enumerate(layers):
        layer.weight.register_post_accumulate_grad_hook(lambda t, i=i: seen.setdefault(i, t.grad.numpy().copy()))
    loss().backward()
    for i in range(3):
        assert np.array_equal(seen[i], plain[i].weight.grad.numpy())
        assert np.array_equal(layers[i].weight.grad.numpy(), plain[i].weight.grad.numpy())
    assert hooked_log == plain_log


def test_a_leaf_used_twice_fires_once_with_both_uses_summed_and_remove_takes_the_hook_off():
    w = ta.tensor([1.0, 2.0], requires_grad=True)
    calls = []
    handle = w.register_post_accumulate_grad_hook(lambda t: calls.append(t.grad.tolist()))
    ((w * 3.0).sum() + (w * w).sum()).backward()
    assert calls == [[5.0, 7.0]]
    (w * 2.0).sum().backward()
    assert calls == [[5.0, 7.0], [7.0, 9.0]]                 # accumulated onto the first backward's .grad
    handle.remove()
    (w * 2.0).sum().backward()
    assert len(calls) == 2


def test_inputs_limits_the_hooks_to_the_leaves_it_names_and_non_leaves_are_refused():
    a, b = ta.ones(2, requires_grad=True), ta.ones(2, requires_grad=True)
    fired = []
    for name, t in (("a", a), ("b", b)):
        t.register_post_accumulate_grad_hook(lambda t, name=name: fired.append(name))
    (a * b).sum().backward(inputs=[b])
    assert fired == ["b"] and a.grad is None
    with pytest.raises(RuntimeError, match="non-leaf"):
        (a * 2.0).register_post_accumulate_grad_hook(print)
