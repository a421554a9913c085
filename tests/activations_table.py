"""The fused activations (tinyattn/functional/activations.py), as data the tests read: one row per way of calling
one. test_two_paths.py compares fast with reference and gradchecks the twin, test_functional.py holds the call to the
formula, and test_dtype_rules.py to the error for integer and bool inputs, each for every row here. A twin registered
in activations.py fails test_two_paths.py until its rows are here; then nothing else in tests/ needs an edit."""
import math
from dataclasses import dataclass

import numpy as np

import tinyattn.functional as F

_erfc = np.vectorize(math.erfc)


@dataclass(frozen=True)
class Activation:
    twin: str               # the public name it is registered under (twins.register)
    call: object            # the public function on a tensor, with this row's arguments
    formula: object         # the formula PyTorch documents, in NumPy on a float64 array
    integer_error: type     # what PyTorch raises for an integer or bool input


ACTIVATIONS = {
    "gelu": Activation("gelu", F.gelu, lambda x: x * 0.5 * _erfc(-x / math.sqrt(2)), NotImplementedError),
    "gelu(approximate='tanh')": Activation(
        "gelu", lambda x: F.gelu(x, approximate="tanh"),
        lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))), NotImplementedError),
    "silu": Activation("silu", F.silu, lambda x: x / (1 + np.exp(-x)), NotImplementedError),
}


def calls_by_twin():
    """{twin's name: the calls of its rows}."""
    calls = {}
    for row in ACTIVATIONS.values():
        calls.setdefault(row.twin, []).append(row.call)
    return calls
