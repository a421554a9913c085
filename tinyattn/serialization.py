"""Checkpoints as .npz archives or .safetensors files: written atomically, read without pickle.

save(obj, path) takes a state_dict (name -> tensor) or any nesting of dicts, lists and tuples whose leaves are tensors,
arrays, numbers, strings, booleans or None: {"model": model.state_dict(), "optimizer": opt.state_dict(),
"iter_num": 3, "config": {...}} saves as it is. The archive holds one .npy member per array, named by its place in
obj ("model/blocks.0.ln1.weight"), and tinyattn.json, which records the nesting and the plain values; numpy.load
reads the arrays of any tinyattn checkpoint, and any string key round-trips.

Writing goes to a temporary file beside the target, flushed to disk and renamed over it, so a crash leaves the old
checkpoint or the new one, never half of one. A path that is a symbolic link is written through: its target is
replaced, the link stays (as open() and torch.save write through it). A temporary's name carries the writer's process id; the next save to
the same target removes those of processes that no longer run (a killed save leaves nothing behind for long).
Reading never unpickles: a file that is not a tinyattn checkpoint is refused, saying what it looks like. A weight
file is untrusted input: sizes it declares are checked before anything is allocated or inflated, and any damage is
a CheckpointError naming the file.

A path ending in .safetensors (in any case) holds a flat state_dict (name -> tensor) in the format Hugging Face, PyTorch and timm
exchange weights in: an 8-byte little-endian header length, a JSON header giving each tensor's dtype, shape and byte
range, then the raw bytes. Written through the safetensors package with metadata {"format": "pt"}, as transformers
expects; read after checking the header, so a truncated or foreign file is refused with what is wrong; bfloat16
tensors are read as float32 (exact), with a warning. Keep .npz for
training state (optimizer, nested dicts). save and load also take an open binary file instead of a path (.npz).
"""
import io
import json
import math
import os
import struct
import tempfile
import warnings
import zipfile

import numpy

from . import backend
from .tensor import Tensor, as_array

STRUCTURE = "tinyattn.json"


class CheckpointError(ValueError):
    pass


# -- saving --------------------------------------------------------------------------------------------------------
def save(obj, f):
    """Write obj (see the module's docstring) to f: a path, written atomically (.safetensors by its extension, else
    .npz), or an open binary file (.npz)."""
    if hasattr(f, "write"):
        arrays = {}
        structure = _encode(obj, "", arrays)
        _write_archive(f, arrays, structure)
        return
    path = os.fspath(f)
    if _is_safetensors_name(path):
        data = safetensors_bytes(obj, path)
        atomic_write(path, lambda file: file.write(data))
        return
    arrays = {}
    structure = _encode(obj, "", arrays)
    atomic_write(path, lambda file: _write_archive(file, arrays, structure))


def atomic_write(path, write):
    """Call write(file) on a temporary beside path, flush it to disk and rename it over path: a crash leaves the old
    file or the new one, never half of one. A path that is a symbolic link is written through, as open(path, "wb")
    and torch.save write it: its target is replaced and the link stays."""
    target = os.path.realpath(path)
    temporary = stage(target, write)
    try:
        os.replace(temporary, target)
    except BaseException:
        os.unlink(temporary)
        raise


def stage(path, write):
    """The name of a temporary beside path holding what write(file) wrote, flushed to disk, with the permissions a
    plain open() gives; the caller renames it over path (or removes it). A failed write leaves nothing behind."""
    folder, name = os.path.split(os.path.abspath(path))
    _remove_orphans(folder, name)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{name}.tmp-{os.getpid()}-")
    try:
        with os.fdopen(handle, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o666 & ~_umask())      # as a plain open() would have made it, not mkstemp's 0600
    except BaseException:
        os.unlink(temporary)
        raise
    return temporary


