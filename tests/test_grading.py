"""The grader's fence (sera.teaching.sandbox) and what autograde sends through it
(sera.teaching.autograde.definitions): the student's process sees no course, no gradebook, no
sera package and no network, a hang or a memory bomb costs only that call, values cross as plain
numbers and arrays, and only definitions and numpy/math imports ever run."""

import ast
import math
from pathlib import Path

import numpy as np
import pytest

from sera.teaching import autograde, sandbox
from sera.teaching.sandbox import Sandbox, SandboxError, StudentError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def box():
    with Sandbox() as fenced:
        yield fenced


def _function(box, source: str, name: str = "f"):
    box.define(source)
    return box.function(name)


def test_the_fenced_process_sees_neither_the_course_nor_the_package(box, tmp_path):
    course = tmp_path / "course"
    (course / "source").mkdir(parents=True)
    (course / "gradebook.db").write_text("grades")
    paths = [str(course / "gradebook.db"), str(course / "source"), str(ROOT / "sera"),
             str(ROOT / "notebooks"), str(ROOT / "data"), "/etc/passwd"]
    seen = _function(box, "import os\ndef f(paths):\n"
                          "    return [os.path.exists(p) and bool(os.listdir(p) if os.path.isdir(p)"
                          " else 1) for p in paths]")
    assert seen(paths) == [False] * len(paths)
    find = _function(box, "def f():\n    import importlib.util\n"
                          "    return importlib.util.find_spec('sera') is not None")
    assert find() is False
    # and what it writes stays in its own scratch folder
    write = _function(box, f"def f():\n    open({str(course / 'planted')!r}, 'w').write('x')")
    with pytest.raises(StudentError, match="FileNotFoundError|PermissionError|OSError"):
        write()
    assert not (course / "planted").exists()


def test_the_fenced_process_has_no_network(box):
    connect = _function(box, "import socket\ndef f():\n"
                             "    socket.create_connection(('127.0.0.1', 9), timeout=2)")
    with pytest.raises(StudentError) as failed:
        connect()
    assert failed.value.kind in ("ConnectionRefusedError", "OSError", "gaierror")
    interfaces = _function(box, "import socket\ndef f():\n"
                                "    return [name == 'lo' for _, name in socket.if_nameindex()]")
    assert interfaces() == [True]  # its own network namespace: loopback only


def test_a_hang_or_a_crash_costs_that_call_only(box, monkeypatch):
    monkeypatch.setattr(sandbox, "CALL_SECONDS", 1.0)
    box.define("import os\ndef spin():\n    while True:\n        pass\n"
               "def leave():\n    os._exit(3)\ndef ok(x):\n    return x + 1\n")
    with pytest.raises(StudentError, match="timeout"):
        box._ask({"op": "call", "name": "spin", "args": []}, seconds=1.0)
    assert box.call("ok", 1) == 2  # a fresh process, the same definitions
    with pytest.raises(StudentError, match="ended"):
        box.call("leave")
    assert box.call("ok", 2) == 3
    box.define("import numpy as np\ndef hog():\n    return np.ones(2 ** 33).sum()\n")
    with pytest.raises(StudentError) as failed:
        box.call("hog")
    assert failed.value.kind in ("MemoryError", "_ArrayMemoryError", "ended")


def test_values_cross_as_numbers_and_arrays_and_nothing_else(box):
    echo = _function(box, "import numpy as np\ndef f(x):\n    print('noise on stdout')\n"
                          "    return x")
    for value in (3, 2.5, True, None, [1, 2.5], np.arange(4), np.array([0.1, np.nan, np.inf]),
                  np.array([[True, False]]), 1e-300, -0.0):
        back = echo(value)
        if isinstance(value, np.ndarray):
            assert back.dtype.kind == value.dtype.kind and back.shape == value.shape
            np.testing.assert_array_equal(back, value)
        else:
            assert back == value and type(back) is type(value)
    assert echo(np.float32(0.5)) == 0.5 and echo((1, 2)) == [1, 2]
    scalar, array = echo_long(box)  # np.longdouble, a correct value, arrives as floats
    assert scalar == 0.25 and array.dtype == float and array.tolist() == [0.5, 1.5]
    for returned in ("'kappa'", "1j", "{'a': 1}", "np.array(['x'])"):
        text = _function(box, f"import numpy as np\ndef f():\n    return {returned}")
        with pytest.raises(StudentError) as refused:
            text()
        assert refused.value.kind == "unencodable" and not refused.value.raised


def echo_long(box):
    return _function(box, "import numpy as np\ndef f():\n    return [np.longdouble(0.25), "
                          "np.array([0.5, 1.5], dtype=np.longdouble)]")()


