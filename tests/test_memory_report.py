"""ta.memory_report (memory.py): what every Function keeps for backward, counted exactly."""
import gc
import tracemalloc
import weakref

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.functional as F
from tinyattn import models
from tinyattn.memory import OUTSIDE, track_modules

B, H, L, E = 2, 3, 40, 8


def qkv(device=None):
    rng = np.random.default_rng(0)
    return [ta.tensor(rng.standard_normal((B, H, L, E)).astype("float32"), requires_grad=True, device=device)
            for _ in range(3)]


def saved(report, op):
    return {row["name"]: row for row in report.arrays(op)}


def test_naive_attention_keeps_its_weights_b_h_l_squared():
    with ta.reference():
        out = F.scaled_dot_product_attention(*qkv(), is_causal=True)
    report = ta.memory_report(out)
    rows = saved(report, "ReferenceScaledDotProductAttention")
    assert set(rows) == {"q", "k", "v", "p"}
    assert rows["p"]["shape"] == (B, H, L, L) and rows["p"]["bytes"] == B * H * L * L * 4
    assert all(rows[name]["leaf"] for name in "qkv") and not rows["p"]["leaf"]
    assert report.total_bytes == B * H * L * L * 4                            # q, k, v are leaves: alive anyway
    assert report.leaf_bytes == 3 * B * H * L * E * 4


def test_fast_sdpa_attention_keeps_its_weights_and_output():
    out = F.scaled_dot_product_attention(*qkv(), is_causal=True)
    rows = saved(ta.memory_report(out), "FastScaledDotProductAttention")
    held = [row for row in rows.values() if row["shape"][-2:] == (L, L)]
    assert sum(row["bytes"] for row in held) == B * H * L * L * 4, rows
    assert rows["out"]["bytes"] == B * H * L * E * 4


def test_flash_attention_keeps_one_log_sum_exp_per_query_and_q_k_v_and_the_output():
    with ta.reference():
        out = F.flash_attention(*qkv(), is_causal=True, block_size=16)
    report = ta.memory_report(out)
    rows = saved(report, "ReferenceFlashAttention")
    assert set(rows) == {"q", "k", "v", "out", "L"}                        # mask None holds nothing
    assert rows["L"]["shape"] == (B, H, L, 1) and rows["L"]["bytes"] == B * H * L * 8      # float64 on purpose
    assert rows["out"]["bytes"] == B * H * L * E * 4
    assert all(rows[name]["leaf"] and rows[name]["bytes"] == B * H * L * E * 4 for name in "qkv")
    assert report.total_bytes == B * H * L * 8 + B * H * L * E * 4
    assert not any(row["shape"][-2:] == (L, L) for row in report.rows)


def test_fast_flash_attention_keeps_nothing_of_size_l_squared():
    report = ta.memory_report(F.flash_attention(*qkv(), is_causal=True, block_size=16))
    rows = saved(report, "FastFlashAttention")
    assert {"q", "k", "v", "out"} <= set(rows)
    # q itself, no scaled copy of it: backward makes [scale Q, -m] again from q and the rows' shifts m.
    assert all(rows[name]["leaf"] for name in "qkv") and rows["minus_m"]["shape"] == (B, H, L, 1)
    assert not any(row["shape"][-1] == E + 1 for row in report.rows)
    assert not any(row["shape"][-2:] == (L, L) for row in report.rows)
    assert report.total_bytes < B * H * L * L * 4 / 2


def test_a_gpt_step_on_the_reference_path_the_report_accounts_for_what_the_forward_allocated():
    config = models.GPTConfig(vocab_size=50, block_size=64, n_layer=2, num_heads=2, d_model=64, impl="reference")
    model = models.GPT(config)
    ids = np.random.default_rng(0).integers(0, 50, (4, 64))
    with ta.reference():
        model(ids, ids)                                # warm: first calls build caches of their own
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            logits, loss = model(ids, ids)
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
    report = ta.memory_report(loss)
    # What forward left allocated, less the logits and the loss that the caller holds, is what the ctxs keep: the
    # graph holds no input beside them (it did once: a third more, the inputs of every call).
    assert abs((grown - loss.array.nbytes - logits.array.nbytes) - report.total_bytes) <= 0.1 * report.total_bytes, \
        (grown, report.total_bytes)
    loss.backward()
    freed = ta.memory_report(loss)
    assert report.freed == 0 and freed.rows == [] and freed.freed >= len({row["call"] for row in report.rows})


