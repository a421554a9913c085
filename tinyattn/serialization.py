"""Checkpoints as .npz archives: written atomically, read without pickle, nested structures included.

save(obj, path) takes a state_dict (name -> tensor) or any nesting of dicts, lists and tuples whose leaves are tensors,
arrays, numbers, strings, booleans or None: {"model": model.state_dict(), "optimizer": opt.state_dict(),
"iter_num": 3, "config": {...}} saves as it is. The archive holds one .npy member per array, named by its place in
obj ("model/blocks.0.ln1.weight"), and tinyattn.json, which records the nesting and the plain values; numpy.load
reads the arrays of any tinyattn checkpoint, and any string key round-trips.

Writing goes to a temporary file beside the target, flushed to disk and renamed over it, so a crash leaves the old
checkpoint or the new one, never half of one. A temporary's name carries the writer's process id; the next save to
the same target removes those of processes that no longer run (a killed save leaves nothing behind for long).
Reading never unpickles: a file that is not a tinyattn checkpoint is refused, saying what it looks like.
"""
import json
import os
import tempfile
import zipfile

import numpy

from . import backend
from .tensor import Tensor, as_array

STRUCTURE = "tinyattn.json"


class CheckpointError(ValueError):
    pass


# -- saving --------------------------------------------------------------------------------------------------------
def save(obj, path):
    """Write obj (see the module's docstring) to path, atomically."""
    arrays = {}
    structure = _encode(obj, "", arrays)
    path = os.fspath(path)
    folder, name = os.path.split(os.path.abspath(path))
    _remove_orphans(folder, name)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{name}.tmp-{os.getpid()}-", suffix=".npz")
    try:
        with os.fdopen(handle, "wb") as file:
            _write_archive(file, arrays, structure)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o666 & ~_umask())      # as a plain open() would have made it, not mkstemp's 0600
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


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
def load(path, map_location=None, device=None):
    """Read what save() wrote, its arrays as tensors on map_location (or device; default: the default device)."""
    device = backend.check_device(str(map_location or device or backend.default_device()))
    path = os.fspath(path)
    with open(path, "rb") as file:
        start = file.read(8)
    if not start.startswith(b"PK\x03\x04"):
        raise CheckpointError(f"{path} is not a tinyattn checkpoint: {_looks_like(start)}")
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            if STRUCTURE in names:
                return _decode(json.loads(archive.read(STRUCTURE)), archive, device, path)
            if names and all(n.endswith(".npy") for n in names):       # a plain .npz of named arrays
                return {n[:-4]: _array(archive, n[:-4], device, path) for n in names}
    except (zipfile.BadZipFile, EOFError, OSError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path} is truncated or damaged ({type(error).__name__}: {error})") from None
    if any(n.endswith("data.pkl") for n in names):
        raise CheckpointError(f"{path} looks like a PyTorch checkpoint (torch.save: a zip archive holding data.pkl, "
                              "which is pickled). tinyattn reads no pickles; in PyTorch, save the arrays instead: "
                              "numpy.savez(path, **{k: v.cpu().numpy() for k, v in state_dict.items()})")
    raise CheckpointError(f"{path} is a zip archive but not a checkpoint: it holds {names[:5]}")


def _looks_like(start):
    if start.startswith(b"\x93NUMPY"):
        return "it holds a single NumPy array (.npy); read it with numpy.load"
    if start[:1] == b"\x80":
        return ("it holds pickled Python objects (as torch.save's legacy format and pickle.dump write them); "
                "refusing to load them, since unpickling can run code")
    return f"it starts with the bytes {start!r}, where an .npz archive starts with b'PK\\x03\\x04'"


def _array(archive, member, device, path):
    try:
        with archive.open(member + ".npy") as file:
            array = numpy.lib.format.read_array(file, allow_pickle=False)
    except ValueError as error:
        if "pickle" in str(error):
            raise CheckpointError(f"{path} holds pickled Python objects in {member!r}; refusing to load them (they "
                                  "could run code). tinyattn checkpoints hold plain arrays only.") from None
        raise CheckpointError(f"{path}: {member!r} is not a readable array ({error})") from None
    return Tensor(backend.to_device(array, device))


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
