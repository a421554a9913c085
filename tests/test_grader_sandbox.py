"""Submissions that try their luck against the grader's walls (issue 57): each route is graded inside the operating
system's sandbox (bubblewrap) and in the fallback where it cannot run (TINYATTN_GRADER_SANDBOX=none: a plain process
under the audit hook). The sandbox stops every route; the test of the fallback says exactly which it still cannot
stop, the routes lessons/exercises/README.md lists for instructors."""
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from lessons import checker  # noqa: E402  (the repository root, not tests/, holds the lessons package)
from lessons.checking import child, runner, sandbox  # noqa: E402
from lessons.checking.learners_file import SOLUTIONS  # noqa: E402

FALLBACK_CANNOT_STOP = {"reads another student's file"}
SOFTMAX = ("from tinyattn import Function\n\n\nclass Softmax(Function):\n    @staticmethod\n"
           "    def forward(ctx, x, dim):\n        return x\n\n    @staticmethod\n    def backward(ctx, grad):\n"
           "        return grad, None\n")
STEAL = "exec(compile(stolen, 'mine.py', 'exec'))\n"          # a solution's code as the submission's own


@pytest.fixture(params=["sandbox", "fallback"])
def walls(request, monkeypatch):
    if request.param == "sandbox" and sandbox.unavailable():
        pytest.skip(f"the sandbox cannot run here: {sandbox.unavailable()}")
    if request.param == "fallback":
        monkeypatch.setenv("TINYATTN_GRADER_SANDBOX", "none")
    return request.param


def grade(submission, *options, env=None, timeout=240):
    """`python -m lessons check softmax_backward --file submission --json` in a session of its own (a submission
    that signals its process group reaches only it): (exit code, stdout, stderr); None when it did not end."""
    try:
        done = subprocess.run([sys.executable, "-m", "lessons", "check", "softmax_backward", "--file",
                               str(submission), "--json", *options], cwd=ROOT, capture_output=True,
                              timeout=timeout, start_new_session=True, env=env)
    except subprocess.TimeoutExpired:
        return None
    return done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")


def passed_or_printed(graded, printed=None):
    """Whether the grade book says PASSED, or the submission's output holds printed: the route worked."""
    code, out, err = graded
    return json.loads(out)["passed"] > 0 or (printed is not None and printed in out + err)


def submit(tmp_path, code):
    path = tmp_path / "student" / "softmax_backward.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(code)
    return path


def solution_by_dir_fd(tmp_path):
    return passed_or_printed(grade(submit(tmp_path, (
        f"import os\nfolder = os.open({str(SOLUTIONS)!r}, os.O_RDONLY)\n"
        "stolen = os.read(os.open('softmax_backward.py', os.O_RDONLY, dir_fd=folder), 1 << 20)\n" + STEAL))))


def solution_by_fopen(tmp_path):
    return passed_or_printed(grade(submit(tmp_path, (
        "import ctypes\nlibc = ctypes.CDLL(None)\nlibc.fopen.restype = ctypes.c_void_p\n"
        "libc.fread.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p]\n"
        f"file = libc.fopen({str(SOLUTIONS / 'softmax_backward.py')!r}.encode(), b'r')\n"
        "if not file:\n    raise FileNotFoundError('fopen')\nbuffer = ctypes.create_string_buffer(1 << 20)\n"
        "stolen = buffer.raw[:libc.fread(buffer, 1, 1 << 20, ctypes.c_void_p(file))]\n" + STEAL))))


def solution_by_hard_link(tmp_path):
    return passed_or_printed(grade(submit(tmp_path, (
        f"import os\nos.link({str(SOLUTIONS / 'softmax_backward.py')!r}, 'linked.py')\n"
        "stolen = open('linked.py').read()\n" + STEAL))))


def twin_by_subclasses(tmp_path):
    return passed_or_printed(grade(submit(tmp_path, (
        "from tinyattn import Function\n\n\ndef everything(cls):\n    for sub in cls.__subclasses__():\n"
        "        yield sub\n        yield from everything(sub)\n\n\n"
        "found = {'twin': next(c for c in everything(Function) if c.__name__ == 'Reference' + 'Softmax')}\n\n\n"
        "class Softmax(Function):\n    @staticmethod\n    def forward(ctx, x, dim):\n"
        "        return found['twin'].forward(ctx, x, dim)\n\n    @staticmethod\n    def backward(ctx, grad):\n"
        "        return found['twin'].backward(ctx, grad)\n"))))


