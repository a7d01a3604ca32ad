"""Running a class: each notebook in its kernel in the sandbox, each check by the verdict process, one row per check.

**How a notebook runs.** In a fresh kernel (:mod:`~attn_utils.grading.sandbox`), top to bottom, with
``allow_errors=True`` and at most ``timeout`` seconds for the whole notebook, kernel start and checks included.
Right after a check cell has run, the grader asks the kernel, in a cell the notebook does not show, to serve the
check's arguments (as the instructor's chapter writes them, evaluated in the notebook's namespace: a helper module
next to the notebook, ``%run`` and magics work as in the notebook), and the verdict process
(:mod:`~attn_utils.grading.verdict`), started beside the kernel in a sandbox of its own, runs the clinic's check on
them: the student's function is called in the kernel and only its outputs, as data, reach the verdict. What the
notebook printed decides nothing.

**One notebook, one row.** Whatever goes wrong while a notebook is read, analysed, run or checked (a recursion, a
huge output, malformed JSON, a kernel that dies or never answers) becomes that notebook's rows, and the class goes on.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from .collect import DETAIL_CHARS, GradeRow, Job, clear_outputs, first_line
from .sandbox import Sandbox, end_cgroup, make_cgroups

T = TypeVar("T")

GRACE = 5.0
"""Seconds past the time limit after which a notebook whose kernel does not answer is stopped from outside."""
OUTPUT_BYTES = 16 << 20
"""The most of a notebook's outputs (text, images, tracebacks) that the grader keeps while it runs: 16 MiB, ten times
what a chapter's own outputs weigh. Past it, printed text is cut and other outputs dropped as they arrive, and every
row of the notebook says so; the checks' results do not depend on it (they come from the verdict process)."""
OUTPUT_STOP = 16 * OUTPUT_BYTES
"""The most output (and widget messages) a notebook may send in all: past 256 MiB the grader stops it, and each of
its checks that had not run yet is an ``error`` ``too-much-output``."""
MESSAGE_BYTES = 8 * OUTPUT_BYTES
"""The largest message the grader reads from a kernel (ZeroMQ's ``MAXMSGSIZE`` on its sockets): 128 MiB. A larger one
is never read: ZeroMQ drops it with the connection, and the grader stops the notebook (``too-much-output``)."""
SCRATCH_FILES = 10_000
"""The most files and folders copied from a student's folder into a notebook's scratch copy: a folder with more is not
copied, and the notebook not run (an ``error`` ``too-many-files``)."""
SCRATCH_BYTES = 256 << 20
"""The most bytes copied from a student's folder (the notebooks themselves are not copied): 256 MiB."""
VERDICT_GRACE = 10.0
"""Seconds the verdict process has, after the kernel's side of a check has ended, to say its result."""
SCRATCH_PATH_MAX = 60
"""The longest scratch root whose kernels' IPC socket paths still fit a Unix socket's 107 bytes."""

_NBCLIENT_LOG = logging.getLogger(f"{__name__}.nbclient")
_NBCLIENT_LOG.addHandler(logging.NullHandler())
_NBCLIENT_LOG.propagate = False


@dataclass
class Run:
    """What happened when a notebook ran."""

    seconds: float
    timed_out: bool
    error: BaseException | None  # what stopped the run early, other than the time limit
    executed: set[int] = field(default_factory=set)  # indices of the cells that finished
    cut: int = 0  # bytes of output the grader did not keep (past OUTPUT_BYTES)
    stopped: str = ""  # why the grader stopped it ("sent more than 256 MiB of output"), or ""


