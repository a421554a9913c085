"""The everyday PyTorch surface around a model, each name held to what PyTorch's documentation says it does (the
expected values are written down here: PyTorch is never a dependency)."""
import math
import warnings
from collections import OrderedDict

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn import nn, optim

from conftest import host, randn


# -- devices, dtypes, constructors, grad modes ----------------------------------------------------------------------
def test_devices_compare_with_strings_and_each_other():
    assert ta.device("cpu") == "cpu" and ta.device("cuda:0") == ta.device("cuda") and ta.device("cpu") != "cuda"
    assert str(ta.device("cuda:0")) == "cuda:0" and repr(ta.device("cpu")) == "device(type='cpu')"
    x = ta.ones(2, device="cpu")
    assert x.device == "cpu" and x.device == ta.device("cpu") and not x.is_cuda
    assert ta.zeros(2, device=ta.device("cpu")).device == "cpu"
    assert ta.cuda.is_available() == ta.cuda_is_available()
    assert ta.cuda.device_count() in (0, 1)
    ta.cuda.synchronize()


def test_cuda_manual_seed_leaves_the_cpu_generator_alone():
    ta.manual_seed(0)
    first = ta.rand(3, device="cpu").tolist()
    ta.manual_seed(0)
    ta.cuda.manual_seed(123)
    assert ta.rand(3, device="cpu").tolist() == first
    if ta.cuda.is_available():
        ta.cuda.manual_seed(7)
        gpu = ta.rand(3, device="cuda").tolist()
        ta.cuda.manual_seed(7)
        assert ta.rand(3, device="cuda").tolist() == gpu


def test_dtype_names_and_legacy_constructors():
    assert (ta.long, ta.float, ta.double, ta.int, ta.bool, ta.uint8, ta.half, ta.float16) == \
        (np.int64, np.float32, np.float64, np.int32, np.bool_, np.uint8, np.float16, np.float16)
    assert ta.LongTensor([1, 2]).dtype == np.int64 and ta.FloatTensor([1, 2]).dtype == np.float32
    assert ta.BoolTensor([1, 0]).dtype == np.bool_
    with pytest.raises(AttributeError, match="bfloat16"):
        ta.bfloat16
    with pytest.raises(AttributeError, match="multiprocessing"):
        ta.multiprocessing


def test_default_dtype():
    assert ta.get_default_dtype() == np.float32
    ta.set_default_dtype(ta.float64)
    try:
        assert ta.tensor([1.5]).dtype == np.float64 and ta.ones(2).dtype == np.float64
        assert (ta.tensor([1, 2]) / 2).dtype == np.float64
    finally:
        ta.set_default_dtype(ta.float32)
    with pytest.raises(TypeError, match="floating"):
        ta.set_default_dtype(ta.int64)


def test_like_and_numpy_constructors():
    x = ta.ones(2, 3, dtype=ta.float64)
    assert ta.empty(2, 3).shape == (2, 3) and ta.full_like(x, 7.0).tolist() == [[7.0] * 3] * 2
    assert ta.randn_like(x).dtype == np.float64 and ta.rand_like(x).shape == (2, 3)
    array = np.zeros(3)
    shared = ta.from_numpy(array)
    array[0] = 5.0
    assert shared[0].item() == 5.0                                # memory is shared
    assert ta.is_tensor(shared) and not ta.is_tensor(array) and ta.numel(x) == 6
    assert ta.full((2,), 3).dtype == np.int64 and ta.full((2,), True).dtype == np.bool_
    assert x.new_zeros(4).dtype == np.float64 and x.new_ones((1, 2)).shape == (1, 2)
    assert x.new_full((2,), 5.0).tolist() == [5.0, 5.0] and x.new_tensor([1.0]).dtype == np.float64


