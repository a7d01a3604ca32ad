"""Run every test of the course on two cores, and print how long each part took.

    python3 scripts/run_tests.py             # what `make test` runs (installs first, like `make install`)
    python3 scripts/run_tests.py --list      # the stages and their commands
    python3 scripts/run_tests.py --only tests --no-install   # one stage

The stages:

1. ``tests`` and, beside it, ``grader`` and ``book``, then ``browser``:

   * ``tests`` is one pytest session on two workers (pytest-xdist, whole files to a worker, longest first), one CPU
     thread each. It runs the unit tests and doctests (the slow ones too: the grader on real notebooks, a downloaded
     chapter installing the package), and one execution of every chapter, compared with the committed outputs by
     nbval: the notebook of ``scripts/make_student_versions.py --for-testing``, which is the chapter's text with its
     code and outputs, then the student version's exercises (every exercise's check required to fail with a bug the
     clinic names), then the instructor's exercises. It runs with one thread and the AVX2 kernels of ATen and MKL,
     so it sums in another order than the committed run (every free core, AVX-512): an output that depends on the
     rounding and is not marked fails. (``make nbval`` runs ``notebooks/`` as they are, one thread each.)
   * ``grader``: the grader's own tests (``tests/test_grading*.py``), in a session of their own: they grade whole
     classes in sandboxes and spend most of their time waiting for notebooks to finish or to run out of time, so
     beside the two busy workers of ``tests`` they use what the others leave of the cores, instead of holding one of
     those workers for minutes.
   * ``book``: ruff, the code width of the chapters, the prose budget of every chapter (a report), the strict book
     build (-W -n) of the committed outputs, the same for the Chinese edition (``scripts/build_chinese.py``), and the
     PDF of the book printed from the English pages (``scripts/build_pdf.py``), then ``tests/test_links.py``: every
     link of every page of both editions resolves (read from the files; the stage ``tests`` leaves it out, since the
     book is being built beside it).
   * ``browser`` (when ``book`` has ended, beside the rest of ``tests``): the built book, both editions, in
     Chromium, and its PDF.

``tests`` runs at a lower priority (nice 10): it ends minutes before ``book`` and then ``browser``, which run one after
the other and so set the total time; they get the cores first.

A stage's output goes to `_build/test-logs/<stage>.log`; the log of a failed stage is printed at the end. Every stage
runs even when an earlier one failed, so that one run shows every failure; the exit status is 1 if any failed. The
table at the end gives each stage's wall time, its CPU time (all its processes, in a cgroup of their own, where one
can be made: what the stage needs of the cores, whatever else the machine runs) and, for ``tests``, the time its workers
spent on each kind of test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("VENV", ROOT / ".venv"))
PY = str(VENV / "bin" / "python")
LOGS = ROOT / "_build" / "test-logs"
STUDENT_CHECK = ROOT / "_build" / "student-check"
JUNIT = LOGS / "tests.xml"
NBVAL = ["--nbval", "--nbval-sanitize-with", "tests/nbval_sanitize.cfg", "--nbval-current-env"]
ONE_THREAD = {"ATTN_UTILS_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@dataclass
class Stage:
    name: str
    commands: list[list[str]]
    env: dict[str, str] = field(default_factory=dict)
    after: str | None = None  # the stage that must have ended before this one starts
    nice: int = 0  # lower priority (os.nice) for a stage that has time to spare
    seconds: float = 0.0
    cpu_seconds: float | None = None  # CPU time of all the stage's processes, where cgroups can be made
    status: str = "not run"


def expected_seconds(path: Path) -> float:
    """How long a notebook took when it was executed (from the timestamps nbclient saved), to run the longest first."""
    total = 0.0
    for cell in json.loads(path.read_text())["cells"]:
        timing = cell.get("metadata", {}).get("execution", {})
        if "iopub.execute_input" in timing and "shell.execute_reply" in timing:
            start, end = (datetime.fromisoformat(timing[k].replace("Z", "+00:00"))
                          for k in ("iopub.execute_input", "shell.execute_reply"))
            total += (end - start).total_seconds()
    return total


def chapters_longest_first() -> list[Path]:
    return sorted((ROOT / "notebooks").glob("*.ipynb"), key=lambda p: -expected_seconds(p))


def stages() -> list[Stage]:
    """The stages: ``tests`` and ``book`` start at once, ``browser`` as soon as ``book`` has ended (beside the rest of
    ``tests``: the browser waits for pages now and then, and the two fill each other's pauses)."""
    pytest = [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    chapters = chapters_longest_first()
    # The longest chapters first, then the shorter ones, then the unit tests (many short files).
    notebooks = [str((STUDENT_CHECK / c.name).relative_to(ROOT)) for c in chapters]
    grading = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_grading*.py"))
    tests = Stage("tests", [
        [PY, "scripts/make_student_versions.py", "--for-testing", "-o", str(STUDENT_CHECK)],
        pytest + NBVAL + ["-n", "2", "--dist", "loadfile", "--no-loadscope-reorder", "-m", "slow or not slow",
                          "--ignore=tests/browser", "--ignore=tests/test_links.py",
                          *(f"--ignore={g}" for g in grading), "--junitxml", str(JUNIT),
                          *notebooks, "tests", "attn_utils"],
    ], ONE_THREAD, nice=10)  # it ends minutes before book and browser, one after the other, which go first
    grader = Stage("grader", [pytest + ["-m", "slow or not slow", *grading]], ONE_THREAD)
    book = Stage("book", [
        [str(VENV / "bin" / "ruff"), "check", "."],
        # every code line of the chapters fits the book's column (88 characters)
        [PY, "scripts/format_notebooks.py", "--check"],
        [PY, "scripts/prose_budget.py"],  # every chapter's prose words, objectives and glue per paragraph (reports)
        [PY, "scripts/book_config.py", "--no-execute", "-o", ".config-committed-outputs.yml"],
        [str(VENV / "bin" / "jupyter-book"), "build", ".", "--config", ".config-committed-outputs.yml", "-W", "-n",
         "--keep-going"],
        # the Chinese edition, as strict: a message the catalogs do not translate is a warning
        [PY, "scripts/build_chinese.py", "--no-execute", "-W", "-n", "--keep-going"],
        # the PDF of each edition, printed from the pages just built (the browser tests check them)
        [PY, "scripts/build_pdf.py"],
        # every link of every page of both editions resolves (about 5 s, no browser: read from the files; without the
        # unit tests' conftest, which imports torch)
        pytest + ["--noconftest", "tests/test_links.py"],
    ], ONE_THREAD)
    # The book that the stage "book" has just built (without it, the browser tests build the book themselves).
    browser = Stage("browser", [pytest + ["-n", "2", "--dist", "loadgroup", "tests/browser"]], after="book")
    return [tests, grader, book, browser]


CPUACCT = Path("/sys/fs/cgroup/cpuacct")


def cpu_group(stage: Stage) -> Path | None:
    """A cgroup (v1, cpuacct) that counts the CPU time of the stage's whole process tree, Chromium and the grader's
    sandboxes included; None where none can be made (not root, or no such hierarchy): the table then has no CPU time.
    """
    group = CPUACCT / f"course-test-{os.getpid()}-{stage.name}"
    try:
        group.mkdir()
    except OSError:
        return None
    return group


def cpu_seconds(group: Path | None) -> float | None:
    if group is None:
        return None
    try:
        used = int((group / "cpuacct.usage").read_text()) / 1e9
        group.rmdir()  # fails while a process the stage left behind still runs; the group is then left
    except (OSError, ValueError):
        return None
    return used


def run_stage(stage: Stage, log: Path, group: Path | None = None) -> subprocess.Popen[bytes]:
    """Start the stage's commands, one after the other, in a shell that stops at the first failure (in ``group``,
    the stage's cgroup, from its first instruction on: every process it starts is counted there)."""
    script = " && ".join(subprocess.list2cmdline(c) for c in stage.commands)
    out = log.open("wb")

    def join() -> None:
        if group is not None:
            (group / "cgroup.procs").write_text(str(os.getpid()))
        if stage.nice:
            os.nice(stage.nice)

    return subprocess.Popen(["bash", "-c", script], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                            env={**os.environ, **stage.env}, preexec_fn=join)


def fmt(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:04.1f} s"


def cpu_times() -> tuple[float, float] | None:
    """(busy, all) seconds of the machine's cores since boot, from /proc/stat (None where there is none)."""
    try:
        fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]  # guest: in user
    except (OSError, ValueError):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle and iowait
    return (sum(fields) - idle) / ticks, sum(fields) / ticks


def busy_cores(before: tuple[float, float]) -> float | None:
    """How many of the machine's cores were busy, on average, since ``before`` (from ``cpu_times``)."""
    after = cpu_times()
    if after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1]) * (os.cpu_count() or 1)


