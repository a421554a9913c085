"""Datasets that need no download, with fixed seeds and fixed train/validation/test splits. Host NumPy arrays only:
move a batch to a device with tinyattn.tensor(batch, device=...)."""
from .dates import DateDataset, make_date
from .digits import DigitCanvases, DigitStrips, load_digits, random_shifts
from .image_processor import ImageProcessor
from .numbers import NumberWords, number_words
from .repeats import repeated_tokens
from .sequences import SequenceTask
from .text import CharCorpus, bigram_bits_per_char
from .tokenizer import Tokenizer
from .vocab import Vocab, batches, pad_batch
