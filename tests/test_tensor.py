"""The engine: tensors, the backward walk, graph freeing, accumulation, devices, dtypes."""
import numpy as np
import pytest

import tinyattn as ta
from tinyattn import Function
from conftest import host, randn


def test_tensor_dtypes_follow_pytorch():
    assert ta.tensor([1.0, 2.0]).dtype == np.float32
    assert ta.tensor(np.zeros(3)).dtype == np.float64          # a float64 array keeps float64
    assert ta.tensor([1, 2]).dtype == np.int64
    assert ta.tensor([1.0], dtype="float64").dtype == np.float64
    assert ta.tensor([True]).dtype == np.bool_


def test_attributes_and_host_copies():
    t = ta.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    assert t.shape == (1, 3) and t.size(1) == 3 and t.ndim == 2 and t.numel() == 3
    assert t.device == ta.get_default_device()
    if t.device == "cpu":
        shared = t.numpy()
        shared[0, 0] = 99
        assert t.numpy()[0, 0] == 99.0                         # numpy() shares the CPU tensor's memory, as PyTorch
    assert np.asarray(t).shape == (1, 3)
    assert ta.tensor(5.0).item() == 5.0
    with pytest.raises(ValueError, match="one element"):
        t.item()
    d = t.detach()
    assert not d.requires_grad and d.is_leaf


def test_requires_grad_needs_floats():
    with pytest.raises(RuntimeError, match="int64"):
        ta.tensor([1, 2], requires_grad=True)


def test_backward_simple_and_reused_node():
    x = ta.tensor([1.0, 2.0, 3.0], dtype="float64", requires_grad=True)
    y = x * x          # used twice below: its gradient must accumulate from both uses
    z = (y + y * 3).sum()
    z.backward()
    np.testing.assert_allclose(host(x.grad), 8 * host(x))


def test_grads_accumulate_across_backward_calls_until_zeroed():
    x = ta.tensor([1.0, 2.0], requires_grad=True)
    (x * 2).sum().backward()
    (x * 3).sum().backward()
    np.testing.assert_allclose(host(x.grad), [5.0, 5.0])
    x.grad = None
    (x * 3).sum().backward()
    np.testing.assert_allclose(host(x.grad), [3.0, 3.0])


@pytest.mark.skipif(ta.get_default_device() != "cpu", reason="CuPy arrays cannot be made read-only")
def test_a_backward_that_writes_into_the_gradient_it_was_given_is_stopped():
    """Add hands one array to both its inputs, so a backward that changes its grad in place would change the other
    input's gradient too (and a helper thread may still be reading it): the walk gives each backward a read-only
    view, and the error names the Function."""
    class HalveInPlace(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 0.5

        @staticmethod
        def backward(ctx, grad):
            grad *= 0.5
            return grad
    x = ta.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="HalveInPlace.backward wrote into a read-only array"):
        (HalveInPlace.apply(x) + x).sum().backward()
    gradient = np.ones(2, dtype=np.float32)
    (x * 2).backward(gradient)
    gradient[0] = 5.0                                           # the caller's own array stays writable


def test_second_backward_through_freed_graph_raises_unless_retained():
    x = ta.tensor([1.0, 2.0], requires_grad=True)
    y = (x.exp() * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="second time.*retain_graph=True"):
        y.backward()
    z = (x.exp() * x).sum()
    z.backward(retain_graph=True)
    z.backward()                                               # allowed: the first kept the graph
    assert np.isfinite(host(x.grad)).all()


def test_long_chain_does_not_recurse():
    x = ta.tensor([0.5], dtype="float64", requires_grad=True)
    h = x
    for _ in range(5000):
        h = h * 1.0001 + 0.0
    h.sum().backward()
    np.testing.assert_allclose(host(x.grad), [1.0001 ** 5000], rtol=1e-9)


def test_broadcast_gradients_are_reduced_to_input_shapes():
    a = randn(4, 1, 3)
    b = randn(5, 1)
    (a * b).sum().backward()
    assert a.grad.shape == (4, 1, 3) and b.grad.shape == (5, 1)
    np.testing.assert_allclose(host(a.grad), np.broadcast_to(host(b).sum(), (4, 1, 3)) * np.ones((4, 1, 3)))
    np.testing.assert_allclose(host(b.grad), np.full((5, 1), host(a).sum()))


def test_no_grad_records_nothing_and_is_a_decorator():
    x = ta.tensor([1.0], requires_grad=True)
    with ta.no_grad():
        y = x * 2
    assert not y.requires_grad and y.grad_fn is None

    @ta.no_grad()
    def double(t):
        return t * 2
    assert not double(x).requires_grad
    assert (x * 2).requires_grad                               # switched back on afterwards


def test_retain_grad_keeps_intermediate_grad():
    x = ta.tensor([1.0, 2.0], requires_grad=True)
    y = (x * 3).retain_grad()
    (y * y).sum().backward()
    np.testing.assert_allclose(host(y.grad), 2 * host(y))


def test_backward_needs_scalar_or_gradient():
    x = ta.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="one-element"):
        (x * 2).backward()
    (x * 2).backward(ta.tensor([1.0, 10.0]))
    np.testing.assert_allclose(host(x.grad), [2.0, 20.0])


