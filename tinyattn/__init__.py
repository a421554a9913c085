"""tinyattn: attention and Transformers from scratch on NumPy, with CuPy as a drop-in GPU backend."""
from . import backend
from .backend import (bool_, cuda_is_available, float16, float32, float64, int32, int64, manual_seed,
                      set_default_device)
from .backend import default_device as get_default_device
from .creation import (arange, as_tensor, eye, full, ones, ones_like, rand, randint, randn, randperm, tensor,
                       zeros, zeros_like)
from .ops import (abs, argmax, argmin, cat, chunk, exp, flatten, log, matmul, max, maximum, mean, min, permute,
                  relu, repeat_interleave, reshape, roll, sigmoid, split, sqrt, squeeze, stack, sum, tanh, transpose,
                  tril, triu, unsqueeze, var, where)
from .tensor import Function, Tensor, enable_grad, is_grad_enabled, no_grad
from . import cpu
from .cpu import get_num_threads, set_num_threads
from . import functional
from .functional import log_softmax, reference, softmax
from .gradcheck import GradcheckError, gradcheck
from . import nn, optim
from .serialization import CheckpointError, load, save

__version__ = "0.1.0"
