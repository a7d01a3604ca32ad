"""Grading a class's notebooks: each submitted chapter is run, and what its clinic checks said becomes a CSV.

Students work in the student versions of the chapters (``scripts/make_student_versions.py``), fill in the exercises
and submit their notebooks, one folder per student::

    submissions/
        alice/03_attention_scoring.ipynb
        alice/05_multihead_attention.ipynb
        bob/03_attention_scoring.ipynb

Then one command grades them all (``pip install "attn_utils[grading]"`` installs what it needs)::

    attn-grade submissions/ -o grades.csv --chapters notebooks/ [--timeout 300] [-j 4] [--resume] [--shard 0/8]
    attn-grade merge grades.csv part-0.csv part-1.csv ...       # the shards' CSVs, combined
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

**How a notebook runs.** Each one runs top to bottom in a fresh kernel with ``allow_errors=True`` (a failing cell
does not stop the ones after it) and at most ``timeout`` seconds for the whole notebook, kernel start included (a few
more if its kernel stops answering); after that its kernel is shut down, and the checks it had not reached are
``timeout``. The outputs a student saved are cleared first: only what the run prints counts. ``jobs`` notebooks run
at a time (``-j 4``; one by default), each in its own kernel; the time limit counts on the clock, so notebooks that
share too few cores take longer and may run out of it. ``--resume`` keeps the rows already in the CSV (which is
written as each notebook finishes) and runs only the notebooks it lacks. ``--shard I/N`` grades only the students
whose folder name hashes to ``I`` of ``N`` (:func:`shard_of`), so that the ``N`` tasks of any batch system (a Slurm
array, a Kubernetes Indexed Job, GNU parallel) grade the class between them, each student once, and
``attn-grade merge OUT.csv IN1.csv IN2.csv ...`` (:func:`merge`) combines their CSVs, refusing a header of another
kind or a row that two of them hold.

**Broken and oversized submissions.** A notebook that is not JSON gets an ``error`` row per check (the bug is the
reader's exception, ``NotJSONError``); one larger than ``--max-notebook-mb`` (64 MiB) is not read at all, only its
size is looked at (bug ``too-large``); a cell that calls ``sys.exit()`` ends with an error as any other (the cells
after it run); a kernel that dies (``os._exit``, a signal) leaves the checks it had not reached ``error`` with the
bug ``DeadKernelError``; of a notebook's outputs the grader keeps at most 16 MiB (``OUTPUT_BYTES``), and its rows
say when it cut them.

**The sandbox** (:class:`Sandbox`, ``attn_utils/_sandbox.py``; Linux). Each kernel, and each process that repeats
its checks, runs

- in a **scratch copy** of the folder the notebook was submitted in (deleted afterwards), with ``HOME`` there: the
  grader writes nothing in the submissions folder;
- with a **scrubbed environment**: ``PATH``, the locale, the virtual environment, the thread counts and
  ``JUPYTER_PATH`` (``_sandbox.KEEP``); no token, key or cloud variable of the grader's;
- under **limits** (``setrlimit``, inherited by every child): ``--memory-mb`` 8192 MiB of address space (torch
  reserves far more address space than it touches: run under this limit with one thread, the thirteen chapters peak at
  1.5 to 2.3 GiB of it (chapter 11, with its pretrained model, the most) and 0.4 to 0.9 GiB resident, so 8 GiB leaves a
  wide margin, and a cell that asks for 50 GB gets a ``MemoryError``),
  ``--cpu-seconds`` 1200 per process (all threads count: well above the 300 s clock limit on a few cores),
  ``--processes`` 512 processes and threads, ``--file-mb`` 256 MiB per written file, ``--open-files`` 1024;
- in **namespaces of its own** where the system allows ``unshare`` (``--allow-network`` lifts the first): a network
  namespace with no interface up, so no connection leaves it, not even to 127.0.0.1; a process namespace whose first
  process is the kernel, so that when the kernel ends, or is killed at the time limit, every process it started ends
  too, also one that left its process group; a mount namespace in which the submissions folder is bind-mounted
  read-only (``EROFS`` for any write there, also by the grader's user); and, unless it runs as a user of its own, a
  user namespace (no
  capabilities: a kernel of a root grader cannot override file permissions, and the process limit counts its own
  processes, not the grader's);
- in a **pids cgroup** of its own where one can be made (cgroup v2, else v1; ``pids.max`` = ``--processes``): the
  process limit that also holds for root, and the way every process of the notebook is killed when it is done;
- as **another user** when the grader runs as root: uid ``--uid`` (61000) plus the worker's number, so that kernels
  running side by side do not share a process count; possible only where that user can run the grader's Python
  (not when it lives in ``/root``).

What the machine did not allow is printed before the grading starts (``sandbox: ...``), and every row's ``sandbox``
column says what held, e.g. ``limits,no-network,own-processes,read-only-submissions,pids-cgroup,grader-user``.
``--no-sandbox`` turns it all off, for a machine that is itself a throwaway container.

**Results that cannot be faked by printing.** The status of a check whose cell ran is not read from what the notebook
printed: after the notebook, a fresh process in the same sandbox (``attn_utils/_grade_check.py``) imports torch and
the clinic before any student code, keeps the check functions, takes from the submission only the cells that define
what the check cell passes to the check (and the cells those need), runs them, puts back every module as it was
(undoing a patched clinic, torch or ``print``), calls the check itself and sends the result, with a random nonce, on a
pipe the student's code does not write to by printing. So a printed ``passed`` line, a ``try``/``except`` around the
check, a replaced check function, a patched comparison inside the clinic, a forged results file or a line written to
every open pipe count for nothing: the row says ``fail`` and its detail ``printed a pass, but in a fresh process: ...``.

.. warning::
   **What still gets through.** The student's function itself runs in the process that checks it, so a function
   written to cheat (one that, when called, patches the clinic or torch, or searches the process's memory for the
   nonce) can still forge a pass, and a function that calls the package's reference instead of computing passes as
   it would in the notebook. Read the code of a submission before a grade that counts. Where the sandbox is
   incomplete (see the ``sandbox`` column), a kernel that runs as the grader's user can read what that user can and,
   without a mount namespace (no ``read-only-submissions``), write in the submissions folder and wherever that user
   may; without namespaces it can reach the network. The grader keeps
   at most ``OUTPUT_BYTES`` (16 MiB) of a notebook's outputs, but receives each output message whole: one print of
   gigabytes costs the grader that much memory for a moment. Run the grading in a container or a JupyterHub user's
   server that holds nothing else all the same.

nbclient and nbformat are imported only when a notebook is read or run, so ``import attn_utils`` does not need
them.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import atexit
import contextlib
import csv
import hashlib
import json
import logging
import math
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import astuple, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from jupyter_client.manager import AsyncKernelManager
    from nbformat import NotebookNode

__all__ = ["CHECK_TAG", "COLUMNS", "STATUSES", "GradeRow", "GradingError", "Sandbox", "grade", "write_csv",
           "read_csv", "summary", "shard_of", "merge", "main"]

CHECK_TAG = "clinic-check"
"""The cell tag of a clinic check cell, in the chapters and in the student versions."""

COLUMNS = ("student", "chapter", "exercise", "check", "status", "bug", "detail", "seconds", "sandbox")
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
OUTPUT_BYTES = 16 << 20
"""The most of a notebook's outputs (text, images, tracebacks) that the grader keeps while it runs: 16 MiB, ten times
what a chapter's own outputs weigh. Past it, printed text is cut and other outputs dropped as they arrive (each
message is still received whole, one at a time), and every row of the notebook says so; the checks' results do not
depend on it (they come from the fresh process)."""

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
        sandbox: how the notebook's code was confined (:meth:`Sandbox.describe`), e.g.
            ``limits,no-network,own-processes,own-user``; a missing word is a protection this machine did not allow.
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


@dataclass
class Sandbox:
    """How each notebook's kernel, and each fresh process that checks its functions, is confined.

    Attributes:
        memory_mb: the address space of each process, in MiB (``RLIMIT_AS``; torch reserves far more address space
            than it touches: the chapters peak at 1.5 to 2.3 GiB of it, 0.4 to 0.9 GiB resident, measured).
        cpu_seconds: CPU seconds of each process (``RLIMIT_CPU``); all its threads count.
        processes: processes and threads: the ``pids.max`` of a cgroup of the notebook's own where one can be made,
            and ``RLIMIT_NPROC`` (counted for the kernel alone when it runs as a user of its own or in a user
            namespace, else on top of what the grader's user runs already; root is exempt from it, so for a kernel
            that stays root only the cgroup holds).
        file_mb: the largest file a kernel may write, in MiB (``RLIMIT_FSIZE``).
        open_files: open files per process (``RLIMIT_NOFILE``).
        network: let the kernels reach the network (by default they get a network namespace of their own, without
            one).
        uid: when the grader runs as root, kernels run as ``uid + k`` (``k``: the worker, so that two kernels do not
            share a process count), a user that owns nothing; None: as root.
        enabled: False runs kernels as the grader did before it had a sandbox (no limit, no namespace): for a machine
            that is itself the throwaway sandbox.
    """

    memory_mb: int = 8192
    cpu_seconds: int = 1200
    processes: int = 512
    file_mb: int = 256
    open_files: int = 1024
    network: bool = False
    uid: int | None = 61000
    enabled: bool = True
    found: dict[str, bool] = field(default_factory=dict)  # what the machine allows (filled by grade())
    cgroups: dict[int, Path] = field(default_factory=dict)  # each worker's pids cgroup, while it runs one
    protected: list[Path] = field(default_factory=list)  # read-only to the kernels, where the machine allows it

    def probe(self) -> dict[str, bool]:
        """What this machine allows (``root``, ``user``, ``namespaces``), found once and kept in ``found``."""
        if not self.found:
            if not self.enabled or sys.platform != "linux":
                self.found = {"root": False, "user": False, "namespaces": False, "cgroups": False,
                              "read-only": False}
            else:
                out = subprocess.run([sys.executable, "-I", str(SANDBOX), "--probe", "--uid", str(self.uid or 0),
                                      *_needed_paths()], capture_output=True, text=True, timeout=60, check=False)
                self.found = {k: v == "1" for k, v in (w.split("=") for w in out.stdout.split())}
                if self.uid is None:
                    self.found["user"] = False
                self.found["cgroups"] = _pids_hierarchy() is not None
        return self.found

    def describe(self) -> str:
        """The protections in force, for the CSV's ``sandbox`` column: ``limits``, ``no-network`` (or ``network``:
        allowed; ``network-open``: could not be cut), ``own-processes`` (a process namespace),
        ``read-only-submissions`` (the submissions folder is mounted read-only for the kernels), ``pids-cgroup`` (the
        process limit is a cgroup's), ``own-user`` (or ``root``, ``grader-user``), or ``none``."""
        found = self.probe()
        if not self.enabled or sys.platform != "linux":
            return "none"
        isolated = found.get("namespaces", False)
        words = ["limits", "network" if self.network else "no-network" if isolated else "network-open"]
        if isolated:
            words.append("own-processes")
        if isolated and not self.network and found.get("read-only") and self.protected:
            words.append("read-only-submissions")
        if found.get("cgroups"):
            words.append("pids-cgroup")
        words.append("own-user" if found.get("user") else "root" if found.get("root") and not isolated
                     else "grader-user")
        return ",".join(words)

    def warnings(self) -> list[str]:
        """A line for each protection that this machine did not allow."""
        found, lines = self.probe(), []
        if not self.enabled:
            return ["sandbox: off (--no-sandbox): student code runs with the grader's rights, network and no limits"]
        if sys.platform != "linux":
            return ["sandbox: not on Linux: student code runs with the grader's rights, network and no limits"]
        if not found.get("namespaces"):
            lines.append("sandbox: no namespaces here (unshare is not allowed): kernels can reach the network, and "
                         "a process that leaves its process group may outlive its notebook")
        elif not found.get("read-only") and not self.network and not found.get("user"):
            lines.append("sandbox: no mount namespace here: kernels can write in the submissions folder (they run as "
                         "the grader's user; the grader reads the notebooks before any kernel starts)")
        if found.get("root") and not found.get("user") and not found.get("cgroups"):
            lines.append("sandbox: no process limit holds (root is exempt from RLIMIT_NPROC and no pids cgroup can be "
                         "made): a fork bomb is not stopped")
        if found.get("root") and not found.get("user"):
            lines.append(f"sandbox: kernels cannot run as uid {self.uid} (it cannot run {sys.executable} or read "
                         "the packages): they run as root"
                         + (", without its capabilities, in a user namespace" if found.get("namespaces") else ""))
        return lines

    def launcher(self, slot: int, home: Path, own: Sequence[Path]) -> list[str]:
        """The command that starts a kernel (or a check's process) in the sandbox, before the kernel's own."""
        if not self.enabled or sys.platform != "linux":
            return []
        found = self.probe()
        cgroup = self.cgroups.get(slot)
        cmd = [sys.executable, "-I", str(SANDBOX), *(["--cgroup", str(cgroup)] if cgroup else []),
               "--memory-mb", str(self.memory_mb), "--cpu-seconds",
               str(self.cpu_seconds), "--processes", str(self.processes), "--file-mb", str(self.file_mb),
               "--open-files", str(self.open_files), "--home", str(home)]
        if found.get("user") and self.uid is not None:
            cmd += ["--uid", str(self.uid + slot)] + [a for path in own for a in ("--own", str(path))]
        if found.get("namespaces") and not self.network:
            cmd.append("--isolate")
            if found.get("read-only"):
                cmd += [a for path in self.protected for a in ("--read-only", str(path))]
        return [*cmd, "--"]

    def owner(self, slot: int) -> int | None:
        """The uid that the kernels of worker ``slot`` run as, or None (the grader's)."""
        return self.uid + slot if self.enabled and self.probe().get("user") and self.uid is not None else None


SANDBOX = Path(__file__).resolve().with_name("_sandbox.py")


def _pids_hierarchy() -> Path | None:
    """The folder of this process's cgroup in a hierarchy with the ``pids`` controller (cgroup v2, else v1), where
    a child cgroup can be made; None when there is none or it is not writable."""
    if sys.platform != "linux":
        return None
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
        groups = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    candidates = []
    for line in mounts:
        fields = line.split()
        if len(fields) < 4:
            continue
        if fields[2] == "cgroup2":
            own = next((g.split(":", 2)[2] for g in groups if g.startswith("0::")), None)
            folder = Path(fields[1] + (own or ""))
            with contextlib.suppress(OSError):
                if own is not None and "pids" in (folder / "cgroup.controllers").read_text().split():
                    candidates.insert(0, folder)
        elif fields[2] == "cgroup" and "pids" in fields[3].split(","):
            own = next((g.split(":", 2)[2] for g in groups if ":pids:" in g), None)
            if own is not None:
                candidates.append(Path(fields[1] + own))
    for folder in candidates:
        probe = folder / f"attn-grade-probe-{os.getpid()}"
        try:
            probe.mkdir()
            probe.rmdir()
            return folder
        except OSError:
            continue
    return None


def _make_cgroup(name: str, processes: int) -> Path | None:
    """A child cgroup of at most ``processes`` tasks, or None where none can be made."""
    parent = _pids_hierarchy()
    if parent is None:
        return None
    folder = parent / name
    try:
        folder.mkdir()
        (folder / "pids.max").write_text(str(processes))
        return folder
    except OSError:
        _end_cgroup(folder)
        return None


def _end_cgroup(folder: Path | None) -> None:
    """Kill every process in the cgroup and remove it."""
    if folder is None:
        return
    for _ in range(50):
        with contextlib.suppress(OSError):
            if (folder / "cgroup.kill").exists():
                (folder / "cgroup.kill").write_text("1")
            for pid in (folder / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    os.kill(int(pid), signal.SIGKILL)
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.05)


def _needed_paths() -> list[str]:
    """What a kernel's user must be able to read: the Python, its standard library, the packages, attn_utils."""
    import sysconfig

    paths = {os.path.realpath(sys.executable), sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
             str(Path(__file__).resolve().parent)}
    return sorted(paths)


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
    cut: int = 0  # bytes of output the grader did not keep (past OUTPUT_BYTES)


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
    verified: dict[int, tuple[str, str, str]] | None = None  # for each check that ran: what the fresh process said
    unverified: str = ""  # why the fresh process said nothing
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


async def _execute(nb: NotebookNode, cwd: Path, timeout: float, kernel_name: str,
                   sandbox: Sandbox | None = None, slot: int = 0) -> _Run:
    """Run ``nb`` in place in a fresh kernel started in ``cwd``, for at most ``timeout`` seconds in all.

    With a ``sandbox``, the kernel starts through its launcher, talks to the grader over Unix sockets beside its
    connection file (in ``cwd``'s parent: a kernel in a network namespace of its own has no TCP to the grader) and
    runs as the ``slot``'s user."""
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
    kept = [0, 0]  # bytes of output kept, and cut
    process_message = client.process_message

    def capped(msg: dict[str, Any], cell: Any, cell_index: int) -> Any:
        """nbclient's handling of each message, with the outputs kept to OUTPUT_BYTES in all."""
        kind, content = msg.get("msg_type"), msg.get("content") or {}
        if kind in ("stream", "display_data", "execute_result", "update_display_data", "error"):
            size = _output_size(content)
            room = max(0, OUTPUT_BYTES - kept[0])
            if size > room:
                kept[1] += size - room
                if kind == "stream" and room:
                    msg = {**msg, "content": {**content, "text": str(content.get("text", ""))[:room]}}
                elif kind == "error":  # its name and first line say how the check cell ended: keep them, short
                    msg = {**msg, "content": {**content, "evalue": str(content.get("evalue", ""))[:DETAIL_CHARS * 4],
                                              "traceback": []}}
                else:
                    return None
                size = min(size, room)
            kept[0] += size
        return process_message(msg, cell, cell_index)

    client.process_message = capped  # type: ignore[method-assign]
    km = client.km = client.create_kernel_manager()  # kept: nbclient forgets it when it cleans up
    if sandbox is not None and sandbox.enabled and sys.platform == "linux":
        scratch = cwd.parent
        km.transport, km.connection_file, km.ip = "ipc", str(scratch / "kernel.json"), str(scratch / "kernel-ipc")
        prefix = sandbox.launcher(slot, cwd, [scratch / "kernel.json"])
        kernel_cmd = km.format_kernel_cmd
        km.format_kernel_cmd = lambda extra_arguments=None: [*prefix, *kernel_cmd(extra_arguments)]
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
    return _Run(time.monotonic() - start, timed_out, error, executed, kept[1])


SCRATCH_PATH_MAX = 60
"""The longest scratch root whose kernels' IPC socket paths still fit a Unix socket's 107 bytes."""


def _output_size(content: dict[str, Any]) -> int:
    """Roughly how many bytes an output message adds to the notebook."""
    if "text" in content:
        return len(content["text"])
    if "evalue" in content:
        return len(str(content.get("evalue", ""))) + sum(len(str(line)) for line in content.get("traceback", []))
    return sum(len(value) if isinstance(value, str) else len(json.dumps(value))
               for value in (content.get("data") or {}).values())


def _clear_outputs(nb: NotebookNode) -> None:
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None


# --------------------------------------------------------------------------------------------------------------------
# Checking the functions again, in a fresh process


def _strip_magics(source: str) -> str:
    """The cell with each line magic or shell line replaced by ``pass`` (at its indentation), for :mod:`ast`."""
    return "\n".join(line[: len(line) - len(line.lstrip())] + "pass" if line.lstrip().startswith(("%", "!"))
                     else line for line in source.splitlines())


def _free_names(tree: ast.AST) -> tuple[set[str], set[str]]:
    """The names read in ``tree`` that are not local to the function or lambda that reads them: those read when the
    cell runs, and those read only when one of its functions is called."""
    used: set[str] = set()
    later: set[str] = set()

    def visit(node: ast.AST, local: frozenset[str], deferred: bool = False) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inner = set(a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg))
            body = node.body if isinstance(node.body, list) else [node.body]
            inner |= {n.id for stmt in body for n in ast.walk(stmt) if isinstance(n, ast.Name)
                      and isinstance(n.ctx, ast.Store)}
            for default in [*node.args.defaults, *node.args.kw_defaults]:
                if default is not None:
                    visit(default, local, deferred)
            for decorator in getattr(node, "decorator_list", []):
                visit(decorator, local, deferred)
            for stmt in body:
                visit(stmt, local | inner, True)
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in local:
            (later if deferred else used).add(node.id)
        for child in ast.iter_child_nodes(node):
            visit(child, local, deferred)

    visit(tree, frozenset())
    return used, later


