"""The causal mask with a KV cache's offset, and the padding mask (lesson 03), against the library's and inside
attention."""
import numpy as np

import tinyattn as ta
import tinyattn.functional as F
from lessons.checking.checks import exercise
from lessons.checking.comparison import assert_close
from lessons.checking.shared import normal, padding
from lessons.checking.steps import step


@exercise("03", "the causal mask, and padding", twins=["tinyattn.functional.attention_inputs:causal_mask"], place=3)
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
            assert_close("padding_mask", learner.padding_mask(np.array(lengths), 5), padding(lengths, 5))
        with step("ragged lengths 5, 2, 3: with causal_mask & padding_mask, each padded sequence attends exactly as "
                  "itself cut to its length"):
            padded = attend(q, k, v, learner.causal_mask(5, 5) & learner.padding_mask(np.array(lengths), 5))
            for b, n in enumerate(lengths):
                alone = attend(q[b:b + 1, :, :n], k[b:b + 1, :, :n], v[b:b + 1, :, :n], is_causal=True)
                assert_close(f"sequence {b} (length {n})", padded[b:b + 1, :, :n], alone)
