"""The prose budget of every chapter (CONTRIBUTING.md, "Say less, show more: the shape of a chapter").

    python scripts/prose_budget.py            # a table: every chapter's counts, and what is over its budget
    python scripts/prose_budget.py --strict   # the same, and exit 1 when a chapter is over its budget
    python scripts/prose_budget.py notebooks/02_attention_pooling.ipynb

For every chapter it counts the prose words of its main text (everything before its "Studies" and "Exercises"
sections), of its studies and of its exercises (with their solutions); the learning objectives (the bullets of its
"Learning objectives" admonition); and the largest number of glued values in one paragraph of the main text.
Prose words are the words a reader reads as sentences: code cells, maths (``$...$``, ``$$...$$``, ``{math}``
blocks), inline code, MyST roles (``{numref}`...```, ``{glue:text}`...```), directive lines and their options, HTML
tags, link targets and the bodies of non-prose directives (code, maths, glued tables and figures) are not counted.

The budgets: main text at most 3,000 words (2,500 for chapters 1-3), 3 to 5 learning objectives, at most 4 glued
values in a paragraph of the main text.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAIN_WORDS, MAIN_WORDS_EARLY, EARLY_CHAPTERS = 3000, 2500, (1, 2, 3)
OBJECTIVES = (3, 5)
GLUE_PER_PARAGRAPH = 4

# directives whose body is not prose
_NOT_PROSE = re.compile(r"^(math|code|code-block|code-cell|sourcecode|glue:md|glue:figure|glue|raw|literalinclude|"
                        r"bibliography|mermaid|list-table|csv-table|eval-rst)\b")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,}|:{3,})\s*(\{([^}]*)\})?\s*(.*)$")
_SECTION = re.compile(r"^#{1,3}\s+(.*?)\s*$")
_GLUE = re.compile(r"\{glue(?::[a-z]+)?\}`[^`]*`")
_ROLE = re.compile(r"\{[a-zA-Z][\w:.-]*\}`[^`]*`")
_DISPLAY_MATH = re.compile(r"\$\$.*?\$\$(\s*\([^)]*\))?", re.S)
_INLINE_MATH = re.compile(r"(?<![\\$])\$(?!\s)[^$\n]+?(?<!\s)\$")
_INLINE_CODE = re.compile(r"`+[^`]*`+")
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_TAG = re.compile(r"<[^>\n]+>")
_WORD = re.compile(r"[^\W\d_](?:[\w'’–-]*\w)?", re.UNICODE)


def words(text: str) -> int:
    """The prose words of Markdown ``text`` (see the module's documentation for what is not counted).

    >>> words("Attention pools the values $v_i$ with weights {eq}`eq-nw` (see `softmax`): it is *simple*.")
    10
    """
    return len(_WORD.findall(_strip(text)))


def _strip(text: str) -> str:
    text = _DISPLAY_MATH.sub(" ", text)
    text = _ROLE.sub(" ", text)
    text = _INLINE_MATH.sub(" ", text)
    text = _INLINE_CODE.sub(" ", text)
    text = _LINK.sub(r"\1", text)
    text = _TAG.sub(" ", text)
    return text


def prose_lines(source: str) -> list[str]:
    """The lines of a Markdown cell that hold prose: fences, directive options, labels and the bodies of non-prose
    directives and of display maths dropped (paragraph breaks kept as empty lines)."""
    out: list[str] = []
    stack: list[tuple[str, bool]] = []  # open fences: (the fence, prose inside)
    in_options = in_math = False
    for line in source.splitlines():
        stripped = line.strip()
        fence = _FENCE.match(line)
        if fence:
            mark, directive, name, rest = fence.group(1), fence.group(2), fence.group(3) or "", fence.group(4)
            top = stack[-1][0] if stack else ""
            if stack and mark[0] == top[0] and len(mark) >= len(top) and not directive and not rest.strip():
                stack.pop()  # a closing fence
            else:  # an opening one: a directive (prose unless listed) or a code block
                prose = bool(directive) and not _NOT_PROSE.match(name.strip()) and (not stack or stack[-1][1])
                stack.append((mark, prose))
                in_options = True
            out.append("")
            continue
        if stack and not stack[-1][1]:
            continue
        if in_options and re.match(r"^\s*:[\w-]+:", line):
            continue
        in_options = False
        if in_math:
            in_math = "$$" not in stripped
            continue
        if stripped.startswith("$$"):
            in_math = stripped.count("$$") == 1  # a display that goes on to a later line
            out.append("")
            continue
        if re.match(r"^\s*\([\w-]+\)=\s*$", line):  # a MyST label
            continue
        out.append(line)
    return out


def paragraphs(lines: list[str]) -> list[str]:
    """The paragraphs of some prose lines (blank lines separate them; a list item is a paragraph of its own)."""
    paras: list[list[str]] = [[]]
    for line in lines:
        if not line.strip() or re.match(r"^\s*([-*+]|\d+\.)\s", line):
            paras.append([])
        if line.strip():
            paras[-1].append(line)
    return ["\n".join(p) for p in paras if p]


@dataclass
class Budget:
    """One chapter's counts."""

    chapter: str
    number: int
    main: int
    studies: int
    exercises: int
    objectives: int
    glue_per_paragraph: int

    def over(self) -> list[str]:
        """What is over the budget, one phrase each."""
        limit = MAIN_WORDS_EARLY if self.number in EARLY_CHAPTERS else MAIN_WORDS
        problems = []
        if self.main > limit:
            problems.append(f"main text {self.main:,} words (at most {limit:,})")
        if not OBJECTIVES[0] <= self.objectives <= OBJECTIVES[1]:
            problems.append(f"{self.objectives} learning objectives ({OBJECTIVES[0]}-{OBJECTIVES[1]})")
        if self.glue_per_paragraph > GLUE_PER_PARAGRAPH:
            problems.append(f"{self.glue_per_paragraph} glued values in one paragraph (at most {GLUE_PER_PARAGRAPH})")
        return problems


def count(path: Path) -> Budget:
    """Count one chapter notebook."""
    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    part = "main"
    totals = {"main": 0, "studies": 0, "exercises": 0}
    objectives = 0
    most_glue = 0
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        for line in source.splitlines():
            heading = _SECTION.match(line)
            if heading and line.startswith("## "):
                title = heading.group(1).strip().lower()
                if title.startswith("studies") or title.startswith("study"):
                    part = "studies"
                elif title.startswith("exercises"):
                    part = "exercises"
        if "Learning objectives" in source:
            block = re.search(r"\{admonition\}\s*Learning objectives(.*?)(`{3,}|:{3,})\s*$", source, re.S | re.M)
            if block:
                objectives += len(re.findall(r"^\s*[-*+]\s", block.group(1), re.M))
        lines = prose_lines(source)
        totals[part] += sum(words(line) for line in lines)
        if part == "main":
            for para in paragraphs(lines):
                most_glue = max(most_glue, len(_GLUE.findall(para)))
    name = Path(path).stem
    number = int(re.match(r"(\d+)", name).group(1)) if re.match(r"\d+", name) else 0
    return Budget(name, number, totals["main"], totals["studies"], totals["exercises"], objectives, most_glue)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, help="chapter notebooks (default: every chapter)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a chapter is over its budget")
    args = parser.parse_args(argv)
    paths = args.paths or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    print(f"{'chapter':40s} {'main':>6s} {'studies':>7s} {'exercises':>9s} {'objectives':>10s} {'glue/para':>9s}")
    over = []
    for path in paths:
        b = count(path)
        print(f"{b.chapter:40s} {b.main:6,d} {b.studies:7,d} {b.exercises:9,d} {b.objectives:10d} "
              f"{b.glue_per_paragraph:9d}")
        over += [f"{b.chapter}: {p}" for p in b.over()]
    if over:
        print(f"\nover the budget ({len(over)}):")
        print("\n".join(f"  {line}" for line in over))
    else:
        print("\nevery chapter is within the budget")
    return 1 if over and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