def _names(source: str) -> tuple[set[str], set[str], set[str]]:
    """The names a cell defines at its top level, those it reads as it runs, and those its functions read."""
    try:
        tree = ast.parse(_strip_magics(source))
    except SyntaxError:
        return set(), set(), set()
    defined: set[str] = set()
    for node in tree.body:
        for sub in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                else [node]:
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(sub.name)
            elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                defined.add(sub.id)
            elif isinstance(sub, (ast.Import, ast.ImportFrom)):
                defined.update((a.asname or a.name).split(".")[0] for a in sub.names)
    return (defined, *_free_names(tree))


def _check_request(nb: NotebookNode, index: int, check: str, occurrence: int) -> dict[str, Any] | None:
    """What the fresh process needs to repeat the ``occurrence``-th call of ``check`` in cell ``index``: the call's
    arguments (as ``(args, kwargs)``) and the cells that define what they name, in order; None if there is no such
    call."""
    try:
        tree = ast.parse(_strip_magics(nb.cells[index].source))
    except SyntaxError:
        return None
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
             and node.func.attr == check]
    if len(calls) <= occurrence:
        return None
    call = calls[occurrence]
    args = ast.Tuple([*call.args], ast.Load())
    kwargs = ast.Dict([k.arg and ast.Constant(k.arg) for k in call.keywords], [k.value for k in call.keywords])
    expression = ast.unparse(ast.Tuple([args, kwargs], ast.Load()))
    # the check cell's own statements other than the calls, as a cell of its own
    rest = [stmt for stmt in tree.body if not any(n is c for n in ast.walk(stmt) for c in calls)]
    sources = {i: cell.source for i, cell in enumerate(nb.cells[:index]) if cell.cell_type == "code"}
    sources[index] = ast.unparse(ast.Module(rest, [])) if rest else ""
    names = {i: _names(source) for i, source in sources.items()}
    chosen: set[int] = set()
    queue = [(name, index + 1) for name in set.union(*_names(expression)[1:])]
    seen: set[tuple[str, int]] = set()
    while queue:
        name, before = queue.pop()
        if (name, before) in seen:
            continue
        seen.add((name, before))
        cell = next((i for i in sorted(names, reverse=True) if i < before and name in names[i][0]), None)
        if cell is not None and cell not in chosen:
            chosen.add(cell)
            # what the cell reads as it runs was defined before it; what its functions read, before the check
            queue += [(used, cell) for used in names[cell][1]] + [(used, index + 1) for used in names[cell][2]]
    return {"check": check, "args": expression, "cells": [sources[i] for i in sorted(chosen)]}


