"""Write student versions of the chapter notebooks: the same chapters with every exercise solution removed.

    python scripts/make_student_versions.py            # every chapter -> student/
    python scripts/make_student_versions.py -o handout notebooks/02_attention_pooling.ipynb

A solution is everything from the markdown cell that opens it (a ``{solution-start}`` directive) to the cell that
closes it (``{solution-end}``), code cells in between included. Each solution is replaced by a short note and an empty
code cell for the student's answer. Every remaining code cell keeps its source but loses its outputs, so students run
the notebook themselves; the exercises stay as they are. A clinic check cell (tagged ``clinic-check``) also gets the
tag ``raises-exception``, so that Jupyter's Run All goes on past a check that fails; ``attn_utils.grading`` reads what
the checks said in the notebooks students submit.
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


def strip_solutions(nb: nbformat.NotebookNode) -> tuple[nbformat.NotebookNode, int]:
    """Return a copy of ``nb`` without solutions and without outputs, and the number of solutions removed."""
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
            cells.append(nbformat.v4.new_markdown_cell(PLACEHOLDER))
            cells.append(nbformat.v4.new_code_cell("# your code here"))
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path, help="chapters (default: notebooks/*.ipynb)")
    parser.add_argument("-o", "--output", type=Path, default=ROOT / "student", help="output folder (default: student/)")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    args.output.mkdir(parents=True, exist_ok=True)
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        student, removed = strip_solutions(nb)
        target = args.output / path.name
        nbformat.write(student, target)
        print(f"{target}: {removed} solutions removed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
