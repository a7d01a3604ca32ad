"""The sandbox that each graded notebook's kernel (and each check's fresh process) runs in.

Run as a script, never imported by the kernel it launches (it uses the standard library only, so that starting a
kernel does not pay for importing attn_utils and torch twice)::

    python attn_utils/_sandbox.py [--memory-mb N] [--cpu-seconds N] [--processes N] [--file-mb N] [--open-files N]
                                  [--isolate [--read-only PATH ...]] [--uid U --gid G] [--own PATH ...]
                                  --home DIR -- COMMAND ...

It starts ``COMMAND`` with:

- **resource limits** (``setrlimit`` in the process itself, inherited by its children): address space
  (``RLIMIT_AS``), CPU seconds (``RLIMIT_CPU``), processes and threads (``RLIMIT_NPROC``), size of a written file
  (``RLIMIT_FSIZE``), open files (``RLIMIT_NOFILE``), no core files;
- **its own network, process and (when not root) user namespaces** with ``--isolate``: no network interface but
  a loopback that is down, so no connection leaves it, not even to 127.0.0.1 on the grader's machine; the command is
  process 1 of its process namespace, so when it ends (or this launcher is killed: the command gets ``SIGKILL`` with
  its parent) the kernel kills every process left in the namespace, including those that left the process group;
- **read-only folders** with ``--read-only PATH`` (and ``--isolate``): a mount namespace of its own in which each
  ``PATH`` is bind-mounted on itself, read-only, so that the command cannot write there even as the grader's user
  (the grader passes the submissions folder);
- **an unprivileged user** with ``--uid``/``--gid`` (when the grader runs as root);
- **a scrubbed environment**: only :data:`KEEP` of the grader's variables, ``HOME`` set to ``--home``.

:func:`probe` (``--probe``) says what the machine allows, so that the grader asks for no more and says what is
missing. Linux only; elsewhere the grader runs kernels without a sandbox and says so.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import signal
import sys
from collections.abc import Sequence

KEEP = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "VIRTUAL_ENV", "MALLOC_ARENA_MAX", "OMP_NUM_THREADS",
        "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "ATTN_UTILS_THREADS", "TORCH_NUM_THREADS", "MPLBACKEND",
        "JUPYTER_PATH")
"""The grader's environment variables that a kernel gets (when set); every other one (tokens, keys, cloud
credentials, ``PYTHONPATH``) is dropped."""

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
_PR_SET_PDEATHSIG = 1
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
# the flags a remount must keep (the kernel refuses to drop them in a user namespace): statvfs's, as mount's
_KEPT = ((os.ST_NOSUID, 2), (os.ST_NODEV, 4), (os.ST_NOEXEC, 8), (os.ST_NOATIME, 1024),
         (os.ST_NODIRATIME, 2048), (os.ST_RELATIME, 1 << 21)) if sys.platform == "linux" else ()


def _mount(source: str | None, target: str, flags: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(source and source.encode(), target.encode(), None, ctypes.c_ulong(flags), None) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {target}: {os.strerror(errno)}")


def _read_only(paths: Sequence[str]) -> None:
    """In a mount namespace of this process's own (after ``unshare(CLONE_NEWNS)``): each path read-only."""
    _mount(None, "/", MS_REC | MS_PRIVATE)  # nothing of what follows reaches the grader's mounts
    for path in paths:
        _mount(path, path, MS_BIND | MS_REC)
        kept = sum(flag for st, flag in _KEPT if os.statvfs(path).f_flag & st)
        _mount(None, path, MS_REMOUNT | MS_BIND | MS_RDONLY | kept)


def _unshare(flags: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(flags) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"unshare: {os.strerror(errno)}")


def _namespace_flags(uid: int | None) -> int:
    """A network and a process namespace; and a user namespace unless root hands the kernel to another ``uid``: in
    it the kernel has no capabilities and its processes are counted apart from the grader's user's."""
    flags = CLONE_NEWNET | CLONE_NEWPID
    return flags if uid is not None else flags | CLONE_NEWUSER


def _try(attempt: object) -> bool:
    """Whether ``attempt()`` succeeds in a child process (so that nothing changes here)."""
    pid = os.fork()
    if pid == 0:
        try:
            attempt()  # type: ignore[operator]
            os._exit(0)
        except BaseException:  # noqa: BLE001
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _as_user(uid: int, paths: Sequence[str]) -> None:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    for path in paths:
        if not os.access(path, os.R_OK | (os.X_OK if not path.endswith(".py") else 0)):
            raise PermissionError(path)


