"""No silent wrong answers: each test here failed before the behaviour it checks was built (issue 'Trust'), and each
holds PyTorch's rule, error type included, so code that catches PyTorch's errors ports."""
import os
import struct
import threading
import warnings

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.functional as F
from tinyattn import nn, optim

from conftest import host, randn


# 1. grad mode is per thread ------------------------------------------------------------------------------------
def test_no_grad_in_one_thread_leaves_another_recording():
    inside, go_on = threading.Event(), threading.Event()

    def evaluator():
        with ta.no_grad():
            inside.set()
            go_on.wait(5)
    other = threading.Thread(target=evaluator)
    other.start()
    inside.wait(5)
    w = ta.ones(3, requires_grad=True)
    y = (w * 2).sum()                                    # while the other thread sits inside no_grad
    go_on.set()
    other.join()
    assert y.requires_grad and ta.is_grad_enabled()
    y.backward()
    np.testing.assert_array_equal(host(w.grad), [2, 2, 2])


def test_overlapping_no_grad_blocks_in_two_threads_restore_grad_mode():
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()

    def first():
        with ta.no_grad():
            a_in.set()
            b_in.wait(5)
        a_out.set()

    def second():
        a_in.wait(5)
        with ta.no_grad():
            b_in.set()
            a_out.wait(5)
    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ta.is_grad_enabled()
    assert ta.ones(1, requires_grad=True).exp().requires_grad


# 2. in-place changes of saved tensors are detected ---------------------------------------------------------
def test_optimizer_step_between_forward_and_backward_raises_naming_the_function():
    w = ta.tensor([1.0, 2.0], requires_grad=True)
    loss = (w * w * ta.tensor([3.0, 4.0])).sum()         # d/dw = [6, 16]
    optimizer = optim.SGD([w], lr=0.5)
    w.grad = ta.ones(2)
    optimizer.step()
    with pytest.raises(RuntimeError, match=r"Mul saved .* modified by an in-place operation.*version"):
        loss.backward()


def test_in_place_change_of_a_view_and_of_an_output_are_detected():
    x = ta.randn(2, 3, requires_grad=True)
    y = x * 1.0
    e = y.exp()                                          # saves its output
    e += 1
    with pytest.raises(RuntimeError, match="Exp saved"):
        e.sum().backward()
    y = x * 1.0
    z = y.reshape(6) * y.reshape(6)                      # Mul saves two views of y's memory
    with ta.no_grad():
        y.reshape(3, 2)[0, 0] = 5.0                      # a third view changes that memory
    with pytest.raises(RuntimeError, match="Mul saved"):
        z.sum().backward()


# 3. real in-place operators, with PyTorch's rules ---------------------------------------------------------
def test_in_place_update_keeps_parameters_in_their_module():
    lin = nn.Linear(3, 2)
    before = host(lin.weight).copy()
    with ta.no_grad():
        lin.weight *= 0.5
        lin.bias += 1
    assert isinstance(lin.weight, nn.Parameter) and lin.weight is dict(lin.named_parameters())["weight"]
    np.testing.assert_allclose(host(lin.state_dict()["weight"]), before * 0.5)


def test_hand_written_sgd_loop_changes_the_parameters():
    model = nn.Linear(2, 1)
    x, y = ta.randn(8, 2), ta.randn(8, 1)
    before = [host(p).copy() for p in model.parameters()]
    F.mse_loss(model(x), y).backward()
    with ta.no_grad():
        for p in model.parameters():
            p -= 0.1 * p.grad
    for p, b in zip(model.parameters(), before):
        assert not np.allclose(host(p), b)


