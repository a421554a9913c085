"""Byte-level BPE, GPT-2's tokenizer, built from scratch: the byte-to-character table, GPT-2's pre-tokenisation
pattern, merges trained on a corpus, encoding by merge rank, decoding, special tokens. `ByteLevelBPE.from_file`
reads the tokenizer.json of a byte-level BPE (GPT-2's, or one written by the `tokenizers` package) and gives the same
ids as `tokenizers` does; `ByteLevelBPE.from_files` reads GPT-2's older pair, vocab.json and merges.txt; `train`
learns the same merges as `tokenizers`' BpeTrainer, ties included.

Two forms of a vocabulary, and which function speaks which:
- the table form, as GPT-2's files and `tokenizers` write it: each token a string of the table's characters
  (' hello' is 'Ġhello'), vocab {token: id}, merges [(left, right)]. ByteLevelBPE(...), from_file, from_files, train
  and the attributes vocab and merges speak it.
- the bytes form, as Stanford CS336's assignment 1 asks for it: vocab {id: bytes}, merges [(bytes, bytes)].
  ByteLevelBPE.from_bytes takes it, to_bytes gives it, and train_bpe (from a file) returns it.
Special tokens are text (str) in both.

Its method names follow `tokenizers.Tokenizer` (encode(text).ids, decode(ids, skip_special_tokens), decode_batch,
get_vocab_size, token_to_id, id_to_token), so `Tokenizer` (tokenizer.py) wraps either. The pattern needs the `regex`
package (`\\p{L}` is any letter of any script, which Python's `re` cannot say): the lessons and hub extras install it.
"""
import functools
import heapq
import json
import re
from collections import Counter, defaultdict

# GPT-2's pre-tokenisation (Radford et al. 2019, openai/gpt-2 encoder.py): English contractions, then runs of
# letters, of digits, of other symbols, each with at most one space in front; whitespace runs give their last space
# to the word after them (\s+(?!\S)), so " world" keeps its space and "a   b" splits as "a", "  ", " b".
PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# How far the pattern looks ahead: a piece that ends fewer characters than this before the end of the text seen so
# far may still become another once more text follows ("'r" then "e" is the contraction "'re").
LOOKAHEAD = 3


def bytes_to_unicode():
    """GPT-2's table from each of the 256 bytes to a printable character: the printable Latin-1 bytes stand for
    themselves, the others (controls, space, 0x7F-0xA0, 0xAD) take the characters from U+0100 on, in byte order.
    A token is then a string of visible characters: a space is 'Ġ' (U+0120), a newline 'Ċ' (U+010A)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    others = [b for b in range(256) if b not in printable]
    return {**{b: chr(b) for b in printable}, **{b: chr(256 + n) for n, b in enumerate(others)}}


CACHE_SIZE = 100_000             # pieces whose tokens an encoder remembers (text repeats its pieces endlessly)
STREAM_CHUNK = 1 << 14           # characters a stream gathers before it splits them (one regex call per 16 Ki)
BYTE_TO_CHAR = bytes_to_unicode()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


@functools.lru_cache(maxsize=None)
def _compiled(pattern):
    try:
        import regex
    except ImportError:
        raise ImportError("byte-level BPE splits text with GPT-2's pattern, which needs the regex package "
                          "(\\p{L}: a letter of any script): pip install regex, or pip install -e \".[hub]\"") from None
    return regex.compile(pattern)


def pre_tokenize(text, add_prefix_space=False):
    """text -> the pieces GPT-2's pattern splits it into (BPE never merges across two of them)."""
    return [piece for piece, _ in _piece_ends(text, add_prefix_space)]


def _piece_ends(text, add_prefix_space):
    """(piece, where it ends in text) for each piece of text, one at a time; add_prefix_space puts a space in front
    of a text that does not begin with one (it ends at 0 where it is a piece of its own)."""
    shift = int(add_prefix_space and not text.startswith(" "))
    for match in _compiled(PATTERN).finditer(" " * shift + text):
        yield match.group(), match.end() - shift


def to_byte_chars(piece):
    """A piece of text -> its UTF-8 bytes, each written as its character of the table ('é' -> 'Ã©')."""
    return bytes_to_chars(piece.encode("utf-8"))


def bytes_to_chars(data):
    """bytes -> the table form: each byte as its character (b' \\xc3\\xa9' -> 'ĠÃ©')."""
    return "".join(BYTE_TO_CHAR[b] for b in data)


