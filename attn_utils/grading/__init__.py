"""Grading a class's notebooks: each submitted chapter is run in a sandbox, each of its clinic checks is run by a
process that runs no student code, and the results become a CSV.

Students work in the student versions of the chapters (``scripts/make_student_versions.py``), fill in the exercises
and submit their notebooks, one folder per student::

    submissions/
        alice/03_attention_scoring.ipynb
        alice/mysolution.py                  # a helper module next to the notebook works as in the notebook
        bob/03_attention_scoring.ipynb

Then one command grades them all (``pip install "attn_utils[grading]"``, and bubblewrap: ``apt-get install
bubblewrap``)::

    attn-grade submissions/ -o grades.csv --chapters notebooks/ [--timeout 300] [-j 4] [--resume] [--shard 0/8]
    attn-grade merge grades.csv part-0.csv part-1.csv ...       # the shards' CSVs, combined
    python -m attn_utils.grading submissions/ -o grades.csv    # the same; in the repository --chapters defaults
                                                               # to its notebooks/

It writes one row per student, chapter and expected check (see ``COLUMNS`` and ``STATUSES``), and prints
each student's passed checks out of the total. The package's modules: ``collect`` (chapters, submissions, the plan),
``sandbox`` and ``_launch`` (bubblewrap), ``run`` (kernels and the check runner), ``serve`` (the student's side of
a check, in the kernel), ``verdict`` (the clinic's side, in a process of its own), ``wire`` (the data between them),
``report`` (the CSV) and ``cli``.

**What is expected comes from the instructor's chapter**, never from the submission: every code cell tagged
``clinic-check`` after the chapter's first ``{exercise-start}``, known by the label of the exercise it follows and by
the check it calls, with the arguments the chapter passes to it. A submission's check cells are matched to these by
(exercise label, check name), in order; a check that a student deleted is ``missing``; a check cell that does not
parse is an ``error`` whose detail says which cell and line. **Which chapter a notebook is** is read from its file
name, else from its title; a notebook that is neither gets an ``error`` row ``unknown-chapter``, a second notebook of
a chapter ``duplicate``, a chapter without checks ``no-checks``, a student folder without notebooks a ``missing``
row, and a notebook (or a student's folder) that is a symbolic link or not a regular file ``not-a-file``: it is
never opened.

**How a notebook runs.** Top to bottom in a fresh kernel with ``allow_errors=True`` and at most ``timeout`` seconds
for the whole notebook, its checks included; the outputs a student saved are cleared first. ``jobs`` notebooks run at
a time. ``--resume`` keeps the rows already in the CSV (written as each notebook finishes) and runs only the notebooks
it lacks; a notebook during which the grader itself stopped (its row ``grader-stopped`` is written before it runs) is
run again once, alone, after the others (a classmate graded beside the notebook that stopped the grader gets its
grade), and if the grader stops during that run too, its row ``grader-stopped-twice`` is kept. ``--shard I/N``
grades only the students whose folder name hashes to ``I`` of ``N`` (:func:`shard_of`) and ``attn-grade merge``
combines the shards' CSVs (:func:`merge`).

**A verdict no student code can touch.** Right after a check cell has run, the kernel evaluates the check's
arguments (the chapter's) in the notebook's namespace and serves them: the clinic's check runs in the verdict
process (``attn_utils/grading/verdict.py``), which calls the student's function through a proxy, each call sent to
the kernel with its inputs as data and answered with the outputs as data (tensors as dtype, shape and raw bytes;
never pickle). The verdict process imports only torch and the clinic and runs in a sandbox of its own, as another
user, so a printed pass, a patched clinic or torch in the kernel, a frame walk, a profile hook or a forged results
file change nothing; a function that computes the right outputs passes (also one that calls the package's
reference: read the code of a submission before a grade that counts).

**One notebook, one row.** Whatever goes wrong while one notebook is read, analysed, run or checked (malformed JSON,
a recursion, huge outputs, a kernel that dies or never answers, a time-out) becomes that notebook's rows; the class
goes on. No output of a student is parsed by more than a linear scan. Of a notebook's outputs the grader keeps at most
16 MiB (``OUTPUT_BYTES``).

**The sandbox** (:class:`Sandbox`; Linux, bubblewrap). Each kernel and each verdict process runs in bubblewrap, the
sandbox of Flatpak: only ``/usr`` (with ``/lib``, ``/bin``), a few files of ``/etc``, the Python, the virtual
environment and the package, all read-only, and the notebook's scratch copy (a copy of the student's folder: the
submissions and the other students are not there) writable; a private ``/tmp`` and ``/dev/shm``, a fresh ``/proc``
(no other process visible), no network, no capabilities, its own session, and it dies with the grader. The limits
of ``--memory-mb``, ``--cpu-seconds``, ``--processes``, ``--file-mb``, ``--open-files`` and ``--tmp-mb`` hold, and the
environment is scrubbed. Where cgroups can be made (as root), each notebook's whole process tree is held together:
at most ``--processes`` tasks, ``--memory-mb`` of memory (its memory files included) and one process's share of the
CPU, however many sessions it starts, and it is killed as a whole when the notebook ends; its processes are the first
that the system's out-of-memory killer picks. ``/tmp``, ``/dev/shm`` and (as root) the working folder are memory
file systems of ``--tmp-mb`` MiB each (the working folder holds at most 20,000 files). A student's folder of more than
10,000 files or 256 MiB is not copied (an ``error`` ``too-many-files``, at once, off the grader's event loop); a
message from a kernel larger than 128 MiB is never read, and a notebook that sends one, or more than 256 MiB of
output or widget messages in all, is stopped (``too-much-output``); widgets' state is not kept. When the grader
runs as root, each process runs as a user that owns nothing (``--uid``: worker ``k``'s kernels ``UID+2k``, its
verdicts ``UID+2k+1``); otherwise as the grader's user, in bubblewrap's user namespace (it still sees only what is
bound). **If the sandbox cannot be made** (no ``bwrap``, no user namespaces), the grading does not start: one line
says what is missing and how to get it. ``--no-sandbox`` (unsafe) is for a machine that is itself a throwaway container.

nbclient and nbformat are imported only when a notebook is read or run, so ``import attn_utils`` does not need
them.
"""