def test_in_place_methods_and_item_assignment():
    x = ta.zeros(2, 3)
    x[0, 1] = 5.0
    x[1] = ta.tensor([1.0, 2.0, 3.0])
    x.add_(1).mul_(2).sub_(ta.ones(3), alpha=2).div_(2)
    np.testing.assert_allclose(host(x), [[0, 5, 0], [1, 2, 3]])
    x.clamp_(0.5, 2.5).masked_fill_(ta.tensor([[True, False, False]] * 2), -1)
    np.testing.assert_allclose(host(x), [[-1, 2.5, 0.5], [-1, 2, 2.5]])
    x.copy_(ta.arange(3.0))
    np.testing.assert_allclose(host(x), [[0, 1, 2], [0, 1, 2]])
    assert (host(x.zero_()) == 0).all() and (host(x.fill_(7)) == 7).all()
    ta.manual_seed(1)
    x.normal_(3.0, 0.1)
    assert abs(host(x).mean() - 3.0) < 0.2
    x.uniform_(-1, 1)
    assert host(x).min() >= -1 and host(x).max() <= 1
    ints = ta.tensor([1, 2])
    with pytest.raises(RuntimeError, match="cannot be cast"):
        ints += 0.5
    with pytest.raises(RuntimeError, match="does not broadcast"):
        ta.zeros(3).add_(ta.ones(2, 3))


def test_in_place_on_a_leaf_that_requires_grad_raises_outside_no_grad():
    w = ta.ones(3, requires_grad=True)
    for change in (lambda: w.add_(1), lambda: w.__iadd__(1), lambda: w.__setitem__(0, 2.0), lambda: w.zero_()):
        with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
            change()
    with ta.no_grad():
        w.add_(1)
    np.testing.assert_array_equal(host(w), [2, 2, 2])


def test_in_place_ops_inside_a_graph_are_differentiable():
    x = randn(4)
    w = randn(4, seed=1)
    h = x * 2.0
    h += w                               # d/dx 2, d/dw 1
    h *= h                               # (2x + w)^2
    h[0] = w[0] * 10.0                   # the first element now comes from w alone
    h.sum().backward()
    x_, w_ = host(x), host(w)
    expected_x = 2 * 2 * (2 * x_ + w_)
    expected_w = 2 * (2 * x_ + w_)
    expected_x[0], expected_w[0] = 0.0, 10.0
    np.testing.assert_allclose(host(x.grad), expected_x)
    np.testing.assert_allclose(host(w.grad), expected_w)
    assert ta.gradcheck(lambda x, w: _in_place_chain(x, w), (randn(3), randn(3, seed=2)))


def test_an_in_place_change_leaves_the_gradient_of_earlier_uses_alone():
    a = randn(3)
    x = a * 1.0
    y = x + 2.0                          # used x before the change: d/da 1
    x.mul_(3.0)                          # x is now 3a: d/da 3
    x.retain_grad()
    (y.sum() + x.sum()).backward()
    np.testing.assert_allclose(host(a.grad), np.full(3, 4.0))
    np.testing.assert_allclose(host(x.grad), np.ones(3))              # the gradient of x's new value, once
    b = randn(3, seed=1)
    z = b * 2.0
    z.retain_grad()                      # asked for before the change: kept for the new value
    z.add_(1.0)
    z.sum().backward()
    np.testing.assert_allclose(host(z.grad), np.ones(3))


def test_an_in_place_change_through_a_slice_reaches_the_gradient_of_the_sliced_tensor():
    a = randn(2, 3)
    z = a * 1.0
    z[0][1:].mul_(5.0)                   # a slice of a slice: z's first row changes where it is
    (z * z).sum().backward()
    expected = 2 * host(a)
    expected[0, 1:] *= 25.0
    np.testing.assert_allclose(host(a.grad), expected)
    w, b = randn(2, seed=1), randn(3, seed=2)
    y = b * 1.0
    y[:2] += w * 3.0                     # the getitem, iadd, setitem of Python's augmented assignment
    y.sum().backward()
    np.testing.assert_allclose(host(w.grad), np.full(2, 3.0))
    np.testing.assert_allclose(host(b.grad), np.ones(3))
    with pytest.raises(RuntimeError, match="reshape, transpose"):
        (a * 1.0).t().mul_(2.0)          # a view that is not a slice: refused, never silently wrong
    with pytest.raises(RuntimeError, match="view of a leaf"):
        a[0].mul_(2.0)


