"""One readable file per model family."""
from .gpt import GPT, GPTConfig
