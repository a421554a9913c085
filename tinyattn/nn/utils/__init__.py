"""torch.nn.utils's names, where PyTorch code looks for them: gradient clipping (from tinyattn.optim) and rnn."""
from ...optim.clip import clip_grad_norm_, clip_grad_value_  # noqa: F401
from . import rnn  # noqa: F401
