"""0-dimensional results are 0-d arrays, so in-place changes work on them as in PyTorch (issue 46): `loss = 0;
loss += criterion(out, y)`, `s = x.sum(); s += 1`, counters `x[0] += 1`. NumPy gives a scalar (numpy.float32), not
an array, from reductions and from arithmetic on 0-d arrays; a tensor holds it as a 0-d array instead, and keeps
PyTorch's autograd rules for in-place changes: a leaf that requires grad refuses, a computed tensor records the
change and its backward is right."""
import warnings

import numpy as np
import pytest

import tinyattn as ta
from tinyattn import backend

from conftest import host, randn


def holds_an_array(t):
    return backend.is_array(t.array)


def test_a_reduction_is_held_as_a_0_d_array_and_changes_in_place():
    s = ta.tensor([1.0, 2.0, 3.0]).sum()
    assert s.shape == () and holds_an_array(s)
    s += 1
    assert s.item() == 7 and holds_an_array(s)
    for change, expected in ((lambda t: t.sub_(2), 5), (lambda t: t.mul_(3), 15), (lambda t: t.div_(5), 3),
                             (lambda t: t.add_(1, alpha=2), 5), (lambda t: t.clamp_(0, 4), 4),
                             (lambda t: t.zero_(), 0), (lambda t: t.fill_(2.5), 2.5),
                             (lambda t: t.copy_(ta.tensor(-1.0)), -1)):
        assert change(s) is s and s.item() == expected and holds_an_array(s)
    s -= 1
    s *= -4
    s /= 2
    assert s.item() == 4


def test_indexed_elements_count_in_place():
    counts = ta.zeros(3, 2, dtype=ta.long)
    counts[0, 1] += 1
    counts[0, 1] += 1
    counts[2][0] += 5
    assert host(counts).tolist() == [[0, 2], [0, 0], [5, 0]]
    v = ta.tensor([1.0, 2.0])
    v[0] *= 10
    v[1] -= 0.5
    assert host(v).tolist() == [10, 1.5]


def test_a_running_loss_that_starts_as_the_number_0():
    w = randn(3)
    loss = 0
    for k in range(3):
        loss += (w * k).sum()
    loss.backward()
    assert holds_an_array(loss) and loss.grad_fn is not None
    np.testing.assert_allclose(host(w.grad), [3, 3, 3])


def test_a_leaf_that_requires_grad_refuses_in_place_changes_on_0_d_and_indexed_elements():
    w = ta.tensor(2.0, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"leaf tensor that requires grad \(shape \(\)\)"):
        w += 1
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        w.mul_(2)
    p = ta.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        p[0] += 1
    with ta.no_grad():                                    # an optimizer step is allowed
        w += 1
        p[0] += 1
    assert w.item() == 3 and host(p).tolist() == [2, 2] and w.is_leaf


def test_a_computed_0_d_tensor_records_its_in_place_changes():
    x = randn(3)
    s = (x * x).sum()
    s += 3
    s *= 2                                                # s = 2 (sum x^2 + 3): ds/dx = 4 x
    assert s.grad_fn is not None and not s.is_leaf
    s.backward()
    np.testing.assert_allclose(host(x.grad), 4 * host(x), rtol=1e-12)


def test_an_indexed_element_of_a_computed_tensor_records_the_change():
    x = randn(3)
    y = x * 2
    y[0] += x[1] * 3                                      # y = [2 x0 + 3 x1, 2 x1, 2 x2]
    y.sum().backward()
    np.testing.assert_allclose(host(x.grad), [2, 5, 2])


def test_in_place_changes_on_0_d_and_indexed_elements_pass_gradcheck():
    def f(x):
        s = x.sum()
        s *= x[0]
        s -= x[2] / 3
        y = x * 1.0
        y[1] += s
        y[2] *= x[0]
        total = 0
        total += (y * y).sum()
        return total
    assert ta.gradcheck(f, (randn(4),))


def test_an_expand_that_repeats_no_element_changes_in_place_and_its_source_sees_it():
    x = ta.tensor(2.0)
    y = x.expand(())
    y += 1                                                # one element, one memory location: allowed, as PyTorch
    assert y.item() == 3 and x.item() == 3
    v = ta.tensor([1.0, 2.0])
    w = v.expand(1, 2)
    w.mul_(10)
    assert host(v).tolist() == [10, 20] and w.shape == (1, 2)
    with pytest.raises(RuntimeError, match=r"shape \(3, 2\), made by expand .* single memory location"):
        v.expand(3, 2).add_(1)                            # each element three times: refused
    with pytest.raises(RuntimeError, match="single memory location"):
        ta.tensor(1.0).expand(2).zero_()


def _tensors_in(result):
    if isinstance(result, ta.Tensor):
        return [result]
    if isinstance(result, (tuple, list)):
        return [t for r in result for t in _tensors_in(r)]
    return []


def _zero_d_results(call):
    """The 0-d tensors call() returns (none if it refuses these inputs)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")               # std of one element and the like: nan, with a warning
            return [t for t in _tensors_in(call()) if t.ndim == 0]
    except Exception:                                     # an op that takes other arguments: not in this sweep
        return []


def _every_public_op_on_small_inputs():
    """(name, 0-d results) for every public function of tinyattn and every Tensor method, called on a 0-d and on a
    1-D tensor, alone and with a second one (a method that changes its tensor gets a fresh one each time)."""
    inputs = (lambda: ta.tensor(0.5, dtype="float64"), lambda: ta.tensor([0.5, 2.0, 1.5], dtype="float64"),
              lambda: ta.tensor([1, 3, 2]))
    for name in sorted(dir(ta)):
        function = getattr(ta, name)
        if name.startswith("_") or isinstance(function, type) or not callable(function) or \
                name in ("manual_seed", "set_default_dtype"):         # global settings: a tensor's dtype would stick
            continue
        for make in inputs:
            yield name, _zero_d_results(lambda: function(make())) + _zero_d_results(lambda: function(make(), make()))
    for name in sorted(dir(ta.Tensor)):
        if name in ("backward", "__init__", "__setitem__", "__iter__") or isinstance(getattr(ta.Tensor, name), type):
            continue
        for make in inputs:
            yield f"Tensor.{name}", (_zero_d_results(lambda: getattr(make(), name)())
                                     + _zero_d_results(lambda: getattr(make(), name)(make()))
                                     + _zero_d_results(lambda: getattr(make(), name)(0)))


def test_every_public_op_keeps_0_d_results_as_arrays_that_change_in_place():
    seen = set()
    for name, results in _every_public_op_on_small_inputs():
        for t in results:
            assert holds_an_array(t), f"{name} gave a 0-d tensor holding a {type(t.array).__name__}"
            if t.requires_grad and t.is_leaf:
                continue
            if not getattr(t.array.flags, "writeable", True):    # expand's view: refused by name, as PyTorch refuses it
                with pytest.raises(RuntimeError, match="refers to a single memory location"):
                    t.zero_()
                continue
            t.zero_()
            if t.dtype != bool:
                t += 1
            assert holds_an_array(t) and t.item() == (0 if t.dtype == bool else 1)
            seen.add(name)
    # the sweep reached what makes 0-d results: reductions, indexing, elementwise math on a 0-d tensor, products
    for name in ("sum", "mean", "max", "prod", "amax", "exp", "sigmoid", "matmul", "Tensor.__getitem__", "Tensor.sum",
                 "Tensor.__add__", "Tensor.__mul__", "Tensor.__matmul__", "Tensor.norm", "Tensor.std", "Tensor.argmax"):
        assert name in seen, f"the sweep got no 0-d result from {name}"
    assert len(seen) > 100