def test_grad_modes():
    w = ta.ones(2, requires_grad=True)
    with ta.inference_mode():
        assert not (w * 2).requires_grad
    with ta.set_grad_enabled(False):
        assert not (w * 2).requires_grad
    assert (w * 2).requires_grad

    @ta.set_grad_enabled(False)
    def frozen():
        return w * 2
    assert not frozen().requires_grad and (w * 2).requires_grad
    ta.set_grad_enabled(False)
    try:
        assert not ta.is_grad_enabled()
    finally:
        ta.set_grad_enabled(True)
    model = nn.Linear(2, 2)
    assert ta.compile(model) is model and ta.compile()(len) is len


# -- functions ------------------------------------------------------------------------------------------------------
def test_einsum_bmm_meshgrid():
    a, b = randn(2, 3, 4), randn(2, 4, 5, seed=1)
    np.testing.assert_allclose(host(ta.einsum("bij,bjk->bik", a, b)), host(a) @ host(b), rtol=1e-12)
    np.testing.assert_allclose(host(ta.bmm(a, b)), host(a) @ host(b), rtol=1e-12)
    assert ta.gradcheck(lambda a, b: ta.einsum("bij,bjk->bk", a, b), (a, b))
    assert ta.einsum("ij->ji", ta.ones(2, 3)).shape == (3, 2)
    with pytest.raises(RuntimeError, match="3-D"):
        ta.bmm(ta.ones(2, 2), ta.ones(2, 2))
    x, y = ta.meshgrid(ta.arange(3), ta.arange(2), indexing="ij")
    assert x.tolist() == [[0, 0], [1, 1], [2, 2]] and y.tolist() == [[0, 1], [0, 1], [0, 1]]
    x, y = ta.meshgrid(ta.arange(3), ta.arange(2), indexing="xy")
    assert x.tolist() == [[0, 1, 2], [0, 1, 2]] and y.tolist() == [[0, 0, 0], [1, 1, 1]]


def test_elementwise_math():
    x = randn(5)
    for f, g in ((ta.sin, np.sin), (ta.cos, np.cos), (lambda t: ta.rsqrt(t.abs() + 1), lambda v: 1 / np.sqrt(abs(v) + 1))):
        np.testing.assert_allclose(host(f(x)), g(host(x)), rtol=1e-12)
        assert ta.gradcheck(f, (x,))
    a, b = ta.tensor([1.0, 5.0]), ta.tensor([3.0, 2.0])
    assert ta.max(a, b).tolist() == [3.0, 5.0] and ta.min(a, b).tolist() == [1.0, 2.0]
    assert ta.clamp(ta.tensor([-2.0, 0.5, 3.0]), min=0, max=1).tolist() == [0.0, 0.5, 1.0]
    values = ta.tensor([1.0, float("nan"), float("inf")])
    assert ta.isnan(values).tolist() == [False, True, False] and ta.isinf(values).tolist() == [False, False, True]
    assert ta.allclose(ta.tensor([1.0]), ta.tensor([1.0 + 1e-9])) and not ta.allclose(a, b)
    t, f = ta.tensor([True, False]), ta.tensor([True, True])
    assert (t & f).tolist() == [True, False] and (t | f).tolist() == [True, True]
    assert (t ^ f).tolist() == [False, True] and (~t).tolist() == [False, True]


def test_reductions_scans_and_norms():
    x = ta.tensor([[1.0, -2.0], [3.0, 4.0]], dtype=ta.float64, requires_grad=True)
    assert ta.cumsum(x, 1).tolist() == [[1, -1], [3, 7]] and ta.gradcheck(lambda t: t.cumsum(0), (x,))
    assert abs(ta.norm(x).item() - math.sqrt(30)) < 1e-12
    np.testing.assert_allclose(host(ta.norm(x, p=1, dim=1)), [3.0, 7.0], rtol=1e-12)
    assert ta.norm(x, p=math.inf).item() == 4.0 and ta.gradcheck(lambda t: ta.norm(t, dim=0), (x,))
    zero = ta.zeros(3, requires_grad=True)
    ta.norm(zero).backward()
    assert zero.grad.tolist() == [0, 0, 0]                                   # not NaN at 0
    assert abs(x.std().item() - np.std(host(x), ddof=1)) < 1e-12
    flags = ta.tensor([[True, False], [True, True]])
    assert ta.any(flags).item() and not ta.all(flags).item() and ta.all(flags, dim=1).tolist() == [False, True]


