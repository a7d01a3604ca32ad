"""Sphinx extension: the front page's list of chapters, generated from ``_toc.yml``, so that it cannot fall behind.

```{chapter-list}
```

writes, for every numbered part of the table of contents, the part's number and caption and its chapters, in order,
each a link (the chapter's own title) followed by its one-line summary from ``book/instructor_notes.yml`` (the key
``summary``). A chapter of the table of contents without a summary fails the build, so a new chapter appears on the
front page as soon as it is in the book.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util.docutils import SphinxDirective

ROOT = Path(__file__).resolve().parents[2]
TOC = ROOT / "_toc.yml"
NOTES = ROOT / "book" / "instructor_notes.yml"
ROMAN = ["I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX", "X"]


def numbered_parts(toc: dict[str, Any] | None = None) -> list[tuple[str, list[str]]]:
    """The numbered parts of the table of contents: ``[(caption, [chapter file, ...]), ...]`` in order.

    >>> numbered_parts({"parts": [{"caption": "Preface", "chapters": [{"file": "book/notation"}]},
    ...                           {"caption": "Basics", "numbered": 1, "chapters": [{"file": "notebooks/01_a"}]}]})
    [('Basics', ['notebooks/01_a'])]
    """
    toc = yaml.safe_load(TOC.read_text()) if toc is None else toc
    return [(part["caption"], [c["file"] for c in part.get("chapters", [])])
            for part in toc.get("parts", []) if part.get("numbered")]


def chapter_list_markdown(parts: list[tuple[str, list[str]]], summaries: dict[str, str]) -> str:
    """The MyST source of the list: a paragraph per part, then its chapters numbered on from the previous part's.

    >>> print(chapter_list_markdown([("Basics", ["notebooks/01_a"]), ("More", ["notebooks/02_b"])],
    ...                             {"01_a": "the start.", "02_b": "the rest."}))
    **Part I: Basics**
    <BLANKLINE>
    1. {doc}`/notebooks/01_a`: the start.
    <BLANKLINE>
    **Part II: More**
    <BLANKLINE>
    2. {doc}`/notebooks/02_b`: the rest.
    <BLANKLINE>
    """
    lines: list[str] = []
    number = 0
    for index, (caption, chapters) in enumerate(parts):
        lines += [f"**Part {ROMAN[index]}: {caption}**", ""]
        for file in chapters:
            number += 1
            name = Path(file).name
            if name not in summaries:
                raise ExtensionError(
                    f"chapter-list: {file} is in _toc.yml but has no summary in {NOTES.relative_to(ROOT)}; "
                    f"add `{name}:` with `summary: <one line>`"
                )
            lines.append(f"{number}. {{doc}}`/{file}`: {' '.join(summaries[name].split())}")
        lines.append("")
    return "\n".join(lines)


def summaries() -> dict[str, str]:
    notes = yaml.safe_load(NOTES.read_text()) or {}
    return {name: note["summary"] for name, note in notes.items() if isinstance(note, dict) and "summary" in note}


class ChapterList(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        self.env.note_dependency(str(TOC))
        self.env.note_dependency(str(NOTES))
        container = nodes.container(classes=["course-chapter-list"])
        source = chapter_list_markdown(numbered_parts(), summaries())
        self.state.nested_parse(StringList(source.splitlines(), source=self.env.docname), self.content_offset,
                                container)
        return [container]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("chapter-list", ChapterList)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
