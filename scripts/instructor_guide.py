"""Write book/instructor_guide.md from the chapters themselves, so that the guide never drifts from them.

    python scripts/instructor_guide.py           # rewrite the page
    python scripts/instructor_guide.py --check   # exit 1 if the page is out of date (a test runs this)

For each chapter it gathers the learning objectives, the prerequisites and the estimated time from the chapter's
objectives admonition, the exercises from the chapter, the measured run time and its largest cells from
bench/results/notebooks.json (written by `make bench`), and the instructor's notes and suggested exercises from
book/instructor_notes.yml.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "book" / "instructor_guide.md"
NOTES = ROOT / "book" / "instructor_notes.yml"
TIMES = ROOT / "bench" / "results" / "notebooks.json"
CONTENTION = ROOT / "bench" / "results" / "contention.json"  # idle and beside a busy process (`make bench`)
GPU = ROOT / "bench" / "results" / "gpu.json"  # every chapter on a CUDA GPU


def chapter_facts(path: Path) -> dict:
    nb = nbformat.read(path, as_version=4)
    title = nb.cells[0].source.splitlines()[0].lstrip("# ").strip()
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    box = re.search(r"```\{admonition\} Learning objectives\n(.*?)\n```", text, re.DOTALL)
    if box is None:
        raise ValueError(f"{path.name}: no Learning objectives admonition")
    body = box.group(1)
    objectives = re.findall(r"^- (.*(?:\n  .*)*)", body, re.MULTILINE)
    prereq = re.search(r"\*Prerequisites:\*\s*(.*?)(?:\*Time:\*|$)", body, re.DOTALL)
    time = re.search(r"\*Time:\*\s*(.*?)\s*$", body, re.DOTALL)
    exercise = r"\{exercise-start\}\s*\n:label: (\S+)\s*\n```\s*\n(.*?)```\{exercise-end\}"
    exercises = re.findall(exercise, text, re.DOTALL)
    return {
        "name": path.stem,
        "title": title,
        "objectives": [from_book(" ".join(o.split())) for o in objectives],
        "prerequisites": from_book(" ".join(prereq.group(1).split()).rstrip(".")) if prereq else "none",
        "time": " ".join(time.group(1).split()).rstrip(".") if time else "not given",
        "exercises": [(label, glued_from(path, from_book(first_sentence(" ".join(body.split())))))
                      for label, body in exercises],
    }


def from_book(text: str) -> str:
    """Rewrite a chapter's relative {doc} links so that they resolve from book/instructor_guide.md."""
    text = re.sub(r"\{doc\}`([^`<]*)<(?!/)([^>]+)>`", r"{doc}`\1</notebooks/\2>`", text)
    return re.sub(r"\]\((?!\.\./|/|https?:)([^)]+\.ipynb)\)", r"](../notebooks/\1)", text)


def glued_from(path: Path, text: str) -> str:
    """A number glued in the chapter is read from the chapter's page (MyST-NB's ``path::key``)."""
    return re.sub(r"\{glue:(\w+)\}`(?![^`]*::)", rf"{{glue:\1}}`../notebooks/{path.stem}.ipynb::", text)


def first_sentence(line: str) -> str:
    match = re.match(r"(.+?[.?!])(\s|$)", line.strip())
    sentence = match.group(1) if match else line.strip()
    return sentence if len(sentence) <= 200 else sentence[:200].rsplit(" ", 1)[0] + " …"


