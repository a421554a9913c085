"""What several checks share: the inputs they draw, and the steps of the exercises graded alike (attention and
grouped-query attention; flash attention's forward and backward)."""
import textwrap

import numpy as np

import tinyattn as ta
import tinyattn.functional as F
from lessons import mistakes
from lessons.checking.comparison import (assert_close, assert_stays_float32, compare_paths, failure, gradcheck,
                                         runs_forward_and_backward, use, wrong)
from lessons.checking.learners_file import Refused
from lessons.checking.steps import Failed, Mismatch, Run, indented, step
from lessons.checking.training import TRAINING_STEPS, train_like_the_reference
from lessons.flash_trace_compare import compare_traces, keeping_lse, last_m_and_l
from tinyattn.functional.flash_attention import ReferenceFlashAttention


def normal(*shape, seed=0, scale=1.0):
    """A float64 array of standard normal values times scale, the same for the same shape and seed."""
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape) * scale


def extreme(rows, columns):
    """Rows of values near +1000 (exp overflows even in float64), near -1000 (exp underflows to 0) and near 0."""
    return normal(rows, columns, scale=3.0) + np.resize([1000.0, 0.0, 0.0, -1000.0], rows)[:, None]


def padding(lengths, key_len):
    """(B, 1, 1, key_len): True before each sequence's length."""
    return (np.arange(key_len) < np.array(lengths)[:, None])[:, None, None, :]


def sdpa(is_causal, **options):
    return lambda q, k, v, mask=None: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal,
                                                                     **options)


def attention_grads(mask):
    """Gradients to compare: q, k, v, and a float mask's."""
    return {"q": 0, "k": 1, "v": 2, **({"mask": 3} if mask is not None and mask.dtype != bool else {})}


def check_attention(function, cases, enable_gqa, diagnose=None):
    """The steps that scaled dot-product attention's exercises share. cases: description -> (q, k, v, mask,
    is_causal); diagnose: what wrong gradients point at (lessons/mistakes.py)."""
    slot, call = "scaled_dot_product_attention", lambda causal: sdpa(causal, enable_gqa=enable_gqa)
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
                gradcheck(slot, function, call(causal), (q, k, v, mask), attention_grads(mask), diagnose)
    with step("output and every gradient equal the reference path's", cases) as each:
        for case, (q, k, v, mask, causal) in cases.items():
            with each.case(case):
                compare_paths(slot, function, call(causal), (q, k, v, mask), attention_grads(mask), diagnose)
    with step("float32 stays float32"):
        q, k, v, mask, causal = list(cases.values())[-1]
        assert_stays_float32(slot, function, call(causal), (q, k, v, mask))


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


def check_flash(function, which):
    """flash_forward and flash_backward: each leaves one half to the library, so both are graded as a whole. After a
    failure, the learner's trace of the pass `which` ("forward" or "backward") beside the library's."""
    try:
        _flash_steps(function, which)
    except Failed:
        _show_trace(function, which)
        raise
    if not all(passed for _, passed in Run.steps):            # a grade runs every step: the trace after them
        _show_trace(function, which)


def _show_trace(function, which):
    """Where the learner's loop calls trace(...) (lessons/exercises/given.py): its values beside the library's at
    the first tile where they differ, or its L after a row block's last tile (lessons/flash_trace_compare.py), with
    the rows that explain it, head 0 of each array. Nothing where the loop makes no trace call or agrees with the
    library's: an explanation of a failure, never a failure of its own."""
    try:
        difference = compare_traces(function, which, record=getattr(function, "trace_calls", None))
    except Exception:              # the learner's code fails on the trace's case: the steps have said how already
        return
    if difference is None:
        return
    print("        your trace beside the library's, at the first tile where they differ:")
    print(indented(difference["text"]))
    for line in difference["table"]:
        print(" " * 10 + line)
    if difference["name"] not in (None, "L"):                    # (the table shows both sides' L already)
        for whose, array in (("yours", difference["yours"]), ("the library's", difference["library"])):
            head = array[0, 0] if array.ndim > 2 else array
            print(f"          {difference['name']}, {whose} (head 0, shape {head.shape}):")
            print(textwrap.indent(np.array2string(head, precision=4, max_line_width=104), " " * 12))