def test_custom_function_with_ctx():
    class Cube(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return 3 * x * x * grad

    x = randn(3)
    assert ta.gradcheck(Cube.apply, (x,))
    y = Cube.apply(x)
    assert y.grad_fn.function is Cube and y.grad_fn.name() == "CubeBackward"


def test_needs_input_grad_says_which_inputs_a_gradient_will_reach():
    seen = []

    class Spy(Function):
        @staticmethod
        def forward(ctx, a, b):
            seen.append(ctx.needs_input_grad)
            return a * b

    a, b = randn(2), randn(2, requires_grad=False)
    Spy.apply(a, b)
    with ta.no_grad():
        Spy.apply(a, b)
    Spy.apply(a.detach(), 2.0)
    assert seen == [(True, False), (False, False), (False, False)]


def test_manual_seed_makes_draws_reproducible():
    ta.manual_seed(123)
    a = ta.randn(5).numpy()
    ta.manual_seed(123)
    b = ta.randn(5).numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, ta.randn(5).numpy())


def test_default_device_setting(monkeypatch):
    ta.set_default_device("cpu")
    try:
        assert ta.zeros(2).device == "cpu"
    finally:
        ta.set_default_device(None)
    with pytest.raises(RuntimeError, match="unknown device"):
        ta.zeros(2, device="tpu")


def test_repr_prints_as_pytorch_does():
    on = "" if ta.get_default_device() == "cpu" else ", device='cuda:0'"
    x = ta.tensor([1.0], requires_grad=True)
    assert repr(x) == f"tensor([1.]{on}, requires_grad=True)"
    assert repr(x * 2) == f"tensor([2.]{on}, grad_fn=<MulBackward>)"
    assert repr(ta.tensor([[1.5, 2.0]])) == f"tensor([[1.5000, 2.0000]]{on})"
    assert repr(ta.tensor([1, 2])) == f"tensor([1, 2]{on})"                     # default dtypes go unsaid
    assert repr(ta.tensor([1.0], dtype="float64")) == f"tensor([1.]{on}, dtype=tinyattn.float64)"
    assert repr(ta.tensor([1e-5, 1.0])) == f"tensor([1.0000e-05, 1.0000e+00]{on})"   # a wide range: scientific
    assert f"{ta.tensor(0.123456):.3f}" == "0.123"


@pytest.mark.gpu
def test_mixing_devices_names_both():
    a = ta.ones(3, device="cpu")
    b = ta.ones(3, device="cuda")
    with pytest.raises(RuntimeError, match="cpu.*cuda|cuda.*cpu"):
        a + b


@pytest.mark.gpu
def test_raw_array_on_another_device_names_both():
    scores = ta.zeros(2, 3, device="cuda")
    with pytest.raises(RuntimeError, match=r"cuda(:0)? \(2, 3\), cpu \(2, 3\)"):
        scores.masked_fill(np.ones((2, 3), dtype=bool), 0.0)           # a host mask for a GPU tensor


@pytest.mark.gpu
def test_to_device_round_trip_is_differentiable():
    x = ta.tensor([1.0, 2.0], device="cpu", requires_grad=True)
    y = x.to("cuda")
    assert y.device == "cuda"
    (y * y).sum().backward()
    assert x.grad.device == "cpu"
    np.testing.assert_allclose(host(x.grad), [2.0, 4.0])


def test_requires_grad_of_a_computed_tensor_cannot_be_changed():
    x = ta.ones(2, requires_grad=True)
    h = x * 2
    for change in (lambda: setattr(h, "requires_grad", False), lambda: h.requires_grad_(False),
                   lambda: setattr(h, "requires_grad", True)):
        with pytest.raises(RuntimeError, match="only change requires_grad flags of leaf tensors.*detach"):
            change()
    assert h.requires_grad and not h.detach().requires_grad
    x.requires_grad = False                                     # a leaf's flag changes freely
    assert not x.requires_grad


def test_the_engine_walks_without_the_cpu_layer():
    """tensor.py knows no speed layer: loaded without tinyattn's __init__ (which imports tinyattn.cpu), its plain
    seams run a backward on their own."""
    import subprocess
    import sys
    from pathlib import Path

    package = Path(ta.__file__).parent
    script = f"""
import sys, types
import numpy as np
package = types.ModuleType("tinyattn")
package.__path__ = [{str(package)!r}]          # the package without its __init__, which would import tinyattn.cpu
sys.modules["tinyattn"] = package
from tinyattn import tensor
assert "tinyattn.cpu" not in sys.modules, sorted(m for m in sys.modules if m.startswith("tinyattn"))

class Square(tensor.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad

x = tensor.Tensor(np.array([1.0, -2.0, 3.0]), requires_grad=True)
y = Square.apply(Square.apply(x))               # x**4, a chain of two nodes
y.backward(np.ones(3))
assert np.array_equal(x.grad.array, 4 * x.array ** 3), x.grad.array
assert "tinyattn.cpu" not in sys.modules
print("walked")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "walked", done.stderr


def test_the_cpu_layer_installs_its_walk_seams():
    import importlib
    engine = importlib.import_module("tinyattn.tensor")     # the module: ta.tensor is the function
    assert engine._walk_seams == {"walk_scope": ta.cpu.backward_walk, "settled": ta.cpu.settled}