def build_page() -> str:
    notes = yaml.safe_load(NOTES.read_text()) if NOTES.exists() else {}
    times = {}
    measured = None
    if TIMES.exists():
        bench = json.loads(TIMES.read_text())
        times = {r["notebook"].removesuffix(".ipynb"): r for r in bench["rows"]}
        m = bench["machine"]
        measured = f"{bench['measured']}, {m['cpu_count']} CPU cores, torch {m['torch']}"
    lines = [
        "# Instructor guide",
        "",
        "Each chapter stands alone: it installs what it needs, seeds everything, and runs top to bottom in a fresh "
        "kernel in under a minute on two CPU cores (or unchanged on a Colab GPU). This page gathers, for each "
        "chapter, what students should be able to do afterwards, what they need first, how long it takes, and "
        "which exercises to assign. It is generated from the chapters (`python scripts/instructor_guide.py`), so "
        "it always matches them.",
        "",
        "**Student versions.** `make student` writes a copy of every chapter into `student/` with the exercise "
        "solutions removed and all outputs cleared; each solution is replaced by an empty cell for the answer. "
        "The exercises themselves, and everything else, stay: the chapters' own from-scratch functions, and the "
        "cells that check them and the students' answers with the attention clinic. A test checks that no "
        "solution text is left and that every student version still runs top to bottom.",
        "",
        "**Checking, grading and hosting.** Coding exercises check themselves ({ref}`guide-clinic`), one command "
        "grades a folder of submitted notebooks ({ref}`guide-grading`), and a class larger than one machine runs "
        "the chapters on a JupyterHub ({ref}`guide-hub`).",
        "",
    ]
    if measured:
        lines += [f"Run times below were measured with `make bench` ({measured}): the whole notebook in a fresh "
                  "kernel, kernel start included.", ""]
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        facts = chapter_facts(path)
        note = notes.get(facts["name"], {})
        lines += [f"## {int(facts['name'][:2])}. {facts['title']}", "",
                  f"[Open the chapter](../notebooks/{facts['name']}.ipynb) · *Prerequisites:* {facts['prerequisites']}"
                  f" · *Reading and working time:* {facts['time']}", ""]
        row = times.get(facts["name"])
        if row:
            top = ", ".join(f"*{c['section']}* (`{c['code']}`, {c['seconds']:.1f} s)"
                            for c in row.get("top_cells", [])[:2])
            extra = ""
            if busy := other_runs(CONTENTION).get(facts["name"]):
                extra += f" With another program keeping one of the two cores busy: {busy['loaded_s']:.0f} s."
            if gpu := other_runs(GPU).get(facts["name"]):
                extra += f" On a GPU ({gpu_name()}): {gpu['seconds']:.0f} s."
            lines += [f"*Measured run time on CPU:* {row['seconds']:.0f} s, peak memory {row['peak_mb']:.0f} MB."
                      + (f" Dominated by: {top}." if top else "") + extra, ""]
        lines += ["**Learning objectives.** After this chapter students can", ""]
        lines += [f"- {o}" for o in facts["objectives"]]
        lines += [""]
        if note.get("notes"):
            lines += [f"**Teaching notes.** {' '.join(note['notes'].split())}", ""]
        suggested = set(note.get("suggested", []))
        lines += ["**Exercises** (★ suggested to assign):", ""]
        for label, sentence in facts["exercises"]:
            star = "★ " if label in suggested else ""
            lines.append(f"- {star}{{numref}}`{label}`: {sentence}")
        lines += [""]
    lines += busy_section() + clinic_section() + grading_section() + hub_section(times) + publishing_section()
    return "\n".join(lines)


def other_runs(path: Path) -> dict[str, dict]:
    """Rows of a results file by chapter name, or nothing when the file is missing."""
    if not path.exists():
        return {}
    return {r["notebook"].removesuffix(".ipynb"): r for r in json.loads(path.read_text())["rows"]}


def gpu_name() -> str:
    data = json.loads(GPU.read_text())
    return data["machine"].get("gpu", "CUDA")


def busy_section() -> list[str]:
    lines = [
        "(guide-busy)=",
        "## Busy machines, class servers and GPUs",
        "",
        "Students' laptops are never idle, and a class server shares its cores. PyTorch starts one thread per core, "
        "and when another program holds one of those cores, its threads wait for the one that lost its core at "
        "every step: on two cores with one other busy program, a training step of chapter 9's model ran 2 to 3 "
        "times slower on two threads than on one (`make bench`, section *Threads under load*). The first cell of "
        "every chapter therefore gives PyTorch one thread per core that other programs leave free, within the "
        "cores the process may use (its CPU affinity and its container's CPU limit), and measures again before "
        "every cell and every second of training (`au.use_cpu_threads`). Students can fix the count with the "
        "environment variable `ATTN_UTILS_THREADS`.",
        "",
    ]
    if CONTENTION.exists():
        data = json.loads(CONTENTION.read_text())
        worst = max(data["rows"], key=lambda r: r["ratio"])
        idle = sum(r["idle_s"] for r in data["rows"])
        loaded = sum(r["loaded_s"] for r in data["rows"])
        lines += [
            f"Measured with `make bench` ({data['measured']}, two cores): every chapter run alone and beside a "
            f"program that keeps one core busy. All thirteen took {idle:.0f} s alone and {loaded:.0f} s beside it "
            f"({loaded / idle:.2f} times as long); the chapter most slowed, "
            f"{worst['notebook'].removesuffix('.ipynb')}, took {worst['ratio']:.2f} times as long. Each chapter's "
            "time is given with its section above.",
            "",
        ]
    if GPU.exists():
        data = json.loads(GPU.read_text())
        lines += [
            f"**On a GPU.** Every chapter also ran unchanged on a CUDA GPU ({gpu_name()}, torch "
            f"{data['machine']['torch']}, {data['measured']}); each chapter's time is given with its section above. "
            f"{data['note']}",
            "",
        ]
    return lines


