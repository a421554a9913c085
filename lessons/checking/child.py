"""The grader's child: one process per submission, which only computes. It loads a private copy of the learner's
file under an audit hook, then answers the parent's calls (a Function's forward or backward, a function) on the
arrays the parent sends, with raw arrays or an error described in words (protocol.py). It judges nothing: the
parent compares what it returns with the reference path's numbers, which the parent computes itself."""
import functools
import importlib
import inspect
import os
import pathlib
import signal
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
_OTHER_PROCESSES = ("/dev/fd/", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/pts/")   # and /proc/*/fd*
_STARTS_PROCESSES = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.fork", "os.forkpty",
                     "os.spawn", "pty.spawn")
_CHANGES_FILES = ("os.remove", "os.rename", "os.link", "os.symlink", "os.rmdir", "os.mkdir", "os.truncate",
                  "os.chmod", "os.chown", "os.utime")
_WRITES = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
FILE_SIZE = 16 << 20             # RLIMIT_FSIZE: bytes of any file the child writes, its output among them
PROCESSES = 64                   # RLIMIT_NPROC in the sandbox (its user namespace counts its own processes)
FIGURES = ".matplotlib"          # matplotlib's folder in the scratch folder (MPLCONFIGDIR): its font lists


class Borrowed(Exception):
    """The submission called the library's twin of what it hands in."""


def serve(connection, output, memory_limit, sandboxed=False):
    """The child's life: its stdout and stderr go to the file output (the parent shows it as the learner's output;
    None: they go there already), its address space is limited to memory_limit bytes (None: no limit), each file
    it writes to FILE_SIZE bytes (and, sandboxed, its processes to PROCESSES), then it says it is ready and answers
    messages until the parent closes the pipe."""
    if output is not None:
        with open(output, "ab", buffering=0) as sink:
            sys.stdout.flush(), sys.stderr.flush()
            os.dup2(sink.fileno(), 1), os.dup2(sink.fileno(), 2)
    if sys.platform == "linux":               # die with the process that started this one, should it be killed
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)                     # 1: PR_SET_PDEATHSIG
    if os.name == "posix" and hasattr(connection, "fileno"):
        # Nothing but the pipe and the output stays open: a file descriptor inherited from the process that started
        # this one (a fork server's report of how its children end) would let the learner's code forge it.
        keep = connection.fileno()
        os.closerange(3, keep)
        os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
    if os.name == "posix":
        import resource
        limits = {resource.RLIMIT_AS: memory_limit, resource.RLIMIT_FSIZE: FILE_SIZE,
                  resource.RLIMIT_NPROC: PROCESSES if sandboxed else None}
        for limit, value in limits.items():
            if value:
                resource.setrlimit(limit, (value, value))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)      # a write past FILE_SIZE fails (EFBIG), kills nothing
    sys.dont_write_bytecode = True                         # nothing written outside the scratch folder
    child = Child()
    protocol.write(connection, {"ready": True})
    while True:
        try:
            message = protocol.read(connection)
        except EOFError:
            return
        reply = child.answer(message)
        try:
            data = protocol.encode(reply)
        except (TypeError, ValueError) as error:               # an answer that is not arrays of numbers
            data = protocol.encode({"error": describe(error)})
        protocol.send(connection, data)


