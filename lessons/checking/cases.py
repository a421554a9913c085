"""The thirteen checks, in the order of the lessons, and the inputs they draw."""
import functools
import textwrap

import numpy as np

import tinyattn as ta
import tinyattn.functional as F
from lessons import mistakes
from lessons.checking.comparison import (assert_close, assert_stays_float32, compare_paths, forward_backward,
                                         gradcheck, gradcheck_along_directions_first, runs_forward_and_backward)
from lessons.checking.registry import exercise
from lessons.checking.steps import Failed, Mismatch, Run, indented, step
from lessons.checking.training import TRAINING_STEPS, train_like_the_reference
from lessons.flash_trace_compare import compare_traces
from tinyattn import interpret, models, nn
from tinyattn.data.bpe import train as train_bpe
from tinyattn.data.probe_strings import probe_strings


def normal(*shape, seed=0, scale=1.0):
    """A float64 array of standard normal values times scale, the same for the same shape and seed."""
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape) * scale


def extreme(rows, columns):
    """Rows of values near +1000 (exp overflows even in float64), near -1000 (exp underflows to 0) and near 0."""
    return normal(rows, columns, scale=3.0) + np.resize([1000.0, 0.0, 0.0, -1000.0], rows)[:, None]


@exercise("02", "Bahdanau's additive attention scores, forward and backward", twins=["additive_scores"])
def additive_attention(learner):
    scores = lambda q_proj, k_proj, v: F.additive_scores(q_proj, k_proj, v)
    grad_of = {"q_proj": 0, "k_proj": 1, "v": 2}
    cases = {"B 2, Lq 3, S 4, H 5": (normal(2, 3, 5), normal(2, 4, 5, seed=1), normal(5, seed=2)),
             "a decoder step, Lq 1": (normal(3, 1, 4), normal(3, 6, 4, seed=1), normal(4, seed=2))}
    with step("your AdditiveScores runs forward and backward"):
        runs_forward_and_backward("additive_scores", learner.AdditiveScores, scores, cases["B 2, Lq 3, S 4, H 5"],
                                  grad_of)
    with step("gradcheck in float64 on q_proj, k_proj and v", cases) as each:
        for case, arrays in cases.items():
            with each.case(case):
                gradcheck("additive_scores", learner.AdditiveScores, scores, arrays, grad_of)
    with step("scores and gradients equal the reference path's", cases) as each:
        for case, arrays in cases.items():
            with each.case(case):
                compare_paths("additive_scores", learner.AdditiveScores, scores, arrays, grad_of)
    with step("ragged source lengths 6, 2 and 4: F.additive_attention's context and every gradient equal the "
              "reference path's"):
        mask = np.arange(6) < np.array([6, 2, 4])[:, None]
        context = lambda query, key, value, w_query, w_key, v: F.additive_attention(
            query, key, value, w_query, w_key, v, mask=ta.tensor(mask))[0]
        arrays = (normal(3, 2, 5), normal(3, 6, 4, seed=1), normal(3, 6, 3, seed=2), normal(7, 5, seed=3),
                  normal(7, 4, seed=4), normal(7, seed=5))
        compare_paths("additive_scores", learner.AdditiveScores, context, arrays,
                      {"query": 0, "key": 1, "value": 2, "w_query": 3, "w_key": 4, "v": 5})
    with step("float32 stays float32"):
        assert_stays_float32("additive_scores", learner.AdditiveScores, scores, cases["a decoder step, Lq 1"])
    with step(f"a Seq2SeqAttention trains {TRAINING_STEPS} steps on your scores to the reference path's loss") as notes:
        notes.append(train_like_the_reference("Seq2SeqAttention", additive_scores=learner.AdditiveScores))


