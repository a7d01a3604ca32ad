"""The notebook formatter: every code line of every chapter fits the book's column (88 characters)."""

from __future__ import annotations

import ast

from script_loader import load_script

fmt = load_script("format_notebooks")


def test_every_chapter_fits_the_column() -> None:
    too_long = [line for path in fmt.NOTEBOOKS for line in fmt.long_lines(path)]
    assert len(fmt.NOTEBOOKS) >= 8
    assert too_long == [], "run `python scripts/format_notebooks.py`:\n" + "\n".join(too_long)


def test_a_long_trailing_comment_moves_above_its_line() -> None:
    source = ("x = torch.zeros(3)  # " + "a shape comment that explains the line " * 3).rstrip()
    lines = fmt.fit_comments(source).split("\n")
    assert lines[-1] == "x = torch.zeros(3)"
    assert all(line.startswith("# ") and len(line) <= 88 for line in lines[:-1])
    assert " ".join(line[2:] for line in lines[:-1]) == source.split("# ", 1)[1].strip()


def test_an_aligned_block_of_comments_moves_together() -> None:
    source = "a = 1                # short\n" + "b = " + "2 + " * 18 + "2  # long enough to overflow"
    lines = fmt.fit_comments(source).split("\n")
    assert lines == ["# short", "a = 1", "# long enough to overflow", "b = " + "2 + " * 18 + "2"]


def test_comments_inside_strings_and_short_lines_stay() -> None:
    source = 'print("# not a comment " * 2)  # a comment\ny = "#" * 100'
    assert fmt.fit_comments(source) == source


def test_a_long_string_splits_into_pieces_with_the_same_value() -> None:
    line = '    f"{n} test sentences: identical tokens with and without the cache, {m} of them different, ok"'
    out = fmt.split_long_strings(line)
    assert all(len(piece) <= 88 for piece in out.split("\n"))
    n, m = 3, 4  # noqa: F841 - read by the f-strings below
    joined = eval(compile(ast.parse("(" + out.strip() + ")", mode="eval"), "<test>", "eval"))  # noqa: S307
    assert joined == eval(line.strip())  # noqa: S307
