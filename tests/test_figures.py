"""The course's diagrams: book/figures/ holds exactly what scripts/draw_figures.py draws, and each figure is usable."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from script_loader import load_script

figures = load_script("draw_figures")
NAMES = list(figures.FIGURES_DRAWN)
SVG = "{http://www.w3.org/2000/svg}"


def test_the_committed_figures_are_up_to_date() -> None:
    assert figures.main(["--check"]) == 0, "run: python scripts/draw_figures.py"


def test_drawing_gives_the_committed_bytes(tmp_path: Path) -> None:
    written = figures.write_all(tmp_path)
    assert sorted(p.name for p in written) == sorted(NAMES)
    for path in written:
        assert path.read_bytes() == (figures.FIGURES / path.name).read_bytes(), path.name


def test_check_fails_on_a_stale_figure(tmp_path: Path) -> None:
    figures.write_all(tmp_path)
    stale = tmp_path / NAMES[0]
    stale.write_bytes(stale.read_bytes().replace(b"</svg>", b"<!-- edited by hand --></svg>"))
    (tmp_path / NAMES[1]).unlink()
    assert figures.outdated(tmp_path) == NAMES[:2]


def test_the_folder_holds_the_drawn_figures_only() -> None:
    assert sorted(p.name for p in figures.FIGURES.iterdir()) == sorted(NAMES)


def test_every_figure_has_alt_text() -> None:
    assert sorted(figures.ALT_TEXT) == sorted(NAMES)
    for name, text in figures.ALT_TEXT.items():
        assert len(text) >= 40, name
        assert text == text.strip() and "  " not in text, name


@pytest.mark.parametrize("name", NAMES)
def test_each_svg_is_valid_small_and_fits_the_column(name: str) -> None:
    path = figures.FIGURES / name
    data = path.read_bytes()
    assert len(data) < 150_000, f"{name}: {len(data)} bytes"
    root = ET.fromstring(data)
    assert root.tag == f"{SVG}svg"
    view_box = [float(v) for v in root.attrib["viewBox"].split()]
    assert len(view_box) == 4 and view_box[2] > 0 and view_box[3] > 0
    width = re.fullmatch(r"([\d.]+)pt", root.attrib["width"])
    assert width, root.attrib["width"]
    assert float(width.group(1)) <= 720, f"{name} is {width.group(1)} pt wide"
    # text is drawn as paths (the same everywhere, no fonts needed), and nothing dates the file
    assert root.find(f".//{SVG}text") is None, name
    assert b"<dc:date>" not in data, name
