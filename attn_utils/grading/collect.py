"""Collecting what is graded: the instructor's chapters and their checks, the students' notebooks, and the plan of a
class (which notebook is which chapter, which cell runs which check).

Submissions are data: a notebook that is a symbolic link or not a regular file is refused with an error row (it is
never opened), a student's folder that is a link is refused too, and nothing is read from a file the student did not
write. The check cells are found by their tag and a plain regular expression on their source, so that a cell that
does not parse still counts as a check cell (its row says where it does not parse).
"""

from __future__ import annotations

import ast
import os
import re
import stat
import subprocess
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nbformat import NotebookNode

CHECK_TAG = "clinic-check"
"""The cell tag of a clinic check cell, in the chapters and in the student versions."""

COLUMNS = ("student", "chapter", "exercise", "check", "status", "bug", "detail", "seconds", "sandbox")
"""The columns of the CSV, the fields of :class:`GradeRow`."""

STATUSES = {
    "pass": "the clinic's check, run by the grader on the student's function, passed",
    "fail": "the check raised an AttentionBug; ``bug`` is its code",
    "error": "the student's function or the check's arguments raised (``bug`` is the exception's name, e.g. "
             "``NameError``), the check cell does not parse (``SyntaxError``), the notebook could not be run or read "
             "(``too-many-files`` in the student's folder, ``too-much-output``), or (with ``check`` empty) the "
             "notebook could not be graded: ``unknown-chapter``, ``duplicate``, ``no-checks``, ``not-a-file``, "
             "``grader-stopped``, ``grader-stopped-twice``",
    "missing": "the submission has no such check cell, or the cell did not run",
    "timeout": "the notebook ran out of time before the check cell finished",
}
"""Each status of a row, and when it is given."""

DETAIL_CHARS = 200
"""``detail`` is the first line of the message, shortened to this many characters."""

_EXERCISE_START = re.compile(r"^[`:]{3,}\s*\{exercise-start\}", re.MULTILINE)
_LABEL = re.compile(r"^:label:\s*(\S+)", re.MULTILINE)
_CHECK_CALL = re.compile(r"clinic\.(check_\w+)\(")


class GradingError(ValueError):
    """The grading cannot start: an argument names a folder that is missing, empty or not laid out as expected, or
    the sandbox cannot be made.

    Attributes:
        argument: the argument of :func:`grade` that is wrong (``"submissions"``, ``"chapters"``, ``"timeout"``,
            ``"jobs"``, ``"sandbox"``).
    """

    def __init__(self, argument: str, message: str) -> None:
        self.argument, self.message = argument, message
        super().__init__(f"{argument}: {message}")


@dataclass(frozen=True)
class GradeRow:
    """One row of the grades: what one expected check of one student's chapter said.

    Attributes:
        student: the student's folder name.
        chapter: the chapter's file name without ``.ipynb`` (``03_attention_scoring``); empty when the notebook
            matches no chapter.
        exercise: the label of the exercise the check belongs to (``ex-scoring-6``).
        check: the check's name (``check_masked_softmax``); empty for a row about a whole notebook.
        status: one of ``STATUSES``.
        bug: for ``fail`` the clinic's bug code, for ``error`` the exception's name (or what kept the notebook from
            being graded), else empty.
        detail: the first line of what the check said, or why the row has its status.
        seconds: how long the notebook ran (0 when it was not run).
        sandbox: how the notebook's code was confined (:meth:`Sandbox.describe`), e.g.
            ``bwrap,limits,no-network,pids-cgroup,own-user``.
    """

    student: str
    chapter: str
    exercise: str
    check: str
    status: str
    bug: str
    detail: str
    seconds: float
    sandbox: str = ""


@dataclass(frozen=True)
class Expected:
    """A check that a chapter expects: the exercise's label and the check's name."""

    exercise: str
    check: str


@dataclass(frozen=True)
class Chapter:
    name: str
    path: Path
    title: str | None
    checks: tuple[Expected, ...]
    arguments: tuple[str | None, ...] = ()  # for each check, its arguments as the chapter writes them