def test_shared_memory_is_counted_once_and_names_where():
    a = ta.randn(50, 60, requires_grad=True)
    h = a.exp()                                        # Exp keeps its output: h's memory
    y = (h * h).sum() + h[:, :10].sin().sum()          # Mul keeps h twice; Sin keeps a view into h
    report = ta.memory_report(y)
    (exp_row,) = report.arrays("Exp")
    assert exp_row["bytes"] == 50 * 60 * 4 and exp_row["counted_at"] is None
    others = report.arrays("Mul") + report.arrays("Sin")
    assert len(others) == 3 and all(row["bytes"] == 0 for row in others)
    assert {row["counted_at"] for row in others} == {f"Exp.{exp_row['name']}"}
    assert others[-1]["shape"] == (50, 10)
    assert report.total_bytes == 50 * 60 * 4           # h * h and sin's output are no one's to keep: freed


def test_an_intermediate_that_no_backward_saved_is_freed_once_forward_is_done_with_it():
    x = ta.randn(50, 60, requires_grad=True)
    h = x.exp()
    shifted = h + 1.0                                  # Add keeps nothing, nor does the Sum that reads it
    gone, kept = weakref.ref(shifted), weakref.ref(h)
    y = shifted.sum()
    del shifted, h
    gc.collect()
    assert gone() is None and kept() is None           # h's array lives on in Exp's ctx, not the tensor
    assert y.grad_fn.inputs[0].shape == (50, 60) and y.grad_fn.inputs[0].dtype == np.float32
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp(x.numpy()), rtol=1e-6)