@exercise("03", "softmax, forward and backward", twins=["softmax"])
def softmax_backward(learner):
    cases = {f"{shape} over dim {dim}": (shape, dim)
             for shape, dim in [((4, 7), 1), ((2, 3, 5), 0), ((2, 3, 5), 1), ((2, 3, 5), 2), ((6,), 0)]}
    with step("your Softmax runs forward and backward"):
        runs_forward_and_backward("softmax", learner.Softmax, lambda x: F.softmax(x, 1), (normal(3, 5),), {"x": 0})
    with step("gradcheck in float64", cases) as each:
        for case, (shape, dim) in cases.items():
            with each.case(case):
                gradcheck("softmax", learner.Softmax, lambda x: F.softmax(x, dim), (normal(*shape),), {"x": 0},
                          mistakes.softmax)
    with step("outputs and gradients equal the reference path's", cases) as each:
        for case, (shape, dim) in cases.items():
            with each.case(case):
                compare_paths("softmax", learner.Softmax, lambda x: F.softmax(x, dim), (normal(*shape),), {"x": 0},
                              mistakes.softmax)
    with step("rows near +1000 and near -1000 (exp overflows and underflows), a row that is -inf in part and one "
              "that is -inf everywhere: no NaN"):
        x = extreme(4, 6)
        x[1, :3] = x[2] = -np.inf
        compare_paths("softmax", learner.Softmax, lambda x: F.softmax(x, -1), (x,), {"x": 0})
    with step("float32 stays float32"):
        assert_stays_float32("softmax", learner.Softmax, lambda x: F.softmax(x, -1), (normal(3, 4),))
    with step(f"a Seq2SeqAttention (its attention weights are a softmax) trains {TRAINING_STEPS} steps on yours to "
              "the reference path's loss") as notes:
        notes.append(train_like_the_reference("Seq2SeqAttention", softmax=learner.Softmax))


def _sdpa(is_causal, **options):
    return lambda q, k, v, mask=None: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal,
                                                                     **options)


def _seeded(call, seed=0):
    """call with tinyattn's generators seeded first, every time: dropout drops the same weights on every call (for
    gradcheck) and on both paths."""
    @functools.wraps(call)                      # gradcheck names the inputs by call's argument names
    def seeded(*args):
        ta.manual_seed(seed)
        return call(*args)
    return seeded


def _attention_grads(mask):
    """Gradients to compare: q, k, v, and a float mask's."""
    return {"q": 0, "k": 1, "v": 2, **({"mask": 3} if mask is not None and mask.dtype != bool else {})}


def _check_attention(function, cases, enable_gqa, diagnose=None):
    """The steps that scaled dot-product attention's exercises share. cases: description -> (q, k, v, mask,
    is_causal); diagnose: what wrong gradients point at (lessons/mistakes.py)."""
    slot, call = "scaled_dot_product_attention", lambda causal: _sdpa(causal, enable_gqa=enable_gqa)
    with step(f"your {function.__name__} runs forward and backward"):
        q, k, v, _, _ = next(iter(cases.values()))
        try:
            runs_forward_and_backward(slot, function, call(False), (q, k, v), {"q": 0, "k": 1, "v": 2})
        except ValueError as error:                   # a product or a broadcast whose shapes do not fit
            if not enable_gqa:                        # (grouped heads: the learner's own layout, not these shapes)
                error.add_note(mistakes.attention_shapes(q, k, v))
            raise
    with step("gradcheck in float64 on q, k, v and a float mask", cases) as each:
        for case, (q, k, v, mask, causal) in cases.items():
            with each.case(case):
                gradcheck(slot, function, call(causal), (q, k, v, mask), _attention_grads(mask), diagnose)
    with step("output and every gradient equal the reference path's", cases) as each:
        for case, (q, k, v, mask, causal) in cases.items():
            with each.case(case):
                compare_paths(slot, function, call(causal), (q, k, v, mask), _attention_grads(mask), diagnose)
    with step("float32 stays float32"):
        q, k, v, mask, causal = list(cases.values())[-1]
        assert_stays_float32(slot, function, call(causal), (q, k, v, mask))


