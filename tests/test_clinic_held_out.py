"""The clinic on a second set of real attention bugs (tests/clinic_bugs.py, REAL_BUGS_2), collected after it was built
and split before it was run on them: two thirds to improve it on, one third (VALIDATION) only measured.

Run ``python tests/clinic_bugs.py`` to print both scores."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from attn_utils import clinic

sys.path.insert(0, str(Path(__file__).parent))
import clinic_bugs  # noqa: E402

TRAINING = [row for row in clinic_bugs.REAL_BUGS_2 if row[0] not in clinic_bugs.VALIDATION]
VALIDATION = [row for row in clinic_bugs.REAL_BUGS_2 if row[0] in clinic_bugs.VALIDATION]


def _repository(source: str) -> str:
    return source.split("#")[0]


def test_the_second_set_has_55_bugs_from_35_repositories_not_cited_before() -> None:
    sources = [row[0] for row in clinic_bugs.REAL_BUGS_2]
    assert len(set(sources)) == len(sources) >= 55
    old = {_repository(row[0]) for row in clinic_bugs.REAL_BUGS}
    assert len({_repository(s) for s in sources} - old) >= 35
    assert not set(sources) & {row[0] for row in clinic_bugs.REAL_BUGS}
    for source, check, expected, also, _ in clinic_bugs.REAL_BUGS_2:
        assert hasattr(clinic, check), source
        assert {expected, *also} <= set(clinic.BUGS), source


def test_the_validation_third_is_the_split_drawn_before_scoring() -> None:
    sources = [row[0] for row in clinic_bugs.REAL_BUGS_2]
    assert clinic_bugs.VALIDATION <= set(sources)
    assert clinic_bugs._validation_third(sources) == clinic_bugs.VALIDATION
    assert len(VALIDATION) == round(len(sources) / 3)


@pytest.mark.parametrize("source, check, expected, also, fn", TRAINING, ids=[row[0] for row in TRAINING])
def test_a_training_bug_is_named_in_time(source: str, check: str, expected: str, also: frozenset, fn) -> None:
    # CPU time of this thread, not wall time: the checks run on one thread, and wall time also counts whatever else
    # the machine is doing, so a busy machine failed a diagnosis that was fast
    start = time.thread_time()
    kind, err = clinic_bugs.diagnose(check, fn)
    seconds = time.thread_time() - start
    assert kind == "bug", f"{source}: {kind} {err!r}"
    assert expected in err.bugs, f"{source}: expected {expected}, got {err.bugs}"
    assert seconds <= 5.0, f"{source}: the diagnosis took {seconds:.2f} s"


def test_the_training_score() -> None:
    scored = clinic_bugs.score(TRAINING)
    print("training:", clinic_bugs.summary(scored))
    outcomes = [o for o, _ in scored.values()]
    assert outcomes.count("named") == len(TRAINING) == 37, clinic_bugs.summary(scored)


def test_the_validation_score_is_measured_and_reported(capsys: pytest.CaptureFixture[str]) -> None:
    # the floor is what was measured on this held-out third, which the clinic was not tuned on (before the tuning:
    # 15 named right, 3 with an acceptable code, 1 passed as correct); it is reported, not a target
    scored = clinic_bugs.score(VALIDATION)
    with capsys.disabled():
        print("\nvalidation:", clinic_bugs.summary(scored))
    outcomes = [o for o, _ in scored.values()]
    assert outcomes.count("named") >= 17, clinic_bugs.summary(scored)
    assert outcomes.count("named") + outcomes.count("acceptable") >= 19, clinic_bugs.summary(scored)
