"""tinyattn: attention and Transformers from scratch on NumPy, with CuPy as a drop-in GPU backend."""
from . import backend
from .backend import (Generator, bool_, cuda_is_available, device, float16, float32, float64,
                      get_float32_matmul_precision, int8, int16, int32, int64, manual_seed, set_default_device,
                      set_float32_matmul_precision, uint8)
from .backend import bool_ as bool  # noqa: A001 (PyTorch's names: ta.bool, ta.float, ta.long, ...)
from .backend import default_device as get_default_device
from .backend import float16 as half, float32 as float, float64 as double, int32 as int, int64 as long  # noqa: A001
from . import compat
from .compat import accelerator, backends, compile
from .creation import (BoolTensor, FloatTensor, LongTensor, arange, as_tensor, empty, empty_like, eye, from_numpy,
                       full, full_like, get_default_dtype, is_tensor, multinomial, numel, ones, ones_like, rand,
                       rand_like, randint, randn, randn_like, randperm, set_default_dtype, tensor, zeros, zeros_like)
from .ops import (abs, all, allclose, amax, amin, any, argmax, argmin, argsort, bmm, broadcast_to, cat, chunk, clamp,
                  clone, cos, cumsum, diag, dot, einsum, eq, equal, exp, flatten, flip, floor_divide, gather, ge, gt,
                  index_select, isclose, isfinite, isinf, isnan, le, log, logical_and, logical_not, logical_or,
                  logical_xor, logsumexp, lt, matmul, max, maximum, mean, meshgrid, min, minimum, narrow, ne, nonzero,
                  norm, permute, pow, prod, relu, remainder, repeat_interleave, reshape, roll, rsqrt, scatter,
                  scatter_add, sigmoid, sin, sort, split, sqrt, squeeze, stack, std, sum, tanh, topk, transpose, tril,
                  triu, unbind, unflatten, unsqueeze, var, where)
from .ops import clamp as clip
from math import e, inf, nan, pi  # noqa: F401 (PyTorch's constants: torch.inf, torch.pi, ...)
from .tensor import (Function, Tensor, enable_grad, inference_mode, is_grad_enabled, no_grad,
                     set_grad_enabled)
from . import cpu
from .cpu import get_num_threads, set_num_threads
from . import functional
from .functional import log_softmax, reference, softmax
from .gradcheck import GradcheckError, gradcheck
from . import distributed, nn, optim, utils
from . import einops_backend
from .serialization import CheckpointError, load, save
from . import cuda
from .memory import memory_report

__version__ = "0.1.0"


def __getattr__(name):
    """A PyTorch name that has no place on NumPy (bfloat16, autocast, ...) raises, saying why."""
    raise compat.unavailable(name)