@exercise("03", "single-head attention, forward and backward", twins=["scaled_dot_product_attention"])
def attention(learner):
    q, k, v = normal(2, 2, 3, 4), normal(2, 2, 5, 4, seed=1), normal(2, 2, 5, 3, seed=2)
    no_key_for_row_1 = np.ones((3, 5), dtype=bool)
    no_key_for_row_1[1] = False
    cases = {"no mask": (q, k, v, None, False),
             "k and v (1, 2, 5, .) broadcast over q's batch": (q, k[:1], normal(1, 2, 5, 6), None, False),
             "is_causal, 3 queries and 5 keys": (q, k, v, None, True),
             "padding mask (2, 1, 1, 5), lengths 5 and 2": (q, k, v, _padding([5, 2], 5), False),
             "a query whose every key is masked": (q, k, v, no_key_for_row_1, False),
             "a learned float mask (3, 5)": (q, k, v, normal(3, 5, seed=3), False)}
    _check_attention(learner.Attention, cases, enable_gqa=False, diagnose=mistakes.attention)
    dropped = {"no mask": (q, k, v, None), "a learned float mask (3, 5)": (q, k, v, normal(3, 5, seed=3))}
    with step("dropout 0.3 (the same seed on both paths): gradcheck, output and every gradient", dropped) as each:
        call = _seeded(_sdpa(False, dropout_p=0.3))
        for case, arrays in dropped.items():
            with each.case(case):
                gradcheck("scaled_dot_product_attention", learner.Attention, call, arrays, _attention_grads(arrays[3]),
                          mistakes.attention_dropout)
                compare_paths("scaled_dot_product_attention", learner.Attention, call, arrays,
                              _attention_grads(arrays[3]), mistakes.attention_dropout)
    with step(f"a GPT trains {TRAINING_STEPS} steps on your attention to the reference path's loss") as notes:
        notes.append(train_like_the_reference("GPT", scaled_dot_product_attention=learner.Attention))


def _padding(lengths, key_len):
    """(B, 1, 1, key_len): True before each sequence's length."""
    return (np.arange(key_len) < np.array(lengths)[:, None])[:, None, None, :]


@exercise("03", "the causal mask, and padding", twins=["tinyattn.functional.attention_inputs:causal_mask"])
def causal_mask(learner):
    shapes = [(5, 5, 0), (3, 7, 0), (7, 3, 0), (3, 7, 4), (1, 6, 5)]
    with step("causal_mask(query_len, key_len, offset) equals the library's",
              [f"causal_mask{shape}" for shape in shapes]):
        for query_len, key_len, offset in shapes:
            assert_close(f"causal_mask{(query_len, key_len, offset)}", learner.causal_mask(query_len, key_len, offset),
                         F.causal_mask(query_len, key_len, np, offset))
    q, k, v = (ta.tensor(normal(3, 2, 5, 4, seed=seed)) for seed in range(3))
    attend = lambda q, k, v, mask=None, is_causal=False: F.scaled_dot_product_attention(
        q, k, v, attn_mask=None if mask is None else ta.tensor(mask), is_causal=is_causal).numpy()
    with ta.reference():
        with step("attention with your causal_mask(5, 5) is attention with is_causal=True"):
            assert_close("output", attend(q, k, v, learner.causal_mask(5, 5)), attend(q, k, v, is_causal=True))
        with step("a KV cache: the last 2 of 5 queries with causal_mask(2, 5, 3) attend as in full causal attention"):
            assert_close("output", attend(q[:, :, 3:], k, v, learner.causal_mask(2, 5, 3)),
                         attend(q, k, v, is_causal=True)[:, :, 3:])
        lengths = [5, 2, 3]
        with step("padding_mask([5, 2, 3], 5): shape (3, 1, 1, 5), True before each sequence's length"):
            assert_close("padding_mask", learner.padding_mask(np.array(lengths), 5), _padding(lengths, 5))
        with step("ragged lengths 5, 2, 3: with causal_mask & padding_mask, each padded sequence attends exactly as "
                  "itself cut to its length"):
            padded = attend(q, k, v, learner.causal_mask(5, 5) & learner.padding_mask(np.array(lengths), 5))
            for b, n in enumerate(lengths):
                alone = attend(q[b:b + 1, :, :n], k[b:b + 1, :, :n], v[b:b + 1, :, :n], is_causal=True)
                assert_close(f"sequence {b} (length {n})", padded[b:b + 1, :, :n], alone)