def test_sorting_and_selection():
    x = ta.tensor([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]], requires_grad=True)
    values, indices = ta.sort(x, dim=1, descending=True)
    assert values.tolist() == [[3, 2, 1], [5, 4, 0]] and indices.tolist() == [[0, 2, 1], [1, 2, 0]]
    assert ta.argsort(x, dim=1).tolist() == [[1, 2, 0], [0, 2, 1]]
    top = ta.topk(x, 2)
    assert top.values.tolist() == [[3, 2], [5, 4]] and top.indices.tolist() == [[0, 2], [1, 2]]
    top.values.sum().backward()
    assert x.grad.tolist() == [[1, 0, 1], [0, 1, 1]]
    assert ta.nonzero(ta.tensor([0, 2, 0, 1])).tolist() == [[1], [3]]
    assert [t.tolist() for t in ta.where(ta.tensor([[0, 1], [1, 0]]))] == [[0, 1], [1, 0]]
    assert ta.flip(ta.arange(3), 0).tolist() == [2, 1, 0] and ta.roll(ta.arange(3), 1, 0).tolist() == [2, 0, 1]


def test_gather_scatter_and_index_fill():
    x = ta.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    index = ta.tensor([[0, 0], [1, 0]])
    assert ta.gather(x, 1, index).tolist() == [[1, 1], [4, 3]]            # out[i][j] = x[i][index[i][j]]
    ta.gather(x, 1, index).sum().backward()
    assert x.grad.tolist() == [[2, 0], [1, 1]]
    src = ta.arange(1.0, 11.0).reshape(2, 5)
    target = ta.zeros(3, 5).scatter(0, ta.tensor([[0, 1, 2, 0, 0]]), src)  # PyTorch's documented example
    assert target.tolist() == [[1, 0, 0, 4, 5], [0, 2, 0, 0, 0], [0, 0, 3, 0, 0]]
    filled = ta.zeros(2, 3)
    filled.scatter_(1, ta.tensor([[2], [0]]), value=1.5)
    assert filled.tolist() == [[0, 0, 1.5], [1.5, 0, 0]]
    assert ta.ones(2, 3).index_fill_(1, ta.tensor([0, 2]), -1.0).tolist() == [[-1, 1, -1], [-1, 1, -1]]


def test_multinomial_draws_by_weight_and_without_repeats():
    ta.manual_seed(0)
    draws = ta.multinomial(ta.tensor([0.0, 10.0, 0.0, 30.0]), 4000, replacement=True)
    counts = np.bincount(host(draws), minlength=4)
    assert counts[0] == counts[2] == 0 and abs(counts[3] / 4000 - 0.75) < 0.03
    rows = ta.multinomial(ta.ones(5, 6), 6)
    assert all(sorted(row) == list(range(6)) for row in rows.tolist())      # without replacement: a permutation
    with pytest.raises(RuntimeError, match="without replacement"):
        ta.multinomial(ta.ones(3), 4)


