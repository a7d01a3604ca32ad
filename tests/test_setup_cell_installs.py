"""A chapter downloaded to a Jupyter without attn_utils installs the package in its setup cell, and then runs.

The test builds a wheel of this checkout, makes a fresh virtual environment that sees the course environment's
packages (torch, matplotlib, scikit-learn, ipykernel, ...) but not attn_utils, and runs a chapter's setup cell there in
a Jupyter kernel of that environment. The repository's URL is not reachable from a test, so the cell's
``git+{REPO}`` is replaced by the wheel's path; everything else in the cell runs as a reader's would, ``%pip`` included.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from script_loader import load_script

import attn_utils as au

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "notebooks" / "10_vision_transformer.ipynb"  # a chapter with an extra (scikit-learn)


def _without_attn_utils(site_packages: Path, target: Path) -> Path:
    """A folder of links to everything installed in ``site_packages`` except attn_utils (its code and metadata)."""
    target.mkdir()
    for entry in site_packages.iterdir():
        name = entry.name.lower()
        if "attn_utils" in name or name.endswith(".pth") or name == "__pycache__":
            continue
        (target / entry.name).symlink_to(entry)
    return target


def _wheel(tmp: Path) -> Path:
    """A wheel of this checkout's attn_utils, built from a copy (an in-tree build would write build/ here)."""
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "attn_utils", src / "attn_utils", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "-w", str(out), str(src)], check=True, capture_output=True)
    (wheel,) = out.glob("attn_utils-*.whl")
    return wheel


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_downloaded_chapter_installs_the_package_and_runs(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    env_dir = tmp_path / "fresh"
    # No pip or setuptools of its own: the course environment's (seen through the .pth below) install into it.
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    fresh_site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                     check=True, capture_output=True, text=True).stdout.strip())
    visible = _without_attn_utils(Path(sysconfig.get_path("purelib")), tmp_path / "course-packages")
    (fresh_site / "course-packages.pth").write_text(f"{visible}\n")

    # A Jupyter kernel of the fresh environment, found through JUPYTER_PATH.
    spec = tmp_path / "jupyter" / "kernels" / "fresh"
    spec.mkdir(parents=True)
    argv = [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "fresh", "language": "python"}))

    setup_cells = load_script("setup_cells")
    chapter = nbformat.read(CHAPTER, as_version=4)
    setup = chapter.cells[setup_cells.setup_cell_index(chapter)].source
    assert "git+{REPO}" in setup
    setup = setup.replace("git+{REPO}", f"{wheel.as_uri()}")
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import importlib.util\nprint(importlib.util.find_spec('attn_utils'))"),
        nbformat.v4.new_code_cell(setup),
        nbformat.v4.new_code_cell("print(au.__file__)\nprint(au.__version__, device.type)\n"
                                  "import sklearn\nprint(au.load_digits_split(seed=0).train.images.shape)"),
    ])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "VIRTUAL_ENV"))}
    env.update(JUPYTER_PATH=str(tmp_path / "jupyter"), PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               PYTHONNOUSERSITE="1", ATTN_UTILS_THREADS="1")
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        NotebookClient(nb, timeout=300, kernel_name="fresh", resources={"metadata": {"path": str(tmp_path)}}).execute()
    finally:
        os.environ.clear()
        os.environ.update(old)

    def text(cell: nbformat.NotebookNode) -> str:
        return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")

    assert text(nb.cells[0]).strip() == "None"  # attn_utils was not importable before the setup cell
    assert f"attn_utils {au.__version__}, torch" in text(nb.cells[1])
    location, version, shape = text(nb.cells[2]).splitlines()[:3]
    assert Path(location).is_relative_to(fresh_site), location  # installed into the fresh environment, from the wheel
    assert version.split() == [au.__version__, "cpu"] or version.split()[0] == au.__version__
    assert shape.startswith("torch.Size(["), shape
