"""The CPU layer: everything in tinyattn that exists only to make the fast path fast on a CPU.

The fast Functions in tinyattn/functional show their formula and hand the cutting of work to this layer; their
reference twins use none of it. Nothing here changes the math: tests hold fast == reference.

- threads.py: tinyattn's own threads (set_num_threads as in PyTorch), share(), which deals work among them, and
  Later jobs, which a helper runs while the calling thread goes on.
- split.py: how a fast Function's work is cut: a product's rows, rows in cache-sized pieces, attention's parts,
  flash attention's blocks, a batch's lanes; a product left to a helper (matmul_later), read through settled().
- tuning.py: BLAS held to one thread while tinyattn's fast code runs (given back afterwards); which kernels the BLAS
  runs; tune_allocator(), an explicit call that lets glibc keep freed memory for reuse.
- arrays.py: array formulas arranged for NumPy's speed (row sums by BLAS, selections without where(), embedding
  gradients by sorting, the normal CDF from a fitted polynomial, new arrays laid out as another is, exp by
  exp2 where that is faster);
  fit_normal_cdf.py makes that polynomial.
"""
from .arrays import (add_rows, exp_in_place, laid_out_like, last_axis_sum, leading_axes_sum, normal_cdf, row_mean,
                     sigmoid)
from .split import (attention_block, attention_parts, backward_walk, batch_lanes, causal_row_pieces, for_each_part,
                    for_each_piece, matmul, matmul_later, settled, shares_through, sum_over_parts)
from .threads import get_num_threads, set_num_threads
from .tuning import blas_held, tune_allocator, tuned

from ..tensor import install_walk_seams

# The backward walk's seams: its scope lets matmul_later leave a weight's gradient to a helper thread, and the walk
# reads each gradient through settled(), which waits for one still being written.
install_walk_seams(backward_walk, settled)
