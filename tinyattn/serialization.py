"""Checkpoints as .npz: written atomically, read without pickle.

save() writes to a temporary file in the target's folder, flushes it to disk, then renames it over the target, so
a crash leaves either the old checkpoint or the new one, never half of one. load() uses allow_pickle=False: a file
carrying pickled Python objects is refused, never executed.
"""
import os
import tempfile
import zipfile

import numpy

from . import backend
from .tensor import Tensor, as_array


class CheckpointError(ValueError):
    pass


def save(state_dict, path):
    """Write name -> Tensor (or array) to path as an .npz archive, atomically."""
    arrays = {name: backend.to_host(as_array(t)) for name, t in state_dict.items()}
    for name, array in arrays.items():
        if array.dtype.hasobject:
            raise TypeError(f"save: {name!r} is a {type(state_dict[name]).__name__} that becomes an object array; "
                            "checkpoints hold numeric arrays only")
    folder = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".npz")
    try:
        with os.fdopen(handle, "wb") as file:
            numpy.savez(file, **arrays)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def load(path, device=None):
    """Read a checkpoint written by save() as name -> Tensor (on device, default: the default device)."""
    try:
        with numpy.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except ValueError as error:
        if "allow_pickle" in str(error):
            raise CheckpointError(f"{path} holds pickled Python objects; refusing to load them (they could run "
                                  "code). tinyattn checkpoints hold plain arrays only.") from None
        raise CheckpointError(f"{path} is not a readable checkpoint: {error}") from None
    except (zipfile.BadZipFile, EOFError, OSError) as error:
        raise CheckpointError(f"{path} is truncated or not an .npz checkpoint ({type(error).__name__}: {error})") \
            from None
    device = device or backend.default_device()
    return {name: Tensor(backend.to_device(array, device)) for name, array in arrays.items()}