def test_without_bubblewrap_grading_stops_unless_told_to_go_unfenced(monkeypatch):
    monkeypatch.setattr(sandbox, "bwrap", lambda: None)
    with pytest.raises(SandboxError, match="SandboxedExecute.sandbox = 'none'"):
        Sandbox()
    with Sandbox("none") as unfenced:  # another process still: the hidden tests stay here
        assert _function(unfenced, "import os\ndef f():\n    return os.getpid()")() != \
            __import__("os").getpid()
    with pytest.raises(ValueError, match="sandbox mode"):
        Sandbox("docker")


# A student's cells, and what autograde's sandbox runs of them: (cells, names bound there,
# {function: why it is refused}).
DEFINITIONS = [
    (["from numpy import expm1, log1p, sum, abs\ndef kappa(p, n):\n"
      "    return -expm1(n * log1p(-p))"], {"kappa", "expm1", "log1p", "sum", "abs"}, {}),
    (["import numpy.linalg as la\nimport math as m\nfrom math import comb\nEPS = 1e-9\n"
      "def f(x):\n    return la.norm(x) + m.pi + comb(3, 2) + EPS"],
     {"f", "la", "m", "comb", "EPS"}, {}),
    (["import scipy.special\ndef f(n, k):\n    return scipy.special.comb(n, k)"], {"f"},
     {"f": "uses scipy, imported from scipy"}),
    (["from sera.fidelity import kappa as K\ndef kappa(p, n):\n    return K(p, n)"], {"kappa"},
     {"kappa": "uses K, imported from sera"}),
    (["import os, numpy\ndef f():\n    return numpy.zeros(1)"], {"f", "numpy"}, {}),
    (["def f():\n    import subprocess\n    return 0"], {"f"}, {"f": "imports subprocess"}),
    (["def f():\n    from . import secret\n    return secret"], {"f"}, {"f": "imports ."}),
    (["import scipy as np\nimport numpy as np\ndef f():\n    return np.ones(1)"], {"f", "np"},
     {}),
    # every statement runs, as in the kernel, but what calls the kernel (there is none)
    (["print('hi')\nget_ipython().input_transformers_cleanup.append(len)\nx = np.ones(3)\n"
      "for i in range(3):\n    pass\nclass A:\n    pass\nkappa = lambda p, n: 0\nN = 4"],
     {"x", "i", "A", "kappa", "N"}, {}),
    (["def f(:\n    pass"], set(), {}),  # a cell that does not parse: the kernel could not run it
    # magics are the kernel's: a line magic is left out, a %%time cell runs its body
    (["%timeit f(3)\ndef f(x):\n    return x\n!ls"], {"f"}, {}),
    (["%%time\nLOG2 = math.log(2)\ndef f(x):\n    return x * LOG2"], {"LOG2", "f"}, {}),
    # scope-aware: a function's own `comb` is not the scratch cell's scipy one
    (["from scipy.special import comb", "import math\ndef f(n, k):\n    comb = math.comb\n"
      "    return comb(n, k)\ndef g(n, k):\n    return comb(n, k)"], {"math", "comb", "f", "g"},
     {"g": "uses comb, imported from scipy"}),
    (["from scipy.special import comb", "import math\ncomb = math.comb\ndef g(n, k):\n"
      "    return comb(n, k)"], {"math", "comb", "g"}, {}),  # bound again: the notebook's own
]