# -- tensor methods -------------------------------------------------------------------------------------------------
def test_tensor_methods():
    x = randn(2, 3)
    c = x.clone()
    assert c.array is not x.array and np.array_equal(host(c), host(x)) and ta.gradcheck(lambda t: t.clone() * 2, (x,))
    assert x.t().shape == (3, 2) and x.T.shape == (3, 2)
    assert x.type_as(ta.ones(1)).dtype == np.float32 and x.type(ta.float32).dtype == np.float32
    assert x.type() == "tinyattn.float64"
    assert x[:1].expand_as(x).shape == (2, 3) and x.view_as(ta.ones(3, 2)).shape == (3, 2)
    assert ta.tensor([[1, 2]]).repeat(2, 2).tolist() == [[1, 2, 1, 2], [1, 2, 1, 2]]
    assert ta.gradcheck(lambda t: t.repeat(2, 1, 2), (x,))
    assert [t.tolist() for t in ta.tensor([[1, 2], [3, 4]]).unbind(1)] == [[1, 3], [2, 4]]
    assert float(ta.tensor(2.5)) == 2.5 and int(ta.tensor(7)) == 7 and bool(ta.tensor(1))
    assert f"{ta.tensor(0.5):.2f}" == "0.50" and [10, 20, 30][ta.tensor(1)] == 20
    assert np.asarray(ta.tensor([[1.0, 2.0]])).tolist() == [[1.0, 2.0]]
    assert np.asarray(ta.tensor([1, 2])).dtype == np.int64


def test_printing_matches_pytorch():
    on = "" if ta.get_default_device() == "cpu" else ", device='cuda:0'"     # PyTorch names a GPU tensor's device
    assert repr(ta.tensor([[1.5, 2.0]])) == f"tensor([[1.5000, 2.0000]]{on})"
    assert repr(ta.tensor([1.0, 2.0])) == f"tensor([1., 2.]{on})"
    assert repr(ta.tensor([1, 2], dtype=ta.int32)) == f"tensor([1, 2]{on}, dtype=tinyattn.int32)"
    w = ta.ones(2, requires_grad=True)
    assert repr(w) == f"tensor([1., 1.]{on}, requires_grad=True)"
    assert repr(w.sum()) == f"tensor(2.{on}, grad_fn=<SumBackward>)"
    ta.set_default_dtype(ta.float64)           # PyTorch names the dtype that differs from the default one then
    try:
        assert repr(ta.tensor([1.0])) == f"tensor([1.]{on})"
        assert repr(ta.tensor([1.0], dtype=ta.float32)) == f"tensor([1.]{on}, dtype=tinyattn.float32)"
    finally:
        ta.set_default_dtype(ta.float32)


def test_data_is_a_tensor_sharing_memory():
    p = nn.Parameter(ta.zeros(3))
    p.data.fill_(2.0)
    assert p.tolist() == [2.0, 2.0, 2.0]
    saved = p.data.clone()
    p.data = ta.ones(3)
    assert p.tolist() == [1.0] * 3 and saved.tolist() == [2.0] * 3 and isinstance(p, nn.Parameter)


# -- nn -------------------------------------------------------------------------------------------------------------
def test_small_modules_and_containers():
    x = randn(2, 3, 4)
    np.testing.assert_allclose(host(nn.Softmax(dim=-1)(x)).sum(-1), 1.0)
    assert nn.Flatten()(x).shape == (2, 12) and nn.Flatten(0, 1)(x).shape == (6, 4) and nn.Identity()(x) is x
    layers = nn.ModuleDict({"a": nn.Linear(4, 4), "b": nn.ReLU()})
    layers["c"] = nn.Linear(4, 2)
    assert list(layers.keys()) == ["a", "b", "c"] and "c" in layers and len(list(layers.parameters())) == 4
    seq = nn.Sequential(OrderedDict(first=nn.Linear(4, 3), act=nn.ReLU()))
    assert seq(x.float()).shape == (2, 3, 3) and [n for n, _ in seq.named_children()] == ["first", "act"]
    stack = nn.ModuleList([nn.Linear(2, 2)])
    stack.extend([nn.ReLU(), nn.Tanh()]).insert(1, nn.Identity())
    assert [type(m).__name__ for m in stack] == ["Linear", "Identity", "ReLU", "Tanh"]
    for build in (lambda: nn.Sequential(nn.Linear(2, 2), lambda v: v), lambda: nn.ModuleList([3])):
        with pytest.raises(TypeError, match="takes tinyattn modules"):
            build()


