"""The sandbox of every process that touches a submission: how it is built, and the refusal when it cannot be.

:class:`Sandbox` holds the limits; :meth:`Sandbox.command` is the launcher's command line
(``attn_utils/grading/_launch.py``, which sets the limits, leaves root and starts bubblewrap). :meth:`Sandbox.check`
runs a short Python in that sandbox once, before anything is graded: where it fails (no ``bwrap``, no user
namespaces, no second user), the grading stops with one line that says what is missing and how to get it. There is
no weaker fallback: ``--no-sandbox`` (named as unsafe) is the only way to run without it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .collect import GradingError

LAUNCHER = Path(__file__).resolve().with_name("_launch.py")
WORK_FILES = 20_000
"""The most files and folders in a kernel's working folder (as root: a memory file system of ``tmp_mb`` MiB)."""


@dataclass
class Sandbox:
    """How each notebook's kernel, and the verdict process that checks its functions, are confined.

    Attributes:
        memory_mb: the address space of each process, in MiB (``RLIMIT_AS``; torch reserves far more address space
            than it touches: the chapters peak at 1.5 to 2.3 GiB of it, 0.4 to 0.9 GiB resident, measured); and, where a
            cgroup can be made, the memory of the notebook's whole process tree, its memory files included).
        cpu_seconds: CPU seconds of each process (``RLIMIT_CPU``); all its threads count.
        processes: processes and threads: the ``pids.max`` of a cgroup of the notebook's own where one can be made,
            and ``RLIMIT_NPROC`` (of the worker's own user, as root).
        file_mb: the largest file a kernel may write, in MiB (``RLIMIT_FSIZE``).
        open_files: open files per process (``RLIMIT_NOFILE``).
        tmp_mb: the size of each of the sandbox's ``/tmp`` and ``/dev/shm`` (memory file systems) and, as root, of
            its working folder (a memory file system of its own, with at most ``WORK_FILES`` files), in MiB.
        network: let the kernels reach the network (by default they have none).
        uid: when the grader runs as root, worker ``k``'s kernels run as ``uid + 2k`` and its verdict processes as
            ``uid + 2k + 1``: users that own nothing, a pair per worker so that no two processes that run at the same
            time share a user.
        enabled: False runs kernels with the grader's rights, network and no limits (``--no-sandbox``): only for a
            machine that is itself a throwaway sandbox.
    """

    memory_mb: int = 8192
    cpu_seconds: int = 1200
    processes: int = 512
    file_mb: int = 256
    open_files: int = 1024
    tmp_mb: int = 512
    network: bool = False
    uid: int = 61000
    enabled: bool = True
    checked: bool = field(default=False, repr=False)
    cgroups: dict[int, list[Path]] = field(default_factory=dict, repr=False)  # each worker's cgroups, while it runs

    def check(self, base: Path) -> None:
        """Run a short Python in the sandbox (in ``base``); raise :class:`GradingError` (argument ``"sandbox"``)
        with what is missing when it fails."""
        if not self.enabled or self.checked:
            return
        if sys.platform != "linux":
            raise GradingError("sandbox", "the sandbox needs Linux (bubblewrap); on another system grade in a Linux "
                                          "container, or pass --no-sandbox (unsafe: student code runs with your "
                                          "rights) on a throwaway machine")
        if shutil.which("bwrap") is None:
            raise GradingError("sandbox", "bubblewrap (bwrap) is not installed: install it (Debian, Ubuntu: "
                                          "apt-get install bubblewrap; Fedora: dnf install bubblewrap), or pass "
                                          "--no-sandbox (unsafe) on a throwaway machine")
        scratch = Path(tempfile.mkdtemp(prefix="check-", dir=base))
        work = scratch / "work"
        work.mkdir()
        code = ("import os, sys, ipykernel, attn_utils\n"
                "assert not os.access(os.path.dirname(attn_utils.__file__), os.W_OK)\n"
                "print('uid', os.getuid())")
        try:
            command = [*self.command(0, "kernel", scratch, work, [scratch, work]), sys.executable, "-I", "-c", code]
            out = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        if out.returncode != 0 or "uid" not in out.stdout:
            said = " ".join(out.stderr.strip().splitlines()[-1:])[:300] or f"exit status {out.returncode}"
            hint = ("user namespaces may be off (sysctl kernel.unprivileged_userns_clone=1, or "
                    "user.max_user_namespaces > 0; in a container, allow them)")
            raise GradingError("sandbox", f"bubblewrap cannot make the sandbox here ({said}): {hint}; or pass "
                                          "--no-sandbox (unsafe) on a throwaway machine")
        self.checked = True

    def describe(self) -> str:
        """The protections in force, for the CSV's ``sandbox`` column: ``bwrap`` (bubblewrap: only the system, the
        Python, the package and the notebook's scratch copy visible; a private ``/tmp``; its own processes),
        ``limits``, ``no-network`` (or ``network``), ``pids-cgroup``, ``cpu-cgroup`` and ``memory-cgroup`` (the
        limits of the notebook's whole process tree that a cgroup holds), and ``own-user`` (root's workers: a user
        that owns nothing, a working folder of limited size) or ``grader-user``; ``none`` with ``--no-sandbox``."""
        if not self.enabled:
            return "none"
        words = ["bwrap", "limits", "network" if self.network else "no-network"]
        if os.geteuid() == 0:
            words += [f"{controller}-cgroup" for controller in CONTROLLERS if _hierarchy(controller) is not None]
        words.append("own-user" if os.geteuid() == 0 else "grader-user")
        return ",".join(words)

    def warnings(self) -> list[str]:
        """A line for what the sandbox does not do here."""
        if not self.enabled:
            return ["sandbox: OFF (--no-sandbox, unsafe): student code runs with the grader's rights, files, network "
                    "and no limits"]
        lines = []
        if self.network:
            lines.append("sandbox: --allow-network: kernels can reach the network")
        if os.geteuid() != 0:
            lines.append("sandbox: kernels run as the grader's user, in bubblewrap's user namespace: they see only "
                         "the system, the Python, the package and their own scratch copy")
        return lines

    def command(self, slot: int, kind: str, scratch: Path, cwd: Path, own: Sequence[Path] = (),
                writable: bool = True) -> list[str]:
        """The launcher's command (before the sandboxed command) for worker ``slot``'s ``kind`` of process
        (``"kernel"`` or ``"verdict"``), with ``scratch`` its only writable folder (when ``writable``) and ``cwd`` its
        working folder."""
        if not self.enabled:
            return []
        cmd = [sys.executable, "-I", str(LAUNCHER), "--memory-mb", str(self.memory_mb), "--cpu-seconds",
               str(self.cpu_seconds), "--processes", str(self.processes), "--file-mb", str(self.file_mb),
               "--open-files", str(self.open_files), "--tmp-mb", str(self.tmp_mb), "--oom-score-adj", "1000",
               "--home", str(cwd), "--chdir", str(cwd)]
        if kind == "kernel":
            cmd += [a for cgroup in self.cgroups.get(slot, []) for a in ("--cgroup", str(cgroup))]
        if self.network:
            cmd.append("--network")
        if os.geteuid() == 0:
            stage = Path(tempfile.mkdtemp(prefix=f"stage-{kind}-", dir=scratch.parent))  # root's, 0700 -> 0755
            os.chmod(stage, 0o755)
            cmd += ["--uid", str(self.uid + 2 * slot + (kind == "verdict")), "--stage", str(stage)]
            cmd += [a for path in own for a in ("--own", str(path))]
            if writable and kind == "kernel":
                cmd += ["--work", str(cwd), "--work-files", str(WORK_FILES)]
        for path in needed_paths():
            cmd += ["--ro", path]
        if writable:
            cmd += ["--rw", str(scratch)]
        return [*cmd, "--"]

    def owner(self, slot: int) -> int | None:
        """The uid of worker ``slot``'s kernels, or None (the grader's)."""
        return self.uid + 2 * slot if self.enabled and os.geteuid() == 0 else None