def test_detach_counts_in_place_changes_with_its_tensor_as_pytorch():
    y = randn(3).exp()                   # exp saves its output for backward
    with ta.no_grad():
        y.detach().mul_(5.0)
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        y.sum().backward()
    assert y.data._version == 0          # .data does not (PyTorch's documented difference)


def test_set_grad_enabled_as_a_decorator_returns_to_the_callers_mode():
    @ta.set_grad_enabled(True)
    def recording():
        return ta.is_grad_enabled()
    assert ta.is_grad_enabled()
    with ta.no_grad():
        assert recording() and not ta.is_grad_enabled()
    assert ta.is_grad_enabled()


def test_argmin_and_descending_sorts_work_on_unsigned_and_bool_values():
    small = ta.tensor(np.array([3, 0, 250, 0], dtype=np.uint8))
    assert ta.argmin(small).item() == 1 and ta.argmax(small).item() == 2
    assert small.argsort(descending=True).tolist() == [2, 0, 1, 3]    # ties keep their order
    assert ta.argsort(ta.tensor([True, False, True]), descending=True).tolist() == [0, 2, 1]
    assert ta.sort(ta.tensor([1.0, 3.0, 1.0]), descending=True).indices.tolist() == [1, 0, 2]


def _in_place_chain(x, w):
    h = x * 1.0
    h.mul_(w).add_(x).clamp_(-1.0, 1.0)
    h[1:] = w[1:] * 3.0
    return h


# 4. masks and q/k/v shapes are checked against the scores they apply to ----------------------------------------
def test_attention_masks_of_the_wrong_shape_or_dtype_raise_naming_the_users_shapes():
    q, k, v = ta.randn(2, 4, 5, 8), ta.randn(2, 4, 6, 8), ta.randn(2, 4, 6, 8)
    for attend in (F.scaled_dot_product_attention, F.flash_attention):
        with pytest.raises(RuntimeError, match=r"attn_mask of shape \(3, 1, 1, 6\).*\(2, 4, 5, 6\)"):
            attend(q, k, v, attn_mask=ta.ones(3, 1, 1, 6, dtype=bool))
        with pytest.raises(RuntimeError, match=r"attn_mask of shape \(5, 7\)"):
            attend(q, k, v, attn_mask=ta.ones(5, 7, dtype=bool))
        with pytest.raises(RuntimeError, match="must be bool .* got dtype int64"):
            attend(q, k, v, attn_mask=ta.ones(5, 6, dtype="int64"))
        with pytest.raises(RuntimeError, match="key and value need one length"):
            attend(q, k, ta.randn(2, 4, 7, 8))
    mha = nn.Attention(8, 2)
    with pytest.raises(RuntimeError, match=r"key_padding_mask must have shape \(batch, key length\) = \(2, 5\)"):
        mha(ta.randn(2, 5, 8), key_padding_mask=ta.zeros(3, 5, dtype=bool))


# 5. a dim out of range raises ---------------------------------------------------------------------------------
@pytest.mark.parametrize("call", [
    lambda x: x.sum(dim=2), lambda x: x.mean(dim=-3), lambda x: x.var(dim=2), lambda x: ta.cat([x, x], dim=2),
    lambda x: ta.stack([x, x], dim=3), lambda x: x.unsqueeze(3), lambda x: x.squeeze(2), lambda x: x.transpose(0, 2),
    lambda x: x.max(dim=2), lambda x: x.argmax(dim=-3), lambda x: x.softmax(dim=2), lambda x: x.flatten(0, 2)])
def test_dim_out_of_range_raises_index_error(call):
    with pytest.raises(IndexError, match="Dimension out of range"):
        call(ta.randn(2, 3))