@exercise("04", "the online softmax", twins=["softmax"])
def online_softmax(learner):
    stream = lambda x, block_size: (x[..., j:j + block_size] for j in range(0, x.shape[-1], block_size))
    row_sums = lambda x: np.exp(x - x.max(axis=-1, keepdims=True)).sum(axis=-1, keepdims=True)
    x = normal(4, 10, scale=3.0)
    with step("running_max_and_sum over blocks of 3 columns of a (4, 10) input: m = the row max, "
              "l = sum exp(x - m)"):
        m, l = learner.running_max_and_sum(stream(x, 3))
        assert_close("m", m, x.max(axis=1, keepdims=True))
        assert_close("l", l, row_sums(x))
    sizes = (1, 3, 4, 10, 16)
    with ta.reference():
        with step("online_softmax of x (2, 3, 10) equals the reference softmax", [f"blocks of {b}" for b in sizes]):
            x = normal(2, 3, 10, scale=3.0)
            for block_size in sizes:
                assert_close(f"online_softmax, blocks of {block_size}", learner.online_softmax(x, block_size),
                             F.softmax(ta.tensor(x), -1))
        with step("rows near +1000 and near -1000, a row whose first two blocks are -inf, a row of -inf "
                  "everywhere: no NaN"):
            x = extreme(4, 10)
            x[1, :6] = x[2] = -np.inf
            assert_close("online_softmax, blocks of 3", learner.online_softmax(x, 3), F.softmax(ta.tensor(x), -1))
            m, l = learner.running_max_and_sum(stream(x, 3))
            assert_close("m", m, x.max(axis=1, keepdims=True))
            finite = [0, 1, 3]
            assert_close("l of the rows with a finite value", l[finite], row_sums(x[finite]))
            assert_close("l of the row of -inf", l[2], np.zeros(1))


def _flash(is_causal, enable_gqa, block_size):
    return lambda q, k, v, mask=None: F.flash_attention(q, k, v, attn_mask=mask, is_causal=is_causal,
                                                        enable_gqa=enable_gqa, block_size=block_size, fused=False)


def _with_block_size(function, block_size):
    """function with its blocks made block_size long, whatever the caller asks: the models call flash attention
    with the blocks it picks (cpu.attention_block: 256, or 124 at head size 64), longer than their sequences."""
    class SmallBlocks(function):
        @staticmethod
        def forward(ctx, q, k, v, mask, scale, is_causal, enable_gqa, _):
            return function.forward(ctx, q, k, v, mask, scale, is_causal, enable_gqa, block_size)
    return SmallBlocks


def _check_flash(function, which):
    """flash_forward and flash_backward: each leaves one half to the library, so both are graded as a whole. After a
    failure, the learner's trace of the pass `which` ("forward" or "backward") beside the library's."""
    try:
        _flash_steps(function)
    except Failed:
        _show_trace(function, which)
        raise
    if not all(passed for _, passed in Run.steps):            # a grade runs every step: the trace after them
        _show_trace(function, which)


def _show_trace(function, which):
    """Where the learner's loop calls trace(...) (lessons/exercises/given.py): its values beside the library's at
    the first tile where they differ (lessons/flash_trace_compare.py), head 0 of each array. Nothing where the loop
    makes no trace call or agrees with the library's: an explanation of a failure, never a failure of its own."""
    try:
        difference = compare_traces(function, which, record=getattr(function, "trace_calls", None))
    except Exception:              # the learner's code fails on the trace's case: the steps have said how already
        return
    if difference is None:
        return
    print("        your trace beside the library's, at the first tile where they differ:")
    print(indented(difference["text"]))
    if difference["name"] is not None:
        for whose, array in (("yours", difference["yours"]), ("the library's", difference["library"])):
            head = array[0, 0] if array.ndim > 2 else array
            print(f"          {difference['name']}, {whose} (head 0, shape {head.shape}):")
            print(textwrap.indent(np.array2string(head, precision=4, max_line_width=104), " " * 12))


def _flash_steps(function):
    q, k, v = normal(2, 2, 5, 3), normal(2, 2, 7, 3, seed=1), normal(2, 2, 7, 4, seed=2)
    cases = {  # (q, k, v, mask, is_causal, enable_gqa, block_size)
        "no mask, 5 queries and 7 keys in blocks of 2": (q, k, v, None, False, False, 2),
        "is_causal, blocks of 2": (q, k, v, None, True, False, 2),
        "is_causal, 7 queries and keys, blocks of 3": (normal(2, 2, 7, 3, seed=3), k, v, None, True, False, 3),
        "padding mask, lengths 7 and 0: every key masked": (q, k, v, _padding([7, 0], 7), False, False, 3),
        "4 query heads sharing 2 key/value heads, is_causal": (normal(2, 4, 5, 3, seed=4), k, v, None,
                                                                         True, True, 2),
        "a float mask (5, 7), blocks of 4": (q, k, v, normal(5, 7, seed=5), False, False, 4)}
    grad_of = {"q": 0, "k": 1, "v": 2}
    with step("your FlashAttention runs forward and backward"):
        runs_forward_and_backward("flash_attention", function, _flash(False, False, 2), (q, k, v), grad_of)
    with step("gradcheck in float64 on q, k, v", cases) as each:
        for case, (q, k, v, mask, *options) in cases.items():
            with each.case(case):
                gradcheck("flash_attention", function, _flash(*options), (q, k, v, mask), grad_of,
                          mistakes.attention_pattern)
    with step("output and dq, dk, dv equal the reference path's", cases) as each:
        for case, (q, k, v, mask, *options) in cases.items():
            with each.case(case):
                compare_paths("flash_attention", function, _flash(*options), (q, k, v, mask), grad_of,
                              mistakes.attention_pattern)
    with step("float32 stays float32"):
        q, k, v, mask, *options = cases["is_causal, blocks of 2"]
        assert_stays_float32("flash_attention", function, _flash(*options), (q, k, v, mask))
    with step(f"a GPT with impl='flash' trains {TRAINING_STEPS} steps on yours (blocks of 5, ragged) to the "
              "reference path's loss") as notes:
        notes.append(train_like_the_reference("GPT with impl='flash'", flash_attention=_with_block_size(function, 5)))


