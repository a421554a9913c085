"""Attention inside CNNs and Mobile-Former (models/cnn_attention.py, models/mobile_former.py): the neighbourhoods
F.unfold cuts against the windows a convolution reads, local attention against masked full attention and against a convolution, locality, attention
pooling's invariance to the order of positions, Mobile-Former equal to its CNN branch at initialisation, shapes,
float64 gradchecks of tiny instances, and float32 training that stays float32."""
import numpy as np
import pytest

import tinyattn as ta
import tinyattn.functional as F
from tinyattn import models, nn, optim
from tinyattn.models.cnn_attention import neighbourhoods
from conftest import host, randn


# -- neighbourhoods (F.unfold) ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("kernel_size", [1, 3, 5])
def test_neighbourhoods_are_the_windows_a_convolution_reads(kernel_size, stride):
    x = randn(2, 3, 7, 6, requires_grad=False)
    out = host(neighbourhoods(x, kernel_size, stride)[0])
    r = kernel_size // 2
    padded = np.pad(host(x), ((0, 0), (0, 0), (r, r), (r, r)))
    out_h, out_w = (7 - 1) // stride + 1, (6 - 1) // stride + 1
    assert out.shape == (2, 3, kernel_size ** 2, out_h, out_w)
    for y in range(out_h):
        for x_ in range(out_w):
            window = padded[:, :, y * stride:y * stride + kernel_size, x_ * stride:x_ * stride + kernel_size]
            assert np.array_equal(out[..., y, x_], window.reshape(2, 3, -1))


