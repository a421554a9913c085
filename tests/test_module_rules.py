"""A module's attribute rules, as torch.nn.Module's: what registers where, what is refused, and that the order of
parameters never changes behind the user's back (issue 28)."""
import pytest

import tinyattn as ta
from tinyattn import nn


def names(module):
    return [name for name, _ in module.named_parameters()]


def test_a_plain_tensor_where_a_parameter_lives_is_refused_and_the_parameter_stays():
    lin = nn.Linear(2, 2)
    weight = lin.weight
    with pytest.raises(TypeError, match=r"cannot assign a Tensor of shape \(2, 2\) as parameter 'weight' "
                                        r"\(tinyattn.nn.Parameter or None expected\)"):
        lin.weight = ta.randn(2, 2)
    assert lin.weight is weight and names(lin) == ["weight", "bias"]


def test_a_module_or_a_number_where_a_parameter_lives_is_refused():
    lin = nn.Linear(2, 2)
    for value in (nn.Linear(1, 1), 3.0):
        with pytest.raises(TypeError, match="as parameter 'weight'"):
            lin.weight = value


def test_none_where_a_parameter_lives_leaves_it_out_of_parameters_and_state():
    lin = nn.Linear(2, 2)
    lin.bias = None
    assert lin.bias is None and names(lin) == ["weight"] and list(lin.state_dict()) == ["weight"]
    lin.bias = nn.Parameter(ta.zeros(2))                        # the name keeps its place in the order
    assert names(lin) == ["weight", "bias"]


def test_an_in_place_change_through_the_attribute_keeps_the_parameter_and_its_place():
    lin = nn.Linear(2, 2)
    weight = lin.weight
    with ta.no_grad():
        lin.weight *= 0.5                                       # __imul__, then lin.weight = the same Parameter
        lin.weight += 1.0
    assert lin.weight is weight
    assert names(lin) == ["weight", "bias"] and list(lin.state_dict()) == ["weight", "bias"]


def test_a_new_parameter_under_an_old_name_keeps_the_place_of_the_old_one():
    lin = nn.Linear(2, 2)
    lin.weight = nn.Parameter(ta.zeros(2, 2))
    assert names(lin) == ["weight", "bias"]
    assert ta.allclose(lin.state_dict()["weight"], ta.zeros(2, 2))


def test_a_plain_tensor_where_a_child_module_lives_is_refused_and_none_is_taken():
    seq = nn.Sequential(nn.Linear(1, 1), nn.Linear(1, 1))
    with pytest.raises(TypeError, match=r"as child module '0' \(tinyattn.nn.Module or None expected\)"):
        setattr(seq, "0", ta.randn(1))
    setattr(seq, "0", None)
    assert list(seq.state_dict()) == ["1.weight", "1.bias"]


def test_a_buffer_takes_a_tensor_or_none_only():
    m = nn.Module()
    m.register_buffer("b", ta.zeros(1))
    with pytest.raises(TypeError, match=r"as buffer 'b' \(tinyattn.Tensor or None expected\)"):
        m.b = 3
    m.b = ta.ones(1)
    assert list(m.state_dict()) == ["b"] and m.state_dict()["b"].item() == 1
    m.b = None
    assert list(m.state_dict()) == []


def test_a_parameter_under_a_buffers_name_moves_it_to_the_parameters():
    m = nn.Module()
    m.register_buffer("c", ta.zeros(1), persistent=False)
    m.c = nn.Parameter(ta.zeros(1))
    assert names(m) == ["c"] and list(m.buffers()) == [] and list(m.state_dict()) == ["c"]


def test_register_parameter_and_buffer_refuse_what_pytorch_refuses():
    lin = nn.Linear(2, 2)
    with pytest.raises(TypeError, match="as parameter 'x'"):
        lin.register_parameter("x", ta.zeros(1))
    with pytest.raises(KeyError, match="attribute 'in_features' already exists"):
        lin.register_parameter("in_features", nn.Parameter(ta.zeros(1)))
    with pytest.raises(KeyError, match="attribute 'weight' already exists"):
        lin.register_buffer("weight", ta.zeros(1))
    with pytest.raises(TypeError, match="as buffer 'zz'"):
        lin.register_buffer("zz", 3)
    with pytest.raises(KeyError, match="empty or contain"):
        lin.register_parameter("a.b", None)
    with pytest.raises(ValueError, match="non-leaf"):
        lin.register_parameter("y", _non_leaf_parameter())
    lin.register_parameter("extra", None)                       # an absent optional parameter, as bias=False
    assert lin.extra is None and names(lin) == ["weight", "bias"]


def _non_leaf_parameter():
    p = nn.Parameter(ta.ones(1))
    p._node = (p * 2)._node                                     # a Parameter with a history (as from a computation)
    return p


def test_a_shared_module_is_walked_once_and_saved_under_every_name():
    # PyTorch's documented example: l = nn.Linear(2, 2); net = nn.Sequential(l, l); net.named_modules() gives
    # ('', Sequential) and ('0', Linear) only; remove_duplicate=False gives '1' as well
    lin = nn.Linear(2, 2)
    net = nn.Sequential(lin, lin)
    assert [(name, m) for name, m in net.named_modules()] == [("", net), ("0", lin)]
    assert [name for name, _ in net.named_modules(remove_duplicate=False)] == ["", "0", "1"]
    assert [name for name, _ in net.named_modules(prefix="net")] == ["net", "net.0"]
    assert list(net.modules()) == [net, lin] and names(net) == ["0.weight", "0.bias"]
    assert list(net.state_dict()) == ["0.weight", "0.bias", "1.weight", "1.bias"]      # as torch's state_dict
    visited = []
    net.apply(visited.append)
    assert sorted(map(id, visited)) == sorted([id(lin), id(net)])                    # once each
    net(ta.randn(3, 2)).sum().backward()
    net.zero_grad()
    assert lin.weight.grad is None
    net.register_buffer("scale", ta.ones(1))
    lin.register_buffer("scale", net.scale)
    assert [name for name, _ in net.named_buffers()] == ["scale"]                     # a shared buffer once
