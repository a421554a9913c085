"""The byte-level BPE built here (tinyattn/preprocessing/bpe.py) against GPT-2's documented table and pattern,
hand-worked merges, and the `tokenizers` package: the same ids on 1,000 probe strings, exact decoding, the same trained
merges."""
import io
import json
import os
import re
import subprocess
import sys
import sysconfig
import tracemalloc
import unicodedata
from collections import Counter

import pytest

from tinyattn.preprocessing import Tokenizer, bpe
from tinyattn.preprocessing.probe_strings import CATEGORIES, probe_strings
from tinyattn.datasets.text import DEFAULT_MODULES
from tinyattn.hub import PretrainedError

SPECIAL = ["<|endoftext|>", "<pad>"]


def corpus(modules=4):
    folder = sysconfig.get_paths()["stdlib"]
    texts = []
    for name in DEFAULT_MODULES[:modules]:
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            texts.append(f.read())
    return texts + [text for _, text in probe_strings(3000, seed=1, special_tokens=SPECIAL)]


def train_with_tokenizers(texts, vocab_size, add_prefix_space=False, min_frequency=0):
    """The tokenizers package's own byte-level BPE trainer, set up as its ByteLevelBPETokenizer does."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL, min_frequency=min_frequency, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A folder with a tokenizer.json written by tokenizers' trainer, and that trainer's tokenizer."""
    folder = tmp_path_factory.mktemp("bpe")
    tok = train_with_tokenizers(corpus(), 1500)
    tok.save(str(folder / "tokenizer.json"))
    return folder, tok


def test_byte_table_is_gpt2s():
    table = bpe.bytes_to_unicode()
    assert sorted(table) == list(range(256)) and len(set(table.values())) == 256
    assert all(table[b] == chr(b) for b in [*range(33, 127), *range(0xA1, 0xAD), *range(0xAE, 0x100)])
    # the rest, in byte order, from U+0100: GPT-2's vocabulary writes a space 'Ġ', a newline 'Ċ', a tab 'ĉ'
    assert (table[0], table[ord(" ")], table[ord("\n")], table[ord("\t")]) == ("Ā", "Ġ", "Ċ", "ĉ")
    assert (table[0x7F], table[0xA0], table[0xAD]) == ("ġ", "ł", "Ń")
    assert all(c.isprintable() and not c.isspace() for c in table.values())


def test_pattern_splits_as_gpt2():
    assert bpe.pre_tokenize("Hello world's  end\n\n") == ["Hello", " world", "'s", " ", " end", "\n\n"]
    assert bpe.pre_tokenize("I'm 2024 über-fast!!") == ["I", "'m", " 2024", " über", "-", "fast", "!!"]
    assert bpe.pre_tokenize("x  = 1\n    return") == ["x", " ", " =", " 1", "\n   ", " return"]
    assert bpe.pre_tokenize("We’ll") == ["We", "’", "ll"]              # only the straight apostrophe is special
    assert bpe.pre_tokenize("hi", add_prefix_space=True) == [" hi"]
    assert bpe.to_byte_chars(" é\n") == "ĠÃ©Ċ"


def test_pattern_matches_tokenizers_on_unicode():
    """Every 101st code point assigned in Python's Unicode (14.0), in letters, digits, spaces and apostrophes around
    it, splits as tokenizers' ByteLevel pre-tokenizer splits it. (Code points assigned later differ: the regex
    package knows Unicode 17's letters, tokenizers' Oniguruma does not.)"""
    pre_tokenizers = pytest.importorskip("tokenizers.pre_tokenizers")
    theirs = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    checked = 0
    for code in range(0, 0x110000, 101):
        c = chr(code)
        if unicodedata.category(c) in ("Cn", "Cs"):
            continue
        text = f"a{c}b {c}{c} 1{c}'s{c}\n{c} "
        assert [bpe.to_byte_chars(p) for p in bpe.pre_tokenize(text)] == \
            [p for p, _ in theirs.pre_tokenize_str(text)], hex(code)
        checked += 1
    assert checked > 2000


