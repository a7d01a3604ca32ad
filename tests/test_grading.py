"""Grading submitted notebooks (attn_utils.grading): a tiny chapter, its student version, and a class that submits it.

The notebooks run in real kernels, so the class is small: one grading run of the whole folder through the command
line (shared by the tests of its rows: honest students, students who try to fake a pass, and one who tries to get
out of the sandbox), and two notebooks that outlive their time limit (in a cell, and in a kernel that never
answers). The details are matched loosely where they quote the clinic's wording. The sandbox itself is tested without
kernels in test_grading_sandbox.py.
"""

from __future__ import annotations

import ast
import contextlib
import csv
import io
import json
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
from script_loader import load_script

from attn_utils import grading
from attn_utils.grading.collect import check_calls, first_line
from attn_utils.grading.sandbox import CONTROLLERS, _hierarchy

ROOT = Path(__file__).resolve().parents[1]
student_versions = load_script("make_student_versions")

CHECK = "check_causal_mask"
PASSED = f"{CHECK}: passed (8 edge cases, 40 random inputs)"  # as saved in a notebook run earlier


def exercise(label: str, text: str) -> str:
    return f"```{{exercise-start}}\n:label: {label}\n```\n{text}\n```{{exercise-end}}\n```"


def check_cell(source: str) -> nbformat.NotebookNode:
    return new_code_cell(source, metadata={"tags": ["clinic-check"]})


def tiny_chapter() -> nbformat.NotebookNode:
    """A chapter with a check before its exercises (not graded) and two exercises checked by the same check."""
    cells = [
        new_markdown_cell("# A tiny chapter on causal masks\n\nMasks, checked."),
        new_code_cell("import torch\n\nimport attn_utils as au"),
        check_cell("au.clinic.check_causal_mask(au.causal_mask)  # the package's own mask passes"),
        new_markdown_cell("## Exercises\n\n" + exercise("ex-tiny-1", "Write `my_mask(T_q, T_k)`.")),
        new_code_cell("def my_mask(T_q, T_k):\n    raise NotImplementedError"),
        new_markdown_cell("```{solution-start} ex-tiny-1\n:class: dropdown\n```\nKeep `j <= i + T_k - T_q`."),
        new_code_cell("def my_mask(T_q, T_k):\n    return au.causal_mask(T_q, T_k)"),
        new_markdown_cell("```{solution-end}\n```"),
        check_cell("au.clinic.check_causal_mask(my_mask)"),
        new_markdown_cell(exercise("ex-tiny-2", "Write it again with `triu`, as `my_triu_mask(T_q, T_k)`.")),
        new_code_cell("def my_triu_mask(T_q, T_k):\n    raise NotImplementedError"),
        new_markdown_cell("```{solution-start} ex-tiny-2\n:class: dropdown\n```\nThe complement of `triu`."),
        new_code_cell("def my_triu_mask(T_q, T_k):\n    return au.causal_mask(T_q, T_k)"),
        new_markdown_cell("```{solution-end}\n```"),
        check_cell("au.clinic.check_causal_mask(my_triu_mask)"),
    ]
    return new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                              "language": "python"}})


RIGHT_1 = "def my_mask(T_q, T_k):\n    return torch.ones(T_q, T_k, dtype=torch.bool).tril(T_k - T_q)"
RIGHT_2 = "def my_triu_mask(T_q, T_k):\n    return ~torch.ones(T_q, T_k, dtype=torch.bool).triu(T_k - T_q + 1)"
TOP_LEFT = "my_mask = lambda T_q, T_k: torch.ones(T_q, T_k, dtype=torch.bool).tril()"
TOP_LEFT_TRIU = "my_triu_mask = lambda T_q, T_k: ~torch.ones(T_q, T_k, dtype=torch.bool).triu(1)"


def answered(student: nbformat.NotebookNode, *answers: str) -> nbformat.NotebookNode:
    """The student version with its answer cells ("# your code here") filled in, in order."""
    nb = nbformat.from_dict(student)
    blanks = [cell for cell in nb.cells if cell.cell_type == "code" and cell.source == "# your code here"]
    assert len(blanks) == len(answers)
    for cell, answer in zip(blanks, answers, strict=True):
        cell.source = answer
    return nb


