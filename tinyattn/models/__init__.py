"""One readable file per model family, each with a small config dataclass."""
from .captioner import Captioner, CaptionerConfig
from .cnn import CNNConfig, SmallCNN
from .cnn_attention import AttentionPooling, LocalAttentionCNN, LocalAttentionCNNConfig, LocalSelfAttention2d
from .gpt import GPT, GPTConfig
from .mixer import MixerConfig, MLPMixer
from .mobile_former import MobileFormer, MobileFormerConfig
from .seq2seq import Seq2Seq, Seq2SeqAttention, Seq2SeqConfig
from .swin import Swin, SwinConfig
from .transformer import Transformer, TransformerConfig
from .vit import (ViT, ViTConfig, deit_hard_distillation_loss, deit_soft_distillation_loss, mean_attention_distance,
                  position_neighbour_similarity)
