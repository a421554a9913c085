"""One readable file per model family, each with a small config dataclass."""
from .captioner import Captioner, CaptionerConfig
from .cnn import CNNConfig, SmallCNN
from .gpt import GPT, GPTConfig
from .mixer import MixerConfig, MLPMixer
from .seq2seq import Seq2Seq, Seq2SeqAttention, Seq2SeqConfig
from .swin import Swin, SwinConfig
from .transformer import Transformer, TransformerConfig
from .vit import ViT, ViTConfig, deit_hard_distillation_loss, mean_attention_distance