def token_bytes(token):
    """A token (table form) -> the bytes it stands for. A token with a character outside the table (an added token
    kept as its text, such as '<pad> x') stands for its own UTF-8, as `tokenizers`' ByteLevel decoder reads it."""
    if all(c in CHAR_TO_BYTE for c in token):
        return bytes(CHAR_TO_BYTE[c] for c in token)
    return token.encode("utf-8")


class Splitter:
    """Cuts text into the units BPE encodes one at a time: the added tokens, whole (the longest where two start at
    the same place), and the pieces GPT-2's pattern splits each stretch between them into."""

    def __init__(self, added_tokens=(), add_prefix_space=False):
        by_length = sorted(added_tokens, key=len, reverse=True)
        if "" in by_length:
            raise ValueError("an added token is empty text, which would be cut out between every two characters "
                             "(tokenizers ignores it): leave it out")
        self.added = _compiled("|".join(re.escape(t) for t in by_length)) if by_length else None
        self.longest = len(by_length[0]) if by_length else 0
        self.add_prefix_space = add_prefix_space

    def split(self, text, starts_stretch=True):
        """Yields (unit, is_added, end) in order, end being where the unit ends in text. starts_stretch: text begins
        a stretch (add_prefix_space puts its space there), rather than going on with one."""
        start = 0
        for match in [*(self.added.finditer(text) if self.added else ()), None]:
            stop = match.start() if match else len(text)
            if stop > start:
                prefix = self.add_prefix_space and (starts_stretch or start > 0)
                for piece, end in _piece_ends(text[start:stop], prefix):
                    yield piece, False, start + end
            if match:
                yield match.group(), True, match.end()
                start = match.end()

    def stream(self, chunks):
        """(unit, is_added) of the text the chunks (a file's lines) make together: the units split gives for the
        whole text, while holding only the text not yet split. A unit leaves once what follows cannot change it:
        it ends LOOKAHEAD characters before the last place where an added token cut off by the end could begin.
        The held text is split again once it has doubled, so a piece as long as the file costs linear time."""
        held, size, starts_stretch, wait = [], 0, True, STREAM_CHUNK
        for chunk in chunks:
            if not isinstance(chunk, str):
                raise TypeError(f"a stream of text is strings (a file opened in text mode), not {type(chunk).__name__}")
            held.append(chunk)
            size += len(chunk)
            if size < wait:
                continue
            text = "".join(held)
            final, done = len(text) - max(self.longest - 1, 0) - LOOKAHEAD, 0
            for unit, is_added, end in self.split(text, starts_stretch):
                if end > final:
                    break
                yield unit, is_added
                done, starts_stretch = end, is_added
            held, size = [text[done:]], len(text) - done
            wait = max(STREAM_CHUNK, 2 * size)
        for unit, is_added, _ in self.split("".join(held), starts_stretch):
            yield unit, is_added


class Encoding:
    """What encode returns, as `tokenizers`' Encoding: the ids and the token strings."""

    def __init__(self, ids, tokens):
        self.ids, self.tokens = ids, tokens

    def __repr__(self):
        return f"Encoding(ids={self.ids}, tokens={self.tokens})"


