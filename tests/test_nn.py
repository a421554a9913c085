"""Modules, layers, recurrent cells, optimisers and checkpoints."""
import numpy as np
import pytest

import tinyattn as ta
import tinyattn.functional as F
from tinyattn import nn, optim
from conftest import host, randn


def sig(x):
    return 1 / (1 + np.exp(-x))


# -- Module mechanics ---------------------------------------------------------------------------------
class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(3, 4)
        self.blocks = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
        self.scale = nn.Parameter(ta.ones(1))
        self.register_buffer("steps", ta.zeros(1))
        self.register_buffer("cache", ta.zeros(2), persistent=False)
        self.note = "plain attribute"

    def forward(self, x):
        x = self.encoder(x)
        for block in self.blocks:
            x = block(x).relu()
        return x * self.scale


def test_module_registers_parameters_buffers_and_children():
    m = Tiny()
    names = [n for n, _ in m.named_parameters()]
    assert names == ["scale", "encoder.weight", "encoder.bias", "blocks.0.weight", "blocks.0.bias",
                     "blocks.1.weight", "blocks.1.bias"]
    assert m.num_parameters() == 1 + 16 + 20 + 20
    # PyTorch's order: a module's own parameters, its own buffers, then its children; "cache" is not persistent.
    assert list(m.state_dict()) == ["scale", "steps"] + names[1:]
    assert len(list(m.children())) == 2 and m.note == "plain attribute"
    m.eval()
    assert not m.blocks[1].training
    m.train()
    assert m.blocks[1].training
    assert "(encoder): Linear(in_features=3, out_features=4, bias=True)" in repr(m)


def test_zero_grad_and_tied_weights_listed_once():
    m = Tiny()
    m(ta.randn(2, 3)).sum().backward()
    assert all(p.grad is not None for p in m.parameters())
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())
    m.blocks[1].weight = m.blocks[0].weight                     # tie
    assert m.num_parameters() == 1 + 16 + 20 + 4                # block 1 adds only its bias


def test_module_to_double_casts_parameters_and_buffers():
    m = Tiny().double()
    assert all(p.dtype == np.float64 for p in m.parameters()) and m.steps.dtype == np.float64
    assert m(ta.randn(2, 3, dtype="float64")).dtype == np.float64


def test_super_init_is_required():
    class Broken(nn.Module):
        def __init__(self):
            self.layer = nn.Linear(2, 2)
    with pytest.raises(AttributeError, match="super"):
        Broken()


def test_load_state_dict_names_every_problem():
    m = Tiny()
    state = m.state_dict()
    other = Tiny()
    other.load_state_dict(state)
    np.testing.assert_array_equal(host(other.encoder.weight), host(m.encoder.weight))
    bad = dict(state)
    del bad["scale"]
    bad["extra.weight"] = ta.zeros(2)
    bad["encoder.weight"] = ta.zeros(5, 3)
    with pytest.raises(RuntimeError) as error:
        other.load_state_dict(bad)
    message = str(error.value)
    assert "missing keys: scale" in message and "unexpected keys: extra.weight" in message
    assert "encoder.weight: checkpoint (5, 3) vs model (4, 3)" in message
    del bad["encoder.weight"]
    missing, unexpected = other.load_state_dict(bad, strict=False)
    assert missing == ["scale", "encoder.weight"] and unexpected == ["extra.weight"]


# -- layers: gradcheck and definitions -------------------------------------------------------------
LAYERS = {
    "linear": (lambda: nn.Linear(4, 3), (2, 5, 4)),
    "layernorm": (lambda: nn.LayerNorm(4), (2, 5, 4)),
    "rmsnorm": (lambda: nn.RMSNorm(4, eps=1e-6), (2, 5, 4)),
    "mlp": (lambda: nn.MLP(4), (2, 3, 4)),
    "swiglu": (lambda: nn.SwiGLU(6), (2, 3, 6)),
    "moe": (lambda: nn.MoE(4, num_experts=3, top_k=2, hidden=8), (2, 3, 4)),
    "conv2d": (lambda: nn.Conv2d(2, 3, 3, stride=2, padding=1), (2, 2, 5, 5)),
    "patch": (lambda: nn.PatchEmbed(4, 2, 2, 5), (2, 2, 4, 4)),
    "rnncell": (lambda: nn.RNNCell(4, 3), (2, 4)),
    "grucell": (lambda: nn.GRUCell(4, 3), (2, 4)),
    "lstmcell": (lambda: nn.LSTMCell(4, 3), (2, 4)),
    "gru": (lambda: nn.GRU(4, 3, num_layers=2, batch_first=True, bidirectional=True), (2, 3, 4)),
    "lstm": (lambda: nn.LSTM(4, 3, batch_first=True), (2, 3, 4)),
    "rnn": (lambda: nn.RNN(4, 3), (3, 2, 4)),
}