def safetensors_bytes(state_dict, path="the file"):
    """A flat dict name -> tensor as the bytes of a .safetensors file."""
    from safetensors.numpy import save as to_bytes
    if not isinstance(state_dict, dict):
        raise TypeError(f"save: {path} is a .safetensors file, which holds a flat dict name -> tensor (a "
                        f"state_dict); got a {type(state_dict).__name__}. Use .npz for other structures")
    arrays = {}
    for key, value in state_dict.items():
        if key == "__metadata__":
            raise ValueError(f"save: {path} cannot hold a tensor named '__metadata__': the safetensors header keeps "
                             "that name for the file's metadata, and a file holding both is read by nothing; rename "
                             "the tensor")
        if not isinstance(key, str) or not (isinstance(value, Tensor) or backend.is_array(value)):
            raise TypeError(f"save: {path} is a .safetensors file, which holds tensors under string names only; "
                            f"{key!r} is a {type(value).__name__}. Save training state (optimizer, nested dicts, "
                            "numbers) as .npz")
        array = numpy.require(backend.to_host(as_array(value)), requirements="C")     # keeps 0-d arrays 0-d
        if array.dtype.hasobject:
            raise TypeError(f"save: {key!r} is an array of Python objects; safetensors holds numeric arrays only")
        arrays[key] = array
    return to_bytes(arrays, metadata={"format": "pt"})


