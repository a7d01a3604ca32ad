"""Write student versions of the chapter notebooks: the same chapters with every exercise solution removed.

    python scripts/make_student_versions.py            # every chapter -> student/
    python scripts/make_student_versions.py -o handout notebooks/02_attention_pooling.ipynb
    python scripts/make_student_versions.py --language zh_CN -o student-zh   # from the Chinese chapters (zh/)

A solution is everything from the markdown cell that opens it (a ``{solution-start}`` directive) to the cell that
closes it (``{solution-end}``), code cells in between included. Each solution is replaced by a short note and an empty
code cell for the student's answer. Every remaining code cell keeps its source but loses its outputs, so students run
the notebook themselves; the exercises stay as they are. A clinic check cell (tagged ``clinic-check``) also gets the
tag ``raises-exception``, so that Jupyter's Run All goes on past a check that fails; ``attn_utils.grading`` reads what
the checks said in the notebooks students submit. After the cell that opens the first exercise comes one more code
cell, ``au.clinic.exercise_mode()``: from there on a failed check states the symptom and keeps the bug's name for
``au.clinic.hint()``, so that a find-the-bug exercise is not solved by its check's first message.

    python scripts/make_student_versions.py --for-testing -o _build/student-check   # what `make test` runs

``--for-testing`` writes, for each chapter, the notebook that `make test` runs once to test both the student
version and the instructor's exercises, with the rounding of another CPU (AVX2 kernels): the student version as a
student gets it (its check cells expected to fail,
each followed by a cell that asserts that the clinic named the bug), then the instructor's exercises and solutions,
from the random state the chapter's text left. The cells shared with the chapter keep its committed outputs, so nbval
compares them. See `for_testing`.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

from attn_utils.grading import CHECK_TAG  # the grader finds the check cells by the same tag

ROOT = Path(__file__).resolve().parents[1]
START = re.compile(r"^[`:]{3,}\s*\{solution-start\}", re.MULTILINE)
END = re.compile(r"^[`:]{3,}\s*\{solution-end\}", re.MULTILINE)
ALLOW_ERRORS_TAG = "raises-exception"  # Run All goes on past a check that fails
PLACEHOLDER = "**Your solution.** (The worked solution is in the instructor's version of this chapter.)"
PLACEHOLDERS = {"en": PLACEHOLDER, "zh_CN": "**你的解答。**（完整的解答在本章的教师版中。）"}
CODE_PLACEHOLDERS = {"en": "# your code here", "zh_CN": "# 在这里写你的代码"}
SOURCES = {"en": ROOT / "notebooks", "zh_CN": ROOT / "zh" / "notebooks"}  # the Chinese notebooks: translations.py
EXERCISE_MODE = {
    "en": "# from here on, a failed check shows the symptom; au.clinic.hint() then names the bug,\n"
          "# and a second au.clinic.hint() gives the fix\nau.clinic.exercise_mode()",
    "zh_CN": "# 从这里起，检查失败时先显示症状；au.clinic.hint() 再指出 bug，\n"
             "# 第二次调用 au.clinic.hint() 给出修正方法\nau.clinic.exercise_mode()",
}


def strip_solutions(nb: nbformat.NotebookNode, language: str = "en") -> tuple[nbformat.NotebookNode, int]:
    """Return a copy of ``nb`` without solutions and without outputs, and the number of solutions removed (the note
    that replaces each solution in ``language``: "en" or "zh_CN")."""
    cells = []
    inside = False
    removed = 0
    for cell in nb.cells:
        text = cell.source if cell.cell_type == "markdown" else ""
        opens, closes = bool(START.search(text)), bool(END.search(text))
        if not inside and opens:
            removed += 1
            before = text[: START.search(text).start()].rstrip()  # type: ignore[union-attr]
            if before:  # text in the same cell before the solution (e.g. the exercise) stays
                cells.append(nbformat.v4.new_markdown_cell(before))
            cells.append(nbformat.v4.new_markdown_cell(PLACEHOLDERS[language]))
            cells.append(nbformat.v4.new_code_cell(CODE_PLACEHOLDERS[language]))
            inside = not (closes and END.search(text).start() > START.search(text).start())  # type: ignore[union-attr]
            if not inside:
                after = text[END.search(text).end() :].split("\n", 1)[-1].strip()  # type: ignore[union-attr]
                if after:
                    cells.append(nbformat.v4.new_markdown_cell(after))
            continue
        if inside:
            if closes:
                inside = False
                after = text[END.search(text).end() :].split("\n", 1)[-1].strip()  # type: ignore[union-attr]
                if after:
                    cells.append(nbformat.v4.new_markdown_cell(after))
            continue
        cells.append(cell)
    if inside:
        raise ValueError("a {solution-start} has no matching {solution-end}")
    first = next((i for i, c in enumerate(cells) if c.cell_type == "markdown" and "{exercise-start}" in c.source), None)
    if first is not None:
        cells.insert(first + 1, nbformat.v4.new_code_cell(EXERCISE_MODE[language]))
    out = nbformat.from_dict(nb)
    out.cells = []
    for cell in cells:
        cell = nbformat.from_dict(cell)
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
            tags = list(cell.metadata.get("tags", []))
            if CHECK_TAG in tags and ALLOW_ERRORS_TAG not in tags:
                cell.metadata["tags"] = [*tags, ALLOW_ERRORS_TAG]
        out.cells.append(cell)
    out.metadata.pop("widgets", None)  # widget state belongs to the executed outputs
    return out, removed


# The cells that `for_testing` adds. They run in the test only; no reader sees them.
SAVE_RANDOM_STATE = """\
import random as _random
import sys as _sys