def run_sync(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to the end, also when called from a running event loop (a Jupyter cell)."""

    async def run() -> T:
        return await make()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run())
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, run()).result()


async def _stop_kernel(km: Any) -> None:
    """Kill the kernel if it still runs (nbclient stops it on most exits, not on all: a start cut short, say)."""
    with contextlib.suppress(Exception):
        if km.has_kernel and await km.is_alive():
            await km.shutdown_kernel(now=True)


def _output_size(content: dict[str, Any]) -> int:
    """Roughly how many bytes an output message adds to the notebook."""
    if "text" in content:
        return len(content["text"])
    if "evalue" in content:
        return len(str(content.get("evalue", ""))) + sum(len(str(line)) for line in content.get("traceback", []))
    return sum(len(value) if isinstance(value, str) else len(json.dumps(value))
               for value in (content.get("data") or {}).values())


class _Verdict:
    """The verdict process of one notebook, and the kernel's ends of the pipes to it."""

    def __init__(self, proc: asyncio.subprocess.Process, kernel_fds: tuple[int, int]) -> None:
        self.proc, self.kernel_fds = proc, kernel_fds
        self.lost, self.closed = "", False

    @classmethod
    async def start(cls, sandbox: Sandbox | None, slot: int, scratch: Path) -> _Verdict:
        to_kernel_r, to_kernel_w = os.pipe()  # verdict -> kernel
        from_kernel_r, from_kernel_w = os.pipe()  # kernel -> verdict
        prefix = sandbox.command(slot, "verdict", scratch, Path("/tmp"), writable=False) if sandbox else []
        try:
            proc = await asyncio.create_subprocess_exec(
                *prefix, sys.executable, "-I", "-m", "attn_utils.grading.verdict", str(from_kernel_r),
                str(to_kernel_w), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                pass_fds=(from_kernel_r, to_kernel_w), start_new_session=True)
        finally:
            os.close(from_kernel_r)
            os.close(to_kernel_w)
        return cls(proc, (to_kernel_r, from_kernel_w))

    def close_kernel_ends(self) -> None:
        """Close the grader's copies of the kernel's ends, once (a number closed twice may be another's by then)."""
        if not self.closed:
            self.closed = True
            for fd in self.kernel_fds:
                with contextlib.suppress(OSError):
                    os.close(fd)

    async def ask(self, number: int, check: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps({"number": number, "check": check}) + "\n").encode())
        await self.proc.stdin.drain()

    async def result(self, number: int) -> tuple[str, str, str]:
        assert self.proc.stdout is not None
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), VERDICT_GRACE)
            said = json.loads(line)
            if said.get("number") != number:
                raise ValueError("out of step")
            if said["bug"] == "no-answer":  # the verdict closed its pipes: no later check of this notebook can run
                self.lost = first_line(str(said["detail"]))
            return str(said["status"]), str(said["bug"]), first_line(str(said["detail"]))
        except (asyncio.TimeoutError, ValueError, KeyError, TypeError):
            self.lost = "the kernel did not answer the check (the notebook's own code broke its side of it)"
            return "error", "no-answer", self.lost

    async def stop(self) -> None:
        self.close_kernel_ends()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.proc.wait(), 10)


async def _watch_connections(kc: Any, km: Any, ending: list[bool], why: list[str], stop: asyncio.Event) -> None:
    """Stop the notebook when ZeroMQ drops one of the grader's connections to a kernel that still runs: the kernel
    sent a message larger than MESSAGE_BYTES (ZeroMQ does not connect again after that)."""
    import zmq

    monitors, waits = [], []
    try:
        for channel in (kc.shell_channel, kc.iopub_channel, kc.stdin_channel):
            monitors.append(channel.socket.get_monitor_socket(zmq.EVENT_DISCONNECTED))
        waits = [asyncio.ensure_future(monitor.recv_multipart()) for monitor in monitors]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        await asyncio.sleep(1.0)  # a kernel that died closes its connections too: that is not this
        if not ending[0] and await km.is_alive():
            why[0] = why[0] or f"sent a message larger than {MESSAGE_BYTES >> 20} MiB"
            stop.set()
    finally:
        for wait in waits:
            wait.cancel()
        for channel, monitor in zip((kc.shell_channel, kc.iopub_channel, kc.stdin_channel), monitors, strict=False):
            with contextlib.suppress(Exception):
                channel.socket.disable_monitor()
            with contextlib.suppress(Exception):
                monitor.close(linger=0)


