"""The grader's parent side of one submission: a child process (child.py) that loads the learner's file and runs
its code on the arrays the parent sends, with a time limit and, on the CPU, a memory limit, inside the operating
system's sandbox where it runs (sandbox.py: bubblewrap on Linux), else as a plain process. The parent never
imports the learner's code: the learner's names are stand-ins here (a Function class whose forward and backward, or
a function whose call, run in the child), so the checks run the models, gradcheck and the reference path in the
parent and only the learner's own math in the child. A child that exits, is killed, times out or answers garbage
is a Stopped error with its reason; the next call starts a fresh child, until the time is spent."""
import builtins
import multiprocessing
import os
import pathlib
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref

import numpy as np

import tinyattn as ta
from lessons.checking import child, protocol, sandbox
from lessons.checking.learners_file import Refused
from tinyattn import backend

TIMEOUT = 60.0                   # seconds a submission's children may compute, in all: the slowest exercise's
#                                  solution waits about 0.45 s on its child on a shared 2-core Zen 5 (a slow laptop,
#                                  a loaded machine, spawn's start of 0.5 s a child: a hundred times over is plenty)
MEMORY = 1 << 30                 # RLIMIT_AS of a child on the CPU: the heaviest exercise's child peaks at 235 MB
#                                  of address space started by spawn, 200 MB by the fork server
OUTPUT_LINES = 40                # lines of a submission's output shown
OUTPUT_BYTES = 16 << 10          # bytes of it read, at most (the child writes at most child.FILE_SIZE)
STARTING = 120.0                 # seconds a child may take to start (Python, NumPy, tinyattn), before the
#                                  submission's time counts: about 1 s in the sandbox on a loaded 2-core Zen 5


def start_method():
    """How children start: $TINYATTN_GRADER_START (spawn, forkserver or fork) when set; else a fork server that
    has imported tinyattn and the child's code, nothing of any learner's, where the platform has one and the device
    is the CPU; else spawn (macOS, Windows, CUDA: a forked CUDA context breaks)."""
    chosen = os.environ.get("TINYATTN_GRADER_START")
    if chosen:
        return chosen
    if "forkserver" in multiprocessing.get_all_start_methods() and backend.default_device() == "cpu":
        return "forkserver"
    return "spawn"


class Stopped(Exception):
    """The child running the learner's file stopped before it answered: why."""


class LearnerError(Exception):
    """An exception the learner's code raised in the child, as the child described it: `explained` is its type,
    message, the line of the learner's file it came from and its notes."""


def learner_error(described):
    """The exception to raise here for the child's description of one: of the builtin class it derives from (so that
    `except ValueError` still catches a learner's ValueError), named as the learner's, and a LearnerError."""
    base = getattr(builtins, str(described.get("builtin")), Exception)
    base = base if isinstance(base, type) and issubclass(base, Exception) else Exception
    try:
        cls = type(str(described["type"]), (LearnerError, base), {})
    except TypeError:                                   # a builtin whose layout does not mix
        cls = type(str(described["type"]), (LearnerError,), {})
    error = cls.__new__(cls)
    error.args = (str(described["message"]),)
    where = [described["where"]] if described.get("where") else []
    error.explained = "\n".join([f"{described['type']}: {described['message']}", *map("  {}".format, where),
                                 *map(str, described.get("notes", []))])
    return error