def _first(out):
    while isinstance(out, tuple):
        out = out[0]
    return out


@pytest.mark.parametrize("name", LAYERS)
def test_layer_gradcheck_float64(name):
    make, shape = LAYERS[name]
    layer = make().double()
    x = randn(*shape)
    params = list(layer.parameters())
    assert ta.gradcheck(lambda x, *ps: _first(layer(x)), (x, *params), full_jacobian=False)


def test_layer_shapes_and_init_bounds():
    lin = nn.Linear(16, 8)
    assert lin.weight.shape == (8, 16) and np.abs(host(lin.weight)).max() <= 0.25
    assert lin.weight.dtype == np.float32
    emb = nn.Embedding(10, 4, padding_idx=0)
    assert (host(emb.weight)[0] == 0).all() and emb(ta.tensor([[1, 2]])).shape == (1, 2, 4)
    gru = nn.GRU(5, 7, num_layers=2, bidirectional=True)
    assert gru.weight_ih_l0.shape == (21, 5) and gru.weight_ih_l1_reverse.shape == (21, 14)
    assert nn.LSTMCell(5, 7).weight_hh.shape == (28, 7)
    assert nn.SwiGLU(6).w1.weight.shape == (16, 6)


def test_gru_and_lstm_cells_follow_pytorch_equations():
    gru, lstm = nn.GRUCell(3, 2).double(), nn.LSTMCell(3, 2).double()
    x, h, c = randn(4, 3), randn(4, 2, seed=1), randn(4, 2, seed=2)
    W = {n: host(p) for n, p in gru.named_parameters()}
    gi = host(x) @ W["weight_ih"].T + W["bias_ih"]
    gh = host(h) @ W["weight_hh"].T + W["bias_hh"]
    r, z = sig(gi[:, :2] + gh[:, :2]), sig(gi[:, 2:4] + gh[:, 2:4])
    n = np.tanh(gi[:, 4:] + r * gh[:, 4:])
    np.testing.assert_allclose(host(gru(x, h)), (1 - z) * n + z * host(h), rtol=1e-12)
    W = {n: host(p) for n, p in lstm.named_parameters()}
    gates = host(x) @ W["weight_ih"].T + W["bias_ih"] + host(h) @ W["weight_hh"].T + W["bias_hh"]
    i, f, g, o = sig(gates[:, :2]), sig(gates[:, 2:4]), np.tanh(gates[:, 4:6]), sig(gates[:, 6:])
    c_next = f * host(c) + i * g
    h_next, c_out = lstm(x, (h, c))
    np.testing.assert_allclose(host(c_out), c_next, rtol=1e-12)
    np.testing.assert_allclose(host(h_next), o * np.tanh(c_next), rtol=1e-12)
    assert gru(x[0]).shape == (2,)                              # unbatched input, as PyTorch


def test_sequence_gru_equals_stepping_the_cell():
    seq = nn.GRU(3, 4, batch_first=True).double()
    cell = nn.GRUCell(3, 4).double()
    cell.load_state_dict({k.replace("_l0", ""): v for k, v in seq.state_dict().items()})
    x = randn(2, 5, 3)
    out, h_n = seq(x)
    h = None
    for t in range(5):
        h = cell(x[:, t], h)
        np.testing.assert_allclose(host(out[:, t]), host(h), rtol=1e-12)
    np.testing.assert_allclose(host(h_n[0]), host(h), rtol=1e-12)
    rev = nn.GRU(3, 4, batch_first=True, bidirectional=True).double()
    out, h_n = rev(x)
    assert out.shape == (2, 5, 8) and h_n.shape == (2, 2, 4)
    np.testing.assert_allclose(host(out[:, 0, 4:]), host(h_n[1]), rtol=1e-12)   # reverse ends at t = 0