from __future__ import annotations

import math
import shutil
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

from .collect import (
    CHECK_TAG,
    COLUMNS,
    DETAIL_CHARS,
    STATUSES,
    GradeRow,
    GradingError,
    Job,
    find_submissions,
    load_chapters,
    plan,
)
from .report import merge, read_csv, safe_cell, shard_of, summary, write_csv
from .run import OUTPUT_BYTES, run_jobs, run_sync, scratch_base
from .sandbox import Sandbox

__all__ = ["CHECK_TAG", "COLUMNS", "STATUSES", "DETAIL_CHARS", "OUTPUT_BYTES", "GradeRow", "GradingError", "Sandbox",
           "grade", "write_csv", "read_csv", "safe_cell", "summary", "shard_of", "merge", "main"]

ROOT = Path(__file__).resolve().parents[2]
STOPPED = "grader-stopped"
"""The bug of the row written before a notebook runs: left alone in the CSV, it says the grader stopped there, and
``--resume`` runs the notebook again, alone."""
STOPPED_TWICE = "grader-stopped-twice"
"""The bug of the row written before a notebook runs again, alone, after the grader stopped during it: left alone in
the CSV, it says the grader stopped there twice, and ``--resume`` keeps it (never a third run)."""


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
    sandbox: Sandbox | None = None,
    previous: Sequence[GradeRow] = (),
    done: Callable[[list[GradeRow]], None] | None = None,
    started: Callable[[list[GradeRow]], None] | None = None,
    shard: tuple[int, int] | None = None,
    max_notebook_mb: int = 64,
) -> list[GradeRow]:
    """Run every submitted notebook and grade its clinic checks against the instructor's chapters.

    Args:
        submissions: a folder with one folder per student, ``SUBMISSIONS/<student>/<chapter>.ipynb``.
        chapters: the folder of the instructor's chapters; by default the repository's ``notebooks/`` when attn_utils
            runs from its repository.
        timeout: seconds for each notebook as a whole, kernel start and checks included, on the clock.
        kernel_name: the Jupyter kernel that runs the notebooks; it must import attn_utils.
        jobs: how many notebooks run at the same time, each in its own kernel.
        progress: called with one line for each notebook (e.g. ``print``), or None.
        sandbox: how the kernels are confined (:class:`Sandbox`; by default its defaults).
        previous: rows of an earlier grading of the same class (:func:`read_csv`): a notebook whose student and
            chapter have rows there is not run again, and its rows are kept (a lone ``grader-stopped-twice`` row
            too); one with a lone ``grader-stopped`` row runs again, alone, after the others.
        done: called with each notebook's rows as soon as they are known.
        started: called, before a notebook runs, with its ``grader-stopped`` row (``grader-stopped-twice`` when it
            runs again; to save it: ``--resume`` then never runs a notebook during which the grader stopped twice).
        shard: ``(i, n)`` grades only the students whose :func:`shard_of` is ``i`` of ``n``.
        max_notebook_mb: a submitted notebook larger than this many MiB is not read (bug ``too-large``).
    Returns:
        the rows, students in sorted order, then chapters, then the chapter's checks in order.
    Raises:
        GradingError: a folder is missing or holds no notebooks, a notebook lies directly in ``submissions``, there is
            no default ``chapters``, an argument is out of range, or the sandbox cannot be made here (argument
            ``"sandbox"``: the message says what is missing).
    """
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise GradingError("timeout", f"expected a positive number of seconds, got {timeout!r}")
    if not (isinstance(jobs, int) and not isinstance(jobs, bool) and jobs >= 1):
        raise GradingError("jobs", f"expected a positive number of notebooks at a time, got {jobs!r}")
    for name in ("memory_mb", "cpu_seconds", "processes", "file_mb", "open_files", "tmp_mb", "max_notebook_mb"):
        value = max_notebook_mb if name == "max_notebook_mb" else getattr(sandbox, name, 1)
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            raise GradingError(name, f"expected a positive integer, got {value!r}")
    if shard is not None and not (isinstance(shard, tuple) and len(shard) == 2
                                  and all(isinstance(k, int) and not isinstance(k, bool) for k in shard)
                                  and 0 <= shard[0] < shard[1]):
        raise GradingError("shard", f"expected (i, n) with 0 <= i < n, got {shard!r}")
    if chapters is None:
        chapters = _default_chapters()
        if chapters is None:
            raise GradingError("chapters", "attn_utils is installed outside the course repository, so there is no "
                                           "default: name the folder of the instructor's chapters (--chapters)")
    submissions, chapters = Path(submissions), Path(chapters)
    known = load_chapters(chapters)
    found, refused = find_submissions(submissions)
    if shard is not None:
        found = {student: paths for student, paths in found.items() if shard_of(student, shard[1]) == shard[0]}
        refused = [(student, why) for student, why in refused if shard_of(student, shard[1]) == shard[0]]

    planned: list[Job | list[GradeRow]] = [[GradeRow(student, "", "", "", "error", "not-a-file", why, 0.0)]
                                           for student, why in refused]
    for student, paths in found.items():
        if not paths:
            planned.append([GradeRow(student, "", "", "", "missing", "", f"no notebook in {student}/", 0.0)])
        graded: dict[str, str] = {}  # chapter -> the notebook graded for it
        for path in sorted(paths, key=lambda p: (not any(c.path.name == p.name for c in known), len(p.parts), p)):
            try:
                planned.append(plan(student, path, submissions, chapters, known, graded, max_notebook_mb))
            except Exception as error:  # noqa: BLE001 (one notebook, one row)
                planned.append([GradeRow(student, "", "", "", "error", type(error).__name__,
                                         f"{path.relative_to(submissions).as_posix()} could not be read", 0.0)])
    kept: dict[tuple[str, str], list[GradeRow]] = defaultdict(list)
    twice: dict[tuple[str, str], GradeRow] = {}
    once: set[tuple[str, str]] = set()
    for row in previous:
        if row.chapter and row.check:
            kept[row.student, row.chapter].append(row)
        elif row.chapter and row.bug == STOPPED_TWICE:
            twice[row.student, row.chapter] = row
        elif row.chapter and row.bug == STOPPED:
            once.add((row.student, row.chapter))
    for key, row in twice.items():
        if key not in kept:
            kept[key] = [row]
    again = {key for key in once if key not in kept}
    planned = [kept[item.student, item.chapter.name] if isinstance(item, Job) and (item.student, item.chapter.name)
               in kept else item for item in planned]
    to_run = [job for job in planned if isinstance(job, Job) and job.matched.count(None) < len(job.matched)]
    alone = [job for job in to_run if (job.student, job.chapter.name) in again]  # after the others, one at a time
    to_run = [job for job in to_run if job not in alone]
    if progress is not None:
        resumed = {id(rows) for rows in kept.values()}
        for item in planned:
            if isinstance(item, list) and id(item) in resumed:
                progress(f"{item[0].student}: {item[0].chapter}: graded before (kept from the CSV)")
            elif isinstance(item, list) and item[0].check:
                progress(f"{item[0].student}: {item[0].chapter}: 0/{len(item)} checks passed ({item[0].bug})")
            elif isinstance(item, list):
                progress(f"{item[0].student}: not graded: {item[0].detail}")
            elif item in alone:
                progress(f"{item.shown}: the grader stopped while it ran: run again, alone, after the others")
            elif item not in to_run:
                progress(f"{item.shown}: 0/{len(item.matched)} checks passed (no check cell: not run)")
    if sandbox is None:
        sandbox = Sandbox()
    if to_run or alone:
        base = scratch_base()
        try:
            sandbox.check(base)
            if progress is not None:
                for line in sandbox.warnings():
                    progress(line)

            def begin(job: Job) -> None:
                if started is None:
                    return
                if job in alone:
                    started([GradeRow(job.student, job.chapter.name, "", "", "error", STOPPED_TWICE,
                                      f"the grader stopped twice while it ran {job.shown}, the second time alone: "
                                      "--resume does not run it again", 0.0)])
                else:
                    started([GradeRow(job.student, job.chapter.name, "", "", "error", STOPPED,
                                      f"the grader stopped while it ran {job.shown}: --resume runs it again, alone",
                                      0.0)])

            async def both() -> None:
                await run_jobs(to_run, submissions, timeout, kernel_name, jobs, progress, sandbox, base, done, begin)
                await run_jobs(alone, submissions, timeout, kernel_name, 1, progress, sandbox, base, done, begin,
                               len(to_run))

            run_sync(both)
        finally:
            shutil.rmtree(base, ignore_errors=True)
    from .run import rows_of

    rows = [row for item in planned for row in (
        (item.rows if item.rows is not None else rows_of(item, timeout)) if isinstance(item, Job) else item)]
    order = {name: i for i, name in enumerate(c.name for c in known)}
    return sorted(rows, key=lambda r: (r.student, order.get(r.chapter, -1)))  # stable: checks keep their order


from .cli import main  # noqa: E402 (the command line uses grade)
