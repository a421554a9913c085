"""Arguments PyTorch refuses are refused here too, with its error type and a message naming the value (issue 28:
cross_entropy with label_smoothing=2.0 returned a number). Each entry was silent, or failed deep inside NumPy or
with ZeroDivisionError, before; the ranges are PyTorch's documented ones."""
import pytest

import tinyattn as ta
import tinyattn.functional as F
from tinyattn import nn, optim


def x():
    return ta.randn(2, 3)


def sgd():
    return optim.SGD([nn.Parameter(ta.zeros(2))], lr=0.1)


# (call, error type, message fragment)
REFUSED = {
    "cross_entropy label_smoothing > 1": (lambda: F.cross_entropy(x(), ta.tensor([0, 1]), label_smoothing=2.0),
                                          RuntimeError, "label_smoothing must be between 0.0 and 1.0, got 2.0"),
    "cross_entropy label_smoothing < 0": (lambda: F.cross_entropy(x(), ta.tensor([0, 1]), label_smoothing=-0.1),
                                          RuntimeError, "label_smoothing must be between 0.0 and 1.0"),
    "nn.CrossEntropyLoss label_smoothing": (lambda: nn.CrossEntropyLoss(label_smoothing=1.5)(x(), ta.tensor([0, 1])),
                                            RuntimeError, "label_smoothing must be between"),
    "nll_loss negative target": (lambda: F.nll_loss(x(), ta.tensor([0, -2])), IndexError,
                                 "target -2 is out of bounds for 3 classes"),
    "nll_loss target too large": (lambda: F.nll_loss(x(), ta.tensor([0, 5])), IndexError, "target 5 is out of bounds"),
    "bce target of another shape": (lambda: F.binary_cross_entropy_with_logits(x(), ta.zeros(3)), ValueError,
                                    r"target size \(3,\) must be the same as input size \(2, 3\)"),
    "nn.Dropout p > 1": (lambda: nn.Dropout(1.5), ValueError, "probability has to be between 0 and 1, but got 1.5"),
    "nn.Dropout p < 0": (lambda: nn.Dropout(-0.1), ValueError, "probability has to be between 0 and 1"),
    "F.dropout p > 1": (lambda: F.dropout(x(), 1.2, training=False), ValueError, "between 0 and 1, but got 1.2"),
    "split negative sizes": (lambda: x().split([4, -1], 1), RuntimeError, r"non-negative, got \[4, -1\]"),
    "repeat negative": (lambda: x().repeat(-1, 1), RuntimeError, r"cannot be negative, got \(-1, 1\)"),
    "repeat_interleave negative": (lambda: x().repeat_interleave(-1, dim=0), RuntimeError, "must be non-negative"),
    "expand -1 in a new dim": (lambda: x().expand(-1, 2, 3), RuntimeError, "only for existing dims"),
    "tril of a vector": (lambda: ta.tril(ta.zeros(3)), RuntimeError, r"at least 2 dims .* got shape \(3,\)"),
    "arange step 0": (lambda: ta.arange(0, 5, 0), RuntimeError, "step must be nonzero"),
    "arange step of the wrong sign": (lambda: ta.arange(0, 5, -1), RuntimeError, "inconsistent with the sign"),
    "randint low >= high": (lambda: ta.randint(5, 5, (2,)), RuntimeError, "low=5, high=5"),
    "zeros with a negative size": (lambda: ta.zeros(-1, 2), RuntimeError, r"negative dimension: shape \(-1, 2\)"),
    "full with a negative size": (lambda: ta.full((-1,), 1.0), RuntimeError, "negative dimension"),
    "randn with a negative size": (lambda: ta.randn(-2), RuntimeError, "negative dimension"),
    "eye of -1": (lambda: ta.eye(-1), RuntimeError, "negative dimension"),
    "randperm of -1": (lambda: ta.randperm(-1), RuntimeError, "negative dimension"),
    "nn.Linear with a negative size": (lambda: nn.Linear(-1, 2), RuntimeError, "negative dimension"),
    "multinomial of zero weights": (lambda: ta.multinomial(ta.tensor([0.0, 0.0]), 1), RuntimeError, "sums to 0"),
    "std with unbiased and correction": (lambda: x().std(correction=0, unbiased=True), TypeError, "not both"),
    "Embedding padding_idx outside": (lambda: nn.Embedding(3, 2, padding_idx=5), ValueError,
                                      "padding_idx 5 must be within the table's 3 rows"),
    "F.embedding padding_idx outside": (lambda: F.embedding(ta.tensor([0]), ta.zeros(3, 2), padding_idx=-4),
                                        ValueError, "padding_idx -4"),
    "conv2d stride 0": (lambda: F.conv2d(ta.zeros(1, 1, 4, 4), ta.zeros(1, 1, 2, 2), stride=0), RuntimeError,
                        "positive strides"),
    "conv2d negative padding": (lambda: F.conv2d(ta.zeros(1, 1, 4, 4), ta.zeros(1, 1, 2, 2), padding=-1),
                                RuntimeError, "non-negative padding"),
    "GRU num_layers 0": (lambda: nn.GRU(2, 3, num_layers=0), ValueError, "num_layers=0"),
    "GRU hidden_size 0": (lambda: nn.GRU(2, 0), ValueError, "hidden_size=0"),
    "LSTM dropout > 1": (lambda: nn.LSTM(2, 3, num_layers=2, dropout=1.5), ValueError, "LSTM dropout probability"),
    "RNN unknown nonlinearity": (lambda: nn.RNN(2, 3, nonlinearity="sigmoid"), ValueError, "'sigmoid'"),
    "RNNCell unknown nonlinearity": (lambda: nn.RNNCell(2, 3, nonlinearity="gelu"), ValueError, "'gelu'"),
    "StepLR step_size 0": (lambda: optim.lr_scheduler.StepLR(sgd(), 0), ValueError, "step_size must be positive"),
    "CosineAnnealingLR T_max 0": (lambda: optim.lr_scheduler.CosineAnnealingLR(sgd(), 0), ValueError, "T_max"),
    "LinearLR total_iters 0": (lambda: optim.lr_scheduler.LinearLR(sgd(), total_iters=0), ValueError, "total_iters"),
    "OneCycleLR total_steps 0": (lambda: optim.lr_scheduler.OneCycleLR(sgd(), 0.1, total_steps=0), ValueError,
                                 "positive total_steps"),
    "OneCycleLR pct_start > 1": (lambda: optim.lr_scheduler.OneCycleLR(sgd(), 0.1, total_steps=10, pct_start=1.5),
                                 ValueError, "pct_start must be a float between 0 and 1, got 1.5"),
    "OneCycleLR anneal_strategy": (lambda: optim.lr_scheduler.OneCycleLR(sgd(), 0.1, total_steps=10,
                                                                         anneal_strategy="x"),
                                   ValueError, "anneal_strategy must be 'cos' or 'linear'"),
}