def _output_and_lse(function, call, arrays):
    """The output of call(*arrays) with function in flash attention's slot, and the L its forward saved for
    backward (flash_trace_compare.keeping_lse)."""
    kept = []
    with use(flash_attention=keeping_lse(function, kept)):
        out = call(*(None if a is None else ta.tensor(a, requires_grad=i < 3) for i, a in enumerate(arrays)))
    return out.numpy(), kept[0]


def _forward_verdict(function, call, arrays, options):
    """None where the learner's forward gives the reference path's output and saves its L; else a Mismatch that
    says which of the two is wrong and where that points (lessons/mistakes.py)."""
    (out, lse), (expected_out, expected_lse) = (_output_and_lse(f, call, arrays)
                                                for f in (function, ReferenceFlashAttention))
    verdicts = {"output": failure(assert_close, "output", out, expected_out),
                "L": "your forward saved no L where the given backward reads it: ctx.save_for_backward(q, k, v, "
                     "out, L, mask)" if lse is None else failure(assert_close, "L", lse, expected_lse)}
    if not any(verdicts.values()):
        return None
    q, k, v, mask = arrays
    is_causal, enable_gqa, block_size = options
    m, l = last_m_and_l(F.trace_flash_attention(q, k, v, attn_mask=mask, is_causal=is_causal,
                                                enable_gqa=enable_gqa, block_size=block_size).records)
    return wrong(verdicts, mistakes.flash_forward(lse, m, l, {what for what, why in verdicts.items() if why}))


def _forward_verdicts(function, cases):
    """Each case's _forward_verdict, or the error the learner's forward raised on it."""
    verdicts = {}
    for case, (q, k, v, mask, *options) in cases.items():
        try:
            verdicts[case] = _forward_verdict(function, _flash(*options), (q, k, v, mask), options)
        except Refused:
            raise
        except Exception as error:
            verdicts[case] = error
    return verdicts


def _flash_steps(function, which):
    q, k, v = normal(2, 2, 5, 3), normal(2, 2, 7, 3, seed=1), normal(2, 2, 7, 4, seed=2)
    cases = {  # (q, k, v, mask, is_causal, enable_gqa, block_size)
        "no mask, 5 queries and 7 keys in blocks of 2": (q, k, v, None, False, False, 2),
        "is_causal, blocks of 2": (q, k, v, None, True, False, 2),
        "is_causal, 7 queries and keys, blocks of 3": (normal(2, 2, 7, 3, seed=3), k, v, None, True, False, 3),
        "padding mask, lengths 7 and 0: every key masked": (q, k, v, padding([7, 0], 7), False, False, 3),
        "4 query heads sharing 2 key/value heads, is_causal": (normal(2, 4, 5, 3, seed=4), k, v, None,
                                                                         True, True, 2),
        "a float mask (5, 7), blocks of 4": (q, k, v, normal(5, 7, seed=5), False, False, 4)}
    grad_of = {"q": 0, "k": 1, "v": 2}
    with step("your FlashAttention runs forward and backward"):
        runs_forward_and_backward("flash_attention", function, _flash(False, False, 2), (q, k, v), grad_of)
    # The forward's exercise: its output and L come first, and only a forward that gives both right is gradchecked
    # (the given backward is right; its gradients follow whatever the forward hands it).
    forward = _forward_verdicts(function, cases) if which == "forward" else {}
    if any(isinstance(verdict, Mismatch) for verdict in forward.values()):
        with step("your forward's output and L equal the reference path's (before any gradient)", cases) as each:
            for case, verdict in forward.items():
                with each.case(case):
                    if verdict is not None:
                        raise verdict
    else:
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