@dataclass(eq=False)
class Job:
    """A submitted notebook to run, with its check cells matched to the chapter's (``None``: no such cell)."""

    student: str
    shown: str  # the notebook's path in the submissions folder
    chapter: Chapter
    nb: NotebookNode
    cells: list[tuple[Expected, int]]  # every check call of the submission, and its cell
    matched: list[int | None]  # for each of the chapter's checks, the cell that runs it
    unparsed: dict[int, str] = field(default_factory=dict)  # check cells that do not parse: where, and why
    run: Any = None
    verified: dict[int, tuple[str, str, str]] = field(default_factory=dict)  # what the verdict said, per check
    rows: list[GradeRow] | None = None  # once it has run


class NotebookTooLarge(OSError):
    """A submitted notebook above ``--max-notebook-mb``: it is not read."""


class NotAFile(OSError):
    """A submitted notebook that is a symbolic link or not a regular file: it is not read."""


def first_line(text: str) -> str:
    """The first line of ``text`` (of its first 100 kB), shortened to :data:`DETAIL_CHARS`."""
    head = text[:100_000]
    cut = head.find("\n", len(head) - len(head.lstrip()))
    line = (head if cut < 0 else head[:cut]).strip()
    line = "".join(c for c in line if c.isprintable())
    return line if len(line) <= DETAIL_CHARS else line[: DETAIL_CHARS - 1] + "…"


def read_notebook(path: Path, max_mb: int | None = None) -> NotebookNode:
    """A notebook read without following a symbolic link, refused if it is not a regular file or is too large."""
    import nbformat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        if os.path.islink(path):
            raise NotAFile("a symbolic link: not read") from None
        raise error
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise NotAFile("not a regular file: not read")
        if max_mb is not None and info.st_size > max_mb << 20:
            raise NotebookTooLarge(f"{info.st_size / 1e6:.0f} MB, above the limit of {max_mb} MiB "
                                   "(--max-notebook-mb): not read")
        data = f.read()
    return nbformat.reads(data.decode("utf-8"), as_version=4)


def title(nb: NotebookNode) -> str | None:
    """The notebook's first ``# `` title, or None."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in str(cell.source).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return None


def _same_title(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and " ".join(a.split()).casefold() == " ".join(b.split()).casefold()


def check_calls(nb: NotebookNode, *, tagged_only: bool) -> list[tuple[Expected, int]]:
    """Each check called after the first exercise, with the label of its exercise and the index of its cell.

    With ``tagged_only``, only the cells tagged :data:`CHECK_TAG` count; otherwise every code cell that calls a check.
    """
    calls: list[tuple[Expected, int]] = []
    label: str | None = None  # None until the first exercise-start
    for index, cell in enumerate(nb.cells):
        source = str(cell.source)
        if cell.cell_type == "markdown":
            starts = list(_EXERCISE_START.finditer(source))
            if starts:
                found = _LABEL.search(source, starts[-1].end())
                label = found.group(1) if found else ""
        elif cell.cell_type == "code" and label is not None:
            if tagged_only and CHECK_TAG not in cell.metadata.get("tags", []):
                continue
            calls += [(Expected(label, name), index) for name in _CHECK_CALL.findall(source)]
    return calls


def python_of(source: str) -> str:
    """A cell's source as the kernel runs it: IPython's magics and shell lines turned into Python."""
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(source)


# The parse of a student's cell, in a Python of its own (standard library only, reading the code from stdin).
_PARSE = """import ast, sys
try:
    ast.parse(sys.stdin.read())
except SyntaxError as error:
    print(f"line {error.lineno}: {error.msg}")
except (RecursionError, MemoryError, ValueError, SystemError) as error:
    print(f"{type(error).__name__}: " + (str(error).splitlines() or [""])[0])
