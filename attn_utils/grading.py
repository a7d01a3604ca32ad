"""Grading a class's notebooks: each submitted chapter is run, and what its clinic checks said becomes a CSV.

Students work in the student versions of the chapters (``scripts/make_student_versions.py``), fill in the exercises
and submit their notebooks, one folder per student::

    submissions/
        alice/03_attention_scoring.ipynb
        alice/05_multihead_attention.ipynb
        bob/03_attention_scoring.ipynb

Then one command grades them all (``pip install "attn_utils[grading]"`` installs what it needs)::

    attn-grade submissions/ -o grades.csv --chapters notebooks/ [--timeout 300] [-j 4]
    python -m attn_utils.grading submissions/ -o grades.csv    # the same; in the repository --chapters defaults
                                                               # to its notebooks/

It writes one row per student, chapter and expected check (see :data:`COLUMNS` and :data:`STATUSES`), and prints
each student's passed checks out of the total.

**What is expected comes from the instructor's chapter**, never from the submission: every code cell tagged
``clinic-check`` after the chapter's first ``{exercise-start}``, known by the label of the exercise it follows
(``ex-scoring-6``) and by the check it calls (``au.clinic.check_masked_softmax(...)``). A submission's check cells
are matched to these by (exercise label, check name), in order; a check that a student deleted is ``missing``.

**Which chapter a notebook is** is read from its file name (``03_attention_scoring.ipynb``), and when the name matches
no chapter (``Copy of 03_attention_scoring.ipynb``), from its title (its first line ``# …``). Nothing is skipped
silently: a notebook that is neither gets an ``error`` row with the bug ``unknown-chapter``, a second notebook of the
same chapter from one student a row ``duplicate``, a submitted chapter without checks a row ``no-checks``, and a
student folder without notebooks a ``missing`` row; a notebook at the top of the submissions folder (not in a
student's folder) stops the grading before anything runs, with an error that shows the layout expected. Hidden files
and folders (``.ipynb_checkpoints``) are not submissions and are not read.

**How a notebook runs.** Each one runs top to bottom in a fresh kernel, in its own folder, with
``allow_errors=True`` (a failing cell does not stop the ones after it) and at most ``timeout`` seconds for the whole
notebook, kernel start included (a few more if its kernel stops answering); after that its kernel is shut down, and
the checks it had not reached are ``timeout``. The outputs a student saved are cleared first: only what the run
prints counts. The submitted files are read, never written. ``jobs`` notebooks run at a time (``-j 4``; one by
default), each in its own kernel; the time limit counts on the clock, so notebooks that share too few cores take longer
and may run out of it.

.. warning::
   **Student code is untrusted.** Grading runs it with the grader's rights: it can read and write the grader's
   files, reach the network and read the environment's secrets. Run the grading inside a throwaway container or a
   JupyterHub user's server that holds nothing else, never on a machine with credentials. A student can also print
   a ``passed`` line without passing: the grades are feedback, and a grade that counts should be confirmed by
   reading the code.

nbclient and nbformat are imported only when a notebook is read or run, so ``import attn_utils`` does not need
them.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import csv
import logging
import math
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from jupyter_client.manager import AsyncKernelManager
    from nbformat import NotebookNode

__all__ = ["CHECK_TAG", "COLUMNS", "STATUSES", "GradeRow", "GradingError", "grade", "write_csv", "summary", "main"]

CHECK_TAG = "clinic-check"
"""The cell tag of a clinic check cell, in the chapters and in the student versions."""

COLUMNS = ("student", "chapter", "exercise", "check", "status", "bug", "detail", "seconds")
"""The columns of the CSV, the fields of :class:`GradeRow`."""

STATUSES = {
    "pass": "the check cell printed ``<check>: passed``",
    "fail": "the check raised an AttentionBug; ``bug`` is the code in its ``[bug: code]``",
    "error": "another exception ended the check cell (``bug`` is its name, e.g. ``NameError``), the notebook could "
             "not be run or read, or (with ``check`` empty) the notebook could not be graded: ``unknown-chapter``, "
             "``duplicate``, ``no-checks``",
    "missing": "the submission has no such check cell, or the cell did not run or printed nothing about the check",
    "timeout": "the notebook ran out of time before the check cell finished",
}
"""Each status of a row, and when it is given."""

ROOT = Path(__file__).resolve().parents[1]
GRACE = 5.0
"""Seconds past the time limit after which a notebook whose kernel does not answer is stopped from outside."""
DETAIL_CHARS = 200
"""``detail`` is the first line of the message, shortened to this many characters."""

_EXERCISE_START = re.compile(r"^[`:]{3,}\s*\{exercise-start\}", re.MULTILINE)
_LABEL = re.compile(r"^:label:\s*(\S+)", re.MULTILINE)
_CHECK_CALL = re.compile(r"clinic\.(check_\w+)\(")
_BUG = re.compile(r"\[bug: ([^\]]+)\]\s*$")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

T = TypeVar("T")

# nbclient logs a timeout or a dead kernel as an error; the rows say it, and a class's worth of such lines would bury
# the grader's own.
_NBCLIENT_LOG = logging.getLogger(f"{__name__}.nbclient")
_NBCLIENT_LOG.addHandler(logging.NullHandler())
_NBCLIENT_LOG.propagate = False


class GradingError(ValueError):
    """The grading cannot start: an argument names a folder that is missing, empty or not laid out as expected.

    Attributes:
        argument: the argument of :func:`grade` that is wrong (``"submissions"``, ``"chapters"``, ``"timeout"``,
            ``"jobs"``).
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
        status: one of :data:`STATUSES`.
        bug: for ``fail`` the clinic's bug code, for ``error`` the exception's name (or what kept the notebook from
            being graded), else empty.
        detail: the first line of what the check printed or raised, or why the row has its status.
        seconds: how long the notebook ran (0 when it was not run).
    """

    student: str
    chapter: str
    exercise: str
    check: str
    status: str
    bug: str
    detail: str
    seconds: float


@dataclass(frozen=True)
class _Expected:
    """A check that a chapter expects: the exercise's label and the check's name."""

    exercise: str
    check: str


@dataclass(frozen=True)
class _Chapter:
    name: str
    path: Path
    title: str | None
    checks: tuple[_Expected, ...]


@dataclass
class _Run:
    """What happened when a notebook ran."""

    seconds: float
    timed_out: bool
    error: BaseException | None  # what stopped the run early, other than the time limit
    executed: set[int]  # indices of the cells that finished


@dataclass(eq=False)
class _Job:
    """A submitted notebook to run, with its check cells matched to the chapter's (``None``: no such cell)."""

    student: str
    shown: str  # the notebook's path in the submissions folder
    chapter: _Chapter
    nb: NotebookNode
    cells: list[tuple[_Expected, int]]  # every check call of the submission, and its cell
    matched: list[int | None]  # for each of the chapter's checks, the cell that runs it
    run: _Run | None = None
    rows: list[GradeRow] | None = None  # once it has run (then the notebook's outputs are dropped)


