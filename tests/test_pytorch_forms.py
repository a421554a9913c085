"""Forms PyTorch code takes for granted (issue 46): .to() in every form PyTorch documents, for tensors and modules;
`tensor == None`; torch.inf and friends; the arguments scaled_dot_product_attention and matmul refuse; float16
attention that would overflow before its scaling; how an empty tensor prints. Each as PyTorch's documentation says,
written down here (PyTorch is never a dependency)."""
import math

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn import nn

from conftest import host, randn

DEVICE = str(ta.get_default_device())


class LooksLikeTorchDevice:
    """What ported code may pass: an object with .type and .index, as torch.device has."""
    type, index = DEVICE, None


# -- .to() ---------------------------------------------------------------------------------------------------------
def test_tensor_to_takes_every_form_pytorch_documents():
    x = ta.tensor([1, 2])
    assert x.to(x.device) is x and x.to(ta.device(DEVICE)) is x and x.to(DEVICE) is x      # nothing to do: itself
    assert x.to(LooksLikeTorchDevice()) is x and x.to(device=x.device) is x
    assert x.to(ta.float64).dtype == np.float64 and x.to("float16").dtype == np.float16
    both = x.to(ta.device(DEVICE), ta.float32)
    assert both.dtype == np.float32 and both.device == DEVICE and host(both).tolist() == [1.0, 2.0]
    assert x.to(device=DEVICE, dtype=ta.float64).dtype == np.float64
    other = ta.zeros(3, dtype=ta.float16)
    assert x.to(other).dtype == np.float16 and x.to(other).device == other.device     # another tensor's dtype, device
    assert x.to(ta.float64, non_blocking=True).dtype == np.float64 and x.to(DEVICE, non_blocking=True) is x


def test_to_with_copy_gives_a_new_tensor_that_keeps_the_gradient():
    x = randn(3)
    y = x.to(copy=True)
    assert y is not x and y.array is not x.array and np.array_equal(host(y), host(x))
    assert x.to(ta.float64, False, True) is not x                                   # non_blocking, copy by position
    y.sum().backward()
    assert host(x.grad).tolist() == [1, 1, 1]
    assert ta.gradcheck(lambda t: t.to(copy=True) * t.to(DEVICE, ta.float64, copy=True), (x,))


def test_to_refuses_what_is_neither_a_device_nor_a_dtype():
    with pytest.raises(RuntimeError, match="unknown device 'mps'"):
        ta.ones(2).to("mps")
    with pytest.raises(TypeError, match="neither a device nor a dtype"):
        ta.ones(2).to(3.5)


def test_module_to_takes_the_same_forms_and_returns_the_module():
    model = nn.Linear(2, 3)
    assert model.to(ta.device(DEVICE)) is model and model.to(LooksLikeTorchDevice()) is model
    assert model.to(DEVICE, ta.float64) is model and model.weight.dtype == np.float64
    model.to(ta.zeros(1, dtype=ta.float16))
    assert model.weight.dtype == np.float16 and model.bias.dtype == np.float16
    model.to(device=ta.device(DEVICE), dtype=ta.float32, non_blocking=True)
    assert model.weight.dtype == np.float32 and isinstance(model.weight, nn.Parameter)
    with pytest.raises(TypeError, match="only accepts floating point dtypes, but got desired dtype=int64"):
        model.to(ta.long)


# -- == None, constants ---------------------------------------------------------------------------------------------
def test_comparing_a_tensor_with_none_is_false_as_in_pytorch():
    idx_next = ta.tensor([[3], [4]])
    assert (idx_next == None) is False and (idx_next != None) is True        # noqa: E711 (the idiom under test)
    assert (None == idx_next) is False
    eos_id = None
    stopped = False
    if idx_next == eos_id:                                                   # a batch: no "ambiguous truth value"
        stopped = True
    assert not stopped
    assert host(idx_next == 3).tolist() == [[True], [False]]                 # other values compare elementwise
    for method in ("eq", "ne", "lt", "ge"):                                   # the methods refuse None, as PyTorch's
        with pytest.raises(TypeError, match=f"{method}\\(\\) received None"):
            getattr(idx_next, method)(None)
    with pytest.raises(TypeError, match="received None"):
        idx_next < None                                                      # noqa: B015 (the refusal under test)