def test_forward_hooks():
    layer, seen = nn.Linear(2, 2), []
    handle = layer.register_forward_hook(lambda module, inputs, output: seen.append(output.shape))
    pre = layer.register_forward_pre_hook(lambda module, inputs: (inputs[0] * 0,))
    out = layer(ta.ones(3, 2))
    np.testing.assert_allclose(host(out), np.broadcast_to(host(layer.bias), (3, 2)))   # the pre-hook zeroed x
    handle.remove()
    pre.remove()
    layer(ta.ones(1, 2))
    assert seen == [(3, 2)]


def test_loss_modules_match_their_functions():
    logits, target = randn(4, 5), ta.tensor([1, 0, 4, 2])
    assert nn.CrossEntropyLoss(label_smoothing=0.1)(logits, target).item() == \
        F.cross_entropy(logits, target, label_smoothing=0.1).item()
    log_p = F.log_softmax(logits, dim=-1)
    assert abs(nn.NLLLoss()(log_p, target).item() - F.cross_entropy(logits, target).item()) < 1e-12
    assert nn.MSELoss(reduction="sum")(logits, logits * 0).item() == (logits ** 2).sum().item()
    q = F.softmax(randn(4, 5, seed=9), dim=-1)
    kl = nn.KLDivLoss(reduction="batchmean")(log_p, q).item()
    np.testing.assert_allclose(kl, (host(q) * (np.log(host(q)) - host(log_p))).sum() / 4, rtol=1e-12)
    x, t = ta.tensor([0.0, 2.0, -3.0]), ta.tensor([1.0, 0.0, 1.0])
    expected = np.mean([math.log(2), 2 + math.log1p(math.exp(-2)), 3 + math.log1p(math.exp(-3))])
    assert abs(nn.BCEWithLogitsLoss()(x, t).item() - expected) < 1e-6
    big = ta.tensor([1000.0, -1000.0])
    assert np.isfinite(F.binary_cross_entropy_with_logits(big, ta.tensor([0.0, 1.0])).item())


def test_losses_take_pytorchs_arguments_in_pytorchs_order():
    logits, target = randn(4, 5), ta.tensor([1, 0, 4, 2])
    log_p = F.log_softmax(logits, dim=-1)
    # third positional argument is weight in PyTorch: never read as ignore_index or reduction
    for call in (lambda: F.cross_entropy(logits, target, ta.ones(5)), lambda: F.nll_loss(log_p, target, ta.ones(5)),
                 lambda: nn.NLLLoss(ta.ones(5))(log_p, target), lambda: nn.CrossEntropyLoss(ta.ones(5))(logits, target)):
        with pytest.raises(NotImplementedError, match="class weights"):
            call()
    with pytest.raises(NotImplementedError, match="reduction="):
        F.mse_loss(logits, logits, False)                                 # size_average, deprecated
    with pytest.raises(ValueError, match="'batchmean'"):
        F.mse_loss(logits, logits, reduction="batchmean")                 # only kl_div has it
    assert F.kl_div(log_p, log_p, None, None, "sum", True).item() == 0.0
    assert F.nll_loss(log_p, target, None, None, 0, None, "sum").item() == \
        pytest.approx(F.cross_entropy(logits, target, reduction="none").numpy()[[0, 2, 3]].sum())   # target 0 ignored


