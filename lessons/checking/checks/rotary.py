"""Rotary position embedding (lesson 07): the tables, the rotation against nn.RotaryEmbedding, and what makes it a
rotation by relative position."""
import numpy as np

import tinyattn as ta
from lessons.checking.checks import exercise
from lessons.checking.comparison import assert_close, forward_backward, gradcheck_along_directions_first
from lessons.checking.shared import normal
from lessons.checking.steps import Mismatch, step
from tinyattn import nn


@exercise("07", "rotary position embedding (RoPE)", place=2)
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