def test_chunk_needs_a_positive_count():
    with pytest.raises(RuntimeError, match="chunk expects"):
        ta.randn(4).chunk(0)


# 6. negative targets and ids do not index from the end -----------------------------------------------------------
def test_negative_class_target_and_token_id_raise():
    logits = ta.randn(3, 5)
    with pytest.raises(IndexError, match="target -1 is out of bounds for 5 classes"):
        F.cross_entropy(logits, ta.tensor([0, -1, 2]))
    with pytest.raises(IndexError, match="target 5 is out of bounds"):
        F.cross_entropy(logits, ta.tensor([0, 5, 2]))
    F.cross_entropy(logits, ta.tensor([0, -1, 2]), ignore_index=-1)       # -1 as ignore_index is fine
    table = ta.randn(4, 2)
    for bad in (-1, 4):
        with pytest.raises(IndexError, match=f"id {bad} is out of range for a table of 4 rows"):
            F.embedding(ta.tensor([0, bad]), table)


# 7. gradcheck fails on NaN ---------------------------------------------------------------------------------------
def test_gradcheck_fails_on_nan_gradients_and_says_where():
    class NaNBackward(ta.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            out = grad * 2
            out[1] = np.nan
            return out
    with pytest.raises(ta.GradcheckError, match=r"element \(1,\).*analytic.*NaN"):
        ta.gradcheck(NaNBackward.apply, (randn(3),))
    with pytest.raises(ta.GradcheckError, match="NaN"), np.errstate(invalid="ignore"):    # log(-1) is meant
        ta.gradcheck(lambda x: x.log(), (ta.tensor([-1.0, 2.0], dtype="float64", requires_grad=True),))


# 8. a gradient of the wrong shape but the right size raises ------------------------------------------------------
def test_transposed_gradient_raises_naming_function_input_and_shapes():
    class Transposed(ta.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 3

        @staticmethod
        def backward(ctx, grad):
            return (grad * 3).T                       # the classic bug: (4, 5) for a (5, 4) input
    x = ta.randn(5, 4, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"Transposed.backward returned a gradient of shape \(4, 5\) for its "
                                           r"input 0 of shape \(5, 4\)"):
        Transposed.apply(x).sum().backward()
    b = ta.randn(4, requires_grad=True)
    (ta.randn(5, 4) * b).sum().backward()                # broadcasting gradients still reduce
    assert b.grad.shape == (4,)


# 9. PyTorch's type promotion -----------------------------------------------------------------------------------
def test_type_promotion_follows_pytorch():
    f32, f64 = ta.ones(3), ta.ones(3, dtype="float64")
    ints = ta.tensor([1, 2, 3])
    assert (f32 + f64).dtype == np.float64                        # both have dims: the wider float
    assert (f32 + ta.tensor(2.0, dtype="float64")).dtype == np.float32   # a 0-d tensor does not widen
    assert (f32 * np.int64(3)).dtype == np.float32                # NumPy numbers count as Python numbers
    assert (f32 * np.float64(0.5)).dtype == np.float32
    assert (f32 + ints).dtype == np.float32                       # int tensor with a float tensor: the float
    assert (ints + 2.5).dtype == np.float32                       # int tensor with a float: the default float
    assert (ints / ints).dtype == np.float32                      # true division
    assert (ints + 2).dtype == np.int64
    assert ta.where(ints > 1, f32, 0).dtype == np.float32
    w = ta.ones(3, requires_grad=True)
    (w * ta.ones(3, dtype="float64")).sum().backward()
    assert w.grad.dtype == np.float32                             # .grad always has its tensor's dtype
    with pytest.raises(RuntimeError, match="one dtype"):
        ta.randn(2, 3) @ ta.randn(3, 2, dtype="float64")
    with pytest.raises(RuntimeError, match="one dtype"):
        nn.Linear(3, 2)(ta.randn(4, 3, dtype="float64"))
    with pytest.raises(RuntimeError, match="layer_norm needs one dtype: input float64, weight float32"):
        nn.LayerNorm(3)(ta.randn(4, 3, dtype="float64"))
    with pytest.raises(RuntimeError, match="rms_norm needs one dtype"):
        F.rms_norm(ta.randn(4, 3), (3,), ta.ones(3, dtype="float64"))


# 10. optimizers and clipping ---------------------------------------------------------------------------------
def test_optimizer_arguments_are_checked():
    w = ta.ones(3, requires_grad=True)
    with pytest.raises(TypeError, match="iterable"):
        optim.SGD(w, lr=0.1)
    for bad in (dict(lr=-1), dict(eps=-1e-8), dict(betas=(0.9, 1.0)), dict(betas=(-0.1, 0.9)),
                dict(weight_decay=-1)):
        with pytest.raises(ValueError, match="Invalid"):
            optim.AdamW([w], **bad)
    with pytest.raises(ValueError, match="Invalid momentum"):
        optim.SGD([w], momentum=-0.5)
    with pytest.raises(ValueError, match="appears twice"):
        optim.SGD([w, w])
    with pytest.raises(ValueError, match="appears twice"):
        optim.SGD([{"params": [w]}, {"params": [w]}])


def test_clip_grad_norm_takes_a_single_tensor():
    w = ta.ones(4, requires_grad=True)
    w.grad = ta.full((4,), 3.0)
    norm = optim.clip_grad_norm_(w, 1.0)
    assert abs(norm.item() - 6.0) < 1e-6
    assert abs(np.linalg.norm(host(w.grad)) - 1.0) < 1e-5


@pytest.mark.parametrize("make", [lambda ps: optim.AdamW(ps, lr=0.05, weight_decay=0.1),
                                  lambda ps: optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True)])
def test_resumed_training_equals_uninterrupted_bit_for_bit(tmp_path, make):
    straight, _ = _train(make, 10)
    first, optimizer = _train(make, 5)
    path = tmp_path / "ckpt.npz"
    ta.save({"model": first.state_dict(), "optimizer": optimizer.state_dict(), "step": 5}, path)
    resumed, _ = _train(make, 10, ta.load(path))
    for (name, a), (_, b) in zip(straight.state_dict().items(), resumed.state_dict().items()):
        np.testing.assert_array_equal(host(a), host(b), err_msg=name)


def _train(make, steps, checkpoint=None):
    """A small model trained for steps on batches from one seeded generator; resumed from a checkpoint, it skips the
    batches that went into it."""
    ta.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 1))
    optimizer = make(model.parameters())
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
    rng = np.random.default_rng(0)
    for step in range(steps):
        x, y = (ta.tensor(rng.standard_normal(shape), dtype="float32") for shape in ((16, 4), (16, 1)))
        if checkpoint is not None and step < checkpoint["step"]:
            continue
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    return model, optimizer


