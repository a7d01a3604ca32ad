"""`python scripts/setup_cells.py --repository URL`: the repository's URL is set once and everything follows it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[1]
setup_cells = load_script("setup_cells")


@pytest.fixture
def copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ["_config.yml", "pyproject.toml", *setup_cells.DEPENDENTS]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "notebooks").mkdir()
    shutil.copy(ROOT / "notebooks" / "01_queries_keys_values.ipynb", tmp_path / "notebooks")
    monkeypatch.setattr(setup_cells, "ROOT", tmp_path)
    return tmp_path


def test_the_url_is_set_everywhere(copy: Path) -> None:
    old = setup_cells.repository_url()
    new = "https://github.com/some-university/attention-notes"
    assert setup_cells.main(["--repository", new]) == 0
    assert yaml.safe_load((copy / "_config.yml").read_text())["repository"]["url"] == new
    for name in setup_cells.DEPENDENTS:
        assert old not in (copy / name).read_text(), name
    assert new in (copy / "notebooks" / "01_queries_keys_values.ipynb").read_text()
    assert "cd attention-notes\n" in (copy / "book" / "how_to_use.md").read_text()
    # the comments of _config.yml stay
    assert (copy / "_config.yml").read_text().count("#") == (ROOT / "_config.yml").read_text().count("#")
    assert setup_cells.main(["--check"]) == 0


def test_a_bad_url_is_refused(copy: Path) -> None:
    with pytest.raises(SystemExit):
        setup_cells.main(["--repository", "github.com/x"])
    assert (copy / "_config.yml").read_text() == (ROOT / "_config.yml").read_text()