def probe(uid: int | None = None, paths: Sequence[str] = ()) -> dict[str, bool]:
    """What this machine allows, each tried in a child process: ``root`` (the grader runs as root), ``user`` (``uid``
    can read ``paths``: the Python and the packages a kernel needs) and ``namespaces`` (for that user, or, when it
    cannot be used, a user namespace of the grader's user)."""
    found = {"root": False, "user": False, "namespaces": False, "read-only": False}
    if sys.platform != "linux":
        return found
    found["root"] = os.geteuid() == 0
    found["user"] = found["root"] and uid is not None and _try(lambda: _as_user(uid, paths))
    flags = _namespace_flags(uid if found["user"] else None)
    found["namespaces"] = _try(lambda: _unshare(flags))
    here = os.path.dirname(os.path.abspath(__file__))

    def read_only() -> None:
        _unshare(flags | CLONE_NEWNS)
        _read_only([here])
        if os.access(here, os.W_OK):
            raise OSError("still writable")

    found["read-only"] = found["namespaces"] and _try(read_only)
    return found


def scrubbed_env(home: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The kernel's environment: :data:`KEEP` of ``environ`` (the grader's), ``HOME`` and a few quiet defaults."""
    environ = dict(os.environ if environ is None else environ)
    env = {name: environ[name] for name in KEEP if name in environ}
    env.setdefault("PATH", os.defpath)
    # MALLOC_ARENA_MAX: glibc reserves 64 MiB of address space per thread's arena, which the address-space limit
    # would count; two arenas cost torch's CPU kernels nothing measurable.
    env.update(HOME=home, MPLBACKEND=env.get("MPLBACKEND", "Agg"), PYTHONDONTWRITEBYTECODE="1",
               PYTHONNOUSERSITE="1", MALLOC_ARENA_MAX=env.get("MALLOC_ARENA_MAX", "2"))
    return env


def _limit(which: int, value: int) -> None:
    resource.setrlimit(which, (value, value))


def _apply_limits(args: argparse.Namespace) -> None:
    mb = 1024 * 1024
    if args.memory_mb:
        _limit(resource.RLIMIT_AS, args.memory_mb * mb)
    if args.cpu_seconds:
        _limit(resource.RLIMIT_CPU, args.cpu_seconds)
    if args.file_mb:
        _limit(resource.RLIMIT_FSIZE, args.file_mb * mb)
    if args.open_files:
        _limit(resource.RLIMIT_NOFILE, args.open_files)
    if args.processes:
        # RLIMIT_NPROC counts the processes and threads of the user (in its user namespace). Kernels run as a user of
        # their own (root grader: a uid per worker) or in a user namespace of their own (--isolate), so the count is
        # the kernel's own; otherwise it is the grader's user's: then the limit is what that user runs already plus
        # --processes, so that a fork bomb stops there and the grader can still start its processes.
        shared = args.uid is None and not args.isolate
        if os.getuid() == 0 and shared:
            return  # no limit holds for root in its own namespace: the grader asks for --isolate or --uid
        _limit(resource.RLIMIT_NPROC, args.processes + (_user_processes() if shared else 0))
    _limit(resource.RLIMIT_CORE, 0)


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


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="attn_utils/_sandbox.py")
    parser.add_argument("--probe", action="store_true")
    for name in ("memory-mb", "cpu-seconds", "processes", "file-mb", "open-files", "uid", "gid"):
        parser.add_argument(f"--{name}", type=int, default=None)
    parser.add_argument("--isolate", action="store_true")
    parser.add_argument("--own", action="append", default=[])
    parser.add_argument("--read-only", action="append", default=[])
    parser.add_argument("--home", default=None)
    parser.add_argument("--cgroup", default=None)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    return args


def _become(args: argparse.Namespace) -> None:
    """In the child: give up root, set the limits, and run the command (never returns)."""
    if args.uid is not None:
        os.setgroups([])
        os.setgid(args.gid if args.gid is not None else args.uid)
        os.setuid(args.uid)
    _apply_limits(args)
    env = scrubbed_env(args.home or os.getcwd())
    os.execvpe(args.command[0], args.command, env)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    if args.probe:
        found = probe(args.uid, args.command)
        print(" ".join(f"{key}={int(value)}" for key, value in found.items()))
        return 0
    if not args.command:
        print("attn_utils/_sandbox.py: no command to run", file=sys.stderr)
        return 2
    for path in args.own:  # the files the command must read or write as its user (its connection file, its folder)
        if args.uid is not None:
            os.chown(path, args.uid, args.gid if args.gid is not None else args.uid)
    if args.cgroup:  # a process-count cgroup that the grader made: this launcher joins it, and so does the command
        with open(os.path.join(args.cgroup, "cgroup.procs"), "w") as procs:
            procs.write(str(os.getpid()))
    if not args.isolate:
        _become(args)
    # Asked to isolate and it cannot: fail rather than run the student's code with less than the grader was told.
    _unshare(_namespace_flags(args.uid) | (CLONE_NEWNS if args.read_only else 0))
    if args.read_only:
        _read_only(args.read_only)
    child = os.fork()  # process 1 of the new process namespace
    if child == 0:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            _become(args)
        except BaseException as error:  # noqa: BLE001
            print(f"attn_utils/_sandbox.py: {type(error).__name__}: {error}", file=sys.stderr)
        os._exit(127)
    # The launcher forwards the signals that Jupyter sends (interrupt, terminate) and ends with the command.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(signum, lambda received, frame: os.kill(child, received))
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:
            return 1
        except InterruptedError:
            continue
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