VERIFY_BYTES = 1 << 20
"""The most the grader reads from a fresh process's results pipe."""


def _verify(job: _Job, work: Path, timeout: float, sandbox: Sandbox | None, slot: int) -> None:
    """Repeat each check whose cell ran in a fresh process (``attn_utils._grade_check``); its results go to
    ``job.verified``, or why there are none to ``job.unverified``."""
    requests: dict[int, dict[str, Any]] = {}
    seen: Counter[tuple[int, str]] = Counter()
    for number, (expected, index) in enumerate(zip(job.chapter.checks, job.matched, strict=True)):
        if index is None:
            continue
        occurrence = seen[index, expected.check]
        seen[index, expected.check] += 1
        if job.run is not None and (index in job.run.executed or job.nb.cells[index].outputs):
            request = _check_request(job.nb, index, expected.check, occurrence)
            if request is not None:
                requests[number] = request
    job.verified = {}
    if not requests:
        return
    nonce = secrets.token_hex(16)
    read, write = os.pipe()
    prefix = sandbox.launcher(slot, work, []) if sandbox is not None else []
    command = [*prefix, sys.executable, "-I", "-m", "attn_utils._grade_check"]
    proc = subprocess.Popen(command, cwd=work, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, pass_fds=(write,), start_new_session=True)
    os.close(write)
    chunks: list[bytes] = []

    def drain() -> None:
        with os.fdopen(read, "rb") as pipe:
            total = 0
            while chunk := pipe.read(65536):
                if total < VERIFY_BYTES:
                    chunks.append(chunk[: VERIFY_BYTES - total])
                total += len(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    order = list(requests)
    try:
        assert proc.stdin is not None
        proc.stdin.write((json.dumps({"nonce": nonce, "fd": write, "checks": [requests[n] for n in order]}) + "\n")
                         .encode())
        proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        job.unverified = f"the check in a fresh process ran past the time limit ({timeout:g} s)"
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # with whatever it started (all of it, in its own namespace)
        proc.wait()
    reader.join(timeout=5)
    for line in b"".join(chunks).decode("utf-8", "replace").splitlines():
        try:
            result = json.loads(line)
            if result.get("nonce") != nonce or not 0 <= result["number"] < len(order):
                continue
            number = order[result["number"]]
            job.verified.setdefault(number, (str(result["status"]), str(result["bug"]), str(result["detail"])))
        except (ValueError, KeyError, TypeError):
            continue
    if not job.unverified and len(job.verified) < len(order):
        job.unverified = f"the fresh process that repeats the checks ended early (exit status {proc.returncode})"


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
            # the code ends the first line, which the detail may shorten: read it from the whole line
            bug = _BUG.search(_ANSI.sub("", out.get("evalue", "")).strip().split("\n", 1)[0].strip())
            return "fail", bug.group(1) if bug else "unknown", message
        if any(message.startswith(f"{other}:") for other in others):
            continue
        if out.get("ename") == "AttentionBug":
            return "fail", "unknown", message
        return "error", out.get("ename", "Exception"), message
    return None


def _rows(job: _Job, timeout: float, sandbox: str = "") -> list[GradeRow]:
    """The rows of a notebook that was run (or not: when none of its cells runs a check, there is nothing to run)."""
    seconds = round(job.run.seconds, 1) if job.run else 0.0
    rows = [GradeRow(job.student, job.chapter.name, expected.exercise, expected.check,
                     *_status(number, expected, index, job, timeout), seconds, sandbox)
            for number, (expected, index) in enumerate(zip(job.chapter.checks, job.matched, strict=True))]
    if job.run is not None and job.run.cut:
        note = (f" [outputs cut: the notebook printed {(job.run.cut + OUTPUT_BYTES) / 1e6:.0f} MB, the grader kept "
                f"{OUTPUT_BYTES >> 20} MiB]")
        rows = [replace(row, detail=row.detail[: DETAIL_CHARS - len(note)] + note) for row in rows]
    return rows


def _status(number: int, expected: _Expected, index: int | None, job: _Job, timeout: float) -> tuple[str, str, str]:
    """``(status, bug, detail)`` of the chapter's ``number``-th check, matched to the cell ``index`` of the submission
    (or None).

    When the check cell ran, the status is what the check said in the fresh process (:func:`_verify`), never what
    the notebook printed; the notebook's line is kept as the detail of a pass that both agree on.
    """
    run = job.run
    if index is None or run is None:
        return "missing", "", f"no check cell calls {expected.check} in exercise {expected.exercise}"
    others = {e.check for e, i in job.cells if i == index and e.check != expected.check}
    outcome = _outcome(expected.check, job.nb.cells[index], others)
    if job.verified is not None and (outcome is not None or index in run.executed):
        verified = job.verified.get(number)
        if verified is None:
            return "error", "unverified", _first_line(job.unverified or "the check cell's call could not be read")
        if verified[0] == "pass" and outcome is not None and outcome[0] == "pass":
            return outcome
        if verified[0] != "pass" and outcome is not None and outcome[0] == "pass":
            return verified[0], verified[1], _first_line(f"printed a pass, but in a fresh process: {verified[2]}")
        return verified[0], verified[1], _first_line(verified[2])
    if outcome is not None:
        return outcome
    if index in run.executed:
        return "missing", "", f"the check cell ran but printed nothing from {expected.check}"
    if run.timed_out:
        return "timeout", "", f"the notebook ran past the time limit ({timeout:g} s) before this check"
    if run.error is not None:
        return "error", type(run.error).__name__, _first_line(f"the notebook stopped before this check: {run.error}")
    return "missing", "", "the check cell did not run (empty, or tagged to be skipped)"


class NotebookTooLarge(OSError):
    """A submitted notebook above ``--max-notebook-mb``: it is not read."""


def _plan(student: str, path: Path, submissions: Path, chapters: Path, known: Sequence[_Chapter],
          graded: dict[str, str], max_mb: int = 64) -> _Job | list[GradeRow]:
    """What to do with one submitted notebook: a job to run, or its rows when there is nothing to run.

    ``graded`` (chapter -> notebook) is updated. A notebook of more than ``max_mb`` MiB is not read (its size is
    all that is looked at): it can be graded only as the chapter its file name says.
    """
    shown = path.relative_to(submissions).as_posix()
    try:
        size = path.stat().st_size
        if size > max_mb << 20:
            raise NotebookTooLarge(f"{size / 1e6:.0f} MB, above the limit of {max_mb} MiB (--max-notebook-mb): "
                                   "not read")
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
        bug = "too-large" if isinstance(unreadable, NotebookTooLarge) else type(unreadable).__name__
        return [GradeRow(student, chapter.name, e.exercise, e.check, "error", bug,
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


def _scratch(base: Path, number: int, source: Path, owner: int | None) -> Path:
    """A scratch folder for one notebook: ``work/``, a copy of the folder it was submitted in (without notebooks and
    hidden files), its working directory; beside it, the kernel's connection file. Owned by ``owner`` if not None."""
    scratch = base / str(number)
    shutil.copytree(source, scratch / "work", symlinks=True,
                    ignore=lambda folder, names: [n for n in names if n.startswith(".") or n.endswith(".ipynb")])
    os.chmod(scratch, 0o700)
    if owner is not None:
        for folder, folders, files in os.walk(scratch):
            for name in [folder, *(os.path.join(folder, n) for n in folders + files)]:
                os.lchown(name, owner, owner)
    return scratch


async def _run_jobs(jobs: Sequence[_Job], folder: Path, timeout: float, kernel_name: str, parallel: int,
                    progress: Callable[[str], None] | None, sandbox: Sandbox | None = None,
                    done: Callable[[list[GradeRow]], None] | None = None) -> None:
    """Run the jobs' notebooks, ``parallel`` at a time, each in a scratch copy of its folder, then repeat their checks
    in a fresh process; ``done`` gets each notebook's rows as soon as they are known."""
    slots = asyncio.Semaphore(parallel)
    free = list(range(parallel))
    base = Path(tempfile.mkdtemp(prefix=f"attn-grade-{os.getpid()}-"))
    if len(str(base)) > SCRATCH_PATH_MAX and Path("/tmp").is_dir():
        # Each kernel's IPC sockets live in its scratch folder, and a Unix socket's path has at most 107 bytes: a
        # deep temporary folder (TMPDIR) would leave no room for them.
        base.rmdir()
        base = Path(tempfile.mkdtemp(prefix=f"attn-grade-{os.getpid()}-", dir="/tmp"))
    os.chmod(base, 0o711)  # the kernels' users reach their own folder in it, and nothing else
    if sandbox is not None:  # the submissions, read-only to the kernels (unless the scratch folders lie inside)
        inside = base.resolve().is_relative_to(folder.resolve())
        sandbox.protected = [] if inside else [folder.resolve()]
    described = sandbox.describe() if sandbox is not None else "none"

    async def run(number: int, job: _Job) -> None:
        async with slots:
            slot = free.pop()
            cgroup = None
            try:
                if sandbox is not None and sandbox.enabled:
                    cgroup = _make_cgroup(f"attn-grade-{os.getpid()}-{number}", sandbox.processes)
                    if cgroup is not None:
                        sandbox.cgroups[slot] = cgroup
                scratch = _scratch(base, number, (folder / job.shown).parent,
                                   sandbox.owner(slot) if sandbox is not None else None)
                job.run = await _execute(job.nb, scratch / "work", timeout, kernel_name, sandbox, slot)
                await asyncio.to_thread(_verify, job, scratch / "work", timeout, sandbox, slot)
            finally:
                if sandbox is not None:
                    sandbox.cgroups.pop(slot, None)
                _end_cgroup(cgroup)  # the whole process tree of the notebook ends here
                free.append(slot)
                shutil.rmtree(base / str(number), ignore_errors=True)
        job.rows = _rows(job, timeout, described)
        _clear_outputs(job.nb)
        if done is not None:
            done(job.rows)
        if progress is not None:
            passed = sum(row.status == "pass" for row in job.rows)
            progress(f"{job.shown}: {passed}/{len(job.rows)} checks passed ({job.run.seconds:.1f} s)")

    try:
        await asyncio.gather(*(run(number, job) for number, job in enumerate(jobs)))
    finally:
        shutil.rmtree(base, ignore_errors=True)


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
    sandbox: Sandbox | None = None,
    previous: Sequence[GradeRow] = (),
    done: Callable[[list[GradeRow]], None] | None = None,
    shard: tuple[int, int] | None = None,
    max_notebook_mb: int = 64,
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
        sandbox: how the kernels are confined (:class:`Sandbox`; by default its defaults); a line for each protection
            this machine does not allow goes to ``progress``.
        previous: rows of an earlier grading of the same class (:func:`read_csv`): a notebook whose student and
            chapter have rows there is not run again, and its rows are kept.
        done: called with each notebook's rows as soon as they are known (to save them as the grading goes).
        shard: ``(i, n)`` grades only the students whose :func:`shard_of` is ``i`` of ``n`` (``0 <= i < n``): ``n``
            graders, one per ``i``, grade the class between them, each student exactly once, and :func:`merge`
            combines their CSVs. None: every student.
        max_notebook_mb: a submitted notebook larger than this many MiB is not read (not even to find its title,
            so it is graded only as the chapter its file name says, each check an ``error`` with the bug
            ``too-large``). The chapters' own notebooks, outputs included, weigh under 2 MB.
    Returns:
        the rows, one per student, chapter and expected check (and one per notebook that could not be graded),
        students in sorted order, then chapters, then the chapter's checks in order.
    Raises:
        GradingError: a folder is missing or holds no notebooks, a notebook lies directly in ``submissions``, there is
            no default ``chapters``, ``timeout`` is not a positive number of seconds, ``jobs`` not a positive
            integer or ``shard`` not ``(i, n)`` with ``0 <= i < n``.
    """
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise GradingError("timeout", f"expected a positive number of seconds, got {timeout!r}")
    if not (isinstance(jobs, int) and not isinstance(jobs, bool) and jobs >= 1):
        raise GradingError("jobs", f"expected a positive number of notebooks at a time, got {jobs!r}")
    for name in ("memory_mb", "cpu_seconds", "processes", "file_mb", "open_files", "max_notebook_mb"):
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
    known = _load_chapters(chapters)
    found = _find_submissions(submissions)
    if shard is not None:
        found = {student: paths for student, paths in found.items() if shard_of(student, shard[1]) == shard[0]}

    planned: list[_Job | list[GradeRow]] = []
    for student, paths in found.items():
        if not paths:
            planned.append([GradeRow(student, "", "", "", "missing", "", f"no notebook in {student}/", 0.0)])
        graded: dict[str, str] = {}  # chapter -> the notebook graded for it
        # A file named after its chapter goes first, then the shallower one: it is the one graded when a student
        # sent two notebooks of a chapter.
        for path in sorted(paths, key=lambda p: (not any(c.path.name == p.name for c in known), len(p.parts), p)):
            planned.append(_plan(student, path, submissions, chapters, known, graded, max_notebook_mb))
    kept: dict[tuple[str, str], list[GradeRow]] = defaultdict(list)
    for row in previous:
        if row.chapter and row.check:
            kept[row.student, row.chapter].append(row)
    planned = [kept[item.student, item.chapter.name] if isinstance(item, _Job) and (item.student, item.chapter.name)
               in kept else item for item in planned]
    # Nothing to learn from running a notebook none of whose cells runs a check: all its checks are missing.
    to_run = [job for job in planned if isinstance(job, _Job) and job.matched.count(None) < len(job.matched)]
    if progress is not None:
        resumed = {id(rows) for rows in kept.values()}
        for item in planned:
            if isinstance(item, list) and id(item) in resumed:
                progress(f"{item[0].student}: {item[0].chapter}: graded before (kept from the CSV)")
            elif isinstance(item, list) and item[0].check:
                progress(f"{item[0].student}: {item[0].chapter}: 0/{len(item)} checks passed ({item[0].bug})")
            elif isinstance(item, list):
                progress(f"{item[0].student}: not graded: {item[0].detail}")
            elif item not in to_run:
                progress(f"{item.shown}: 0/{len(item.matched)} checks passed (no check cell: not run)")
    if sandbox is None:
        sandbox = Sandbox()
    if to_run:
        if progress is not None:
            for line in sandbox.warnings():
                progress(line)
        _run_sync(lambda: _run_jobs(to_run, submissions, timeout, kernel_name, jobs, progress, sandbox, done))
    rows = [row for item in planned for row in (
        (item.rows if item.rows is not None else _rows(item, timeout)) if isinstance(item, _Job) else item)]
    order = {name: i for i, name in enumerate(c.name for c in known)}
    return sorted(rows, key=lambda r: (r.student, order.get(r.chapter, -1)))  # stable: checks keep their order


def write_csv(rows: Iterable[GradeRow], path: Path | str, *, append: bool = False) -> None:
    """Write the rows as a CSV with the header :data:`COLUMNS` (``seconds`` with one decimal); with ``append``, add
    them to the end of the file (no header)."""
    with open(path, "a" if append else "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        if not append:
            writer.writerow(COLUMNS)
        for row in rows:
            fields = list(astuple(row))
            fields[COLUMNS.index("seconds")] = f"{row.seconds:.1f}"
            writer.writerow(fields)


def read_csv(path: Path | str) -> list[GradeRow]:
    """The rows of a CSV that :func:`write_csv` wrote (a CSV from before the ``sandbox`` column reads too)."""
    with open(path, newline="", encoding="utf-8") as f:
        return [GradeRow(**{**{name: record.get(name) or "" for name in COLUMNS},
                            "seconds": float(record.get("seconds") or 0)})
                for record in csv.DictReader(f)]


def shard_of(student: str, shards: int) -> int:
    """The shard (``0`` to ``shards - 1``) that grades ``student``: a stable hash of the folder name (SHA-256 of its
    UTF-8 bytes), the same on every machine, Python version and run, whatever else the submissions folder holds.

    >>> shard_of("alice", 4), shard_of("alice", 4) == shard_of("alice", 4), shard_of("alice", 1)
    (3, True, 0)
    """
    if not (isinstance(shards, int) and not isinstance(shards, bool) and shards >= 1):
        raise GradingError("shard", f"expected a positive number of shards, got {shards!r}")
    return int.from_bytes(hashlib.sha256(student.encode("utf-8")).digest()[:8], "big") % shards


def merge(inputs: Sequence[Path | str], output: Path | str) -> list[GradeRow]:
    """Combine the CSVs of the shards of a class (``attn-grade --shard i/n``) into one, students in sorted order.

    Each input must have the header :data:`COLUMNS`, and no row may be in two inputs: a row is known by its student,
    chapter, exercise and check (a chapter may call one check in two exercises), so a student graded by two shards
    (overlapping shards, or one CSV named twice) stops the merge before anything is written.

    Raises:
        GradingError: (argument ``"merge"``) an input cannot be read, has another header, or repeats a row of an
            earlier input; or there is no input.
    """
    if not inputs:
        raise GradingError("merge", "no input CSV (expected: attn-grade merge OUT.csv IN1.csv IN2.csv ...)")
    seen: dict[tuple[str, str, str, str], str] = {}
    rows: list[GradeRow] = []
    for path in map(Path, inputs):
        try:
            with open(path, newline="", encoding="utf-8") as f:
                header = next(csv.reader(f), [])
            these = read_csv(path)
        except (OSError, UnicodeDecodeError, csv.Error, ValueError, TypeError) as error:
            raise GradingError("merge", f"cannot read {path}: {error}") from error
        if tuple(header) != COLUMNS:
            raise GradingError("merge", f"{path} has the header {','.join(header) or '(none)'}; expected "
                                        f"{','.join(COLUMNS)} (a CSV written by attn-grade)")
        keys = {(r.student, r.chapter, r.exercise, r.check) for r in these}
        for key in sorted(keys):
            if key in seen:
                row = ", ".join(f"{name}={value!r}" for name, value in zip(COLUMNS[:4], key, strict=True)
                                if value)
                raise GradingError("merge", f"the row ({row}) is in both {seen[key]} and {path}: a student graded "
                                            "twice (overlapping shards, or one CSV named twice)")
            seen[key] = str(path)
        rows += these
    rows.sort(key=lambda r: r.student)  # stable: each student's rows keep their order
    write_csv(rows, output)
    return rows


def summary(rows: Sequence[GradeRow]) -> str:
    """A short table, one line per student: the checks passed out of those expected, then any notebook not graded.

    >>> print(summary([GradeRow("alice", "03", "ex-1", "check_causal_mask", "pass", "", "", 1.0),
    ...                GradeRow("bob", "03", "ex-1", "check_causal_mask", "fail", "causal-leak", "", 1.0)]))
    student  passed  total
    alice         1      1
    bob           0      1
    1 of 2 checks passed
    per check: passed/total, then the other statuses and the most frequent bug
      03 ex-1 check_causal_mask: 1/2 (1 fail; most often causal-leak)
    """
    students = sorted({r.student for r in rows})
    passed = Counter(r.student for r in rows if r.check and r.status == "pass")
    total = Counter(r.student for r in rows if r.check)
    width = max([len("student"), *map(len, students)])
    lines = [f"{'student':<{width}}  passed  total"]
    lines += [f"{s:<{width}}  {passed[s]:>6}  {total[s]:>5}" for s in students]
    lines.append(f"{sum(passed.values())} of {sum(total.values())} checks passed")
    lines += [f"not graded: {r.student}: {r.detail}" for r in rows if not r.check]
    checks = sorted({(r.chapter, r.exercise, r.check) for r in rows if r.check})
    if checks:
        lines.append("per check: passed/total, then the other statuses and the most frequent bug")
    for key in checks:
        these = [r for r in rows if (r.chapter, r.exercise, r.check) == key]
        statuses = Counter(r.status for r in these if r.status != "pass")
        bugs = Counter(r.bug for r in these if r.bug)
        others = ", ".join(f"{n} {status}" for status, n in sorted(statuses.items()))
        common = f"; most often {bugs.most_common(1)[0][0]}" if bugs else ""
        lines.append(f"  {key[0]} {key[1]} {key[2]}: {sum(r.status == 'pass' for r in these)}/{len(these)}"
                     + (f" ({others}{common})" if others else ""))
    return "\n".join(lines)


CLI_NAMES = {"submissions": "SUBMISSIONS", "chapters": "--chapters", "timeout": "--timeout", "jobs": "--jobs",
             "memory_mb": "--memory-mb", "cpu_seconds": "--cpu-seconds", "processes": "--processes",
             "file_mb": "--file-mb", "open_files": "--open-files", "previous": "--resume", "shard": "--shard",
             "max_notebook_mb": "--max-notebook-mb"}
"""The command line's name of each argument of :func:`grade`, for the error messages of :func:`main`."""


def main(argv: Sequence[str] | None = None) -> int:
    """The command ``attn-grade`` (also ``python -m attn_utils.grading``); returns the exit status.

    0 when the grading ran to the end, whatever the students' results; 2, with a message that names the argument,
    when it cannot start. ``attn-grade merge OUT.csv IN1.csv IN2.csv ...`` combines the CSVs of shards instead
    (:func:`merge`; a submissions folder named ``merge`` is ``./merge``).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["merge"]:
        return _merge_main(argv[1:])
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
    parser.add_argument("--resume", action="store_true",
                        help="keep the rows already in the CSV and run only the notebooks it does not grade yet")
    parser.add_argument("--max-notebook-mb", type=int, default=64,
                        help="a larger submitted notebook is not read, each of its checks an error (default: 64)")
    parser.add_argument("--shard", type=_shard_arg, default=None, metavar="I/N",
                        help="grade only the students of shard I of N (0 <= I < N, by a stable hash of the folder "
                             "name); combine the shards' CSVs with: attn-grade merge OUT.csv IN1.csv ...")
    box = parser.add_argument_group("sandbox", "limits of each kernel's processes (see attn_utils.grading.Sandbox)")
    defaults = Sandbox()
    for name, unit in (("memory_mb", "MiB of address space"), ("cpu_seconds", "CPU seconds"),
                       ("processes", "processes and threads"), ("file_mb", "MiB per written file"),
                       ("open_files", "open files")):
        box.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(defaults, name),
                         help=f"{unit} (default: {getattr(defaults, name)})")
    box.add_argument("--allow-network", action="store_true", help="let kernels reach the network (default: cut)")
    box.add_argument("--uid", type=int, default=defaults.uid,
                     help=f"as root, kernels run as UID+worker (default: {defaults.uid})")
    box.add_argument("--no-sandbox", action="store_true",
                     help="no limits and no namespaces: only on a machine that is itself a throwaway sandbox")
    args = parser.parse_args(argv)
    sandbox = Sandbox(args.memory_mb, args.cpu_seconds, args.processes, args.file_mb, args.open_files,
                      args.allow_network, args.uid, not args.no_sandbox)
    previous: list[GradeRow] = []
    if args.resume and args.output.is_file():
        try:
            previous = read_csv(args.output)
        except (OSError, ValueError, TypeError) as error:
            print(f"{parser.prog}: error: --resume: cannot read {args.output}: {error}", file=sys.stderr)
            return 2
    started = False

    def save(rows: list[GradeRow]) -> None:  # each notebook's rows as soon as they are known: --resume reads them
        nonlocal started
        if not started:
            write_csv(previous, args.output)
            started = True
        write_csv(rows, args.output, append=True)

    try:
        rows = grade(args.submissions, args.chapters, timeout=args.timeout, kernel_name=args.kernel, jobs=args.jobs,
                     progress=lambda line: print(line, file=sys.stderr, flush=True), sandbox=sandbox,
                     previous=previous, done=save, shard=args.shard, max_notebook_mb=args.max_notebook_mb)
    except GradingError as error:
        print(f"{parser.prog}: error: {CLI_NAMES.get(error.argument, error.argument)}: {error.message}",
              file=sys.stderr)
        return 2
    write_csv(rows, args.output)
    print(summary(rows))
    print(f"{len(rows)} rows written to {args.output}")
    return 0


def _shard_arg(text: str) -> tuple[int, int]:
    """``--shard I/N`` as ``(I, N)``."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if match is None or not int(match.group(1)) < int(match.group(2)):
        raise argparse.ArgumentTypeError(f"expected I/N with 0 <= I < N (e.g. 0/4), got {text!r}")
    return int(match.group(1)), int(match.group(2))


def _merge_main(argv: Sequence[str]) -> int:
    """``attn-grade merge OUT.csv IN1.csv IN2.csv ...``."""
    parser = argparse.ArgumentParser(
        prog="attn-grade merge",
        description="Combine the CSVs of the shards of a class (attn-grade --shard I/N) into one; stops, writing "
                    "nothing, if a header differs or a student's row is in two of them.")
    parser.add_argument("output", metavar="OUT.csv", type=Path, help="the combined CSV")
    parser.add_argument("inputs", metavar="IN.csv", type=Path, nargs="+", help="the shards' CSVs")
    args = parser.parse_args(argv)
    try:
        rows = merge(args.inputs, args.output)
    except GradingError as error:
        print(f"{parser.prog}: error: {error.message}", file=sys.stderr)
        return 2
    print(summary(rows))
    print(f"{len(rows)} rows from {len(args.inputs)} CSVs written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