def without(nb: nbformat.NotebookNode, source: str) -> nbformat.NotebookNode:
    """``nb`` without its code cell whose source is ``source``."""
    cells = [cell for cell in nb.cells if not (cell.cell_type == "code" and cell.source == source)]
    assert len(cells) == len(nb.cells) - 1
    return nbformat.from_dict({**nb, "cells": cells})


@pytest.fixture(scope="module")
def course(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, nbformat.NotebookNode]:
    """The chapters folder (the tiny chapter and an unrelated one without checks) and the tiny chapter's student
    version."""
    chapters = tmp_path_factory.mktemp("chapters")
    nbformat.write(tiny_chapter(), chapters / "90_tiny.ipynb")
    other = new_notebook(cells=[new_markdown_cell("# Another chapter"), new_code_cell("x = 1")])
    nbformat.write(other, chapters / "91_other.ipynb")
    student, removed = student_versions.strip_solutions(tiny_chapter())
    assert removed == 2
    return chapters, student


def write(nb: nbformat.NotebookNode, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


def processes_with(text: str) -> list[int]:
    """The processes whose command line contains ``text``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and entry != str(os.getpid()):
            with contextlib.suppress(OSError):
                if text.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
    return found


SECRET = "ATTN_GRADE_TEST_SECRET"
FAKE_PASS = ("try:\n    au.clinic.check_causal_mask(my_mask)\nexcept Exception:\n"
             f"    print({PASSED!r})")


def escapee(observe: Path, port: int, token: str, target: Path) -> str:
    """An answer cell that tries to get out: it reads a secret, connects to a local listener, leaves a process
    behind, writes outside its folder and fakes the verdict's results; what it saw goes to ``observe``."""
    return f"""{TOP_LEFT}
import attn_utils.clinic._core as core
core._same = lambda *args, **kwargs: True
import json, os, socket, stat, subprocess
seen = {{"secret": os.environ.get({SECRET!r}), "cwd": os.getcwd()}}
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=3)
    seen["network"] = "reached"
except OSError as error:
    seen["network"] = str(error)
subprocess.Popen(["sleep", "{token}"], start_new_session=True)
for fd in range(3, 256):  # a results line on every pipe it has open
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.write(fd, json.dumps({{"number": 0, "status": "pass", "bug": "", "detail": "x"}}).encode() + b"\\n")
    except OSError:
        pass
open("results.json", "w").write('{{"status": "pass"}}')
try:
    open({str(target)!r}, "w").write("out of the scratch folder")
except OSError as error:
    seen["write"] = str(error)
open({str(observe / "seen.json")!r}, "a").write(json.dumps(seen) + "\\n")"""


@pytest.fixture(scope="module")
def listener() -> tuple[int, list[socket.socket]]:
    """A listener on 127.0.0.1 that counts who reaches it (only a local one shows whether the network is cut)."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(server.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1], accepted
    server.close()


TOKEN = f"{os.getpid() % 10**5}.3131"
ZOE = "zoë ünal"


@pytest.fixture(scope="module")
def graded(course: tuple[Path, nbformat.NotebookNode], listener: tuple[int, list[socket.socket]],
           tmp_path_factory: pytest.TempPathFactory) -> tuple[int, list[dict[str, str]], str, Path]:
    """A class graded once through the command line, four notebooks at a time: its exit status, CSV rows, printed
    summary and CSV path."""
    chapters, student = course
    subs = tmp_path_factory.mktemp("submissions")
    # alice: right answers, in a renamed file that is recognised by its title
    write(answered(student, RIGHT_1, RIGHT_2), subs / "alice" / "Copy of 90_tiny.ipynb")
    # bob: the top-left mask; an old checkpoint that is not a submission
    write(answered(student, TOP_LEFT, RIGHT_2), subs / "bob" / "90_tiny.ipynb")
    write(answered(student, TOP_LEFT, RIGHT_2), subs / "bob" / ".ipynb_checkpoints" / "90_tiny-checkpoint.ipynb")
    # carol: deleted the first exercise's check cell (its second one must not stand in for it); an older copy
    write(without(answered(student, RIGHT_1, RIGHT_2), "au.clinic.check_causal_mask(my_mask)"),
          subs / "carol" / "90_tiny.ipynb")
    write(answered(student, RIGHT_1, RIGHT_2), subs / "carol" / "old" / "90_tiny.ipynb")
    # dave: deleted the starter and named his function otherwise, so the check meets a NameError
    dave = without(answered(student, "def causal(T_q, T_k):\n    return torch.ones(T_q, T_k).tril()", RIGHT_2),
                   "def my_mask(T_q, T_k):\n    raise NotImplementedError")
    write(dave, subs / "dave" / "90_tiny.ipynb")
    # erin: a notebook of no chapter; frank: an empty folder
    write(new_notebook(cells=[new_markdown_cell("# My own notes")]), subs / "erin" / "notes.ipynb")
    (subs / "frank").mkdir()
    # cheaters, with wrong answers: ivan prints the pass line when the check raises (ex-tiny-1), then replaces the
    # check (ex-tiny-2); leo makes the clinic's comparison always agree, and tries to get out of the sandbox
    ivan = answered(student, TOP_LEFT, TOP_LEFT_TRIU + f"\nau.clinic.check_causal_mask = lambda f: print({PASSED!r})")
    next(c for c in ivan.cells if c.source == "au.clinic.check_causal_mask(my_mask)").source = FAKE_PASS
    write(ivan, subs / "ivan" / "90_tiny.ipynb")
    observe = subs.parent / f"{subs.name}-observed"  # where leo's cell says what it saw: anyone may write there
    observe.mkdir()
    observe.chmod(0o777)
    write(answered(student, escapee(observe, listener[0], TOKEN, subs / "leo" / "written.txt"), RIGHT_2),
          subs / "leo" / "90_tiny.ipynb")

    # broken and hostile notebooks, each beside the honest ones (three kernels more, two of them short-lived): zoë
    # (a name with spaces and letters outside ASCII) prints 100 MB, then calls sys.exit(); quinn's kernel ends itself
    # with os._exit(1) in its first cell, rosa's with a signal (SIGKILL, which the first process of a process
    # namespace does not receive from itself, then a segmentation fault); sam's notebook is not JSON, tom's weighs
    # 200 MB (a sparse file: it costs no disk, and must not be read)
    zoe = RIGHT_1 + "\nprint('x' * 100_000_000)\nimport sys\nsys.exit()"
    write(answered(student, zoe, RIGHT_2), subs / ZOE / "Copie de 90_tiny (ñ).ipynb")
    killed = "import ctypes, os, signal\nos.kill(os.getpid(), signal.SIGKILL)\nctypes.string_at(0)"
    for name, code in (("quinn", "import os\nos._exit(1)"), ("rosa", killed)):
        nb = answered(student, RIGHT_1, RIGHT_2)
        nb.cells[1].source = code + "\n" + nb.cells[1].source
        write(nb, subs / name / "90_tiny.ipynb")
    (subs / "sam").mkdir()
    (subs / "sam" / "90_tiny.ipynb").write_text('{"cells": [this is not JSON', encoding="utf-8")
    (subs / "tom").mkdir()
    with open(subs / "tom" / "90_tiny.ipynb", "wb") as f:
        f.write(b'{"cells": []')
        f.truncate(200 * 10**6)

    output = subs.parent / f"{subs.name}.csv"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout), pytest.MonkeyPatch.context() as patch:
        patch.setenv(SECRET, "do-not-leak")
        status = grading.main([str(subs), "-o", str(output), "--chapters", str(chapters), "--timeout", "120",
                               "--jobs", "4"])
    with open(output, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return status, rows, stdout.getvalue(), output


HONEST = [
    ("alice", "90_tiny", "ex-tiny-1", CHECK, "pass", ""),
    ("alice", "90_tiny", "ex-tiny-2", CHECK, "pass", ""),
    ("bob", "90_tiny", "ex-tiny-1", CHECK, "fail", "causal-top-left"),
    ("bob", "90_tiny", "ex-tiny-2", CHECK, "pass", ""),
    ("carol", "90_tiny", "ex-tiny-1", CHECK, "missing", ""),
    ("carol", "90_tiny", "ex-tiny-2", CHECK, "pass", ""),
    ("carol", "90_tiny", "", "", "error", "duplicate"),
    ("dave", "90_tiny", "ex-tiny-1", CHECK, "error", "NameError"),
    ("dave", "90_tiny", "ex-tiny-2", CHECK, "pass", ""),
    ("erin", "", "", "", "error", "unknown-chapter"),
    ("frank", "", "", "", "missing", ""),
]


def test_student_version_lets_run_all_go_past_a_failing_check(course: tuple[Path, nbformat.NotebookNode]) -> None:
    _, student = course
    tags = [cell.metadata.get("tags", []) for cell in student.cells if cell.cell_type == "code"]
    assert tags.count(["clinic-check", "raises-exception"]) == 3
    assert tags.count([]) == len(tags) - 3
    assert tiny_chapter().cells[8].metadata.tags == ["clinic-check"]  # the chapter itself is not changed


def test_expected_checks_come_from_the_chapter_after_its_first_exercise() -> None:
    calls = check_calls(tiny_chapter(), tagged_only=True)
    assert [(e.exercise, e.check, i) for e, i in calls] == [("ex-tiny-1", CHECK, 8), ("ex-tiny-2", CHECK, 14)]


CHEATERS = [("ivan", "90_tiny", "ex-tiny-1", CHECK, "fail", "causal-top-left"),
            ("ivan", "90_tiny", "ex-tiny-2", CHECK, "fail", "causal-top-left"),
            # leo wrote into the pipe between its kernel and the verdict: the verdict stops listening to that kernel
            ("leo", "90_tiny", "ex-tiny-1", CHECK, "error", "no-answer"),
            ("leo", "90_tiny", "ex-tiny-2", CHECK, "error", "no-answer")]
HOSTILE = [("quinn", "90_tiny", "ex-tiny-1", CHECK, "error", "DeadKernelError"),
           ("quinn", "90_tiny", "ex-tiny-2", CHECK, "error", "DeadKernelError"),
           ("rosa", "90_tiny", "ex-tiny-1", CHECK, "error", "DeadKernelError"),
           ("rosa", "90_tiny", "ex-tiny-2", CHECK, "error", "DeadKernelError"),
           ("sam", "90_tiny", "ex-tiny-1", CHECK, "error", "NotJSONError"),
           ("sam", "90_tiny", "ex-tiny-2", CHECK, "error", "NotJSONError"),
           ("tom", "90_tiny", "ex-tiny-1", CHECK, "error", "too-large"),
           ("tom", "90_tiny", "ex-tiny-2", CHECK, "error", "too-large"),
           (ZOE, "90_tiny", "ex-tiny-1", CHECK, "pass", ""),
           (ZOE, "90_tiny", "ex-tiny-2", CHECK, "pass", "")]


def test_the_csv_has_one_row_per_student_chapter_and_check(graded: tuple[int, list[dict[str, str]], str, Path]) -> None:
    status, rows, _, _ = graded
    assert status == 0
    assert list(rows[0]) == list(grading.COLUMNS)
    got = [(r["student"], r["chapter"], r["exercise"], r["check"], r["status"], r["bug"]) for r in rows]
    assert got == HONEST + CHEATERS + HOSTILE


def test_details_are_the_first_line_of_what_the_check_said(graded: tuple[int, list[dict[str, str]], str, Path]) -> None:
    _, rows, _, _ = graded
    detail = {(r["student"], r["exercise"]): r["detail"] for r in rows}
    assert detail["alice", "ex-tiny-1"].startswith(f"{CHECK}: passed (")
    assert detail["bob", "ex-tiny-1"].startswith(f"{CHECK}: ") and "top-left" in detail["bob", "ex-tiny-1"]
    assert detail["bob", "ex-tiny-1"].endswith(" [bug: causal-top-left]")
    assert detail["dave", "ex-tiny-1"] == "name 'my_mask' is not defined"
    assert detail["carol", "ex-tiny-1"] == f"no check cell calls {CHECK} in exercise ex-tiny-1"
    assert detail["carol", ""] == "carol/old/90_tiny.ipynb is a second notebook of 90_tiny; graded: carol/90_tiny.ipynb"
    assert "notes.ipynb matches no chapter" in detail["erin", ""] and "'My own notes'" in detail["erin", ""]
    assert all("\n" not in d and len(d) <= grading.DETAIL_CHARS for d in detail.values())
    run = [float(r["seconds"]) for r in rows if r["check"] and r["student"] not in ("sam", "tom")]
    assert all(0 < s < 120 for s in run)
    assert [float(r["seconds"]) for r in rows if not r["check"]] == [0.0, 0.0, 0.0]


def test_a_faked_pass_is_a_fail(graded: tuple[int, list[dict[str, str]], str, Path]) -> None:
    """Printing the pass line when the check raises, replacing the check, or patching the clinic's comparison: the
    check in the verdict process still fails, and the detail says that the notebook printed a pass."""
    _, rows, _, _ = graded
    detail = {(r["student"], r["exercise"]): r["detail"] for r in rows}
    for key in (("ivan", "ex-tiny-1"), ("ivan", "ex-tiny-2")):
        assert detail[key].startswith("printed a pass, but the grader's check says: check_causal_mask: ")
    assert detail["leo", "ex-tiny-1"].startswith("printed a pass, but the grader's check says: the kernel stopped")


def test_an_escape_attempt_is_contained(graded: tuple[int, list[dict[str, str]], str, Path],
                                       listener: tuple[int, list[socket.socket]]) -> None:
    """leo's cell reads a secret, connects to a local listener, leaves a process behind, writes outside its folder and
    writes results lines on every descriptor: what the machine allows to stop is stopped, and the CSV says the rest."""
    _, rows, _, output = graded
    sandbox = {r["sandbox"] for r in rows if r["check"] and r["status"] != "missing" and r["seconds"] != "0.0"}
    assert len(sandbox) == 1
    words = sandbox.pop().split(",")
    observed = output.parent / f"{output.stem}-observed" / "seen.json"
    assert not observed.exists()  # the folder it writes to is not even visible in the sandbox
    if "no-network" in words:
        assert not listener[1]
    assert "bwrap" in words
    assert not processes_with(f"sleep\0{TOKEN}")
    subs = output.with_suffix("")
    assert not (subs / "leo" / "written.txt").exists()  # the submissions are not even visible in the sandbox
    assert not list(Path(tempfile.gettempdir()).glob(f"attn-grade-{os.getpid()}-*"))  # no scratch folder left
    for controller in CONTROLLERS:
        hierarchy = _hierarchy(controller)
        assert hierarchy is None or not list(hierarchy.glob(f"attn-grade-{os.getpid()}-*"))  # nor a cgroup


def test_the_summary_counts_each_students_passed_checks(graded: tuple[int, list[dict[str, str]], str, Path]) -> None:
    _, _, printed, output = graded
    lines = printed.splitlines()
    width = len(ZOE)  # the longest name
    assert lines[:14] == [f"{'student':<{width}}  passed  total"] + [
        f"{name:<{width}}  {passed:>6}  {total:>5}" for name, passed, total in (
            ("alice", 2, 2), ("bob", 1, 2), ("carol", 1, 2), ("dave", 1, 2), ("erin", 0, 0), ("frank", 0, 0),
            ("ivan", 0, 2), ("leo", 0, 2), ("quinn", 0, 2), ("rosa", 0, 2), ("sam", 0, 2), ("tom", 0, 2),
            (ZOE, 2, 2))]
    assert "7 of 22 checks passed" in lines
    assert sum(line.startswith("not graded: ") for line in lines) == 3
    # (leo's two checks are errors: it wrote into the pipe between its kernel and the verdict)
    assert any(line.startswith("  90_tiny ex-tiny-1 check_causal_mask: 2/11 (6 error, 2 fail, 1 missing; most often ")
               for line in lines)
    assert "  90_tiny ex-tiny-2 check_causal_mask: 5/11 (5 error, 1 fail; most often DeadKernelError)" in lines
    assert lines[-1] == f"25 rows written to {output}"


def test_submissions_are_read_not_written(graded: tuple[int, list[dict[str, str]], str, Path]) -> None:
    *_, output = graded
    subs = output.with_suffix("")
    bob = nbformat.read(subs / "bob" / "90_tiny.ipynb", as_version=4)
    assert all(not cell.get("outputs") for cell in bob.cells if cell.cell_type == "code")
    written = {p.relative_to(subs).as_posix() for p in subs.rglob("*") if p.is_file()}
    assert {p for p in written if not p.startswith("leo/")} == {
        "alice/Copy of 90_tiny.ipynb", "bob/90_tiny.ipynb", "bob/.ipynb_checkpoints/90_tiny-checkpoint.ipynb",
        "carol/90_tiny.ipynb", "carol/old/90_tiny.ipynb", "dave/90_tiny.ipynb", "erin/notes.ipynb",
        "ivan/90_tiny.ipynb", "quinn/90_tiny.ipynb", "rosa/90_tiny.ipynb", "sam/90_tiny.ipynb", "tom/90_tiny.ipynb",
        f"{ZOE}/Copie de 90_tiny (ñ).ipynb"}  # nothing left by the kernels


def test_a_notebook_past_its_time_limit_is_stopped(course: tuple[Path, nbformat.NotebookNode], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel, and a process it started in a session of its own, are gone after the time limit."""
    chapters, student = course
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the scratch folders, in the kernels' command lines
    token = f"{os.getpid() % 10**5}.2121"
    nb = answered(student, RIGHT_1, RIGHT_2)
    nb.cells.insert(1, new_code_cell(f"import subprocess, time\n\nsubprocess.Popen(['sleep', '{token}'], "
                                     "start_new_session=True)\ntime.sleep(600)"))
    for cell in nb.cells:  # outputs saved from an earlier run count for nothing
        if "clinic-check" in cell.metadata.get("tags", []):
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=PASSED + "\n")]
    write(nb, tmp_path / "subs" / "gina" / "90_tiny.ipynb")

    start = time.monotonic()
    rows = grading.grade(tmp_path / "subs", chapters, timeout=6)
    elapsed = time.monotonic() - start
    assert [(r.student, r.exercise, r.status, r.bug) for r in rows] == [
        ("gina", "ex-tiny-1", "timeout", ""), ("gina", "ex-tiny-2", "timeout", "")]
    # stopped by the 6 s limit, not by the notebook's own 600 s sleep (a loaded machine starts kernels slowly)
    assert elapsed < 120 and 5 < rows[0].seconds < 120
    assert not processes_with(str(tmp_path)) and not list(tmp_path.glob("attn-grade-*"))  # the kernel is gone
    if "own-processes" in rows[0].sandbox or "pids-cgroup" in rows[0].sandbox:
        assert not processes_with(f"sleep\0{token}")  # and so is the process it left in a session of its own