@pytest.mark.parametrize("sources, names, refused", DEFINITIONS)
def test_what_autograde_runs_of_a_students_cells(sources, names, refused):
    code, why = autograde.definitions(sources)
    assert "get_ipython" not in code
    tree = ast.parse(code)
    bound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
             and isinstance(n.ctx, ast.Store)}
    bound |= {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    bound |= {(a.asname or a.name).split(".")[0] for n in tree.body
              if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    assert bound == names and why == refused


def test_each_statement_runs_alone_and_a_def_that_fails_is_named(box):
    failed = box.define("def f(x, eps=EPS):\n    return x\nEPS = 1e-9\n"
                        "def g(x, eps=EPS):\n    return x + eps\nundefined_name\n"
                        "def h():\n    return 1")
    assert failed == [["f", "NameError"], [None, "NameError"]]
    assert box.call("g", 1.0) == 1.0 + 1e-9 and box.call("h") == 1


def test_the_graders_messages_say_why_without_a_case():
    explain = autograde.explain
    assert explain(AssertionError("The weights are off on a batch of equal counts.")) == \
        "The weights are off on a batch of equal counts."
    assert "Not done yet" in explain(StudentError("NotImplementedError", "", raised=True))
    assert "sera package" in explain(StudentError("ModuleNotFoundError", "No module named 'sera'",
                                                  raised=True))
    assert "took too long" in explain(StudentError("timeout", "no answer within 20 s"))
    assert "time for grading was spent" in explain(StudentError("budget", ""))
    # an exception of the student's: its type if Python's, never its text
    assert explain(StudentError("ValueError", "(0.35, 16)", raised=True)) == \
        "Your function raised ValueError on a hidden case."
    assert explain(StudentError("E_0_35_16", "", raised=True)) == \
        "Your function raised an exception of its own on a hidden case."
    assert "not a number" in explain(StudentError("unencodable", ""))
    assert "define it with `def`" in explain(NameError("name 'kappa' is not defined"))
    assert "in its shape" in explain(TypeError("float() argument must be a string or a real"))


def test_the_hidden_region_runs_in_the_grader_with_the_students_function_in_the_sandbox(box):
    # a function that rebinds what the tests use, in its own process: nothing here changes
    box.define("import math\nimport sys\ndef kappa(p, n):\n"
               "    math.isclose = lambda *a, **k: True\n"
               "    sys._getframe(0).f_globals['zip'] = lambda *a: iter(())\n    return 0.0\n")
    message = autograde.grade_cell(
        "assert math.isclose(kappa(0.5, 2), 0.5), 'off on an easy case'", box, ["kappa"], {})
    assert message == "off on an easy case" and math.isclose(1, 2) is False
    assert list(zip([1], [2], strict=True)) == [(1, 2)]


def test_the_guides_unfenced_setting_is_one_nbgrader_reads():
    # the line the guide gives for grading without bubblewrap, in the course's config
    from traitlets.config import Config

    c = Config()
    exec(autograde.config_lines(), {"c": c})  # noqa: S102 - the course's own config lines
    assert autograde.SandboxedExecute(config=c).sandbox == "bubblewrap"
    exec("c.SandboxedExecute.sandbox = 'none'", {"c": c})  # noqa: S102 - the guide's line
    assert autograde.SandboxedExecute(config=c).sandbox == "none"
    steps = [p.__name__ for p in c.Autograde.autograde_preprocessors]
    assert "SandboxedExecute" in steps and "Execute" not in steps


def test_a_python_under_tmp_stays_visible(tmp_path, monkeypatch):
    # The sandbox's own /tmp is empty; an installation or checkout that lives under /tmp (a CI
    # clone, a fresh virtual environment) must be bound over it, not hidden by it.
    monkeypatch.setattr(sandbox.sys, "prefix", str(tmp_path))
    args = sandbox.fence(tmp_path / "scratch")
    tmpfs = args.index("/tmp") - 1
    assert args[tmpfs] == "--tmpfs"
    binds = [i for i, a in enumerate(args) if a == "--ro-bind"]
    assert str(tmp_path.resolve()) in [args[i + 1] for i in binds]
    assert all(tmpfs < i for i in binds)


def test_student_code_runs_unprivileged_and_cannot_remount_even_for_a_root_grader(box):
    # The grader here may be root (as autograde often is in a container): inside, the process
    # is user 65534 with no capability, and the Python installation it sees stays read-only.
    status = _function(box, "import os\ndef f():\n    caps = [l for l in open('/proc/self/status')"
                            " if l.startswith(('CapEff', 'CapPrm', 'CapBnd'))]\n"
                            "    return [os.getuid(), os.getgid()] + "
                            "[int(l.split()[1], 16) for l in caps]")
    assert status() == [sandbox.UNPRIVILEGED, sandbox.UNPRIVILEGED, 0, 0, 0]
    site = str(Path(np.__file__).parents[1])
    attempt = _function(box, "import subprocess\ndef f(site):\n"
                             "    done = subprocess.run(['mount', '-o', 'remount,bind,rw', site],"
                             " capture_output=True)\n    try:\n"
                             "        open(site + '/planted.pth', 'w').write('import os')\n"
                             "        return [done.returncode, 1]\n    except OSError:\n"
                             "        return [done.returncode, 0]")
    code, planted = attempt(site)
    assert code != 0 and planted == 0 and not Path(site, "planted.pth").exists()


def test_its_folders_files_and_processes_are_capped(box):
    write = _function(box, "def f(path, mib):\n    try:\n        with open(path, 'wb') as out:\n"
                           "            for _ in range(mib):\n"
                           "                out.write(bytes(1 << 20))\n        return 0\n"
                           "    except OSError as exc:\n        return exc.errno")
    import errno

    assert write("/scratch/a", 8) == 0
    assert write("/scratch/big", sandbox.FILE_BYTES // 2**20 + 8) == errno.EFBIG  # one file
    assert write("/tmp/a", 40) == 0 and write("/tmp/b", 40) == errno.ENOSPC  # /tmp is 64 MiB
    assert write("/dev/shm/a", 32) == errno.ENOSPC  # 16 MiB
    if not box.caps_processes:
        pytest.skip("a root grader without a cgroup of its own: the process count is uncapped")
    fork = _function(box, "import os, time\ndef f(tries):\n    children, refused = [], 0\n"
                          "    for _ in range(tries):\n        try:\n"
                          "            pid = os.fork()\n        except OSError:\n"
                          "            refused += 1\n            continue\n"
                          "        if pid == 0:\n            time.sleep(3)\n"
                          "            os._exit(0)\n        children.append(pid)\n"
                          "    for pid in children:\n        os.kill(pid, 9)\n"
                          "        os.waitpid(pid, 0)\n    return [len(children), refused]")
    started, refused = fork(8)  # bounded: eight tries at most
    assert started < sandbox.PROCESSES and refused == 8 - started


def test_a_submission_has_one_budget_for_all_its_calls():
    with Sandbox(budget=1.0) as timed:
        nap = _function(timed, "import time\ndef f(s):\n    time.sleep(s)\n    return s")
        assert nap(0.4) == 0.4 and nap(0.4) == 0.4
        with pytest.raises(StudentError, match="timeout"):  # 0.2 s were left
            nap(0.4)
        with pytest.raises(StudentError, match="budget"):
            nap(0.0)
        assert timed.left <= 0


def test_an_answer_out_of_turn_is_that_calls_refusal_and_the_next_call_is_answered(box):
    # A student's function can write to the stream the worker answers on: a list nested past
    # what a parser takes, a forged refusal with a text of its own, a forged error kind. Each is
    # a malformed answer of that call; the grader goes on with a fresh process.
    box.define("import os\ndef ok(x):\n    return x\n"
               "def deep():\n    os.write(3, b'[' * 100000 + b']' * 100000 + b'\\n')\n"
               "def forged():\n    os.write(3, b'{\"error\": \"refused\", \"message\": \"'"
               " + b'x' * 5000 + b'\"}\\n')\n"
               "def garbage():\n    os.write(3, b'not json\\n')\n")
    for name in ("deep", "forged", "garbage"):
        with pytest.raises(StudentError) as failed:
            box.call(name)
        assert failed.value.kind == "malformed" and not failed.value.raised
        assert box.call("ok", 7) == 7


def test_a_forged_missing_function_carries_no_text_of_the_student_and_the_next_call_is_answered(
        box):
    # "Missing" is an answer the worker gives of its own (no such function), so its message was
    # shown; a function that writes one with its inputs in the message must not get them into
    # the feedback, and the real answer that follows it on the stream must not answer the next
    # call
    box.define("import os, json\ndef ok(x):\n    return x\n"
               "def leak(x):\n    os.write(3, (json.dumps({'error': 'Missing', 'message': "
               "'inputs ' + repr(x)}) + '\\n').encode())\n    return x\n")
    with pytest.raises(StudentError) as failed:
        box.call("leak", [16.973697409631097, 7.026302590368902])
    assert failed.value.kind == "Missing" and failed.value.message == "no function leak"
    assert "16.97" not in autograde.explain(failed.value)
    assert box.call("ok", 7) == 7 and box.call("ok", 8) == 8
    with pytest.raises(StudentError) as missing:  # a function that is not there, as before
        box.call("absent", 1)
    assert missing.value.message == "no function absent" and box.call("ok", 9) == 9


def test_the_hidden_tests_see_the_graded_function_and_nothing_else_of_the_submission(box):
    # A submission that replaces builtins the hidden tests call, and one whose function puts the
    # hidden inputs into its error: the tests still judge, and the message carries no input.
    box.define("import math\ndef sum(*a):\n    return 0\ndef min(*a):\n"
               "    raise ValueError(repr(a))\ndef range(*a):\n    return []\n"
               "def kappa(p, n):\n    return 0.0\n"
               "def leaky(p, n):\n    raise ValueError(repr((p, n)))\n")
    hidden = ("for n in range(2, 4):\n    assert sum([n, 1]) == n + 1 and min(n, 9) == n\n"
              "    assert math.isclose(kappa(0.5, n), 1 - 0.5 ** (n - 1)), 'off on a case'")
    assert autograde.grade_cell(hidden, box, ["kappa"], {}) == "off on a case"
    message = autograde.grade_cell("leaky(0.3571, 17)", box, ["leaky"], {})
    assert message == "Your function raised ValueError on a hidden case."
    assert "0.3571" not in message and "17" not in message