def clinic_section() -> list[str]:
    from attn_utils import clinic

    checks = [name for name in clinic.__all__ if name.startswith("check_")]
    lines = [
        "(guide-clinic)=",
        "## Exercises that check themselves",
        "",
        "Students who write attention code make the same few bugs, and most of them are silent: the shapes are "
        "right and the loss still falls. The package's clinic, `au.clinic`, runs a student's function against the "
        "package's reference on small edge cases and on random inputs (drawn and shrunk to a smallest failing one "
        "by hypothesis). When the outputs differ, it runs the known wrong versions of the reference on the same "
        "inputs and names the one that matches: it raises `AttentionBug`, whose message says in plain words what "
        "is wrong, shows the smallest input with the expected and the actual output, and says how to fix it. A "
        "function that raises is reported with its exception and the line of the student's code that raised it; "
        "when no known bug matches, the message states the invariant that every correct function of the kind "
        "satisfies and the student's breaks, on the input shown (weights that do not sum to 1 over the keys a query "
        "may see, one sequence's output that moves when another sequence of the batch changes, …). When "
        "the function is right, it prints one line. The checks: "
        + ", ".join(f"`{name}`" for name in checks) + ".",
        "",
        "Every chapter from the third on ends with a **find the bug** exercise: a short function with one of these "
        "bugs, a check cell under it, and the clinic's diagnosis in the solution. In the book the solution defines "
        "the corrected function, so the check passes; in the student version the check fails on the function as "
        "given until the student fixes it. Check cells carry the cell tag `clinic-check` (the grader looks for it) "
        "and, in the student versions, `raises-exception`, so that *Run All* in Jupyter goes on past a check that "
        "still fails (Colab ignores that tag and stops there). From the first exercise on, the student version "
        "calls `au.clinic.exercise_mode()`: a failed check then states only the symptom, on the smallest input, "
        "`au.clinic.hint()` names the bug and a second call gives the fix, so that the check does not solve the "
        "exercise; the grader still records the bug's code. In the text, the chapters also run the clinic on "
        "their own from-scratch functions.",
        "",
        "The bugs the clinic names, with what its message says:",
        "",
        "| code | the bug |",
        "|---|---|",
    ]
    lines += [f"| `{code}` | {what} |" for code, (what, _) in clinic.BUGS.items()]
    return lines + ["", "A difference that none of these explains is reported as `unknown`, with where the outputs "
                        "differ.", ""]


