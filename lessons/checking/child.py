"""The grader's child: one process per submission, which only computes. It loads a private copy of the learner's
file under an audit hook, then answers the parent's calls (a Function's forward or backward, a function) on the
arrays the parent sends, with raw arrays or an error described in words (protocol.py). It judges nothing: the
parent compares what it returns with the reference path's numbers, which the parent computes itself."""
import functools
import importlib
import inspect
import os
import pathlib
import sys
import traceback

import numpy as np

import tinyattn as ta
import tinyattn.functional as F
from lessons.checking import learners_file, protocol
from lessons.flash_trace_compare import record_trace
from tinyattn import backend
from tinyattn.tensor import Context

GRADER = ("lessons.checker", "lessons.checking", "lessons.mistakes")     # modules a submission may not import
_GRADER_FILES = [learners_file.LESSONS / "checker.py", learners_file.LESSONS / "checking",
                 learners_file.LESSONS / "mistakes.py"]
_OTHER_PROCESSES = ("/dev/fd/", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/pts/")   # and /proc/*/fd*
_STARTS_PROCESSES = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.fork", "os.forkpty",
                     "os.spawn", "pty.spawn")


class Borrowed(Exception):
    """The submission called the library's twin of what it hands in."""


def serve(connection, output, memory_limit):
    """The child's life: its stdout and stderr go to the file output (the parent shows it as the learner's output),
    its address space is limited to memory_limit bytes (None: no limit), then it answers messages until the parent
    closes the pipe."""
    with open(output, "ab", buffering=0) as sink:
        sys.stdout.flush(), sys.stderr.flush()
        os.dup2(sink.fileno(), 1), os.dup2(sink.fileno(), 2)
    if sys.platform == "linux":               # die with the process that started this one, should it be killed
        import ctypes
        import signal
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)                     # 1: PR_SET_PDEATHSIG
    if os.name == "posix" and hasattr(connection, "fileno"):
        # Nothing but the pipe and the output stays open: a file descriptor inherited from the process that started
        # this one (a fork server's report of how its children end) would let the learner's code forge it.
        keep = connection.fileno()
        os.closerange(3, keep)
        os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
    if memory_limit:
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    child = Child()
    while True:
        try:
            message = protocol.read(connection)
        except EOFError:
            return
        protocol.write(connection, child.answer(message))


class Child:
    """What the child knows: the learner's names, the contexts of the forwards the parent may still call backward
    on (by handle), the device, and why the submission is refused (None while it is not)."""

    def __init__(self):
        self.contexts, self.names, self.refused = {}, {}, None
        self.device, self.calls = "cpu", 0

    def refuse(self, why, error=Borrowed):
        """The submission called a stand-in of the library's twin, or did what the audit hook refuses: it is
        refused, whatever it does next."""
        self.refused = self.refused or why
        raise error(why)

    def answer(self, message):
        """The reply to one message: {"ok": value}, {"error": what went wrong} or {"refused": why}."""
        for handle in message.get("free", ()):
            self.contexts.pop(handle, None)
        try:
            value = getattr(self, message["op"])(**message["arguments"])
        except Borrowed:
            value = None
        except Exception as error:
            return {"error": describe(error), **({"refused": self.refused} if self.refused else {})}
        return {"refused": self.refused} if self.refused else {"ok": value}

    def load(self, folder, filename, text, given, twins, solution, device):
        """Write the private copy folder/filename of the submission, stand the library's twins in, install the
        audit hook and load the copy. Returns each name the file defines that the grader can call ("Function" or
        "function") and why it is not the learner's own work (None when it is)."""
        self.device = device
        if device == "cuda":
            backend.set_default_device("cuda")
        path = pathlib.Path(folder) / filename
        path.write_bytes(text.tobytes())
        os.chdir(folder)
        for twin in twins:
            _stand_in(twin, self)
        _forget_the_grader()
        sys.addaudithook(_hook(solution, self))
        found = {}
        for name, value in vars(learners_file.load(path)).items():
            if isinstance(value, type) and issubclass(value, ta.Function):
                kind = "Function"
            elif inspect.isfunction(value):
                kind = "function"
            else:
                continue
            self.names[name] = value
            found[name] = {"kind": kind, "borrowed": learners_file.borrowed(name, value, given, solution)}
        return found

    def forward(self, name, args, kwargs, needs, random):
        """The learner's forward on the parent's arguments, with tinyattn's generator in the parent's state random
        (None: as it is). Returns the handle of its context, its output and the generator's state after it."""
        function, ctx = self.names[name], Context(tuple(needs))
        generator = backend.generator(self.device)
        if random is not None:
            generator.bit_generator.state = random
        output = function.forward(ctx, *self._on_device(args), **self._on_device(kwargs))
        self.calls += 1
        self.contexts[self.calls] = function, ctx
        return [self.calls, to_host(output), None if random is None else generator.bit_generator.state]

    def backward(self, handle, grad):
        function, ctx = self.contexts[handle]
        return to_host(function.backward(ctx, self._on_device(grad)))

    def call(self, name, args, kwargs):
        return to_host(self.names[name](*self._on_device(args), **self._on_device(kwargs)))

    def trace(self, name, q, k, v, grad, is_causal, block_size):
        """The trace(...) calls (lessons/exercises/given.py) that the learner's flash attention Function name makes
        in a forward and a backward on the parent's arrays: [forward's, backward's], lists of tuples of arrays."""
        calls = to_host(list(record_trace(self.names[name], *self._on_device([q, k, v, grad]), is_causal,
                                          block_size)))
        if any(np.asarray(a).dtype.kind not in "biuf" for call in calls[0] + calls[1] for a in call):
            raise TypeError("trace(...) takes arrays of numbers")
        return calls

    def _on_device(self, value):
        """value with its arrays on the device the parent asked for (the parent sends NumPy arrays)."""
        if self.device == "cpu":
            return value
        if isinstance(value, np.ndarray):
            return backend.to_device(value, "cuda")
        if isinstance(value, (list, tuple)):
            return type(value)(self._on_device(v) for v in value)
        if isinstance(value, dict):
            return {k: self._on_device(v) for k, v in value.items()}
        if hasattr(value, "__next__"):
            return iter([self._on_device(v) for v in value])
        return value