@exercise("04", "flash attention's forward", given=["FlashAttention.backward"])
def flash_forward(learner):
    _check_flash(learner.FlashAttention, "forward")


@exercise("04", "flash attention's backward", given=["FlashAttention.forward"])
def flash_backward(learner):
    _check_flash(learner.FlashAttention, "backward")


@exercise("05", "LayerNorm, forward and backward", twins=["layer_norm"])
def layer_norm_backward(learner):
    norm = lambda shape: lambda x, weight=None, bias=None: F.layer_norm(x, shape, weight, bias)
    cases = {"rows of 4 with weight and bias": (norm(4), normal(3, 4), normal(4, seed=1),
                                                          normal(4, seed=2)),
             "normalized over the last two dims (3, 4)": (norm((3, 4)), normal(2, 3, 4),
                                                                    normal(3, 4, seed=1), normal(3, 4, seed=2)),
             "no weight and no bias": (norm(5), normal(2, 3, 5)),
             "rows of equal values (variance 0)": (norm(4), np.ones((2, 4)), normal(4, seed=1), normal(4, seed=2))}
    grads = lambda arrays: {name: i for i, name in enumerate(("x", "weight", "bias")[:len(arrays)])}
    with step("your LayerNorm runs forward and backward"):
        call, *arrays = cases["rows of 4 with weight and bias"]
        runs_forward_and_backward("layer_norm", learner.LayerNorm, call, arrays, grads(arrays))
    with step("gradcheck in float64 on x, weight and bias", cases) as each:
        for case, (call, *arrays) in cases.items():
            with each.case(case):
                gradcheck("layer_norm", learner.LayerNorm, call, arrays, grads(arrays))
    with step("output and gradients equal the reference path's", cases) as each:
        for case, (call, *arrays) in cases.items():
            with each.case(case):
                compare_paths("layer_norm", learner.LayerNorm, call, arrays, grads(arrays))
    with step("float32 stays float32"):
        call, *arrays = cases["rows of 4 with weight and bias"]
        assert_stays_float32("layer_norm", learner.LayerNorm, call, arrays)
    with step(f"a GPT trains {TRAINING_STEPS} steps on your LayerNorm to the reference path's loss") as notes:
        notes.append(train_like_the_reference("GPT", layer_norm=learner.LayerNorm))


@exercise("07", "grouped-query attention: query heads sharing key/value heads",
          twins=["scaled_dot_product_attention"])
def grouped_query(learner):
    q, k, v = normal(2, 4, 3, 4), normal(2, 2, 5, 4, seed=1), normal(2, 2, 5, 3, seed=2)
    cases = {"4 query heads over 2 key/value heads": (q, k, v, None, False),
             "multi-query: 4 over 1, is_causal": (q, k[:, :1], v[:, :1], None, True),
             "a learned float mask per query head (4, 3, 5)": (q, k, v, normal(4, 3, 5, seed=3), False),
             "no sharing: 2 query heads over 2, is_causal": (q[:, :2], k, v, None, True),
             "padding mask (2, 1, 1, 5), lengths 5 and 2": (q, k, v, _padding([5, 2], 5), False)}
    _check_attention(learner.GroupedQueryAttention, cases, enable_gqa=True)
    with step(f"a GPT with 4 query heads over 2 key/value heads trains {TRAINING_STEPS} steps on yours to the "
              "reference path's loss") as notes:
        notes.append(train_like_the_reference("GPT with 4 query heads sharing 2 key/value heads",
                                              scaled_dot_product_attention=learner.GroupedQueryAttention))


