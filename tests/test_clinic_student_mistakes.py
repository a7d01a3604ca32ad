"""The clinic on the mistakes a student makes in the clinic exercises of chapters 3, 5, 8 and 12
(tests/clinic_student_mistakes.py): each gets a message that states its real symptom and names the mistake (or a
code whose fix leads to it), never ``unknown`` alone, and whose measured line describes the example shown; where a
chapter uses the check as a find-the-bug exercise, the first message keeps the bug for the hint."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from torch import Tensor

from attn_utils import clinic

sys.path.insert(0, str(Path(__file__).parent))
import clinic_student_mistakes as mistakes  # noqa: E402

SAID_AT_ONCE = {"function-raised", "not-implemented", "input-modified"}


def test_the_table_covers_the_four_chapters_with_38_or_more_mistakes() -> None:
    assert len(mistakes.MISTAKES) >= 38
    assert len({row[0] for row in mistakes.MISTAKES}) == len(mistakes.MISTAKES)
    checks = {row[1] for row in mistakes.MISTAKES}
    assert {"check_masked_softmax", "check_dot_product_attention", "check_multihead_attention",
            "check_online_softmax", "check_kv_cache_step", "check_rope", "check_grouped_query_attention"} <= checks
    for name, check, codes, _, _ in mistakes.MISTAKES:
        assert hasattr(clinic, check), name
        assert set(codes) <= set(clinic.BUGS), name


def _describes_the_example(err: clinic.AttentionBug) -> None:
    """Sizes that the message states (D_h, H, d) are those of the example it shows."""
    text = str(err)
    widths = {v.shape[-1] for v in err.example.values() if isinstance(v, Tensor) and v.dim()}
    for said in re.findall(r"with D_h = (\d+) on the input shown", text):
        assert int(said) in widths, text
    for listed in re.findall(r"goes to column \[([0-9?, ]+)\]", text):
        assert len(listed.split(", ")) in widths, text


@pytest.mark.parametrize("name, check, codes, says, fn", mistakes.MISTAKES, ids=[r[0] for r in mistakes.MISTAKES])
def test_a_student_mistake_gets_a_helpful_message(name, check, codes, says, fn) -> None:
    kind, err = mistakes.run(check, fn)
    assert kind == "bug", f"{name}: the check passed"
    assert err.bugs != ("unknown",), f"{name}: {err}"
    assert set(err.bugs) & set(codes), f"{name}: named {err.bugs}, expected one of {codes}\n{err}"
    assert re.search(says, str(err)), f"{name}: the message does not state the symptom ({says})\n{err}"
    assert "no known bug explains it" not in str(err).splitlines()[0]
    _describes_the_example(err)
    if isinstance(err.actual, BaseException) and err.bug == "function-raised":
        assert "raised at line" in str(err), f"{name}: a crash without its line\n{err}"


EXERCISE_ROWS = [row for row in mistakes.MISTAKES if row[1] in mistakes.EXERCISES]


@pytest.mark.parametrize("name, check, codes, says, fn", EXERCISE_ROWS, ids=[r[0] for r in EXERCISE_ROWS])
def test_in_exercise_mode_the_symptom_comes_first_and_the_bug_on_the_hint(name, check, codes, says, fn) -> None:
    kind, err = mistakes.run(check, fn, exercise=True)
    assert kind == "bug" and set(err.bugs) & set(codes), name
    first = str(err).splitlines()[0]
    if err.exercise:
        assert "[bug:" not in str(err) and clinic.BUGS[err.bug][0] not in first, f"{name}: {err}"
        hint = err.hint()
        assert hint.startswith("bug: ") and f"[bug: {err.bug}]" in hint, name
        assert err.hint().startswith("fix: ")
    else:  # said at once: a crash, or the broken invariant is itself the diagnosis
        assert err.bug in SAID_AT_ONCE or err.bug in clinic.BUGS, name
        assert f"[bug: {err.bug}]" in first, f"{name}: {err}"
        assert err.hint().startswith("fix: ")
