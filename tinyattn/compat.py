"""PyTorch names that have no work to do on NumPy, and clear refusals of what NumPy cannot have.

compile(model) returns the model unchanged: there is nothing to compile, and nothing gets faster (documented, so
that code calling torch.compile runs). bfloat16, distributed, autocast and the like raise an error that says why.
"""


def compile(model=None, **options):
    """torch.compile's signature; returns the model as it is (also as a decorator)."""
    return model if model is not None else (lambda function: function)


_UNAVAILABLE = {
    "bfloat16": "NumPy has no bfloat16 dtype; use float32 (or float16 for storage)",
    "distributed": "tinyattn runs in one process on one device: there is no distributed training",
    "autocast": "there is no mixed-precision autocast: NumPy and CuPy compute in the dtype they are given",
    "amp": "there is no automatic mixed precision (torch.amp): compute in float32",
    "jit": "there is no TorchScript (torch.jit): the Python code runs as it is",
}


def unavailable(name):
    """The AttributeError for a PyTorch name tinyattn deliberately lacks, saying why."""
    reason = _UNAVAILABLE.get(name)
    return AttributeError(f"tinyattn has no {name!r}: {reason}" if reason else f"module 'tinyattn' has no attribute "
                          f"{name!r}")
