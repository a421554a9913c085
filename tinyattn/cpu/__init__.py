"""The CPU layer: everything in tinyattn that exists only to make the fast path fast on a CPU.

The fast Functions in tinyattn/functional show their formula and hand the cutting of work to this layer; their
reference twins use none of it. Nothing here changes the math: tests hold fast == reference.

Its door: the rest of tinyattn calls these names, and no other (__all__; tests/test_cpu.py holds the library to it).

Cutting work (split.py; threads.py deals it among tinyattn's own threads):
- `for_each_part`: [work(part) for part in parts], the parts dealt, or claimed as threads come free.
- `for_each_piece`: a row-wise chain of passes on cache-sized pieces of rows, shared among the threads.
- `sum_over_parts`: work(part, totals) for every part, each thread adding into totals of its own, then summed.
- `matmul`: a @ b (+ bias) with a's rows shared among the threads.
- `matmul_later`: a @ b that a helper thread writes while the backward walk goes on (read through settled()).
- `attention_parts`: attention's independent parts (batch entries or query rows, and the keys a mask lets them see).
- `attention_block`: flash attention's block size, from the head size and the BLAS's small-product kernels.
- `batch_lanes`: a batch cut into one lane per thread; lane(x) is an array's share of a lane.
- `causal_row_pieces`: a block's rows in pieces that each compute only the scores up to a causal diagonal.
- `shares_through`: every hand-off to the threads made through a wrapper, inside a block (the profiler's timing).

Array formulas (arrays.py: the same numbers as the plain forms, faster in NumPy; fit_normal_cdf.py makes the
polynomial of normal_cdf):
- `last_axis_sum`: x summed over its last axis, by BLAS (x @ ones).
- `leading_axes_sum`: x summed over every axis but the last (a bias gradient), by BLAS.
- `row_mean`: each row's mean, as a column.
- `laid_out_like`: a new array whose axes lie in memory in another's order.
- `exp_in_place`: exp, in place, by exp2 where NumPy runs that faster.
- `sigmoid`: 1 / (1 + exp(-x)) without overflow, the branch chosen by arithmetic instead of where().
- `normal_cdf`: the normal CDF from a fitted polynomial, and exp(-x^2 / 2) with it (the GELU's).
- `add_rows`: target[rows] += values with repeated rows adding up, by sorting the rows.

BLAS and thread control (tuning.py, threads.py):
- `tuned`: a class decorator: a fast Function's forward and backward run with BLAS held to one thread.
- `blas_held`: `with blas_held():` BLAS on one thread inside, given back its threads after.
- `tune_allocator`: let glibc keep freed memory for reuse, for the rest of the process (an explicit call).
- `get_num_threads`: tinyattn's thread count (ta.get_num_threads, as PyTorch's).
- `set_num_threads`: set it (ta.set_num_threads, as PyTorch's).
"""
from .arrays import (add_rows, exp_in_place, laid_out_like, last_axis_sum, leading_axes_sum, normal_cdf, row_mean,
                     sigmoid)
from .split import (attention_block, attention_parts, backward_walk, batch_lanes, causal_row_pieces, for_each_part,
                    for_each_piece, matmul, matmul_later, settled, shares_through, sum_over_parts)
from .threads import get_num_threads, set_num_threads
from .tuning import blas_held, tune_allocator, tuned

from ..tensor import install_walk_seams

__all__ = ["for_each_part", "for_each_piece", "sum_over_parts", "matmul", "matmul_later", "attention_parts",
           "attention_block", "batch_lanes", "causal_row_pieces", "shares_through",
           "last_axis_sum", "leading_axes_sum", "row_mean", "laid_out_like", "exp_in_place", "sigmoid", "normal_cdf",
           "add_rows",
           "tuned", "blas_held", "tune_allocator", "get_num_threads", "set_num_threads"]

# The backward walk's seams (the engine calls them; nothing else does): its scope lets matmul_later leave a weight's
# gradient to a helper thread, and the walk reads each gradient through settled(), which waits for one still being
# written.
install_walk_seams(backward_walk, settled)