class ByteLevelBPE:
    """A byte-level BPE in the table form: vocab maps each token (a string of table characters) to its id; merges is
    the ordered list of pairs (left, right), earliest first; special_tokens maps each special token's text to its id
    (it is cut out of the text before anything else, never split, and skipped by decode when asked). Other added
    tokens, which are cut out the same way but decoded always, go in added_tokens. An added token that is also a
    token of vocab gets vocab's id, as in `tokenizers`."""

    def __init__(self, vocab, merges, special_tokens=None, added_tokens=None, add_prefix_space=False,
                 ignore_merges=False):
        self.vocab = dict(vocab)
        self.merges = [tuple(pair) for pair in merges]
        self.ranks = {pair: rank for rank, pair in enumerate(self.merges)}   # a repeated pair keeps its last rank
        for left, right in self.merges:
            missing = [t for t in (left, right, left + right) if t not in self.vocab]
            if missing:
                raise ValueError(f"merge ({left!r}, {right!r}): {missing[0]!r} is not in the vocabulary")
        self.special_tokens = {t: self.vocab.get(t, i) for t, i in dict(special_tokens or {}).items()}
        self.added = {**{t: self.vocab.get(t, i) for t, i in dict(added_tokens or {}).items()}, **self.special_tokens}
        for token, i in [*self.vocab.items(), *self.added.items()]:
            if not is_id(i):
                raise ValueError(f"token {token!r} has the id {i!r}; an id is an integer from 0 (not a bool), as "
                                 "tokenizers requires")
        self.add_prefix_space, self.ignore_merges = add_prefix_space, ignore_merges
        self.id_to_text = {i: t for t, i in self.vocab.items()}
        self.id_to_text.update({i: t for t, i in self.added.items()})
        self.special_ids = set(self.special_tokens.values())
        self.splitter = Splitter(self.added, add_prefix_space)
        self.cache = {}
        _compiled(PATTERN)                # without the regex package, fail here, naming it, rather than at encode

    # --- the bytes form -------------------------------------------------------------------------------------
    @classmethod
    def from_bytes(cls, vocab, merges, special_tokens=None):
        """From the bytes form (CS336's): vocab {id: bytes}, merges [(bytes, bytes)] earliest first, special_tokens
        a list of texts. A special token whose UTF-8 is in vocab keeps that id; one that is not gets the next."""
        if not isinstance(vocab, dict) or not all(is_id(i) and isinstance(b, bytes) for i, b in vocab.items()):
            raise TypeError("from_bytes takes vocab as {id: bytes}, ids integers from 0 (the bytes form; "
                            "ByteLevelBPE(vocab, merges) takes the table form, {token: id})")
        by_bytes = {b: i for i, b in vocab.items()}
        if len(by_bytes) < len(vocab):
            twice = next(b for b in by_bytes if [*vocab.values()].count(b) > 1)
            raise ValueError(f"vocab gives {twice!r} two ids, {sorted(i for i, b in vocab.items() if b == twice)}")
        utf8 = {t: t.encode("utf-8") for t in special_tokens or [] if isinstance(t, str)}
        special = _special_ids(special_tokens, {t: by_bytes[b] for t, b in utf8.items() if b in by_bytes}, vocab)
        text = {i: t for t, i in special.items()}
        pairs = []
        for pair in merges:
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and all(isinstance(b, bytes) for b in pair)):
                raise TypeError(f"merge {pair!r} is not a pair of bytes (the bytes form)")
            pairs.append(tuple(bytes_to_chars(b) for b in pair))
        return cls({text.get(i, bytes_to_chars(b)): i for i, b in vocab.items()}, pairs, special)

    def to_bytes(self):
        """The bytes form, as CS336 asks for it: (vocab {id: bytes}, merges [(bytes, bytes)] earliest first). An
        added token's bytes are those decode gives for it."""
        return ({i: token_bytes(t) for i, t in sorted(self.id_to_text.items())},
                [(token_bytes(left), token_bytes(right)) for left, right in self.merges])

    def to_str(self):
        """This tokenizer as the text of a tokenizer.json, in the layout `tokenizers` writes (its to_str), so that
        `tokenizers.Tokenizer.from_str` reads the same ids."""
        byte_level = {"type": "ByteLevel", "add_prefix_space": self.add_prefix_space, "trim_offsets": True,
                      "use_regex": True}
        added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
                  "special": i in self.special_ids} for t, i in sorted(self.added.items(), key=lambda item: item[1])]
        return json.dumps({
            "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
            "pre_tokenizer": byte_level, "post_processor": {**byte_level, "trim_offsets": False},
            "decoder": byte_level,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": self.ignore_merges, "vocab": self.vocab, "merges": self.merges}},
            ensure_ascii=False)

    # --- reading GPT-2's vocab.json and merges.txt ----------------------------------------------------------
    @classmethod
    def from_files(cls, vocab_filepath, merges_filepath, special_tokens=None, add_prefix_space=False):
        """GPT-2's pair of files, as Hugging Face's GPT2Tokenizer and CS336's from_files read them (table form):
        vocab.json, {token: id}; merges.txt, a '#version' line, then one pair 'left right' a line, earliest first.
        special_tokens: a list of texts; one that is not in vocab.json gets the next id."""
        vocab, merges = read_vocab_merges(vocab_filepath, merges_filepath)
        try:
            return cls(vocab, merges, _special_ids(special_tokens, vocab, vocab.values()),
                       add_prefix_space=add_prefix_space)
        except ValueError as error:
            raise ValueError(f"{vocab_filepath} and {merges_filepath}: {error}") from None

    # --- reading a tokenizer.json ---------------------------------------------------------------------------
    @classmethod
    def from_file(cls, path):
        """The byte-level BPE of a tokenizer.json (GPT-2's, or one `tokenizers` wrote). Settings this encoder does
        not implement are refused, naming the key, rather than encoded differently."""
        spec = _read_json(path)
        if not isinstance(spec, dict) or not isinstance(spec.get("model"), dict):
            raise ValueError(f"{path} is not a tokenizer.json: it has no 'model' object")
        model = spec["model"]
        _require(path, "model.type", model.get("type", "BPE"), ("BPE",))
        for key, allowed in (("dropout", (None, 0, 0.0)), ("continuing_subword_prefix", (None, "")),
                             ("end_of_word_suffix", (None, "")), ("byte_fallback", (None, False))):
            _require(path, f"model.{key}", model.get(key), allowed)
        _require(path, "normalizer", spec.get("normalizer"), (None,))
        pre = _section(path, spec, "pre_tokenizer")
        _require(path, "pre_tokenizer.type", pre.get("type"), ("ByteLevel",))
        _require(path, "pre_tokenizer.use_regex", pre.get("use_regex", True), (True,))
        _require(path, "post_processor.type", _section(path, spec, "post_processor").get("type", "ByteLevel"),
                 ("ByteLevel",))
        _require(path, "decoder.type", _section(path, spec, "decoder").get("type"), ("ByteLevel",))
        vocab, merges = model.get("vocab"), model.get("merges")
        if not isinstance(vocab, dict) or not all(is_id(i) for i in vocab.values()):
            raise ValueError(f"{path}: model.vocab must be an object of token -> id, an integer from 0")
        if not isinstance(merges, list):
            raise ValueError(f"{path}: model.merges must be a list")
        special, added = read_added_tokens(path, spec.get("added_tokens") or [])
        pairs = [m.split(" ") if isinstance(m, str) else m for m in merges]     # "a b" (GPT-2's file) or ["a", "b"]
        for merge, pair in zip(merges, pairs):
            if not isinstance(pair, list) or len(pair) != 2 or not all(isinstance(t, str) for t in pair):
                raise ValueError(f"{path}: merge {merge!r} is not a pair of tokens")
        try:
            return cls(vocab, pairs, special, added, add_prefix_space=bool(pre.get("add_prefix_space")),
                       ignore_merges=bool(model.get("ignore_merges")))
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None

    # --- text -> ids ----------------------------------------------------------------------------------------
    def encode(self, text):
        """text -> Encoding(ids, tokens): added tokens cut out first, each stretch between them split by the
        pattern, each piece's bytes merged by rank."""
        ids, tokens = [], []
        for unit, is_added, _ in self.splitter.split(text):
            unit_tokens = [unit] if is_added else self.bpe(to_byte_chars(unit))
            ids.extend(self.added[unit] if is_added else self.vocab[token] for token in unit_tokens)
            tokens.extend(unit_tokens)
        return Encoding(ids, tokens)

    def encode_iterable(self, iterable):
        """Yields the ids of the text that the strings of iterable (an open file: its lines) make together, the
        same as encode("".join(iterable)).ids, holding a bounded stretch of text at a time (about STREAM_CHUNK
        characters, or twice the longest piece): a file larger than memory streams through."""
        for unit, is_added in self.splitter.stream(iterable):
            if is_added:
                yield self.added[unit]
            else:
                yield from (self.vocab[token] for token in self.bpe(to_byte_chars(unit)))

    def encode_batch(self, texts):
        return [self.encode(text) for text in texts]

    def bpe(self, word):
        """One piece, as table characters -> its tokens. Merge the adjacent pair of lowest rank (the earliest
        learned), the leftmost where it occurs twice, until no adjacent pair is a merge.

        Lesson 21 finds that pair by looking at every pair again after each merge, which takes time growing as the
        square of the piece's length (a run of 100,000 spaces or digits is one piece). Here a heap holds (rank,
        position) of the pairs, and the tokens a linked list, so a merge costs a logarithm: the order is the same."""
        if word in self.cache:
            return self.cache[word]
        if self.ignore_merges and word in self.vocab:    # Llama 3's files: a piece in the vocabulary stays whole
            return [word]
        missing = [c for c in word if c not in self.vocab]
        if missing:
            raise ValueError(f"byte {CHAR_TO_BYTE[missing[0]]:#04x} ({missing[0]!r}) is not in the vocabulary: this "
                             "file's BPE was trained without the full byte alphabet")
        parts, n = list(word), len(word)                  # parts[j] is None once merged into its left neighbour
        after, before = list(range(1, n + 1)), list(range(-1, n - 1))
        queue = [(self.ranks[pair], i) for i, pair in enumerate(zip(word, word[1:])) if pair in self.ranks]
        heapq.heapify(queue)
        while queue:
            rank, i = heapq.heappop(queue)
            j = after[i]
            if parts[i] is None or j == n or self.ranks.get((parts[i], parts[j])) != rank:
                continue                                   # that pair is gone: one side was merged since
            parts[i], parts[j] = parts[i] + parts[j], None
            after[i] = after[j]
            if after[i] < n:
                before[after[i]] = i
            for left in (before[i], i):                    # the two pairs the new token is part of
                if left >= 0 and after[left] < n and (parts[left], parts[after[left]]) in self.ranks:
                    heapq.heappush(queue, (self.ranks[parts[left], parts[after[left]]], left))
        parts = [part for part in parts if part is not None]
        if len(self.cache) < CACHE_SIZE:
            self.cache[word] = parts
        return parts

    # --- ids -> text ----------------------------------------------------------------------------------------
    def decode(self, ids, skip_special_tokens=False):
        """ids -> text: each token's bytes (token_bytes), read as UTF-8; bytes that are no UTF-8 (a piece of a
        character cut off) become U+FFFD, as in `tokenizers`. Special tokens stay in the text unless
        skip_special_tokens, as Tokenizer and transformers decode (`tokenizers`' own default is to skip them),
        so that decode(encode(text).ids) is text."""
        data = bytearray()
        for i in ids:
            if i not in self.id_to_text:
                raise ValueError(f"token id {i} is not in the vocabulary (ids run 0..{max(self.id_to_text)})")
            if not (skip_special_tokens and i in self.special_ids):
                data.extend(token_bytes(self.id_to_text[i]))
        return data.decode("utf-8", errors="replace")

    def decode_batch(self, sequences, skip_special_tokens=False):
        return [self.decode(ids, skip_special_tokens) for ids in sequences]

    # --- the vocabulary -------------------------------------------------------------------------------------
    def get_vocab(self, with_added_tokens=True):
        return {**self.vocab, **self.added} if with_added_tokens else dict(self.vocab)

    def get_vocab_size(self, with_added_tokens=True):
        return len(self.get_vocab(with_added_tokens))

    def token_to_id(self, token):
        return self.added.get(token, self.vocab.get(token))

    def id_to_token(self, i):
        return self.id_to_text.get(i)


def is_id(value):
    """Whether value can be a token id: an integer from 0, and not a bool (which Python counts as an int)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _special_ids(special_tokens, known, taken):
    """{text: id} for a list of special tokens: the id known gives a text, else the next after every id taken."""
    special, next_id = {}, max(taken, default=-1) + 1
    for token in special_tokens or []:
        if not isinstance(token, str):
            raise TypeError(f"special token {token!r} is not text (a str)")
        if token not in special:
            special[token] = known[token] if token in known else next_id
            next_id += token not in known
    return special


def _read_json(path):
    """The JSON in path; a file that is missing, not UTF-8, not JSON or nested too deeply is refused naming it."""
    try:
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot read {path} as JSON: {error}") from None
    except RecursionError:
        raise ValueError(f"cannot read {path} as JSON: it is nested too deeply") from None


def read_vocab_merges(vocab_filepath, merges_filepath):
    """GPT-2's vocab.json and merges.txt -> (vocab {token: id}, merges [(left, right)]), the table form. Lines of
    merges.txt that begin '#version' are skipped, as `tokenizers` skips them; every other must be one pair."""
    vocab = _read_json(vocab_filepath)
    if not isinstance(vocab, dict) or not all(is_id(i) for i in vocab.values()):
        raise ValueError(f"{vocab_filepath} is not GPT-2's vocab.json: it must be an object of token -> id, an "
                         "integer from 0")
    try:
        with open(merges_filepath, encoding="utf-8") as file:
            lines = file.read().splitlines()
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot read {merges_filepath} as text: {error}") from None
    merges = []
    for number, line in enumerate(lines, start=1):
        pair = line.split(" ")
        if line.startswith("#version"):
            continue
        if len(pair) != 2 or "" in pair:
            raise ValueError(f"{merges_filepath}, line {number}: {line[:80]!r} is not a pair of tokens 'left right'")
        merges.append(tuple(pair))
    return vocab, merges


def read_added_tokens(path, tokens):
    """({text: id} of the special tokens, {text: id} of the other added tokens) from a list of added tokens as
    tokenizer.json writes them ({"id": ..., "content": ..., "special": ...}); path names their file."""
    special, added = {}, {}
    for token in tokens:
        if not isinstance(token, dict) or not isinstance(token.get("content"), str) or not is_id(token.get("id")):
            raise ValueError(f"{path}: added token {token!r} needs a string 'content' and an 'id', an integer from 0")
        for key in ("single_word", "lstrip", "rstrip"):
            if token.get(key):
                raise ValueError(f"{path}: added token {token['content']!r} sets {key}, which the python "
                                 "backend does not implement; use backend='tokenizers'")
        (special if token.get("special") else added)[token["content"]] = token["id"]
    return special, added


def _section(path, spec, key):
    """spec[key], an object, or {} where the file has null or nothing."""
    value = spec.get(key) or {}
    if not isinstance(value, dict):
        raise ValueError(f"{path}: {key} must be an object or null, not {value!r}")
    return value


def _require(path, key, value, allowed):
    if value not in allowed:
        raise ValueError(f"{path}: {key} is {value!r}; the python backend reads byte-level BPE files with "
                         f"{key} {' or '.join(repr(a) for a in allowed)} only (backend='tokenizers' reads others)")


# --- training ---------------------------------------------------------------------------------------------------
def train(texts, vocab_size, special_tokens=(), min_frequency=0, add_prefix_space=False):
    """Learn a byte-level BPE (table form) from texts (an iterable of strings, each its own document), as
    `tokenizers`' BpeTrainer does with the ByteLevel pre-tokenizer and its 256-character alphabet: the same
    vocabulary and the same merges in the same order. The vocabulary: the special tokens (ids 0, 1, ...), the 256
    byte characters in code-point order, then one token per merge, until vocab_size tokens or no pair occurs
    min_frequency times. Special tokens are cut out of the texts first: no merge is learned from them or across
    them (`tokenizers`' trainer learns from them as text: give it the stretches between them to compare).

    Each step merges the pair of adjacent tokens that occurs most often, counted over every occurrence in every
    piece (overlaps too: 'aaa' holds ('a', 'a') twice) times the piece's count, into a new token everywhere, left
    to right. A tie goes to the pair whose ids are smallest, first the left id, then the right one.
    """
    if isinstance(texts, (str, bytes)):
        raise TypeError("train takes an iterable of texts (a str would be one text per character); "
                        "train_bpe(path, ...) learns from a file")
    names, ids = _alphabet(special_tokens, vocab_size)
    splitter = Splitter(special_tokens, add_prefix_space)
    words = _count_pieces((unit, is_added) for text in texts for unit, is_added, _ in splitter.split(text))
    return _learn(words, names, ids, vocab_size, special_tokens, min_frequency, add_prefix_space)


def train_bpe(input_path, vocab_size, special_tokens=None):
    """CS336's face of train: learn from the UTF-8 text file at input_path, read as one stream (the file need not
    fit in memory; its line ends kept as they are), special tokens cut out. Returns the bytes form: (vocab
    {id: bytes}, merges [(bytes, bytes)] earliest first). A tie of counts goes, as CS336's handout asks, to the
    lexicographically greater pair of bytes (train, as `tokenizers`, gives it to the smallest ids instead)."""
    special_tokens = list(special_tokens or [])
    names, ids = _alphabet(special_tokens, vocab_size)
    try:
        with open(input_path, encoding="utf-8", newline="") as lines:
            words = _count_pieces(Splitter(special_tokens).stream(lines))
    except UnicodeDecodeError as error:
        raise ValueError(f"{input_path} is not UTF-8 text ({error})") from None

    def greater_first(pair):
        return _Descending((token_bytes(names[pair[0]]), token_bytes(names[pair[1]])))
    return _learn(words, names, ids, vocab_size, special_tokens, tie=greater_first).to_bytes()


class _Descending:
    """Wraps a key so that a heap, which pops the smallest first, pops the greatest key first."""
    __slots__ = ("key",)

    def __init__(self, key):
        self.key = key

    def __lt__(self, other):
        return self.key > other.key

    def __eq__(self, other):
        return self.key == other.key


def _alphabet(special_tokens, vocab_size):
    """The tokens every trained vocabulary starts with, the special tokens then the 256 byte characters, as a list
    and as {token: id}; a vocab_size that cannot hold them is refused."""
    names, ids = [], {}
    for token in [*special_tokens, *sorted(BYTE_TO_CHAR.values())]:
        if token not in ids:
            ids[token] = len(names)
            names.append(token)
    if not is_id(vocab_size) or vocab_size < len(names):
        raise ValueError(f"vocab_size is {vocab_size!r}; a byte-level BPE holds its {len(names) - 256} special "
                         f"tokens and the 256 bytes, so vocab_size must be an integer of at least {len(names)}")
    return names, ids


def _count_pieces(units):
    """{piece in table characters: how often it occurs} over (unit, is_added) pairs, added tokens left out."""
    return Counter(to_byte_chars(unit) for unit, is_added in units if not is_added)


def _learn(words, names, ids, vocab_size, special_tokens, min_frequency=0, add_prefix_space=False, tie=None):
    """The merges learned from the pieces' counts (see train); names and ids (the alphabet) grow as it merges.
    tie(pair of ids) orders pairs of equal counts, the smallest first; by default the ids themselves.

    Lesson 21 recounts every pair after every merge. Here, as in `tokenizers`, a merge changes only the counts of
    the pairs around each place it merges, and a heap holds (count, pair, the pieces where the pair was made); an
    entry whose count has gone down since it was pushed goes back with the current count when it comes up. The
    merges are the same: a pair is made only when one of its two tokens is, and each token is made by one merge
    (where a token's text is whole in a piece, nothing merged across its ends, so that text was merged the same way
    in every piece), so each pair has one entry, listing every piece that holds it.
    """
    pieces = [[ids[c] for c in word] for word in words]
    counts = list(words.values())
    pair_counts, where = Counter(), defaultdict(set)
    for i, piece in enumerate(pieces):
        for pair in zip(piece, piece[1:]):
            pair_counts[pair] += counts[i]
            where[pair].add(i)
    queue = []                         # entries (-count, tie, pair, pieces): the most frequent, then the first tie
    tie = tie or (lambda pair: pair)

    def push(found):
        for pair, positions in found.items():
            if pair_counts[pair] > 0:
                heapq.heappush(queue, (-pair_counts[pair], tie(pair), pair, positions))
    push(where)
    merges = []
    while len(names) < vocab_size and queue:
        minus_count, order, pair, positions = heapq.heappop(queue)
        if -minus_count != pair_counts[pair]:
            heapq.heappush(queue, (-pair_counts[pair], order, pair, positions))
            continue
        if -minus_count < max(1, min_frequency):
            break
        token = names[pair[0]] + names[pair[1]]
        if token not in ids:
            ids[token] = len(names)
            names.append(token)
        merges.append(pair)
        created = defaultdict(set)
        for i in positions:
            for changed, change in _merge_in_place(pieces[i], pair, ids[token]):
                pair_counts[changed] += change * counts[i]
                if change > 0:
                    created[changed].add(i)
        push(created)
    special = {t: ids[t] for t in special_tokens}
    return ByteLevelBPE(ids, [(names[a], names[b]) for a, b in merges], special, add_prefix_space=add_prefix_space)


def _merge_in_place(piece, pair, new):
    """Replace each occurrence of pair in piece (a list of ids), left to right, by new; returns the changes of the
    neighbouring pairs' counts, (pair, -1 or +1), as the merge goes."""
    changes, i = [], 0
    while i < len(piece) - 1:
        if (piece[i], piece[i + 1]) == pair:
            if i > 0:
                changes += [((piece[i - 1], pair[0]), -1), ((piece[i - 1], new), 1)]
            piece[i:i + 2] = [new]
            if i < len(piece) - 1:
                changes += [((pair[1], piece[i + 1]), -1), ((new, piece[i + 1]), 1)]
        i += 1
    return changes