def to_host(value):
    """value with its Tensors and CuPy arrays as NumPy arrays (lists, tuples and iterators of them too): what the
    pipe carries, both ways."""
    if isinstance(value, ta.Tensor):
        return value.numpy()
    if backend.is_array(value):
        return backend.to_host(value)
    if isinstance(value, (list, tuple)):
        return type(value)(to_host(v) for v in value)
    if isinstance(value, dict):
        return {k: to_host(v) for k, v in value.items()}
    if hasattr(value, "__next__"):
        return iter([to_host(v) for v in value])
    return value


def describe(error):
    """An exception of the learner's code in words: its type, its message, the line of the learner's file it came
    from (the last such frame), and its notes."""
    frames = [f for f in traceback.StackSummary.extract(traceback.walk_tb(error.__traceback__), lookup_lines=False)
              if learners_file.is_learner_file(f.filename)]          # (the hook refuses reading the grader's lines)
    where = None
    if frames:
        frame = frames[-1]
        where = f"at {pathlib.Path(frame.filename).name} line {frame.lineno}, in {frame.name}: {frame.line}"
    bases = [c.__name__ for c in type(error).__mro__ if c.__module__ == "builtins"]
    return {"type": type(error).__name__, "builtin": bases[0] if bases else "Exception", "message": str(error),
            "where": where, "notes": [str(n) for n in getattr(error, "__notes__", [])]}


def _stand_in(twin, child):
    """Put a stand-in in place of the library's twin of what the learner hands in, wherever the library holds it:
    twin is a public function with twins ("softmax": both of its Functions) or "module:name", a function or a class
    (constructing it is the call: "tinyattn.data.bpe:ByteLevelBPE"). The stand-in's
    code reads as the library's file (so the source check refuses a re-export of it as the library's code); called,
    it records why the submission is refused and raises."""
    if ":" in twin:
        module, name = twin.split(":")
        originals = [getattr(importlib.import_module(module), name)]
    else:
        originals = list(F.twins._twins[twin])
    stand_ins = {}
    for original in originals:
        why = f"{original.__name__} of the library ({inspect.getfile(original)}) was called by the submission: a " \
              f"submission computes what it hands in itself"
        if isinstance(original, type) and issubclass(original, ta.Function):
            source = ("class Twin(Function):\n    @staticmethod\n    def forward(ctx, *args, **kwargs):\n"
                      "        refuse()\n\n    @staticmethod\n    def backward(ctx, grad):\n        refuse()\n")
        else:
            source = "def Twin(*args, **kwargs):\n    refuse()\n"           # a function, or a class to construct
        scope = {"Function": ta.Function, "refuse": functools.partial(child.refuse, why)}
        exec(compile(source, inspect.getfile(original), "exec"), scope)
        stand_in = scope["Twin"]
        stand_in.__name__ = stand_in.__qualname__ = original.__name__
        stand_in.__module__ = original.__module__
        stand_ins[id(original)] = stand_in
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] == "tinyattn" and module is not None:
            for attribute, value in list(vars(module).items()):
                if id(value) in stand_ins:
                    setattr(module, attribute, stand_ins[id(value)])
    if ":" not in twin:
        F.twins._twins[twin] = tuple(stand_ins[id(f)] for f in originals)


def _forget_the_grader():
    """Drop the grader's modules from sys.modules (this process keeps what it holds of them): a submission that
    imports one imports it afresh, which the audit hook refuses."""
    for name in list(sys.modules):
        if name.startswith(GRADER):
            del sys.modules[name]


def _hook(solution, child):
    """The audit hook (it cannot be removed): no opening or importing the bundled solutions (unless the file graded
    is one) or the grader's modules, no writing to another process's files through /proc or /dev/fd, no starting
    processes. What it refuses refuses the submission (child.refuse)."""
    refused_files = {"the grader's code": _GRADER_FILES, "a bundled solution": [] if solution else
                     [learners_file.SOLUTIONS]}
    refused_modules = GRADER + (() if solution else ("lessons.exercises.solutions",))

    def hook(event, args):
        if event == "open" and isinstance(args[0], (str, bytes)):
            path = os.path.abspath(os.fsdecode(args[0]))
            whose = _whose(path, refused_files) or _whose(os.path.realpath(path), refused_files)
            if whose:
                child.refuse(f"your code opens {path}, {whose}: a submission reads only its own file", PermissionError)
        elif event == "import" and isinstance(args[0], str) and args[0].startswith(refused_modules):
            whose = "a bundled solution" if args[0].startswith("lessons.exercises") else "the grader's code"
            child.refuse(f"your code imports {args[0]}, {whose}: a submission is its own work", ImportError)
        elif event.startswith(_STARTS_PROCESSES):
            child.refuse(f"your code starts a process ({event}): a submission computes in its own", PermissionError)
    return hook


def _whose(path, refused_files):
    """Whose path is, when a submission may not open it: another process's output (/proc/PID/fd, /dev/stdout, a
    terminal), or the name of a group in refused_files (name -> files and folders); else None."""
    if path.startswith(_OTHER_PROCESSES) or path.startswith("/proc/") and "/fd" in path:
        return "another process's output"
    return next((whose for whose, files in refused_files.items()
                 if any(path == str(f) or path.startswith(str(f) + os.sep) for f in files)), None)