# 11. checkpoints ---------------------------------------------------------------------------------------------
def test_every_string_key_and_nested_metadata_round_trip(tmp_path):
    model, path = nn.Linear(2, 3), tmp_path / "ckpt.npz"
    optimizer = optim.AdamW(model.parameters())
    F.mse_loss(model(ta.randn(4, 2)), ta.randn(4, 3)).backward()
    optimizer.step()
    checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "iter_num": 3,
                  "config": {"n_layer": 2, "dropout": 0.1, "bias": True, "name": "gpt", "none": None,
                             "sizes": (1, 2), "tags": ["a", "b"]},
                  "allow_pickle": ta.ones(1), "file": ta.zeros(2), "a/b": ta.ones(3), "": ta.ones(1)}
    ta.save(checkpoint, path)
    loaded = ta.load(path, map_location="cpu")
    assert loaded["iter_num"] == 3 and loaded["config"] == checkpoint["config"]
    for key in ("allow_pickle", "file", "a/b", ""):
        np.testing.assert_array_equal(host(loaded[key]), host(checkpoint[key]), err_msg=key)
    assert set(loaded["optimizer"]["state"]) == {0, 1}        # integer keys stay integers
    resumed = optim.AdamW(nn.Linear(2, 3).parameters())
    resumed.load_state_dict(loaded["optimizer"])
    assert resumed.state_dict()["param_groups"] == optimizer.state_dict()["param_groups"]
    assert np.load(path)["model/weight"].shape == (3, 2)       # any NumPy reads the arrays