def test_functional_extras():
    x = ta.arange(6.0).reshape(2, 3)
    assert F.pad(x, (1, 0)).tolist() == [[0, 0, 1, 2], [0, 3, 4, 5]]
    assert F.pad(x, (0, 1, 1, 0), value=-1).shape == (3, 4)
    assert ta.gradcheck(lambda t: F.pad(t, (1, 2, 0, 1)), (randn(2, 3),))
    assert F.one_hot(ta.tensor([2, 0])).tolist() == [[0, 0, 1], [1, 0, 0]]
    assert F.one_hot(ta.tensor([1]), num_classes=4).dtype == np.int64
    np.testing.assert_allclose(host(F.normalize(ta.tensor([[3.0, 4.0], [0.0, 0.0]]))), [[0.6, 0.8], [0, 0]])
    assert F.softmax(ta.ones(3), dim=0, dtype=ta.float64).dtype == np.float64


def test_init_functions():
    w = nn.Parameter(ta.empty(256, 128))
    with ta.no_grad():
        nn.init.kaiming_normal_(w, nonlinearity="relu")
    assert abs(host(w).std() - math.sqrt(2 / 128)) < 0.01
    nn.init.kaiming_uniform_(w, a=math.sqrt(5))                           # nn.Linear's own default
    assert np.abs(host(w)).max() <= 1 / math.sqrt(128) + 1e-7
    nn.init.constant_(w, 0.25)
    assert (host(w) == 0.25).all()
    q = nn.init.orthogonal_(nn.Parameter(ta.empty(4, 6)))
    np.testing.assert_allclose(host(q) @ host(q).T, np.eye(4), atol=1e-6)
    nn.init.xavier_normal_(w)
    assert abs(host(w).std() - math.sqrt(2 / (128 + 256))) < 0.01


def test_pytorch_multihead_attention():
    ta.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2).double()
    assert [n for n, _ in mha.named_parameters()] == ["in_proj_weight", "in_proj_bias", "out_proj.weight",
                                                      "out_proj.bias"]
    q, k = randn(4, 3, 8), randn(6, 3, 8, seed=1)                         # (L, N, E): batch_first=False
    out, weights = mha(q, k, k)
    assert out.shape == (4, 3, 8) and weights.shape == (3, 4, 6)
    np.testing.assert_allclose(host(weights).sum(-1), 1.0)
    mask = ta.zeros(4, 6, dtype=ta.bool)
    mask[:, 5] = True                                                     # True: may NOT attend (PyTorch's MHA)
    _, masked = mha(q, k, k, attn_mask=mask, average_attn_weights=False)
    assert masked.shape == (3, 2, 4, 6) and (host(masked)[..., 5] == 0).all()
    pad = ta.zeros(3, 6, dtype=ta.bool)
    pad[0, :2] = True
    _, padded = mha(q, k, k, key_padding_mask=pad)
    assert (host(padded)[0, :, :2] == 0).all()
    first = nn.MultiheadAttention(8, 2, batch_first=True).double()
    first.load_state_dict(mha.state_dict())
    np.testing.assert_allclose(host(first(q.transpose(0, 1), k.transpose(0, 1), k.transpose(0, 1))[0]),
                               host(out.transpose(0, 1)), rtol=1e-12)
    assert mha(q, k, k, need_weights=False)[1] is None
    single, _ = mha(q[:, 0], k[:, 0], k[:, 0])                            # unbatched (L, E)
    np.testing.assert_allclose(host(single), host(out[:, 0]), rtol=1e-12)


def test_load_state_dict_not_strict_reports_keys():
    model = nn.Linear(2, 2)
    result = model.load_state_dict({"weight": ta.ones(2, 2), "extra": ta.ones(1)}, strict=False)
    assert result.missing_keys == ["bias"] and result.unexpected_keys == ["extra"]


# -- optim ----------------------------------------------------------------------------------------------------------
def _lrs(make, steps):
    optimizer = optim.SGD([ta.ones(1, requires_grad=True)], lr=1.0)
    scheduler = make(optimizer)
    seen = []
    for _ in range(steps):
        seen.append(round(scheduler.get_last_lr()[0], 6))
        optimizer.step()
        scheduler.step()
    return seen


