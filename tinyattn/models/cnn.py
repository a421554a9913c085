"""Small convolutional baselines for the image lessons: a plain CNN, the same CNN with a self-attention block over
its feature map (SAGAN-style), and with attention-based pooling instead of the global mean, so the lessons can ask
what attention adds to convolution. (Local attention in place of the convolutions: models/cnn_attention.py.)"""
from dataclasses import dataclass

from .. import nn
from .cnn_attention import AttentionPooling


@dataclass
class CNNConfig:
    in_chans: int = 1
    num_classes: int = 10
    width: int = 32
    attention: bool = False
    num_heads: int = 2
    pooling: str = "mean"            # "mean": global average pooling; "attention": a learned class query attends


class SmallCNN(nn.Module):
    """conv3x3 -> ReLU -> conv3x3/2 -> ReLU -> [self-attention] -> conv3x3/2 -> ReLU -> global mean (or attention
    pooling) -> Linear."""

    def __init__(self, config):
        super().__init__()
        w = config.width
        self.conv1 = nn.Conv2d(config.in_chans, w, 3, padding=1)
        self.conv2 = nn.Conv2d(w, 2 * w, 3, stride=2, padding=1)
        self.attention = nn.SelfAttention2d(2 * w, config.num_heads) if config.attention else None
        self.conv3 = nn.Conv2d(2 * w, 2 * w, 3, stride=2, padding=1)
        if config.pooling not in ("mean", "attention"):
            raise ValueError(f"pooling must be 'mean' or 'attention', got {config.pooling!r}")
        self.pool = AttentionPooling(2 * w, config.num_heads) if config.pooling == "attention" else None
        self.head = nn.Linear(2 * w, config.num_classes)

    def forward(self, images):
        x = self.conv2(self.conv1(images).relu()).relu()
        if self.attention is not None:
            x = self.attention(x)
        x = self.conv3(x).relu()
        return self.head(x.mean(dim=(2, 3)) if self.pool is None else self.pool(x))
