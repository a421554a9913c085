"""A real model's inputs, as Hugging Face prepares them: `Tokenizer` (a model folder's tokenizer.json, through the
`tokenizers` package or the byte-level BPE built here, bpe.py) and `ImageProcessor` (preprocessor_config.json);
`probe_strings`, hard strings by category for comparing two tokenizers."""
from . import bpe, probe_strings
from .image_processor import ImageProcessor
from .tokenizer import Tokenizer

__all__ = ["ImageProcessor", "Tokenizer", "bpe", "probe_strings"]