def test_ctx_attributes_are_walked_into_tuples_lists_and_dicts():
    class Keeper(ta.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.parts = (x * 2, [x * 3, 7], {"four": x * 4})
            ctx.plain = x * 5
            return x.copy()

        @staticmethod
        def backward(ctx, grad):
            return grad

    x = ta.randn(10, 4, requires_grad=True)
    report = ta.memory_report(Keeper.apply(x))
    names = {row["name"]: row["bytes"] for row in report.arrays("Keeper")}
    assert names == {"parts[0]": 160, "parts[1][0]": 160, "parts[2]['four']": 160, "plain": 160}
    assert report.total_bytes == 640


def test_modules_are_named_where_tracked():
    config = models.GPTConfig(vocab_size=20, block_size=16, n_layer=1, num_heads=2, d_model=16, impl="flash")
    model = models.GPT(config)
    ids = np.random.default_rng(1).integers(0, 20, (2, 16))
    with track_modules(model) as modules:
        loss = model(ids, ids)[1]
    report = ta.memory_report(loss, modules)
    attention = [row for row in report.rows if "FlashAttention" in row["op"]]
    assert attention and {row["module"] for row in attention} == {"blocks.0.attn"}
    assert {row["module"] for row in report.rows if row["op"] == "FastLinear"} >= {"blocks.0.attn.qkv", "head"}
    assert OUTSIDE not in report.per_module()
    assert "blocks.0.attn" in report.table()
    assert set(ta.memory_report(loss).per_module()) == {OUTSIDE}


def test_a_tensor_without_a_graph_is_refused():
    with pytest.raises(ValueError, match="grad_fn"):
        ta.memory_report(ta.randn(3, requires_grad=True))


@pytest.mark.gpu
@pytest.mark.parametrize("fused", [False, True])
def test_the_report_counts_cupy_arrays_on_flash_paths(fused):
    report = ta.memory_report(F.flash_attention(*qkv(device="cuda"), is_causal=True, block_size=16, fused=fused))
    assert report.rows and not any(row["shape"][-2:] == (L, L) for row in report.rows)
    assert report.total_bytes >= B * H * L * E * 4                      # the output at least


@pytest.mark.gpu
def test_the_report_counts_cupy_weights_on_the_sdpa_path():
    report = ta.memory_report(F.scaled_dot_product_attention(*qkv(device="cuda"), is_causal=True))
    assert sum(row["bytes"] for row in report.rows if row["shape"][-1] != E) >= B * H * L * (L + 1) // 2 * 4


def test_each_kept_array_says_what_backward_reads_it_for():
    x = ta.randn(4, 6, 8, requires_grad=True)
    out = F.gelu(F.layer_norm(x, (8,), weight=ta.ones(8, requires_grad=True)))
    with ta.reference():
        out = F.scaled_dot_product_attention(out, out, out, is_causal=True)
    report = ta.memory_report(out.sum())
    why = {(row["op"], row["name"]): row["why"] for row in report.arrays()}
    assert "dx" in why["FastLayerNorm", "normed"] and "dx" in why["FastLayerNorm", "rstd"]
    assert "derivative" in why["FastGELU", "slope"]
    assert "dS" in why["ReferenceScaledDotProductAttention", "p"]
    table = report.table()
    assert all(phrase in table for phrase in why.values())
    assert "counted apart and in no total" in table                # why the per-op saved column leaves weights out


def test_every_name_a_backward_keeps_has_a_reason():
    """Every name a Function of the library unpacks its saved arrays into has its phrase, in the Function's own WHY
    or in memory.WHY (a Function added without one fails here, naming it)."""
    import importlib
    import pkgutil

    from tinyattn.memory import WHY, _saved_names, why
    for module in pkgutil.walk_packages(ta.__path__, "tinyattn."):         # every Function the library defines
        importlib.import_module(module.name)

    def functions(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from functions(sub)
    library = [f for f in functions(ta.Function) if f.__module__.startswith("tinyattn.")]  # not a test's, a learner's
    missing = sorted({(f.__name__, name) for f in library for name in _saved_names(f)
                      if name and why(f, name.lstrip("*")) == "(no reason recorded)"})
    assert missing == []

    class FastNewThing(ta.Function):
        WHY = {"kept": "its own phrase"}
    assert why(FastNewThing, "nothing_known") == "(no reason recorded)"
    assert why(FastNewThing, "kept[0]") == "its own phrase"
    assert why(type("Sub", (FastNewThing,), {}), "kept") == "its own phrase"      # a subclass (a fast twin) has it
    assert why(FastNewThing, "x") == WHY["x"]                                     # a name it does not give: memory's


def test_views_of_one_buffer_say_so_and_are_counted_once():
    qkv = ta.randn(B, L, 3 * H * E, requires_grad=True) * 1.0      # not a leaf: the graph alone keeps it
    q, k, v = (part.reshape(B, L, H, E).transpose(1, 2) for part in qkv.split(H * E, dim=-1))
    report = ta.memory_report(F.scaled_dot_product_attention(q, k, v, is_causal=True).sum())
    rows = saved(report, "FastScaledDotProductAttention")
    buffer = f"a view of a {(B, L, 3 * H * E)} buffer that k, v view too: its "
    assert rows["q"]["bytes"] == B * L * 3 * H * E * 4 and buffer in report._sharing(rows["q"])
    for name in "kv":
        assert rows[name]["bytes"] == 0
        assert report._sharing(rows[name]) == (f"(a view of the {(B, L, 3 * H * E)} buffer counted at "
                                               "FastScaledDotProductAttention.q)")
    lone = ta.memory_report(F.linear(ta.randn(2, 5, 4, requires_grad=True) * 1.0, ta.randn(3, 4)))
    (rows,) = lone.arrays("FastLinear")[:1]
    assert rows["name"] == "rows" and rows["buffer"] is not None       # the input reshaped: a view of the same size
    assert lone._sharing(rows) == "" and rows["bytes"] == 2 * 5 * 4 * 4  # its own memory: nothing to say
