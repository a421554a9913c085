"""Small convolutional baselines for the image lessons: a plain CNN, and the same CNN with a self-attention block
over its feature map (SAGAN-style), so the lessons can ask what attention adds to convolution."""
from dataclasses import dataclass

from .. import nn


@dataclass
class CNNConfig:
    in_chans: int = 1
    num_classes: int = 10
    width: int = 32
    attention: bool = False
    num_heads: int = 2


class SmallCNN(nn.Module):
    """conv3x3 -> ReLU -> conv3x3/2 -> ReLU -> [self-attention] -> conv3x3/2 -> ReLU -> global mean -> Linear."""

    def __init__(self, config):
        super().__init__()
        w = config.width
        self.conv1 = nn.Conv2d(config.in_chans, w, 3, padding=1)
        self.conv2 = nn.Conv2d(w, 2 * w, 3, stride=2, padding=1)
        self.attention = nn.SelfAttention2d(2 * w, config.num_heads) if config.attention else None
        self.conv3 = nn.Conv2d(2 * w, 2 * w, 3, stride=2, padding=1)
        self.head = nn.Linear(2 * w, config.num_classes)

    def forward(self, images):
        x = self.conv2(self.conv1(images).relu()).relu()
        if self.attention is not None:
            x = self.attention(x)
        x = self.conv3(x).relu()
        return self.head(x.mean(dim=(2, 3)))
