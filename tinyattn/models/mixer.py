"""MLP-Mixer (Tolstikhin et al. 2021): no attention at all. Patches are mixed by an MLP applied across tokens (the
same for every channel) and then across channels (the same for every token). Position comes from the token-mixing
MLP's weights, which are tied to patch positions, so it needs no position embedding."""
from dataclasses import dataclass

from .. import nn


@dataclass
class MixerConfig:
    image_size: int = 32
    patch_size: int = 4
    in_chans: int = 1
    num_classes: int = 10
    d_model: int = 64
    depth: int = 4
    token_hidden: int = 64
    channel_hidden: int = 128


class MixerBlock(nn.Module):
    def __init__(self, num_patches, d_model, token_hidden, channel_hidden):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.token_mlp = nn.MLP(num_patches, token_hidden)
        self.channel_mlp = nn.MLP(d_model, channel_hidden)

    def forward(self, x):
        x = x + self.token_mlp(self.norm1(x).transpose(1, 2)).transpose(1, 2)   # mix across patches
        return x + self.channel_mlp(self.norm2(x))                                # mix across channels


class MLPMixer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.patch_embed = nn.PatchEmbed(config.image_size, config.patch_size, config.in_chans, config.d_model)
        self.blocks = nn.ModuleList(MixerBlock(self.patch_embed.num_patches, config.d_model, config.token_hidden,
                                               config.channel_hidden) for _ in range(config.depth))
        self.norm = nn.LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.num_classes)

    def forward(self, images):
        x = self.patch_embed(images)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x).mean(dim=1))
