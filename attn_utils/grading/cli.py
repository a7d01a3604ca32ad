"""The command line: ``attn-grade`` (and ``python -m attn_utils.grading``)."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from . import grade
from .collect import GradeRow, GradingError
from .report import merge, read_csv, summary, write_csv
from .sandbox import Sandbox

CLI_NAMES = {"submissions": "SUBMISSIONS", "chapters": "--chapters", "timeout": "--timeout", "jobs": "--jobs",
             "memory_mb": "--memory-mb", "cpu_seconds": "--cpu-seconds", "processes": "--processes",
             "file_mb": "--file-mb", "open_files": "--open-files", "tmp_mb": "--tmp-mb", "previous": "--resume",
             "shard": "--shard", "max_notebook_mb": "--max-notebook-mb", "sandbox": "sandbox"}
"""The command line's name of each argument of :func:`grade`, for the error messages of :func:`main`."""


def main(argv: Sequence[str] | None = None) -> int:
    """The command ``attn-grade`` (also ``python -m attn_utils.grading``); returns the exit status.

    0 when the grading ran to the end, whatever the students' results; 2, with a message that names the argument,
    when it cannot start (also when the sandbox cannot be made: one line says what is missing). ``attn-grade merge
    OUT.csv IN1.csv IN2.csv ...`` combines the CSVs of shards instead
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
                       ("open_files", "open files"), ("tmp_mb", "MiB of /tmp, of /dev/shm and (as root) of the working "
                                                                "folder, each")):
        box.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(defaults, name),
                         help=f"{unit} (default: {getattr(defaults, name)})")
    box.add_argument("--allow-network", action="store_true", help="let kernels reach the network (default: cut)")
    box.add_argument("--uid", type=int, default=defaults.uid,
                     help=f"as root, worker k's kernels run as UID+2k, its verdicts as UID+2k+1 (default: "
                          f"{defaults.uid})")
    box.add_argument("--no-sandbox", action="store_true",
                     help="UNSAFE: no sandbox at all (student code runs with your rights, files and network): only "
                          "on a machine that is itself a throwaway sandbox")
    args = parser.parse_args(argv)
    sandbox = Sandbox(memory_mb=args.memory_mb, cpu_seconds=args.cpu_seconds, processes=args.processes,
                      file_mb=args.file_mb, open_files=args.open_files, tmp_mb=args.tmp_mb,
                      network=args.allow_network, uid=args.uid, enabled=not args.no_sandbox)
    previous: list[GradeRow] = []
    if args.resume and args.output.is_file():
        try:
            previous = read_csv(args.output)
        except (OSError, ValueError, TypeError) as error:
            print(f"{parser.prog}: error: --resume: cannot read {args.output}: {error}", file=sys.stderr)
            return 2
    begun = False

    def save(rows: list[GradeRow]) -> None:  # each notebook's rows as soon as they are known: --resume reads them
        nonlocal begun
        if not begun:
            write_csv(previous, args.output)
            begun = True
        write_csv(rows, args.output, append=True)

    try:
        rows = grade(args.submissions, args.chapters, timeout=args.timeout, kernel_name=args.kernel, jobs=args.jobs,
                     progress=lambda line: print(line, file=sys.stderr, flush=True), sandbox=sandbox,
                     previous=previous, done=save, started=save, shard=args.shard,
                     max_notebook_mb=args.max_notebook_mb)
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
