"""Grading a class in shards (``attn-grade --shard i/n``) and combining their CSVs (``attn-grade merge``).

No kernel runs: the submissions have no check cell, so the grader has nothing to run and writes their rows at once.
"""

from __future__ import annotations

import csv
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from attn_utils import grading

STUDENTS = ["alice", "bob", "carol", "dave", "erin", "frank", "Zoë Ünal", "李雷"]


@pytest.fixture()
def klass(tmp_path: Path) -> tuple[Path, Path]:
    """A chapter with one check, and a class whose notebooks lack the check cell (graded ``missing``, not run)."""
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    chapter = new_notebook(cells=[new_markdown_cell("# Tiny\n```{exercise-start}\n:label: ex-1\n```"),
                                  new_code_cell("au.clinic.check_causal_mask(m)", metadata={"tags": ["clinic-check"]})])
    nbformat.write(chapter, chapters / "90_tiny.ipynb")
    subs = tmp_path / "subs"
    for student in STUDENTS:
        (subs / student).mkdir(parents=True)
        nbformat.write(new_notebook(cells=[new_code_cell("x = 1")]), subs / student / "90_tiny.ipynb")
    return subs, chapters


def test_shards_split_a_class_deterministically_and_exactly_once(klass: tuple[Path, Path]) -> None:
    subs, chapters = klass
    whole = grading.grade(subs, chapters)
    for n in (1, 3, 8):
        shards = [grading.grade(subs, chapters, shard=(i, n)) for i in range(n)]
        assert sorted(r.student for rows in shards for r in rows) == sorted(r.student for r in whole)
        for i, rows in enumerate(shards):
            assert {r.student for r in rows} == {s for s in STUDENTS if grading.shard_of(s, n) == i}
    # the share depends on the name alone: a stable hash, not the order or the number of folders
    assert [grading.shard_of(s, 3) for s in STUDENTS] == [grading.shard_of(s, 3) for s in STUDENTS]
    assert grading.shard_of("alice", 4) == 3 and grading.shard_of("Zoë Ünal", 4) == grading.shard_of("Zoë Ünal", 4)


def test_merge_combines_the_shards_into_the_whole_class(klass: tuple[Path, Path], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    subs, chapters = klass
    assert grading.main([str(subs), "--chapters", str(chapters), "-o", str(tmp_path / "all.csv")]) == 0
    parts = []
    for i in range(3):
        parts.append(tmp_path / f"part{i}.csv")
        assert grading.main([str(subs), "--chapters", str(chapters), "-o", str(parts[i]), "--shard", f"{i}/3"]) == 0
    assert grading.main(["merge", str(tmp_path / "merged.csv"), *map(str, parts)]) == 0
    assert "8 rows from 3 CSVs" in capsys.readouterr().out
    assert (tmp_path / "merged.csv").read_text(encoding="utf-8") == (tmp_path / "all.csv").read_text(encoding="utf-8")


def test_merge_refuses_a_row_in_two_csvs_and_another_header(klass: tuple[Path, Path], tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    subs, chapters = klass
    part = tmp_path / "part.csv"
    assert grading.main([str(subs), "--chapters", str(chapters), "-o", str(part), "--shard", "0/2"]) == 0
    out = tmp_path / "out.csv"
    assert grading.main(["merge", str(out), str(part), str(part)]) == 2
    err = capsys.readouterr().err
    assert "attn-grade merge: error: the row (student=" in err and "is in both" in err and "graded twice" in err
    assert not out.exists()  # nothing written
    other = tmp_path / "other.csv"
    other.write_text("student,grade\nalice,10\n", encoding="utf-8")
    assert grading.main(["merge", str(out), str(part), str(other)]) == 2
    assert "has the header student,grade; expected student,chapter,exercise," in capsys.readouterr().err
    assert grading.main(["merge", str(out), str(tmp_path / "none.csv")]) == 2
    assert "cannot read" in capsys.readouterr().err
    with open(part, newline="", encoding="utf-8") as f:
        assert next(csv.reader(f)) == list(grading.COLUMNS)


@pytest.mark.parametrize("value", ["3/3", "1", "-1/2", "a/b", "0/0"])
def test_a_shard_must_be_i_of_n(value: str, klass: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    subs, chapters = klass
    with pytest.raises(SystemExit) as stop:
        grading.main([str(subs), "--chapters", str(chapters), f"--shard={value}"])
    assert stop.value.code == 2 and "--shard: expected I/N with 0 <= I < N" in capsys.readouterr().err
    with pytest.raises(grading.GradingError, match="shard: expected"):
        grading.grade(subs, chapters, shard=(2, 2))
