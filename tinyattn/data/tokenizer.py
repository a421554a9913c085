"""A real model's tokenizer, read from tokenizer.json in its folder through the `tokenizers` package (the hub
extra), or with backend="python" through the byte-level BPE built here (data/bpe.py, no `tokenizers` needed): GPT-2's
byte-level BPE turns text into the ids its embedding was trained on, and back. encode, decode and batch_decode behave
as transformers' tokenizers do."""
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
            raise hub.PretrainedError(f"{folder} holds no tokenizer.json, the file that turns text into the model's "
                                      "token ids (a prompt needs it). Put the one of the model it was trained from "
                                      "beside its weights (GPT-2's: https://huggingface.co/gpt2/blob/main/"
                                      "tokenizer.json), or save yours there with tokenizers' Tokenizer.save")
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
        try:
            return cls(Backend.from_file(path))
        except Exception as error:          # the package raises a bare Exception for a file it cannot read
            raise hub.PretrainedError(f"{path} is not a tokenizer the tokenizers package reads ({error})") from None

    @property
    def vocab_size(self):
        return self.backend_tokenizer.get_vocab_size()

    def encode(self, text):
        """text -> a list of token ids."""
        return self.backend_tokenizer.encode(text).ids

    def decode(self, ids, skip_special_tokens=False):
        """Token ids -> text: a list, an array or a tensor of one sequence, (T,) or (1, T) as generate returns it;
        special tokens (GPT-2's <|endoftext|>) stay in the text unless skip_special_tokens, as in transformers."""
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        if ids and isinstance(ids[0], list):
            if len(ids) > 1:
                raise ValueError(f"decode takes one sequence, got {len(ids)}; batch_decode decodes each of them")
            ids = ids[0]
        return self.backend_tokenizer.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def batch_decode(self, sequences, skip_special_tokens=False):
        """A list of texts, one per sequence of (B, T) ids (a list of lists, an array or a tensor)."""
        sequences = sequences.tolist() if hasattr(sequences, "tolist") else list(sequences)
        return [self.decode(ids, skip_special_tokens) for ids in sequences]

    def tokens(self, text):
        """The pieces text splits into, as strings (GPT-2 writes a leading space as 'Ġ')."""
        return self.backend_tokenizer.encode(text).tokens