def grading_section() -> list[str]:
    return [
        "(guide-grading)=",
        "## Grading submitted notebooks",
        "",
        "Students submit their student versions with the exercises done, one folder per student "
        "(`submissions/alice/03_attention_scoring.ipynb`, …). From the course repository with its environment "
        "(`make install`), one command runs every submitted notebook top to bottom in a fresh kernel, with a time "
        "limit per notebook, and writes a CSV:",
        "",
        "```bash",
        ".venv/bin/attn-grade submissions/ -o grades.csv --timeout 300 -j 2",
        "# or: make grade SUBMISSIONS=submissions/",
        "```",
        "",
        "The CSV has one row per student, chapter and check, with the columns `student, chapter, exercise, check, "
        "status, bug, detail, seconds, sandbox`. The status is `pass`, `fail` (the clinic named the bug: its "
        "code is in `bug`, its first line in `detail`), `error` (another exception in the check cell, such as a "
        "`NameError`), "
        "`missing` (the student deleted the check cell, or it never ran) or `timeout`. Which checks a chapter has "
        "is read from the chapter in `notebooks/`, not from the submission, so a deleted check cell cannot go "
        "unnoticed. The command also prints each student's passed checks out of the total. The CSV imports into a "
        "spreadsheet or a learning platform's grade book. A notebook that is not JSON, one larger than "
        "`--max-notebook-mb` (64 MiB by default; it is not read) and a kernel that dies (`os._exit`, a signal) "
        "get `error` rows whose `bug` says which (`NotJSONError`, `too-large`, `DeadKernelError`); of a "
        "notebook's outputs the grader keeps 16 MiB, and the rows of one that printed more say so.",
        "",
        "Each notebook runs in a sandbox built by bubblewrap (the sandbox of Flatpak, which `make install` "
        "installs): it sees only the system's programs, the Python, the virtual environment and the package, all "
        "read-only, and a scratch copy of the student's own folder (not the submissions, not the other students); "
        "it gets a private `/tmp` and `/dev/shm`, a `/proc` that shows no other process, no network and no "
        "capabilities, dies with the grader, and is held to limits on memory, CPU seconds, processes, file size "
        "and open files (`attn-grade --help` lists them with their defaults). When you grade as root, each kernel "
        "runs as a user that owns nothing. Where the sandbox cannot be made (no `bwrap`, no user namespaces), "
        "`attn-grade` refuses to grade and says what is missing; `--no-sandbox` is for a throwaway container only. "
        "A check's status is not read from what the notebook printed: the clinic's check runs in a separate "
        "process that runs none of the student's code and calls the student's function through the kernel, "
        "inputs and outputs passed as plain data, so printing a pass line, catching the check's exception or "
        "patching the clinic in the kernel gives `fail`. A helper module next to the notebook, `%run` and magics "
        "work as they do for the student. What still gets through: a function that computes the right answer by "
        "calling the package's reference. Read the code before a grade counts.",
        "",
        "One student cannot hold up the others. Where the machine allows it (as root), each notebook's processes are "
        "held together in cgroups: at most `--processes` of them, `--memory-mb` of memory for all of them, and one "
        "process's share of the CPU however many it starts, all killed when the notebook ends; when memory runs "
        "short, the kernel is the first to go. `/tmp`, `/dev/shm` and the working folder are memory file systems of "
        "`--tmp-mb` MiB each. A student's folder of more than 10,000 files or 256 MiB is not copied "
        "(`too-many-files`), a message from a kernel larger than 128 MiB is never read, and a notebook that sends "
        "one, or more than 256 MiB of output or widget messages in all, is stopped (`too-much-output`). If the "
        "grader itself is "
        "stopped (a crash, Ctrl-C), `--resume` runs the notebooks it was running once more, one at a time after the "
        "rest; one during which it stops again keeps its row `grader-stopped-twice`.",
        "",
        "A class of hundreds: `-j N` grades N notebooks at a time (each kernel holds about 0.5 GB), and "
        "`--resume` reruns only the notebooks the CSV does not grade yet (it is written as each notebook "
        "finishes). On two busy CPU cores, chapter 3 graded at about 3 notebooks a minute with `-j 1` and 4.7 with "
        "`-j 2` (the grader without its sandbox: the same, within the noise of a busy machine); 300 students × 13 "
        "chapters is about 3,900 notebooks, some 14 hours at 4.7 a minute on one such machine, so split the class "
        "over machines. `--shard I/N` grades shard `I` of `N` (from 0): the students whose folder name hashes "
        "(SHA-256) to `I`, the same share on every machine, each student in exactly one shard; "
        "`attn-grade merge OUT.csv IN1.csv IN2.csv ...` combines the shards' CSVs, and stops without writing "
        "anything if a header differs or a student's row is in two of them. With a Slurm array, on a shared "
        "folder that every node sees:",
        "",
        "```bash",
        "#!/bin/bash",
        "#SBATCH --job-name=grade --array=0-15 --cpus-per-task=2 --mem=4G --time=04:00:00",
        "# grade.sbatch: task I of 16 grades its share of the class",
        "cd /course/attention && .venv/bin/attn-grade /course/submissions/ --timeout 300 -j 2 \\",
        "    --shard \"$SLURM_ARRAY_TASK_ID/16\" -o \"grades/part-$SLURM_ARRAY_TASK_ID.csv\" --resume",
        "```",
        "",
        "```bash",
        "mkdir -p grades && jobid=$(sbatch --parsable grade.sbatch)",
        "sbatch --dependency=afterok:$jobid --wrap '.venv/bin/attn-grade merge grades.csv grades/part-*.csv'",
        "```",
        "",
        "A task that fails is rerun alone (`sbatch --array=5 grade.sbatch`; `--resume` keeps what it had graded). "
        "Any batch system that numbers its tasks does the same: a Kubernetes Indexed Job passes "
        "`--shard \"$JOB_COMPLETION_INDEX/16\"`, GNU parallel on one large machine "
        "`parallel attn-grade submissions/ --shard {}/4 -o part-{}.csv ::: 0 1 2 3`.",
        "",
        "**Why not nbgrader or otter-grader.** Both are good tools, and both want the assignments in a format of "
        "their own. nbgrader keeps a source copy of each notebook with its own cell metadata, generates the "
        "released and the autograded versions from it, and keeps a course folder layout and a database; "
        "otter-grader's `otter assign` generates the student and autograder versions from a notebook written in "
        "its own format (question and test cells) and grades with its own test files. Either way each chapter "
        "would exist twice, the book's and the grader's, to keep in step by hand, and their tests say pass or fail "
        "where the clinic names the bug. The course's grader is a small command on nbclient (already in the "
        "course environment): it runs the student versions that `make student` derives from the book itself and "
        "reads what the clinic's check cells printed.",
        "",
    ]


