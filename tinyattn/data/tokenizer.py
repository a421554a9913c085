"""A real model's tokenizer, read from tokenizer.json in its folder through the `tokenizers` package (the hub
extra), or with backend="python" through the byte-level BPE built here (data/bpe.py, no `tokenizers` needed): GPT-2's
byte-level BPE turns text into the ids its embedding was trained on, and back."""
import os

from .. import hub
from .bpe import ByteLevelBPE


class Tokenizer:
    def __init__(self, backend_tokenizer):
        self.backend_tokenizer = backend_tokenizer

    @classmethod
    def from_pretrained(cls, name_or_folder, backend="tokenizers"):
        """backend: "tokenizers" (Hugging Face's package, any tokenizer.json) or "python" (tinyattn.data.bpe: a
        byte-level BPE such as GPT-2's, the same ids, no tokenizers package)."""
        if backend not in ("tokenizers", "python"):
            raise ValueError(f"backend must be 'tokenizers' or 'python', not {backend!r}")
        folder = hub.resolve(name_or_folder)
        path = os.path.join(folder, "tokenizer.json")
        if not os.path.isfile(path):
            raise hub.PretrainedError(f"{folder} holds no tokenizer.json")
        if backend == "python":
            try:
                return cls(ByteLevelBPE.from_file(path))
            except ValueError as error:
                raise hub.PretrainedError(str(error)) from None
        try:
            from tokenizers import Tokenizer as Backend
        except ImportError:
            raise hub.PretrainedError("reading tokenizer.json needs the tokenizers package: pip install -e "
                                      "\".[hub]\" (or pip install tokenizers)") from None
        return cls(Backend.from_file(path))

    @property
    def vocab_size(self):
        return self.backend_tokenizer.get_vocab_size()

    def encode(self, text):
        """text -> a list of token ids."""
        return self.backend_tokenizer.encode(text).ids

    def decode(self, ids):
        """token ids (a list, an array or a 1-D tensor) -> text."""
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        return self.backend_tokenizer.decode([int(i) for i in ids])

    def tokens(self, text):
        """The pieces text splits into, as strings (GPT-2 writes a leading space as 'Ġ')."""
        return self.backend_tokenizer.encode(text).tokens
