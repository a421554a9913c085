"""What the grader's parent and its child say to each other: one message is a JSON header followed by the raw
bytes of the arrays it holds. Nothing in it can carry code (no pickle): the header holds None, booleans, numbers,
strings, lists and dicts with string keys (as tagged lists of pairs); an array travels as its dtype (numbers and
booleans only), its shape and its bytes; a tuple and a stream of values (an iterator) are tagged lists. On the
pipe a message goes after its length in 8 bytes; on POSIX write and read use the file descriptor itself, waiting
before each read (a child that sends half a message and loops cannot hold the parent), and Connection's own
send_bytes and recv_bytes on Windows."""
import json
import math
import os
import struct

import numpy as np

LARGEST = 1 << 30                     # bytes of one message: anything longer is garbage, not a result
_LENGTH = struct.Struct("<I")
_FRAME = struct.Struct("<Q")
BY_FD = os.name == "posix"            # read and write the pipe's file descriptor (not on Windows)


class Garbled(Exception):
    """A message that is not one of ours."""


def write(connection, value):
    """Send the message holding value down the pipe (a multiprocessing Connection)."""
    send(connection, encode(value))


def send(connection, data):
    """Send the bytes of a message (encode's) down the pipe."""
    if not BY_FD:
        connection.send_bytes(data)
        return
    data, fd = memoryview(_FRAME.pack(len(data)) + data), connection.fileno()
    while data:
        data = data[os.write(fd, data):]


def read(connection, ready=lambda deadline: True, deadline=None):
    """The value of the next message on the pipe (the other end sends one and waits for the answer, so nothing may
    follow it). ready(deadline) is asked before each read whether data comes in before the deadline (False:
    TimeoutError). EOFError when the other end closed the pipe; Garbled for anything but a message."""
    if not BY_FD:                                    # Windows: its pipes have handles, not file descriptors
        if not ready(deadline):
            raise TimeoutError
        return decode(connection.recv_bytes(LARGEST))
    data, length, fd = bytearray(), None, connection.fileno()
    while length is None or len(data) < _FRAME.size + length:
        if not ready(deadline):
            raise TimeoutError
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            raise EOFError
        data += chunk
        if length is None and len(data) >= _FRAME.size:
            (length,) = _FRAME.unpack_from(data)
            if length > LARGEST:
                raise Garbled(f"a message of {length} bytes")
    if len(data) > _FRAME.size + length:
        raise Garbled(f"{len(data) - _FRAME.size - length} bytes after the message")
    return decode(memoryview(data)[_FRAME.size:])


def encode(value):
    """The bytes of one message holding value."""
    arrays = []
    header = json.dumps(_plain(value, arrays), separators=(",", ":")).encode()
    return b"".join([_LENGTH.pack(len(header)), header] + [a.tobytes() for a in arrays])


def _plain(value, arrays):
    """value with its arrays replaced by their description (kept in arrays), its tuples and iterators tagged."""
    if isinstance(value, np.generic):                 # before float: np.float64 is one
        value = np.asarray(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            raise TypeError(f"an array of {value.dtype} cannot be sent: only numbers and booleans")
        if value.nbytes > LARGEST:                     # a broadcast view is small until it is copied
            raise ValueError(f"an array of shape {value.shape} and {value.dtype} ({value.nbytes:,} bytes) cannot be "
                             f"sent: more than {LARGEST:,} bytes")
        arrays.append(np.ascontiguousarray(value))
        return {"array": [value.dtype.str, list(value.shape)]}
    if isinstance(value, list):
        return [_plain(v, arrays) for v in value]
    if isinstance(value, tuple):
        return {"tuple": [_plain(v, arrays) for v in value]}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"dict": [[k, _plain(v, arrays)] for k, v in value.items()]}     # every JSON object is tagged
    if hasattr(value, "__next__"):
        return {"stream": [_plain(v, arrays) for v in value]}
    raise TypeError(f"a {type(value).__name__} cannot be sent: only arrays, numbers, strings and lists of them")


def decode(data):
    """The value of a message's bytes; Garbled when they are not a message."""
    try:
        (length,) = _LENGTH.unpack_from(data)
        offset = [_LENGTH.size + length]
        value = json.loads(bytes(data[_LENGTH.size:offset[0]]), object_hook=lambda d: _restored(d, data, offset))
    except (ValueError, TypeError, KeyError, struct.error, RecursionError) as error:
        raise Garbled(f"{type(error).__name__}: {error}") from None
    if offset[0] != len(data):
        raise Garbled(f"{len(data) - offset[0]} bytes left over")
    return value


def _restored(tagged, data, offset):
    """The value of a tagged JSON object (json calls this on each, innermost first, in the order they are written,
    which is the order of the arrays' bytes)."""
    (tag, content), = tagged.items()
    if tag == "array":
        dtype, shape = np.dtype(content[0]), tuple(int(n) for n in content[1])
        if dtype.kind not in "biuf" or any(n < 0 for n in shape):
            raise ValueError(f"not an array of numbers: {content}")
        count = math.prod(shape)
        size = dtype.itemsize * count
        if offset[0] + size > len(data):
            raise ValueError("an array longer than the message")
        array = np.frombuffer(data, dtype, count, offset[0]).reshape(shape).copy()
        offset[0] += size
        return array
    return {"dict": dict, "tuple": tuple, "stream": iter}[tag](content)
