"""The grades' CSV: writing it (safe to open in a spreadsheet), reading it back, the shards' merge and the summary."""

from __future__ import annotations

import csv
import hashlib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import astuple
from pathlib import Path

from .collect import COLUMNS, GradeRow, GradingError

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""What a cell may not begin with unquoted: a spreadsheet would read it as a formula (OWASP, "CSV injection")."""


def safe_cell(text: str) -> str:
    r"""``text`` with a single quote before it when it begins with a character of ``FORMULA_STARTS``, as OWASP
    recommends, so that a spreadsheet shows it as text.

    >>> safe_cell("=HYPERLINK(\"http://x\")"), safe_cell("-1 is wrong"), safe_cell("fine")
    ('\'=HYPERLINK("http://x")', "'-1 is wrong", 'fine')
    """
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def _unquoted(text: str) -> str:
    """The inverse of :func:`safe_cell` (for a CSV read back)."""
    return text[1:] if text.startswith("'") and text[1:].startswith(FORMULA_STARTS) else text


def write_csv(rows: Iterable[GradeRow], path: Path | str, *, append: bool = False) -> None:
    """Write the rows as a CSV with the header ``COLUMNS`` (``seconds`` with one decimal); with ``append``, add
    them to the end of the file (no header). A cell that a spreadsheet would read as a formula is quoted
    (:func:`safe_cell`)."""
    with open(path, "a" if append else "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        if not append:
            writer.writerow(COLUMNS)
        for row in rows:
            fields = [safe_cell(str(value)) for value in astuple(row)]
            fields[COLUMNS.index("seconds")] = f"{row.seconds:.1f}"
            writer.writerow(fields)


def read_csv(path: Path | str) -> list[GradeRow]:
    """The rows of a CSV that :func:`write_csv` wrote (a CSV from before the ``sandbox`` column reads too)."""
    with open(path, newline="", encoding="utf-8") as f:
        return [GradeRow(**{**{name: _unquoted(record.get(name) or "") for name in COLUMNS},
                            "seconds": float(record.get("seconds") or 0)})
                for record in csv.DictReader(f)]


def shard_of(student: str, shards: int) -> int:
    """The shard (``0`` to ``shards - 1``) that grades ``student``: a stable hash of the folder name (SHA-256 of its
    UTF-8 bytes), the same on every machine, Python version and run, whatever else the submissions folder holds.

    >>> shard_of("alice", 4), shard_of("alice", 4) == shard_of("alice", 4), shard_of("alice", 1)
    (3, True, 0)
    """
    if not (isinstance(shards, int) and not isinstance(shards, bool) and shards >= 1):
        raise GradingError("shard", f"expected a positive number of shards, got {shards!r}")
    return int.from_bytes(hashlib.sha256(student.encode("utf-8")).digest()[:8], "big") % shards


def merge(inputs: Sequence[Path | str], output: Path | str) -> list[GradeRow]:
    """Combine the CSVs of the shards of a class (``attn-grade --shard i/n``) into one, students in sorted order.

    Each input must have the header ``COLUMNS``, and no row may be in two inputs: a row is known by its student,
    chapter, exercise and check (a chapter may call one check in two exercises), so a student graded by two shards
    (overlapping shards, or one CSV named twice) stops the merge before anything is written.

    Raises:
        GradingError: (argument ``"merge"``) an input cannot be read, has another header, or repeats a row of an
            earlier input; or there is no input.
    """
    if not inputs:
        raise GradingError("merge", "no input CSV (expected: attn-grade merge OUT.csv IN1.csv IN2.csv ...)")
    seen: dict[tuple[str, str, str, str], str] = {}
    rows: list[GradeRow] = []
    for path in map(Path, inputs):
        try:
            with open(path, newline="", encoding="utf-8") as f:
                header = next(csv.reader(f), [])
            these = read_csv(path)
        except (OSError, UnicodeDecodeError, csv.Error, ValueError, TypeError) as error:
            raise GradingError("merge", f"cannot read {path}: {error}") from error
        if tuple(header) != COLUMNS:
            raise GradingError("merge", f"{path} has the header {','.join(header) or '(none)'}; expected "
                                        f"{','.join(COLUMNS)} (a CSV written by attn-grade)")
        keys = {(r.student, r.chapter, r.exercise, r.check) for r in these}
        for key in sorted(keys):
            if key in seen:
                row = ", ".join(f"{name}={value!r}" for name, value in zip(COLUMNS[:4], key, strict=True)
                                if value)
                raise GradingError("merge", f"the row ({row}) is in both {seen[key]} and {path}: a student graded "
                                            "twice (overlapping shards, or one CSV named twice)")
            seen[key] = str(path)
        rows += these
    rows.sort(key=lambda r: r.student)  # stable: each student's rows keep their order
    write_csv(rows, output)
    return rows


def summary(rows: Sequence[GradeRow]) -> str:
    """A short table, one line per student: the checks passed out of those expected, then any notebook not graded.

    >>> print(summary([GradeRow("alice", "03", "ex-1", "check_causal_mask", "pass", "", "", 1.0),
    ...                GradeRow("bob", "03", "ex-1", "check_causal_mask", "fail", "causal-leak", "", 1.0)]))
    student  passed  total
    alice         1      1
    bob           0      1
    1 of 2 checks passed
    per check: passed/total, then the other statuses and the most frequent bug
      03 ex-1 check_causal_mask: 1/2 (1 fail; most often causal-leak)
    """
    students = sorted({r.student for r in rows})
    passed = Counter(r.student for r in rows if r.check and r.status == "pass")
    total = Counter(r.student for r in rows if r.check)
    width = max([len("student"), *map(len, students)])
    lines = [f"{'student':<{width}}  passed  total"]
    lines += [f"{s:<{width}}  {passed[s]:>6}  {total[s]:>5}" for s in students]
    lines.append(f"{sum(passed.values())} of {sum(total.values())} checks passed")
    lines += [f"not graded: {r.student}: {r.detail}" for r in rows if not r.check]
    checks = sorted({(r.chapter, r.exercise, r.check) for r in rows if r.check})
    if checks:
        lines.append("per check: passed/total, then the other statuses and the most frequent bug")
    for key in checks:
        these = [r for r in rows if (r.chapter, r.exercise, r.check) == key]
        statuses = Counter(r.status for r in these if r.status != "pass")
        bugs = Counter(r.bug for r in these if r.bug)
        others = ", ".join(f"{n} {status}" for status, n in sorted(statuses.items()))
        common = f"; most often {bugs.most_common(1)[0][0]}" if bugs else ""
        lines.append(f"  {key[0]} {key[1]} {key[2]}: {sum(r.status == 'pass' for r in these)}/{len(these)}"
                     + (f" ({others}{common})" if others else ""))
    return "\n".join(lines)
