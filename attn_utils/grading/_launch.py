"""The launcher of every sandboxed process of the grader: a notebook's kernel, and the verdict process.

Run as a script (standard library only), never imported by what it starts::

    python -I attn_utils/grading/_launch.py [--memory-mb N] [--cpu-seconds N] [--processes N] [--file-mb N]
        [--open-files N] [--tmp-mb N] [--oom-score-adj N] [--cgroup DIR ...] [--uid U] [--stage DIR]
        [--work DIR --work-files N] [--own PATH ...] [--ro PATH ...] [--rw PATH ...] [--network]
        --home DIR --chdir DIR -- COMMAND ...

The sandbox itself is bubblewrap's (``bwrap``, the sandbox of Flatpak): the command sees only the system's
``/usr`` (and ``/lib``, ``/bin``, a few files of ``/etc``), read-only, the ``--ro`` folders read-only, the ``--rw``
folders (its scratch copy) writable, a private ``/tmp`` and ``/dev/shm`` of ``--tmp-mb`` MiB each and a fresh
``/proc``; it runs in its own
user, process, network (no interface up), IPC and UTS namespaces, without capabilities, in a new session, and dies
with its parent. This launcher adds what bubblewrap leaves to its caller:

- the **resource limits** (``setrlimit``, inherited by every child), the notebook's **cgroups** (``--cgroup``: the
  limits of its whole process tree, which the grader made), and an ``oom_score_adj`` that makes the sandbox the
  first to go when memory runs out;
- a **working folder of limited size** (``--work``, as root): a memory file system of ``--tmp-mb`` MiB and at most
  ``--work-files`` files, mounted on it in the launcher's own mount namespace, with the scratch copy's files copied
  in;
- **a user that owns nothing**, when the grader runs as root: it becomes ``--uid`` before it starts ``bwrap``
  (bubblewrap, run by root, would map the sandbox's user to root outside it). Each ``--ro``/``--rw`` folder is first
  bound, in a mount namespace of the launcher's own, onto an empty folder of ``--stage`` that the user can reach (the
  Python may live in a home that only root may enter), and bubblewrap binds it from there;
- the **parent-death signal**, set after the change of user (which clears it);
- the **scrubbed environment** (:data:`KEEP` of the grader's variables, ``HOME``).

Exit status 126 with one line on stderr when the sandbox cannot be made.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence

KEEP = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "VIRTUAL_ENV", "MALLOC_ARENA_MAX", "OMP_NUM_THREADS",
        "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "ATTN_UTILS_THREADS", "TORCH_NUM_THREADS", "MPLBACKEND",
        "JUPYTER_PATH")
"""The grader's environment variables that a sandboxed process gets (when set); every other one (tokens, keys, cloud
credentials, ``PYTHONPATH``) is dropped."""

SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""The system's folders, read-only in the sandbox (a symbolic link such as ``/lib -> usr/lib`` stays one)."""
ETC = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime",
       "/etc/fonts", "/etc/mime.types")
"""The few files of ``/etc`` that a Python process may read; nothing else of ``/etc`` is there."""

CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 4096, 16384, 1 << 18
_PR_SET_PDEATHSIG = 1


def scrubbed_env(home: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The sandboxed process's environment: :data:`KEEP` of ``environ`` (the grader's), ``HOME`` and quiet
    defaults."""
    environ = dict(os.environ if environ is None else environ)
    env = {name: environ[name] for name in KEEP if name in environ}
    env.setdefault("PATH", os.defpath)
    # MALLOC_ARENA_MAX: glibc reserves 64 MiB of address space per thread's arena, which the address-space limit
    # would count; two arenas cost torch's CPU kernels nothing measurable.
    env.update(HOME=home, MPLBACKEND=env.get("MPLBACKEND", "Agg"), PYTHONDONTWRITEBYTECODE="1",
               PYTHONNOUSERSITE="1", MALLOC_ARENA_MAX=env.get("MALLOC_ARENA_MAX", "2"))
    return env


def _libc_call(name: str, *args: object) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{name}: {os.strerror(errno)}")


def _limits(args: argparse.Namespace) -> None:
    mb = 1024 * 1024
    for which, value in ((resource.RLIMIT_AS, args.memory_mb and args.memory_mb * mb),
                         (resource.RLIMIT_CPU, args.cpu_seconds), (resource.RLIMIT_FSIZE, args.file_mb and
                                                                   args.file_mb * mb),
                         (resource.RLIMIT_NOFILE, args.open_files), (resource.RLIMIT_CORE, 0)):
        if value is not None:
            resource.setrlimit(which, (value, value))
    if args.processes:
        # RLIMIT_NPROC counts the processes and threads of the (real) user: as root's worker, a user of its own;
        # otherwise the grader's user, so the limit is what it runs already plus --processes.
        extra = 0 if args.uid is not None else _user_processes()
        resource.setrlimit(resource.RLIMIT_NPROC, (args.processes + extra, args.processes + extra))


def _user_processes() -> int:
    """The threads that the current user runs (RLIMIT_NPROC counts threads)."""
    uid, count = os.getuid(), 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry}/task"))
            except OSError:
                continue
    return count


def _sized(tmp_mb: int | None, bwrap: str = "bwrap") -> list[str]:
    """bubblewrap's ``--size`` for the next ``--tmpfs`` (where this bubblewrap has it: 0.8 and later)."""
    if not tmp_mb:
        return []
    try:
        known = "--size" in subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        known = False
    return ["--size", str(tmp_mb << 20)] if known else []