def test_a_killed_save_leaves_no_orphan_for_long(tmp_path):
    path = tmp_path / "model.npz"
    orphan = tmp_path / f".model.npz.tmp-{_dead_pid()}-abc.npz"
    orphan.write_bytes(b"PK\x03\x04 a save that was killed")
    ta.save({"w": ta.ones(2)}, path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.npz"]


def _dead_pid():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def test_foreign_files_are_refused_saying_what_they_look_like(tmp_path):
    import zipfile
    torch_like = tmp_path / "model.pt"
    with zipfile.ZipFile(torch_like, "w") as archive:
        archive.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        archive.writestr("archive/data/0", b"\x00" * 16)
    with pytest.raises(ta.CheckpointError, match="looks like a PyTorch checkpoint"):
        ta.load(torch_like)
    noise = tmp_path / "noise.bin"
    noise.write_bytes(np.random.default_rng(0).bytes(64).replace(b"\x80", b"\x00"))
    with pytest.raises(ta.CheckpointError, match="starts with the bytes"):
        ta.load(noise)
    pickled = tmp_path / "legacy.pt"
    pickled.write_bytes(b"\x80\x02}q\x00.")
    with pytest.raises(ta.CheckpointError, match="pickled Python objects"):
        ta.load(pickled)


def npy_bytes(header, data):
    """An .npy member written from NumPy's published format: magic, version 1.0, header length, header, data."""
    text = repr(header).encode("latin1")
    text += b" " * (63 - (10 + len(text)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + data


def test_weight_files_are_untrusted_input_refused_before_they_are_inflated(tmp_path, monkeypatch):
    import zipfile
    # an .npy header claiming 8 TB beside 16 bytes of data: refused before NumPy allocates what it claims
    huge = tmp_path / "huge.npz"
    with zipfile.ZipFile(huge, "w") as archive:
        archive.writestr("w.npy", npy_bytes({"descr": "<f8", "fortran_order": False, "shape": (10 ** 12,)}, b"\0" * 16))
    with pytest.raises(ta.CheckpointError, match=r"huge.npz: 'w' claims shape \(1000000000000,\) of float64"):
        ta.load(huge)
    # a zip bomb: a deflated member declaring far more bytes than it holds (the limits made small for a quick test)
    monkeypatch.setattr("tinyattn.serialization.INFLATED_BYTES_LIMIT", 1 << 16)
    bomb = tmp_path / "bomb.npz"
    np.savez_compressed(bomb, w=np.zeros(1 << 20))
    with pytest.raises(ta.CheckpointError, match=r"bomb.npz: 'w.npy' inflates from .* to 8,388,736 bytes.*zip bomb"):
        ta.load(bomb)
    np.savez_compressed(bomb, w=np.arange(1 << 14, dtype=np.float64))          # compresses little: read
    np.testing.assert_array_equal(host(ta.load(bomb)["w"]), np.arange(1 << 14))
    monkeypatch.setattr("tinyattn.serialization._memory_bytes", lambda: 1000)   # more than the machine holds
    with pytest.raises(ta.CheckpointError, match="bomb.npz declares 131,2.. bytes of arrays, more than this "
                                                 "machine's memory"):
        ta.load(bomb)


@pytest.mark.parametrize("manifest", [b'{"dict": 5}', b"[]", b'{"array": "missing"}', b'{"a": 1, "b": 2}',
                                      b'{"dict": [[1]]}', b"{nope", b"[" * 100_000 + b"]" * 100_000],
                         ids=["dict-5", "list", "missing-member", "two-keys", "short-pair", "not-json", "deep"])
def test_a_damaged_manifest_is_refused_naming_the_file(tmp_path, manifest):
    import zipfile
    path = tmp_path / "m.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("w.npy", npy_bytes({"descr": "<f8", "fortran_order": False, "shape": (2,)}, b"\0" * 16))
        archive.writestr("tinyattn.json", manifest)
    with pytest.raises(ta.CheckpointError, match="m.npz: its tinyattn.json is damaged"):
        ta.load(path)


def test_checkpoint_permissions_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        ta.save({"w": ta.ones(1)}, tmp_path / "m.npz")
    finally:
        os.umask(old)
    assert (tmp_path / "m.npz").stat().st_mode & 0o777 == 0o644


# 12. empty inputs ----------------------------------------------------------------------------------------------
def test_empty_inputs_give_pytorchs_results():
    x = ta.zeros(3, 0, requires_grad=True)
    y = F.softmax(x, dim=-1)
    assert y.shape == (3, 0)
    y.sum().backward()
    q, k, v = ta.randn(1, 2, 4, 8, requires_grad=True), ta.randn(1, 2, 0, 8), ta.randn(1, 2, 0, 8)
    for attend in (F.scaled_dot_product_attention, F.flash_attention):
        out = attend(q, k, v)
        assert out.shape == (1, 2, 4, 8) and (host(out) == 0).all()
    mha = nn.Attention(8, 2)
    assert mha(ta.randn(2, 0, 8), is_causal=True).shape == (2, 0, 8)
    from tinyattn import models
    gpt = models.GPT(models.GPTConfig(vocab_size=10, block_size=8, n_layer=1, num_heads=2, d_model=8))
    assert gpt(ta.zeros(2, 0, dtype="int64")).shape == (2, 0, 10)


# 13. user errors say what was passed and what was expected -------------------------------------------------------
def test_shape_errors_name_what_was_passed():
    with pytest.raises(RuntimeError, match=r"shapes \(2, 3\) and \(4, 5\) cannot be multiplied"):
        ta.randn(2, 3) @ ta.randn(4, 5)
    with pytest.raises(RuntimeError, match="query and key need one feature size"):
        F.scaled_dot_product_attention(ta.randn(1, 4, 8), ta.randn(1, 4, 6), ta.randn(1, 4, 6))
    with pytest.raises(ValueError, match=r"expects x of shape \(\.\.\., length, d_model=8\), got \(5, 6\)"):
        nn.Attention(8, 2)(ta.randn(5, 6))


# 14. small ones ----------------------------------------------------------------------------------------------
def test_power_zero_has_a_zero_gradient_at_zero():
    x = ta.tensor([0.0, 2.0], requires_grad=True)
    (x ** 0).sum().backward()
    np.testing.assert_array_equal(host(x.grad), [0.0, 0.0])


def test_max_with_a_nan_sends_the_gradient_to_the_nan():
    x = ta.tensor([1.0, np.nan, 3.0], requires_grad=True)
    m = x.max()
    assert np.isnan(m.item())
    m.backward()
    np.testing.assert_array_equal(host(x.grad), [0.0, 1.0, 0.0])


def test_mse_loss_warns_when_shapes_broadcast():
    with pytest.warns(UserWarning, match="broadcasts"):
        F.mse_loss(ta.randn(4, 1), ta.randn(4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        F.mse_loss(ta.randn(4), ta.randn(4))


def test_unknown_device_is_refused_clearly():
    with pytest.raises(RuntimeError, match="unknown device 'tpu'"):
        ta.ones(2).to("tpu")
    with pytest.raises(RuntimeError, match="unknown device 'tpu'"):
        nn.Linear(2, 2).to("tpu")
