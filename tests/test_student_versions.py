"""Student versions: no solution text left, and they still run top to bottom."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from script_loader import load_script

from attn_utils.grading import CHECK_TAG

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


# Running every student version is part of `make test` (scripts/run_tests.py, stage nbval-students): it runs the
# notebooks that for_testing writes. These tests check what those notebooks hold, and that their checks can fail.


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_test_notebook_is_the_student_version_then_the_instructors_exercises(path: Path) -> None:
    original = nbformat.read(path, as_version=4)
    combined = student_versions.for_testing(original)
    student, _ = student_versions.strip_solutions(original)
    start = student_versions.first_exercise(original)
    n_student = len(student.cells) - student_versions.first_exercise(student)
    text, rest = combined.cells[:start], combined.cells[start:]
    # the chapter's text, outputs and all, so that nbval compares them
    def sources_and_outputs(cells: list) -> list:
        return [(c.source, c.get("outputs")) for c in cells]

    assert sources_and_outputs(text) == sources_and_outputs(original.cells[:start])
    # then the instructor's exercises, at the end, outputs and all
    tail = original.cells[start:]
    assert sources_and_outputs(rest[-len(tail) :]) == sources_and_outputs(tail)
    middle = rest[: -len(tail)]
    assert middle[0].source == student_versions.SAVE_RANDOM_STATE
    assert middle[-1].source == student_versions.RESTORE_RANDOM_STATE
    shown = [c for c in middle[1:-1] if c.source != student_versions.ASSERT_NAMED_BUG]
    assert [c.source for c in shown] == [c.source for c in student.cells[-n_student:]]
    checks = [i for i, c in enumerate(middle) if CHECK_TAG in c.metadata.get("tags", [])]
    assert checks or path.name.startswith("01_"), "every chapter from the second on has an exercise check"
    for i in checks:  # each exercise check fails in the student version, and the next cell says how it must fail
        assert "raises-exception" in middle[i].metadata["tags"]
        assert middle[i + 1].source == student_versions.ASSERT_NAMED_BUG
    assert len({c.id for c in combined.cells}) == len(combined.cells)


def test_the_student_version_puts_the_clinic_in_exercise_mode_from_the_first_exercise_on() -> None:
    original = nbformat.read(NOTEBOOKS[2], as_version=4)
    student, _ = student_versions.strip_solutions(original)
    start = student_versions.first_exercise(student)
    assert "{exercise-start}" in student.cells[start].source
    assert student.cells[start + 1].source == student_versions.EXERCISE_MODE["en"]
    assert student.cells[start + 1].source.endswith("au.clinic.exercise_mode()")
    assert sum(c.source == student_versions.EXERCISE_MODE["en"] for c in student.cells) == 1
    chinese, _ = student_versions.strip_solutions(original, "zh_CN")
    assert chinese.cells[start + 1].source == student_versions.EXERCISE_MODE["zh_CN"]
    # the instructor's exercises, run after the student's in the test notebook, print the diagnosis as the chapter does
    assert "exercise_mode(False)" in student_versions.RESTORE_RANDOM_STATE


def _tiny_chapter(starting_code: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell
    md = nbformat.v4.new_markdown_cell
    check = cell("au.clinic.check_masked_softmax(masked_softmax)", metadata={"tags": [CHECK_TAG]})
    return nbformat.v4.new_notebook(cells=[
        md("# Tiny"),
        cell("import torch\n\nimport attn_utils as au\n\nprint(torch.rand(1).item() > -1)"),
        md("```{exercise-start}\n:label: ex-tiny-1\n```\n**Find the bug.**\n```{exercise-end}\n```"),
        cell(starting_code),
        md("```{solution-start} ex-tiny-1\n:class: dropdown\n```"),
        cell("def masked_softmax(X, valid_lens=None):\n    return au.masked_softmax(X, valid_lens)"),
        md("```{solution-end}\n```"),
        check,
    ])


def _run(nb: nbformat.NotebookNode, tmp_path: Path) -> nbformat.NotebookNode:
    client = NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    return nb


BUGGY = """\
def masked_softmax(X, valid_lens=None):
    return torch.softmax(X, dim=-1)  # ignores valid_lens"""


@pytest.mark.slow
def test_the_test_notebook_fails_when_an_exercise_check_does_not(tmp_path: Path) -> None:
    from nbclient.exceptions import CellExecutionError

    # As given, the student's check fails with a named bug, and the instructor's solution passes: the run succeeds.
    good = _run(student_versions.for_testing(_tiny_chapter(BUGGY)), tmp_path)
    assert any("passed" in o.get("text", "") for o in good.cells[-1].outputs)
    # A starting point without a bug: the student's check passes, which the cell after it does not accept.
    correct = "def masked_softmax(X, valid_lens=None):\n    return au.masked_softmax(X, valid_lens)"
    with pytest.raises(CellExecutionError, match="the check should fail with a named bug"):
        _run(student_versions.for_testing(_tiny_chapter(correct)), tmp_path)


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


def test_the_test_notebooks_round_like_another_cpu() -> None:
    # `make test` runs them with ATen's and MKL's AVX2 kernels, chosen in the kernel before torch is imported.
    original = nbformat.read(NOTEBOOKS[0], as_version=4)
    combined = student_versions.for_testing(original, student_versions.OTHER_CPU)
    first = combined.cells[0].source
    assert 'os.environ["ATEN_CPU_CAPABILITY"] = "avx2"' in first
    assert 'os.environ["MKL_ENABLE_INSTRUCTIONS"] = "AVX2"' in first and "torch" not in first
    assert [c.source for c in combined.cells[1:]] == [c.source for c in student_versions.for_testing(original).cells]