class Learner:
    """One submission, run in child processes: filename and text (its bytes, read before any child started), the
    methods the exercise hands over (given), the library's twins to stand in for (twins), whether it is a bundled
    solution, whether a refusal stops the check (keep_going: it fails what is left instead), timeout in seconds."""

    def __init__(self, filename, text, given=(), twins=(), solution=False, keep_going=False, timeout=TIMEOUT):
        self.filename, self.text, self.timeout, self.keep_going = filename, text, timeout, keep_going
        self.load_arguments = dict(given=list(given), twins=list(twins), solution=solution,
                                   device=backend.default_device())
        self.folder = pathlib.Path(tempfile.mkdtemp(prefix="tinyattn-grader-"))
        self.process, self.connection, self.spent, self.freed, self.refused = None, None, 0.0, [], None

    def names(self):
        """Start the child and load the file: the learner's names as stand-ins (name -> Function class or function)
        and why each is not the learner's own work (name -> None when it is)."""
        found = self._start()
        if not isinstance(found, dict):
            raise self._garbage(f"a {type(found).__name__} for the names of the file")
        stand_ins = {name: self._stand_in(name, about.get("kind")) for name, about in found.items()}
        return stand_ins, {name: about.get("borrowed") for name, about in found.items()}

    def request(self, op, **arguments):
        """What the child answers to op (forward, backward, call) with arguments; a fresh child first when the last
        one stopped."""
        if self.process is None:
            self._start()
        return self._exchange(op, arguments)

    def output(self):
        """Stop the child; what it printed (stdout and stderr), at most OUTPUT_LINES lines of its first
        OUTPUT_BYTES bytes."""
        self._stop()
        try:
            with open(self.folder / "output", "rb") as file:
                head, size = file.read(OUTPUT_BYTES), os.fstat(file.fileno()).st_size
        except FileNotFoundError:
            head, size = b"", 0
        shutil.rmtree(self.folder, ignore_errors=True)
        lines = head.decode("utf-8", "replace").splitlines()
        if size > len(head):
            return lines[:OUTPUT_LINES] + [f"... and more: {size:,} bytes in all, of which the first {len(head):,} "
                                           "are read"]
        more = len(lines) - OUTPUT_LINES
        return lines[:OUTPUT_LINES] + ([f"... and {more} more lines"] if more > 0 else [])

    def _start(self):
        if self.spent >= self.timeout:
            raise Stopped(f"the process running your file timed out after {self.timeout:g} s")
        memory = MEMORY if self.load_arguments["device"] == "cpu" and sys.platform != "win32" else None
        private = self.folder / "copy"
        if sandbox.unavailable() is None:
            self.connection, theirs = multiprocessing.Pipe()
            with open(self.folder / "output", "ab") as sink:
                self.process = _Sandboxed(subprocess.Popen(
                    sandbox.command(str(private), self.load_arguments["device"]) + [str(theirs.fileno()),
                                                                                     str(memory or 0)],
                    stdin=subprocess.DEVNULL, stdout=sink, stderr=sink, pass_fds=[theirs.fileno()],
                    env=child.cleared_environment(os.environ, str(private))))
        else:
            context = multiprocessing.get_context(start_method())
            if context.get_start_method() == "forkserver":
                context.set_forkserver_preload(["lessons.checking.child"])
            self.connection, theirs = context.Pipe()
            self.process = context.Process(target=child.serve, args=(theirs, str(self.folder / "output"), memory),
                                           daemon=True, name=f"grading {self.filename}")
            self.process.start()
            (private / child.FIGURES).mkdir(parents=True, exist_ok=True)
            for path in sandbox.font_lists():
                shutil.copyfile(path, private / child.FIGURES / path.name)
        theirs.close()
        if protocol.BY_FD:
            self.poller = select.poll()
            self.poller.register(self.connection.fileno(), select.POLLIN)
        self.freed = []                                 # the contexts of a stopped child went with it
        try:                                            # started: nothing of the learner's has run yet
            ready = protocol.read(self.connection, self._ready, time.monotonic() + STARTING)
        except TimeoutError:
            self._stop()
            raise Stopped(f"the process to run your file did not start within {STARTING:g} s") from None
        except (EOFError, OSError):
            raise self._ended() from None
        except protocol.Garbled as error:
            raise self._garbage(str(error)) from None
        if ready != {"ready": True}:
            raise self._garbage(f"{str(ready)[:60]!r} for the word that it is ready")
        return self._exchange("load", dict(folder=str(private), filename=self.filename,
                                           text=np.frombuffer(self.text, np.uint8), **self.load_arguments))

    def _exchange(self, op, arguments):
        freed, self.freed = self.freed, []
        began = time.monotonic()
        try:
            protocol.write(self.connection, {"op": op, "arguments": arguments, "free": freed})
            reply = protocol.read(self.connection, self._ready, max(self.timeout - self.spent, 0) + began)
        except TimeoutError:
            self.spent = self.timeout
            self._stop()
            raise Stopped(f"the process running your file timed out after {self.timeout:g} s") from None
        except (EOFError, OSError):
            raise self._ended() from None
        except protocol.Garbled as error:
            raise self._garbage(str(error)) from None
        finally:
            self.spent += time.monotonic() - began
        if not isinstance(reply, dict) or not {"ok", "error", "refused"} & set(reply):
            raise self._garbage(f"the reply {str(reply)[:60]!r}")
        if reply.get("refused"):
            self.refused = str(reply["refused"])
            raise Refused(self.refused) if not self.keep_going else LookupError(f"refused: {self.refused}")
        if "error" in reply:
            raise learner_error(reply["error"] if isinstance(reply["error"], dict) else
                                {"type": "Error", "message": reply["error"]})
        return reply["ok"]

    def _ready(self, until):
        """Whether the child's answer comes in before the monotonic time until."""
        left = max(until - time.monotonic(), 0)
        return self.poller.poll(left * 1000) if protocol.BY_FD else self.connection.poll(left)

    def _ended(self):
        """Stopped, saying how the child ended (it closed the pipe: it exited, or was killed)."""
        self.process.join(5)
        code = self.process.exitcode
        self._stop()
        if code is None:
            how = "closed its end of the pipe"
        elif code < 0:
            how = f"was killed by signal {-code} ({signal.Signals(-code).name})"
        else:
            how = f"exited with status {code}"
        return Stopped(f"the process running your file {how} before returning results")

    def _garbage(self, what):
        self._stop()
        return Stopped(f"the process running your file returned something that is not a result: {what}")

    def _stop(self):
        if self.process is not None:
            self.connection.close()
            self.process.join(0.5)
            if self.process.exitcode is None:
                self.process.kill()
                self.process.join()
            self.process = None

    def _stand_in(self, name, kind):
        """The learner's name as the parent calls it: a Function class whose forward and backward run in the child,
        or a function that does."""
        learner = self
        if kind == "Function":
            class Remote(ta.Function):
                @staticmethod
                def forward(ctx, *args, **kwargs):
                    device = _device_of(args)
                    handle, output, drawn = learner.request(
                        "forward", name=name, args=child.to_host(list(args)), kwargs=child.to_host(kwargs),
                        needs=list(ctx.needs_input_grad), random=_random_state(device))
                    if drawn is not None:                     # what the learner's dropout drew, drawn here too
                        backend.generator(device).bit_generator.state = drawn
                    ctx.handle = handle
                    weakref.finalize(ctx, learner.freed.append, handle)
                    return _on_device(output, device)

                @staticmethod
                def backward(ctx, grad):
                    return _on_device(learner.request("backward", handle=ctx.handle, grad=child.to_host(grad)),
                                      _device_of([grad]))
                @staticmethod
                def trace_calls(q, k, v, grad, is_causal, block_size):
                    """The trace(...) calls of a flash attention Function's forward and backward, made in the
                    child, and the L its forward saved (lessons/flash_trace_compare.py's record_trace)."""
                    return learner.request("trace", name=name, q=q, k=k, v=v, grad=grad, is_causal=is_causal,
                                           block_size=block_size)

                @staticmethod
                def saved_tensors_of(ctx):
                    """What the forward of ctx saved for backward in the child (ctx.saved_tensors there), as
                    NumPy arrays (None for anything else)."""
                    return learner.request("saved", handle=ctx.handle)
            Remote.__name__ = Remote.__qualname__ = name
            return Remote

        def remote(*args, **kwargs):
            return learner.request("call", name=name, args=child.to_host(list(args)), kwargs=child.to_host(kwargs))
        remote.__name__ = remote.__qualname__ = name
        return remote