def test_encode_by_rank_hand_worked():
    chars = {c: i for i, c in enumerate("abcd")}
    vocab = {**chars, "ab": 4, "bc": 5, "aa": 6, "abc": 7}
    assert bpe.ByteLevelBPE(vocab, [("a", "b"), ("b", "c")]).bpe("abc") == ["ab", "c"]          # lower rank first
    assert bpe.ByteLevelBPE(vocab, [("b", "c"), ("a", "b")]).bpe("abc") == ["a", "bc"]
    assert bpe.ByteLevelBPE(vocab, [("a", "a")]).bpe("aaa") == ["aa", "a"]                    # leftmost first
    assert bpe.ByteLevelBPE(vocab, [("a", "b"), ("ab", "c")]).bpe("abcab") == ["abc", "ab"]
    assert bpe.ByteLevelBPE(vocab, []).bpe("dcba") == ["d", "c", "b", "a"]
    with pytest.raises(ValueError, match="'ab'.*not in the vocabulary"):
        bpe.ByteLevelBPE(chars, [("a", "b")])


def test_the_same_ids_as_tokenizers_on_1000_strings(trained):
    folder, theirs = trained
    mine = bpe.ByteLevelBPE.from_file(folder / "tokenizer.json")
    strings = probe_strings(1000, seed=0, special_tokens=SPECIAL)
    assert all(sum(c == category for c, _ in strings) >= 100 for category in CATEGORIES)
    texts = [text for _, text in strings]
    ours = [mine.encode(text) for text in texts]
    for text, encoding, reference in zip(texts, ours, theirs.encode_batch(texts)):
        assert encoding.ids == reference.ids, text
        assert encoding.tokens == reference.tokens, text
    for text, encoding in zip(texts, ours):
        assert mine.decode(encoding.ids) == text                                        # special tokens kept
        assert mine.decode(encoding.ids, skip_special_tokens=True) == theirs.decode(encoding.ids)  # its default
    assert mine.get_vocab_size() == theirs.get_vocab_size() == 1500
    assert mine.get_vocab() == theirs.get_vocab()
    assert mine.token_to_id("<pad>") == theirs.token_to_id("<pad>") == 1
    assert mine.id_to_token(300) == theirs.id_to_token(300)


