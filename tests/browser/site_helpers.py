"""Paths and facts about the book shared by the browser tests."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
# COURSE_BOOK_HTML: a book built elsewhere (``jupyter-book build --path-output``), with COURSE_BOOK_BUILT=1
HTML = Path(os.environ.get("COURSE_BOOK_HTML", ROOT / "_build" / "html"))
SCREENSHOTS = ROOT / "_build" / "screenshots"

# Chromium is found in one place, the install step's own script (`make install` installs it; nothing here does).
_spec = importlib.util.spec_from_file_location("system_packages", ROOT / "scripts" / "system_packages.py")
assert _spec is not None and _spec.loader is not None
system_packages = sys.modules.setdefault("system_packages", importlib.util.module_from_spec(_spec))
if not hasattr(system_packages, "PROGRAMS"):
    _spec.loader.exec_module(system_packages)  # registered first: its dataclasses look their module up there
CHROMIUM_FLAGS: list[str] = system_packages.CHROMIUM_FLAGS
chromium_executable = system_packages.chromium_executable


def toc_files() -> list[str]:
    """Every page of the book, in the order of _toc.yml (without suffix)."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(entries: list[dict]) -> None:
        for entry in entries:
            if "file" in entry:
                files.append(entry["file"])
            if "glob" in entry:  # e.g. the package reference's pages, book/api/*
                files.extend(sorted(p.relative_to(ROOT).with_suffix("").as_posix()
                                    for p in ROOT.glob(entry["glob"] + ".md")))
            walk(entry.get("sections", []))

    for part in toc.get("parts", []):
        walk(part.get("chapters", []))
    walk(toc.get("chapters", []))
    return files


def book_config() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text())


def source_heading(doc: str) -> str:
    """The first level-1 heading of a page's source (a notebook's markdown or a page's .md), without its # marker."""
    path = ROOT / f"{doc}.ipynb" if doc.startswith("notebooks/") else ROOT / f"{doc}.md"
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text())["cells"]
        text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    else:
        text = path.read_text()
    return next(line[2:].strip() for line in text.splitlines() if line.startswith("# "))


def plain(markdown: str) -> str:
    """Inline Markdown without its emphasis and code marks."""
    return re.sub(r"[*`]", "", markdown)