def writes_the_library(tmp_path):
    library = pathlib.Path(checker.ta.__file__)                    # opened to append nothing: harmless if it works
    return passed_or_printed(grade(submit(tmp_path, f"open({str(library)!r}, 'a').close()\nprint('WROTE')\n"
                                                    + SOFTMAX)), "WROTE")


def fills_memory_outside_its_scratch_folder(tmp_path):
    """Files outside the scratch folder: a tmpfs root inside the sandbox would take them unbounded; sqlite3 opens
    its file in C, past the audit hook's "open"."""
    outside = tmp_path / "outside"
    outside.mkdir()
    return passed_or_printed(grade(submit(tmp_path, (
        "import sqlite3\nfor path in ('/tmp/filled', '/dev/shm/filled'):\n    try:\n"
        "        open(path, 'w').close()\n        print('WROTE')\n    except OSError:\n        pass\n"
        f"try:\n    sqlite3.connect({str(outside / 'filled.db')!r}).execute('create table t (x)')\n"
        "    print('WROTE')\nexcept OSError:\n    pass\n" + SOFTMAX))), "WROTE")


def deletes_another_students_file(tmp_path):
    other = tmp_path / "bob" / "softmax_backward.py"
    other.parent.mkdir()
    other.write_text(SOFTMAX)
    grade(submit(tmp_path, f"import os\nos.remove({str(other)!r})\n" + SOFTMAX))
    return not other.exists()


def reads_another_students_file(tmp_path):
    other = tmp_path / "bob" / "softmax_backward.py"
    other.parent.mkdir()
    other.write_text("# BOB'S OWN WORK\n" + SOFTMAX)
    return passed_or_printed(grade(submit(tmp_path, f"print(open({str(other)!r}).readline())\n" + SOFTMAX)),
                             "BOB'S OWN WORK")


def kills_its_process_group(tmp_path):
    graded = grade(submit(tmp_path, "import os, signal\nos.kill(0, signal.SIGKILL)\n" + SOFTMAX))
    return graded is None or graded[0] != 1 or not graded[1].strip()           # the grader died: no grade book


def stops_the_process_that_started_it(tmp_path):
    graded = grade(submit(tmp_path, "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\n" + SOFTMAX),
                   "--timeout", "5", timeout=90)
    return graded is None or not graded[1].strip()


def writes_the_graders_stdout_through_proc(tmp_path):
    graded = grade(submit(tmp_path, (
        "import os\nparent = os.getppid()\n"
        "grandparent = int(open(f'/proc/{parent}/stat').read().rsplit(')', 1)[1].split()[1])\n"
        "for pid in (parent, grandparent):\n    try:\n        folder = os.open(f'/proc/{pid}', os.O_RDONLY)\n"
        "        os.write(os.open('fd/1', os.O_WRONLY, dir_fd=folder), b'FORGED ')\n    except OSError:\n"
        "        pass\n" + SOFTMAX)))
    return "FORGED" in graded[1]


def runs_a_shell_through_ctypes(tmp_path):
    mark = tmp_path / "the shell ran"
    grade(submit(tmp_path, f"import ctypes\nctypes.CDLL(None).system(b'touch \"{mark}\"')\n" + SOFTMAX))
    return mark.exists()


def forks_a_child_that_outlives_the_grader(tmp_path):
    grade(submit(tmp_path, (
        "import ctypes, os, time\nlibc = ctypes.CDLL(None)\nif libc.fork() == 0:\n"
        "    libc.prctl(15, b'tinyattn-orphan', 0, 0, 0)\n    time.sleep(60)\n    os._exit(0)\n" + SOFTMAX)))
    deadline = time.monotonic() + 5
    while orphans() and time.monotonic() < deadline:
        time.sleep(0.1)
    return bool(orphans())


def orphans():
    """The pids of processes named tinyattn-orphan that still run."""
    found = []
    for comm in pathlib.Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() == "tinyattn-orphan" and \
                    "\nState:\tZ" not in (comm.parent / "status").read_text():
                found.append(int(comm.parent.name))
        except OSError:
            pass
    return found


def reads_the_graders_environment(tmp_path):
    graded = grade(submit(tmp_path, (
        "import os\nprint(os.environ.get('CI_SECRET_TOKEN'))\n"
        "for path in ('/proc/self/environ', f'/proc/{os.getppid()}/environ'):\n    try:\n"
        "        print(open(path, 'rb').read().decode(errors='replace'))\n    except OSError:\n        pass\n"
        + SOFTMAX)), env={**os.environ, "CI_SECRET_TOKEN": "hunter2"})
    return "hunter2" in graded[1] + graded[2]


