"""The static sliders of chapters 2 and 3, read from the notebooks' committed outputs (the pages show them).

Each slider's HTML must embed every frame (it is what lets the slider work offline), describe its image and name its
range input for screen readers, and load nothing from the network.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SLIDERS = {"02_attention_pooling": "width_slider", "03_attention_scoring": "temperature_slider"}


def slider_html(chapter: str, name: str) -> str:
    cells = json.loads((ROOT / "notebooks" / f"{chapter}.ipynb").read_text())["cells"]
    for cell in cells:
        if cell["cell_type"] == "code" and "".join(cell["source"]).startswith(f"{name} = au.static_slider("):
            htmls = ["".join(o["data"]["text/html"]) for o in cell["outputs"] if "text/html" in o.get("data", {})]
            assert len(htmls) == 1, f"{chapter}: the cell of {name} shows {len(htmls)} HTML outputs, expected 1"
            return htmls[0]
    raise AssertionError(f"{chapter}: no cell defines {name} with au.static_slider")


@pytest.mark.parametrize("chapter", sorted(SLIDERS))
def test_every_frame_is_embedded(chapter: str) -> None:
    html = slider_html(chapter, SLIDERS[chapter])
    declared = re.search(r"var frames = new Array\((\d+)\);", html)
    assert declared, "the player's frame count is missing"
    frames = int(declared.group(1))
    assert frames >= 10
    assert html.count("data:image/png;base64") == frames
    assert len(set(re.findall(r"frames\[(\d+)\] = \"data:image/png", html))) == frames


@pytest.mark.parametrize("chapter", sorted(SLIDERS))
def test_the_slider_is_described_and_offline(chapter: str) -> None:
    html = slider_html(chapter, SLIDERS[chapter])
    assert re.search(r'<img id="_anim_img\w+" alt="[^"]{40,}" width="\d+">', html)
    assert re.search(r'<input id="_anim_slider\w+" type="range"[^>]* aria-label="[^"]+"', html)
    assert not re.search(r'(?:src|href)="https?://', html)
    assert html.startswith('<div class="course-slider">')
