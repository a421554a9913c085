"""Primitive Functions, forward beside backward, and the PyTorch-named functions and Tensor methods built on them.

Every ``forward``/``backward`` works on raw backend arrays and takes its array module from them (``xp_of``), so one
implementation serves NumPy and CuPy. elementwise.py (arithmetic, one-input math), matmul.py, reductions.py,
shapes.py, indexing.py, sorting.py, einsum.py, in_place.py (x += y, x[i] = v, x.add_(y), ...); conversions.py (to(),
moves between devices and dtypes); logic.py (no gradient: isnan, isclose, equal, logical_*, bitwise_*); dims.py and
promotion.py hold PyTorch's rules for dim arguments and result dtypes (promotion.py also Cast, the differentiable
dtype change, and cast, which makes an operand a tensor of the dtype chosen); methods.py attaches everything to
Tensor.
"""
from .conversions import ToDevice, to, to_args
from .dims import dim_index, dim_indices
from .einsum import Einsum, einsum
from .elementwise import (Add, Clamp, Clone, Cos, Div, Exp, Log, LogSigmoid, Maximum, Minimum, Mul, Neg, Pow,
                          PowScalar, Relu, Rsqrt, Sigmoid, Sin, Sqrt, Sub, Tanh, abs, add, binary, clamp, clone, cos,
                          div, exp, floor_divide, log, logsigmoid, maximum, minimum, mul, neg, pow, relu, remainder,
                          rsqrt, sigmoid, sigmoid_array, sin, sqrt, sub, tanh)
from .in_place import change_in_place
from .indexing import (Gather, GetItem, IndexAdd, IndexPut, MaskedFill, Scatter, ScatterAdd, Where, gather, getitem,
                       index_add, index_fill, index_put, index_select, masked_fill, nonzero, scatter, scatter_add, tril,
                       triu, where)
from .logic import (allclose, bitwise_and, bitwise_not, bitwise_or, bitwise_xor, eq, equal, ge, gt, isclose, isfinite,
                    isinf, isnan, le, logical_and, logical_not, logical_or, logical_xor, lt, ne)
from .matmul import MatMul, bmm, dot, matmul
from .methods import install as _install_methods
from .promotion import (Cast, accumulates_in_float32, cast, check_one_dtype, computes_in_float, float_only,
                        in_float32_if_half, no_bool, require_float, result_dtype)
from .reductions import (Cumsum, LogSumExp, MaxOrMin, Mean, Norm, Prod, Sum, TakeAlongDim, Var, all, amax, amin, any,
                         argmax, argmin, cumsum, logsumexp, max, mean, min, norm, prod, std, sum, var)
from .shapes import (Cat, Contiguous, Diag, Expand, Flip, Pad, Permute, Repeat, Reshape, RepeatInterleave, Roll, Stack,
                     broadcast_to, cat, chunk, contiguous, diag, expand, flatten, flip, meshgrid, narrow, pad, permute,
                     repeat, repeat_interleave, reshape, roll, split, squeeze, stack, t, transpose, unbind, unflatten,
                     unsqueeze)
from .sorting import argsort, sort, topk

_install_methods()
