# %% [markdown]
# # 19 · What one Transformer block costs: parameters, multiply-adds and attention's memory, counted
#
# One Transformer block with L tokens of width D, row by row: the counts behind self-attention's O(L^2 D) per layer in
# Vaswani et al. (2017, section 4 and Table 1), which Dive into Deep Learning (d2l.ai, section "Self-Attention and
# Positional Encoding") sets against convolutions and recurrent layers:
#
# | step | parameters | multiply-adds |
# |---|---|---|
# | Q, K, V projections | 3 D^2 | 3 L D^2 |
# | scores Q K^T | 0 | L^2 D |
# | weighted sum of V | 0 | L^2 D |
# | output projection | D^2 | L D^2 |
# | feed-forward D -> 4D | 4 D^2 | 4 L D^2 |
# | feed-forward 4D -> D | 4 D^2 | 4 L D^2 |
# | **total** | **12 D^2** | **2 L^2 D + 12 L D^2** |
#
# A table is only a claim until counted: build the block (the library's post-norm encoder layer,
# `models.transformer.EncoderLayer`), read its weight matrices, and count the multiply-adds of every matrix product
# one forward pass makes. Two more claims that come with the table are checked from the same counts: the number of
# heads changes neither count, and the attention matrices' memory at some famous sizes.

# %%
import contextlib


import tinyattn as ta
import tinyattn.functional as F
from tinyattn import models, viz
from tinyattn.models.transformer import EncoderLayer
from tinyattn.memory import track_modules
from tinyattn.lesson import options, plot_path, report

args = options(__doc__)


def block(d_model, num_heads):
    ta.manual_seed(args.seed)
    config = models.TransformerConfig(src_vocab=1, tgt_vocab=1, d_model=d_model, num_heads=num_heads, dropout=0.0)
    return EncoderLayer(config)

# %% [markdown]
# ## Parameters
# The weight matrices, by the row of the table they belong to. The table leaves out biases and the two LayerNorms'
# scales and shifts: 3D + D + 4D + D = 9D of biases and 4D for the norms, 13D in all, small next to 12 D^2.

# %%
rows = {"Q, K, V projections": ["self_attn.qkv.weight"], "output projection": ["self_attn.out_proj.weight"],
        "feed-forward D -> 4D": ["ff.fc1.weight"], "feed-forward 4D -> D": ["ff.fc2.weight"]}
row_params = {"Q, K, V projections": 3, "output projection": 1, "feed-forward D -> 4D": 4, "feed-forward 4D -> D": 4}
params_match = True
for d_model in (64, 512):
    layer = block(d_model, 8)
    weights = dict(layer.named_parameters())
    print(f"D = {d_model}:")
    for row, names in rows.items():
        counted = sum(weights[n].numel() for n in names)
        print(f"  {row:22} counted {counted:9,}   formula {row_params[row]} D^2 = {row_params[row] * d_model ** 2:9,}")
        params_match &= counted == row_params[row] * d_model ** 2
    matrices = sum(w.numel() for n, w in weights.items() if n.endswith("weight") and w.ndim == 2)
    rest = layer.num_parameters() - matrices
    print(f"  weight matrices {matrices:,} = 12 D^2 = {12 * d_model ** 2:,}; biases and norms {rest:,} = 13 D = "
          f"{13 * d_model:,}")
    params_match &= matrices == 12 * d_model ** 2 and rest == 13 * d_model
assert params_match

# %% [markdown]
# ## Multiply-adds, counted as the block runs
# Every matrix product in the block happens in one of two functions: `F.linear` (the four projections and the two
# feed-forward layers) and `F.scaled_dot_product_attention` (scores and weighted sum). The counter below wraps both
# for one forward pass and adds up, from the shapes each call receives, the multiply-adds it performs: rows x in x out
# for a linear layer; for attention, per batch entry and head, L x S x d for Q K^T and as many for the weighted sum
# of V. To be sure nothing escaped it, the autograd graph of the output lists every Function the pass recorded.
# (Element-wise work, the softmax, LayerNorm, ReLU and the residual adds, is O(L D) or O(L^2) per head; the table
# leaves it out, and so does the count.)

# %%
@contextlib.contextmanager
def counting_multiply_adds():
    """Within the block, F.linear and F.scaled_dot_product_attention add their multiply-adds to the returned dict."""
    counts = {"linear": [], "attention": []}
    linear, attention = F.linear, F.scaled_dot_product_attention

    def counted_linear(x, weight, bias=None):
        rows = x.numel() // x.shape[-1]
        counts["linear"].append(rows * weight.shape[1] * weight.shape[0])          # rows x in x out
        return linear(x, weight, bias)

    def counted_attention(q, k, v, *args, **kwargs):
        pairs = q.numel() // q.shape[-1] * k.shape[-2]                            # batch x heads x L x S
        counts["attention"].append(pairs * q.shape[-1] + pairs * v.shape[-1])      # Q K^T, then weights times V
        return attention(q, k, v, *args, **kwargs)

    F.linear, F.scaled_dot_product_attention = counted_linear, counted_attention
    try:
        yield counts
    finally:
        F.linear, F.scaled_dot_product_attention = linear, attention