# --------------------------------------------------------------------------------------------------------------------
# Reading chapters and submissions


def _read(path: Path) -> NotebookNode:
    import nbformat

    return nbformat.read(path, as_version=4)


def _title(nb: NotebookNode) -> str | None:
    """The notebook's first ``# `` title, or None."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return None


def _same_title(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and " ".join(a.split()).casefold() == " ".join(b.split()).casefold()


def _check_calls(nb: NotebookNode, *, tagged_only: bool) -> list[tuple[_Expected, int]]:
    """Each check called after the first exercise, with the label of its exercise and the index of its cell.

    With ``tagged_only``, only the cells tagged :data:`CHECK_TAG` count; otherwise every code cell that calls a check.
    """
    calls: list[tuple[_Expected, int]] = []
    label: str | None = None  # None until the first exercise-start
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            starts = list(_EXERCISE_START.finditer(cell.source))
            if starts:
                found = _LABEL.search(cell.source, starts[-1].end())
                label = found.group(1) if found else ""
        elif cell.cell_type == "code" and label is not None:
            if tagged_only and CHECK_TAG not in cell.metadata.get("tags", []):
                continue
            calls += [(_Expected(label, name), index) for name in _CHECK_CALL.findall(cell.source)]
    return calls


def _load_chapters(chapters: Path) -> list[_Chapter]:
    if not chapters.is_dir():
        raise GradingError("chapters", f"no such folder: {chapters} (expected the folder of the instructor's chapters, "
                                       "e.g. the repository's notebooks/)")
    paths = sorted(p for p in chapters.glob("*.ipynb") if not p.name.startswith("."))
    if not paths:
        raise GradingError("chapters", f"no chapter notebooks (*.ipynb) in {chapters}")
    loaded = []
    for path in paths:
        try:
            nb = _read(path)
        except Exception as error:  # noqa: BLE001 (any unreadable chapter is the instructor's to fix)
            message = f"cannot read the chapter {path}: {type(error).__name__}: {error}"
            raise GradingError("chapters", message) from error
        checks = tuple(expected for expected, _ in _check_calls(nb, tagged_only=True))
        loaded.append(_Chapter(path.stem, path, _title(nb), checks))
    return loaded


def _is_hidden(path: Path, root: Path) -> bool:
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def _find_submissions(submissions: Path) -> dict[str, list[Path]]:
    """Each student's notebooks, students and notebooks in sorted order."""
    if not submissions.is_dir():
        raise GradingError("submissions", f"no such folder: {submissions}")
    top = sorted(p.name for p in submissions.glob("*.ipynb") if not p.name.startswith("."))
    if top:
        raise GradingError("submissions", f"{len(top)} notebook(s) directly in {submissions} ({', '.join(top[:3])}"
                                          f"{', …' if len(top) > 3 else ''}): put each student's notebooks in a "
                                          "folder of their own, SUBMISSIONS/<student>/<chapter>.ipynb")
    found = {
        folder.name: sorted(p for p in folder.rglob("*.ipynb") if not _is_hidden(p, folder))
        for folder in sorted(submissions.iterdir())
        if folder.is_dir() and not folder.name.startswith(".")
    }
    if not any(found.values()):
        raise GradingError("submissions", f"no notebooks in {submissions} (expected "
                                          "SUBMISSIONS/<student>/<chapter>.ipynb)")
    return found


