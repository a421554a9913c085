"""ta.save / ta.load of .safetensors files (the weight format Hugging Face, PyTorch and timm exchange) and of open
files. The layout checked here is the published one: 8 bytes of little-endian header length, a JSON header of
dtype, shape and data_offsets per tensor, then the raw bytes."""
import io
import json
import struct

import numpy as np
import pytest

import tinyattn as ta
from tinyattn import nn

from conftest import host


def layout(path):
    data = path.read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + length]), data[8 + length:]


def test_a_state_dict_round_trips_in_the_published_layout(tmp_path):
    model = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))
    path = tmp_path / "model.safetensors"
    ta.save(model.state_dict(), path)
    header, body = layout(path)
    assert header["__metadata__"] == {"format": "pt"}          # transformers refuses files without it
    entry = header["0.weight"]
    assert entry["dtype"] == "F32" and entry["shape"] == [4, 3]
    start, end = entry["data_offsets"]
    np.testing.assert_array_equal(np.frombuffer(body[start:end], "<f4").reshape(4, 3), host(model[0].weight))
    loaded = ta.load(path)
    assert list(loaded) == sorted(model.state_dict())
    for name, value in model.state_dict().items():
        assert loaded[name].dtype == value.dtype
        np.testing.assert_array_equal(host(loaded[name]), host(value), err_msg=name)
    other = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))
    other.load_state_dict(loaded)
    loaded["0.weight"] += 1                                    # what load returns is the caller's to change


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "int64", "int32", "uint8", "bool"])
def test_every_numpy_dtype_and_a_scalar_round_trip(tmp_path, dtype):
    values = {"a": ta.tensor(np.arange(6).reshape(2, 3).astype(dtype)), "scalar": ta.tensor(np.array(3, dtype))}
    ta.save(values, tmp_path / "x.safetensors")
    loaded = ta.load(tmp_path / "x.safetensors")
    assert loaded["scalar"].shape == ()
    for key in values:
        assert loaded[key].dtype == values[key].dtype
        np.testing.assert_array_equal(host(loaded[key]), host(values[key]))


def test_only_a_flat_dict_of_tensors_goes_into_safetensors(tmp_path):
    with pytest.raises(TypeError, match="'step' is a int.*as .npz"):
        ta.save({"w": ta.ones(2), "step": 3}, tmp_path / "x.safetensors")
    with pytest.raises(TypeError, match="flat dict"):
        ta.save([ta.ones(2)], tmp_path / "x.safetensors")
    assert list(tmp_path.iterdir()) == []                      # nothing written, no temporary left


def test_a_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "w.safetensors"
    ta.save({"w": ta.ones(2)}, path)
    monkeypatch.setattr("tinyattn.serialization.safetensors_bytes", lambda *a: (_ for _ in ()).throw(OSError("full")))
    with pytest.raises(OSError, match="full"):
        ta.save({"w": ta.zeros(2)}, path)
    monkeypatch.undo()
    np.testing.assert_array_equal(host(ta.load(path)["w"]), [1, 1])
    assert [p.name for p in tmp_path.iterdir()] == ["w.safetensors"]


def test_truncated_damaged_and_foreign_files_are_refused_naming_the_file(tmp_path):
    path = tmp_path / "w.safetensors"
    ta.save({"w": ta.ones(100)}, path)
    data = path.read_bytes()
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(data[:-40])
    with pytest.raises(ta.CheckpointError, match=r"cut.safetensors is truncated: tensor 'w' ends at byte 400"):
        ta.load(cut)
    header_cut = tmp_path / "head.safetensors"
    header_cut.write_bytes(data[:20])
    with pytest.raises(ta.CheckpointError, match="head.safetensors is truncated or not a safetensors file"):
        ta.load(header_cut)
    tiny = tmp_path / "tiny.safetensors"
    tiny.write_bytes(b"\x01\x02")
    with pytest.raises(ta.CheckpointError, match="tiny.safetensors is truncated: 2 bytes"):
        ta.load(tiny)
    damaged = tmp_path / "damaged.safetensors"
    length = struct.unpack("<Q", data[:8])[0]
    damaged.write_bytes(data[:8] + b"{" + b"x" * (length - 1) + data[8 + length:])
    with pytest.raises(ta.CheckpointError, match="damaged.safetensors has a damaged safetensors header"):
        ta.load(damaged)


def by_hand(path, header, body):
    """A .safetensors file written from its published layout: length, JSON header, bytes."""
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + body)
    return path


