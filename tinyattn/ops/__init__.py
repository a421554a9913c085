"""Primitive Functions, forward beside backward, and the PyTorch-named functions and Tensor methods built on them.

Every ``forward``/``backward`` works on raw backend arrays and takes its array module from them (``xp_of``), so one
implementation serves NumPy and CuPy. elementwise.py (arithmetic, one-input math, casts and moves), matmul.py,
reductions.py, shapes.py, indexing.py, in_place.py (x += y, x[i] = v, x.add_(y), ...); dims.py and promotion.py
hold PyTorch's rules for dim arguments and result dtypes; methods.py attaches everything to Tensor.
"""
from .dims import dim_index, dim_indices
from .elementwise import (Add, Cast, Clamp, Div, Exp, Log, Maximum, Mul, Neg, Pow, PowScalar, Relu, Sigmoid, Sqrt,
                          Sub, Tanh, ToDevice, abs, add, binary, cast, clamp, div, exp, log, maximum, mul, neg, pow,
                          relu, sigmoid, sigmoid_array, sqrt, sub, tanh, to, to_args)
from .in_place import change_in_place
from .indexing import (GetItem, IndexAdd, IndexPut, MaskedFill, Where, getitem, index_add, index_put, masked_fill,
                       tril, triu, where)
from .matmul import MatMul, matmul
from .methods import install as _install_methods
from .promotion import result_dtype
from .reductions import MaxOrMin, Mean, Sum, TakeAlongDim, Var, argmax, argmin, max, mean, min, sum, var
from .shapes import (Cat, Contiguous, Expand, Permute, Reshape, RepeatInterleave, Roll, Stack, cat, chunk,
                     contiguous, expand, flatten, permute, repeat_interleave, reshape, roll, split, squeeze, stack,
                     transpose, unsqueeze)

_install_methods()
