"""Student versions: no solution text left, and they still run top to bottom."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

student_versions = load_script("make_student_versions")


def solution_lines(nb: nbformat.NotebookNode) -> list[str]:
    """Distinctive lines of every solution (markdown and code between solution-start and solution-end)."""
    lines, inside = [], False
    for cell in nb.cells:
        src = cell.source
        if re.search(r"\{solution-start\}", src):
            inside = True
        if inside:
            body = src.split("{solution-start}")[-1].split("```{solution-end}")[0]
            lines += [ln.strip() for ln in body.splitlines() if len(ln.strip()) >= 25 and "solution" not in ln]
        if re.search(r"\{solution-end\}", src):
            inside = False
    return lines


@pytest.fixture(scope="module")
def student_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("student")
    assert student_versions.main(["-o", str(out), *map(str, NOTEBOOKS)]) == 0
    return out


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_solution_text(path: Path, student_dir: Path) -> None:
    original = nbformat.read(path, as_version=4)
    student = nbformat.read(student_dir / path.name, as_version=4)
    text = "\n".join(c.source for c in student.cells)
    assert "{solution-start}" not in text and "{solution-end}" not in text
    hidden = solution_lines(original)
    assert hidden, "the chapter has solutions with text to hide"
    leaked = [ln for ln in hidden if ln in text]
    # A solution may quote a line of the chapter (e.g. re-run a cell); anything else must be gone.
    chapter_text = "\n".join(c.source for c in original.cells if "solution" not in c.source)
    assert [ln for ln in leaked if ln not in chapter_text] == []
    exercises = len(re.findall(r"\{exercise-start\}", text))
    assert exercises == len(re.findall(r"\{exercise-start\}", "\n".join(c.source for c in original.cells)))
    assert all(not c.get("outputs") for c in student.cells if c.cell_type == "code")


def check_cells(nb: nbformat.NotebookNode) -> list[tuple[bool, nbformat.NotebookNode]]:
    """The clinic's check cells, each with whether it belongs to an exercise (comes after the first one)."""
    cells, in_exercises = [], False
    for cell in nb.cells:
        in_exercises |= cell.cell_type == "markdown" and "{exercise-start}" in cell.source
        if cell.cell_type == "code" and "clinic-check" in cell.metadata.get("tags", []):
            cells.append((in_exercises, cell))
    return cells


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_check_cells_stay_and_let_run_all_go_on(path: Path, student_dir: Path) -> None:
    original = check_cells(nbformat.read(path, as_version=4))
    student = check_cells(nbformat.read(student_dir / path.name, as_version=4))
    assert [c.source for _, c in student] == [c.source for _, c in original]
    for _, cell in student:
        assert "au.clinic.check_" in cell.source
        assert "raises-exception" in cell.metadata["tags"]  # Jupyter's Run All goes on past a failing check


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_student_version_runs(path: Path, student_dir: Path) -> None:
    nb = nbformat.read(student_dir / path.name, as_version=4)
    # Only the check cells (tagged raises-exception) may raise; any other error fails the run.
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(student_dir)}}).execute()
    assert any(c.get("outputs") for c in nb.cells if c.cell_type == "code")
    for in_exercise, cell in check_cells(nb):
        errors = [o for o in cell.outputs if o.output_type == "error"]
        text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
        if not in_exercise:  # the chapter's own functions pass
            assert errors == [] and ": passed (" in text, cell.source
        else:  # an exercise's starting point fails, with a bug the clinic can name, until the student fixes it
            assert [e.ename for e in errors] == ["AttentionBug"], cell.source
            assert "[bug: unknown]" not in errors[0].evalue, errors[0].evalue


def answer_with_the_solution(student: nbformat.NotebookNode, original: nbformat.NotebookNode, label: str) -> None:
    """Write the last code cell of exercise ``label``'s solution into the student's empty answer cell."""
    inside, solution = False, None
    for cell in original.cells:
        if cell.cell_type == "markdown" and re.search(rf"\{{solution-start\}}\s+{label}\b", cell.source):
            inside = True
        elif inside and cell.cell_type == "markdown" and "{solution-end}" in cell.source:
            break
        elif inside and cell.cell_type == "code":
            solution = cell.source
    assert solution, label
    after = False
    for cell in student.cells:
        after |= cell.cell_type == "markdown" and f":label: {label}" in cell.source
        if after and cell.cell_type == "code" and cell.source == "# your code here":
            cell.source = solution
            return
    raise AssertionError(f"no answer cell after exercise {label}")


@pytest.mark.slow
def test_the_grader_tells_a_fixed_student_version_from_one_left_as_given(student_dir: Path, tmp_path: Path) -> None:
    from attn_utils import grading

    name = "03_attention_scoring.ipynb"
    original = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    label = re.search(r":label: (\S+)\s*\n```\s*\n\*\*Find the bug", markdown_of(original)).group(1)
    fixed = nbformat.read(student_dir / name, as_version=4)
    answer_with_the_solution(fixed, original, label)
    for student, nb in (("alice", fixed), ("bob", nbformat.read(student_dir / name, as_version=4))):
        (tmp_path / "submissions" / student).mkdir(parents=True)
        nbformat.write(nb, tmp_path / "submissions" / student / name)
    rows = grading.grade(tmp_path / "submissions", ROOT / "notebooks", timeout=300)
    found = {(r.student, r.exercise, r.check): (r.status, r.bug) for r in rows}
    assert found[("alice", label, "check_masked_softmax")] == ("pass", "")
    assert found[("bob", label, "check_masked_softmax")] == ("fail", "empty-row-uniform")
    assert {r.status for r in rows if r.student == "alice"} == {"pass"}


def markdown_of(nb: nbformat.NotebookNode) -> str:
    return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