def _serve_cell(arguments: str, fds: tuple[int, int], number: int) -> Any:
    from nbformat.v4 import new_code_cell

    return new_code_cell(f"import attn_utils.grading.serve as _attn_grade_serve\n"
                         f"_attn_grade_serve.serve({arguments!r}, globals(), {fds[0]}, {fds[1]}, {number})")


def _cancel_kernel_polls(client: Any) -> None:
    """Cancel nbclient's poll of whether the kernel is alive, left running when a cell's execution is cancelled (a
    time limit, a flood): once the kernel client is gone, the poll fails, and asyncio prints its error as a task
    exception that was never retrieved, which reads as a crash of the grader."""
    for task in asyncio.all_tasks():
        coro = task.get_coro()
        frame = getattr(coro, "cr_frame", None)
        if (getattr(coro, "__qualname__", "").endswith("._async_poll_kernel_alive") and frame is not None
                and frame.f_locals.get("self") is client):
            task.cancel()


async def execute(job: Job, scratch: Path, timeout: float, kernel_name: str, sandbox: Sandbox | None = None,
                  slot: int = 0) -> Run:
    """Run the job's notebook in place in a fresh kernel started in ``scratch/work``, for at most ``timeout``
    seconds in all, and each of its checks right after its check cell (results in ``job.verified``)."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError

    nb, cwd = job.nb, scratch / "work"
    start = time.monotonic()
    deadline = start + timeout
    executed: set[int] = set()

    def finished(cell: Any, cell_index: int, execute_reply: Any) -> None:
        if 0 <= cell_index < len(nb.cells) and cell is nb.cells[cell_index]:
            executed.add(cell_index)

    client = NotebookClient(
        nb, kernel_name=kernel_name, allow_errors=True,
        # Each cell may use the time left to the whole notebook (at least a second: nbclient reads 0 as no limit).
        timeout_func=lambda cell: max(1, math.ceil(deadline - time.monotonic())),
        # A cell's outputs are read to the end however busy the machine: past nbclient's usual 4 s it would go on to
        # the next cell and skip the rest, never counting them against the notebook's output limit.
        iopub_timeout=max(4, math.ceil(timeout)),
        shutdown_kernel="immediate", resources={"metadata": {"path": str(cwd)}}, on_cell_executed=finished,
        store_widget_state=False, log=_NBCLIENT_LOG)
    kept = [0, 0, 0]  # bytes of output kept, cut, and sent in all (widget messages included)
    process_message = client.process_message
    stop = asyncio.Event()
    why = [""]  # why the grader stopped the notebook
    ending = [False]  # the grader itself ends the kernel: a connection that closes says nothing

    def capped(msg: dict[str, Any], cell: Any, cell_index: int) -> Any:
        """nbclient's handling of each message, with the outputs kept to OUTPUT_BYTES in all, and the notebook
        stopped past OUTPUT_STOP."""
        kind, content = msg.get("msg_type"), msg.get("content") or {}
        if kind in ("stream", "display_data", "execute_result", "update_display_data", "error", "comm_open",
                    "comm_msg"):
            kept[2] += _output_size(content)
            if kept[2] > OUTPUT_STOP:
                why[0] = why[0] or f"sent more than {OUTPUT_STOP >> 20} MiB of output"
                stop.set()
                return None
        if kind in ("comm_open", "comm_msg"):
            return None  # widgets' state is not kept
        if kind in ("stream", "display_data", "execute_result", "update_display_data", "error"):
            size = _output_size(content)
            room = max(0, OUTPUT_BYTES - kept[0])
            if size > room:
                kept[1] += size - room
                if kind == "stream" and room:
                    msg = {**msg, "content": {**content, "text": str(content.get("text", ""))[:room]}}
                elif kind == "error":
                    msg = {**msg, "content": {**content, "evalue": str(content.get("evalue", ""))[:DETAIL_CHARS * 4],
                                              "traceback": []}}
                else:
                    return None
                size = min(size, room)
            kept[0] += size
        return process_message(msg, cell, cell_index)

    client.process_message = capped  # type: ignore[method-assign]
    km = client.km = client.create_kernel_manager()
    import zmq
    import zmq.asyncio

    context = zmq.asyncio.Context()  # of the client's sockets: none reads a message larger than MESSAGE_BYTES
    context.setsockopt(zmq.MAXMSGSIZE, MESSAGE_BYTES)
    client_of = km.client
    km.client = lambda **kwargs: client_of(**{"context": context, **kwargs})  # type: ignore[method-assign]
    verdict = await _Verdict.start(sandbox, slot, scratch)
    if sandbox is not None and sandbox.enabled:
        km.transport, km.connection_file, km.ip = "ipc", str(scratch / "kernel.json"), str(scratch / "kernel-ipc")
        prefix = sandbox.command(slot, "kernel", scratch, cwd, [scratch / "kernel.json"])
        kernel_cmd = km.format_kernel_cmd
        km.format_kernel_cmd = lambda extra_arguments=None: [*prefix, *kernel_cmd(extra_arguments)]
    at_cell: dict[int, list[int]] = {}
    for number, index in enumerate(job.matched):
        if index is not None and index not in job.unparsed:
            at_cell.setdefault(index, []).append(number)

    async def body() -> None:
        async with client.async_setup_kernel(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                             pass_fds=verdict.kernel_fds):
            verdict.close_kernel_ends()
            watch = asyncio.ensure_future(_watch_connections(client.kc, km, ending, why, stop))
            try:
                await cells()
            finally:
                ending[0] = True
                watch.cancel()
                _cancel_kernel_polls(client)

    async def cells() -> None:
        for index, cell in enumerate(nb.cells):
            await client.async_execute_cell(cell, index, execution_count=client.code_cells_executed + 1)
            for number in at_cell.get(index, []) if index in executed else []:
                expected = job.chapter.checks[number]
                arguments = job.chapter.arguments[number] if number < len(job.chapter.arguments) else None
                if arguments is None:
                    job.verified[number] = ("error", "unverified",
                                            "the chapter's check cell does not say what to check")
                    continue
                if verdict.lost:
                    job.verified[number] = ("error", "no-answer", verdict.lost)
                    continue
                await verdict.ask(number, expected.check)
                await client.async_execute_cell(_serve_cell(arguments, verdict.kernel_fds, number), index,
                                                store_history=False)
                nb.cells[index] = cell  # nbclient puts the cell it ran in the notebook: the check cell goes back
                job.verified[number] = await verdict.result(number)

    task = asyncio.ensure_future(body())
    flood = asyncio.ensure_future(stop.wait())
    timed_out, error = False, None
    try:
        done, _ = await asyncio.wait({task, flood}, timeout=max(0.0, deadline - time.monotonic()) + GRACE,
                                     return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set() and not task.done():
            ending[0] = True
            await _stop_kernel(km)
            task.cancel()
            done = {task}
        if not done:
            timed_out = True
            ending[0] = True
            await _stop_kernel(km)
            done, _ = await asyncio.wait({task}, timeout=GRACE)
            if not done:
                task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            if not (timed_out or stop.is_set()):
                raise
        except CellTimeoutError:
            timed_out = True
        except Exception as exc:  # noqa: BLE001 (a dead kernel, a kernel that does not start: reported in the rows)
            if not timed_out:
                error = exc
    finally:
        ending[0] = True
        flood.cancel()
        if not task.done():
            task.cancel()
        await _stop_kernel(km)
        await verdict.stop()
        atexit.unregister(client._cleanup_kernel)
        context.destroy(linger=0)
    return Run(time.monotonic() - start, timed_out, error, executed, kept[1], why[0] if stop.is_set() else "")


def _printed_pass(cell: Any, check: str) -> bool:
    """Whether the cell printed ``<check>: passed`` (a linear scan of what the grader kept)."""
    text = "".join(str(out.get("text", "")) for out in cell.get("outputs", []) if out.get("output_type") == "stream")
    return any(line.lstrip("\x1b[0123456789;m").startswith(f"{check}: passed") for line in text.splitlines())


def status(number: int, job: Job, timeout: float) -> tuple[str, str, str]:
    """``(status, bug, detail)`` of the chapter's ``number``-th check: what the verdict said when the check cell ran,
    never what the notebook printed."""
    expected, index, run = job.chapter.checks[number], job.matched[number], job.run
    if index is None:
        return "missing", "", f"no check cell calls {expected.check} in exercise {expected.exercise}"
    if index in job.unparsed:
        return "error", "SyntaxError", first_line(job.unparsed[index])
    if run is None:
        return "missing", "", "the notebook was not run"
    if number in job.verified:
        said = job.verified[number]
        if said[0] != "pass" and _printed_pass(job.nb.cells[index], expected.check):
            return said[0], said[1], first_line(f"printed a pass, but the grader's check says: {said[2]}")
        return said
    if run.stopped:
        return "error", "too-much-output", f"the notebook {run.stopped}: the grader stopped it before this check"
    if run.timed_out:
        return "timeout", "", f"the notebook ran past the time limit ({timeout:g} s) before this check"
    if run.error is not None:
        return "error", type(run.error).__name__, first_line(f"the notebook stopped before this check: {run.error}")
    if index in run.executed:
        return "error", "unverified", "the check cell ran, but the grader could not check it"
    return "missing", "", "the check cell did not run (empty, or tagged to be skipped)"


def rows_of(job: Job, timeout: float, sandbox: str = "") -> list[GradeRow]:
    """The rows of a notebook that was run (or not: when none of its cells runs a check, there is nothing to run)."""
    seconds = round(job.run.seconds, 1) if job.run else 0.0
    rows = [GradeRow(job.student, job.chapter.name, expected.exercise, expected.check,
                     *status(number, job, timeout), seconds, sandbox)
            for number, expected in enumerate(job.chapter.checks)]
    if job.run is not None and job.run.stopped:
        note = f" [stopped: the notebook {job.run.stopped}]"
        rows = [replace(row, detail=row.detail[: DETAIL_CHARS - len(note)] + note) for row in rows]
    elif job.run is not None and job.run.cut:
        note = (f" [outputs cut: the notebook printed {(job.run.cut + OUTPUT_BYTES) / 1e6:.0f} MB, the grader kept "
                f"{OUTPUT_BYTES >> 20} MiB]")
        rows = [replace(row, detail=row.detail[: DETAIL_CHARS - len(note)] + note) for row in rows]
    return rows


def error_rows(job: Job, error: BaseException, sandbox: str = "") -> list[GradeRow]:
    """The rows of a notebook that the grader could not grade: one per check, each saying why."""
    detail = first_line(f"the grader could not grade this notebook: {type(error).__name__}: {error}")
    return [GradeRow(job.student, job.chapter.name, e.exercise, e.check, "error", type(error).__name__, detail, 0.0,
                     sandbox) for e in job.chapter.checks]


class FolderTooLarge(OSError):
    """A student's folder with more than :data:`SCRATCH_FILES` files or :data:`SCRATCH_BYTES` bytes to copy."""


