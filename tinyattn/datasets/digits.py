"""scikit-learn's bundled 8x8 handwritten digits (no download), on larger canvases and as captioned strips."""
import numpy

from .vocab import Vocab

WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def load_digits():
    """(images (1797, 8, 8) float32 in [0, 1], labels (1797,) int64). Needs scikit-learn."""
    try:
        from sklearn.datasets import load_digits as sklearn_digits
    except ImportError:
        raise ImportError("the digits lessons need scikit-learn, which bundles the 8x8 digits: "
                          'pip install -e ".[lessons]"') from None
    digits = sklearn_digits()
    return (digits.images / 16.0).astype(numpy.float32), digits.target.astype(numpy.int64)


def _split(n, rng):
    order = rng.permutation(n)
    cut1, cut2 = int(0.7 * n), int(0.85 * n)
    return {"train": order[:cut1], "val": order[cut1:cut2], "test": order[cut2:]}


def random_shifts(images, rng, most=2):
    """Each image of (N, C, H, W) rolled by its own random whole-pixel shift of up to `most` pixels along each axis
    (what leaves one edge comes back at the other): the augmentation the digits ViTs of the lessons train with."""
    out = numpy.zeros_like(images)
    for i, (dy, dx) in enumerate(rng.integers(-most, most + 1, size=(len(images), 2))):
        out[i] = numpy.roll(images[i], (dy, dx), axis=(1, 2))
    return out


class DigitCanvases:
    """Each digit upscaled by `scale` and placed at a random offset on a canvas x canvas image, so a ViT sees more
    patches and must find the digit. images (N, 1, canvas, canvas); fixed 70/15/15 split."""

    def __init__(self, canvas=16, scale=2, seed=0, jitter=True):
        digits, self.labels = load_digits()
        rng = numpy.random.default_rng(seed)
        big = numpy.kron(digits, numpy.ones((scale, scale), dtype=numpy.float32))
        size = big.shape[-1]
        if size > canvas:
            raise ValueError(f"a digit scaled to {size} pixels does not fit a {canvas}-pixel canvas")
        self.images = numpy.zeros((len(big), 1, canvas, canvas), dtype=numpy.float32)
        room = canvas - size
        offsets = rng.integers(0, room + 1, size=(len(big), 2)) if jitter else numpy.full((len(big), 2), room // 2)
        for image, digit, (y, x) in zip(self.images, big, offsets):
            image[0, y:y + size, x:x + size] = digit
        self.split = _split(len(big), rng)


class DigitStrips:
    """Strips of `length` digits side by side, each with its caption in words: "three one four".

    images (N, 1, 8, 8 * length); captions (N, length + 2) = BOS + words + EOS. Digits of the test strips come
    only from the test digits, so a test strip never shows a digit image seen in training.
    """

    def __init__(self, n=3000, length=3, seed=0):
        digits, labels = load_digits()
        rng = numpy.random.default_rng(seed)
        pools = _split(len(digits), rng)
        self.vocab = Vocab(WORDS)
        self.images = numpy.zeros((n, 1, 8, 8 * length), dtype=numpy.float32)
        self.captions = numpy.zeros((n, length + 2), dtype=numpy.int64)
        self.labels = numpy.zeros((n, length), dtype=numpy.int64)
        cut1, cut2 = int(0.8 * n), int(0.9 * n)
        for i in range(n):
            pool = pools["train"] if i < cut1 else pools["val"] if i < cut2 else pools["test"]
            picks = rng.choice(pool, size=length)
            for j, p in enumerate(picks):
                self.images[i, 0, :, 8 * j:8 * j + 8] = digits[p]
            self.labels[i] = labels[picks]
            self.captions[i] = self.vocab.encode([WORDS[d] for d in labels[picks]], bos=True, eos=True)
        self.split = {"train": numpy.arange(cut1), "val": numpy.arange(cut1, cut2), "test": numpy.arange(cut2, n)}
