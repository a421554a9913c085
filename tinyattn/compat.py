"""PyTorch names that have no work to do on NumPy, and clear refusals of what NumPy cannot have.

compile(model) returns the model unchanged: there is nothing to compile, and nothing gets faster (documented, so
that code calling torch.compile runs). backends holds the switches training scripts set (nanoGPT's
`torch.backends.cuda.matmul.allow_tf32 = True`); they are kept and change nothing. bfloat16, autocast
and the like raise an error that says why.
"""
from types import SimpleNamespace

from . import backend


def compile(model=None, **options):
    """torch.compile's signature; returns the model as it is (also as a decorator)."""
    return model if model is not None else (lambda function: function)


backends = SimpleNamespace(cuda=SimpleNamespace(matmul=SimpleNamespace(allow_tf32=False)),
                           cudnn=SimpleNamespace(allow_tf32=True, benchmark=False, deterministic=False),
                           mps=SimpleNamespace(is_available=lambda: False))     # Apple's GPU: never here


def _current_accelerator(check_available=False):
    """torch.accelerator.current_accelerator(): the GPU as a device when CuPy sees one, else None (check_available
    or not: a GPU counts only when CuPy can use it)."""
    return backend.device("cuda") if backend.cuda_is_available() else None


# torch.accelerator, the device-generic switch (pytorch/examples' --accel): the one accelerator here is CUDA
accelerator = SimpleNamespace(is_available=backend.cuda_is_available, current_accelerator=_current_accelerator)

_UNAVAILABLE = {
    "bfloat16": "NumPy has no bfloat16 dtype; use float32 (or float16 for storage)",
    "autocast": "there is no mixed-precision autocast: NumPy and CuPy compute in the dtype they are given",
    "amp": "there is no automatic mixed precision (torch.amp): compute in float32",
    "jit": "there is no TorchScript (torch.jit): the Python code runs as it is",
    "onnx": "there is no ONNX export (torch.onnx): the model is Python and NumPy, saved with ta.save(state_dict)",
    "multiprocessing": "tinyattn runs in one process: there are no worker processes to share tensors with",
}


def unavailable(name):
    """The AttributeError for a PyTorch name tinyattn deliberately lacks, saying why."""
    reason = _UNAVAILABLE.get(name)
    return AttributeError(f"tinyattn has no {name!r}: {reason}" if reason else f"module 'tinyattn' has no attribute "
                          f"{name!r}")