@pytest.mark.parametrize("stride", [1, 2])
def test_unfold_gradcheck_and_border_mask(stride):
    x = randn(1, 2, 5, 4)
    assert ta.gradcheck(lambda x: F.unfold(x, 3, padding=1, stride=stride), (x,))
    _, inside = neighbourhoods(x, 3, stride)
    inside = host(ta.Tensor(inside))                           # a raw array of the tensor's device
    assert inside.shape == (9, (5 - 1) // stride + 1, (4 - 1) // stride + 1)
    assert inside[4].all()                                     # the centre is always inside
    assert not inside[0, 0, 0] and inside[8, 0, 0]             # top-left pixel: no up-left neighbour, a down-right one


# -- local self-attention --------------------------------------------------------------------------------------

def _local(in_channels=3, out_channels=4, stride=1, heads=2):
    return models.LocalSelfAttention2d(in_channels, out_channels, 3, stride, heads).double()


@pytest.mark.parametrize("stride,size", [(1, (5, 6)), (2, (5, 6)), (2, (8, 8))])
def test_local_attention_has_the_shape_of_the_convolution_it_replaces(stride, size):
    x = randn(2, 3, *size, requires_grad=False)
    conv = nn.Conv2d(3, 4, 3, stride=stride, padding=1).double()
    assert _local(stride=stride)(x).shape == conv(x).shape


@pytest.mark.parametrize("stride", [1, 2])
def test_local_attention_gradcheck(stride):
    layer = _local(stride=stride)
    x = randn(2, 3, 5, 6)
    assert ta.gradcheck(lambda x, *ps: layer(x), (x, *layer.parameters()), full_jacobian=False)


def test_local_attention_equals_full_attention_with_a_neighbourhood_mask():
    layer = _local()
    x = randn(2, 3, 4, 5, requires_grad=False)
    b, _, h, w = x.shape
    pixels = x.permute(0, 2, 3, 1).reshape(b, h * w, 3)
    q, k, v = (t.reshape(b, h * w, 2, 2).transpose(1, 2) for t in layer.qkv(pixels).split(4, dim=-1))
    ys, xs = np.divmod(np.arange(h * w), w)
    dy, dx = ys[None] - ys[:, None], xs[None] - xs[:, None]
    near = (np.abs(dy) <= 1) & (np.abs(dx) <= 1)
    bias = host(layer.relative_bias)[:, :, 0, 0]
    mask = np.where(near[None], bias[:, np.where(near, (dy + 1) * 3 + dx + 1, 0)], -np.inf)
    full = F.scaled_dot_product_attention(q, k, v, attn_mask=ta.tensor(mask))
    full = layer.proj(full.transpose(1, 2).reshape(b, h * w, 4)).reshape(b, h, w, 4).permute(0, 3, 1, 2)
    np.testing.assert_allclose(host(layer(x)), host(full), atol=1e-12)


def test_local_attention_only_reads_its_neighbourhood_and_its_weights_sum_to_one():
    layer = _local()
    x = randn(1, 3, 6, 6, requires_grad=False)
    before = host(layer(x, need_weights=True))
    weights = host(layer.last_weights)                          # (B, heads, 9, H, W)
    np.testing.assert_allclose(weights.sum(axis=2), 1, atol=1e-12)
    assert (weights[:, :, 0, 0, :] == 0).all()                  # the top row has no neighbour above-left
    changed = host(x).copy()
    changed[0, :, 5, 5] += 10.0                                 # far from pixel (1, 1)
    after = host(layer(ta.tensor(changed)))
    np.testing.assert_array_equal(after[..., :3, :3], before[..., :3, :3])
    assert not np.allclose(after[..., 4:, 4:], before[..., 4:, 4:])


def test_nine_heads_set_by_hand_are_a_3x3_convolution_inside_the_border():
    c_in, c_out = 2, 3
    conv = nn.Conv2d(c_in, c_out, 3, padding=1).double()
    layer = models.LocalSelfAttention2d(c_in, 9 * c_in, 3, num_heads=9).double()
    qkv = np.zeros((27 * c_in, c_in))
    qkv[18 * c_in:] = np.tile(np.eye(c_in), (9, 1))
    layer.qkv.weight.array[...] = ta.tensor(qkv).array
    layer.qkv.bias.array[...] = 0
    layer.relative_bias.array[...] = ta.tensor(50 * np.eye(9)[:, :, None, None]).array
    proj = np.zeros((9 * c_in, 9 * c_in))
    proj[:c_out] = host(conv.weight).transpose(0, 2, 3, 1).reshape(c_out, -1)
    layer.proj.weight.array[...] = ta.tensor(proj).array
    layer.proj.bias.array[...] = 0
    layer.proj.bias.array[:c_out] = conv.bias.array
    x = randn(2, c_in, 6, 7, requires_grad=False)
    np.testing.assert_allclose(host(layer(x))[:, :c_out, 1:-1, 1:-1], host(conv(x))[:, :, 1:-1, 1:-1], atol=1e-12)


def test_local_attention_rejects_what_it_cannot_do():
    with pytest.raises(ValueError, match="divisible"):
        models.LocalSelfAttention2d(3, 6, 3, num_heads=4)
    with pytest.raises(ValueError, match="odd"):
        models.LocalSelfAttention2d(3, 4, 2, num_heads=2)


# -- attention pooling ----------------------------------------------------------------------------------------

def test_attention_pooling_ignores_the_order_of_positions_and_gradchecks():
    pool = models.AttentionPooling(8, num_heads=2).double()
    x = randn(2, 8, 3, 4)
    out = pool(x, need_weights=True)
    assert out.shape == (2, 8) and pool.last_weights.shape == (2, 2, 12)
    assert (host(pool.last_weights).sum(-1) < 1).all()          # the rest of the weight is on the class token
    order = np.random.default_rng(0).permutation(12)
    shuffled = ta.tensor(host(x).reshape(2, 8, 12)[:, :, order].reshape(2, 8, 3, 4))
    np.testing.assert_allclose(host(pool(shuffled)), host(out), atol=1e-12)
    assert ta.gradcheck(lambda x, *ps: pool(x), (x, *pool.parameters()), full_jacobian=False)


def test_small_cnn_pooling_option():
    x = ta.randn(3, 1, 8, 8)
    assert models.SmallCNN(models.CNNConfig(width=4, pooling="attention"))(x).shape == (3, 10)
    with pytest.raises(ValueError, match="pooling"):
        models.SmallCNN(models.CNNConfig(pooling="max"))


# -- whole models ---------------------------------------------------------------------------------------------

TINY = {
    "local-attention-cnn": lambda: models.LocalAttentionCNN(models.LocalAttentionCNNConfig(width=4, num_heads=2,
                                                                                          num_classes=3)),
    "cnn-attention-pooling": lambda: models.SmallCNN(models.CNNConfig(width=4, num_classes=3, pooling="attention")),
    "mobile-former": lambda: models.MobileFormer(models.MobileFormerConfig(width=4, num_tokens=2, token_dim=8,
                                                                           num_heads=2, num_classes=3)),
}


@pytest.mark.parametrize("name", TINY)
def test_tiny_models_train_in_float32_and_gradcheck_in_float64(name):
    model = TINY[name]()
    x, y = ta.randn(4, 1, 8, 8), ta.tensor([0, 1, 2, 1])
    assert model(x).shape == (4, 3)
    optimizer = optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(60):
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.1 * losses[0], (losses[0], losses[-1])
    for p in model.parameters():
        assert p.dtype == np.float32 and p.grad.dtype == np.float32
    model.double()
    xd = ta.tensor(host(x).astype(np.float64), requires_grad=True)
    assert ta.gradcheck(lambda x, *ps: model(x), (xd, *model.parameters()), full_jacobian=False, directions=1)


def test_mobile_former_starts_as_its_cnn_branch_and_its_bridges_count_afterwards():
    config = models.MobileFormerConfig(width=4, num_tokens=3, token_dim=8, num_heads=2)
    mobile_former = models.MobileFormer(config).double()
    cnn = models.SmallCNN(models.CNNConfig(width=4)).double()
    for mine, theirs in ((mobile_former.stem, cnn.conv1), (mobile_former.blocks[0].mobile, cnn.conv2),
                         (mobile_former.blocks[1].mobile, cnn.conv3), (mobile_former.head, cnn.head)):
        theirs.weight.array[...] = mine.weight.array
        theirs.bias.array[...] = mine.bias.array
    x = randn(2, 1, 16, 16, requires_grad=False)
    out = host(mobile_former(x, need_weights=True))
    np.testing.assert_allclose(out, host(cnn(x)), atol=1e-12)
    assert mobile_former.blocks[0].mobile_to_former.last_weights.shape == (2, 2, 3, 256)
    assert mobile_former.blocks[1].mobile_to_former.last_weights.shape == (2, 2, 3, 64)
    for block in mobile_former.blocks:                          # give the Former->Mobile values a say
        nn.init.normal_(block.former_to_mobile.key_value.weight, std=0.5)
    np.testing.assert_allclose(host(mobile_former(x, former_to_mobile=False)), host(cnn(x)), atol=1e-12)
    assert not np.allclose(host(mobile_former(x)), host(cnn(x)))
