"""The configuration of the strict build that renders the committed outputs: _config.yml with execution off."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[1]
book_config = load_script("book_config")


def test_only_the_execution_differs() -> None:
    original = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert original["execute"]["execute_notebooks"] != "off"
    derived = book_config.config(no_execute=True)
    assert derived["execute"].pop("execute_notebooks") == "off"
    original["execute"].pop("execute_notebooks")
    assert derived == original


def test_the_file_must_sit_in_the_root(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        book_config.main(["--no-execute", "-o", str(tmp_path / "config.yml")])