"""
PARSE_SECONDS = 30
"""The longest the parse of one check cell may take."""


def parse_error(source: str) -> str | None:
    """Where and why a cell does not parse (``line 3: invalid syntax``), or None if it does.

    The student's code is parsed in a Python process of its own: an expression nested deeply enough can leave the
    parser of the process that read it unable to build another tree (CPython 3.11 then raises ``SystemError: AST
    constructor recursion depth mismatch`` for any later file), and the grader goes on to other students' notebooks.
    """
    try:
        done = subprocess.run([sys.executable, "-I", "-S", "-c", _PARSE], input=python_of(source), text=True,
                              capture_output=True, timeout=PARSE_SECONDS, check=False)
    except subprocess.TimeoutExpired:
        return f"the parser took more than {PARSE_SECONDS} s"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return f"the parser stopped: {first_line(last)}"
    return first_line(done.stdout) or None


def call_arguments(source: str, check: str, occurrence: int) -> str | None:
    """The arguments of the ``occurrence``-th call of ``check`` in a cell, as the Python expression
    ``((args...), {kwargs...})`` (made of the call's own source text: no recursion over the tree), or None."""
    try:
        code = python_of(source)
        tree = ast.parse(code)
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        return None
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
             and node.func.attr == check]
    if len(calls) <= occurrence:
        return None
    call = calls[occurrence]

    def text(node: ast.AST) -> str:
        return f"({ast.get_source_segment(code, node)})"

    args = "".join(f"*{text(a.value)}, " if isinstance(a, ast.Starred) else f"{text(a)}, " for a in call.args)
    kwargs = ", ".join(f"{k.arg!r}: {text(k.value)}" if k.arg else f"**{text(k.value)}" for k in call.keywords)
    return f"(({args}), {{{kwargs}}})"


def load_chapters(chapters: Path) -> list[Chapter]:
    if not chapters.is_dir():
        raise GradingError("chapters", f"no such folder: {chapters} (expected the folder of the instructor's chapters, "
                                       "e.g. the repository's notebooks/)")
    paths = sorted(p for p in chapters.glob("*.ipynb") if not p.name.startswith("."))
    if not paths:
        raise GradingError("chapters", f"no chapter notebooks (*.ipynb) in {chapters}")
    loaded = []
    for path in paths:
        try:
            nb = read_notebook(path)
        except Exception as error:  # noqa: BLE001 (any unreadable chapter is the instructor's to fix)
            message = f"cannot read the chapter {path}: {type(error).__name__}: {error}"
            raise GradingError("chapters", message) from error
        calls = check_calls(nb, tagged_only=True)
        seen: defaultdict[tuple[int, str], int] = defaultdict(int)
        arguments = []
        for expected, index in calls:
            arguments.append(call_arguments(nb.cells[index].source, expected.check, seen[index, expected.check]))
            seen[index, expected.check] += 1
        loaded.append(Chapter(path.stem, path, title(nb), tuple(e for e, _ in calls), tuple(arguments)))
    return loaded


def _plain_name(name: str) -> bool:
    """A name that is printable UTF-8 text (not undecodable bytes, not control characters): it can go into the CSV,
    the terminal and the sandbox's command line as it is."""
    return name.isprintable() and not any("\udc80" <= ch <= "\udcff" for ch in name)


def find_submissions(submissions: Path) -> tuple[dict[str, list[Path]], list[tuple[str, str]]]:
    """Each student's notebooks (students and notebooks in sorted order), and what is refused: ``(student, why)``
    for a student's folder or a notebook that is a symbolic link (never followed) or not a regular file."""
    if not submissions.is_dir():
        raise GradingError("submissions", f"no such folder: {submissions}")
    top = sorted(p.name for p in submissions.glob("*.ipynb") if not p.name.startswith("."))
    if top:
        raise GradingError("submissions", f"{len(top)} notebook(s) directly in {submissions} ({', '.join(top[:3])}"
                                          f"{', …' if len(top) > 3 else ''}): put each student's notebooks in a "
                                          "folder of their own, SUBMISSIONS/<student>/<chapter>.ipynb")
    found: dict[str, list[Path]] = {}
    refused: list[tuple[str, str]] = []
    for folder in sorted(submissions.iterdir()):
        if folder.name.startswith("."):
            continue
        if not _plain_name(folder.name):
            shown = folder.name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            shown = "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in shown)
            refused.append((shown, f"{shown}/: the folder's name is not printable UTF-8 text; rename it to grade it"))
            continue
        if folder.is_symlink():
            refused.append((folder.name, f"{folder.name}/ is a symbolic link: not followed"))
            continue
        if not folder.is_dir():
            continue
        notebooks = []
        for here, folders, files in os.walk(folder):  # does not follow links to folders
            folders[:] = sorted(f for f in folders if not f.startswith("."))
            folders[:] = [f for f in folders if _plain_name(f)]
            for name in sorted(files):
                if name.endswith(".ipynb") and not name.startswith(".") and _plain_name(name):
                    notebooks.append(Path(here) / name)
        found[folder.name] = sorted(notebooks)
    if not any(found.values()) and not refused:
        raise GradingError("submissions", f"no notebooks in {submissions} (expected "
                                          "SUBMISSIONS/<student>/<chapter>.ipynb)")
    return found, refused