def test_learning_rate_schedules_follow_pytorchs_formulas():
    lr = optim.lr_scheduler
    assert _lrs(lambda o: lr.StepLR(o, step_size=2, gamma=0.5), 5) == [1, 1, 0.5, 0.5, 0.25]
    assert _lrs(lambda o: lr.MultiStepLR(o, milestones=[1, 3], gamma=0.1), 4) == [1, 0.1, 0.1, 0.01]
    assert _lrs(lambda o: lr.CosineAnnealingLR(o, T_max=4), 5) == [1, 0.853553, 0.5, 0.146447, 0]
    assert _lrs(lambda o: lr.LinearLR(o, start_factor=0.25, total_iters=3), 5) == [0.25, 0.5, 0.75, 1, 1]
    assert _lrs(lambda o: lr.LambdaLR(o, lambda e: 0.9 ** e), 3) == [1, 0.9, 0.81]
    assert _lrs(lambda o: lr.SequentialLR(o, [lr.LinearLR(o, 0.5, total_iters=2), lr.StepLR(o, 1, 0.5)], [2]), 5) \
        == [0.5, 0.75, 1, 0.5, 0.25]
    cycle = _lrs(lambda o: lr.OneCycleLR(o, max_lr=1.0, total_steps=10), 10)
    assert cycle[0] == 0.04 and max(cycle) == cycle[2] and cycle[-1] == pytest.approx(4e-6, rel=1e-3)


def test_a_scheduler_resumed_from_its_state_dict_goes_on_where_it_stopped():
    lr = optim.lr_scheduler

    def make(o):
        return lr.SequentialLR(o, [lr.LinearLR(o, 0.5, total_iters=2), lr.StepLR(o, 1, 0.5)], [2])
    optimizer = optim.SGD([ta.ones(1, requires_grad=True)], lr=1.0)
    scheduler = make(optimizer)
    for _ in range(3):
        optimizer.step()
        scheduler.step()
    resumed_optimizer = optim.SGD([ta.ones(1, requires_grad=True)], lr=1.0)
    resumed = make(resumed_optimizer)
    resumed.load_state_dict(scheduler.state_dict())
    resumed_optimizer.load_state_dict(optimizer.state_dict())
    for _ in range(2):
        scheduler.step()
        resumed.step()
        assert resumed.get_last_lr() == scheduler.get_last_lr()
    assert resumed.get_last_lr() == [0.125]


RESUMABLE = {
    "StepLR": lambda o: optim.lr_scheduler.StepLR(o, 1, 0.5),
    "MultiStepLR": lambda o: optim.lr_scheduler.MultiStepLR(o, [1, 2, 3], 0.5),
    "CosineAnnealingLR": lambda o: optim.lr_scheduler.CosineAnnealingLR(o, 10),
    "LinearLR": lambda o: optim.lr_scheduler.LinearLR(o, 0.25, total_iters=8),
    "LambdaLR": lambda o: optim.lr_scheduler.LambdaLR(o, lambda e: 0.9 ** e),
    "OneCycleLR": lambda o: optim.lr_scheduler.OneCycleLR(o, 0.5, total_steps=20),
    "SequentialLR": lambda o: optim.lr_scheduler.SequentialLR(
        o, [optim.lr_scheduler.LinearLR(o, 0.5, total_iters=2), optim.lr_scheduler.StepLR(o, 1, 0.5)], [2]),
}