def needed_paths() -> list[str]:
    """What a sandboxed Python needs, read-only: the Python's prefix, the virtual environment, the package."""
    paths = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix),
             os.path.realpath(os.path.dirname(os.path.dirname(__file__))),
             os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))}
    # a folder inside another one is bound with it
    return sorted(p for p in paths if not any(p != q and p.startswith(q + os.sep) for q in paths))


CONTROLLERS = ("pids", "cpu", "memory")
"""The cgroup controllers of each notebook's cgroups: ``pids`` (``--processes`` for the whole tree), ``cpu`` (the whole
tree weighs as one process against the other notebooks, however many sessions it starts) and ``memory`` (``--memory-mb``
for the whole tree, its tmpfs files included)."""


def _hierarchy(controller: str) -> Path | None:
    """The folder of this process's cgroup in a hierarchy with ``controller`` (cgroup v2, else v1), where a child
    cgroup can be made; None when there is none or it is not writable."""
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
                if own is not None and controller in (folder / "cgroup.subtree_control").read_text().split():
                    candidates.insert(0, folder)
        elif fields[2] == "cgroup" and controller in fields[3].split(","):
            own = next((g.split(":", 2)[2] for g in groups
                        if controller in g.split(":", 2)[1].split(",")), None)
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


def _pids_hierarchy() -> Path | None:
    """:func:`_hierarchy` of ``pids``."""
    return _hierarchy("pids")


def make_cgroups(name: str, processes: int, memory_mb: int) -> list[Path]:
    """The notebook's cgroups, one per controller of :data:`CONTROLLERS` that can be had here (on cgroup v2, one
    folder for all): at most ``processes`` tasks, one process's share of the CPU, ``memory_mb`` MiB of memory."""
    made: list[Path] = []
    for controller in CONTROLLERS:
        parent = _hierarchy(controller)
        if parent is None:
            continue
        folder, v2 = parent / name, (parent / "cgroup.controllers").exists()
        settings = {"pids": {"pids.max": str(processes)},
                    "cpu": {},  # the default weight: what counts is that the whole tree is one entity
                    "memory": {("memory.max" if v2 else "memory.limit_in_bytes"): str(memory_mb << 20)}}[controller]
        try:
            if folder not in made:
                folder.mkdir()
            for file, value in settings.items():
                (folder / file).write_text(value)
        except OSError:
            if folder not in made:
                end_cgroup(folder)
            continue
        if folder not in made:
            made.append(folder)
    return made


def end_cgroup(folder: Path | None) -> None:
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