def test_a_kernel_that_never_answers_is_killed(course: tuple[Path, nbformat.NotebookNode], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit holds also outside the cells: here the kernel never starts answering, so nbclient waits for it."""
    chapters, student = course
    spec = tmp_path / "jupyter" / "kernels" / "mute"
    spec.mkdir(parents=True)
    mute = "import time; time.sleep(600)"
    (spec / "kernel.json").write_text(json.dumps({"argv": [sys.executable, "-c", mute, "{connection_file}"],
                                                  "display_name": "mute", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setattr(grading.run, "GRACE", 1.0)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # its connection file, in its command line
    write(answered(student, RIGHT_1, RIGHT_2), tmp_path / "subs" / "hal" / "90_tiny.ipynb")

    start = time.monotonic()
    rows = grading.grade(tmp_path / "subs", chapters, timeout=1, kernel_name="mute")
    assert time.monotonic() - start < 120  # stopped by the limit, not by the kernel's 600 s sleep
    assert [(r.status, r.bug) for r in rows] == [("timeout", ""), ("timeout", "")]
    assert not processes_with(str(tmp_path / "attn-grade-"))


@pytest.mark.parametrize("bad, argument, message", [
    ("no-submissions", "SUBMISSIONS", "no such folder"),
    ("empty-submissions", "SUBMISSIONS", "no notebooks in"),
    ("flat-submissions", "SUBMISSIONS", "directly in"),
    ("no-chapters", "--chapters", "no such folder"),
    ("empty-chapters", "--chapters", "no chapter notebooks"),
    ("zero-timeout", "--timeout", "expected a positive number of seconds, got 0.0"),
    ("zero-jobs", "--jobs", "expected a positive number of notebooks at a time, got 0"),
])
def test_bad_arguments_stop_with_a_message_that_names_them(
    bad: str, argument: str, message: str, course: tuple[Path, nbformat.NotebookNode], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    chapters, student = course
    subs = tmp_path / "subs"
    write(student, subs / "alice" / "90_tiny.ipynb")
    args = {"no-submissions": [str(tmp_path / "nowhere")],
            "empty-submissions": [str(tmp_path / "empty")],
            "flat-submissions": [str(tmp_path / "flat")],
            "no-chapters": [str(subs), "--chapters", str(tmp_path / "nowhere")],
            "empty-chapters": [str(subs), "--chapters", str(tmp_path / "empty")],
            "zero-timeout": [str(subs), "--timeout", "0"],
            "zero-jobs": [str(subs), "-j", "0"]}[bad]
    (tmp_path / "empty" / "alice").mkdir(parents=True)
    write(student, tmp_path / "flat" / "90_tiny.ipynb")
    if "--chapters" not in args:
        args += ["--chapters", str(chapters)]
    output = tmp_path / "grades.csv"
    assert grading.main([*args, "-o", str(output)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"attn-grade: error: {argument}: ") and message in err
    assert not output.exists()


def test_outside_the_repository_the_chapters_must_be_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert grading._default_chapters() == ROOT / "notebooks"
    monkeypatch.setattr(grading, "ROOT", tmp_path / "site-packages")
    with pytest.raises(grading.GradingError, match="^chapters: attn_utils is installed outside") as caught:
        grading.grade(tmp_path)
    assert caught.value.argument == "chapters"
    assert grading.main([str(tmp_path)]) == 2
    assert "error: --chapters: attn_utils is installed outside" in capsys.readouterr().err


def test_attn_utils_imports_without_nbclient() -> None:
    top = [node for path in sorted((ROOT / "attn_utils" / "grading").glob("*.py"))
           for node in ast.parse(path.read_text(encoding="utf-8")).body
           if isinstance(node, (ast.Import, ast.ImportFrom))]
    names = [alias.name for node in top for alias in node.names] + [node.module for node in top
                                                                    if isinstance(node, ast.ImportFrom)]
    assert "argparse" in names and "__future__" in names
    assert not [name for name in names if name and name.split(".")[0] in {"nbclient", "nbformat", "jupyter_client"}]


def test_the_command_is_declared_in_pyproject() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["scripts"]["attn-grade"] == "attn_utils.grading:main"
    assert project["optional-dependencies"]["grading"] == ["nbclient>=0.7", "nbformat>=5"]


def test_a_detail_is_read_in_linear_time_from_a_huge_message() -> None:
    """500 kB built to make a regular expression backtrack: the first line is found by a linear scan."""
    message = "check_rope: " + "[bug: " * 100_000 + "\nsecond line"
    start = time.perf_counter()
    detail = first_line(message)
    assert time.perf_counter() - start < 0.5
    assert len(detail) <= grading.DETAIL_CHARS and detail.startswith("check_rope: [bug: ")


def test_broken_and_hostile_notebooks_each_get_a_row_that_says_what_happened(
        graded: tuple[int, list[dict[str, str]], str, Path]) -> None:
    """100 MB printed, sys.exit(), os._exit(1), a kernel killed by a signal, a notebook that is not JSON, one of 200 MB
    and a name with spaces and letters outside ASCII: each gets its rows, beside the honest students' (above)."""
    _, rows, _, _ = graded
    detail = {(r["student"], r["exercise"]): r["detail"] for r in rows}
    cut = f" [outputs cut: the notebook printed 100 MB, the grader kept {grading.OUTPUT_BYTES >> 20} MiB]"
    for exercise in ("ex-tiny-1", "ex-tiny-2"):
        assert detail[ZOE, exercise].startswith(f"{CHECK}: passed") and detail[ZOE, exercise].endswith(cut)
        for name in ("quinn", "rosa"):
            assert detail[name, exercise].startswith("the notebook stopped before this check: ")
        assert detail["sam", exercise].startswith("sam/90_tiny.ipynb cannot be read: ")
        assert detail["tom", exercise] == ("tom/90_tiny.ipynb cannot be read: 200 MB, above the limit of 64 MiB "
                                           "(--max-notebook-mb): not read")
    assert not any(cut in d for (student, _), d in detail.items() if student != ZOE)


def test_a_student_folder_whose_name_is_not_text_gets_its_own_row(tmp_path: Path) -> None:
    """A folder named with bytes that are not UTF-8 (or with control characters) is refused with a row that shows the
    name escaped; the other students are read as usual, and the CSV can be written."""
    from attn_utils.grading.collect import find_submissions

    for name in (b"eve\xff", b"tab\tname", b"alice"):
        folder = tmp_path / os.fsdecode(name)
        folder.mkdir()
        (folder / "03_attention_scoring.ipynb").write_text("{}")
    found, refused = find_submissions(tmp_path)
    assert list(found) == ["alice"]
    assert sorted(student for student, _ in refused) == ["eve\\xff", "tab\\x09name"]
    assert all("not printable UTF-8 text" in why for _, why in refused)
    rows = [grading.GradeRow(student, "", "", "", "error", "not-a-file", why, 0.0) for student, why in refused]
    grading.write_csv(rows, tmp_path / "grades.csv")
    assert "eve\\xff" in (tmp_path / "grades.csv").read_text(encoding="utf-8")


def test_a_check_cell_that_does_not_parse_says_where(course: tuple[Path, nbformat.NotebookNode],
                                                      tmp_path: Path) -> None:
    """A check cell with a syntax error is still the check (its row says which cell and line), not 'unverified'."""
    from attn_utils.grading.collect import load_chapters, plan

    chapters, student = course
    nb = answered(student, RIGHT_1, RIGHT_2)
    broken = [i for i, c in enumerate(nb.cells) if c.source == "au.clinic.check_causal_mask(my_mask)"][0]
    nb.cells[broken].source = "au.clinic.check_causal_mask(my_mask"
    write(nb, tmp_path / "dora" / "90_tiny.ipynb")
    job = plan("dora", tmp_path / "dora" / "90_tiny.ipynb", tmp_path, chapters, load_chapters(chapters), {})
    assert not isinstance(job, list)
    assert job.unparsed == {broken: f"the check cell (cell {broken + 1} of the notebook) does not parse: "
                                    "line 1: '(' was never closed"}


def test_the_wheel_holds_every_package_of_attn_utils() -> None:
    # `pip install .[grading]` installs `attn-grade`: the wheel must hold attn_utils.grading, which the command imports
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(project["tool"]["setuptools"]["packages"])
    # every folder of the package is listed: a folder of code (with __init__.py) or of data the package reads (results/)
    folders = [ROOT / "attn_utils", *(p for p in (ROOT / "attn_utils").rglob("*") if p.is_dir())]
    on_disk = {".".join(p.relative_to(ROOT).parts) for p in folders if p.name != "__pycache__"}
    assert on_disk == listed, f"pyproject.toml [tool.setuptools] packages: {sorted(listed)}, on disk: {sorted(on_disk)}"