def functions_in_graph(output):
    seen, stack, names = set(), [output.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        names.add(node.name().replace("Backward", "").replace("Fast", "").replace("Reference", ""))
        stack.extend(parent for parent, _ in node.next_functions)
    return names


def count(d_model, num_heads, length):
    layer = block(d_model, num_heads)
    x = ta.randn(1, length, d_model, requires_grad=True)
    with counting_multiply_adds() as counts:
        out = layer(x, None)
    return counts, functions_in_graph(out)


L, D = 200, 512                                      # 200 tokens of the base Transformer's width
counts, functions = count(D, 8, L)
print("Functions in the graph:", ", ".join(sorted(functions)))
with_products = functions & {"Linear", "ScaledDotProductAttention", "MatMul", "Conv2d", "Einsum", "Bmm"}
assert with_products == {"Linear", "ScaledDotProductAttention"}, functions
qkv, out_proj, fc1, fc2 = counts["linear"]
(attention,) = counts["attention"]
table = [("Q, K, V projections", qkv, 3 * L * D ** 2, "3 L D^2"),
         ("scores and weighted sum of V", attention, 2 * L ** 2 * D, "2 L^2 D"),
         ("output projection", out_proj, L * D ** 2, "L D^2"),
         ("feed-forward D -> 4D", fc1, 4 * L * D ** 2, "4 L D^2"),
         ("feed-forward 4D -> D", fc2, 4 * L * D ** 2, "4 L D^2")]
print(f"L = {L}, D = {D}, 8 heads:")
for row, counted, formula, text in table:
    print(f"  {row:30} counted {counted:13,}   {text:8} = {formula:13,}")
total = sum(counted for _, counted, _, _ in table)
twelve, eleven = 2 * L ** 2 * D + 12 * L * D ** 2, 2 * L ** 2 * D + 11 * L * D ** 2
print(f"  {'total':30} counted {total:13,}")
print(f"  2 L^2 D + 12 L D^2 = {twelve:,}: {'equal' if total == twelve else 'different'}; a total of "
      f"2 L^2 D + 11 L D^2 = {eleven:,} would be short by {total - eleven:,}: one L D^2, the output projection's row, "
      f"the easiest to forget")
flops_match = all(counted == formula for _, counted, formula, _ in table) and total == twelve
assert flops_match

# %% [markdown]
# ## Heads change neither count
# Splitting D into h heads of D/h each: Q, K, V and the output projection stay D x D matrices, and the scores cost
# L^2 (D/h) per head, h times: L^2 D. Counted for 1 to 16 heads:

# %%
heads_rows = []
for num_heads in (1, 2, 8, 16):
    layer = block(D, num_heads)
    counts, _ = count(D, num_heads, L)
    heads_rows.append((num_heads, layer.num_parameters(), sum(counts["linear"]) + sum(counts["attention"])))
    print(f"{num_heads:2} heads: {heads_rows[-1][1]:,} parameters, {heads_rows[-1][2]:,} multiply-adds")
heads_change_nothing = len({r[1:] for r in heads_rows}) == 1
assert heads_change_nothing

# %% [markdown]
# ## Where L^2 D takes over
# The attention's 2 L^2 D against the rest's 12 L D^2: equal at L = 6 D. Below, the share of the block's multiply-adds
# spent in Q K^T and the weighted sum, counted for D = 64 at growing L.

# %%
lengths = [16, 64, 256, 1024] if args.quick else [16, 64, 256, 384, 1024, 2048]
shares = []
for length in lengths:
    counts, _ = count(64, 4, length)
    shares.append(counts["attention"][0] / (sum(counts["linear"]) + counts["attention"][0]))
    print(f"L = {length:5}: attention is {shares[-1]:.2f} of the block's multiply-adds "
          f"(formula 2L^2D / (2L^2D + 12LD^2) = {2 * length / (2 * length + 12 * 64):.2f})")
    assert abs(shares[-1] - 2 * length / (2 * length + 12 * 64)) < 1e-12
fig, ax = viz.plt.subplots(figsize=(5, 3.2))
ax.plot(lengths, shares, marker="o", label="counted")
ax.axvline(6 * 64, color="0.5", linestyle=":", label="L = 6 D")
ax.set(xscale="log", xlabel="sequence length L", ylabel="share of multiply-adds in attention", ylim=(0, 1),
       title="one block, D = 64: attention's 2 L^2 D against 12 L D^2")
ax.set_xticks(lengths, labels=[str(n) for n in lengths])
ax.minorticks_off()
ax.legend(fontsize=8)
ax.grid(alpha=0.3)
viz.save(fig, plot_path(args, "19_attention_share.png"))

# %% [markdown]
# ## The memory of the attention matrices
# Naive attention holds one L x L matrix of weights per head and layer (and keeps it for backward):
# bytes = layers x heads x L^2 x bytes per entry. First the formula against a real layer's weights, then famous
# sizes: pixels as tokens (an R x R image is R^2 tokens, so R^4 entries a matrix: why the ViT paper, Dosovitskiy et al.
# 2021, section 2, says self-attention over pixels "does not scale to realistic input sizes"); a ViT at 224 x 224
# with 16 x 16 or 14 x 14 patches (14^2 = 196 or 16^2 = 256 tokens), 48 layers of 16 heads and ViT-L's 24; and
# N = 100K tokens with 64 heads, one layer. Binary units (1 GiB = 2^30 bytes).

# %%
layer = block(64, 4)
with ta.no_grad():
    layer.self_attn(ta.randn(2, 50, 64), need_weights=True)
held = layer.self_attn.last_weights.array.nbytes
print(f"a layer's weights for 2 sequences of 50 tokens, 4 heads, float32: {held:,} bytes; formula 2 x 4 x 50^2 x 4 "
      f"= {2 * 4 * 50 ** 2 * 4:,}")
assert held == 2 * 4 * 50 ** 2 * 4


def attention_bytes(tokens, heads, layers, entry_bytes=4):
    return layers * heads * tokens ** 2 * entry_bytes


def readable(n):
    for unit, size in (("TiB", 2 ** 40), ("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n} B"


examples = [("pixels as tokens, R = 128; 48 layers x 16 heads", 128 ** 2, 16, 48, 4),
            ("ViT at 224, 16x16 patches: one matrix", 196, 1, 1, 4),
            ("  48 layers x 16 heads", 196, 16, 48, 4),
            ("  ViT-L itself: 24 layers x 16 heads", 196, 16, 24, 4),
            ("ViT at 224, 14x14 patches: one matrix", 256, 1, 1, 4),
            ("  48 layers x 16 heads", 256, 16, 48, 4),
            ("  ViT-L itself: 24 layers x 16 heads", 256, 16, 24, 4),
            ("N = 100K, 64 heads, float16", 100_000, 64, 1, 2),
            ("N = 100K, 64 heads, float32", 100_000, 64, 1, 4)]
print(f"{'example':50} {'tokens':>7} {'entries a matrix':>17} {'bytes':>12}")
for name, tokens, heads, layers, entry in examples:
    total_bytes = attention_bytes(tokens, heads, layers, entry)
    print(f"{name:50} {tokens:7,} {tokens ** 2:17,} {readable(total_bytes):>12}")
big = attention_bytes(100_000, 64, 1, 2)
print(f"N = 100K, float16: {big:,} bytes = {big / 2 ** 30:,.0f} GiB, or {big / 1e12:.2f} TB in decimal units")
flash_bytes = 100_000 * 64 * 4
print(f"flash attention keeps one log-sum-exp per query and head instead (lesson 04): {readable(flash_bytes)} for "
      f"N = 100K and 64 heads in float32")

# %% [markdown]
# ## What the block keeps for backward
# The weights above are held until backward. `ta.memory_report` reads what the block's graph keeps, Function by
# Function and module by module, here for the lesson's block (D = 512, 8 heads) at L and 2L tokens, with the
# attention the models use by default (`impl="sdpa"`: F.scaled_dot_product_attention, which keeps its weights) and
# with flash attention (lesson 04). Whatever grows as L (activations, inputs of the projections) doubles from L to
# 2L; the excess over doubling is the L^2 term: 8 x (2L)^2 - 2 x 8 x L^2 = 16 L^2 entries of weights for sdpa, none
# for flash.

# %%
def block_report(impl, length):
    ta.manual_seed(args.seed)
    config = models.TransformerConfig(src_vocab=1, tgt_vocab=1, d_model=D, num_heads=8, dropout=0.0, impl=impl)
    layer = EncoderLayer(config)
    x = ta.randn(1, length, D, requires_grad=True)
    with track_modules(layer) as modules:
        out = layer(x, None)
    return ta.memory_report(out, modules)


kept = {(impl, length): block_report(impl, length) for impl in ("sdpa", "flash") for length in (L, 2 * L)}
print(kept["sdpa", L].table(arrays=False))
for impl in ("sdpa", "flash"):
    one, two = kept[impl, L].total_bytes, kept[impl, 2 * L].total_bytes
    print(f"{impl:5}: the block keeps {readable(one)} at L = {L}, {readable(two)} at 2L; beyond doubling "
          f"{two - 2 * one:,} bytes (16 L^2 float32 entries: {16 * L ** 2 * 4:,})")
saved_bytes_sdpa, saved_bytes_flash = kept["sdpa", L].total_bytes, kept["flash", L].total_bytes
assert kept["sdpa", 2 * L].total_bytes - 2 * saved_bytes_sdpa == 16 * L ** 2 * 4
assert kept["flash", 2 * L].total_bytes == 2 * saved_bytes_flash

# %%
# The RESULT key saved_bytes_naive keeps impl="sdpa"'s old name, "naive": RESULT lines compare with earlier runs.
report(complexity_params_match=bool(params_match), complexity_flops_match=bool(flops_match),
       heads_change_neither=bool(heads_change_nothing),
       block_multiply_adds=total, attention_bytes_100k_fp16=big, saved_bytes_naive=saved_bytes_sdpa,
       saved_bytes_flash=saved_bytes_flash)
