"""Estimate each chapter's study time from its content, and keep the chapters' "*Time:*" lines in step with it.

    python scripts/time_estimates.py            # print the estimates
    python scripts/time_estimates.py --write    # rewrite the "*Time:*" line of every chapter's objectives
    python scripts/time_estimates.py --check    # exit 1 if a chapter's line differs (a test runs this)

The estimate has two parts, each rounded to 5 minutes:

* **reading and running**: the prose (words of the markdown cells outside the exercises, math left out) at
  READING_WPM words a minute, plus the code (statements of the code cells outside the solutions) at
  SECONDS_PER_CODE_LINE seconds a statement, to read it, run it and look at what it prints;
* **exercises**: MINUTES_PER_EXERCISE minutes each.

These rates are those of a student working through a technical text, not skimming it: slower than reading prose
(200-250 words a minute), and with time to run each cell. Instructors can scale them; the guide shows both parts.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
READING_WPM = 120
SECONDS_PER_CODE_LINE = 13
MINUTES_PER_EXERCISE = 15
TIME_LINE = re.compile(r"\*Time:\*[^\n]*?(?=\n|$)")


def _round5(minutes: float) -> int:
    return max(5, 5 * round(minutes / 5))


def content(path: Path) -> dict[str, int]:
    """Words of prose, lines of code and number of exercises of a chapter."""
    nb = json.loads(path.read_text())
    words = code = exercises = 0
    in_solution = in_exercise = False
    for cell in nb["cells"]:
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            in_exercise = in_exercise or "{exercise-start}" in text
            in_solution = in_solution or "{solution-start}" in text
            exercises += text.count("{exercise-start}")
            if not (in_exercise or in_solution):
                prose = re.sub(r"\$\$.*?\$\$|\$[^$\n]*\$", " ", TIME_LINE.sub(" ", text), flags=re.DOTALL)
                prose = reader_text(prose)
                words += len(re.findall(r"[A-Za-z][A-Za-z'’-]*", prose))
            in_exercise = in_exercise and "{exercise-end}" not in text
            in_solution = in_solution and "{solution-end}" not in text
        elif not in_solution:
            code += statements(text)
    return {"words": words, "code_lines": code, "exercises": exercises}


def reader_text(markdown: str) -> str:
    """What a reader sees of MyST markup: a link's text, a role's title (or one word for a glued number or a
    reference), without URLs, paths and labels."""
    markdown = re.sub(r"\{[\w:-]+\}`([^`<]*?)\s*<[^`>]*>`", r"\1", markdown)  # {doc}`title <path>`
    markdown = re.sub(r"\{[\w:-]+\}`[^`]*`", " x ", markdown)  # {glue:text}`name:.3f`, {numref}`ex-1`
    return re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", markdown)  # [text](url)


def statements(code: str) -> int:
    """Statements (logical lines) of a code cell: how a formatter breaks a long line does not change the count."""
    lines = [line for line in code.splitlines() if not line.lstrip().startswith(("%", "!"))]
    tokens = tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline)
    try:
        return sum(1 for token in tokens if token.type == tokenize.NEWLINE)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return sum(1 for line in lines if line.strip() and not line.strip().startswith("#"))


def estimate(path: Path) -> tuple[int, int]:
    """(minutes to read and run, minutes for the exercises)."""
    facts = content(path)
    reading = facts["words"] / READING_WPM + facts["code_lines"] * SECONDS_PER_CODE_LINE / 60
    return _round5(reading), _round5(facts["exercises"] * MINUTES_PER_EXERCISE)


def time_line(path: Path) -> str:
    reading, exercises = estimate(path)
    return f"*Time:* about {reading} minutes to read and run, and about {exercises} minutes for the exercises."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="rewrite the chapters' time lines")
    parser.add_argument("--check", action="store_true", help="exit 1 if a chapter's time line is out of date")
    args = parser.parse_args(argv)
    stale = []
    for path in NOTEBOOKS:
        facts, line = content(path), time_line(path)
        nb = json.loads(path.read_text())
        first = "".join(nb["cells"][0]["source"])
        current = TIME_LINE.search(first)
        print(f"{path.stem:42s} {facts['words']:5d} words {facts['code_lines']:4d} code lines "
              f"{facts['exercises']} exercises -> {line}")
        if current is None:
            stale.append(f"{path.name}: no '*Time:*' line in the first cell")
        elif current.group(0) != line:
            stale.append(f"{path.name}: says {current.group(0)!r}, the estimate is {line!r}")
            if args.write:
                nb["cells"][0]["source"] = (first[: current.start()] + line + first[current.end() :]).splitlines(
                    keepends=True
                )
                path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    if args.check and stale:
        print("\n".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