@pytest.mark.parametrize("kind, batch_first", [("GRU", True), ("LSTM", False)])
def test_packed_padded_batch_equals_each_sequence_alone(kind, batch_first):
    """pack_padded_sequence: every sequence of a padded batch gives what it gives alone, in both directions, and
    h_n is each sequence's state at its own last step; pad_packed_sequence zeros the padding."""
    layer = getattr(nn, kind)(3, 4, num_layers=2, batch_first=batch_first, bidirectional=True).double()
    lengths = [5, 2, 4]
    x = randn(3, 5, 3)
    padded = x if batch_first else x.transpose(0, 1)
    out, h_n = layer(nn.utils.rnn.pack_padded_sequence(padded, ta.tensor(lengths), batch_first=batch_first,
                                                       enforce_sorted=False))
    out, got_lengths = nn.utils.rnn.pad_packed_sequence(out, batch_first=True)
    h_n = h_n[0] if kind == "LSTM" else h_n
    assert host(got_lengths).tolist() == lengths and out.shape == (3, 5, 8)
    for b, n in enumerate(lengths):
        alone = x[b:b + 1, :n] if batch_first else x[b:b + 1, :n].transpose(0, 1)
        out_alone, h_alone = layer(alone)
        out_alone = out_alone if batch_first else out_alone.transpose(0, 1)
        h_alone = h_alone[0] if kind == "LSTM" else h_alone
        np.testing.assert_allclose(host(out[b, :n]), host(out_alone[0]), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(host(h_n[:, b]), host(h_alone[:, 0]), rtol=1e-12, atol=1e-14)
        assert (host(out[b, n:]) == 0).all()
    with pytest.raises(ValueError, match="sorted longest first"):
        nn.utils.rnn.pack_padded_sequence(x, ta.tensor(lengths), batch_first=True)
    with pytest.raises(ValueError, match="one length in 1..5"):
        nn.utils.rnn.pack_padded_sequence(x, ta.tensor([5, 0, 3]), batch_first=True, enforce_sorted=False)


def test_conv2d_matches_direct_loops():
    conv = nn.Conv2d(2, 3, (3, 2), stride=(2, 1), padding=1).double()
    x = randn(2, 2, 5, 4)
    w, b, xp = host(conv.weight), host(conv.bias), np.pad(host(x), ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = host(conv(x))
    expected = np.zeros_like(out)
    for y in range(out.shape[2]):
        for z in range(out.shape[3]):
            window = xp[:, :, 2 * y:2 * y + 3, z:z + 2]
            expected[:, :, y, z] = np.einsum("bcij,ocij->bo", window, w) + b
    np.testing.assert_allclose(out, expected, rtol=1e-12)


def test_patch_embed_equals_conv_with_kernel_equal_stride():
    patch = nn.PatchEmbed(img_size=8, patch_size=4, in_chans=3, embed_dim=5).double()
    conv = nn.Conv2d(3, 5, 4, stride=4).double()
    conv.weight.array = patch.proj.weight.array.reshape(5, 3, 4, 4)
    conv.bias.array = patch.proj.bias.array
    images = randn(2, 3, 8, 8)
    via_conv = conv(images).flatten(2).transpose(1, 2)          # (B, D, 2, 2) -> (B, 4, D)
    np.testing.assert_allclose(host(patch(images)), host(via_conv), rtol=1e-12)


def test_moe_equals_per_token_reference_and_balances():
    moe = nn.MoE(4, num_experts=3, top_k=2, hidden=6).double()
    x = randn(2, 5, 4)
    out = host(moe(x))
    tokens = host(x).reshape(-1, 4)
    logits = tokens @ host(moe.router.weight).T
    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    expected = np.zeros_like(tokens)
    for t, row in enumerate(tokens):
        top = np.argsort(-probs[t])[:2]
        gates = probs[t, top] / probs[t, top].sum()
        for gate, e in zip(gates, top):
            expected[t] += gate * host(moe.experts[e](ta.tensor(row[None])))[0]
    np.testing.assert_allclose(out.reshape(-1, 4), expected, rtol=1e-10)
    chosen = np.argsort(-probs, axis=-1)[:, :2].ravel()
    share = np.bincount(chosen, minlength=3) / chosen.size
    np.testing.assert_allclose(moe.aux_loss.item(), 3 * (share * probs.mean(0)).sum(), rtol=1e-10)
    with pytest.raises(ValueError, match="top_k"):
        nn.MoE(4, num_experts=2, top_k=3)


# -- optimisers --------------------------------------------------------------------------------------
def _param(values):
    p = nn.Parameter(ta.tensor(np.array(values, dtype=np.float64)))
    return p


def test_sgd_momentum_and_weight_decay_by_hand():
    p = _param([1.0, -2.0])
    opt = optim.SGD([p], lr=0.1, momentum=0.9, weight_decay=0.01)
    expected, buf = np.array([1.0, -2.0]), None
    for step in range(3):
        grad = np.array([0.5, 1.5]) * (step + 1)
        p.grad = ta.tensor(grad)
        opt.step()
        g = grad + 0.01 * expected
        buf = g if buf is None else 0.9 * buf + g
        expected = expected - 0.1 * buf
        np.testing.assert_allclose(host(p), expected, rtol=1e-12)


@pytest.mark.parametrize("cls,decoupled", [(optim.Adam, False), (optim.AdamW, True)])
def test_adam_and_adamw_by_hand(cls, decoupled):
    p = _param([0.5, -1.0, 2.0])
    opt = cls([p], lr=0.01, betas=(0.8, 0.9), eps=1e-8, weight_decay=0.1)
    w, m, v = np.array([0.5, -1.0, 2.0]), 0, 0
    for t in range(1, 4):
        grad = np.array([0.1, -0.2, 0.3]) * t
        p.grad = ta.tensor(grad)
        opt.step()
        if decoupled:
            w = w * (1 - 0.01 * 0.1)
        else:
            grad = grad + 0.1 * w
        m = 0.8 * m + 0.2 * grad
        v = 0.9 * v + 0.1 * grad ** 2
        w = w - 0.01 * (m / (1 - 0.8 ** t)) / (np.sqrt(v / (1 - 0.9 ** t)) + 1e-8)
        np.testing.assert_allclose(host(p), w, rtol=1e-10)


@pytest.mark.parametrize("cls,options", [(optim.AdamW, {}), (optim.Adam, {"weight_decay": 0.1, "amsgrad": True})])
def test_adam_updates_small_parameters_together_to_the_same_bits(cls, options, monkeypatch):
    """Biases and norms' weights are updated as one flat array (fewer NumPy calls), a larger weight on its own:
    every parameter and every moment comes out bit for bit as when each is updated on its own, over steps where one
    parameter has no gradient (its step count falls behind, so it goes in a batch of its own)."""
    from tinyattn.optim import adam

    def run(small):
        monkeypatch.setattr(adam, "SMALL_PARAMETER", small)
        ta.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 700), nn.LayerNorm(700), nn.GELU(), nn.Linear(700, 3))  # 5600, 2100
        opt = cls(model.parameters(), lr=0.01, **options)
        x = ta.randn(16, 8)
        for step in range(3):
            opt.zero_grad()
            (model(x) ** 2).mean().backward()
            if step == 1:
                model[1].bias.grad = None
            opt.step()
        return [host(p) for p in model.parameters()] + [host(a) for state in opt.state.values()
                                                          for a in state.values() if hasattr(a, "shape")]
    together, alone = run(adam.SMALL_PARAMETER), run(0)
    assert len(together) == len(alone) > 6
    for a, b in zip(together, alone):
        np.testing.assert_array_equal(a, b)


