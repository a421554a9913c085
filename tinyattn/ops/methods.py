"""The PyTorch-named methods and operators of Tensor (x + y, x.sum(dim=1), x.view(...), x.add_(y), ...), attached
to the class defined in tinyattn/tensor.py."""
import builtins

from ..tensor import Tensor
from . import in_place
from .. import creation
from .conversions import to
from .elementwise import (abs, add, clamp, clone, cos, div, exp, floor_divide, log, maximum, minimum, mul, neg, pow,
                          relu, remainder, rsqrt, sigmoid, sin, sqrt, sub, tanh)
from .indexing import (gather, getitem, index_add, index_fill, index_select, masked_fill, nonzero, scatter, scatter_add,
                       tril, triu)
from .logic import (bitwise_and, bitwise_not, bitwise_or, bitwise_xor, eq, equal, ge, gt, isclose, isfinite, isinf,
                    isnan, le, logical_and, logical_not, logical_or, logical_xor, lt, ne)
from .matmul import bmm, dot, matmul
from .reductions import (all, amax, amin, any, argmax, argmin, cumsum, logsumexp, max, mean, min, norm, prod, std, sum,
                         var)
from .shapes import (broadcast_to, chunk, contiguous, diag, expand, flatten, flip, narrow, permute, repeat,
                     repeat_interleave, reshape, roll, split, squeeze, t, transpose, unbind, unflatten, unsqueeze)
from .sorting import argsort, sort, topk


def _reflected(function):
    """other <op> tensor, for a number or array on the left."""
    return lambda self, other: function(other, self)


def _equality(compare):
    """x == y and x != y; against None, False and True as in PyTorch (`if idx_next == eos_id:` with eos_id None)."""
    return lambda a, b: NotImplemented if b is None else compare(a, b)


def _in_place_operator(method):
    """x op= y: the in-place method, returning x itself (so `module.weight *= 0.5` keeps the Parameter)."""
    return lambda self, other: method(self, other)


def _type(self, dtype=None):
    """x.type(dtype) casts; x.type() names the dtype, as PyTorch ("tinyattn.float32")."""
    return f"tinyattn.{self.dtype.name}" if dtype is None else to(self, dtype)


def _new(make):
    """x.new_zeros(size) and friends: a new tensor with x's dtype and device unless told otherwise."""
    def new(self, *args, dtype=None, device=None, requires_grad=False):
        return make(self, *args, dtype=dtype or self.dtype, device=device or str(self.device),
                    requires_grad=requires_grad)
    return new