def cleared_environment(environ, scratch):
    """What the child keeps of the environment environ (the grader's: an instructor's secrets, perhaps): tinyattn's
    settings (TINYATTN_*) and what Python needs to find the library and the lessons and to write nowhere but in the
    scratch folder."""
    roots = dict.fromkeys([str(learners_file.LESSONS.parent), str(learners_file.PACKAGE.parent)])
    return {**{key: value for key, value in environ.items() if key.startswith("TINYATTN_")},
            "PATH": "/usr/bin:/bin", "HOME": scratch, "TMPDIR": scratch, "MPLCONFIGDIR": os.path.join(scratch, FIGURES),
            "PYTHONPATH": os.pathsep.join(roots), "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1",
            "LANG": "C.UTF-8"}


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
        environment = cleared_environment(os.environ, folder)
        os.environ.clear()
        os.environ.update(environment)
        for twin in twins:
            _stand_in(twin, self)
        _forget_the_grader()
        sys.addaudithook(_hook(solution, self, folder))
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
        in a forward and a backward on the parent's arrays, and the L its forward saved: [forward's, backward's, L],
        lists of tuples of arrays and an array (or None)."""
        calls = to_host(list(record_trace(self.names[name], *self._on_device([q, k, v, grad]), is_causal,
                                          block_size)))
        if any(np.asarray(a).dtype.kind not in "biuf" for call in calls[0] + calls[1] for a in call):
            raise TypeError("trace(...) takes arrays of numbers")
        if calls[2] is not None and calls[2].dtype.kind not in "biuf":
            calls[2] = None                                  # not an L the given backward could read
        return calls

    def saved(self, handle):
        """What the learner's forward of handle saved for backward (ctx.saved_tensors), each array as NumPy's; None
        for whatever is not an array of numbers."""
        return [a if backend.is_array(a) and a.dtype.kind in "biuf" else None
                for a in to_host(list(self.contexts[handle][1].saved_tensors))]

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
    """Make the library's twin of what the learner hands in refuse when called, under every name it is reachable
    by: twin is a public function with twins ("softmax": both of its Functions) or "module:name", a function or a
    class (constructing it is the call: "tinyattn.preprocessing.bpe:ByteLevelBPE"). A class is changed in place (its
    forward and backward, or its constructor, refuse), so the registry, Function.__subclasses__() and every module
    holding it hold the refusing class; a function is replaced in every tinyattn module by a stand-in whose code
    reads as the library's file (so the source check refuses a re-export of it as the library's code). Called, it
    records why the submission is refused and raises."""
    if ":" in twin:
        module, name = twin.split(":")
        originals = [getattr(importlib.import_module(module), name)]
    else:
        originals = list(F.twins._twins[twin])
    stand_ins = {}
    for original in originals:
        why = f"{original.__name__} of the library ({inspect.getfile(original)}) was called by the submission: a " \
              f"submission computes what it hands in itself"
        scope = {"refuse": functools.partial(child.refuse, why)}
        exec(compile("def twin(*args, **kwargs):\n    refuse()\n", inspect.getfile(original), "exec"), scope)
        refusing = scope["twin"]
        if isinstance(original, type) and issubclass(original, ta.Function):
            original.forward, original.backward = staticmethod(refusing), staticmethod(refusing)
        elif isinstance(original, type):
            original.__init__ = refusing
        else:
            refusing.__name__ = refusing.__qualname__ = original.__name__
            refusing.__module__ = original.__module__
            stand_ins[id(original)] = refusing
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] == "tinyattn" and module is not None:
            for attribute, value in list(vars(module).items()):
                if id(value) in stand_ins:
                    setattr(module, attribute, stand_ins[id(value)])


def _forget_the_grader():
    """Drop the grader's modules from sys.modules (this process keeps what it holds of them): a submission that
    imports one imports it afresh, which the audit hook refuses."""
    for name in list(sys.modules):
        if name.startswith(GRADER):
            del sys.modules[name]


def _hook(solution, child, scratch):
    """The audit hook, a second line behind the sandbox and the only one without it (it cannot be removed): no
    opening or importing the bundled solutions (unless the file graded is one), no importing the grader's modules,
    no writing, deleting or linking outside the scratch folder, no opening a folder outside it and no leaving it
    (os.chdir: the hook sees the names that calls with a dir_fd give, not the folder, so every folder held open and
    the working folder are the scratch folder's), no reaching another process (its files through /proc or
    /dev/fd, a signal), no starting processes, no ctypes. What it refuses refuses the submission (child.refuse).
    Correct code does none of these; reading the grader's code, as a warning's or a traceback's lines do, is allowed
    (the sandbox shows the child's own modules only)."""
    solutions = [] if solution else [str(learners_file.SOLUTIONS)]
    refused_modules = GRADER + (() if solution else ("lessons.exercises.solutions",))

    def refuse(what):
        child.refuse(f"your code {what}: a submission computes in its own process, on its own file", PermissionError)

    def hook(event, args):
        if event == "open" and isinstance(args[0], (str, bytes)):
            given, mode, flags = os.fsdecode(args[0]), args[1], args[2]
            path = os.path.abspath(given)
            if mode is None and os.path.isdir(path) and not _inside(path, scratch):
                refuse(f"opens the folder {path} (whose descriptor would reach its files through dir_fd)")
            whose = _whose(path, solutions) or _whose(os.path.realpath(path), solutions)
            if whose:
                child.refuse(f"your code opens {path}, {whose}: a submission reads only its own file", PermissionError)
            if (any(c in mode for c in "wax+") if mode else flags & _WRITES) and not _inside(path, scratch):
                refuse(f"writes {path}, outside its own folder")
        elif event.startswith(_CHANGES_FILES):          # (relative to a dir_fd: one of the scratch folder's)
            for path in (os.path.abspath(os.fsdecode(a)) for a in args if isinstance(a, (str, bytes, os.PathLike))):
                if not _inside(path, scratch):
                    refuse(f"changes {path} ({event}), outside its own folder")
        elif event == "import" and isinstance(args[0], str) and args[0].startswith(refused_modules):
            whose = "a bundled solution" if args[0].startswith("lessons.exercises") else "the grader's code"
            child.refuse(f"your code imports {args[0]}, {whose}: a submission is its own work", ImportError)
        elif event.startswith(_STARTS_PROCESSES):
            refuse(f"starts a process ({event})")
        elif event == "sqlite3.connect" and not _inside(os.path.abspath(os.fsdecode(args[0])), scratch):
            refuse(f"opens the database {os.fsdecode(args[0])}, outside its own folder")   # (C opens it, past "open")
        elif event == "os.chdir":          # relative names resolve from the scratch folder, as the hook reads them
            refuse("changes its working folder")
        elif event == "os.killpg" or event == "os.kill" and args[0] != os.getpid():
            refuse(f"sends a signal to another process ({event}{args})")
        elif event.startswith("ctypes."):
            refuse(f"calls C through ctypes ({event})")
    return hook


def _inside(path, folder):
    return path == folder or path.startswith(folder + os.sep)


def _whose(path, solutions):
    """Whose path is, when a submission may not open it: another process's (/proc/PID/fd, its environment or
    memory, /dev/stdout, a terminal) or a bundled solution (under one of the folders solutions); else None."""
    if path.startswith(_OTHER_PROCESSES) or path.startswith("/proc/") and any(
            part in path for part in ("/fd", "/environ", "/mem", "/map_files", "/root", "/cwd")):
        return "another process's files"
    return "a bundled solution" if any(_inside(path, folder) for folder in solutions) else None


if __name__ == "__main__":                 # in the sandbox (sandbox.py): python -m lessons.checking.child FD MEMORY
    from multiprocessing.connection import Connection
    serve(Connection(int(sys.argv[1])), None, int(sys.argv[2]) or None, sandboxed=True)