def test_clip_grad_norm_and_schedule():
    a, b = _param([0.0, 0.0]), _param([0.0])
    a.grad, b.grad = ta.tensor(np.array([3.0, 0.0])), ta.tensor(np.array([4.0]))
    norm = optim.clip_grad_norm_([a, b], max_norm=1.0)
    assert abs(norm.item() - 5.0) < 1e-12
    np.testing.assert_allclose(host(a.grad), [0.6, 0.0], rtol=1e-5)
    optim.clip_grad_norm_([a, b], max_norm=10.0)                # under the limit: unchanged
    np.testing.assert_allclose(host(b.grad), [0.8], rtol=1e-5)
    opt = optim.SGD([a], lr=1.0)
    sched = optim.LambdaLR(opt, optim.warmup_cosine(warmup_steps=4, total_steps=14, min_ratio=0.1))
    lrs = []
    for _ in range(15):
        lrs.append(sched.get_last_lr()[0])
        sched.step()
    np.testing.assert_allclose(lrs[:4], [0.25, 0.5, 0.75, 1.0])
    np.testing.assert_allclose([lrs[9], lrs[14]], [0.55, 0.1])


def test_optimizer_param_groups():
    a, b = _param([1.0]), _param([1.0])
    opt = optim.AdamW([{"params": [a]}, {"params": [b], "weight_decay": 0.0}], lr=0.1, weight_decay=0.5)
    a.grad, b.grad = ta.tensor(np.zeros(1)), ta.tensor(np.zeros(1))
    opt.step()
    assert host(a)[0] == pytest.approx(0.95) and host(b)[0] == 1.0


