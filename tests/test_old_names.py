"""Names the project has changed keep working as they did, with no warning: what a learner's older code, a saved
config.json or an older lesson copy says still runs, and gives the same objects as the new names."""
import importlib
import subprocess
import sys
import warnings

import pytest

import tinyattn as ta
from tinyattn import models, nn


@pytest.fixture
def no_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def test_multi_head_attention_is_attention(no_warnings):
    from tinyattn.nn.attention import MultiHeadAttention
    assert nn.MultiHeadAttention is nn.Attention is MultiHeadAttention
    assert nn.Attention is not nn.MultiheadAttention                   # PyTorch's class keeps its own name


def test_impl_naive_is_sdpa_in_modules_configs_and_the_bench(tmp_path, no_warnings):
    assert nn.Attention(8, 2, impl="naive").impl == "sdpa" == nn.Attention(8, 2).impl
    small = dict(vocab_size=11, block_size=8, n_layer=1, num_heads=2, d_model=8)
    config = models.GPTConfig(**small, impl="naive")
    assert config.impl == "sdpa" and {block.attn.impl for block in models.GPT(config).blocks} == {"sdpa"}
    assert models.TransformerConfig(5, 5, impl="naive").impl == models.ViTConfig(impl="naive").impl == "sdpa"
    models.GPT(models.GPTConfig(**small)).save_pretrained(tmp_path)
    assert models.GPT.from_pretrained(tmp_path, impl="naive").config.impl == "sdpa"
    from tinyattn.tools import bench
    assert bench.parse(["attention", "--impl", "naive"]).impl == "sdpa"
    assert bench.parse(["train-step", "--impl", "naive"]).impl == "sdpa"
    with pytest.raises(ValueError, match=r"impl must be one of \('sdpa', 'flash', 'reference'\), got 'fast'"):
        models.GPTConfig(**small, impl="fast")


def test_tinyattn_data_gives_the_new_packages_objects(no_warnings):
    import tinyattn.data as old
    from tinyattn import datasets, preprocessing
    for package in (datasets, preprocessing):
        for name in package.__all__:
            assert getattr(old, name) is getattr(package, name), name
    from tinyattn.data.bpe import train
    from tinyattn.data.probe_strings import probe_strings
    from tinyattn.data.text import DEFAULT_MODULES
    assert train is preprocessing.bpe.train and probe_strings is preprocessing.probe_strings.probe_strings
    assert DEFAULT_MODULES is datasets.text.DEFAULT_MODULES
    for name in ("dates", "digits", "numbers", "repeats", "sequences", "text", "vocab"):
        assert importlib.import_module(f"tinyattn.data.{name}") is importlib.import_module(f"tinyattn.datasets.{name}")
    for name in ("bpe", "image_processor", "probe_strings", "tokenizer"):
        assert (importlib.import_module(f"tinyattn.data.{name}")
                is importlib.import_module(f"tinyattn.preprocessing.{name}"))


def test_the_old_data_path_works_first_in_a_fresh_process():
    # imported before anything else has loaded the new packages, as an older script does
    code = ("import tinyattn.data.bpe as b, tinyattn.preprocessing.bpe as p; from tinyattn.data import CharCorpus;"
            "import tinyattn.datasets as d; assert b is p and CharCorpus is d.CharCorpus; print('ok')")
    result = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout == "ok\n" and result.stderr == "", result.stderr


def test_the_old_path_misses_no_name_of_the_new_packages():
    # tinyattn.data takes the new packages' __all__: a class or function exported without it would be lost there
    from tinyattn import datasets, preprocessing
    for package in (datasets, preprocessing):
        exported = {name for name, value in vars(package).items() if not name.startswith("_")
                    and callable(value) and value.__module__.startswith(package.__name__ + ".")}
        assert exported <= set(package.__all__), exported - set(package.__all__)


def test_the_ops_moved_out_of_elementwise_import_from_there_too(no_warnings):
    from tinyattn.ops import conversions, logic, promotion
    from tinyattn.ops.elementwise import Cast, ToDevice, bitwise_not, cast, isclose, logical_xor, to
    assert (to, ToDevice, cast, Cast) == (conversions.to, conversions.ToDevice, promotion.cast, promotion.Cast)
    assert (isclose, logical_xor, bitwise_not) == (logic.isclose, logic.logical_xor, logic.bitwise_not)
    import tinyattn.ops.elementwise as elementwise
    with pytest.raises(AttributeError, match="has no attribute 'no_such_op'"):
        elementwise.no_such_op