def test_the_comparison_functions_are_the_operators():
    x, y = ta.tensor([[1.0, 2.0, 3.0]]), ta.tensor([[2.0], [3.0]])                # broadcast to (2, 3)
    for name, operator in (("eq", "__eq__"), ("ne", "__ne__"), ("lt", "__lt__"), ("le", "__le__"), ("gt", "__gt__"),
                           ("ge", "__ge__")):
        expected = getattr(host(x), operator)(host(y))
        for result in (getattr(ta, name)(x, y), getattr(x, name)(y), getattr(x, operator)(y)):
            assert result.dtype == bool and host(result).tolist() == expected.tolist(), name
        assert host(getattr(ta, name)(x, 2.0)).tolist() == getattr(host(x), operator)(2.0).tolist()
        with pytest.raises(TypeError, match=f"{name}\\(\\) received None"):
            getattr(ta, name)(x, None)


def test_pytorchs_constants_and_pow():
    assert ta.inf == math.inf and ta.pi == math.pi and ta.e == math.e and math.isnan(ta.nan)
    assert host(ta.tensor([1.0, 2.0]).masked_fill(ta.tensor([True, False]), -ta.inf)).tolist() == [-math.inf, 2]
    assert host(ta.pow(ta.tensor([2.0, 3.0]), 3)).tolist() == [8, 27]
    assert host(ta.pow(2, ta.tensor([1.0, 3.0]))).tolist() == [2, 8]
    base = ta.tensor([0.5, 1.5, 2.0], dtype=ta.float64, requires_grad=True)
    assert ta.gradcheck(lambda a, b: ta.pow(a, b), (base, randn(3)))


# -- refusals -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("p", [1.5, -0.1])
def test_attention_refuses_a_dropout_probability_outside_0_1(p):
    q = randn(1, 2, 3, 4)
    with pytest.raises(RuntimeError, match=f"dropout probability has to be between 0 and 1, but got {p}"):
        F.scaled_dot_product_attention(q, q, q, dropout_p=p)


def test_attention_refuses_integer_query_key_and_value_by_name():
    q, i = randn(1, 3, 4), ta.ones(1, 3, 4, dtype=ta.long)
    for name, args in (("query", (i, q, q)), ("key", (q, i, q)), ("value", (q, q, i))):
        with pytest.raises(RuntimeError, match=f"scaled_dot_product_attention's {name} takes floating tensors.*int64"):
            F.scaled_dot_product_attention(*args)


def test_matmul_refuses_bool_tensors_as_pytorch():
    b = ta.ones(2, 2, dtype=ta.bool)
    with pytest.raises(NotImplementedError, match="matmul does not take bool tensors"):
        b @ b
    with pytest.raises(NotImplementedError, match="bool"):
        ta.matmul(b, b)


# -- float16 attention ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["fast", "reference"])
def test_float16_attention_scales_before_its_product_near_float16s_range(path):
    """q . k is 67600 here, past float16's largest finite value (65504); scaled first (scale 1/2), it is 33800 and
    the attention is finite and right, as PyTorch's math path (which scales before its product) gives."""
    q = np.full((1, 2, 4), 130.0)
    k = np.stack([np.full(4, 130.0), np.full(4, 129.0)])[None]              # logits 33800 and 33540 after scaling
    v = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    expected = np.zeros((1, 2, 2))
    expected[..., 0] = 1.0                                                   # softmax of (33800, 33540): one-hot
    half = [ta.tensor(a, dtype=ta.float16) for a in (q, k, v)]
    if path == "reference":
        with ta.reference():
            out = F.scaled_dot_product_attention(*half)
    else:
        out = F.scaled_dot_product_attention(*half)
    assert out.dtype == np.float16 and np.isfinite(host(out)).all()
    np.testing.assert_array_equal(host(out).astype(np.float64), expected)
    weights = F.attention_weights(half[0], half[1])
    assert np.isfinite(host(weights)).all()