# -- learning ----------------------------------------------------------------------------------------
def test_tiny_mlp_overfits_a_batch():
    ta.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 4))
    x, y = ta.randn(16, 8), ta.randint(0, 4, (16,))
    opt = optim.Adam(model.parameters(), lr=0.01)
    first = None
    for _ in range(150):
        loss = F.cross_entropy(model(x), y)
        first = first or loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.1 * first


def test_tiny_gru_overfits_a_batch():
    ta.manual_seed(0)
    gru, head = nn.GRU(3, 16, batch_first=True), nn.Linear(16, 2)
    x, y = ta.randn(8, 6, 3), ta.randint(0, 2, (8,))
    opt = optim.Adam(list(gru.parameters()) + list(head.parameters()), lr=0.02)
    first = None
    for _ in range(120):
        out, h = gru(x)
        loss = F.cross_entropy(head(h[0]), y)
        first = first or loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.1 * first


# -- checkpoints -------------------------------------------------------------------------------------
def test_checkpoint_round_trip(tmp_path):
    m = Tiny()
    path = tmp_path / "model.npz"
    ta.save(m.state_dict(), path)
    other = Tiny()
    other.load_state_dict(ta.load(path))
    for (name, a), (_, b) in zip(m.state_dict().items(), other.state_dict().items()):
        np.testing.assert_array_equal(host(a), host(b), err_msg=name)
    assert [p.name for p in tmp_path.iterdir()] == ["model.npz"]   # no temporary file left behind


def test_truncated_checkpoint_is_refused(tmp_path):
    path = tmp_path / "model.npz"
    ta.save(Tiny().state_dict(), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ta.CheckpointError, match="truncated"):
        ta.load(path)


def test_pickled_payload_is_refused_not_executed(tmp_path):
    path = tmp_path / "evil.npz"
    np.savez(path, payload=np.array([{"run": "code"}], dtype=object))
    with pytest.raises(ta.CheckpointError, match="pickled"):
        ta.load(path)


def test_crash_during_save_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "model.npz"
    ta.save({"w": ta.ones(2)}, path)

    def crash_half_way(file, arrays, structure):
        file.write(b"PK\x03\x04 half an archive")
        raise OSError("disk full")
    monkeypatch.setattr("tinyattn.serialization._write_archive", crash_half_way)
    with pytest.raises(OSError, match="disk full"):
        ta.save({"w": ta.zeros(2)}, path)
    monkeypatch.undo()
    np.testing.assert_array_equal(host(ta.load(path)["w"]), [1.0, 1.0])
    assert [p.name for p in tmp_path.iterdir()] == ["model.npz"]   # the temporary file is gone too


def test_save_refuses_values_it_cannot_write_without_pickle(tmp_path):
    with pytest.raises(TypeError, match="'bad/set'.*set"):
        ta.save({"w": ta.ones(2), "bad": {"set": {1, 2}}}, tmp_path / "m.npz")
    with pytest.raises(TypeError, match="'objects'.*Python objects"):
        ta.save({"objects": np.array([{"a": 1}], dtype=object)}, tmp_path / "m.npz")
    assert list(tmp_path.iterdir()) == []


def test_shape_mismatch_on_load_is_named(tmp_path):
    path = tmp_path / "m.npz"
    ta.save({"encoder.weight": ta.zeros(2, 2)}, path)
    with pytest.raises(RuntimeError, match=r"encoder.weight: checkpoint \(2, 2\) vs model \(4, 3\)"):
        Tiny().load_state_dict(ta.load(path), strict=False)


def test_fused_gru_cell_equals_the_composed_equations_and_gradchecks():
    x_proj, h, w, b = randn(4, 9), randn(4, 3, seed=1), randn(9, 3, seed=2), randn(9, seed=3)
    x_r, x_z, x_n = x_proj.chunk(3, dim=-1)
    h_r, h_z, h_n = F.linear(h, w, b).chunk(3, dim=-1)
    r, z = ta.sigmoid(x_r + h_r), ta.sigmoid(x_z + h_z)
    n = ta.tanh(x_n + r * h_n)
    np.testing.assert_allclose(host(F.gru_cell(x_proj, h, w, b)), host((1 - z) * n + z * h), rtol=1e-12)
    assert ta.gradcheck(F.gru_cell, (x_proj, h, w, b))
    assert ta.gradcheck(lambda x, h, w: F.gru_cell(x, h, w), (x_proj, h, w))
