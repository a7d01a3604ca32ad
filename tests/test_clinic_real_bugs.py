"""The clinic on attention bugs that people really made (tests/clinic_bugs.py, each citing its public report), on two
mistakes made together, and on correct implementations in other styles."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from attn_utils import clinic

sys.path.insert(0, str(Path(__file__).parent))
import clinic_bugs  # noqa: E402


@pytest.mark.parametrize("source, check, expected, fn", clinic_bugs.REAL_BUGS,
                         ids=[row[0] for row in clinic_bugs.REAL_BUGS])
def test_a_real_bug_is_named(source: str, check: str, expected: str, fn) -> None:
    with pytest.raises(clinic.AttentionBug) as info:
        getattr(clinic, check)(fn)
    assert expected in info.value.bugs, f"{source}: expected {expected}, got {info.value.bugs}"
    assert info.value.bug != "unknown"


def test_at_least_three_quarters_of_the_composites_are_named_by_one_cause() -> None:
    named = []
    for check, codes, fn in clinic_bugs.COMPOSITES:
        with pytest.raises(clinic.AttentionBug) as info:
            getattr(clinic, check)(fn)
        named.append(bool(set(info.value.bugs) & codes))
    assert sum(named) >= 0.75 * len(named), named


@pytest.mark.parametrize("check, fn", clinic_bugs.CORRECT, ids=[row[0] for row in clinic_bugs.CORRECT])
def test_a_correct_implementation_in_another_style_passes(check: str, fn) -> None:
    getattr(clinic, check)(fn)