def test_gpt2s_file_layout(trained, tmp_path):
    """GPT-2's own tokenizer.json is older than the one tokenizers writes today: merges as "a b" strings, no
    model.type, empty strings for the subword prefix and suffix, no use_regex, and <|endoftext|> as the last id,
    added with normalized true. Both read that layout to the same ids."""
    tokenizers = pytest.importorskip("tokenizers")
    folder, _ = trained
    spec = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = {t: i for t, i in spec["model"]["vocab"].items() if t not in SPECIAL}
    vocab = {t: n for n, t in enumerate(sorted(vocab, key=vocab.get))}
    vocab["<|endoftext|>"] = len(vocab)
    spec["added_tokens"] = [{"id": len(vocab) - 1, "special": True, "content": "<|endoftext|>", "single_word": False,
                             "lstrip": False, "rstrip": False, "normalized": True}]
    spec["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True}
    spec["model"] = {"dropout": None, "unk_token": None, "continuing_subword_prefix": "", "end_of_word_suffix": "",
                     "fuse_unk": False, "vocab": vocab, "merges": [" ".join(m) for m in spec["model"]["merges"]]}
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    mine = bpe.ByteLevelBPE.from_file(tmp_path / "tokenizer.json")
    theirs = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    texts = [text for _, text in probe_strings(300, seed=3)]
    assert [mine.encode(t).ids for t in texts] == [e.ids for e in theirs.encode_batch(texts)]
    assert mine.encode("a<|endoftext|>").ids[-1] == len(vocab) - 1


def test_long_pieces_and_batches_as_tokenizers(trained):
    """A piece can be as long as the text (100,000 spaces, a 30,000-letter word): merged through a heap, not by
    rescanning the piece after every merge."""
    folder, theirs = trained
    mine = bpe.ByteLevelBPE.from_file(folder / "tokenizer.json")
    texts = [" " * 100_000 + "x", "selfreturn" * 3_000, "1234567890" * 2_000, "\n" * 5_000 + "    def"]
    assert [e.ids for e in mine.encode_batch(texts)] == [e.ids for e in theirs.encode_batch(texts)]
    ids = [e.ids for e in theirs.encode_batch(["a<|endoftext|>b", "<pad> é"])]
    for skip in (False, True):
        assert mine.decode_batch(ids, skip) == theirs.decode_batch(ids, skip_special_tokens=skip)


def test_ignore_merges_as_tokenizers(trained, tmp_path):
    """Llama 3's files set model.ignore_merges: a piece that is a token of the vocabulary stays whole, whatever
    the merges would make of it."""
    tokenizers = pytest.importorskip("tokenizers")
    folder, _ = trained
    spec = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    spec["model"]["ignore_merges"] = True
    spec["model"]["vocab"]["Ġzqxj"] = len(spec["model"]["vocab"])               # no merges lead to it
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    mine = bpe.ByteLevelBPE.from_file(tmp_path / "tokenizer.json")
    theirs = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    texts = ["a zqxj b"] + [text for _, text in probe_strings(200, seed=4, special_tokens=SPECIAL)]
    assert [mine.encode(t).ids for t in texts] == [e.ids for e in theirs.encode_batch(texts)]
    assert mine.encode("a zqxj").tokens == ["a", "Ġzqxj"]


def test_add_prefix_space_as_tokenizers(tmp_path):
    theirs = train_with_tokenizers(corpus(2), 600, add_prefix_space=True)
    theirs.save(str(tmp_path / "tokenizer.json"))
    mine = bpe.ByteLevelBPE.from_file(tmp_path / "tokenizer.json")
    texts = [text for _, text in probe_strings(300, seed=2, special_tokens=SPECIAL)] + ["", "x", " x"]
    assert [mine.encode(t).ids for t in texts] == [e.ids for e in theirs.encode_batch(texts)]


def test_decode_replaces_broken_utf8_as_tokenizers():
    decoders = pytest.importorskip("tokenizers.decoders")
    import random
    rng = random.Random(0)
    alphabet = bpe.ByteLevelBPE({c: b for b, c in bpe.BYTE_TO_CHAR.items()}, [])
    euro = "€".encode()                                                   # e2 82 ac
    assert alphabet.decode([euro[0], euro[1], ord("a")]) == "\ufffda"   # a cut-off character is one U+FFFD
    for _ in range(2000):
        data = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        assert alphabet.decode(list(data)) == decoders.ByteLevel().decode([bpe.BYTE_TO_CHAR[b] for b in data])
    with pytest.raises(ValueError, match="token id 256 is not in the vocabulary"):
        alphabet.decode([1, 256])


def test_trainer_hand_worked():
    """One piece 'abcd': three pairs seen once each; the tie goes to the smallest ids ('a' < 'b' < 'c' in the byte
    characters' code-point order), then the new token 'ab' (id 256) comes after 'c', so ('c', 'd') wins the next tie.
    'aaaa' holds ('a', 'a') three times (overlaps count) and merges into 'aa aa'."""
    model = bpe.train(["abcd"], 256 + 3)
    assert model.merges == [("a", "b"), ("c", "d"), ("ab", "cd")]
    assert model.vocab["ab"] == 256 and model.vocab["abcd"] == 258
    model = bpe.train(["aaaa", "abab"], 256 + 2)
    assert model.merges == [("a", "a"), ("a", "b")] and model.bpe("aaaa") == ["aa", "aa"]
    model = bpe.train(["x y"], 300, special_tokens=SPECIAL)
    assert model.vocab["<|endoftext|>"] == 0 and model.vocab["!"] == 2 and len(model.vocab) == 2 + 256 + 1
    # special tokens are cut out first: nothing is learned from '<|' nor across 'x<pad>y'
    assert bpe.train(["x<|endoftext|>", "<|endoftext|>y", "x<pad>y"] * 3, 300, special_tokens=SPECIAL).merges == []
    assert bpe.train(["x<|endoftext|>", "<|endoftext|>y", "x<pad>y"] * 3, 259).merges[0] == ("<", "|")
    # ('c', 'd') occurs once, below min_frequency; ('ab', 'ab') twice, once the two 'abab' have merged 'ab'
    assert bpe.train(["abab", "abab", "cd"], 300, min_frequency=2).merges == [("a", "b"), ("ab", "ab")]


@pytest.mark.parametrize("min_frequency", [0, 2])
def test_trainer_learns_the_merges_tokenizers_learns(min_frequency):
    """tokenizers' trainer learns from special tokens as from any text: it gets the stretches between them, which
    is what bpe.train learns from."""
    texts = corpus()
    stretches = [part for text in texts for part in re.split("|".join(map(re.escape, SPECIAL)), text)]
    assert len(stretches) > len(texts) + 500
    theirs = json.loads(train_with_tokenizers(stretches, 2500, min_frequency=min_frequency).to_str())
    mine = bpe.train(texts, 2500, special_tokens=SPECIAL, min_frequency=min_frequency)
    their_merges = [tuple(m.split(" ") if isinstance(m, str) else m) for m in theirs["model"]["merges"]]
    assert len(their_merges) > 1500
    assert mine.merges == their_merges
    assert mine.vocab == theirs["model"]["vocab"]


def test_tokenizer_python_backend(trained):
    folder, _ = trained
    python, reference = Tokenizer.from_pretrained(folder, backend="python"), Tokenizer.from_pretrained(folder)
    text = "Attention is all you need<|endoftext|> — ça marche, 注意力! 👩🏽‍🔬"
    assert python.encode(text) == reference.encode(text) and python.tokens(text) == reference.tokens(text)
    assert python.decode(python.encode(text)) == reference.decode(reference.encode(text))
    assert python.vocab_size == reference.vocab_size
    with pytest.raises(ValueError, match="backend must be 'tokenizers' or 'python', not 'rust'"):
        Tokenizer.from_pretrained(folder, backend="rust")


def run_without(package, code, folder):
    """code run in a fresh process where importing package fails, as where it is not installed."""
    block = f"import sys; sys.modules[{package!r}] = None\n"
    return subprocess.run([sys.executable, "-c", block + code, str(folder)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(__file__))})


