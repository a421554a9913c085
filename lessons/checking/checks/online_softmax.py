"""The online softmax (lesson 04): the running max and sum over blocks, and the softmax they give, masked rows
too."""
import numpy as np

import tinyattn as ta
import tinyattn.functional as F
from lessons.checking.checks import exercise
from lessons.checking.comparison import assert_close
from lessons.checking.shared import extreme, normal
from lessons.checking.steps import step


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