@pytest.mark.parametrize("name", RESUMABLE)
def test_a_scheduler_built_after_loading_the_optimizer_keeps_the_loaded_learning_rate(name):
    """The usual resume: optimizer.load_state_dict, then the scheduler is built, then its state loaded. PyTorch sets
    initial_lr once, and its constructors keep a rate they find (issue 31: StepLR wrote 0.1 over the loaded 0.0125
    for one step)."""
    make = RESUMABLE[name]
    optimizer = optim.SGD([ta.ones(1, requires_grad=True)], lr=0.1, momentum=0.9)
    scheduler = make(optimizer)
    for _ in range(3):
        optimizer.step()
        scheduler.step()
    loaded = optimizer.param_groups[0]["lr"]
    resumed_optimizer = optim.SGD([ta.ones(1, requires_grad=True)], lr=0.1, momentum=0.9)
    resumed_optimizer.load_state_dict(optimizer.state_dict())
    resumed = make(resumed_optimizer)
    assert resumed_optimizer.param_groups[0]["lr"] == loaded != 0.1
    assert resumed_optimizer.param_groups[0]["momentum"] == optimizer.param_groups[0]["momentum"]
    resumed.load_state_dict(scheduler.state_dict())
    for _ in range(3):
        optimizer.step()
        scheduler.step()
        resumed_optimizer.step()
        resumed.step()
        assert resumed.get_last_lr() == scheduler.get_last_lr()


def test_a_fresh_optimizer_starts_at_step_0_of_its_schedule_whatever_the_order_of_sequential_parts():
    lr = optim.lr_scheduler
    assert _lrs(lambda o: lr.SequentialLR(o, [lr.CosineAnnealingLR(o, T_max=2), lr.LinearLR(o, 0.5, total_iters=2)],
                                          [2]), 4) == [1, 0.5, 0.5, 0.75]


def test_sgd_takes_pytorchs_arguments_in_pytorchs_order():
    def after_two_steps(*args, **kwargs):
        w = ta.ones(1, requires_grad=True)
        optimizer = optim.SGD([w], *args, **kwargs)
        for _ in range(2):
            w.grad = ta.ones(1)
            optimizer.step()
        return round(w.item(), 6)
    # momentum 0.9, dampening 0.5 (fourth, as in PyTorch): buffer 1, then 0.9 + 0.5 = 1.4
    assert after_two_steps(0.1, 0.9, 0.5) == 1 - 0.1 - 0.14
    assert after_two_steps(0.1, maximize=True) == 1.2
    with pytest.raises(ValueError, match="zero dampening"):
        optim.SGD([ta.ones(1, requires_grad=True)], 0.1, 0.9, 0.5, nesterov=True)


def test_pytorch_paths_and_arguments_for_optimizers():
    w = ta.ones(3, requires_grad=True)
    optim.AdamW([w], fused=True, foreach=False)                       # accepted: one implementation here
    w.grad = ta.tensor([3.0, -0.5, 0.1])
    nn.utils.clip_grad_value_([w], 1.0)
    assert w.grad.tolist() == pytest.approx([1.0, -0.5, 0.1])
    assert nn.utils.clip_grad_norm_ is optim.clip_grad_norm_


# -- einops ---------------------------------------------------------------------------------------------------------
def test_einops_works_on_tensors_and_in_sequential():
    einops = pytest.importorskip("einops")
    images = randn(2, 3, 8, 8)
    patches = einops.rearrange(images, "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=4, p2=4)
    expected = host(images).reshape(2, 3, 2, 4, 2, 4).transpose(0, 2, 4, 3, 5, 1).reshape(2, 4, 48)
    np.testing.assert_array_equal(host(patches), expected)
    assert ta.gradcheck(lambda t: einops.reduce(t, "b c h w -> b c", "mean"), (randn(2, 3, 2, 2),))
    assert einops.repeat(ta.ones(3), "c -> b c", b=4).shape == (4, 3)
    np.testing.assert_allclose(host(einops.reduce(-images, "b c h w -> b c", "prod")),
                               host(images).prod(axis=(2, 3)), rtol=1e-12)      # 64 negative factors: positive
    model = nn.Sequential(nn.Rearrange("b c h w -> b (c h w)"), nn.Linear(192, 2)).double()
    assert model(images).shape == (2, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert einops.einsum(images, images, "b c h w, b c h w -> b").shape == (2,)
