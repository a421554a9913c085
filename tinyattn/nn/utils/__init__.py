"""torch.nn.utils's names, where PyTorch code looks for them."""
from . import rnn