def match_chapter(path: Path, nb: NotebookNode | None, chapters: Sequence[Chapter]) -> Chapter | None:
    """The chapter a submitted notebook is: by file name, else by title."""
    for chapter in chapters:
        if chapter.path.name == path.name:
            return chapter
    name = title(nb) if nb is not None else None
    return next((chapter for chapter in chapters if _same_title(chapter.title, name)), None)


def clear_outputs(nb: NotebookNode) -> None:
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None


def plan(student: str, path: Path, submissions: Path, chapters: Path, known: Sequence[Chapter],
         graded: dict[str, str], max_mb: int = 64) -> Job | list[GradeRow]:
    """What to do with one submitted notebook: a job to run, or its rows when there is nothing to run.

    ``graded`` (chapter -> notebook) is updated. A notebook of more than ``max_mb`` MiB is not read (its size is
    all that is looked at): it can be graded only as the chapter its file name says.
    """
    shown = path.relative_to(submissions).as_posix()
    try:
        nb, unreadable = read_notebook(path, max_mb), None
    except Exception as error:  # noqa: BLE001 (a broken submission is reported in its rows)
        nb, unreadable = None, error
    chapter = match_chapter(path, nb, known)

    def note(chapter_name: str, bug: str, detail: str) -> list[GradeRow]:
        return [GradeRow(student, chapter_name, "", "", "error", bug, first_line(detail), 0.0)]

    if isinstance(unreadable, NotAFile):
        return note(chapter.name if chapter else "", "not-a-file", f"{shown} is {unreadable}")
    if chapter is None:
        why = (f"cannot be read ({type(unreadable).__name__}: {unreadable})" if nb is None else
               f"matches no chapter in {chapters}, by file name or by its title {title(nb)!r}")
        return note("", "unknown-chapter", f"{shown} {why}")
    if chapter.name in graded:
        return note(chapter.name, "duplicate",
                    f"{shown} is a second notebook of {chapter.name}; graded: {graded[chapter.name]}")
    graded[chapter.name] = shown
    if not chapter.checks:
        return note(chapter.name, "no-checks",
                    f"{chapter.path.name} has no {CHECK_TAG} cell after its first exercise: nothing to grade")
    if nb is None:
        bug = "too-large" if isinstance(unreadable, NotebookTooLarge) else type(unreadable).__name__
        return [GradeRow(student, chapter.name, e.exercise, e.check, "error", bug,
                         first_line(f"{shown} cannot be read: {unreadable}"), 0.0) for e in chapter.checks]
    tagged = check_calls(nb, tagged_only=True)
    # An editor that drops cell tags drops all of them: then every cell that calls a check is a check cell.
    cells = tagged if tagged else check_calls(nb, tagged_only=False)
    queues: dict[Expected, list[int]] = defaultdict(list)
    for expected, index in cells:
        queues[expected].append(index)
    matched = [queues[expected].pop(0) if queues[expected] else None for expected in chapter.checks]
    unparsed = {}
    for index in {i for i in matched if i is not None}:
        error = parse_error(str(nb.cells[index].source))
        if error is not None:
            unparsed[index] = f"the check cell (cell {index + 1} of the notebook) does not parse: {error}"
    clear_outputs(nb)  # only what the run prints counts, and a class's saved figures need not wait in memory
    return Job(student, shown, chapter, nb, cells, matched, unparsed)
