"""Grouped-query attention (lesson 07): the steps shared with attention, on heads sharing key/value heads, and a
GPT with grouped heads trained on it."""
from lessons.checking.checks import exercise
from lessons.checking.shared import check_attention, normal, padding
from lessons.checking.steps import step
from lessons.checking.training import TRAINING_STEPS, train_like_the_reference


@exercise("07", "grouped-query attention: query heads sharing key/value heads",
          twins=["scaled_dot_product_attention"])
def grouped_query(learner):
    q, k, v = normal(2, 4, 3, 4), normal(2, 2, 5, 4, seed=1), normal(2, 2, 5, 3, seed=2)
    cases = {"4 query heads over 2 key/value heads": (q, k, v, None, False),
             "multi-query: 4 over 1, is_causal": (q, k[:, :1], v[:, :1], None, True),
             "a learned float mask per query head (4, 3, 5)": (q, k, v, normal(4, 3, 5, seed=3), False),
             "no sharing: 2 query heads over 2, is_causal": (q[:, :2], k, v, None, True),
             "padding mask (2, 1, 1, 5), lengths 5 and 2": (q, k, v, padding([5, 2], 5), False)}
    check_attention(learner.GroupedQueryAttention, cases, enable_gqa=True)
    with step(f"a GPT with 4 query heads over 2 key/value heads trains {TRAINING_STEPS} steps on yours to the "
              "reference path's loss") as notes:
        notes.append(train_like_the_reference("GPT with 4 query heads sharing 2 key/value heads",
                                              scaled_dot_product_attention=learner.GroupedQueryAttention))
