"""A real model's tokenizer, read from its folder through the `tokenizers` package (the hub extra), or with
backend="python" through the byte-level BPE built here (bpe.py, no `tokenizers` needed): GPT-2's byte-level BPE
turns text into the ids its embedding was trained on, and back. encode, decode and batch_decode behave as
transformers' tokenizers do.

A folder holds tokenizer.json, or GPT-2's older pair vocab.json and merges.txt (as transformers' GPT2Tokenizer reads
them, with tokenizer_config.json's added tokens and add_prefix_space where it has them). Stanford CS336's
assignment 1 asks for the same object in its own words, and gets it: Tokenizer(vocab, merges, special_tokens) in the
bytes form ({id: bytes}, [(bytes, bytes)]), Tokenizer.from_files(vocab_filepath, merges_filepath, special_tokens),
encode, encode_iterable and decode."""
import os

from .. import hub
from .bpe import ByteLevelBPE, read_added_tokens, read_vocab_merges

VOCAB, MERGES, TOKENIZER_CONFIG = "vocab.json", "merges.txt", "tokenizer_config.json"


class Tokenizer:
    def __init__(self, vocab=None, merges=None, special_tokens=None, *, tokenizer_object=None):
        """Tokenizer(vocab, merges, special_tokens=None): a byte-level BPE from the bytes form (CS336's): vocab
        {id: bytes}, merges [(bytes, bytes)] earliest first, special_tokens a list of texts (one not in vocab gets
        the next id). Tokenizer(tokenizer_object=...) wraps a tokenizer already built (a `tokenizers.Tokenizer` or
        a bpe.ByteLevelBPE), as transformers' PreTrainedTokenizerFast(tokenizer_object=...) does."""
        if (tokenizer_object is None) == (vocab is None):
            raise TypeError("Tokenizer takes either vocab and merges (the bytes form: {id: bytes}, "
                            "[(bytes, bytes)]) or tokenizer_object=, not both or neither")
        if tokenizer_object is None:
            if merges is None:
                raise TypeError("Tokenizer(vocab, merges, special_tokens=None) needs the merges too")
            tokenizer_object = ByteLevelBPE.from_bytes(vocab, merges, special_tokens)
        self.backend_tokenizer = tokenizer_object

    @classmethod
    def from_files(cls, vocab_filepath, merges_filepath, special_tokens=None):
        """GPT-2's vocab.json and merges.txt (bpe.ByteLevelBPE.from_files), read with the python backend;
        special_tokens: a list of texts, as CS336's from_files."""
        return cls(tokenizer_object=ByteLevelBPE.from_files(vocab_filepath, merges_filepath, special_tokens))

    @classmethod
    def from_pretrained(cls, name_or_folder, backend="tokenizers"):
        """backend: "tokenizers" (Hugging Face's package, any tokenizer.json) or "python" (bpe.py here: a byte-level
        BPE such as GPT-2's, the same ids, no tokenizers package). The folder's tokenizer.json is read, else its
        vocab.json and merges.txt."""
        if backend not in ("tokenizers", "python"):
            raise ValueError(f"backend must be 'tokenizers' or 'python', not {backend!r}")
        folder = hub.resolve(name_or_folder)
        path = os.path.join(folder, "tokenizer.json")
        if not os.path.isfile(path):
            if not all(os.path.isfile(os.path.join(folder, name)) for name in (VOCAB, MERGES)):
                raise hub.PretrainedError(
                    f"{folder} holds no tokenizer.json (nor GPT-2's older {VOCAB} with {MERGES}), the file that "
                    "turns text into the model's token ids (a prompt needs it). Put the one of the model it was "
                    "trained from beside its weights (GPT-2's: https://huggingface.co/gpt2/blob/main/"
                    "tokenizer.json), or save yours there with tokenizers' Tokenizer.save")
            python = _read_vocab_merges(folder)
            return cls(tokenizer_object=python if backend == "python" else _backend(folder, python.to_str()))
        if backend == "python":
            try:
                return cls(tokenizer_object=ByteLevelBPE.from_file(path))
            except ValueError as error:
                raise hub.PretrainedError(str(error)) from None
        return cls(tokenizer_object=_backend(path))

    @property
    def vocab_size(self):
        return self.backend_tokenizer.get_vocab_size()

    def encode(self, text):
        """text -> a list of token ids."""
        return self.backend_tokenizer.encode(text).ids

    def encode_iterable(self, iterable):
        """Yields the ids of the text that the strings of iterable (an open file: its lines) make together, the
        same as encode of the whole text, holding a bounded stretch of it at a time (python backend)."""
        if not isinstance(self.backend_tokenizer, ByteLevelBPE):
            raise TypeError("encode_iterable streams with the byte-level BPE built here, and the tokenizers package "
                            "has no streaming encode: read the tokenizer with backend='python'")
        return self.backend_tokenizer.encode_iterable(iterable)

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


def _read_vocab_merges(folder):
    """A folder's vocab.json and merges.txt as transformers' GPT2Tokenizer reads them: tokenizer_config.json's
    added_tokens_decoder and add_prefix_space where the file has them, else GPT-2's <|endoftext|> as its one special
    token (GPT2Tokenizer's default) where vocab.json holds it."""
    vocab_path, merges_path = os.path.join(folder, VOCAB), os.path.join(folder, MERGES)
    config_path = os.path.join(folder, TOKENIZER_CONFIG)
    config = hub.read_json(config_path, f"{config_path} is not a file") if os.path.isfile(config_path) else {}
    adding = [key for key in ("add_bos_token", "add_eos_token") if config.get(key)]
    if adding:
        raise hub.PretrainedError(f"{config_path} sets {adding[0]}: GPT2Tokenizer would put that token around every "
                                  "text, which encode here does not do; add its id to the ids yourself and remove "
                                  "the setting")
    listed = config.get("added_tokens_decoder")
    if listed is not None and not (isinstance(listed, dict) and all(isinstance(t, dict) for t in listed.values())):
        raise hub.PretrainedError(f"{config_path}: added_tokens_decoder must be an object of id -> token object")
    try:
        vocab, merges = read_vocab_merges(vocab_path, merges_path)
        if listed is None:
            special, added = {t: i for t, i in vocab.items() if t == "<|endoftext|>"}, {}
        else:
            special, added = read_added_tokens(config_path, [
                {**token, "id": int(i) if i.isdigit() else i} for i, token in listed.items()])
    except ValueError as error:
        raise hub.PretrainedError(str(error)) from None
    try:
        return ByteLevelBPE(vocab, merges, special, added, add_prefix_space=config.get("add_prefix_space") is True)
    except ValueError as error:
        raise hub.PretrainedError(f"{vocab_path}, {merges_path} and {config_path}: {error}") from None


def _backend(path, spec=None):
    """The tokenizers package's Tokenizer of the tokenizer.json at path, or of spec, the text of one (read from the
    files at path)."""
    try:
        from tokenizers import Tokenizer as Backend
    except ImportError:
        raise hub.PretrainedError("reading a tokenizer with backend='tokenizers' needs the tokenizers package: "
                                  "pip install -e \".[hub]\" (or pip install tokenizers), or use backend='python'"
                                  ) from None
    try:
        return Backend.from_file(path) if spec is None else Backend.from_str(spec)
    except Exception as error:          # the package raises a bare Exception for a file it cannot read
        raise hub.PretrainedError(f"{path} is not a tokenizer the tokenizers package reads ({error})") from None
