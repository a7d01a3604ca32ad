"""Format the chapters' code to fit the book's column: no code line longer than 88 characters.

    python scripts/format_notebooks.py            # rewrite the notebooks in place
    python scripts/format_notebooks.py --check    # exit 1 and list what does not fit

Shape comments carry much of the teaching, and a reader must see them without scrolling sideways. So, before ruff
formats the code (line length 88), a trailing comment that would push its line past the limit moves onto its own
line above the code it explains, and a comment line that is still too long is wrapped at words. Only code cells
change; outputs are kept (re-execute the notebooks afterwards if the code's meaning changed, which this never does).
"""

from __future__ import annotations

import argparse
import io
import json
import re
import shutil
import subprocess
import sys
import textwrap
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
MAX_WIDTH = 88


def _trailing_comment(line: str) -> int | None:
    """The column where a trailing comment starts in a line of code, or None (also for magics and bad syntax)."""
    if "#" not in line or line.lstrip().startswith(("#", "%", "!")):
        return None
    indent = len(line) - len(line.lstrip())
    tokens = tokenize.generate_tokens(io.StringIO(line.strip() + "\n").readline)
    try:
        for token in tokens:
            if token.type == tokenize.COMMENT:
                return indent + token.start[1]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # an open bracket or string: its comment, if any, came before the error
    return None


def _wrap_comment(line: str) -> list[str]:
    """A comment line longer than the limit, wrapped at words into several comment lines."""
    indent = line[: len(line) - len(line.lstrip())]
    text = line.lstrip()[1:].strip()
    return textwrap.wrap(text, width=MAX_WIDTH, initial_indent=f"{indent}# ", subsequent_indent=f"{indent}# ",
                         break_long_words=False, break_on_hyphens=False) or [line]


def fit_comments(source: str) -> str:
    """Move trailing comments that overflow above their line, and wrap long comment lines.

    Consecutive lines whose comments are aligned in a column form a block: if one comment of the block moves, they
    all do, so that a block reads the same way throughout.
    """
    lines = source.split("\n")
    columns = [_trailing_comment(line) for line in lines]

    def overflows(i: int) -> bool:
        column = columns[i]
        return column is not None and len(lines[i][:column].rstrip()) + 2 + len(lines[i][column:]) > MAX_WIDTH

    def aligned(i: int) -> bool:  # a comment pushed to a column by more than the usual two spaces
        column = columns[i]
        return column is not None and lines[i][:column].endswith("   ")

    move = [overflows(i) for i in range(len(lines))]
    start = 0
    while start < len(lines):
        end = start
        while end < len(lines) and columns[end] is not None and (end == start or aligned(end) or aligned(start)):
            end += 1
        if end - start > 1 and any(move[start:end]):
            move[start:end] = [True] * (end - start)
        start = max(end, start + 1)

    out: list[str] = []
    for i, line in enumerate(lines):
        column = columns[i]
        if move[i] and column is not None:
            indent = line[: len(line) - len(line.lstrip())]
            comment = indent + line[column:]
            out.extend(_wrap_comment(comment) if len(comment) > MAX_WIDTH else [comment])
            out.append(line[:column].rstrip())
        elif line.lstrip().startswith("#") and len(line) > MAX_WIDTH:
            out.extend(_wrap_comment(line))
        else:
            out.append(line)
    return "\n".join(out)


_SPLITTABLE = re.compile(r'^(?P<indent>\s*)(?P<prefix>f?)"(?P<body>(?:[^"\\]|\\.)*)"(?P<tail>[,)]*)$')


def split_long_strings(source: str) -> str:
    """Split a line that is one long string literal into two adjacent literals (Python joins them) at a space."""
    out: list[str] = []
    for line in source.split("\n"):
        match = _SPLITTABLE.match(line)
        while match and len(line) > MAX_WIDTH:
            indent, prefix, body, tail = match.group("indent", "prefix", "body", "tail")
            room = MAX_WIDTH - len(indent) - len(prefix) - 2
            depth, cut = 0, None
            for k, ch in enumerate(body):
                depth += (ch == "{") - (ch == "}") if prefix else 0
                if ch == " " and depth == 0 and 0 < k < room:
                    cut = k + 1  # the space stays at the end of the first piece
            if cut is None:
                break
            first, rest = body[:cut], body[cut:]
            first_prefix = prefix if "{" in first else ""
            rest_prefix = prefix if "{" in rest else ""
            out.append(f'{indent}{first_prefix}"{first}"')
            line = f'{indent}{rest_prefix}"{rest}"{tail}'
            match = _SPLITTABLE.match(line)
        out.append(line)
    return "\n".join(out)


def _ruff() -> str:
    found = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if found is None:
        raise SystemExit("ruff is not installed: run `make install`")
    return found


def ruff_format(paths: list[Path], check: bool) -> int:
    command = [_ruff(), "format", "--line-length", str(MAX_WIDTH), "--no-cache"]
    if check:
        command.append("--check")
    return subprocess.run([*command, *map(str, paths)], cwd=ROOT).returncode


def long_lines(path: Path) -> list[str]:
    """Every code line longer than the limit, as 'file:cell:line: text'."""
    nb = json.loads(path.read_text())
    found = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        for j, line in enumerate("".join(cell["source"]).split("\n"), start=1):
            if len(line) > MAX_WIDTH:
                found.append(f"{path.name}:cell {i}:line {j}: ({len(line)}) {line.strip()[:60]}")
    return found


def rewrite(path: Path) -> None:
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            source = split_long_strings(fit_comments("".join(cell["source"])))
            cell["source"] = source.splitlines(keepends=True)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a notebook needs formatting")
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks (default: every chapter)")
    args = parser.parse_args(argv)
    paths = [p.resolve() for p in args.paths] or NOTEBOOKS
    if not args.check:
        # Twice: ruff's line breaks put long strings on lines of their own, which can then be split.
        for _ in range(2):
            for path in paths:
                rewrite(path)
            ruff_format(paths, check=False)
    status = ruff_format(paths, check=True)
    too_long = [line for path in paths for line in long_lines(path)]
    for line in too_long:
        print(f"longer than {MAX_WIDTH} characters: {line}")
    return 1 if status or too_long else 0


if __name__ == "__main__":
    sys.exit(main())