def scratch_copy(base: Path, number: int, source: Path, owner: int | None) -> Path:
    """A scratch folder for one notebook: ``work/``, a copy of the regular files and folders of the folder it was
    submitted in (no notebooks, hidden files, links or other special files), its working directory; beside it, the
    kernel's connection file. Owned by ``owner`` if not None. Raises :class:`FolderTooLarge` (having copied at most
    the limits) for a folder with more than :data:`SCRATCH_FILES` files or :data:`SCRATCH_BYTES` bytes."""
    scratch = base / str(number)
    (scratch / "work").mkdir(parents=True)
    count, size = 0, 0

    def within_limits() -> None:
        if count > SCRATCH_FILES or size > SCRATCH_BYTES:
            what = (f"{SCRATCH_FILES:,} files and folders" if count > SCRATCH_FILES
                    else f"{SCRATCH_BYTES >> 20} MiB of files")
            raise FolderTooLarge(f"the folder {source.name}/ holds more than {what}: not copied, the notebook not run")

    for here, folders, files in os.walk(source):  # does not follow links to folders
        target = scratch / "work" / Path(here).relative_to(source)
        folders[:] = [f for f in folders if not f.startswith(".") and not os.path.islink(os.path.join(here, f))]
        for name in folders:
            count += 1
            within_limits()
            (target / name).mkdir()
        for name in files:
            path = os.path.join(here, name)
            if name.startswith(".") or name.endswith(".ipynb") or os.path.islink(path) or not os.path.isfile(path):
                continue
            count += 1
            size += os.path.getsize(path)
            within_limits()
            shutil.copyfile(path, target / name, follow_symlinks=False)
    os.chmod(scratch, 0o700)
    if owner is not None:
        for folder, folders, files in os.walk(scratch):
            for name in [folder, *(os.path.join(folder, n) for n in folders + files)]:
                os.lchown(name, owner, owner)
    return scratch


