"""The PyTorch-named methods and operators of Tensor (x + y, x.sum(dim=1), x.view(...), x.add_(y), ...), attached
to the class defined in tinyattn/tensor.py."""
import builtins
import operator

from ..tensor import Tensor, as_array
from . import in_place
from .elementwise import (abs, add, clamp, div, exp, log, maximum, mul, neg, pow, relu, sigmoid, sqrt, sub, tanh,
                          to)
from .indexing import getitem, index_add, masked_fill, tril, triu
from .matmul import matmul
from .reductions import argmax, argmin, max, mean, min, sum, var
from .shapes import (chunk, contiguous, expand, flatten, permute, repeat_interleave, reshape, roll, split, squeeze,
                     transpose, unsqueeze)


def _reflected(function):
    """other <op> tensor, for a number or array on the left."""
    return lambda self, other: function(other, self)


def _compare(op):
    def compare(a, b):
        return Tensor(op(a.array, as_array(b)))
    return compare


def _in_place_operator(method):
    """x op= y: the in-place method, returning x itself (so `module.weight *= 0.5` keeps the Parameter)."""
    return lambda self, other: method(self, other)


def install():
    methods = {
        "__add__": add, "__radd__": _reflected(add), "__sub__": sub, "__rsub__": _reflected(sub),
        "__mul__": mul, "__rmul__": _reflected(mul), "__truediv__": div, "__rtruediv__": _reflected(div),
        "__pow__": pow, "__rpow__": _reflected(pow), "__matmul__": matmul, "__rmatmul__": _reflected(matmul),
        "__neg__": neg, "__getitem__": getitem, "__setitem__": in_place.setitem,
        "__iadd__": _in_place_operator(in_place.add_), "__isub__": _in_place_operator(in_place.sub_),
        "__imul__": _in_place_operator(in_place.mul_), "__itruediv__": _in_place_operator(in_place.div_),
        "__lt__": _compare(operator.lt), "__le__": _compare(operator.le), "__gt__": _compare(operator.gt),
        "__ge__": _compare(operator.ge), "__eq__": _compare(operator.eq), "__ne__": _compare(operator.ne),
        "eq": _compare(operator.eq), "ne": _compare(operator.ne), "lt": _compare(operator.lt),
        "gt": _compare(operator.gt), "le": _compare(operator.le), "ge": _compare(operator.ge),
        "add": add, "sub": sub, "mul": mul, "div": div, "pow": pow, "matmul": matmul, "maximum": maximum,
        "exp": exp, "log": log, "sqrt": sqrt, "abs": abs, "tanh": tanh, "sigmoid": sigmoid, "relu": relu,
        "clamp": clamp,
        "sum": sum, "mean": mean, "var": var, "max": max, "min": min, "argmax": argmax, "argmin": argmin,
        "reshape": reshape, "view": reshape, "permute": permute, "transpose": transpose,
        "unsqueeze": unsqueeze, "squeeze": squeeze, "flatten": flatten, "expand": expand,
        "contiguous": contiguous, "masked_fill": masked_fill, "repeat_interleave": repeat_interleave,
        "split": split, "chunk": chunk, "index_add": index_add, "roll": roll, "tril": tril, "triu": triu, "to": to,
        "add_": in_place.add_, "sub_": in_place.sub_, "mul_": in_place.mul_, "div_": in_place.div_,
        "zero_": in_place.zero_, "fill_": in_place.fill_, "copy_": in_place.copy_, "clamp_": in_place.clamp_,
        "masked_fill_": in_place.masked_fill_, "normal_": in_place.normal_, "uniform_": in_place.uniform_,
        "float": lambda self: to(self, "float32"), "double": lambda self: to(self, "float64"),
        "long": lambda self: Tensor(self.array.astype("int64")), "bool": lambda self: Tensor(self.array.astype(bool)),
        "cpu": lambda self: to(self, "cpu"), "cuda": lambda self: to(self, "cuda"),
        "__bool__": lambda self: builtins.bool(self.item()),
        "__hash__": object.__hash__,
    }
    for name, function in methods.items():
        setattr(Tensor, name, function)
    Tensor.T = property(lambda self: permute(self, tuple(reversed(range(self.ndim)))))
    Tensor.mT = property(lambda self: transpose(self, -2, -1))
