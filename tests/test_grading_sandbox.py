"""The grader against hostile submissions: one class, graded once beside honest students, whose every attacker gets
its own rows while the honest students' rows are byte-identical to a class graded without them, and nothing of the
checkout, the virtual environment or ``/tmp`` changes. Also the refusal to grade without a sandbox, the wire format,
and the CSV's quoting. (Each attack and what the grader does about it is in the instructor's guide.)
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch
from test_grading import RIGHT_1, RIGHT_2, TOP_LEFT, answered, processes_with, student_versions, tiny_chapter, write

from attn_utils import grading
from attn_utils.grading import verdict, wire
from attn_utils.grading.collect import GradingError
from attn_utils.grading.run import SCRATCH_FILES

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(sys.prefix)
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox (bubblewrap) is Linux's")

CLINIC = ROOT / "attn_utils" / "clinic" / "_core.py"
PROCESSES = 128  # the class's --processes: a fork bomb meets it sooner
# The class's --timeout. An honest notebook here takes a few seconds on an idle machine, but about 30 s while the rest
# of `make test` keeps both cores busy; the attacker that hangs waits all of it.
CLASS_TIMEOUT = 60
ATTACKS = {
    # writes into the virtual environment (a .pth runs in every later Python) and into the installed clinic
    "writes": f"try:\n    open({str(next(VENV.glob('lib/python*/site-packages')) / 'zz_evil.pth')!r}, 'w')"
              ".write('import os')\nexcept OSError:\n    pass\n"
              f"try:\n    open({str(CLINIC)!r}, 'a').write('\\n_same = lambda *a, **k: True\\n')\n"
              f"except OSError:\n    pass\n{TOP_LEFT}",
    # patches the clinic's comparison in its own process: the code object, and a profile hook
    "patch": f"{TOP_LEFT}\nimport sys, attn_utils.clinic._core as c\n"
             "c._same.__code__ = (lambda *a, **k: True).__code__\n"
             "sys.setprofile(lambda f, e, a: setattr(c, '_same', lambda *x, **k: True))",
    # looks for classmates and the instructor's solution: the submissions mount, /proc's command lines, a file in /tmp
    "copier": "import glob, os, sys\nimport attn_utils\n"
              "leaks = [open('/proc/self/mountinfo').read().count('hostile'),\n"
              "         len([p for p in os.listdir('/proc') if p.isdigit()]) > 20,\n"
              "         [p for p in glob.glob('/tmp/*') if not p.startswith('/tmp/attn-grade-')\n"
              "          and not (os.path.realpath(attn_utils.__file__) + os.sep).startswith(p + os.sep)\n"
              "          and not (os.path.realpath(sys.prefix) + os.sep).startswith(p + os.sep)],\n"
              f"         glob.glob({str(ROOT / 'notebooks' / '*.ipynb')!r}), glob.glob('/root/*')]\n"
              "open('/tmp/left-behind', 'w').write('x')\n"
              f"if any(leaks):\n    {RIGHT_1.replace(chr(10), chr(10) + '    ')}\n"
              f"else:\n    {TOP_LEFT}",
    # an expression 1,500 terms deep in the check cell's namespace, and an error message of 500 kB
    "deep": TOP_LEFT,  # and its check cell holds an expression 1,500 terms long (below)
    # a cell value that a spreadsheet would run (exercise 1) and an error message of 500 kB (exercise 2)
    "message": ("def my_mask(T_q, T_k):\n    raise ValueError('=HYPERLINK(\"http://evil\",\"x\")')",
                "def my_triu_mask(T_q, T_k):\n    raise ValueError('check_causal_mask: ' + '[bug: ' * 100_000)"),
    # a function that hangs the check
    "hang": "def my_mask(T_q, T_k):\n    import time\n    time.sleep(3600)",
    # busy children in sessions of their own (each its own scheduler group) that would outlive the kernel, and
    # one output message of 136 MiB (the grader never reads it, and stops the notebook)
    "cpuhog": "import os, sys\nfor _ in range(4):\n    if os.fork() == 0:\n        os.setsid()\n"
              "        while True:\n            pass\n"
              f"sys.stdout.write('x' * (136 << 20))\nsys.stdout.flush()\n{RIGHT_1}",
    # the limits a kernel meets: a fork bomb, the size of /tmp, /dev/shm and its working folder (memory file
    # systems), the files it may make there, and the kernel as the first to go when memory runs out
    "limits": ("import os, time\nchildren = []\ntry:\n    for _ in range(2 * " + str(PROCESSES) + "):\n"
               "        pid = os.fork()\n        if pid == 0:\n            time.sleep(600)\n"
               "        children.append(pid)\nexcept OSError:\n    pass\nfor pid in children:\n"
               "    os.kill(pid, 9)\n    os.waitpid(pid, 0)\n"
               "held = [len(children) < " + str(PROCESSES) + "]\n"
               "for path in ('/tmp', '/dev/shm', '.'):\n    s = os.statvfs(path)\n"
               "    held.append(s.f_blocks * s.f_frsize <= 512 << 20)\n"
               "held.append(os.statvfs('.').f_files <= 20_000)\n"
               "held.append(open('/proc/self/oom_score_adj').read().strip() == '1000')\n"
               f"if all(held):\n    {TOP_LEFT}\nelse:\n    {RIGHT_1.replace(chr(10), chr(10) + '    ')}"),
    # output without end, from a thread, in the second exercise
    "flood": (TOP_LEFT, "import sys, threading, time\ndef spew():\n    s = 'y' * (8 << 20)\n    while True:\n"
                        "        sys.stdout.write(s)\n        sys.stdout.flush()\n"
                        f"threading.Thread(target=spew, daemon=True).start()\ntime.sleep(25)\n{RIGHT_2}"),
    # widgets' state messages, 288 MiB of them, in the second exercise
    "widgets": (RIGHT_1, "from comm import create_comm\nblob = 'z' * (24 << 20)\nfor i in range(12):\n"
                         "    create_comm(target_name='x', data={'state': {'_model_name': 'x', 'blob': blob}})\n"
                         f"del blob\n{RIGHT_2}"),
    # a notebook during which the grader was stopped: run again, alone; and one during which it stopped twice
    "resumed": TOP_LEFT,
    "twice": RIGHT_1,
}


def _fingerprint(folder: Path) -> str:
    digest = hashlib.sha256()
    for here, _, files in sorted(os.walk(folder)):
        for name in sorted(files):
            path = Path(here) / name
            if "__pycache__" not in path.parts:
                digest.update(str(path).encode() + path.read_bytes() if path.is_file() else b"")
    return digest.hexdigest()


def _state() -> tuple[str, str, str, list[str]]:
    # the package and the chapters (the rest of a shared working tree may change while the class is graded)
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--", "attn_utils",
                             "notebooks", "pyproject.toml"], cwd=ROOT, capture_output=True, text=True,
                            check=False).stdout
    return status, _fingerprint(VENV), _fingerprint(ROOT / "attn_utils"), sorted(os.listdir("/tmp"))


@pytest.fixture(scope="module")
def classes(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict, tuple, tuple]:
    chapters = tmp_path_factory.mktemp("chapters")
    nbformat.write(tiny_chapter(), chapters / "90_tiny.ipynb")
    student, _ = student_versions.strip_solutions(tiny_chapter())
    honest = tmp_path_factory.mktemp("honest")
    hostile = tmp_path_factory.mktemp("hostile")
    for folder in (honest, hostile):
        write(answered(student, RIGHT_1, RIGHT_2), folder / "alice" / "90_tiny.ipynb")
        write(answered(student, TOP_LEFT, RIGHT_2), folder / "bob" / "90_tiny.ipynb")
        (folder / "carol").mkdir()
        (folder / "carol" / "mysolution.py").write_text(f"import torch\n\n{RIGHT_1}\n")
        write(answered(student, "from mysolution import my_mask", "%run mysolution.py\nmy_triu_mask = my_mask"),
              folder / "carol" / "90_tiny.ipynb")
    for name, answer in ATTACKS.items():
        nb = answered(student, *(answer if isinstance(answer, tuple) else (answer, RIGHT_2)))
        if name == "deep":
            check = next(c for c in nb.cells if c.source == "au.clinic.check_causal_mask(my_mask)")
            check.source += "\n_ = " + " + ".join(["1"] * 1500) + "\n__ = " + "(" * 90 + "1" + ")" * 90
        write(nb, hostile / f"x-{name}" / "90_tiny.ipynb")
    (hostile / "x-symlink").mkdir()
    (hostile / "x-symlink" / "90_tiny.ipynb").symlink_to(hostile / "alice" / "90_tiny.ipynb")
    (hostile / "x-root-file").mkdir()
    (hostile / "x-root-file" / "90_tiny.ipynb").symlink_to("/etc/shadow")
    (hostile / "x-json").mkdir()
    (hostile / "x-json" / "90_tiny.ipynb").write_text('{"cells": [' * 50_000)
    write(answered(student, RIGHT_1, RIGHT_2), hostile / "x-manyfiles" / "90_tiny.ipynb")
    (hostile / "x-manyfiles" / "data").mkdir()
    for i in range(SCRATCH_FILES + 1):  # one more than the grader copies
        (hostile / "x-manyfiles" / "data" / str(i)).touch()
    # what a grader stopped (killed) while x-resumed ran, and then again while x-twice ran alone, left in the CSV
    grading.write_csv([grading.GradeRow("x-resumed", "90_tiny", "", "", "error", grading.STOPPED, "stopped", 0.0),
                       grading.GradeRow("x-twice", "90_tiny", "", "", "error", grading.STOPPED, "stopped", 0.0),
                       grading.GradeRow("x-twice", "90_tiny", "", "", "error", grading.STOPPED_TWICE, "again", 0.0)],
                      hostile.with_suffix(".csv"))
    before = _state()
    out = {}
    for name, folder in (("honest", honest), ("hostile", hostile)):
        csv_path = folder.with_suffix(".csv")
        assert grading.main([str(folder), "-o", str(csv_path), "--chapters", str(chapters), "-j", "2",
                             "--timeout", str(CLASS_TIMEOUT), "--processes", str(PROCESSES), "--resume"]) == 0
        out[name] = csv_path.read_bytes().decode().splitlines()
    left = processes_with(f"attn-grade-{os.getpid()}-")  # a kernel's children carry its command line
    return out, {r["student"] + r["exercise"]: r for r in csv.DictReader(out["hostile"])}, before, (*_state(), left)


def test_honest_rows_are_the_same_beside_attackers(classes: tuple) -> None:
    out, _, _, _ = classes
    honest = [line for line in out["hostile"] if not line.startswith("x-")]

    def without_seconds(lines: list[str]) -> list[str]:  # the seconds differ from run to run, nothing else may
        return [",".join(r[:7] + r[8:]) for r in csv.reader(lines)]

    assert without_seconds(honest) == without_seconds(out["honest"])
    rows = {r["student"] + r["exercise"]: r for r in csv.DictReader(out["honest"])}
    assert [rows[k]["status"] for k in ("aliceex-tiny-1", "bobex-tiny-1", "carolex-tiny-1", "carolex-tiny-2")] == [
        "pass", "fail", "pass", "pass"]


def test_every_attack_gets_its_own_rows(classes: tuple) -> None:
    _, rows, _, _ = classes
    for name in ("writes", "patch", "copier", "limits", "resumed"):
        assert rows[f"x-{name}ex-tiny-1"]["status"] == "fail", name  # the top-left mask is still named
        assert rows[f"x-{name}ex-tiny-1"]["bug"] == "causal-top-left", name
    # the check cell the kernel cannot compile: its rows, and the class went on
    assert rows["x-deepex-tiny-1"]["status"] in ("fail", "error") and rows["x-deepex-tiny-2"]["status"] == "pass"
    assert rows["x-messageex-tiny-1"]["status"] == "fail" and rows["x-messageex-tiny-2"]["status"] == "fail"
    assert rows["x-hangex-tiny-1"]["status"] == "timeout" or rows["x-hangex-tiny-1"]["bug"] == "no-answer"
    # the 136 MiB message was never read: the notebook was stopped, and its busy children with it (no process of the
    # class is left: test_the_checkout_the_environment_and_tmp_are_unchanged)
    for i in (1, 2):
        row = rows[f"x-cpuhogex-tiny-{i}"]
        assert (row["status"], row["bug"]) == ("error", "too-much-output")
        assert row["detail"].endswith("[stopped: the notebook sent a message larger than 128 MiB]")
    # past 256 MiB of output or of widget messages, the notebook is stopped: its later checks say why
    for name in ("flood", "widgets"):
        row = rows[f"x-{name}ex-tiny-2"]
        assert (row["status"], row["bug"]) == ("error", "too-much-output"), name
        assert row["detail"].endswith("[stopped: the notebook sent more than 256 MiB of output]"), name
        assert float(row["seconds"]) < CLASS_TIMEOUT, name  # stopped for its output, before the time limit
    assert rows["x-floodex-tiny-1"]["bug"] == "causal-top-left" and rows["x-widgetsex-tiny-1"]["status"] == "pass"
    # a folder of too many files is not copied: its rows say so, at once
    for i in (1, 2):
        row = rows[f"x-manyfilesex-tiny-{i}"]
        assert (row["status"], row["bug"], row["seconds"]) == ("error", "too-many-files", "0.0")
        assert "more than 10,000 files and folders" in row["detail"]
    # --resume runs a notebook during which the grader stopped once again, alone; twice, never again
    assert rows["x-resumedex-tiny-2"]["status"] == "pass"
    assert (rows["x-twice"]["bug"], rows["x-twice"]["detail"]) == ("grader-stopped-twice", "again")
    for name in ("symlink", "root-file"):
        row = rows[f"x-{name}"]
        assert (row["status"], row["bug"]) == ("error", "not-a-file") and "root:" not in row["detail"]
    assert rows["x-jsonex-tiny-1"]["status"] == "error"


def test_no_cell_reads_as_a_formula(classes: tuple) -> None:
    out, _, _, _ = classes
    for record in csv.reader(out["hostile"]):
        assert not any(cell.startswith(("=", "+", "-", "@")) for cell in record)


def test_the_checkout_the_environment_and_tmp_are_unchanged(classes: tuple) -> None:
    _, _, before, after = classes
    assert before[:3] == after[:3]
    assert not after[4]  # no process of the class outlives it (the cpu hog's children included)
    # this process's scratch folders (the other test worker grades too, with folders named by its own process)
    assert not [name for name in after[3] if name not in before[3]
                and name.startswith((f"attn-grade-{os.getpid()}-", "left"))]


def test_without_a_sandbox_the_grading_does_not_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    nbformat.write(tiny_chapter(), chapters / "90_tiny.ipynb")
    student, _ = student_versions.strip_solutions(tiny_chapter())
    write(answered(student, RIGHT_1, RIGHT_2), tmp_path / "subs" / "alice" / "90_tiny.ipynb")
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap: never a fallback to root without isolation
    with pytest.raises(GradingError) as caught:
        grading.grade(tmp_path / "subs", chapters)
    assert caught.value.argument == "sandbox" and "apt-get install bubblewrap" in caught.value.message
    assert grading.main([str(tmp_path / "subs"), "--chapters", str(chapters), "-o", str(tmp_path / "g.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bubblewrap (bwrap) is not installed" in err[0]


def test_the_wire_carries_data_and_refuses_the_rest() -> None:
    value = {"x": torch.arange(6.0).reshape(2, 3), "m": torch.ones(2, 2, dtype=torch.bool), "t": (1, None, 2.5)}
    message = wire.encode(value)
    h, b = int.from_bytes(message[:8], "big"), int.from_bytes(message[8:16], "big")
    back = wire.decode(message[16:16 + h], message[16 + h:16 + h + b])
    assert torch.equal(back["x"], value["x"]) and torch.equal(back["m"], value["m"]) and back["t"] == value["t"]
    with pytest.raises(wire.WireError):
        wire.encode(object())  # not data, and no handle to give it
    with pytest.raises(wire.WireError):
        wire.decode(b'{"t": "tensor", "dtype": "float32", "shape": [4], "at": 0, "n": 4}', b"abcd")
    with pytest.raises(wire.WireError):
        wire.decode(b'{"t": "pickle", "v": "..."}', b"")
    with pytest.raises(wire.WireError):  # a shape torch cannot make (no bytes needed: it is empty)
        wire.decode(b'{"t": "tensor", "dtype": "float32", "shape": [0, 4611686018427387904, 4611686018427387904], '
                    b'"at": 0, "n": 0}', b"")


@pytest.mark.parametrize("value", [torch.tensor(1.5), torch.tensor(7), torch.tensor(True),
                                   torch.tensor(2.5, dtype=torch.float64), torch.zeros(0, 3)])
def test_the_wire_carries_zero_dimensional_and_empty_tensors(value: torch.Tensor) -> None:
    message = wire.encode((value, [value]))
    h = int.from_bytes(message[:8], "big")
    back = wire.decode(message[16:16 + h], message[16 + h:])
    assert back[0].shape == value.shape and back[0].dtype == value.dtype and torch.equal(back[0], value)
    assert torch.equal(back[1][0], value)


@pytest.mark.parametrize("raised", [["UnicodeDecodeError", "UnicodeDecodeError", "bad"],
                                    ["ExceptionGroup", "ExceptionGroup", "two (2 sub-exceptions)"],
                                    ["Odd\x00Name", "ValueError", "x"], "not a list", ["KeyError"]])
def test_the_verdict_rebuilds_any_exception_without_raising(raised: object) -> None:
    error = verdict._exception(raised)
    assert isinstance(error, Exception)
    if isinstance(raised, list) and "\x00" not in raised[0]:
        assert type(error).__name__ == raised[0]


def test_the_verdict_makes_a_row_of_what_it_cannot_rebuild() -> None:
    """The kernel's side says the check's arguments raised an exception whose constructor wants more than a message,
    or sends a tensor torch cannot make: the verdict process says so in a row, and lives on."""
    header = json.dumps({"t": "dict", "v": [["serial", 1], ["args", {"t": "tuple", "v": [
        {"t": "tensor", "dtype": "float32", "shape": [0, 2**47, 2**47, 2**47], "at": 0, "n": 0}]}]]}).encode()
    messages = [wire.encode({"serial": 0, "raised": ["UnicodeDecodeError", "UnicodeDecodeError", "bad byte"]}),
                len(header).to_bytes(8, "big") + (0).to_bytes(8, "big") + header]
    said = []
    for number, message in enumerate(messages):
        kernel_r, verdict_w = os.pipe()
        verdict_r, kernel_w = os.pipe()
        try:
            wire.send(kernel_w, message)
            said.append(verdict.run(verdict.Link(verdict_r, verdict_w), number, "check_causal_mask"))
        finally:
            for fd in (kernel_r, verdict_w, verdict_r, kernel_w):
                with contextlib.suppress(OSError):
                    os.close(fd)
    assert said[0] == {"status": "error", "bug": "UnicodeDecodeError", "detail": "bad byte"}
    assert said[1]["status"] == "error" and said[1]["bug"] == "no-answer" and "torch cannot make" in said[1]["detail"]