def floods_the_graders_output(tmp_path):
    graded = grade(submit(tmp_path, "import sys\nfor _ in range(300):\n    sys.stdout.write('x' * (1 << 20) + '\\n')\n"
                                    + SOFTMAX))
    return len(graded[1]) + len(graded[2]) > 4 * runner.OUTPUT_BYTES


ROUTES = {"reads the solution through os.open(..., dir_fd=...)": solution_by_dir_fd,
          "reads the solution through libc's fopen (ctypes)": solution_by_fopen,
          "reads the solution through a hard link": solution_by_hard_link,
          "calls the library's twin found through Function.__subclasses__()": twin_by_subclasses,
          "writes to the library": writes_the_library,
          "deletes another student's file": deletes_another_students_file,
          "writes files outside its scratch folder (open, sqlite3)": fills_memory_outside_its_scratch_folder,
          "reads another student's file": reads_another_students_file,
          "kills its process group (os.kill(0, SIGKILL))": kills_its_process_group,
          "stops the process that started it (SIGSTOP)": stops_the_process_that_started_it,
          "writes to the grader's stdout through /proc/PID/fd and dir_fd": writes_the_graders_stdout_through_proc,
          "runs a shell through ctypes (system())": runs_a_shell_through_ctypes,
          "forks through ctypes a child that outlives the grader": forks_a_child_that_outlives_the_grader,
          "reads the grader's environment": reads_the_graders_environment,
          "prints 300 lines of 1 MB": floods_the_graders_output}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the routes use Linux's /proc, libc and signals")
@pytest.mark.parametrize("route", ROUTES)
def test_the_sandbox_stops_every_route_and_the_fallback_all_but_those_the_guide_lists(route, walls, tmp_path):
    worked = ROUTES[route](tmp_path)
    assert worked == (walls == "fallback" and route in FALLBACK_CANNOT_STOP), \
        f"{route}: {'worked' if worked else 'was stopped'} with the {walls}"


def test_the_guide_lists_what_the_fallback_cannot_stop():
    guide = " ".join((ROOT / "lessons" / "exercises" / "README.md").read_text().split())
    if "## For instructors" not in guide:
        pytest.skip("a student copy: the guide's part for instructors stays behind")
    assert all(route in guide for route in FALLBACK_CANNOT_STOP)


@pytest.mark.skipif(not (SOLUTIONS / "softmax_backward.py").exists(), reason="a student copy: no solutions/")
def test_correct_code_that_makes_numpy_warn_in_the_graders_look_passes_without_a_word(walls, tmp_path):
    """The source check looks up np.str, np.object and np.bytes, which NumPy warns of: the warning's lines opened
    the grader's file, which the hook refused, and then printed as the learner's output."""
    solution = (SOLUTIONS / "softmax_backward.py").read_text()
    mine = submit(tmp_path, "import numpy as np\n" + solution.replace(
        "xp = xp_of(x)", "xp = xp_of(x)\n        assert str(np.str_(1)) and object() and bytes(np.bytes_(b'1'))"))
    code, out, err = grade(mine)
    assert code == 0 and json.loads(out)["passed"] == 1 and "your code printed" not in err, err


@pytest.mark.parametrize("returned, said", [
    ("x.astype(object)", "an array of object cannot be sent"),
    ("x.astype(str)", "an array of <U32 cannot be sent"),
    ("x.astype(complex)", "an array of complex128 cannot be sent"),
    ("np.broadcast_to(x.reshape(-1)[:1], (100000, 100000))", "an array of shape (100000, 100000) and float64"),
], ids=["object", "str", "complex", "a broadcast view of 80 GB"])
def test_an_odd_array_returned_is_one_line_naming_its_dtype_or_shape(returned, said, walls, tmp_path):
    code, out, err = grade(submit(tmp_path, "import numpy as np\n" + SOFTMAX.replace("return x", f"return {returned}")))
    assert code == 1 and said in err and "Traceback" not in err and "your code printed" not in err, err


def test_require_sandbox_refuses_to_grade_without_it(tmp_path, monkeypatch):
    monkeypatch.setenv("TINYATTN_GRADER_SANDBOX", "none")
    code, out, err = grade(submit(tmp_path, SOFTMAX), "--require-sandbox")
    assert code == 2 and not out and "--require-sandbox: not graded" in err and "apt-get install bubblewrap" in err
    code, out, err = grade(submit(tmp_path, SOFTMAX))
    assert code == 1 and "note: the submissions are not isolated from the disk" in err