def _work_tmpfs(source: str, point: str, mb: int, files: int, uid: int) -> None:
    """A memory file system of ``mb`` MiB and ``files`` inodes on ``point``, owned by ``uid``, holding a copy of the
    regular files and folders of ``source`` (links are not followed)."""
    os.mkdir(point, 0o700)
    options = f"size={mb}m,nr_inodes={files},mode=0700,uid={uid},gid={uid}".encode()
    _libc_call("mount", b"tmpfs", point.encode(), b"tmpfs", ctypes.c_ulong(MS_NOSUID | MS_NODEV), options)
    for here, folders, names in os.walk(source):
        target = os.path.join(point, os.path.relpath(here, source))
        for name in folders:
            os.mkdir(os.path.join(target, name))
            os.lchown(os.path.join(target, name), uid, uid)
        for name in names:
            path = os.path.join(here, name)
            if os.path.isfile(path) and not os.path.islink(path):
                shutil.copyfile(path, os.path.join(target, name), follow_symlinks=False)
                os.lchown(os.path.join(target, name), uid, uid)


def bwrap_args(ro: Sequence[tuple[str, str]], rw: Sequence[tuple[str, str]], chdir: str, network: bool,
               size: Sequence[str] = ()) -> list[str]:
    """bubblewrap's arguments (before ``--`` and the command); ``ro``/``rw``: (source, path in the sandbox); ``size``:
    :func:`_sized`, the size of ``/tmp`` and ``/dev/shm``."""
    args = ["--unshare-all", *(["--share-net"] if network else []), "--die-with-parent", "--new-session",
            "--cap-drop", "ALL"]
    for path in SYSTEM:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in ETC:
        args += ["--ro-bind-try", path, path]
    args += ["--proc", "/proc", "--dev", "/dev", *size, "--tmpfs", "/tmp", *size, "--tmpfs", "/dev/shm"]
    for source, path in ro:
        args += ["--ro-bind", source, path]
    for source, path in rw:
        args += ["--bind", source, path]
    return [*args, "--remount-ro", "/", "--chdir", chdir]


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="attn_utils/grading/_launch.py")
    for name in ("memory-mb", "cpu-seconds", "processes", "file-mb", "open-files", "uid", "tmp-mb", "oom-score-adj",
                 "work-files"):
        parser.add_argument(f"--{name}", type=int, default=None)
    for name in ("own", "ro", "rw", "cgroup"):
        parser.add_argument(f"--{name}", action="append", default=[])
    parser.add_argument("--network", action="store_true")
    parser.add_argument("--home", required=True)
    parser.add_argument("--chdir", required=True)
    parser.add_argument("--stage", default=None)
    parser.add_argument("--work", default=None)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    if not args.command:
        print("attn_utils/grading/_launch.py: no command to run", file=sys.stderr)
        return 2
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        print("sandbox: bubblewrap (bwrap) is not installed (Debian, Ubuntu: apt-get install bubblewrap)",
              file=sys.stderr)
        return 126
    try:
        for cgroup in args.cgroup:  # the notebook's cgroups, which the grader made: the launcher joins them, and so
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as procs:  # does every process of the sandbox
                procs.write(str(os.getpid()))
        if args.oom_score_adj is not None:
            with open("/proc/self/oom_score_adj", "w") as adj:
                adj.write(str(args.oom_score_adj))
        ro = [(path, path) for path in args.ro]
        rw = [(path, path) for path in args.rw]
        if os.geteuid() == 0:
            if args.uid is None or args.uid == 0 or args.stage is None:
                raise PermissionError("as root, the sandbox needs --uid (not 0) and --stage")
            _libc_call("unshare", CLONE_NEWNS)  # the staged binds are this launcher's, never the machine's
            _libc_call("mount", None, b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None)
            staged = []
            for number, (path, _) in enumerate([*ro, *rw]):
                point = os.path.join(args.stage, str(number))
                os.mkdir(point, 0o755)
                _libc_call("mount", path.encode(), point.encode(), None, ctypes.c_ulong(MS_BIND | MS_REC), None)
                staged.append(point)
            ro = [(staged[i], path) for i, (_, path) in enumerate(ro)]
            rw = [(staged[len(ro) + i], path) for i, (_, path) in enumerate(rw)]
            if args.work is not None:  # after the folder it is in: bubblewrap binds it on top
                point = os.path.join(args.stage, "work")
                _work_tmpfs(args.work, point, args.tmp_mb or 512, args.work_files or 20_000, args.uid)
                rw.append((point, args.work))
            for path in args.own:
                os.chown(path, args.uid, args.uid)
            os.setgroups([])
            os.setgid(args.uid)
            os.setuid(args.uid)
        elif args.uid is not None:
            raise PermissionError("--uid needs root")
        _libc_call("prctl", _PR_SET_PDEATHSIG, signal.SIGKILL)  # after the change of user, which clears it
        if os.getppid() == 1:
            return 126  # the grader is already gone
        _limits(args)
        size = _sized(args.tmp_mb, bwrap)
        command = [bwrap, *bwrap_args(ro, rw, args.chdir, args.network, size), "--", *args.command]
        os.execve(bwrap, command, scrubbed_env(args.home))
    except OSError as error:
        print(f"sandbox: {type(error).__name__}: {error}", file=sys.stderr)
        return 126
    return 126  # not reached


if __name__ == "__main__":
    sys.exit(main())
