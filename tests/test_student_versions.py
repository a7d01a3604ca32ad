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


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_student_version_runs(path: Path, student_dir: Path) -> None:
    nb = nbformat.read(student_dir / path.name, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(student_dir)}}).execute()
    assert any(c.get("outputs") for c in nb.cells if c.cell_type == "code")
