"""Strings that probe a tokenizer where tokenizers differ: letters of many scripts, emoji built of several code
points, runs of whitespace, digits, English contractions, code, and special tokens in odd places. Drawn with a
fixed seed, so two tokenizers (or a learner's and the reference) can be compared on the same strings."""
import random

SCRIPTS = {
    "Latin": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZéèêëàâäçñöüßøåæœıłşğž",
    "Greek": "αβγδεζηθικλμνξοπρστυφχψωάέήίόύώΑΒΓΔΘΛΞΠΣΦΨΩ",
    "Cyrillic": "абвгдеёжзийклмнопрстуфхцчшщъыьэюяАБВГДЖЗИЙЛПФЦЧШЩЭЮЯіїєґ",
    "Arabic": "ابتثجحخدذرزسشصضطظعغفقكلمنهوي",
    "Hebrew": "אבגדהוזחטיכלמנסעפצקרשת",
    "Devanagari": "अआइईउऊएऐओऔकखगघचछजझटठडढणतथदधनपफबभमयरलवशषसह\u093e\u093f\u0940\u0941\u0947\u094d",
    "Han": "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年注意力机制语言模型",
    "Hiragana and Katakana": "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをんアイウエオカキクケコ",
    "Hangul": "가나다라마바사아자차카타파하한국어주의집중모델",
    "Thai": "กขคงจฉชซญดตถทธนบปผพฟภมยรลวศษสหอฮ\u0e31\u0e34\u0e35\u0e38\u0e40\u0e41",
}
EMOJI = ["😀", "🙂", "🤖", "🎉", "🚀", "🐍", "❤\ufe0f", "✨", "🔥", "👍", "👋", "🧑", "👩", "👨", "👧", "👦"]
SKIN_TONES = ["\U0001f3fb", "\U0001f3fc", "\U0001f3fd", "\U0001f3fe", "\U0001f3ff"]
ZWJ_SEQUENCES = ["👩\u200d💻", "👨\u200d👩\u200d👧\u200d👦", "🏳\ufe0f\u200d🌈", "🧑\u200d🤝\u200d🧑",
                 "👁\ufe0f\u200d🗨\ufe0f", "🐕\u200d🦺", "👩\U0001f3fd\u200d🔬"]
FLAGS = ["🇫🇷", "🇯🇵", "🇧🇷", "🇺🇦", "🇮🇳"]
WHITESPACE = [" ", "  ", "    ", "\n", "\n\n", "\t", "\r\n", " \n", "\u00a0", "\u3000", "\u2028", "\x0b", "\x0c"]
DIGITS = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "०१२३४५६७८९", "０１２３４５６７８９", "²³¹½¾"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "’s", "’t", "’re", "’ll", "'"]
WORDS = ["it", "don", "we", "they", "I", "you", "she", "can", "won", "John", "that", "there", "who"]
CODE = ["def", "return", "class", "self", "import", "for", "in", "if", "else", "lambda", "None", "x", "y", "i",
        "print", "fn", "let", "mut", "const", "=>", "==", "!=", "+=", "->", "::", "(", ")", "[", "]", "{", "}",
        ":", ";", ",", ".", "=", "+", "*", "/", "%", "\"", "'", "#", "//", "/*", "*/", "<", ">", "&&", "||",
        "0", "1", "42", "3.14", "0x1F", "1e-9", "__init__", "snake_case", "camelCase", "_private"]
CATEGORIES = ["scripts", "emoji", "whitespace", "digits", "contractions", "code", "special tokens"]


def probe_strings(n=1000, seed=0, special_tokens=("<|endoftext|>",)):
    """n strings, the categories taking turns (so each gets n // 7 or one more), drawn with the given seed;
    returns [(category, text)]. special_tokens: what the special-token strings embed (and nearly embed)."""
    rng = random.Random(seed)
    return [(CATEGORIES[i % len(CATEGORIES)], _draw(CATEGORIES[i % len(CATEGORIES)], rng, special_tokens))
            for i in range(n)]


def _draw(category, rng, special_tokens):
    count = rng.randint(1, 8)
    if category == "scripts":
        names = rng.sample(sorted(SCRIPTS), rng.randint(1, 3))
        words = ["".join(rng.choice(SCRIPTS[rng.choice(names)]) for _ in range(rng.randint(1, 9)))
                 for _ in range(count)]
        return _join(words, rng, [" ", " ", " ", ", ", ". ", "-", ""])
    if category == "emoji":
        def one():
            kind = rng.random()
            if kind < 0.3:
                return rng.choice(ZWJ_SEQUENCES)
            if kind < 0.55:
                return rng.choice(EMOJI[-6:]) + rng.choice(SKIN_TONES)
            if kind < 0.65:
                return rng.choice(FLAGS)
            return rng.choice(EMOJI)
        return _join([one() * rng.randint(1, 2) for _ in range(count)], rng, ["", " ", " ", "!", " ok ", "\n"])
    if category == "whitespace":
        words = ["".join(rng.choice(SCRIPTS["Latin"][:26]) for _ in range(rng.randint(0, 5))) for _ in range(count)]
        return "".join(rng.choice(WHITESPACE) * rng.randint(1, 4) + w for w in words) + rng.choice(["", *WHITESPACE])
    if category == "digits":
        def number():
            digits = rng.choice(DIGITS)
            text = "".join(rng.choice(digits) for _ in range(rng.randint(1, 12)))
            return text + rng.choice(["", "", ".5", ",000", "%", "th", "px"])
        return _join([number() for _ in range(count)], rng, [" ", " ", "-", "/", ":", " + ", ""])
    if category == "contractions":
        words = [rng.choice(WORDS) + rng.choice(CONTRACTIONS) for _ in range(count)]
        return _join(words, rng, [" ", " ", "", ", "]) + rng.choice(["", ".", "'", " '"])
    if category == "code":
        lines = [" " * (4 * rng.randint(0, 3)) + " ".join(rng.choice(CODE) for _ in range(rng.randint(1, 8)))
                 for _ in range(rng.randint(1, 4))]
        return "\n".join(lines)
    pieces = []
    for _ in range(count):
        token = rng.choice(special_tokens)
        choice = rng.random()
        pieces.append(token if choice < 0.6 else token[:-1] if choice < 0.7 else " " + token + " " if choice < 0.85
                      else rng.choice(["hello", " world", "x", "\n", "é", "🙂", "42"]))
    return "".join(pieces)


def _join(words, rng, separators):
    return "".join(word + (rng.choice(separators) if i < len(words) - 1 else "") for i, word in enumerate(words))