@pytest.mark.skipif(bool(sandbox.unavailable()), reason="the sandbox cannot run here")
def test_the_sandbox_shows_the_child_only_its_own_modules_of_lessons(tmp_path):
    """sandbox.CHILD_FILES is what the child imports of lessons/ (a child that misses one does not start), and
    neither the checks nor the solutions are among them."""
    imported = subprocess.run([sys.executable, "-c", "import sys, lessons.checking.child\nprint('\\n'.join("
                               "m.__file__ for n, m in sys.modules.items() if n.startswith('lessons')))"],
                              cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    lessons = ROOT / "lessons"
    assert sorted(str(pathlib.Path(f).relative_to(lessons)) for f in imported) == sorted(sandbox.CHILD_FILES)
    assert not any(name.startswith(("checking/checks", "exercises/solutions")) for name in sandbox.CHILD_FILES)


def test_the_childs_environment_keeps_only_what_python_and_tinyattn_need():
    kept = child.cleared_environment({"CI_SECRET_TOKEN": "x", "TINYATTN_DEVICE": "cpu", "PATH": "/opt"}, "/s")
    assert "CI_SECRET_TOKEN" not in kept and kept["TINYATTN_DEVICE"] == "cpu" and kept["HOME"] == "/s"


def test_a_signal_that_killed_a_sandboxed_child_is_named_as_one(tmp_path):
    """bwrap exits with 128 + N for a child killed by signal N; the runner says which, as for a plain process."""
    class Ended:
        def poll(self):
            return 128 + signal.SIGKILL
    assert runner._Sandboxed(Ended()).exitcode == -signal.SIGKILL


@pytest.mark.skipif(not (SOLUTIONS / "softmax_backward.py").exists(), reason="a student copy: no solutions/")
def test_a_file_that_deletes_the_other_submissions_changes_no_other_verdict(walls, tmp_path, capsys):
    folder = tmp_path / "student"
    folder.mkdir()
    for name in ("online_softmax", "causal_mask", "induction_score"):
        (folder / f"{name}.py").write_text((SOLUTIONS / f"{name}.py").read_text())
    checker.main(["check", "all", "--dir", str(folder), "--json"])
    before = json.loads(capsys.readouterr().out)
    (folder / "attention.py").write_text(f"import pathlib\nfor p in pathlib.Path({str(folder)!r}).iterdir():\n"
                                         f"    p.unlink()\n")
    checker.main(["check", "all", "--dir", str(folder), "--json"])
    after = json.loads(capsys.readouterr().out)
    assert len(list(folder.iterdir())) == 4                                # it deleted nothing
    assert [r for r in after["exercises"] if r["exercise"] != "attention"] == \
        [r for r in before["exercises"] if r["exercise"] != "attention"] and after["passed"] == 3


def leftovers(mark):
    """The pids of processes still running (not zombies) whose command line or environment holds mark."""
    found = []
    for entry in pathlib.Path("/proc").glob("[0-9]*"):
        try:
            if int(entry.name) != os.getpid() and "\nState:\tZ" not in (entry / "status").read_text() and \
                    any(mark.encode() in (entry / part).read_bytes() for part in ("cmdline", "environ")):
                found.append(int(entry.name))
        except (OSError, ValueError):
            pass
    return found


def gone(mark, seconds=5):
    deadline = time.monotonic() + seconds
    while leftovers(mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not leftovers(mark)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; PR_SET_PDEATHSIG is Linux's")
def test_no_child_outlives_its_grading_even_one_that_forges_its_end_or_whose_grader_is_killed(walls, tmp_path):
    """A child that wrote garbage into every file descriptor it had (the fork server's report of its end among them,
    once) and then looped ran on forever at full speed; so did one whose grading process was killed. The grader's
    temporary folder is in tmp_path: every process of its grading holds it in its environment or command line."""
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    loop = ("import os\n        for fd in range(3, 64):\n            try:\n"
            "                os.write(fd, b'\\xff' * 64)\n            except OSError:\n                pass\n"
            "        while True:\n            pass")
    code, out, err = grade(submit(tmp_path, SOFTMAX.replace("return x", loop)), "--timeout", "20", env=env)
    assert code == 1 and "returned something that is not a result" in err, err
    assert gone(str(tmp_path)), f"{leftovers(str(tmp_path))} still run after their grading ended"

    looping = submit(tmp_path, SOFTMAX.replace("return x", "while True:\n            pass"))
    grader = subprocess.Popen([sys.executable, "-m", "lessons", "check", "softmax_backward", "--file", str(looping)],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    for line in grader.stdout:                           # the child runs the learner's forward once this is said
        if b"your file loads" in line:
            break
    time.sleep(0.5)
    assert leftovers(str(tmp_path)), "no child found to outlive its grader"
    grader.kill()
    grader.wait()
    assert gone(str(tmp_path)), f"{leftovers(str(tmp_path))} still run after their grading process was killed"