def test_bfloat16_is_widened_to_float32_exactly_with_one_warning_per_file(tmp_path):
    # a bfloat16 is the high 16 bits of a float32: 0x3F80 is 1.0, 0xC020 is -2.5, 0x4049 is 3.140625
    bits = np.array([0x3F80, 0xC020, 0x4049], "<u2").tobytes()
    path = by_hand(tmp_path / "bf16.safetensors", {"a": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]},
                                                   "b": {"dtype": "BF16", "shape": [1], "data_offsets": [6, 8]}},
                   bits + bits[:2])
    with pytest.warns(UserWarning, match=r"bf16.safetensors: 2 bfloat16 tensors \(a, b\) read as float32") as seen:
        loaded = ta.load(path)
    assert len(seen) == 1
    assert loaded["a"].dtype == ta.float32 and host(loaded["a"]).tolist() == [1.0, -2.5, 3.140625]
    assert host(loaded["b"]).tolist() == [1.0]
    by_hand(path, {"w": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}}, b"\0\0")
    with pytest.raises(ta.CheckpointError, match="bf16.safetensors: tensor 'w' is stored as F8_E4M3.*float32"):
        ta.load(path)


@pytest.mark.parametrize("offsets", [5, None, [0], ["0", "8"], [8, 0], [-1, 7], [True, 8]])
def test_damaged_data_offsets_are_refused_naming_the_file(tmp_path, offsets):
    path = by_hand(tmp_path / "w.safetensors", {"w": {"dtype": "F32", "shape": [2], "data_offsets": offsets}},
                   b"\0" * 8)
    with pytest.raises(ta.CheckpointError, match=r"w.safetensors: the header's entry 'w' has damaged data_offsets"):
        ta.load(path)
    by_hand(path, {"w": {"dtype": "F32", "shape": [2, "x"], "data_offsets": [0, 8]}}, b"\0" * 8)
    with pytest.raises(ta.CheckpointError, match=r"w.safetensors: the header's entry 'w' has a damaged shape"):
        ta.load(path)


def test_deeply_nested_header_and_reserved_name_are_refused(tmp_path):
    path = tmp_path / "deep.safetensors"
    text = b"[" * 100_000 + b"]" * 100_000
    path.write_bytes(struct.pack("<Q", len(text)) + text)
    with pytest.raises(ta.CheckpointError, match="deep.safetensors has a damaged safetensors header .*nested"):
        ta.load(path)
    # the header keeps __metadata__ for the file's own metadata: a tensor of that name makes a file nothing reads
    with pytest.raises(ValueError, match="cannot hold a tensor named '__metadata__'"):
        ta.save({"__metadata__": ta.ones(2)}, tmp_path / "m.safetensors")
    assert not (tmp_path / "m.safetensors").exists()


def test_the_format_goes_by_the_extension_whatever_its_case(tmp_path):
    ta.save({"w": ta.arange(3)}, tmp_path / "w.SafeTensors")
    assert (tmp_path / "w.SafeTensors").read_bytes()[8:9] == b"{"           # a safetensors header, not a zip
    np.testing.assert_array_equal(host(ta.load(tmp_path / "w.SafeTensors")["w"]), [0, 1, 2])


def test_saving_through_a_symbolic_link_writes_its_target(tmp_path):
    # as open(path, "wb") and torch.save do: the link stays, its target gets the new contents
    target = tmp_path / "run3.npz"
    ta.save({"w": ta.ones(2)}, target)
    link = tmp_path / "latest.npz"
    link.symlink_to(target.name)
    ta.save({"w": ta.zeros(2)}, link)
    assert link.is_symlink() and sorted(p.name for p in tmp_path.iterdir()) == ["latest.npz", "run3.npz"]
    np.testing.assert_array_equal(host(ta.load(target)["w"]), [0, 0])


def test_safetensors_is_recognised_by_content_whatever_the_name(tmp_path):
    ta.save({"w": ta.arange(3)}, tmp_path / "w.safetensors")
    renamed = tmp_path / "weights.bin"
    renamed.write_bytes((tmp_path / "w.safetensors").read_bytes())
    np.testing.assert_array_equal(host(ta.load(renamed)["w"]), [0, 1, 2])


def test_save_and_load_take_open_files():
    state = {"model": {"w": ta.ones(2, 3)}, "step": 7}
    buffer = io.BytesIO()
    ta.save(state, buffer)
    buffer.seek(0)
    loaded = ta.load(buffer)
    assert loaded["step"] == 7
    np.testing.assert_array_equal(host(loaded["model"]["w"]), np.ones((2, 3)))
    with pytest.raises(ta.CheckpointError, match="not a tinyattn checkpoint"):
        ta.load(io.BytesIO(b"hello, world"))
