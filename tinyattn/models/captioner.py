"""An attention-based image captioner in the spirit of "Show, Attend and Tell" (Xu et al. 2015).

The image is cut into patches and encoded (patch embedding, positions, a Transformer encoder block): each patch is
an annotation vector. A GRU decoder writes the caption word by word and, before each word, attends over the patches
with Bahdanau's additive attention (the same AttentionDecoder as Seq2SeqAttention). The weights show where the model
looked for each word.
"""
from dataclasses import dataclass

from .. import backend
from .. import nn
from .seq2seq import AttentionDecoder, _decode_teacher_forced, _greedy
from .vit import EncoderBlock


@dataclass
class CaptionerConfig:
    image_height: int = 8
    image_width: int = 32
    patch_size: int = 4
    in_chans: int = 1
    vocab: int = 16
    d_model: int = 64
    encoder_blocks: int = 1
    num_heads: int = 4
    embed_dim: int = 32
    hidden: int = 64
    attention_dim: int = 64
    bos_id: int = 1
    eos_id: int = 2


class Captioner(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        p = config.patch_size
        if config.image_height % p or config.image_width % p:
            raise ValueError(f"image {config.image_height}x{config.image_width} is not a multiple of patch_size {p}")
        self.grid = (config.image_height // p, config.image_width // p)
        self.patch_proj = nn.Linear(config.in_chans * p * p, config.d_model)
        self.pos_embed = nn.LearnedPositionalEmbedding(self.grid[0] * self.grid[1], config.d_model)
        self.encoder = nn.ModuleList(EncoderBlock(config.d_model, config.num_heads)
                                     for _ in range(config.encoder_blocks))
        self.decoder = AttentionDecoder(config.vocab, config.embed_dim, config.hidden, config.d_model,
                                        config.attention_dim)

    def encode(self, images):
        """(B, C, H, W) -> annotations (B, N, d_model), one per patch in row-major order."""
        b, c, h, w = images.shape
        p = self.config.patch_size
        patches = images.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5).reshape(b, -1, c * p * p)
        x = self.pos_embed(self.patch_proj(patches))
        for block in self.encoder:
            x = block(x)
        return x

    def start(self, images):
        annotations = self.encode(images)
        xp = backend.xp_of(annotations.array)
        return self.decoder.start(annotations, xp.ones(annotations.shape[:2], dtype=bool))

    def step(self, memory, prev_ids):
        return self.decoder.step(memory, prev_ids)

    def forward(self, images, captions_in):
        """Teacher forcing: logits (B, T, vocab) and attention over patches (B, T, N)."""
        return _decode_teacher_forced(self, images, captions_in)

    def greedy_decode(self, images, max_len):
        """Caption ids (B, max_len) and the attention over patches for each word (B, max_len, N)."""
        return _greedy(self, images, max_len)