def hub_section(times: dict) -> list[str]:
    lines = [
        "(guide-hub)=",
        "## Running the course on JupyterHub",
        "",
        "A class larger than one machine runs on [JupyterHub](https://jupyter.org/hub), the existing engine for "
        "that: each student gets a Jupyter server of their own on shared machines. For a class of up to about a "
        "hundred students on one server, [The Littlest JupyterHub](https://tljh.jupyter.org) is the simple choice; "
        "for more, or for machines that come and go, [Zero to JupyterHub with "
        "Kubernetes](https://z2jh.jupyter.org).",
        "",
        "**The environment.** Every user needs the course environment: `requirements.txt`, installed from a "
        "checkout of this repository (it ends with `-e .`, the course package), plus `nbgitpuller`. On The "
        "Littlest JupyterHub an administrator installs it into the users' environment with "
        "`sudo -E pip install -r requirements.txt nbgitpuller`; on Kubernetes, build the single-user image from "
        "one of the Jupyter Docker Stacks images with the same `pip install`. On Linux, PyPI's `torch` is a CUDA "
        "build of several gigabytes; on a hub without GPUs, install the same version from PyTorch's CPU index "
        "first (`pip install torch==<version> --index-url https://download.pytorch.org/whl/cpu`, the version "
        "pinned in `requirements.txt`).",
        "",
    ]
    if times:
        heaviest = max(times.values(), key=lambda r: r["peak_mb"])
        longest = max(times.values(), key=lambda r: r["seconds"])
        gigabytes = math.ceil(2 * heaviest["peak_mb"] / 512) / 2
        lines += [
            f"**Resources per student.** Measured with `make bench`: the heaviest chapter, "
            f"{heaviest['notebook'].removesuffix('.ipynb')}, peaks at {heaviest['peak_mb']:.0f} MB in its kernel, "
            f"and the longest, {longest['notebook'].removesuffix('.ipynb')}, runs for {longest['seconds']:.0f} s on "
            f"two CPU cores. A memory limit of {gigabytes:g} GB per student (twice the heaviest kernel's peak, "
            "rounded up to half a gigabyte) leaves room for the Jupyter server and a second chapter left open. "
            "Students run cells in bursts, so a guarantee of one CPU core each, with bursts above it, serves a "
            "class well. Give each server a CPU limit (The Littlest JupyterHub's `limits.cpu`, Kubernetes' "
            "`cpu_limit`): the first cell of every chapter gives PyTorch one thread per core that the limit allows "
            "and that other students leave free, and checks again before every cell, so a busy hub slows a chapter "
            "down instead of stalling it (see {ref}`guide-busy`).",
            "",
        ]
    lines += [
        "**Links that open a chapter on the hub.** Set `launch_buttons.jupyterhub_url` in `_config.yml` to the "
        "hub's address and rebuild the book: every chapter then gets a *JupyterHub* launch button beside Colab's. "
        "The button is an [nbgitpuller](https://nbgitpuller.readthedocs.io) link; you can also write one by hand, "
        "for an assignment page or an email:",
        "",
        "```text",
        "https://HUB/hub/user-redirect/git-pull",
        "    ?repo=REPOSITORY",
        "    &urlpath=tree/NAME/notebooks/CHAPTER.ipynb",
        "    &branch=BRANCH",
        "```",
        "",
        "written on one line without the spaces. `HUB` is the hub's address, `REPOSITORY` the repository's URL "
        "(URL-encoded: `https%3A//github.com/…`), "
        "`NAME` the repository's name (the folder it is cloned into), `CHAPTER` the notebook and `BRANCH` the "
        "branch. With `notebook_interface: jupyterlab` in `_config.yml`, the path starts with `lab/tree/` instead "
        "of `tree/`. The first click clones the repository into the student's home folder; later clicks pull new "
        "commits and merge them without overwriting the student's own changes. To hand out the student versions "
        "rather than the book's chapters, push the output of `make student` to a repository (or a branch) of its "
        "own and point the links at it.",
        "",
    ]
    return lines