def test_float16_attention_matches_float64_at_large_logits():
    rng = np.random.default_rng(3)
    q, k, v = (rng.uniform(-60, 60, (1, 2, 5, 8)) for _ in range(3))         # raw q . k up to ~28800 * 8 / 3
    exact = F.scaled_dot_product_attention(*(ta.tensor(a) for a in (q, k, v)))
    half = F.scaled_dot_product_attention(*(ta.tensor(a, dtype=ta.float16) for a in (q, k, v)))
    assert np.isfinite(host(half)).all()
    np.testing.assert_allclose(host(half).astype(np.float64), host(exact), atol=0.15)


# -- printing -------------------------------------------------------------------------------------------------------
def test_an_empty_tensor_prints_its_size_unless_it_is_1_d():
    on = "" if DEVICE == "cpu" else ", device='cuda:0'"
    assert repr(ta.zeros(2, 0)) == f"tensor([]{on}, size=(2, 0))"
    assert repr(ta.zeros(0, 3, dtype=ta.int32)) == f"tensor([]{on}, size=(0, 3), dtype=tinyattn.int32)"
    assert repr(ta.zeros(0)) == f"tensor([]{on})"


# -- random draws ---------------------------------------------------------------------------------------------------
def test_randint_takes_pytorchs_forms_and_refuses_a_size_that_is_not_a_tuple():
    ta.manual_seed(0)
    high_only = ta.randint(5, (200,))                       # nanoGPT's torch.randint(len(data) - block_size, (B,))
    assert high_only.shape == (200,) and high_only.dtype == np.int64
    assert set(host(high_only).tolist()) == {0, 1, 2, 3, 4}                    # 4 drawn too: high is exclusive only
    between = host(ta.randint(3, 6, (200,)))
    assert set(between.tolist()) == {3, 4, 5}
    assert ta.randint(high=4, size=(2, 3)).shape == (2, 3) and ta.randint(2, high=4, size=(1,)).item() in (2, 3)
    assert ta.randint(2, 4, (5,), dtype=ta.int32).dtype == np.int32
    draws = [host(ta.randint(100, (8,), generator=ta.Generator().manual_seed(4))).tolist() for _ in range(2)]
    assert draws[0] == draws[1]                                                # the generator's stream, not the global
    with pytest.raises(TypeError, match="size must be a tuple of ints, got 5"):
        ta.randint(3, 5)                                                       # not high=3, size=5
    with pytest.raises(TypeError, match="got 3 bounds"):
        ta.randint(1, 2, 3, (4,))


def test_multinomial_and_randperm_draw_from_a_given_generator():
    weights = ta.tensor([1.0, 2.0, 3.0, 4.0])
    for replacement in (True, False):
        a, b = (host(weights.multinomial(3, replacement, generator=ta.Generator().manual_seed(8))).tolist()
                for _ in range(2))
        assert a == b
    ta.manual_seed(1)
    first = host(ta.randperm(50, generator=ta.Generator().manual_seed(2))).tolist()
    ta.manual_seed(9)
    assert host(ta.randperm(50, generator=ta.Generator().manual_seed(2))).tolist() == first
    if not ta.cuda.is_available():
        with pytest.raises(RuntimeError, match="Expected a 'cuda' generator device but found 'cpu'"):
            ta.randint(3, (2,), generator=ta.Generator(), device="cuda")


