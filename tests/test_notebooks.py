"""Every chapter notebook follows the course's structure (CONTRIBUTING.md) and is committed executed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest
import yaml
from script_loader import load_script

import attn_utils as au

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
REPO_URL = CONFIG["repository"]["url"]
# The chapters in the order of the book's numbered parts.
CHAPTER_ORDER = [
    Path(entry["file"]).name
    for part in yaml.safe_load((ROOT / "_toc.yml").read_text())["parts"]
    if part.get("numbered")
    for entry in part["chapters"]
]


def load(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def markdown(nb: nbformat.NotebookNode) -> str:
    return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


def code_cells(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]


def toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [c["file"] for c in part.get("chapters", [])]
    files += [c["file"] for c in toc.get("chapters", [])]
    return files


def test_there_are_chapters() -> None:
    assert len(NOTEBOOKS) >= 3


def test_every_notebook_is_in_the_toc_and_every_toc_entry_exists() -> None:
    listed = toc_files()
    assert sorted(f for f in listed if f.startswith("notebooks/")) == [f"notebooks/{p.stem}" for p in NOTEBOOKS]
    for doc in listed:
        assert (ROOT / f"{doc}.md").exists() or (ROOT / f"{doc}.ipynb").exists(), doc


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_executed_and_small(path: Path) -> None:
    nb = load(path)
    nbformat.validate(nb)
    counts = [c.execution_count for c in code_cells(nb)]
    assert counts == list(range(1, len(counts) + 1)), f"execution counts {counts}: re-run in a fresh kernel"
    errors = [o for c in code_cells(nb) for o in c.outputs if o.output_type == "error"]
    assert errors == []
    assert path.stat().st_size < 2_000_000, f"{path.name} is {path.stat().st_size / 1e6:.2f} MB"
    # No page shows a live widget, so no notebook keeps widget state (which would make its page load the 4 MB
    # widget manager); scripts/execute_notebooks.py drops it.
    assert "widgets" not in nb.metadata, f"{path.name} keeps widget state: re-execute it with execute_notebooks.py"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_chapter_structure(path: Path) -> None:
    nb = load(path)
    text = markdown(nb)
    number = int(path.name[:2])
    assert nb.cells[0].cell_type == "markdown"
    # The book numbers the chapters (and their exercises and equations: 4.1, 4.2, ...) from the table of contents,
    # so the title carries no typed number, and the file's number is the chapter's place in the book.
    assert re.match(r"# [^\d\s]", nb.cells[0].source), "the first cell starts with '# <title>', without a number"
    assert CHAPTER_ORDER.index(path.stem) + 1 == number, f"{path.stem} is not chapter {number} of _toc.yml"
    assert re.search(r"\{admonition\} Learning objectives", text), "a Learning objectives admonition"
    assert re.search(r"^#+ Summary\s*$", text, re.MULTILINE), "a Summary section"
    assert re.search(r"^#+ Exercises\s*$", text, re.MULTILINE), "an Exercises section"
    exercises = re.findall(r"\{exercise-start\}\s*\n:label: (\S+)", text)
    solutions = re.findall(r"\{solution-start\} (\S+)\s*\n:class: dropdown", text)
    assert len(exercises) >= 4, f"{len(exercises)} exercises"
    assert sorted(solutions) == sorted(exercises), "every exercise has one solution in a dropdown"
    asserts = sum(c.source.count("assert ") for c in code_cells(nb))
    assert asserts >= 3, "from-scratch code is checked against the package with asserts"


def test_every_setup_cell_is_the_templates() -> None:
    # One template writes every chapter's setup cell (scripts/setup_cells.py): the URL from _config.yml, the version
    # from pyproject.toml, the extras of each chapter.
    assert load_script("setup_cells").main(["--check"]) == 0, "run: python scripts/setup_cells.py"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_setup_cell_installs_where_the_package_is_missing(path: Path) -> None:
    setup_cells = load_script("setup_cells")
    nb = load(path)
    setup = nb.cells[setup_cells.setup_cell_index(nb)].source
    assert code_cells(nb)[0].source == setup, "the setup cell is the first code cell"
    # Not only in Colab: wherever the import fails (Kaggle, VS Code, a downloaded notebook in one's own Jupyter).
    assert setup.startswith("# Setup.") and "try:\n    import attn_utils as au\nexcept ModuleNotFoundError:\n" in setup
    assert "google.colab" not in setup
    urls = re.findall(r'^    REPO = "(\S+)"$', setup, re.MULTILINE)
    assert urls == [REPO_URL], f"the setup cell installs from {urls}, _config.yml says {REPO_URL}"
    pattern = r'^    %pip install --quiet "attn_utils(?:\[([\w,]+)\])? @ git\+\{REPO\}"$'
    install = re.search(pattern, setup, re.MULTILINE)
    assert install, setup
    # The environment is checked against the version of the package the chapters are written for, with the extras
    # that the cell installs (chapter 11 needs "pretrained", for example).
    required = re.findall(r'au\.setup_notebook\("([^"]+)"(?:, extras=\(([^)]*)\))?\)', setup)
    assert required and required[0][0] == au.__version__, required
    installed_extras = set(install.group(1).split(",")) if install.group(1) else set()
    checked_extras = set(re.findall(r'"(\w+)"', required[0][1]))
    assert installed_extras == checked_extras, (installed_extras, checked_extras)
    uses_widgets = any("live_slider" in c.source for c in code_cells(nb))
    assert uses_widgets == ("widgets" in checked_extras), "a chapter with a live slider installs ipywidgets"


DRAW_ON_DEVICE = re.compile(r"torch\.(randn|rand|randint|randperm|normal)\((?:[^()]|\([^()]*\))*device=")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_random_numbers_are_drawn_on_the_cpu(path: Path) -> None:
    # A draw on a GPU uses the GPU's generator: other numbers than on a CPU, and the outputs would differ there.
    found = [m.group(0)[:80] for c in code_cells(load(path)) for m in DRAW_ON_DEVICE.finditer(c.source)]
    assert found == [], f"draw on the CPU, then move to the device: {found}"


def test_the_device_draw_check_catches_one() -> None:
    assert DRAW_ON_DEVICE.search("x = torch.randn(B, T, D, device=device)")
    assert DRAW_ON_DEVICE.search("x = torch.randint(0, 20, (B, T), device=device)")
    assert not DRAW_ON_DEVICE.search("x = torch.randn(B, T, D).to(device)")


def ignores_output(cell: nbformat.NotebookNode) -> bool:
    return "nbval-ignore-output" in cell.get("metadata", {}).get("tags", [])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_ignored_outputs_are_followed_by_asserts(path: Path) -> None:
    cells = code_cells(load(path))
    assert any(ignores_output(c) for c in cells) or path.name.startswith("00"), "no cell is tagged: check the tag name"
    for i, cell in enumerate(cells):
        # A live slider only shows a widget; every other ignored output is checked by an assert soon after it
        # (a plotting cell may come in between).
        if ignores_output(cell) and "live_slider" not in cell.source:
            following = "".join(c.source for c in cells[i + 1 : i + 4])
            assert "assert" in following or "assert" in cell.source, (
                f"cell {cell.execution_count}: its output is ignored by nbval and no assert checks it"
            )


# Talk about how the course is tested belongs in CONTRIBUTING.md and the instructor guide, not in what a student
# reads: markdown cells and the lines of code cells. Nor do "the seeds" (the notes the course grew from) appear;
# random seeds are fine.
HARNESS_TALK = re.compile(
    r"nbval|harness|sanitis|re-?execut\w* (?:by|in) (?:the )?tests?|test suite|"
    r"other CPUs?|another CPU|instruction sets?|floating-point (?:arithmetic|settings?)|"
    r"OMP_NUM_THREADS|ATEN_CPU|MKL_ENABLE|text wrong|"
    r"(?<!random )(?<!fix )(?<!set )(?<!the same )\bthe seeds\b|\bseeds'",
    re.IGNORECASE,
)


def harness_talk(nb: nbformat.NotebookNode) -> list[str]:
    found = []
    for index, cell in enumerate(nb.cells):
        for line in cell.source.splitlines():
            if cell.cell_type in ("markdown", "code") and HARNESS_TALK.search(line):
                found.append(f"cell {index} ({cell.cell_type}): {line.strip()[:100]}")
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_harness_talk_in_what_students_read(path: Path) -> None:
    assert harness_talk(load(path)) == []


@pytest.mark.parametrize(
    "line",
    [
        "# NBVAL_IGNORE_OUTPUT",
        "The output is sanitised before it is compared.",
        "On other CPUs the last digits differ.",
        "so that a change in the results cannot leave the text wrong",
        "The seeds call this add & norm.",
        "the seeds' transpose_qkv",
        "in one of the floating-point settings we tried",
    ],
)
def test_the_harness_talk_check_catches_each_kind(line: str) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(line)])
    assert harness_talk(nb), line


def test_the_harness_talk_check_allows_random_seeds_and_rounding() -> None:
    text = "We fix the random seeds. Float32 rounding makes the sums differ by 1e-7. We set the seeds again."
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(text), nbformat.v4.new_code_cell("x = 1")])
    assert harness_talk(nb) == []


def test_exercise_labels_are_unique_across_the_book() -> None:
    labels = [lab for p in NOTEBOOKS for lab in re.findall(r":label: (\S+)", markdown(load(p)))]
    assert len(labels) == len(set(labels)), sorted({lab for lab in labels if labels.count(lab) > 1})


def test_notebooks_are_plain_json_with_a_python_kernel() -> None:
    for path in NOTEBOOKS:
        nb = json.loads(path.read_text())
        assert nb["metadata"]["kernelspec"]["name"] == "python3", path.name


def test_time_estimates_follow_the_chapters_content() -> None:
    # Each chapter's "*Time:*" line is computed from its words, code and exercises (scripts/time_estimates.py).
    estimates = load_script("time_estimates")
    assert estimates.main(["--check"]) == 0, "run: python scripts/time_estimates.py --write"


def test_time_estimates_count_prose_code_and_exercises(tmp_path: Path) -> None:
    estimates = load_script("time_estimates")
    cells = [
        nbformat.v4.new_markdown_cell("# 1. T\n\n" + "word " * 1200 + "$x + y$"),  # math is not counted
        nbformat.v4.new_code_cell("# a comment\n" + "x = 1\n" * 50),
        nbformat.v4.new_markdown_cell("```{exercise-start}\n:label: ex-1\n```\n" + "hard " * 500),
        nbformat.v4.new_markdown_cell("```{exercise-end}\n```"),
        nbformat.v4.new_markdown_cell("```{solution-start} ex-1\n:class: dropdown\n```\n" + "easy " * 500),
        nbformat.v4.new_code_cell("y = 2\n" * 30),  # solution code is part of the exercise's time
        nbformat.v4.new_markdown_cell("```{solution-end}\n```"),
    ]
    path = tmp_path / "01_t.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    assert estimates.content(path) == {"words": 1201, "code_lines": 50, "exercises": 1}
    # 1201 words / 120 + 50 lines * 12 s = 10.0 + 10.0 minutes; one exercise = 15 minutes
    assert estimates.estimate(path) == (20, 15)