def wheel_file() -> str:
    """The file name of the package's wheel that the book publishes (book/_ext/publish_wheel.py)."""
    version = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    assert version, "pyproject.toml: no version line"
    return f"attn_utils-{version.group(1)}-py3-none-any.whl"


def publishing_section() -> list[str]:
    return [
        "(guide-publishing)=",
        "## Publishing the course",
        "",
        "The course's address is one setting: `repository.url` in `_config.yml`. The book's Colab, JupyterHub and "
        "repository buttons follow it when the book is built, and the first cell of every chapter installs the "
        "package from it, so until the repository is online at that address every Colab launch fails. To publish "
        "the course (under your own organisation, say), in a clone of this repository:",
        "",
        "1. **Set the address once.** `python scripts/setup_cells.py --repository https://github.com/OWNER/NAME` "
        "sets `repository.url` in `_config.yml`, rewrites every chapter's setup cell and replaces the old address "
        "in the few other files that name it (the package's upgrade hint, the how-to page's and CONTRIBUTING's "
        "clone commands). Commit the result. Set `repository.branch` by hand if it is not `main`, and "
        "`launch_buttons.jupyterhub_url` if the class has a hub ({ref}`guide-hub`).",
        "2. **Build.** `make book` executes the chapters and builds the book into `_build/html`, with the "
        "package's wheel in `_build/html/wheels/` and the PDF of the whole book, `_build/html/attention-course.pdf`.",
        "3. **Test.** `make test` checks every chapter, the package and the built book (in a browser, offline) "
        "from a fresh clone; publish only what passes.",
        "4. **Deploy the repository.** Push the clone to the address of step 1 (public, so that Colab can clone "
        "it), then open one chapter with its Colab button and run its first cell: it installs the package from "
        "there.",
        "5. **Deploy the site.** Copy the folder `_build/html` as it is to any static web host (GitHub Pages, "
        "the university's web server): the pages need nothing else, no CDN and no server code.",
        "",
        "**Installing the package from the book.** The wheel published with the book lets a class install the "
        "course package from the book's own address, with no package index and no Git: with the book online at "
        f"`https://BOOK`, `pip install \"attn_utils[widgets] @ https://BOOK/wheels/{wheel_file()}\"` (the "
        "extras as each chapter's first cell names them; `wheels/index.html` lists the file). Name the file, "
        "rather than `--find-links` with the package's name, so that pip cannot take a package of the same name "
        "from an index instead. The dependencies (PyTorch, NumPy, Matplotlib) come from the "
        "environment: Colab and a lab machine with the course environment have them. The same command works in "
        "a classroom without internet access if the hub's or the lab's environment was installed beforehand.",
        "",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only check that the page is up to date")
    args = parser.parse_args(argv)
    page = build_page()
    if args.check:
        if not PAGE.exists() or PAGE.read_text() != page:
            print(f"{PAGE} is out of date: run python scripts/instructor_guide.py")
            return 1
        return 0
    PAGE.write_text(page)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