# -- narrow ---------------------------------------------------------------------------------------------------------
def test_narrow_is_a_view_of_length_elements_from_start():
    x = ta.arange(12).reshape(3, 4)
    assert host(x.narrow(1, 1, 2)).tolist() == [[1, 2], [5, 6], [9, 10]]
    assert host(ta.narrow(x, 0, -1, 1)).tolist() == [[8, 9, 10, 11]]                 # a negative start from the end
    assert x.narrow(-1, 4, 0).shape == (3, 0)
    x.narrow(0, 1, 1).zero_()                                                         # a view: x changes with it
    assert host(x[1]).tolist() == [0, 0, 0, 0]
    with pytest.raises(RuntimeError, match=r"start \(3\) \+ length \(2\) exceeds dimension size \(4\)"):
        x.narrow(1, 3, 2)
    with pytest.raises(IndexError, match=r"start out of range \(expected to be in range of \[-3, 3\], but got 4\)"):
        x.narrow(0, 4, 0)
    assert ta.gradcheck(lambda t: t.narrow(1, 1, 2) * 3, (randn(3, 4),))


# -- float32 matmul precision -----------------------------------------------------------------------------------------
def test_float32_matmul_precision_is_recorded_and_lets_the_gpu_kernels_use_tf32():
    from tinyattn.functional.flash_kernel import uses_tf32
    assert ta.get_float32_matmul_precision() == "highest" and not uses_tf32()
    a, b = randn(4, 5, dtype="float32"), randn(5, 3, dtype="float32")
    before = host(a @ b)
    try:
        ta.set_float32_matmul_precision("high")                         # nanoGPT's and build-nanogpt's line
        assert ta.get_float32_matmul_precision() == "high" and uses_tf32()
        if DEVICE == "cpu":
            assert np.array_equal(host(a @ b), before)                  # NumPy: float32 products as before
        with pytest.warns(UserWarning, match="fast is not one of 'highest', 'high', or 'medium'"):
            ta.set_float32_matmul_precision("fast")
        assert ta.get_float32_matmul_precision() == "high"              # an unknown name changes nothing
    finally:
        ta.set_float32_matmul_precision("highest")
    assert not uses_tf32()


# -- legacy constructors --------------------------------------------------------------------------------------------
def test_legacy_constructors_read_sizes_as_sizes_and_sequences_as_data():
    assert ta.LongTensor(6).shape == (6,) and ta.LongTensor(6).dtype == np.int64     # six elements, not the number 6
    assert ta.FloatTensor(2, 3).shape == (2, 3) and ta.FloatTensor(2, 3).dtype == np.float32
    assert host(ta.LongTensor([1, 2])).tolist() == [1, 2] and ta.LongTensor([1.7]).dtype == np.int64
    assert ta.Tensor(3).shape == (3,) and ta.Tensor(3).dtype == ta.get_default_dtype()
    assert host(ta.Tensor([1, 2])).tolist() == [1.0, 2.0] and ta.Tensor([1, 2]).dtype == np.float32
    assert host(ta.Tensor((2, 3))).tolist() == [2.0, 3.0]                           # one tuple is data, as PyTorch
    assert ta.Tensor().shape == (0,) and ta.BoolTensor(2, 2).dtype == bool
    assert host(ta.FloatTensor(np.array([1, 2]))).tolist() == [1.0, 2.0]
    assert ta.LongTensor(ta.tensor([1.0, 2.0])).dtype == np.int64
    assert str(ta.Tensor(2).device) == DEVICE
    array = np.ones(3, dtype="float64")
    assert ta.Tensor(array).array is array                                          # the engine's own use: held
    with pytest.raises(RuntimeError, match=r"negative dimension: shape \(2, -1\)"):
        ta.LongTensor(2, -1)
    with pytest.raises(TypeError, match="takes sizes .* got ndarray, bool"):
        ta.Tensor(array, True)                                                      # requires_grad is a keyword


def test_legacy_tensor_of_a_tensor_holds_its_data_not_the_tensor():
    made = ta.Tensor(ta.ones(2, dtype=ta.float64))           # torch.Tensor(t): the data, in the default float dtype
    assert type(made.array) is type(ta.ones(1).array) and made.dtype == ta.float32
    assert made.sum().item() == 2.0
