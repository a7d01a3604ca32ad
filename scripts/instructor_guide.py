"""Write book/instructor_guide.md from the chapters themselves, so that the guide never drifts from them.

    python scripts/instructor_guide.py           # rewrite the page
    python scripts/instructor_guide.py --check   # exit 1 if the page is out of date (a test runs this)

For each chapter it gathers the learning objectives, the prerequisites and the estimated time from the chapter's
objectives admonition, the exercises from the chapter, the measured run time and its largest cells from
bench/results/notebooks.json (written by `make bench`), and the instructor's notes and suggested exercises from
book/instructor_notes.yml.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "book" / "instructor_guide.md"
NOTES = ROOT / "book" / "instructor_notes.yml"
TIMES = ROOT / "bench" / "results" / "notebooks.json"


def chapter_facts(path: Path) -> dict:
    nb = nbformat.read(path, as_version=4)
    title = nb.cells[0].source.splitlines()[0].lstrip("# ").strip()
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    box = re.search(r"```\{admonition\} Learning objectives\n(.*?)\n```", text, re.DOTALL)
    if box is None:
        raise ValueError(f"{path.name}: no Learning objectives admonition")
    body = box.group(1)
    objectives = re.findall(r"^- (.*(?:\n  .*)*)", body, re.MULTILINE)
    prereq = re.search(r"\*Prerequisites:\*\s*(.*?)(?:\*Time:\*|$)", body, re.DOTALL)
    time = re.search(r"\*Time:\*\s*(.*?)\s*$", body, re.DOTALL)
    exercise = r"\{exercise-start\}\s*\n:label: (\S+)\s*\n```\s*\n(.*?)```\{exercise-end\}"
    exercises = re.findall(exercise, text, re.DOTALL)
    return {
        "name": path.stem,
        "title": title,
        "objectives": [from_book(" ".join(o.split())) for o in objectives],
        "prerequisites": from_book(" ".join(prereq.group(1).split()).rstrip(".")) if prereq else "none",
        "time": " ".join(time.group(1).split()).rstrip(".") if time else "not given",
        "exercises": [(label, glued_from(path, from_book(first_sentence(" ".join(body.split())))))
                      for label, body in exercises],
    }


def from_book(text: str) -> str:
    """Rewrite a chapter's relative {doc} links so that they resolve from book/instructor_guide.md."""
    text = re.sub(r"\{doc\}`([^`<]*)<(?!/)([^>]+)>`", r"{doc}`\1</notebooks/\2>`", text)
    return re.sub(r"\]\((?!\.\./|/|https?:)([^)]+\.ipynb)\)", r"](../notebooks/\1)", text)


def glued_from(path: Path, text: str) -> str:
    """A number glued in the chapter is read from the chapter's page (MyST-NB's ``path::key``)."""
    return re.sub(r"\{glue:(\w+)\}`(?![^`]*::)", rf"{{glue:\1}}`../notebooks/{path.stem}.ipynb::", text)


def first_sentence(line: str) -> str:
    match = re.match(r"(.+?[.?!])(\s|$)", line.strip())
    sentence = match.group(1) if match else line.strip()
    return sentence if len(sentence) <= 200 else sentence[:200].rsplit(" ", 1)[0] + " …"


def build_page() -> str:
    notes = yaml.safe_load(NOTES.read_text()) if NOTES.exists() else {}
    times = {}
    measured = None
    if TIMES.exists():
        bench = json.loads(TIMES.read_text())
        times = {r["notebook"].removesuffix(".ipynb"): r for r in bench["rows"]}
        m = bench["machine"]
        measured = f"{bench['measured']}, {m['cpu_count']} CPU cores, torch {m['torch']}"
    lines = [
        "# Instructor guide",
        "",
        "Each chapter stands alone: it installs what it needs, seeds everything, and runs top to bottom in a fresh "
        "kernel in under a minute on two CPU cores (or unchanged on a Colab GPU). This page gathers, for each "
        "chapter, what students should be able to do afterwards, what they need first, how long it takes, and "
        "which exercises to assign. It is generated from the chapters (`python scripts/instructor_guide.py`), so "
        "it always matches them.",
        "",
        "**Student versions.** `make student` writes a copy of every chapter into `student/` with the exercise "
        "solutions removed and all outputs cleared; each solution is replaced by an empty cell for the answer. "
        "The exercises themselves, and everything else, stay. A test checks that no solution text is left and that "
        "every student version still runs top to bottom.",
        "",
    ]
    if measured:
        lines += [f"Run times below were measured with `make bench` ({measured}): the whole notebook in a fresh "
                  "kernel, kernel start included.", ""]
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        facts = chapter_facts(path)
        note = notes.get(facts["name"], {})
        lines += [f"## {int(facts['name'][:2])}. {facts['title']}", "",
                  f"[Open the chapter](../notebooks/{facts['name']}.ipynb) · *Prerequisites:* {facts['prerequisites']}"
                  f" · *Reading and working time:* {facts['time']}", ""]
        row = times.get(facts["name"])
        if row:
            top = ", ".join(f"*{c['section']}* (`{c['code']}`, {c['seconds']:.1f} s)"
                            for c in row.get("top_cells", [])[:2])
            lines += [f"*Measured run time on CPU:* {row['seconds']:.0f} s, peak memory {row['peak_mb']:.0f} MB."
                      + (f" Dominated by: {top}." if top else ""), ""]
        lines += ["**Learning objectives.** After this chapter students can", ""]
        lines += [f"- {o}" for o in facts["objectives"]]
        lines += [""]
        if note.get("notes"):
            lines += [f"**Teaching notes.** {' '.join(note['notes'].split())}", ""]
        suggested = set(note.get("suggested", []))
        lines += ["**Exercises** (★ suggested to assign):", ""]
        for label, sentence in facts["exercises"]:
            star = "★ " if label in suggested else ""
            lines.append(f"- {star}{{numref}}`{label}`: {sentence}")
        lines += [""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only check that the page is up to date")
    args = parser.parse_args(argv)
    page = build_page()
    if args.check:
        if not PAGE.exists() or PAGE.read_text() != page:
            print(f"{PAGE} is out of date: run python scripts/instructor_guide.py")
            return 1
        return 0
    PAGE.write_text(page)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