import numpy as _np
import torch as _torch

_saved_random_state = (_random.getstate(), _np.random.get_state(), _torch.get_rng_state(),
                       _torch.cuda.get_rng_state_all() if _torch.cuda.is_available() else None)
_sys.last_value = _sys.last_exc = None  # the last error IPython saw: each check below must raise its own"""
ASSERT_NAMED_BUG = """\
_error = getattr(_sys, "last_value", None)
assert type(_error).__name__ == "AttentionBug", f"the check should fail with a named bug, got {_error!r}"
assert _error.bug not in ("unknown", "function-raised") and "[bug: unknown]" not in str(_error), str(_error)
_sys.last_value = _sys.last_exc = None"""
RESTORE_RANDOM_STATE = """\
import attn_utils.clinic as _clinic

_clinic.exercise_mode(False)  # the instructor's exercises print the diagnosis as the chapter shows it
_random.setstate(_saved_random_state[0])
_np.random.set_state(_saved_random_state[1])
_torch.set_rng_state(_saved_random_state[2])
if _saved_random_state[3] is not None:
    _torch.cuda.set_rng_state_all(_saved_random_state[3])"""
TEST_TAGS = ("nbval-ignore-output",)
OTHER_CPU = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
"""The rounding of another CPU: ATen's and MKL's AVX2 kernels, chosen before torch is imported."""


def environment_cell(env: dict[str, str]) -> nbformat.NotebookNode:
    """A first cell that sets environment variables in the kernel before anything imports torch."""
    lines = ["import os", ""] + [f"os.environ[{k!r}] = {v!r}" for k, v in env.items()]
    return nbformat.v4.new_code_cell("\n".join(lines).replace("'", '"'))


def first_exercise(nb: nbformat.NotebookNode) -> int:
    """The index of the cell that opens the first exercise (the chapter's text is everything before it)."""
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown" and "{exercise-start}" in cell.source:
            return index
    raise ValueError("no {exercise-start}: the chapter has no exercises")


def for_testing(nb: nbformat.NotebookNode, env: dict[str, str] | None = None) -> nbformat.NotebookNode:
    """The chapter's text, then its student exercises, then its instructor exercises: one run tests both versions.

    * The chapter's text (every cell before the first exercise), with its committed outputs: the student version has
      the same cells, so one execution checks both, and nbval compares the outputs.
    * The student version's exercises as a student gets them, outputs not compared; after each clinic check cell
      (all of them fail there: the student has not fixed the bug yet), a cell asserts that the clinic named the bug.
    * The instructor's exercises and solutions, with their committed outputs compared, run from the random state
      that the text left (saved before the student exercises and restored after them).

    What the instructor's exercises would do in a fresh kernel, they do here: the student's exercise cells are the
    instructor's starting code and checks, which the instructor's exercises run again. A plain run of every chapter
    (`make nbval`) runs them in a fresh kernel as well.

    With ``env``, a first cell sets these environment variables in the kernel (``OTHER_CPU``: another CPU's rounding).
    """
    start = first_exercise(nb)
    student, _ = strip_solutions(nb)
    text = [nbformat.from_dict(c) for c in nb.cells[:start]]
    s_start = first_exercise(student)
    if [c.source for c in student.cells[:s_start]] != [c.source for c in text]:
        raise ValueError("the student version's text differs from the chapter's (a solution before the exercises?)")
    cells = ([environment_cell(env)] if env else []) + list(text)
    cells.append(nbformat.v4.new_code_cell(SAVE_RANDOM_STATE, metadata={"tags": list(TEST_TAGS)}))
    for index, cell in enumerate(student.cells[s_start:]):
        cell = nbformat.from_dict(cell)
        cell.id = f"student-{index}"  # the instructor's copy of the same cell comes later, with its own id
        if cell.cell_type == "code":
            cell.metadata["tags"] = sorted({*cell.metadata.get("tags", []), *TEST_TAGS})
        cells.append(cell)
        if cell.cell_type == "code" and CHECK_TAG in cell.metadata.get("tags", []):
            cells.append(nbformat.v4.new_code_cell(ASSERT_NAMED_BUG))
    cells.append(nbformat.v4.new_code_cell(RESTORE_RANDOM_STATE))
    cells += [nbformat.from_dict(c) for c in nb.cells[start:]]
    out = nbformat.from_dict(nb)
    out.cells = cells
    out.metadata.pop("widgets", None)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path, help="chapters (default: notebooks/*.ipynb)")
    parser.add_argument("-o", "--output", type=Path, default=ROOT / "student", help="output folder (default: student/)")
    parser.add_argument("--language", choices=sorted(SOURCES), default="en",
                        help="en (default) or zh_CN: the Chinese chapters of zh/notebooks, with Chinese notes")
    parser.add_argument("--for-testing", action="store_true",
                        help="write the notebooks that test the student versions and the exercises (see for_testing)")
    args = parser.parse_args(argv)
    if args.for_testing and args.language != "en":
        parser.error(f"--for-testing: tests the English chapters (the Chinese ones have the same code), got "
                     f"--language {args.language}")
    paths = args.notebooks or sorted(SOURCES[args.language].glob("*.ipynb"))
    args.output.mkdir(parents=True, exist_ok=True)
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        target = args.output / path.name
        if args.for_testing:
            nbformat.write(for_testing(nb, OTHER_CPU), target)
            continue
        student, removed = strip_solutions(nb, args.language)
        nbformat.write(student, target)
        print(f"{target}: {removed} solutions removed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
