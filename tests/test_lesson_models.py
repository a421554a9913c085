"""What lessons 11-14 build on: the ViT's six position schemes, soft distillation, the GPT's sinusoidal and absent
positions, and the figures they draw."""
import numpy as np
import pytest

import tinyattn as ta
import tinyattn.functional as F
from tinyattn import models, nn
from conftest import host

SCHEMES = ["none", "learned", "sincos", "sincos2d", "learned2d", "relative"]


def tiny_vit(position, **overrides):
    config = dict(image_size=8, patch_size=2, d_model=16, depth=2, num_heads=2, num_classes=3, pool="mean",
                  position=position)
    return models.ViT(models.ViTConfig(**{**config, **overrides}))


@pytest.mark.parametrize("position", SCHEMES)
def test_vit_position_schemes_train_and_gradcheck(position):
    model = tiny_vit(position)
    x = ta.randn(2, 1, 8, 8)
    assert model(x).shape == (2, 3)
    F.cross_entropy(model(x), ta.tensor([0, 2])).backward()
    assert all(p.grad is not None for p in model.parameters())
    model.double()
    xd = ta.tensor(host(x).astype(np.float64), requires_grad=True)
    assert ta.gradcheck(lambda x, *ps: model(x), (xd, *model.parameters()), full_jacobian=False, directions=1)