def install():
    methods = {
        "__add__": add, "__radd__": _reflected(add), "__sub__": sub, "__rsub__": _reflected(sub),
        "__mul__": mul, "__rmul__": _reflected(mul), "__truediv__": div, "__rtruediv__": _reflected(div),
        "__pow__": pow, "__rpow__": _reflected(pow), "__matmul__": matmul, "__rmatmul__": _reflected(matmul),
        "__floordiv__": floor_divide, "__rfloordiv__": _reflected(floor_divide), "__mod__": remainder,
        "__rmod__": _reflected(remainder), "floor_divide": floor_divide, "remainder": remainder,
        "__ifloordiv__": _in_place_operator(in_place.floor_divide_),
        "__imod__": _in_place_operator(in_place.remainder_),
        "floor_divide_": in_place.floor_divide_, "remainder_": in_place.remainder_,
        "__neg__": neg, "__getitem__": getitem, "__setitem__": in_place.setitem,
        "__iadd__": _in_place_operator(in_place.add_), "__isub__": _in_place_operator(in_place.sub_),
        "__imul__": _in_place_operator(in_place.mul_), "__itruediv__": _in_place_operator(in_place.div_),
        "__lt__": lt, "__le__": le, "__gt__": gt, "__ge__": ge, "__eq__": _equality(eq), "__ne__": _equality(ne),
        "eq": eq, "ne": ne, "lt": lt, "gt": gt, "le": le, "ge": ge,
        "add": add, "sub": sub, "mul": mul, "div": div, "pow": pow, "matmul": matmul, "maximum": maximum,
        "exp": exp, "log": log, "sqrt": sqrt, "abs": abs, "tanh": tanh, "sigmoid": sigmoid, "relu": relu,
        "clamp": clamp,
        "sum": sum, "mean": mean, "var": var, "max": max, "min": min, "argmax": argmax, "argmin": argmin,
        "reshape": reshape, "view": reshape, "permute": permute, "transpose": transpose,
        "unsqueeze": unsqueeze, "squeeze": squeeze, "flatten": flatten, "expand": expand,
        "contiguous": contiguous, "masked_fill": masked_fill, "repeat_interleave": repeat_interleave,
        "split": split, "chunk": chunk, "index_add": index_add, "roll": roll, "tril": tril, "triu": triu, "to": to,
        "narrow": narrow,
        "add_": in_place.add_, "sub_": in_place.sub_, "mul_": in_place.mul_, "div_": in_place.div_,
        "zero_": in_place.zero_, "fill_": in_place.fill_, "copy_": in_place.copy_, "clamp_": in_place.clamp_,
        "masked_fill_": in_place.masked_fill_, "normal_": in_place.normal_, "uniform_": in_place.uniform_,
        "__and__": bitwise_and, "__or__": bitwise_or, "__xor__": bitwise_xor, "__invert__": bitwise_not,
        "__rand__": bitwise_and, "__ror__": bitwise_or, "__rxor__": bitwise_xor,
        "minimum": minimum, "sin": sin, "cos": cos, "rsqrt": rsqrt, "clone": clone, "std": std, "norm": norm,
        "cumsum": cumsum, "any": any, "all": all, "amax": amax, "amin": amin, "prod": prod, "logsumexp": logsumexp,
        "isnan": isnan, "isinf": isinf, "isfinite": isfinite,
        "sort": sort, "argsort": argsort, "topk": topk, "gather": gather, "scatter": scatter, "nonzero": nonzero,
        "index_fill": index_fill, "flip": flip, "repeat": repeat, "unbind": unbind, "t": t, "bmm": bmm,
        "expand_as": lambda self, other: expand(self, other.shape),
        "view_as": lambda self, other: reshape(self, other.shape),
        "reshape_as": lambda self, other: reshape(self, other.shape),
        "type_as": lambda self, other: to(self, other.dtype), "type": _type,
        "scatter_": in_place.scatter_, "index_fill_": in_place.index_fill_, "index_select": index_select,
        "scatter_add": scatter_add, "scatter_add_": in_place.scatter_add_,
        "new_zeros": _new(lambda s, *size, **kw: creation.zeros(*size, **kw)),
        "new_ones": _new(lambda s, *size, **kw: creation.ones(*size, **kw)),
        "new_empty": _new(lambda s, *size, **kw: creation.empty(*size, **kw)),
        "new_full": _new(lambda s, size, fill_value, **kw: creation.full(size, fill_value, **kw)),
        "new_tensor": _new(lambda s, data, **kw: creation.tensor(data, **kw)),
        "float": lambda self: to(self, "float32"), "double": lambda self: to(self, "float64"),
        "half": lambda self: to(self, "float16"), "int": lambda self: to(self, "int32"),
        "long": lambda self: to(self, "int64"), "bool": lambda self: to(self, "bool"),
        "cpu": lambda self: to(self, "cpu"), "cuda": lambda self: to(self, "cuda"),
        "__bool__": lambda self: builtins.bool(self.item()),
        "__hash__": object.__hash__,
        "square": lambda self: pow(self, 2), "unflatten": unflatten, "diag": diag, "broadcast_to": broadcast_to,
        "clip": clamp, "clip_": in_place.clamp_, "isclose": isclose, "equal": equal, "logical_not": logical_not,
        "logical_and": logical_and, "logical_or": logical_or, "logical_xor": logical_xor,
        "exp_": in_place.exp_, "relu_": in_place.relu_, "tanh_": in_place.tanh_, "sigmoid_": in_place.sigmoid_,
        "pow_": in_place.pow_, "dot": dot, "multinomial": creation.multinomial,
        "pin_memory": lambda self: self, "is_pinned": lambda self: False,       # no page-locked memory here
    }
    for name, function in methods.items():
        setattr(Tensor, name, function)
    Tensor.T = property(lambda self: permute(self, tuple(reversed(range(self.ndim)))))
    Tensor.mT = property(lambda self: transpose(self, -2, -1))