@pytest.mark.parametrize("name", REFUSED)
def test_an_argument_pytorch_refuses_is_refused(name):
    call, error, message = REFUSED[name]
    with pytest.raises(error, match=message):
        call()


# The edges of each range are accepted.
ACCEPTED = {
    "label_smoothing 0 and 1": lambda: [F.cross_entropy(x(), ta.tensor([0, 1]), label_smoothing=s) for s in (0, 1)],
    "dropout p 0 and 1": lambda: (nn.Dropout(0.0), nn.Dropout(1.0), F.dropout(x(), 1.0)),
    "a descending arange": lambda: ta.arange(5, 0, -1),
    "an empty arange": lambda: ta.arange(3, 3),
    "a zero-size tensor": lambda: ta.zeros(0, 2),
    "randint of one value": lambda: ta.randint(0, 1, (3,)),
    "repeat and repeat_interleave 0 times": lambda: (x().repeat(0, 1), x().repeat_interleave(0, dim=0)),
    "expand -1 in an existing dim": lambda: ta.zeros(1, 3).expand(2, -1),
    "padding_idx counted from the end": lambda: nn.Embedding(3, 2, padding_idx=-1),
    "nn.ReLU(inplace=True) and nn.Dropout(inplace=True), as PyTorch code writes them":
        lambda: (nn.ReLU(inplace=True)(x()), nn.Dropout(0.1, inplace=True)),
}


@pytest.mark.parametrize("name", ACCEPTED)
def test_the_edges_of_a_range_are_accepted(name):
    ACCEPTED[name]()


def test_a_negative_padding_idx_counts_from_the_end_as_in_pytorch():
    emb = nn.Embedding(3, 2, padding_idx=-1)
    assert emb.padding_idx == 2 and emb.weight[2].abs().sum().item() == 0
    emb(ta.tensor([2, 0])).sum().backward()
    assert emb.weight.grad[2].abs().sum().item() == 0 and emb.weight.grad[0].abs().sum().item() == 2
