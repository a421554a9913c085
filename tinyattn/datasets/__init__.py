"""Datasets that need no download, with fixed seeds and fixed train/validation/test splits: dates, number words,
copy/reverse/sort tasks, Python's own source as a character corpus, digit images, random tokens with a repeated
stretch. Host NumPy arrays only: move a batch to a device with tinyattn.tensor(batch, device=...). (PyTorch's
Dataset and DataLoader are tinyattn.utils.data; a real model's tokenizer and image processor, tinyattn.preprocessing.)
"""
from .dates import DateDataset, make_date
from .digits import DigitCanvases, DigitStrips, load_digits, random_shifts
from .numbers import NumberWords, number_words
from .repeats import repeated_tokens
from .sequences import SequenceTask
from .text import CharCorpus, bigram_bits_per_char
from .vocab import Vocab, batches, pad_batch

__all__ = ["CharCorpus", "DateDataset", "DigitCanvases", "DigitStrips", "NumberWords", "SequenceTask", "Vocab",
           "batches", "bigram_bits_per_char", "load_digits", "make_date", "number_words", "pad_batch",
           "random_shifts", "repeated_tokens"]