def test_python_backend_needs_no_tokenizers_package(trained):
    folder, theirs = trained
    result = run_without("tokenizers", "import sys; from tinyattn.preprocessing import Tokenizer\n"
                                       "print(Tokenizer.from_pretrained(sys.argv[1], backend='python').encode("
                                       "'def f(x): return x'))", folder)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(theirs.encode("def f(x): return x").ids)
    result = run_without("regex", "import sys; from tinyattn.preprocessing import Tokenizer\n"
                                  "Tokenizer.from_pretrained(sys.argv[1], backend='python')", folder)
    assert "needs the regex package" in result.stderr and "pip install regex" in result.stderr


@pytest.mark.parametrize("change, message", [
    (lambda spec: spec.update(normalizer={"type": "NFC"}), "normalizer is {'type': 'NFC'}"),
    (lambda spec: spec.update(pre_tokenizer={"type": "Whitespace"}), "pre_tokenizer.type is 'Whitespace'"),
    (lambda spec: spec.update(post_processor={"type": "TemplateProcessing"}), "post_processor.type"),
    (lambda spec: spec["model"].update(dropout=0.1), "model.dropout is 0.1"),
    (lambda spec: spec["model"].update(type="WordPiece"), "model.type is 'WordPiece'"),
    (lambda spec: spec["added_tokens"][0].update(lstrip=True), "'<|endoftext|>' sets lstrip"),
    (lambda spec: spec["model"]["merges"].append(["Ġ", "zzzz"]), "'zzzz' is not in the vocabulary"),
    (lambda spec: spec["model"]["merges"].append("a b c"), "merge 'a b c' is not a pair"),
    (lambda spec: spec.pop("model"), "is not a tokenizer.json"),
    (lambda spec: spec["model"]["vocab"].update(x="7"), "model.vocab must be an object of token -> id, an integer"),
    (lambda spec: spec["model"]["vocab"].update(x=-1), "model.vocab must be an object of token -> id, an integer"),
    (lambda spec: spec["model"]["vocab"].update(x=True), "model.vocab must be an object of token -> id, an integer"),
    (lambda spec: spec["added_tokens"][0].pop("id"), "needs a string 'content' and an 'id', an integer from 0"),
    (lambda spec: spec["added_tokens"][0].update(id=False), "needs a string 'content' and an 'id', an integer"),
    (lambda spec: spec["added_tokens"][0].update(content=""), "an added token is empty text"),
    (lambda spec: spec.update(decoder="ByteLevel"), "decoder must be an object or null, not 'ByteLevel'"),
])
def test_unreadable_files_are_refused_by_name(trained, tmp_path, change, message):
    folder, _ = trained
    spec = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    change(spec)
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    with pytest.raises(PretrainedError, match=str(tmp_path).replace("\\", "\\\\")) as error:
        Tokenizer.from_pretrained(tmp_path, backend="python")
    assert message in str(error.value)
    (tmp_path / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(PretrainedError, match="cannot read .* as JSON"):
        Tokenizer.from_pretrained(tmp_path, backend="python")


def test_bytes_form_as_cs336_speaks_it(trained):
    """to_bytes: {id: bytes} and [(bytes, bytes)]; the bytes of an encoding's ids, joined, are the text's UTF-8
    (a special token's are its own), each merge's two sides make a token's bytes; Tokenizer(vocab, merges,
    special_tokens) reads the form back to the same ids."""
    folder, _ = trained
    mine = bpe.ByteLevelBPE.from_file(folder / "tokenizer.json")
    vocab, merges = mine.to_bytes()
    assert sorted(vocab) == list(range(1500)) and all(type(b) is bytes for b in vocab.values())
    assert vocab[mine.token_to_id("Ġthe")] == b" the" and vocab[0] == b"<|endoftext|>" and vocab[2] == b"!"
    made = set(vocab.values())
    assert len(merges) == len(mine.merges) > 1000 and all(left + right in made for left, right in merges)
    assert merges[0] == tuple(bpe.token_bytes(t) for t in mine.merges[0])
    texts = [text for _, text in probe_strings(300, seed=6, special_tokens=SPECIAL)]
    assert all(b"".join(vocab[i] for i in mine.encode(text).ids) == text.encode("utf-8") for text in texts)
    again = Tokenizer(vocab, merges, SPECIAL)
    assert [again.encode(text) for text in texts] == [mine.encode(text).ids for text in texts]
    assert again.backend_tokenizer.to_bytes() == (vocab, merges)
    assert [again.decode(again.encode(text)) for text in texts] == texts
    extended = Tokenizer(vocab, merges, [*SPECIAL, "<|im_start|>"])          # not in vocab: the next id
    assert extended.encode("a<|im_start|>") == [mine.token_to_id("a"), 1500] and extended.vocab_size == 1501
    with pytest.raises(TypeError, match="either vocab and merges"):
        Tokenizer()
    with pytest.raises(TypeError, match=r"from_bytes takes vocab as \{id: bytes\}"):
        Tokenizer(mine.vocab, mine.merges)                                     # the table form
    with pytest.raises(TypeError, match="'a', 'b'.* is not a pair of bytes"):
        Tokenizer(vocab, [("a", "b")])
    with pytest.raises(ValueError, match=r"vocab gives b'!' two ids, \[2, 1500\]"):
        Tokenizer({**vocab, 1500: b"!"}, merges)


def test_gpt2s_vocab_and_merges_files(trained, tmp_path):
    """One tokenizer in both layouts, tokenizer.json and GPT-2's vocab.json + merges.txt (written by tokenizers'
    own BPE.save, with transformers' tokenizer_config.json listing the added tokens): every reader gives the ids
    tokenizers gives on 1,000 probe strings, reading the pair itself as its ByteLevelBPETokenizer does."""
    tokenizers = pytest.importorskip("tokenizers")
    folder, theirs = trained
    pair = tmp_path / "pair"
    pair.mkdir()
    theirs.model.save(str(pair))
    assert (pair / "merges.txt").read_text(encoding="utf-8").startswith("#version: 0.2\n")
    added = {str(theirs.token_to_id(t)): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                           "single_word": False, "special": True} for t in SPECIAL}
    (pair / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": added}), encoding="utf-8")

    def read_pair(special_tokens, add_prefix_space=False):
        reference = tokenizers.Tokenizer(tokenizers.models.BPE.from_file(str(pair / "vocab.json"),
                                                                         str(pair / "merges.txt")))
        reference.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
        reference.decoder = tokenizers.decoders.ByteLevel()
        reference.add_special_tokens(special_tokens)
        return reference
    texts = [text for _, text in probe_strings(1000, seed=0, special_tokens=SPECIAL)]
    expected = [e.ids for e in read_pair(SPECIAL).encode_batch(texts)]
    assert expected == [e.ids for e in theirs.encode_batch(texts)]
    readers = {"tokenizer.json, python": Tokenizer.from_pretrained(folder, backend="python"),
               "pair, python": Tokenizer.from_pretrained(pair, backend="python"),
               "pair, tokenizers": Tokenizer.from_pretrained(pair),
               "from_files": Tokenizer.from_files(pair / "vocab.json", pair / "merges.txt", SPECIAL)}
    for name, tokenizer in readers.items():
        assert [tokenizer.encode(text) for text in texts] == expected, name
        assert tokenizer.vocab_size == 1500, name
        assert tokenizer.decode(expected[7]) == texts[7], name
    # without added_tokens_decoder, GPT2Tokenizer's one special token, <|endoftext|>; add_prefix_space as the file says
    (pair / "tokenizer_config.json").write_text('{"add_prefix_space": true}', encoding="utf-8")
    expected = [e.ids for e in read_pair(SPECIAL[:1], add_prefix_space=True).encode_batch(texts)]
    assert expected != [e.ids for e in read_pair(SPECIAL[:1]).encode_batch(texts)]
    for backend in ("python", "tokenizers"):
        tokenizer = Tokenizer.from_pretrained(pair, backend=backend)
        assert [tokenizer.encode(text) for text in texts] == expected, backend


def test_damaged_vocab_and_merges_are_refused_by_name(trained, tmp_path):
    _, theirs = trained
    theirs.model.save(str(tmp_path))
    merges = (tmp_path / "merges.txt").read_text(encoding="utf-8")
    lines = merges.count("\n")
    for extra, message in [("a b c\n", f"merges.txt, line {lines + 1}: 'a b c' is not a pair of tokens"),
                           ("\n", f"merges.txt, line {lines + 1}: '' is not a pair"),
                           ("Ġ zzzz\n", r"vocab.json, .*merges.txt and .*: merge \('Ġ', 'zzzz'\): 'zzzz' is not")]:
        (tmp_path / "merges.txt").write_text(merges + extra, encoding="utf-8")
        with pytest.raises(PretrainedError, match=message):
            Tokenizer.from_pretrained(tmp_path, backend="python")
    (tmp_path / "merges.txt").unlink()
    with pytest.raises(ValueError, match="cannot read .*merges.txt as text"):
        Tokenizer.from_files(tmp_path / "vocab.json", tmp_path / "merges.txt")
    with pytest.raises(PretrainedError, match="holds no tokenizer.json"):
        Tokenizer.from_pretrained(tmp_path, backend="python")
    (tmp_path / "merges.txt").write_text(merges, encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text('{"add_bos_token": true}', encoding="utf-8")
    for backend in ("python", "tokenizers"):
        with pytest.raises(PretrainedError, match="tokenizer_config.json sets add_bos_token: GPT2Tokenizer would"):
            Tokenizer.from_pretrained(tmp_path, backend=backend)
    (tmp_path / "tokenizer_config.json").unlink()
    for content, message in [("[" * 100_000 + "]" * 100_000, "vocab.json as JSON: it is nested too deeply"),
                              ('["a"]', "vocab.json is not GPT-2's vocab.json"),
                              ('{"a": -1}', "vocab.json is not GPT-2's vocab.json")]:
        (tmp_path / "vocab.json").write_text(content, encoding="utf-8")
        with pytest.raises(PretrainedError, match=message):
            Tokenizer.from_pretrained(tmp_path, backend="python")


def test_encode_iterable_gives_the_ids_of_the_whole_text(trained, monkeypatch):
    """Cut anywhere (in a contraction, a run of spaces, a special token), the pieces give the ids of the whole text;
    each line encoded by itself would not ('x\\n    return' is 'x', '\\n   ', ' return')."""
    folder, _ = trained
    tokenizer = Tokenizer.from_pretrained(folder, backend="python")
    lines = ["x\n", "    return"]
    assert sum((tokenizer.encode(line) for line in lines), []) != tokenizer.encode("".join(lines))
    text = "".join(t for _, t in probe_strings(300, seed=7, special_tokens=SPECIAL)) + " we're <|endoftext|>\n\n  x"
    whole = tokenizer.encode(text)
    assert list(tokenizer.encode_iterable(io.StringIO(text))) == whole                       # a file's lines
    prefixed = bpe.ByteLevelBPE(tokenizer.backend_tokenizer.vocab, tokenizer.backend_tokenizer.merges,
                                tokenizer.backend_tokenizer.special_tokens, add_prefix_space=True)
    monkeypatch.setattr(bpe, "STREAM_CHUNK", 1)                                 # split again after every piece
    assert list(tokenizer.encode_iterable(lines)) == tokenizer.encode("".join(lines))
    for size in (1, 2, 3, 5, 13):
        chunks = [text[i:i + size] for i in range(0, len(text), size)]
        assert list(tokenizer.encode_iterable(chunks)) == whole, size
        assert list(prefixed.encode_iterable(chunks)) == prefixed.encode(text).ids, size
    with pytest.raises(TypeError, match="a stream of text is strings .*, not bytes"):
        list(tokenizer.encode_iterable([b"a binary file's line"]))
    with pytest.raises(TypeError, match="tokenizers package has no streaming encode: .*backend='python'"):
        Tokenizer.from_pretrained(folder).encode_iterable(lines)


def test_encode_iterable_holds_bounded_memory(trained, tmp_path):
    """A 1.5 MB file streams through holding a small fraction of it: the text held at a time is bounded by
    STREAM_CHUNK (read whole, the text and its ids take several times the file's size)."""
    folder, _ = trained
    mine = bpe.ByteLevelBPE.from_file(folder / "tokenizer.json")
    text = "".join(t for _, t in probe_strings(1000, seed=8, special_tokens=SPECIAL))
    count = len(mine.encode(text).ids)              # this fills the cache of pieces: what is measured is the stream
    path = tmp_path / "big.txt"
    path.write_text(text * (1_500_000 // len(text.encode("utf-8")) + 1), encoding="utf-8", newline="")
    size = path.stat().st_size
    tracemalloc.start()
    try:
        with open(path, encoding="utf-8", newline="") as file:
            streamed = sum(1 for _ in mine.encode_iterable(file))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert streamed >= count * (size // len(text.encode("utf-8"))) * 0.99
    assert peak < size / 4, f"peak {peak:,} bytes streaming a file of {size:,}"      # 240 kB of 1.5 MB, measured


def train_as_cs336_handout(text, vocab_size, special_tokens):
    """CS336's BPE training as its handout words it, slowly: count the pieces of the stretches between special
    tokens, then again and again recount every pair and merge the most frequent, a tie going to the greater pair
    of bytes. Vocabulary: the special tokens, the 256 bytes, the merges (ids need not agree with anyone's)."""
    words = Counter(tuple(bytes([b]) for b in piece.encode("utf-8"))
                    for stretch in re.split("|".join(map(re.escape, special_tokens)), text)
                    for piece in bpe.pre_tokenize(stretch))
    merges = []
    while len(special_tokens) + 256 + len(merges) < vocab_size:
        pairs = Counter()
        for word, count in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += count
        if not pairs:
            break
        best = max(pairs, key=lambda pair: (pairs[pair], pair))
        merges.append(best)
        merged = Counter()
        for word, count in words.items():
            out, i = [], 0
            while i < len(word):
                if word[i:i + 2] == best:
                    out.append(best[0] + best[1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += count
        words = merged
    return merges


def test_train_bpe_from_a_file(tmp_path):
    """train_bpe(path, vocab_size, special_tokens): the file as one text streamed in pieces, its line ends kept,
    special tokens cut out, ties to the greater pair of bytes: the merges of CS336's handout, in order."""
    text = "".join(corpus(2)[:2])[:40_000].replace("\n", "\r\n") + "<|endoftext|>" + \
        "<|endoftext|>".join(t for _, t in probe_strings(600, seed=9, special_tokens=SPECIAL))
    path = tmp_path / "corpus.txt"
    path.write_bytes(text.encode("utf-8"))
    assert len(text) > 3 * bpe.STREAM_CHUNK
    vocab, merges = bpe.train_bpe(path, 408, SPECIAL)
    assert merges == train_as_cs336_handout(text, 408, SPECIAL)
    assert [vocab[i] for i in range(2)] == [s.encode() for s in SPECIAL] and sorted(vocab) == list(range(408))
    assert set(vocab.values()) == {*(s.encode() for s in SPECIAL), *(bytes([b]) for b in range(256)),
                                   *(left + right for left, right in merges)}
    assert (b"\r", b"\n") in merges
    # the same counts, ties broken as tokenizers breaks them: another order
    assert [bpe.token_bytes(t) for pair in bpe.train([text], 408, SPECIAL).merges for t in pair] != \
        [b for pair in merges for b in pair]
    for size in (-5, 257, True, 408.0):
        with pytest.raises(ValueError, match=f"vocab_size is {size!r}; .* 2 special tokens and the 256 bytes, so"):
            bpe.train_bpe(path, size, SPECIAL)
    with pytest.raises(ValueError, match="vocab_size is -5; .* at least 256"):
        bpe.train(["abc"], -5)
    with pytest.raises(TypeError, match="train takes an iterable of texts"):
        bpe.train("abc", 300)
    path.write_bytes(b"ab\xff")
    with pytest.raises(ValueError, match="corpus.txt is not UTF-8 text"):
        bpe.train_bpe(path, 300)


def test_deeply_nested_file_is_refused_by_name(tmp_path):
    (tmp_path / "tokenizer.json").write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(PretrainedError, match="tokenizer.json as JSON: it is nested too deeply"):
        Tokenizer.from_pretrained(tmp_path, backend="python")


def test_added_token_of_the_vocabulary_keeps_its_id_as_tokenizers(trained, tmp_path):
    """An added token that is already a token of the vocabulary ('Ġthe', 'ing') keeps the vocabulary's id, whatever
    id the file gives it; it is still cut out of the text first."""
    tokenizers = pytest.importorskip("tokenizers")
    folder, _ = trained
    spec = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    words = [t for t in ("Ġthe", "ing", "self") if t in spec["model"]["vocab"]]
    assert len(words) == 3
    spec["added_tokens"] += [{"id": 2000 + n, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                              "normalized": False, "special": n == 0} for n, t in enumerate(words)]
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    mine = bpe.ByteLevelBPE.from_file(tmp_path / "tokenizer.json")
    theirs = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    texts = ["Ġthe singing self", "xĠthe, thing"] + [text for _, text in probe_strings(300, seed=5)]
    assert [mine.encode(t).ids for t in texts] == [e.ids for e in theirs.encode_batch(texts)]
    assert [mine.token_to_id(t) for t in words] == [theirs.token_to_id(t) for t in words]
    assert mine.token_to_id(words[0]) == spec["model"]["vocab"][words[0]] and mine.id_to_token(2000) is None
    assert mine.get_vocab_size() == theirs.get_vocab_size() == 1500
    ids = mine.encode("Ġthe sing").ids
    assert mine.decode(ids, skip_special_tokens=True) == theirs.decode(ids, skip_special_tokens=True) == " sing"


def test_lesson_21_reads_a_tokenizer_folder(trained, tmp_path):
    """Lesson 21's --weights branch: GPT-2's tokenizer in the real run, here a folder with the trained one."""
    folder, _ = trained
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run([sys.executable, os.path.join(root, "lessons", "21_bpe_tokenizer.py"), "--quick",
                             "--weights", str(folder)], cwd=root, capture_output=True, text=True, timeout=180,
                            env={**os.environ, "TINYATTN_PLOTS": str(tmp_path)}, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads(result.stdout.rstrip().splitlines()[-1][len("RESULT "):])
    assert metrics["gpt2_ids_match"] == 1.0 and f"{folder}, 1,500 tokens" in result.stdout