def _match_chapter(path: Path, nb: NotebookNode | None, chapters: Sequence[_Chapter]) -> _Chapter | None:
    """The chapter a submitted notebook is: by file name, else by title."""
    for chapter in chapters:
        if chapter.path.name == path.name:
            return chapter
    title = _title(nb) if nb is not None else None
    return next((chapter for chapter in chapters if _same_title(chapter.title, title)), None)


# --------------------------------------------------------------------------------------------------------------------
# Running a notebook


def _run_sync(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to the end, also when called from a running event loop (a Jupyter cell)."""

    async def run() -> T:
        return await make()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run())
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, run()).result()


async def _stop_kernel(km: AsyncKernelManager) -> None:
    """Kill the kernel if it still runs (nbclient stops it on most exits, not on all: a start cut short, say)."""
    if km.has_kernel and await km.is_alive():
        await km.shutdown_kernel(now=True)


async def _execute(nb: NotebookNode, cwd: Path, timeout: float, kernel_name: str) -> _Run:
    """Run ``nb`` in place in a fresh kernel started in ``cwd``, for at most ``timeout`` seconds in all."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError

    start = time.monotonic()
    deadline = start + timeout
    executed: set[int] = set()

    def finished(cell: Any, cell_index: int, execute_reply: Any) -> None:
        executed.add(cell_index)

    client = NotebookClient(
        nb,
        kernel_name=kernel_name,
        allow_errors=True,
        # Each cell may use the time left to the whole notebook (at least a second: nbclient reads 0 as no limit), so
        # nbclient itself stops the cell that is running at the deadline.
        timeout_func=lambda cell: max(1, math.ceil(deadline - time.monotonic())),
        shutdown_kernel="immediate",
        resources={"metadata": {"path": str(cwd)}},
        on_cell_executed=finished,
        log=_NBCLIENT_LOG,
    )
    km = client.km = client.create_kernel_manager()  # kept: nbclient forgets it when it cleans up
    # The kernel process's own stdout and stderr (not the cells' outputs) would only interleave its start-up
    # warnings with the grader's lines.
    task = asyncio.ensure_future(client.async_execute(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    timed_out, error = False, None
    try:
        # The backstop, for a kernel that does not answer (at its start, say): kill it, so that nbclient sees it die
        # and stops; cancel nbclient if it does not.
        done, _ = await asyncio.wait({task}, timeout=max(0.0, deadline - time.monotonic()) + GRACE)
        if not done:
            timed_out = True
            await _stop_kernel(km)
            done, _ = await asyncio.wait({task}, timeout=GRACE)
            if not done:
                task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            if not timed_out:
                raise
        except CellTimeoutError:
            timed_out = True
        except Exception as exc:  # noqa: BLE001 (a dead kernel, a kernel that does not start: reported in the rows)
            if not timed_out:  # after the backstop, the kernel died because it was killed
                error = exc
    finally:
        if not task.done():
            task.cancel()
        await _stop_kernel(km)
        # nbclient leaves its clean-up registered for the interpreter's exit when the kernel dies while starting.
        atexit.unregister(client._cleanup_kernel)
    return _Run(time.monotonic() - start, timed_out, error, executed)


def _clear_outputs(nb: NotebookNode) -> None:
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None


# --------------------------------------------------------------------------------------------------------------------
# Reading what the checks said


def _first_line(text: str) -> str:
    line = _ANSI.sub("", text).strip().split("\n", 1)[0].strip()
    return line if len(line) <= DETAIL_CHARS else line[: DETAIL_CHARS - 1] + "…"


def _outcome(check: str, cell: NotebookNode, others: Iterable[str]) -> tuple[str, str, str] | None:
    """``(status, bug, detail)`` from what the cell printed about ``check``, or None if it printed nothing about it.

    ``others`` are the other checks the same cell calls: an AttentionBug of one of them says nothing about ``check``.
    """
    text = "".join(out.get("text", "") for out in cell.outputs if out.output_type == "stream")
    for line in _ANSI.sub("", text).splitlines():
        if line.startswith(f"{check}: passed"):
            return "pass", "", _first_line(line)
    for out in cell.outputs:
        if out.output_type != "error":
            continue
        message = _first_line(out.get("evalue", "")) or out.get("ename", "")
        if message.startswith(f"{check}:"):
            bug = _BUG.search(message)
            return "fail", bug.group(1) if bug else "unknown", message
        if any(message.startswith(f"{other}:") for other in others):
            continue
        if out.get("ename") == "AttentionBug":
            return "fail", "unknown", message
        return "error", out.get("ename", "Exception"), message
    return None


def _rows(job: _Job, timeout: float) -> list[GradeRow]:
    """The rows of a notebook that was run (or not: when none of its cells runs a check, there is nothing to run)."""
    seconds = round(job.run.seconds, 1) if job.run else 0.0
    return [GradeRow(job.student, job.chapter.name, expected.exercise, expected.check,
                     *_status(expected, index, job, timeout), seconds)
            for expected, index in zip(job.chapter.checks, job.matched, strict=True)]


def _status(expected: _Expected, index: int | None, job: _Job, timeout: float) -> tuple[str, str, str]:
    """``(status, bug, detail)`` of an expected check, matched to the cell ``index`` of the submission (or None)."""
    run = job.run
    if index is None or run is None:
        return "missing", "", f"no check cell calls {expected.check} in exercise {expected.exercise}"
    others = {e.check for e, i in job.cells if i == index and e.check != expected.check}
    outcome = _outcome(expected.check, job.nb.cells[index], others)
    if outcome is not None:
        return outcome
    if index in run.executed:
        return "missing", "", f"the check cell ran but printed nothing from {expected.check}"
    if run.timed_out:
        return "timeout", "", f"the notebook ran past the time limit ({timeout:g} s) before this check"
    if run.error is not None:
        return "error", type(run.error).__name__, _first_line(f"the notebook stopped before this check: {run.error}")
    return "missing", "", "the check cell did not run (empty, or tagged to be skipped)"


def _plan(student: str, path: Path, submissions: Path, chapters: Path, known: Sequence[_Chapter],
          graded: dict[str, str]) -> _Job | list[GradeRow]:
    """What to do with one submitted notebook: a job to run, or its rows when there is nothing to run.

    ``graded`` (chapter -> notebook) is updated.
    """
    shown = path.relative_to(submissions).as_posix()
    try:
        nb, unreadable = _read(path), None
    except Exception as error:  # noqa: BLE001 (a broken submission is reported in its rows)
        nb, unreadable = None, error
    chapter = _match_chapter(path, nb, known)

    def note(chapter_name: str, bug: str, detail: str) -> list[GradeRow]:
        return [GradeRow(student, chapter_name, "", "", "error", bug, _first_line(detail), 0.0)]

    if chapter is None:
        why = (f"cannot be read ({type(unreadable).__name__}: {unreadable})" if nb is None else
               f"matches no chapter in {chapters}, by file name or by its title {_title(nb)!r}")
        return note("", "unknown-chapter", f"{shown} {why}")
    if chapter.name in graded:
        return note(chapter.name, "duplicate",
                    f"{shown} is a second notebook of {chapter.name}; graded: {graded[chapter.name]}")
    graded[chapter.name] = shown
    if not chapter.checks:
        return note(chapter.name, "no-checks",
                    f"{chapter.path.name} has no {CHECK_TAG} cell after its first exercise: nothing to grade")
    if nb is None:
        return [GradeRow(student, chapter.name, e.exercise, e.check, "error", type(unreadable).__name__,
                         _first_line(f"{shown} cannot be read: {unreadable}"), 0.0) for e in chapter.checks]
    tagged = _check_calls(nb, tagged_only=True)
    # An editor that drops cell tags drops all of them: then every cell that calls a check is a check cell.
    cells = tagged if tagged else _check_calls(nb, tagged_only=False)
    queues: dict[_Expected, list[int]] = defaultdict(list)
    for expected, index in cells:
        queues[expected].append(index)
    matched = [queues[expected].pop(0) if queues[expected] else None for expected in chapter.checks]
    _clear_outputs(nb)  # only what the run prints counts, and a class's saved figures need not wait in memory
    return _Job(student, shown, chapter, nb, cells, matched)


async def _run_jobs(jobs: Sequence[_Job], folder: Path, timeout: float, kernel_name: str, parallel: int,
                    progress: Callable[[str], None] | None) -> None:
    """Run the jobs' notebooks, ``parallel`` at a time, each in its own folder (``folder / job.shown``'s)."""
    slots = asyncio.Semaphore(parallel)

    async def run(job: _Job) -> None:
        async with slots:
            job.run = await _execute(job.nb, (folder / job.shown).parent, timeout, kernel_name)
        job.rows = _rows(job, timeout)
        _clear_outputs(job.nb)
        if progress is not None:
            passed = sum(row.status == "pass" for row in job.rows)
            progress(f"{job.shown}: {passed}/{len(job.rows)} checks passed ({job.run.seconds:.1f} s)")

    await asyncio.gather(*(run(job) for job in jobs))


# --------------------------------------------------------------------------------------------------------------------
# The public functions


def _default_chapters() -> Path | None:
    """The repository's notebooks/ when attn_utils is used from its repository, else None."""
    folder = ROOT / "notebooks"
    return folder if folder.is_dir() and (ROOT / "pyproject.toml").is_file() else None


def grade(
    submissions: Path | str,
    chapters: Path | str | None = None,
    *,
    timeout: float = 300.0,
    kernel_name: str = "python3",
    jobs: int = 1,
    progress: Callable[[str], None] | None = None,
) -> list[GradeRow]:
    """Run every submitted notebook and grade its clinic checks against the instructor's chapters.

    Args:
        submissions: a folder with one folder per student, ``SUBMISSIONS/<student>/<chapter>.ipynb`` (notebooks in
            subfolders of a student's folder count too; hidden files and folders do not).
        chapters: the folder of the instructor's chapters; by default the repository's ``notebooks/`` when attn_utils
            runs from its repository (an installed attn_utils has no default).
        timeout: seconds for each notebook as a whole, kernel start included, counted on the clock (notebooks that
            share the CPU cores take longer).
        kernel_name: the Jupyter kernel that runs the notebooks; it must import attn_utils.
        jobs: how many notebooks run at the same time, each in its own kernel (each kernel holds torch: a few hundred
            MB). With more jobs than CPU cores, the notebooks share them and each one takes longer.
        progress: called with one line for each notebook (e.g. ``print``), or None.
    Returns:
        the rows, one per student, chapter and expected check (and one per notebook that could not be graded),
        students in sorted order, then chapters, then the chapter's checks in order.
    Raises:
        GradingError: a folder is missing or holds no notebooks, a notebook lies directly in ``submissions``, there is
            no default ``chapters``, ``timeout`` is not a positive number of seconds or ``jobs`` not a positive
            integer.
    """
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise GradingError("timeout", f"expected a positive number of seconds, got {timeout!r}")
    if not (isinstance(jobs, int) and not isinstance(jobs, bool) and jobs >= 1):
        raise GradingError("jobs", f"expected a positive number of notebooks at a time, got {jobs!r}")
    if chapters is None:
        chapters = _default_chapters()
        if chapters is None:
            raise GradingError("chapters", "attn_utils is installed outside the course repository, so there is no "
                                           "default: name the folder of the instructor's chapters (--chapters)")
    submissions, chapters = Path(submissions), Path(chapters)
    known = _load_chapters(chapters)
    found = _find_submissions(submissions)

    planned: list[_Job | list[GradeRow]] = []
    for student, paths in found.items():
        if not paths:
            planned.append([GradeRow(student, "", "", "", "missing", "", f"no notebook in {student}/", 0.0)])
        graded: dict[str, str] = {}  # chapter -> the notebook graded for it
        # A file named after its chapter goes first, then the shallower one: it is the one graded when a student
        # sent two notebooks of a chapter.
        for path in sorted(paths, key=lambda p: (not any(c.path.name == p.name for c in known), len(p.parts), p)):
            planned.append(_plan(student, path, submissions, chapters, known, graded))
    # Nothing to learn from running a notebook none of whose cells runs a check: all its checks are missing.
    to_run = [job for job in planned if isinstance(job, _Job) and job.matched.count(None) < len(job.matched)]
    if progress is not None:
        for item in planned:
            if isinstance(item, list) and item[0].check:
                progress(f"{item[0].student}: {item[0].chapter}: 0/{len(item)} checks passed ({item[0].bug})")
            elif isinstance(item, list):
                progress(f"{item[0].student}: not graded: {item[0].detail}")
            elif item not in to_run:
                progress(f"{item.shown}: 0/{len(item.matched)} checks passed (no check cell: not run)")
    if to_run:
        _run_sync(lambda: _run_jobs(to_run, submissions, timeout, kernel_name, jobs, progress))
    rows = [row for item in planned for row in (
        (item.rows if item.rows is not None else _rows(item, timeout)) if isinstance(item, _Job) else item)]
    order = {name: i for i, name in enumerate(c.name for c in known)}
    return sorted(rows, key=lambda r: (r.student, order.get(r.chapter, -1)))  # stable: checks keep their order


def write_csv(rows: Iterable[GradeRow], path: Path | str) -> None:
    """Write the rows as a CSV with the header :data:`COLUMNS` (``seconds`` with one decimal)."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        for row in rows:
            *fields, seconds = astuple(row)
            writer.writerow([*fields, f"{seconds:.1f}"])


def summary(rows: Sequence[GradeRow]) -> str:
    """A short table, one line per student: the checks passed out of those expected, then any notebook not graded.

    >>> print(summary([GradeRow("alice", "03", "ex-1", "check_causal_mask", "pass", "", "", 1.0),
    ...                GradeRow("bob", "03", "ex-1", "check_causal_mask", "fail", "causal-leak", "", 1.0)]))
    student  passed  total
    alice         1      1
    bob           0      1
    1 of 2 checks passed
    """
    students = sorted({r.student for r in rows})
    passed = Counter(r.student for r in rows if r.check and r.status == "pass")
    total = Counter(r.student for r in rows if r.check)
    width = max([len("student"), *map(len, students)])
    lines = [f"{'student':<{width}}  passed  total"]
    lines += [f"{s:<{width}}  {passed[s]:>6}  {total[s]:>5}" for s in students]
    lines.append(f"{sum(passed.values())} of {sum(total.values())} checks passed")
    lines += [f"not graded: {r.student}: {r.detail}" for r in rows if not r.check]
    return "\n".join(lines)


CLI_NAMES = {"submissions": "SUBMISSIONS", "chapters": "--chapters", "timeout": "--timeout", "jobs": "--jobs"}
"""The command line's name of each argument of :func:`grade`, for the error messages of :func:`main`."""


def main(argv: Sequence[str] | None = None) -> int:
    """The command ``attn-grade`` (also ``python -m attn_utils.grading``); returns the exit status.

    0 when the grading ran to the end, whatever the students' results; 2, with a message that names the argument,
    when it cannot start.
    """
    parser = argparse.ArgumentParser(
        prog="attn-grade",
        description="Run each submitted notebook (SUBMISSIONS/<student>/<chapter>.ipynb) and grade its clinic checks "
                    "against the instructor's chapters; one CSV row per student, chapter and expected check. "
                    "Student code is untrusted: run this in a container or a JupyterHub user's server.",
    )
    parser.add_argument("submissions", metavar="SUBMISSIONS", type=Path, help="one folder per student")
    parser.add_argument("-o", "--output", type=Path, default=Path("grades.csv"), help="the CSV (default: grades.csv)")
    parser.add_argument("--chapters", type=Path, default=None,
                        help="the instructor's chapters (default: the repository's notebooks/, when run from it)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per notebook (default: 300)")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="notebooks run at the same time (default: 1)")
    parser.add_argument("--kernel", default="python3", help="the Jupyter kernel to run them (default: python3)")
    args = parser.parse_args(argv)
    try:
        rows = grade(args.submissions, args.chapters, timeout=args.timeout, kernel_name=args.kernel, jobs=args.jobs,
                     progress=lambda line: print(line, file=sys.stderr, flush=True))
    except GradingError as error:
        print(f"{parser.prog}: error: {CLI_NAMES.get(error.argument, error.argument)}: {error.message}",
              file=sys.stderr)
        return 2
    write_csv(rows, args.output)
    print(summary(rows))
    print(f"{len(rows)} rows written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