def _write_archive(file, arrays, structure):
    with zipfile.ZipFile(file, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for member, array in arrays.items():
            with archive.open(member + ".npy", "w", force_zip64=True) as out:
                numpy.lib.format.write_array(out, array, allow_pickle=False)
        archive.writestr(STRUCTURE, json.dumps(structure))


def _encode(obj, place, arrays):
    """obj as JSON, its arrays moved into arrays under unique member names."""
    if isinstance(obj, Tensor) or backend.is_array(obj):
        array = backend.to_host(as_array(obj))
        if array.dtype.hasobject:
            raise TypeError(f"save: {place or 'the value'!r} is an array of Python objects; checkpoints hold numeric "
                            "arrays only")
        member = place or "array"
        while member in arrays:
            member += "~"
        arrays[member] = array
        return {"array": member}
    if isinstance(obj, dict):
        for key in obj:
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise TypeError(f"save: {place or 'a dict'!r} has a key of type {type(key).__name__}; keys must be "
                                "strings or numbers")
        return {"dict": [[key, _encode(value, f"{place}/{key}" if place else str(key), arrays)]
                         for key, value in obj.items()]}
    if isinstance(obj, (list, tuple)):
        kind = "list" if isinstance(obj, list) else "tuple"
        return {kind: [_encode(value, f"{place}/{i}" if place else str(i), arrays) for i, value in enumerate(obj)]}
    if isinstance(obj, numpy.generic):
        obj = obj.item()
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return {"value": obj}
    raise TypeError(f"save: {place or 'the value'!r} is a {type(obj).__name__}; checkpoints hold tensors, arrays, "
                    "numbers, strings, booleans and None, in dicts, lists and tuples")


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _remove_orphans(folder, name):
    """Delete temporaries of earlier saves to this name whose writing process is gone."""
    prefix = f".{name}.tmp-"
    for entry in os.listdir(folder):
        if entry.startswith(prefix):
            pid = entry[len(prefix):].split("-", 1)[0]
            if pid.isdigit() and not _running(int(pid)):
                try:
                    os.unlink(os.path.join(folder, entry))
                except FileNotFoundError:
                    pass


def _running(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:        # a process of another user
        return True
    return True


# -- loading -------------------------------------------------------------------------------------------------------
def load(f, map_location=None, device=None):
    """Read what save() wrote (or any .safetensors file), its arrays as tensors on map_location (or device; default:
    the default device). f is a path or an open binary file."""
    device = backend.check_device(str(map_location or device or backend.default_device()))
    if hasattr(f, "read"):
        path, data = str(getattr(f, "name", "the file")), f.read()
        source = io.BytesIO(data)
    else:
        path = source = os.fspath(f)
        with open(path, "rb") as file:
            data = file.read(16)
    if _is_safetensors(data) or _is_safetensors_name(path):
        arrays = read_safetensors(source if isinstance(source, str) else data, path)
        return {key: Tensor(backend.to_device(array, device)) for key, array in arrays.items()}
    start = data[:8]
    if not start.startswith(b"PK\x03\x04"):
        raise CheckpointError(f"{path} is not a tinyattn checkpoint: {_looks_like(start)}")
    try:
        with zipfile.ZipFile(source) as archive:
            names = archive.namelist()
            _check_sizes(archive, path)
            if STRUCTURE in names:
                return _decoded(archive, device, path)
            if names and all(n.endswith(".npy") for n in names):       # a plain .npz of named arrays
                return {n[:-4]: _array(archive, n[:-4], device, path) for n in names}
    except (zipfile.BadZipFile, EOFError, OSError) as error:
        raise CheckpointError(f"{path} is truncated or damaged ({type(error).__name__}: {error})") from None
    if any(n.endswith("data.pkl") for n in names):
        raise CheckpointError(f"{path} looks like a PyTorch checkpoint (torch.save: a zip archive holding data.pkl, "
                              "which is pickled). tinyattn reads no pickles; in PyTorch, save the arrays instead: "
                              "numpy.savez(path, **{k: v.cpu().numpy() for k, v in state_dict.items()})")
    raise CheckpointError(f"{path} is a zip archive but not a checkpoint: it holds {names[:5]}")


def _is_safetensors_name(path):
    return path.lower().endswith(".safetensors")                # w.SafeTensors too: the format goes by the name


def _is_safetensors(start):
    """A safetensors file starts with its header's length (8 bytes, little-endian), then the header's '{'."""
    return len(start) > 8 and start[8:9] == b"{" and struct.unpack("<Q", start[:8])[0] > 1


# the safetensors dtypes NumPy holds; BF16 is read widened to float32, the float8 types are refused
SAFETENSORS_DTYPES = ("F64", "F32", "F16", "I64", "I32", "I16", "I8", "U64", "U32", "U16", "U8", "BOOL")


def read_safetensors(source, name=None):
    """The arrays of a .safetensors file (a path or its bytes), by name, after checking its header: a truncated,
    damaged or foreign file, or a dtype NumPy cannot hold, is refused saying which and why. bfloat16 tensors are
    widened to float32, which is exact (a bfloat16 is the high half of a float32), with one warning per file."""
    from safetensors.numpy import load as from_bytes
    name = name or source
    if isinstance(source, (bytes, bytearray)):
        data = bytes(source)
    else:
        with open(source, "rb") as file:
            data = file.read()
    if len(data) < 8:
        raise CheckpointError(f"{name} is truncated: {len(data)} bytes, shorter than a safetensors header")
    length = struct.unpack("<Q", data[:8])[0]
    if 8 + length > len(data):
        raise CheckpointError(f"{name} is truncated or not a safetensors file: its header claims {length} bytes, "
                              f"the file has {len(data) - 8} after the length")
    header = _json(data[8:8 + length], f"{name} has a damaged safetensors header")
    if not isinstance(header, dict):
        raise CheckpointError(f"{name} has a damaged safetensors header (not a JSON object)")
    body = len(data) - 8 - length
    widened = [key for key, entry in header.items() if key != "__metadata__" and _checked(name, key, entry, body)]
    if widened:            # the package reads no BF16: read those bytes as U16, then widen them
        header = {key: {**entry, "dtype": "U16"} if key in widened else entry for key, entry in header.items()}
        text = json.dumps(header).encode()
        data = struct.pack("<Q", len(text)) + text + data[8 + length:]
    try:
        arrays = from_bytes(data)
    except Exception as error:        # the package's own checks (overlapping or misaligned ranges, wrong sizes)
        raise CheckpointError(f"{name} is not a valid safetensors file ({error})") from None
    if widened:
        warnings.warn(f"{name}: {len(widened)} bfloat16 tensors ({', '.join(widened[:3])}"
                      f"{', ...' if len(widened) > 3 else ''}) read as float32, which holds them exactly",
                      stacklevel=3)
        for key in widened:
            arrays[key] = (arrays[key].astype(numpy.uint32) << 16).view(numpy.float32)
    return {key: numpy.array(arrays[key]) for key in sorted(arrays)}      # writable copies, not views of data


def _checked(name, key, entry, body):
    """Check one header entry against the data's length; returns whether it is bfloat16."""
    if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= entry.keys():
        raise CheckpointError(f"{name}: the header's entry {key!r} is damaged: {entry!r}")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if dtype != "BF16" and dtype not in SAFETENSORS_DTYPES:
        raise CheckpointError(f"{name}: tensor {key!r} is stored as {dtype}, which NumPy has no dtype for "
                              f"(tinyattn reads {', '.join(SAFETENSORS_DTYPES)} and BF16); convert it to float32 "
                              "where it was saved")
    if not isinstance(shape, list) or not all(_count(n) for n in shape):
        raise CheckpointError(f"{name}: the header's entry {key!r} has a damaged shape {shape!r} (a list of sizes)")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_count(n) for n in offsets) \
            or offsets[0] > offsets[1]:
        raise CheckpointError(f"{name}: the header's entry {key!r} has damaged data_offsets {offsets!r} (a list "
                              "[begin, end] of byte positions in the data)")
    if offsets[1] > body:
        raise CheckpointError(f"{name} is truncated: tensor {key!r} ends at byte {offsets[1]} of the data, which "
                              f"has {body}")
    return dtype == "BF16"


def _count(n):
    return isinstance(n, int) and not isinstance(n, bool) and n >= 0


def _json(text, damaged):
    """json.loads(text); damage, or nesting too deep for Python's parser, as a CheckpointError starting damaged."""
    try:
        return json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{damaged} ({error})") from None
    except RecursionError:
        raise CheckpointError(f"{damaged} (JSON nested too deeply to read)") from None


def _looks_like(start):
    if start.startswith(b"\x93NUMPY"):
        return "it holds a single NumPy array (.npy); read it with numpy.load"
    if start[:1] == b"\x80":
        return ("it holds pickled Python objects (as torch.save's legacy format and pickle.dump write them); "
                "refusing to load them, since unpickling can run code")
    return f"it starts with the bytes {start!r}, where an .npz archive starts with b'PK\\x03\\x04'"


def _array(archive, member, device, path):
    name = member + ".npy"
    try:
        with archive.open(name) as file:
            version = numpy.lib.format.read_magic(file)
            read_header = numpy.lib.format.read_array_header_1_0 if version == (1, 0) else \
                numpy.lib.format.read_array_header_2_0
            shape, _, dtype = read_header(file)
            if dtype.hasobject:
                raise CheckpointError(f"{path} holds pickled Python objects in {member!r}; refusing to load them "
                                      "(they could run code). tinyattn checkpoints hold plain arrays only.")
            declared = math.prod(shape) * dtype.itemsize
            if archive.getinfo(name).file_size != file.tell() + declared:     # before allocating what it claims
                raise CheckpointError(f"{path}: {member!r} claims shape {shape} of {dtype} ({declared} bytes), but "
                                      f"its member holds {archive.getinfo(name).file_size - file.tell()}: damaged")
        with archive.open(name) as file:
            array = numpy.lib.format.read_array(file, allow_pickle=False)
    except ValueError as error:
        if isinstance(error, CheckpointError):
            raise
        raise CheckpointError(f"{path}: {member!r} is not a readable array ({error})") from None
    return Tensor(backend.to_device(array, device))


# a deflated member may inflate this many times (real arrays of varied values compress far less) ...
INFLATION_LIMIT = 1000
# ... unless it stays under this size
INFLATED_BYTES_LIMIT = 64 << 20


def _check_sizes(archive, path):
    """Refuse, before inflating anything, an archive whose members declare more bytes than this machine's memory,
    or a compressed member that inflates more than INFLATION_LIMIT-fold to over INFLATED_BYTES_LIMIT (a zip bomb;
    ta.save and numpy.savez store arrays uncompressed)."""
    infos = archive.infolist()
    total = sum(info.file_size for info in infos)
    if total > _memory_bytes():
        raise CheckpointError(f"{path} declares {total:,} bytes of arrays, more than this machine's memory "
                              f"({_memory_bytes():,} bytes): refusing to read it")
    for info in infos:
        if info.file_size > max(INFLATED_BYTES_LIMIT, INFLATION_LIMIT * info.compress_size):
            raise CheckpointError(f"{path}: {info.filename!r} inflates from {info.compress_size:,} to "
                                  f"{info.file_size:,} bytes, more than {INFLATION_LIMIT} times: refusing it as a "
                                  "zip bomb (save arrays uncompressed, as ta.save and numpy.savez do)")


def _memory_bytes():
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):          # no sysconf (Windows): no limit
        return float("inf")


def _decoded(archive, device, path):
    """The object the archive's manifest describes; a damaged manifest is refused naming the file."""
    manifest = _json(archive.read(STRUCTURE), f"{path}: its {STRUCTURE} is damaged")
    try:
        return _decode(manifest, archive, device, path)
    except CheckpointError:
        raise
    except (KeyError, ValueError, AttributeError, TypeError) as error:
        raise CheckpointError(f"{path}: its {STRUCTURE} is damaged ({type(error).__name__}: {error})") from None


def _decode(node, archive, device, path):
    (kind, content), = node.items()
    if kind == "array":
        return _array(archive, content, device, path)
    if kind == "dict":
        return {key: _decode(value, archive, device, path) for key, value in content}
    if kind in ("list", "tuple"):
        items = [_decode(value, archive, device, path) for value in content]
        return items if kind == "list" else tuple(items)
    return content
