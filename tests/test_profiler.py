"""tinyattn.profiler: where a step's time goes, per Function, alone and in hand-offs to the threads (issue 30)."""
import time

import pytest

import tinyattn as ta
from tinyattn.tools import bench, profiler
from tinyattn.cpu import split, threads
from tinyattn.models import GPT, GPTConfig
from tinyattn.tensor import Function, Tensor


class Inner(Function):
    @staticmethod
    def forward(ctx, x):
        time.sleep(0.02)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class Outer(Function):
    """Calls Inner inside its own forward: the profile counts each for itself."""

    @staticmethod
    def forward(ctx, x):
        time.sleep(0.01)
        return Inner.apply(Tensor(x)).array + 1

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class InheritsForward(Inner):
    pass


def _entries():
    classes = profiler._function_classes()
    return {(cls, name): cls.__dict__.get(name) for cls in classes for name in ("forward", "backward")}


def test_a_function_inside_another_counts_for_itself_and_everything_is_put_back():
    before = _entries()
    with profiler.profile() as report:
        Outer.apply(ta.ones(3))
        InheritsForward.apply(ta.ones(3))
    rows = report.summary()["functions"]
    times = {row["name"]: row["alone_ms"] for row in rows}
    assert times["Inner.forward"] >= 20 and times["InheritsForward.forward"] >= 20    # named by the class called
    assert 10 <= times["Outer.forward"] < 28                     # its 10 ms sleep; with Inner's 20 it would be 30+
    assert {row["name"]: row["calls"] for row in rows}["Inner.forward"] == 1
    assert report.summary()["step_ms"] >= sum(times.values())
    assert _entries() == before
    assert "forward" not in InheritsForward.__dict__            # an inherited method is inherited again


def test_an_error_inside_the_block_still_puts_everything_back():
    before, share = _entries(), split.share
    with pytest.raises(ZeroDivisionError):
        with profiler.profile():
            Inner.apply(ta.ones(2))
            1 / 0
    assert _entries() == before and split.share is share


@pytest.mark.skipif(ta.get_default_device() != "cpu", reason="threads share CPU work only")
@pytest.mark.parametrize("count", [1, 2])
def test_a_gpt_step_shows_its_linears_and_the_hand_offs_the_threads_took_part_in(count):
    before = threads.get_num_threads()
    threads.set_num_threads(count)
    try:
        model = GPT(GPTConfig(vocab_size=32, block_size=64, n_layer=2, num_heads=2, d_model=64))
        optimizer = ta.optim.AdamW(model.parameters())
        ids = ta.randint(0, 32, (4, 65))
        with profiler.profile() as report:
            for _ in range(2):
                _, loss = model(ids[:, :-1], ids[:, 1:])
                loss.backward()
                optimizer.step()
    finally:
        threads.set_num_threads(before)
    summary = report.summary(steps=2)
    rows = {row["name"]: row for row in summary["functions"]}
    assert rows["FastLinear.forward"]["calls"] == 2 * 4 + 1 and rows["FastLinear.backward"]["calls"] == 2 * 4 + 1
    assert rows["FastLayerNorm.forward"]["calls"] == 2 * 2 + 1
    # per layer qkv (256 x 64 x 192), fc1 and fc2 (256 x 64 x 256) reach cpu.split.MIN_SHARED_MATMUL = 2^21
    # multiply-adds and hand rows to the other thread; proj (256 x 64 x 64) and the head stay whole; one thread: none
    assert split.MIN_SHARED_MATMUL == 2 ** 21
    assert rows["FastLinear.forward"]["hand_offs"] == (2 * 3 if count == 2 else 0)
    assert rows["FastLinear.forward"]["shared_ms"] > 0
    # the optimizer's one share a step is in no Function; on two threads the helper takes part in it
    assert rows[profiler.OUTSIDE]["calls"] == 1 and rows[profiler.OUTSIDE]["hand_offs"] == (1 if count == 2 else 0)
    assert summary["no_function_ms"] > 0 and summary["waiting_ms"] >= 0
    assert "FastLinear.forward" in report.table(2)


def test_the_bench_prints_the_profile_and_puts_it_in_its_json(capsys):
    result = bench.main(["train-step", "--vocab", "16", "--d-model", "16", "--layers", "1", "--heads", "2",
                         "--seq", "8", "--batch", "2", "--steps", "2", "--profile"])
    names = [row["name"] for row in result["profile"]["functions"]]
    assert "FastLinear.forward" in names and "FastGELU.backward" in names
    out = capsys.readouterr()
    assert "FastLinear.forward" in out.err and out.out.strip().splitlines()[-1].startswith("{")


def test_profile_on_the_gpu_is_a_user_error(capsys):
    with pytest.raises(SystemExit):
        bench.parse(["attention", "--device", "cuda", "--profile"])
    assert "--profile times the CPU's work: run it with --device cpu" in capsys.readouterr().err