class _Sandboxed:
    """A child in the sandbox, as the runner handles a multiprocessing.Process: join, exitcode, kill."""

    def __init__(self, popen):
        self.popen = popen

    def join(self, timeout=None):
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    @property
    def exitcode(self):
        """As multiprocessing's: -N for a child killed by signal N (bwrap exits with 128 + N)."""
        code = self.popen.poll()
        return 128 - code if code is not None and code > 128 else code

    def kill(self):
        self.popen.kill()


def _random_state(device):
    """The state of tinyattn's generator for device, which the child takes on before the learner's forward (so that
    its dropout draws what the reference path's does here); None where it cannot travel (CuPy's)."""
    state = getattr(getattr(backend.generator(device), "bit_generator", None), "state", None)
    return state if isinstance(state, dict) else None


def _device_of(arrays):
    """The device of the first array among arrays (CPU when there is none)."""
    return next((backend.device_of(a) for a in arrays if backend.is_array(a)), "cpu")


def _on_device(value, device):
    """value's arrays on device (the child sends NumPy arrays)."""
    if device == "cpu":
        return value
    if isinstance(value, np.ndarray):
        return backend.to_device(value, device)
    if isinstance(value, (list, tuple)):
        return type(value)(_on_device(v, device) for v in value)
    return value