@exercise("07", "rotary position embedding (RoPE)")
def rotary(learner):
    tables = lambda length, dim, offset=0: tuple(ta.tensor(t) for t in learner.rotary_tables(length, dim, offset))
    with step("rotary_tables(6, 8, offset=3): nn.RotaryEmbedding's cos and sin for positions 3 to 8"):
        module = nn.RotaryEmbedding(8, max_len=32)
        cos, sin = learner.rotary_tables(6, 8, 3)
        assert_close("cos", cos, module.cos.numpy()[3:9])
        assert_close("sin", sin, module.sin.numpy()[3:9])
    with step("your Rotate runs forward and backward"):
        forward_backward(lambda x: learner.Rotate.apply(x, *tables(6, 8)), (normal(2, 6, 8),), {"x": 0},
                         expected_shape=(2, 6, 8))
    with step("gradcheck in float64 on x (2, 3, 5, 8)"):
        cos, sin = tables(5, 8)
        gradcheck_along_directions_first(lambda x: learner.Rotate.apply(x, cos, sin),
                                         lambda: (ta.tensor(normal(2, 3, 5, 8), requires_grad=True),))
    cases = {"x (2, 3, 6, 8)": (8, 0), "x (2, 3, 6, 8) at offset 5": (8, 5), "head_dim 4 at offset 2": (4, 2)}
    with step("equals nn.RotaryEmbedding", cases):
        for case, (dim, offset) in cases.items():
            x = ta.tensor(normal(2, 3, 6, dim))
            assert_close(case, learner.Rotate.apply(x, *tables(6, dim, offset)),
                         nn.RotaryEmbedding(dim, max_len=32)(x, offset))
    with step("a rotation: every pair keeps its length"):
        x = normal(10, 8)
        y = learner.Rotate.apply(ta.tensor(x), *tables(10, 8)).numpy()
        assert_close("|pair| after", np.hypot(y[:, :4], y[:, 4:]), np.hypot(x[:, :4], x[:, 4:]))
    with step("relative positions: q at m . k at n depends on the positions only through m - n "
              "(m - n = 2 at m = 2, 7 and 13)"):
        cos, sin = tables(16, 8)
        rotated = lambda x: learner.Rotate.apply(ta.tensor(np.repeat(x[None], 16, axis=0)), cos, sin).numpy()
        q, k = rotated(normal(8)), rotated(normal(8, seed=1))
        dots = [float(q[m] @ k[m - 2]) for m in (2, 7, 13)]
        assert_close("q_m . k_(m-2) for m = 7 and 13", np.array(dots[1:]), np.array(dots[:1] * 2))
    with step("float32 stays float32"):
        x = ta.tensor(normal(2, 6, 8).astype(np.float32), requires_grad=True)
        y = learner.Rotate.apply(x, *(t.float() for t in tables(6, 8)))
        if y.dtype != np.float32:
            raise Mismatch(f"float32 input and tables gave a {y.dtype} output")


@exercise("08", "cross-entropy with label smoothing, forward and backward", twins=["cross_entropy"])
def label_smoothing(learner):
    target = np.array([0, 3, -100, 2, 4])                     # row 2 is ignored (ignore_index -100)

    def loss(reduction, eps, target=target):
        return lambda logits: F.cross_entropy(logits, ta.tensor(target), reduction=reduction, label_smoothing=eps)
    logits = normal(5, 6)
    cases = {f"{reduction}, label smoothing {eps}": (reduction, eps)
             for reduction in ("mean", "sum", "none") for eps in (0.0, 0.1, 0.3)}
    with step("your CrossEntropy runs forward and backward"):
        runs_forward_and_backward("cross_entropy", learner.CrossEntropy, loss("mean", 0.1), (logits,), {"logits": 0})
    with step("gradcheck in float64, with a row that ignore_index leaves out", cases) as each:
        for case, options in cases.items():
            with each.case(case):
                gradcheck("cross_entropy", learner.CrossEntropy, loss(*options), (logits,), {"logits": 0})
    with step("loss and gradient equal the reference path's", cases) as each:
        for case, options in cases.items():
            with each.case(case):
                compare_paths("cross_entropy", learner.CrossEntropy, loss(*options), (logits,), {"logits": 0})
    with step("rows of logits near +1000 and near -1000, and a batch whose every row is ignored (mean 0, "
              "gradient 0)"):
        compare_paths("cross_entropy", learner.CrossEntropy, loss("mean", 0.1), (extreme(5, 6),), {"logits": 0})
        compare_paths("cross_entropy", learner.CrossEntropy, loss("mean", 0.1, np.full(5, -100)), (logits,),
                      {"logits": 0}, "every row ignored")
    with step("float32 stays float32"):
        assert_stays_float32("cross_entropy", learner.CrossEntropy, loss("mean", 0.1), (logits,))
    with step(f"a GPT trains {TRAINING_STEPS} steps on your loss to the reference path's") as notes:
        notes.append(train_like_the_reference("GPT", cross_entropy=learner.CrossEntropy))