def test_time_by_kind() -> dict[str, float]:
    """Seconds the workers of stage ``tests`` spent on each kind of test (summed over both workers)."""
    if not JUNIT.exists():
        return {}
    kinds = {"chapters with their exercises (nbval, AVX2)": 0.0, "unit tests and doctests": 0.0}
    for case in ET.parse(JUNIT).getroot().iter("testcase"):
        name = case.get("classname", "") + "/" + case.get("file", "") + "/" + case.get("name", "")
        seconds = float(case.get("time", 0))
        if "student-check" in name:
            kinds["chapters with their exercises (nbval, AVX2)"] += seconds
        else:
            kinds["unit tests and doctests"] += seconds
    return {kind: seconds for kind, seconds in kinds.items() if seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true", help="print the stages and their commands")
    parser.add_argument("--only", nargs="+", metavar="STAGE", help="run only these stages")
    parser.add_argument("--no-install", action="store_true", help="skip `make install`")
    args = parser.parse_args(argv)
    planned = stages()
    if args.list:
        for stage in planned:
            print(f"{stage.name}" + (f" (after {stage.after}):" if stage.after else ":"))
            for command in stage.commands:
                print("    " + subprocess.list2cmdline(command))
        return 0
    if args.only:
        known = {s.name for s in planned}
        if unknown := set(args.only) - known:
            parser.error(f"--only: expected stages among {sorted(known)}, got {sorted(unknown)}")
        planned = [s for s in planned if s.name in args.only]
        for stage in planned:
            if stage.after not in args.only:
                stage.after = None
    start = time.perf_counter()
    done: list[Stage] = []
    if not args.no_install:
        install = Stage("install", [["make", "install"]])
        result = subprocess.run(["make", "--no-print-directory", "install"], cwd=ROOT)
        install.seconds = time.perf_counter() - start
        install.status = "passed" if result.returncode == 0 else "FAILED"
        done.append(install)
        if result.returncode != 0:
            print("the installation failed")
            return 1
    LOGS.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(STUDENT_CHECK, ignore_errors=True)
    JUNIT.unlink(missing_ok=True)
    busy_before = cpu_times()
    waiting, running = list(planned), []
    while waiting or running:
        ended = {s.name for s in done}
        for stage in [s for s in waiting if s.after is None or s.after in ended]:
            waiting.remove(stage)
            if stage.name == "browser" and any(s.name == "book" and s.status == "passed" for s in done):
                stage.env["COURSE_BOOK_BUILT"] = "1"
            print(f"== {stage.name}", flush=True)
            group = cpu_group(stage)
            running.append((stage, run_stage(stage, LOGS / f"{stage.name}.log", group), time.perf_counter(), group))
        time.sleep(0.5)
        for entry in list(running):
            stage, proc, t0, group = entry
            code = proc.poll()
            if code is None:
                continue
            running.remove(entry)
            stage.seconds = time.perf_counter() - t0
            stage.cpu_seconds = cpu_seconds(group)
            stage.status = "passed" if code == 0 else "FAILED"
            last = (LOGS / f"{stage.name}.log").read_text(errors="replace").strip().splitlines()[-1:] or [""]
            print(f"   {stage.name}: {stage.status} in {fmt(stage.seconds)} ({last[0][:100]})", flush=True)
            done.append(stage)
    total = time.perf_counter() - start
    failed = [s for s in done if s.status != "passed"]
    for stage in failed:
        if stage.name != "install":
            print(f"\n==== {stage.name} failed; the end of _build/test-logs/{stage.name}.log:")
            print("\n".join((LOGS / f"{stage.name}.log").read_text(errors="replace").splitlines()[-60:]))
    print("\nEach stage's wall time (tests beside grader and book, then beside browser) and the CPU time of all its "
          "processes:")
    for stage in done:
        cpu = "" if stage.cpu_seconds is None else f"CPU {fmt(stage.cpu_seconds)}"
        print(f"  {stage.name:10s} {fmt(stage.seconds):>13s}  {stage.status:7s} {cpu}")
    print(f"  {'total':10s} {fmt(total):>13s}  {'FAILED' if failed else 'passed'}")
    if busy_before is not None and (busy := busy_cores(busy_before)) is not None:
        # on an idle machine, how much of the two cores the stages used: near 2, they can only go faster by doing
        # less; well below it, they wait (for time limits, for pages), and overlapping more would help
        print(f"The machine's cores were busy {busy:.2f} of {os.cpu_count()} on average while the stages ran.")
    if kinds := test_time_by_kind():
        print("Time the two workers of `tests` spent, by kind (summed over both):")
        for kind, seconds in kinds.items():
            print(f"  {kind:48s} {fmt(seconds):>13s}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