def scratch_base() -> Path:
    base = Path(tempfile.mkdtemp(prefix=f"attn-grade-{os.getpid()}-"))
    if len(str(base)) > SCRATCH_PATH_MAX and Path("/tmp").is_dir():
        # Each kernel's IPC sockets live in its scratch folder, and a Unix socket's path has at most 107 bytes.
        base.rmdir()
        base = Path(tempfile.mkdtemp(prefix=f"attn-grade-{os.getpid()}-", dir="/tmp"))
    os.chmod(base, 0o711)  # the kernels' users reach their own folder in it, and nothing else
    return base


async def run_jobs(jobs: Sequence[Job], folder: Path, timeout: float, kernel_name: str, parallel: int,
                   progress: Callable[[str], None] | None, sandbox: Sandbox | None, base: Path,
                   done: Callable[[list[GradeRow]], None] | None = None,
                   started: Callable[[Job], None] | None = None, first: int = 0) -> None:
    """Run the jobs' notebooks, ``parallel`` at a time, each in a scratch copy of its folder; ``started`` is told of
    each notebook before it runs, ``done`` gets its rows as soon as they are known; ``first`` numbers the first job's
    scratch folder."""
    slots = asyncio.Semaphore(parallel)
    free = list(range(parallel))
    described = sandbox.describe() if sandbox is not None else "none"

    async def run(number: int, job: Job) -> None:
        async with slots:
            slot = free.pop()
            cgroups: list[Path] = []
            try:
                if started is not None:
                    started(job)
                if sandbox is not None and sandbox.enabled:
                    cgroups = make_cgroups(f"attn-grade-{os.getpid()}-{number}", sandbox.processes, sandbox.memory_mb)
                    sandbox.cgroups[slot] = cgroups
                # off the event loop: the other notebooks' messages are read meanwhile
                scratch = await asyncio.to_thread(scratch_copy, base, number, (folder / job.shown).parent,
                                                  sandbox.owner(slot) if sandbox is not None else None)
                job.run = await execute(job, scratch, timeout, kernel_name, sandbox, slot)
                job.rows = rows_of(job, timeout, described)
            except FolderTooLarge as error:
                job.rows = [GradeRow(job.student, job.chapter.name, e.exercise, e.check, "error", "too-many-files",
                                     first_line(str(error)), 0.0, described) for e in job.chapter.checks]
            except Exception as error:  # noqa: BLE001 (one notebook, one row: the class goes on)
                job.rows = error_rows(job, error, described)
            finally:
                if sandbox is not None:
                    sandbox.cgroups.pop(slot, None)
                for cgroup in cgroups:  # the whole process tree of the notebook ends here (off the event loop)
                    await asyncio.to_thread(end_cgroup, cgroup)
                free.append(slot)
                await asyncio.to_thread(shutil.rmtree, base / str(number), ignore_errors=True)
        clear_outputs(job.nb)
        if done is not None:
            done(job.rows)
        if progress is not None:
            passed = sum(row.status == "pass" for row in job.rows)
            seconds = job.run.seconds if job.run is not None else 0.0
            progress(f"{job.shown}: {passed}/{len(job.rows)} checks passed ({seconds:.1f} s)")

    await asyncio.gather(*(run(number, job) for number, job in enumerate(jobs, first)))