def test_position_parameters_count_as_the_formulas_say():
    grid, d, heads, depth = 4, 16, 2, 2
    bare = tiny_vit("none").num_parameters()
    extra = {p: tiny_vit(p).num_parameters() - bare for p in SCHEMES}
    assert extra == {"none": 0, "learned": (1 + grid * grid) * d, "sincos": 0, "sincos2d": 0,
                     "learned2d": 2 * grid * (d // 2), "relative": depth * heads * (2 * grid - 1) ** 2}


def test_without_positions_a_mean_pooled_vit_sees_a_bag_of_patches():
    x = host(ta.randn(2, 1, 8, 8))
    patches = x.reshape(2, 1, 4, 2, 4, 2)                             # a 4x4 grid of 2x2 patches
    order = np.random.default_rng(0).permutation(16)
    shuffled = patches.transpose(0, 1, 2, 4, 3, 5).reshape(2, 1, 16, 2, 2)[:, :, order]
    shuffled = shuffled.reshape(2, 1, 4, 4, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(2, 1, 8, 8)
    for position, invariant in (("none", True), ("learned2d", False), ("relative", False)):
        model = tiny_vit(position)
        if position == "relative":                                     # its bias starts near 0: make it matter
            for block in model.relative_bias:
                block.bias.table.array[...] = ta.randn(*block.bias.table.shape).array
        same = np.allclose(host(model(ta.tensor(x))), host(model(ta.tensor(shuffled))), atol=1e-5)
        assert same == invariant, position


def test_position_tables_have_their_structure():
    grid, d = 4, 16
    table = host(tiny_vit("sincos").position_table())[0]
    np.testing.assert_allclose(table[0], 0)                               # the class token: no position
    np.testing.assert_allclose(table[1:], host(nn.sinusoidal_table(grid * grid, d)), atol=1e-6)
    table = host(tiny_vit("learned2d").position_table())[0, 1:].reshape(grid, grid, d)
    np.testing.assert_allclose(table[:, :, :d // 2], table[:, :1, :d // 2].repeat(grid, 1))   # a row shares its half
    np.testing.assert_allclose(table[:, :, d // 2:], table[:1, :, d // 2:].repeat(grid, 0))   # a column shares its
    assert tiny_vit("none").position_table() is None and tiny_vit("relative").position_table() is None


def test_relative_bias_depends_on_the_offset_only_and_spares_the_prefix():
    vit = tiny_vit("relative", distillation=True)
    rb = vit.relative_bias[0]
    rb.bias.table.array[...] = ta.randn(*rb.bias.table.shape).array
    bias = host(rb())                                                      # (H, 2 + 16, 2 + 16)
    assert bias.shape == (2, 18, 18)
    np.testing.assert_allclose(bias[:, :2], 0)
    np.testing.assert_allclose(bias[:, :, :2], 0)
    patches = bias[:, 2:, 2:]
    ys, xs = np.divmod(np.arange(16), 4)
    for a, b, c, e in ((0, 1, 5, 6), (0, 4, 10, 14), (3, 0, 15, 12)):     # pairs with the same (dy, dx)
        assert (ys[b] - ys[a], xs[b] - xs[a]) == (ys[e] - ys[c], xs[e] - xs[c])
        np.testing.assert_allclose(patches[:, a, b], patches[:, c, e])
    table = nn.Parameter(ta.tensor(host(rb.bias.table).astype(np.float64)))   # where a parameter lives, a Parameter
    rb.double()

    def biased(table):
        rb.bias.table = table
        return rb()
    assert ta.gradcheck(biased, (table,), full_jacobian=False, directions=2)


def test_interpolated_positions_run_a_vit_at_a_new_size():
    vit = tiny_vit("learned")
    vit.pos_embed = nn.interpolate_pos_embed(vit.pos_embed, 4, 6, num_prefix_tokens=1)
    assert vit(ta.randn(2, 1, 12, 12)).shape == (2, 3)


def test_soft_distillation_loss_is_kl_at_temperature():
    rng = np.random.default_rng(0)
    cls, dist, teacher = (rng.standard_normal((5, 4)) for _ in range(3))
    labels = np.array([0, 3, 1, 2, 0])
    t, alpha = 2.5, 0.3
    args = [ta.tensor(a, requires_grad=True) for a in (cls, dist)]
    loss = models.deit_soft_distillation_loss(*args, ta.tensor(labels), ta.tensor(teacher), temperature=t,
                                              alpha=alpha)

    def log_softmax(z):
        z = z - z.max(-1, keepdims=True)
        return z - np.log(np.exp(z).sum(-1, keepdims=True))
    p, log_q = np.exp(log_softmax(teacher / t)), log_softmax(dist / t)
    kl = (p * (np.log(p) - log_q)).sum(-1).mean()
    ce = -log_softmax(cls)[np.arange(5), labels].mean()
    assert loss.item() == pytest.approx((1 - alpha) * ce + alpha * t * t * kl, rel=1e-10)
    assert ta.gradcheck(lambda c, d: models.deit_soft_distillation_loss(c, d, ta.tensor(labels), ta.tensor(teacher),
                                                                        temperature=t, alpha=alpha), args)
    same = ta.tensor(teacher, requires_grad=True)                          # a student equal to its teacher: KL = 0
    models.deit_soft_distillation_loss(same, same, ta.tensor(labels), ta.tensor(teacher), alpha=1.0).backward()
    np.testing.assert_allclose(host(same.grad), 0, atol=1e-12)


def tiny_gpt(position, **overrides):
    config = dict(vocab_size=11, block_size=16, n_layer=2, num_heads=2, d_model=16, position=position)
    return models.GPT(models.GPTConfig(**{**config, **overrides}))


@pytest.mark.parametrize("position", ["sinusoidal", "none"])
def test_gpt_sinusoidal_and_no_positions_generate_with_and_without_cache(position):
    model = tiny_gpt(position)
    model.eval()
    prompt = ta.randint(0, 11, (2, 3))
    cached = model.generate(prompt, 8, temperature=0, use_cache=True)
    uncached = model.generate(prompt, 8, temperature=0, use_cache=False)
    np.testing.assert_array_equal(host(cached), host(uncached))
    assert model.num_parameters() == tiny_gpt("learned").num_parameters() - 16 * 16


def test_gpt_without_positions_reads_its_prefix_as_a_set():
    ids = np.array([[3, 1, 4, 1, 5, 9, 2]])
    swapped = ids[:, [2, 0, 5, 1, 3, 4, 6]]                                 # the same prefix in another order
    for position, invariant in (("none", True), ("sinusoidal", False), ("rope", False)):
        model = tiny_gpt(position, n_layer=1)                                # one layer: the last token sees a set
        last = [host(model(ta.tensor(x)))[0, -1] for x in (ids, swapped)]
        assert np.allclose(*last, atol=1e-5) == invariant, position
