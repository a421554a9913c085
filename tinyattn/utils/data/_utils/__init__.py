"""PyTorch's torch.utils.data._utils: here only collate (default_collate), where ported code imports it from."""
from . import collate  # noqa: F401
