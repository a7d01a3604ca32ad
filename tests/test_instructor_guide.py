"""The instructor guide is generated from the chapters: the committed page must match them."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[1]
guide = load_script("instructor_guide")


def test_the_committed_guide_is_up_to_date() -> None:
    assert guide.main(["--check"]) == 0, "run: python scripts/instructor_guide.py"


def test_every_chapter_has_objectives_time_prerequisites_and_exercises() -> None:
    page = guide.PAGE.read_text()
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        facts = guide.chapter_facts(path)
        assert f"## {int(path.name[:2])}. {facts['title']}" in page
        assert 3 <= len(facts["objectives"]) <= 6, facts["name"]
        assert facts["time"] != "not given" and re.search(r"\d+ minutes", facts["time"]), facts["name"]
        assert facts["prerequisites"] != "none", facts["name"]
        assert len(facts["exercises"]) >= 4, facts["name"]


def test_suggested_exercises_exist() -> None:
    import yaml

    notes = yaml.safe_load(guide.NOTES.read_text())
    labels = {label for p in (ROOT / "notebooks").glob("*.ipynb") for label, _ in guide.chapter_facts(p)["exercises"]}
    for chapter, note in notes.items():
        assert (ROOT / "notebooks" / f"{chapter}.ipynb").exists(), chapter
        assert set(note["suggested"]) <= labels, (chapter, set(note["suggested"]) - labels)
        assert note["suggested"], chapter
        # References to exercises are cross-references that the book numbers (4.3), never typed numbers.
        assert not re.search(r"\b[Ee]xercises? \d", note.get("notes", "")), (chapter, "a typed exercise number")
        referenced = set(re.findall(r"\{numref\}`(?:[^`<]*<)?(ex-[\w-]+)>?`", note.get("notes", "")))
        assert referenced <= labels, (chapter, referenced - labels)


def test_the_jupyterhub_button_is_configurable_off_by_default_and_documented() -> None:
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["launch_buttons"]["jupyterhub_url"] == ""  # no button until an instructor names a hub
    page = (ROOT / "book" / "instructor_guide.md").read_text()
    for needed in ("launch_buttons.jupyterhub_url", "/hub/user-redirect/git-pull", "&urlpath=tree/NAME/notebooks/",
                   "tljh.jupyter.org", "z2jh.jupyter.org", "attn-grade", "(guide-grading)=", "(guide-clinic)="):
        assert needed in page, needed