def _causal_weights(layers, batch, heads, length, seed):
    """Random causal attention weights, rows summing to 1: a list over layers of (B, H, T, T)."""
    scores = np.where(np.tri(length, dtype=bool), normal(layers, batch, heads, length, length, seed=seed, scale=2.0),
                      -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return list(weights / weights.sum(axis=-1, keepdims=True))


def _repeated(batch, period, seed):
    """(B, 2 * period) token ids: period distinct random tokens of 50, repeated once."""
    rng = np.random.default_rng(seed)
    return np.tile(np.stack([rng.permutation(50)[:period] for _ in range(batch)]), 2)


@exercise("20", "the induction score from recorded attention weights",
          twins=["tinyattn.interpret.head_scores:induction_score"])
def induction_score(learner):
    period = 5
    tokens = _repeated(2, period, seed=0)
    one_head = lambda target: np.stack([np.eye(2 * period)[[target(i) if i >= period else i for i in
                                                            range(2 * period)]]] * 2)[:, None]        # (B, 1, T, T)
    induction, previous = one_head(lambda i: i - period + 1), one_head(lambda i: i - 1)
    with step(f"a random sequence of {period} tokens repeated once: a head that attends to the token after the "
              "first copy scores 1, one that attends to the previous token 0"):
        assert_close("induction_score([[induction, previous]])", learner.induction_score(
            [np.concatenate([induction, previous], axis=1)], tokens), np.array([[1.0, 0.0]]))
    cases = {"a sequence of 5 distinct tokens repeated once": _repeated(2, 5, seed=1),
             "tokens 0 to 3 (many repeats, several copies)": np.random.default_rng(2).integers(0, 4, (3, 10)),
             "no token repeated in the first sequence": np.stack([np.arange(8), np.arange(8) % 3])}
    with step("induction_targets(tokens): True at [b, i, j + 1] for every j < i with the same token", cases) as each:
        for case, ids in cases.items():
            with each.case(case):
                expected = np.zeros(ids.shape + ids.shape[1:], dtype=bool)
                for b, i, j in np.ndindex(expected.shape):
                    expected[b, i, j] = j >= 1 and j - 1 < i and ids[b, j - 1] == ids[b, i]
                assert_close(f"induction_targets, {case}", learner.induction_targets(ids), expected)
    with step("induction_score equals tinyattn.interpret.induction_score on random causal weights of 2 layers, "
              "3 heads", cases) as each:
        for seed, (case, ids) in enumerate(cases.items()):
            with each.case(case):
                weights = _causal_weights(2, ids.shape[0], 3, ids.shape[1], seed)
                assert_close(f"induction_score, {case}", learner.induction_score(weights, ids),
                             interpret.induction_score(weights, ids))
    with step("on the weights of a 2-layer attention-only GPT recorded with interpret.record, on 4 random sequences "
              "of 7 tokens repeated once"):
        ta.manual_seed(0)
        model = models.GPT(models.GPTConfig(vocab_size=50, block_size=16, n_layer=2, num_heads=4, d_model=32,
                                            mlp="none")).double().eval()
        ids = _repeated(4, 7, seed=3)
        with ta.no_grad(), interpret.record(model) as cache:
            model(ta.tensor(ids))
        weights = [w.numpy() for w in cache.attention.values()]
        assert_close("induction_score", learner.induction_score(weights, ids), interpret.induction_score(weights, ids))


SPECIAL = ("<|endoftext|>",)


@functools.lru_cache(maxsize=None)
def _bpe_reference():
    """The library's byte-level BPE with 500 merges learned on 1,000 probe strings of another seed (every category
    gets merges of its own), and the 1,000 probe strings (category, text) it is checked on."""
    training = [text for _, text in probe_strings(1000, seed=1, special_tokens=SPECIAL)]
    return train_bpe(training, 256 + len(SPECIAL) + 500, special_tokens=SPECIAL), probe_strings(1000, seed=0,
                                                                                                 special_tokens=SPECIAL)


def _ids(returned, count):
    """The learner's encode_batch's answer as lists of ints, or a Mismatch saying what it is instead."""
    if not isinstance(returned, list) or len(returned) != count:
        raise Mismatch(f"encode_batch returned {type(returned).__name__} {str(returned)[:60]}; it must be a list of "
                       f"{count} arrays of ids, one per text")
    bad = next((i for i, ids in enumerate(returned) if not (isinstance(ids, np.ndarray) and ids.ndim == 1 and
                                                            ids.dtype.kind in "iu")), None)
    if bad is not None:
        raise Mismatch(f"encode_batch's entry {bad} is {str(returned[bad])[:60]}, not a 1-D array of integer ids")
    return [ids.tolist() for ids in returned]


def _shown_ids(ids, tokenizer, start, most=24):
    """ids from position start, with their tokens, at most `most` of them."""
    tail = ids[start:start + most]
    tokens = [tokenizer.id_to_token(i) or "?" for i in tail]
    more = f" ... ({len(ids) - start - most} more)" if len(ids) > start + most else ""
    return f"{len(ids)} ids; from position {start} on: {tail}{more} = tokens {tokens}"


@exercise("21", "byte-level BPE: the merge step and encoding by merge rank",
          twins=["tinyattn.data.bpe:ByteLevelBPE", "tinyattn.data.bpe:train"])
def bpe(learner):
    tokenizer, strings = _bpe_reference()
    encode = lambda texts: _ids(learner.encode_batch(texts, tokenizer.vocab, tokenizer.merges, list(SPECIAL)),
                                len(texts))
    with step("your merge and encode_piece run: the given encode_batch gives ids for 'hello world'"):
        encode(["hello world"])
    with step(f"ids equal the library's ByteLevelBPE's ({len(tokenizer.merges)} merges) on the {len(strings):,} "
              "probe strings of tinyattn.data.probe_strings"):
        yours, theirs = encode([text for _, text in strings]), [tokenizer.encode(text).ids for _, text in strings]
        differ = [i for i, (a, b) in enumerate(zip(yours, theirs)) if a != b]
        if differ:
            i = differ[0]
            start = next((j for j, (a, b) in enumerate(zip(yours[i], theirs[i])) if a != b),
                         min(len(yours[i]), len(theirs[i])))
            category, text = strings[i]
            raise Mismatch(f"ids differ from the library's on {len(differ)} of {len(strings):,} strings; the first is "
                           f"string {i} ({category}): {text[:80]!r}{'...' if len(text) > 80 else ''}\n"
                           f"  yours: {_shown_ids(yours[i], tokenizer, start)}\n"
                           f"  the library's: {_shown_ids(theirs[i], tokenizer, start)}")
    cases = {"'a a a' with ('a', 'a'): occurrences never overlap": (["a", "a", "a"], ("a", "a"), ["aa", "a"]),
             "'a b a b' with ('a', 'b'): every occurrence": (["a", "b", "a", "b"], ("a", "b"), ["ab", "ab"]),
             "the pair at the start and at the end": (["Ġ", "t", "x", "Ġ", "t"], ("Ġ", "t"), ["Ġt", "x", "Ġt"]),
             "no occurrence (the pair the other way round)": (["b", "a"], ("a", "b"), ["b", "a"]),
             "one symbol": (["a"], ("a", "a"), ["a"]),
             "no symbols": ([], ("a", "b"), [])}
    with step("merge(symbols, pair) on its edge cases", cases) as each:
        for case, (symbols, pair, expected) in cases.items():
            with each.case(case):
                mine = learner.merge(symbols, pair)
                if mine != expected:
                    raise Mismatch(f"merge({symbols}, {pair}) returned {mine}; it must be {expected}")
