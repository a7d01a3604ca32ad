"""The clinic's shared machinery: running a check, and diagnosing a failure.

A check compares the student's function with the reference, first on its edge cases and then on random inputs drawn
by hypothesis. When they differ, the diagnosis looks at **every** input where they differ (the edge cases, the
random input hypothesis shrank, and the check's extra probes), not only the smallest, and names the bug by, in turn:

0. a crash: the student's function raised, and the message shows the exception and the line of the student's code
   that raised it; or it changed one of its input tensors in place (which the caller's tensors would keep);
1. a known mistake (a wrong variant of the reference) that gives the student's output on all of them;
2. a pair of known mistakes, made together, that does;
3. an invariant that every correct function of the check's kind satisfies, broken on one of them (the output's shape
   and dtype, each row's sum over the keys it may see, the keys each query sees, whether one sequence's output
   changes when another sequence of the batch changes, …): the message states it, on the input where it is broken;
4. the check's measurements: properties recovered from the student's outputs (a scale factor, the keys a query
   attends to, a frequency, …) and compared with what they should be;
5. the known mistake that gives the student's output on the most of them, stated as what the output is consistent
   with;
6. failing all of these, where the outputs differ (which rows, how many entries), so that ``unknown`` never stands
   alone.

A variant whose output has a NaN never explains a student's NaN unless the NaN is what the bug is about.

In a find-the-bug exercise (:func:`exercise_mode`), the first message states the symptom, a broken invariant or
where the outputs differ, on the smallest input; :meth:`AttentionBug.hint` names the bug, and a second call gives
the fix. ``err.bug`` holds the code in either mode.
"""

from __future__ import annotations

import inspect
import itertools
import linecache
import math
import os
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from hypothesis import HealthCheck, find, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample
from torch import Tensor

from ._bugs import BUGS

NAN_CODES = frozenset({"empty-row-nan", "online-overflow", "online-rescale-inverted", "top-p-excludes-crossing",
                       "not-renormalised", "online-wrong-combination"})
"""The bugs whose symptom is a NaN: only their variants may explain a student's NaN."""

WEAK_MEASURES = frozenset({"mask-wrong-keys", "online-wrong-combination", "kept-set-wrong", "patches-wrong-pixels"})
"""The measurements that only restate where the output differs: a broken invariant, when there is one, says more."""

DECISIVE_INVARIANTS = frozenset({"pooling-sees-padding", "wrong-type", "wrong-dtype", "non-finite-output"})
"""Broken invariants that say more than any measurement: the student's output depends on what it must not."""

UNKNOWN = ("the output differs from the reference, and no known bug explains it",
           "compare your function with the chapter's, step by step, on this input")

SYMPTOM_CODES = frozenset({"unknown", "output-ignores-queries", "function-raised", "wrong-shape", "wrong-type",
                           "wrong-dtype", "non-finite-output", "batch-mixing", "rows-not-normalised",
                           "weights-on-masked-keys", "empty-row-not-zero", "output-outside-values",
                           "pooling-sees-padding", "rope-not-rotation", "patch-values-changed", "causal-wrong-keys",
                           "input-modified", "rope-offset-inconsistent", "alibi-bias-not-zero-at-own-key",
                           "alibi-bias-positive"})
"""The codes that name a symptom (a broken invariant), not a mistake: a find-the-bug exercise may say them first."""

_MODE = {"exercise": False}


def exercise_mode(on: bool = True) -> None:
    """Whether failed checks keep the bug for a second step, as a find-the-bug exercise needs.

    With ``on``, a failed check's message states the symptom (the invariant its output breaks, or where it differs
    from the expected output) on the smallest input, and names no bug; :meth:`AttentionBug.hint` (or :func:`hint`)
    then names the bug, and a second call gives the fix. ``err.bug`` holds the bug's code either way.

    >>> exercise_mode(); exercise_mode(False)
    """
    if not isinstance(on, bool):
        raise TypeError(f"on: expected True or False, got {on!r}")
    _MODE["exercise"] = on

Mistake = dict[str, Any]
"""One known mistake: keyword arguments of the check's mistaken reference (``{"_fn": f}`` for an opaque variant), and
optionally ``"_what"`` and ``"_fix"``: the words that replace the code's stored ones when this variant, of all the
code's, is the one that explains the output."""


@dataclass(frozen=True)
class Finding:
    """What a check's measurements found: a bug code, and optionally the words that replace its stored ones."""

    bug: str
    what: str | None = None
    fix: str | None = None
    note: str | None = None
    also: tuple[str, ...] = field(default_factory=tuple)
    case: dict[str, Any] | None = field(default=None, compare=False)
    """The input the finding was measured on (shown as the example), when not the smallest failing one."""


_LAST: list[AttentionBug] = []


class AttentionBug(AssertionError):
    """A student's function disagrees with the reference.

    Attributes:
        check: the name of the check that failed.
        bug: a code from ``BUGS``, or ``"unknown"``.
        bugs: every cause named: ``(bug,)``, or two codes when two mistakes together explain the output.
        example: the input shown, as a dict of argument names to values: the smallest found where the outputs
            differ, or the smallest where what the message states shows.
        expected: the reference's output on ``example``.
        actual: the student's output on ``example`` (or the exception it raised).
        exercise: whether the message keeps the bug's name for the first :meth:`hint` (see :func:`exercise_mode`).

    The message states the symptom and names the bug; the fix is one step further, :meth:`hint`.
    """

    def __init__(self, check: str, bug: str, example: dict[str, Any], expected: Any, actual: Any,
                 part: str | None = None, *, what: str | None = None, fix: str | None = None,
                 note: str | None = None, also: Sequence[str] = (), symptom: Finding | None = None,
                 smallest: bool = True) -> None:
        self.check, self.bug, self.expected, self.actual = check, bug, expected, actual
        self.bugs = (bug, *also)
        self.example = {name: value for name, value in example.items() if not name.startswith("_")}
        stored_what, stored_fix = BUGS.get(bug, UNKNOWN)
        what = what or stored_what
        fixes = [fix or stored_fix] + [BUGS.get(code, UNKNOWN)[1] for code in also]
        self._fix = "; and ".join(fixes)
        if also:
            what = "two mistakes together: " + "; and ".join(
                [what] + [f"{BUGS.get(code, UNKNOWN)[0]} ({code})" for code in also])
        self._named = f"{what} [bug: {bug}]" + (f"\nmeasured: {note}" if note else "")
        self._steps = 0
        # in an exercise, a named bug waits for the hint; a crash, a stub or a broken invariant is said at once
        self.exercise = _MODE["exercise"] and symptom is not None and bug not in ("not-implemented", "function-raised")
        where = f" (in {part})" if part else ""
        if self.exercise:
            said = symptom or Finding(bug, what=what, note=note)
            # a symptom measured under a named bug's code states what is measured, not the bug's name
            stated = said.what or (BUGS.get(said.bug, UNKNOWN)[0] if said.bug in SYMPTOM_CODES
                                   else "your output differs from the expected output")
            head = f"{check}{where}: {stated}\n"
            measured = f"measured: {said.note}\n" if said.note else ""
            tail = "\nthe bug is named one step further: au.clinic.hint()"
        else:
            head, measured, tail = f"{check}{where}: {what} [bug: {bug}]\n", f"measured: {note}\n" if note else "", ""
        shown = "\n".join(f"  {name} = {_show(value)}" for name, value in self.example.items())
        super().__init__(
            f"{head}"
            f"{measured}"
            f"smallest input found where {'your output differs' if smallest else 'this shows'}:\n{shown}\n"
            f"expected:\n  {_show(expected)}\n"
            f"got:\n  {_show(actual)}{tail}"
        )
        _LAST[:] = [self]

    def hint(self) -> str:
        """The fix, one step further than the diagnosis: ``fix: ...``.

        In a find-the-bug exercise (:func:`exercise_mode`) the first call names the bug (``bug: ... [bug: code]``)
        and the later ones give the fix.
        """
        self._steps += 1
        if self.exercise and self._steps == 1:
            return f"bug: {self._named}\n(call hint() again for the fix)"
        return f"fix: {self._fix}"


def hint() -> str:
    """The fix for the bug of the last failed check (``fix: ...``), for a student who has read the diagnosis (in a
    find-the-bug exercise, the bug's name first, then the fix: see :meth:`AttentionBug.hint`).

    Raises:
        LookupError: no check has failed since the last one that passed.
    """
    if not _LAST:
        raise LookupError("hint: no clinic check has failed since the last one passed; run a failing check first")
    return _LAST[0].hint()


@dataclass(frozen=True)
class CheckResult:
    """What a passed check tested."""

    check: str
    edge_cases: int
    random_cases: int

    def _ipython_display_(self) -> None:
        """Show nothing more in a notebook: the check has printed its line."""


def _show(value: Any) -> str:
    if isinstance(value, Tensor):
        return str(value.detach().cpu()).replace("\n", "\n  ")
    if isinstance(value, BaseException):
        return f"{type(value).__name__}: {value}"
    return repr(value)


def _call(fn: Callable[..., Any], case: dict[str, Any], pick: Callable[[Any], Any]) -> Any:
    """The function's output on a case, or the exception it raised."""
    try:
        with torch.no_grad():
            return pick(fn(**case))
    except Exception as error:  # noqa: BLE001 (a student's bug may raise anything; it is reported, not hidden)
        return error


class InputModified(Exception):
    """The student's function changed one of its input tensors in place (its output is discarded)."""

    def __init__(self, names: Sequence[str], output: Any) -> None:
        self.names, self.output = tuple(names), output
        listed = ", ".join(names)
        super().__init__(f"the function changed its input {listed} in place (the caller's tensor"
                         f"{'s' if len(names) > 1 else ''} now hold{'' if len(names) > 1 else 's'} other values)")


def _call_student(fn: Callable[..., Any], case: dict[str, Any], pick: Callable[[Any], Any]) -> Any:
    """:func:`_call` on the student's function, which must leave its inputs as they were: when it changes an input
    tensor in place, the input is put back and the result is :class:`InputModified`."""
    kept = {name: value.clone() for name, value in case.items() if isinstance(value, Tensor)}
    out = _call(fn, case, pick)
    changed = [name for name, value in kept.items() if not _unchanged(value, case[name])]
    if not changed:
        return out
    with torch.no_grad():
        for name in changed:
            if case[name].shape == kept[name].shape:
                case[name].copy_(kept[name])
            else:  # resized in place: the original tensor is put back in the case
                case[name] = kept[name]
    return out if isinstance(out, BaseException) else InputModified(changed, out)


def _unchanged(before: Tensor, after: Tensor) -> bool:
    if before.shape != after.shape or before.dtype != after.dtype:
        return False
    if before.is_floating_point():
        return bool(((before == after) | (torch.isnan(before) & torch.isnan(after))).all())
    return torch.equal(before, after)


def _same(expected: Any, actual: Any, nan_ok: bool = True) -> bool:
    """Whether ``actual`` is ``expected`` up to rounding (``nan_ok=False``: a NaN in ``expected`` matches nothing)."""
    if isinstance(actual, BaseException) or not isinstance(actual, Tensor) or not isinstance(expected, Tensor):
        return False
    if tuple(actual.shape) != tuple(expected.shape):
        return False
    if expected.dtype == torch.bool:
        return actual.dtype == torch.bool and torch.equal(actual.cpu(), expected.cpu())
    if not actual.is_floating_point():
        return False
    if not nan_ok and bool(torch.isnan(expected).any()):
        return False
    half = {actual.dtype, expected.dtype} & {torch.float16, torch.bfloat16}
    rtol, atol = (1e-2, 4e-3) if torch.bfloat16 in half else (2e-3, 1e-3) if half else (1e-4, 1e-5)
    return torch.allclose(actual.detach().cpu().double(), expected.detach().cpu().double(), rtol=rtol, atol=atol,
                          equal_nan=True)


def _size(case: dict[str, Any]) -> int:
    return sum(v.numel() if isinstance(v, Tensor) else 1 for v in case.values())


def _student_side(fn: Any, adapter: Callable[..., Any]) -> Callable[..., Any]:
    """``adapter(fn, *args)`` as a function of ``args``, run where ``fn`` lives.

    This is the clinic's interface to a grader that keeps the student's code in another process: there ``fn`` is a
    proxy whose ``_clinic_adapt(adapter)`` runs ``adapter`` (a function at the top level of a module of the clinic,
    known there by its name) on the student's object, in the student's process, and sends back only its output, as
    data. Every check touches the student's object only through its calls, or through such an adapter: building a
    module and loading weights into it, reading its layers' shapes, keeping a cache between decoding steps.
    """
    adapt = getattr(type(fn), "_clinic_adapt", None)
    if adapt is not None:
        return adapt(fn, adapter)  # type: ignore[no-any-return]
    return lambda *args, **kwargs: adapter(fn, *args, **kwargs)


def _layers(module_cls: Any, ctor: Sequence[int], names: Sequence[str]) -> dict[str, Any]:
    """(the student's side) ``module_cls(*ctor)``'s class name, and for each layer ``name`` the shape of its weight
    (None: no tensor ``weight``) and whether it has a bias: plain data."""
    module = module_cls(*ctor)
    layers = {}
    for name in names:
        layer = getattr(module, name, None)
        weight = getattr(layer, "weight", None)
        layers[name] = (tuple(weight.shape) if isinstance(weight, Tensor) else None,
                        getattr(layer, "bias", None) is not None)
    return {"cls": getattr(module_cls, "__name__", type(module).__name__), "layers": layers}


def _run_module(module_cls: Any, ctor: Sequence[int], params: dict[str, tuple[Tensor, Tensor | None]],
                inputs: Sequence[Any]) -> Any:
    """(the student's side) ``module_cls(*ctor)`` in eval mode, with each layer's weight (and bias, when both have
    one) copied from ``params``, called on ``inputs``."""
    module = module_cls(*ctor).eval()
    with torch.no_grad():
        for name, (weight, bias) in params.items():
            layer = getattr(module, name)
            layer.weight.copy_(weight)
            if bias is not None and layer.bias is not None:
                layer.bias.copy_(bias)
    return module(*inputs)


def _check_fn(fn: object) -> None:
    if not callable(fn):
        raise TypeError(f"fn: expected the function to check, got {type(fn).__name__}")


def _opaque(variants: dict[str, Sequence[Callable[..., Any]]]) -> dict[str, list[Mistake]]:
    """Mistakes given as plain functions of the case (no composites are built from them)."""
    return {code: [{"_fn": wrong} for wrong in wrongs] for code, wrongs in variants.items()}


def _wrong(make: Callable[..., Any] | None, mistake: Mistake) -> Callable[..., Any]:
    if "_fn" in mistake:
        return mistake["_fn"]
    assert make is not None
    kwargs = {k: v for k, v in mistake.items() if k not in ("_what", "_fix")}
    return lambda **case: make(**case, **kwargs)


def _pairs(mistakes: dict[str, list[Mistake]]) -> list[tuple[str, str, Mistake]]:
    """Every compatible pair of mistakes of two different codes, merged (keys must not overlap)."""
    out = []
    codes = [c for c in mistakes if all("_fn" not in m for m in mistakes[c])]
    for a, b in itertools.combinations(codes, 2):
        for ma, mb in itertools.product(mistakes[a], mistakes[b]):
            if not set(ma) & set(mb):
                out.append((a, b, {**ma, **mb}))
    return out


Invariant = Callable[[dict[str, Any], Any, Callable[[dict[str, Any]], Any]], "Finding | None"]
"""A check's invariants: ``invariants(case, output, run)`` is the invariant that the student's ``output`` on ``case``
breaks (a :class:`Finding` whose words state it, measured on ``case``), or None; ``run(case)`` is the student's output
on another case, for invariants that compare two inputs."""


def _run_check(
    check: str,
    fn: Callable[..., Any],
    reference: Callable[..., Any],
    variants: dict[str, Sequence[Callable[..., Any]]] | dict[str, list[Mistake]],
    edge_cases: list[dict[str, Any]],
    strategy: st.SearchStrategy[dict[str, Any]],
    pick: Callable[[Any], Any] = lambda out: out,
    random_cases: int = 40,
    part: str | None = None,
    quiet: bool = False,
    *,
    make: Callable[..., Any] | None = None,
    measure: Callable[[list[dict[str, Any]], list[Any]], Finding | None] | None = None,
    probes: Sequence[dict[str, Any]] = (),
    invariants: Invariant | None = None,
    batched: Sequence[str] = (),
    late: Sequence[dict[str, Any]] = (),
) -> CheckResult:
    """Run a check; on failure raise :class:`AttentionBug` with the diagnosis described in the module docstring.

    ``variants`` maps codes to wrong functions of the case, or (with ``make``) to keyword arguments of
    ``make(**case, **mistake)``, the reference with deliberate mistakes; only the latter are paired into composites.
    ``invariants`` measures the check's own invariants (see :data:`Invariant`); ``batched`` names the arguments whose
    first axis is the batch, so that one sequence's output must not depend on another's; ``late`` holds edge cases
    tried only once the others pass (inputs at the edge of what the docstring allows, such as half precision, where
    a bug found earlier would only hide behind a crash).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # thousands of tiny operations: fastest on one thread (the numbers are the same)
    try:
        return _check(check, fn, reference, variants, edge_cases, strategy, pick, random_cases, part, quiet, make,
                      measure, probes, invariants, tuple(batched), list(late))
    finally:
        torch.set_num_threads(threads)


def _check(check: str, fn: Callable[..., Any], reference: Callable[..., Any], variants: Any,
           edge_cases: list[dict[str, Any]], strategy: st.SearchStrategy[dict[str, Any]], pick: Callable[[Any], Any],
           random_cases: int, part: str | None, quiet: bool, make: Callable[..., Any] | None,
           measure: Callable[..., Finding | None] | None, probes: Sequence[dict[str, Any]],
           invariants: Invariant | None = None, batched: tuple[str, ...] = (),
           late: list[dict[str, Any]] | None = None) -> CheckResult:
    def differs(case: dict[str, Any]) -> bool:
        return not _same(reference(**case), _call_student(fn, case, pick))

    late = late or []
    failing = [case for case in edge_cases if differs(case)]
    if not failing:
        try:
            failing = [find(strategy, differs, settings=settings(
                max_examples=random_cases, database=None, derandomize=True, deadline=None,
                suppress_health_check=list(HealthCheck)))]
        except NoSuchExample:
            failing = [case for case in late if differs(case)]
            if not failing:
                _LAST.clear()  # a passing check leaves no stale hint behind
                if not quiet:
                    print(f"{check}: passed ({len(edge_cases) + len(late)} edge cases, {random_cases} random inputs)")
                return CheckResult(check, len(edge_cases) + len(late), random_cases)
    example = min(failing, key=_size)
    actual = _call_student(fn, example, pick)
    if isinstance(actual, NotImplementedError):
        raise AttentionBug(check, "not-implemented", example, reference(**example), actual, part)
    bug, symptom = _diagnose(check, fn, reference, variants, edge_cases, failing, example, pick, part, make, measure,
                             probes, invariants, batched)
    if symptom is bug or bug.bug == "unknown":
        symptom = None  # nothing to keep for the hint: the message says all there is
    shown = bug.case if bug.case is not None else example
    if symptom is not None and symptom.case is not None and bug.case is None:
        shown = symptom.case  # in an exercise the message shows the input where the symptom was measured
    raise AttentionBug(check, bug.bug, shown, reference(**shown), _call_student(fn, shown, pick), part, what=bug.what,
                       fix=bug.fix, note=bug.note, also=bug.also, symptom=symptom, smallest=shown is example)


def _diagnose(check: str, fn: Callable[..., Any], reference: Callable[..., Any], variants: Any,
              edge_cases: list[dict[str, Any]], failing: list[dict[str, Any]], example: dict[str, Any],
              pick: Callable[[Any], Any], part: str | None, make: Callable[..., Any] | None,
              measure: Callable[..., Finding | None] | None, probes: Sequence[dict[str, Any]],
              invariants: Invariant | None = None, batched: tuple[str, ...] = ()) -> tuple[Finding, Finding | None]:
    """The diagnosis, and (for a find-the-bug exercise) the symptom that the message gives before the bug."""
    mistakes: dict[str, list[Mistake]] = {
        code: [w if isinstance(w, dict) else {"_fn": w} for w in wrongs] for code, wrongs in variants.items()}
    cases = list(failing)
    for case in [*edge_cases, *probes]:
        if all(case is not c for c in cases):
            cases.append(case)
    actual = [_call_student(fn, case, pick) for case in cases]
    expected = [reference(**case) for case in cases]
    fails = [i for i in range(len(cases)) if not _same(expected[i], actual[i])]
    by_size = sorted(fails, key=lambda i: _size(cases[i]))

    crashed = [i for i in by_size if isinstance(actual[i], Exception)]
    if crashed:
        found = _crash(actual[crashed[0]], cases[crashed[0]])
        return found, found

    def run(case: dict[str, Any]) -> Any:
        return _call_student(fn, case, pick)

    def broken() -> Finding | None:
        """The broken invariant on the smallest input, or a decisive one on any input."""
        first = None
        for i in by_size:
            found = _broken(cases[i], expected[i], actual[i], run, reference, invariants, batched)
            if found is not None and found.bug in DECISIVE_INVARIANTS:
                return found
            first = first or found
        return first

    def symptom() -> Finding:
        """What the message of a find-the-bug exercise says: a broken invariant, else what the check measures (its
        numbers, without the bug's name), else where the outputs differ."""
        found = broken()
        if found is not None:
            return found
        measured = measure([cases[i] for i in fails], [actual[i] for i in fails]) if measure is not None else None
        if measured is not None and measured.note and measured.bug not in measured.note:
            return Finding("unknown", what="your output differs from the expected output", note=measured.note,
                           case=measured.case)
        return _where(example, reference(**example), run(example))

    def hits(wrong: Callable[..., Any], nan_ok: bool, need_all: bool = False) -> tuple[int, int]:
        """(failing cases explained, all cases explained); with ``need_all``, (0, 0) once a failing case is missed.

        Unless ``nan_ok``, a NaN of the variant explains the student's NaN only if the variant also explains a
        failing case where it has no NaN: a NaN alone is never evidence.
        """
        failed = total = 0
        clean = False
        for i in [*fails, *(j for j in range(len(cases)) if j not in fails)]:
            out = _call(wrong, cases[i], lambda o: o)
            ok = _same(out, actual[i], True)
            if need_all and not ok and i in fails:
                return 0, 0
            total += ok
            failed += ok and i in fails
            clean = clean or (ok and i in fails and isinstance(out, Tensor) and not bool(torch.isnan(out).any()))
        if not nan_ok and not clean:
            return 0, 0
        return failed, total

    single: dict[str, tuple[int, int]] = {}
    words: dict[str, Mistake] = {}  # the variant that explains the most, whose own words (if any) are given
    for code, ms in mistakes.items():
        for m in ms:
            score = hits(_wrong(make, m), code in NAN_CODES)
            if score > single.get(code, (0, 0)):
                words[code] = m
            single[code] = max(single.get(code, (0, 0)), score)
    full = {c: s for c, s in single.items() if s[0] == len(fails)}
    if full:
        code = max(full, key=lambda c: full[c][1])
        m = words.get(code, {})
        return Finding(code, what=m.get("_what"), fix=m.get("_fix")), symptom() if _MODE["exercise"] else None
    if make is not None:
        best: tuple[int, str, str] | None = None
        for a, b, m in _pairs(mistakes):
            score = hits(_wrong(make, m), a in NAN_CODES or b in NAN_CODES, need_all=True)
            if score[0] == len(fails) and (best is None or score[1] > best[0]):
                best = (score[1], a, b)
        if best is not None:
            _, a, b = best
            first, second = (a, b) if single.get(a, (0, 0)) >= single.get(b, (0, 0)) else (b, a)
            return Finding(first, also=(second,)), symptom() if _MODE["exercise"] else None
    found = broken()
    finding = measure([cases[i] for i in fails], [actual[i] for i in fails]) if measure is not None else None
    if finding is not None and (found is None or (finding.bug not in WEAK_MEASURES
                                                  and found.bug not in DECISIVE_INVARIANTS)):
        return finding, (found or symptom()) if _MODE["exercise"] else None
    if found is not None:
        return found, found
    partial = {c: s for c, s in single.items() if s[0] > 0}
    if partial:
        code = max(partial, key=lambda c: partial[c])
        what = (f"consistent with this known mistake on {partial[code][0]} of the {len(fails)} inputs where your "
                f"output differs, though not on all: {BUGS[code][0]}")
        return Finding(code, what=what), symptom() if _MODE["exercise"] else None
    where = _where(example, reference(**example), run(example))
    return Finding("unknown", what=f"{UNKNOWN[0]}; {where.what}", note=where.note), where


def _broken(case: dict[str, Any], expected: Any, actual: Any, run: Callable[[dict[str, Any]], Any],
            reference: Callable[..., Any], invariants: Invariant | None, batched: tuple[str, ...]) -> Finding | None:
    """The first invariant that the student's ``actual`` output on ``case`` breaks: the generic ones (a tensor, of
    the right shape and dtype, finite where the expected output is), the check's own, then the batch's independence."""
    if not isinstance(expected, Tensor):
        return None
    if not isinstance(actual, Tensor):
        return Finding("wrong-type", what=f"the function returns a {type(actual).__name__} where a tensor of shape "
                                          f"{tuple(expected.shape)} is expected", case=case)
    if tuple(actual.shape) != tuple(expected.shape):
        return Finding("wrong-shape", what=f"the output has shape {tuple(actual.shape)} where "
                                           f"{tuple(expected.shape)} is expected, on the input shown", case=case)
    if expected.is_floating_point() and not actual.is_floating_point() and actual.dtype != torch.bool:
        return Finding("wrong-dtype", what=f"the output has dtype {actual.dtype}, not a floating-point dtype like "
                                           f"the expected {expected.dtype}", case=case)
    if expected.is_floating_point() and actual.is_floating_point():
        bad = ~torch.isfinite(actual.detach().cpu()) & torch.isfinite(expected.detach().cpu())
        if bool(bad.any()):
            index = tuple(int(i) for i in torch.nonzero(bad)[0])
            value = float(actual.detach().cpu()[index])
            return Finding("non-finite-output", note=f"{int(bad.sum())} of the {bad.numel()} entries of the output "
                                                     f"are not finite, the first {value} at index {index}, where "
                                                     f"{float(expected[index]):.4g} is expected", case=case)
    try:  # a measurement that cannot be made on this output says nothing; it never stops the diagnosis
        mixing = _batch_mixing(case, expected, actual, run, reference, batched)
    except Exception:  # noqa: BLE001
        mixing = None
    if mixing is not None:
        return mixing
    if invariants is not None:
        try:
            found = invariants(case, actual, run)
        except Exception:  # noqa: BLE001
            found = None
        if found is not None:
            return found if found.case is not None else replace(found, case=case)
    return None


def _batch_mixing(case: dict[str, Any], expected: Tensor, actual: Tensor, run: Callable[[dict[str, Any]], Any],
                  reference: Callable[..., Any], batched: tuple[str, ...]) -> Finding | None:
    """Whether the student's output for the first sequence moves when the other sequences of the batch change."""
    if not batched or expected.dim() == 0 or expected.shape[0] < 2:
        return None
    B = expected.shape[0]
    g = torch.Generator().manual_seed(43)
    other = dict(case)
    for name in batched:
        value = case.get(name)
        if not isinstance(value, Tensor) or not value.dim() or value.shape[0] != B:
            continue
        changed = value.clone()
        if value.is_floating_point():
            changed[1:] = torch.randn(changed[1:].shape, generator=g, dtype=torch.float32).to(value.dtype)
        elif value.dtype != torch.bool:  # lengths: others drawn from the same range
            lo, hi = int(value.min()), int(value.max())
            for _ in range(4):
                changed[1:] = torch.randint(lo, hi + 1, changed[1:].shape, generator=g)
                if not torch.equal(changed, value):
                    break
        other[name] = changed
    if all(other[name] is case.get(name) for name in batched if name in case):
        return None
    ref = reference(**other)
    if not isinstance(ref, Tensor) or not _same(ref[:1], expected[:1]):
        return None  # the reference itself mixes them: nothing to learn here
    moved = run(other)
    if not isinstance(moved, Tensor) or moved.shape != actual.shape or _same(moved[:1], actual[:1]):
        return None
    shift = float((moved[:1].detach().double() - actual[:1].detach().double()).abs().nan_to_num(0.0).max())
    others = "sequence 1" if B == 2 else f"sequences 1 to {B - 1}"
    return Finding("batch-mixing", note=f"with the input shown, and then with {others} of the batch replaced by "
                                        f"others, the output of sequence 0 moves by up to {shift:.3g}; "
                                        "consistent with a reshape, view or transpose that mixes the batch axis with "
                                        "another, or a mask or length taken from another sequence", case=case)


def _where(case: dict[str, Any], expected: Any, actual: Any) -> Finding:
    """Where the student's output differs from the expected one, in words (when no invariant is broken)."""
    if not isinstance(expected, Tensor) or not isinstance(actual, Tensor) or actual.shape != expected.shape:
        return Finding("unknown", what="the output differs from the expected output", case=case)
    e, a = expected.detach().cpu().double(), actual.detach().cpu().double()
    if expected.dtype == torch.bool or actual.dtype == torch.bool:
        differ = e != a
    else:
        differ = ~torch.isclose(a, e, rtol=1e-4, atol=1e-5, equal_nan=True)
    n = int(differ.sum())
    if differ.dim() <= 1:
        spots = [int(i) for i in torch.nonzero(differ).flatten()[:8]]
        where = f"at indices {spots}" if spots else "nowhere beyond rounding"
    else:
        rows = differ.flatten(0, -2).any(-1)  # every axis but the last: one row each
        index = torch.nonzero(rows.reshape(differ.shape[:-1]))
        spots = [tuple(int(k) for k in row) for row in index[:6]]
        more = f" and {len(index) - len(spots)} more" if len(index) > len(spots) else ""
        rest = "; the other rows match" if len(index) < rows.numel() else ""
        where = (f"in {len(index)} of the {int(rows.numel())} rows (indices over every axis but the last): "
                 f"{', '.join(map(str, spots))}{more}{rest}")
    worst = float((a - e).abs().nan_to_num(math.inf).max()) if n else 0.0
    look = ": look at what sets these entries apart from those that match" if n < differ.numel() else ""
    return Finding("unknown", what=f"{n} of the {differ.numel()} entries of your output differ from the expected "
                                   f"ones, {where}", note=f"largest difference {worst:.3g}{look}", case=case)


_LIBRARY = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.path.dirname(inspect.getfile(torch)),
            os.path.dirname(os.__file__))
"""Where the course's package, torch and the standard library live: a student's code is anywhere else."""


def _student_line(error: BaseException) -> str | None:
    """``line N of <cell or file>: <source line>``: the last line of the student's own code in the traceback."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if not f.filename.startswith(_LIBRARY) and "site-packages" not in f.filename
              and not f.filename.startswith("<frozen")]
    if not frames:
        return None
    frame = frames[-1]
    place = os.path.basename(frame.filename)
    try:  # in a notebook: the cell's name as IPython shows it in tracebacks (In[5])
        from IPython import get_ipython

        shell = get_ipython()
        named = shell.compile.format_code_name(frame.filename) if shell is not None else None
        if named:
            place = f"cell {named[1]}"
    except Exception:  # noqa: BLE001 (no IPython, or another version: the file's name will do)
        pass
    line = (frame.line or linecache.getline(frame.filename, frame.lineno or 0)).strip()
    return f"line {frame.lineno} of {place}" + (f": {line}" if line else "")


def _crash(error: BaseException, case: dict[str, Any]) -> Finding:
    """A crash of the student's function, in words: the exception and the line of the student's code that raised."""
    if isinstance(error, InputModified):
        return Finding("input-modified", what=f"your function changes its input: after the call, {error.names[0]} "
                                              "no longer holds the values it was called with",
                       note=f"{', '.join(error.names)} changed in place on the input shown (the values shown are "
                            "those passed in); consistent with an in-place operation (masked_fill_, +=, "
                            "an assignment into a slice) on an input tensor", case=case)
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    what = f"your function raised {type(error).__name__}" + (f": {message}" if message else "")
    where = _student_line(error)
    note = f"raised at {where}" if where else None
    fix = None
    if "without overflow" in message:
        floats = [v.dtype for v in case.values() if isinstance(v, Tensor) and v.is_floating_point()]
        dtype = str(floats[0]).replace("torch.", "") if floats else "this dtype"
        note = (note + "; " if note else "") + (f"the inputs are {dtype}: consistent with a constant that {dtype} "
                                                "cannot hold (float16 holds at most 65504)")
        fix = ("fill with a number the dtype can hold, torch.finfo(scores.dtype).min, rather than a constant such as "
               "-1e9 or -3.4e38")
    return Finding("function-raised", what=what, fix=fix, note=note, case=case)


# --------------------------------------------------------------------------------------------------------------------
# Helpers shared by the checks of modules


def _fit_scale(output: Callable[[float], Any], target: Tensor, lo: float = 1e-3, hi: float = 1e3) -> float | None:
    """The factor ``c`` (searched on a log grid, then refined) with ``output(c)`` equal to ``target``, or None."""
    if not isinstance(target, Tensor) or not target.is_floating_point() or not bool(torch.isfinite(target).all()):
        return None
    target = target.detach().double()

    def err(c: float) -> float:
        out = output(c)
        if not isinstance(out, Tensor) or out.shape != target.shape:
            return math.inf
        return float((out.double() - target).abs().max())

    grid = [lo * (hi / lo) ** (i / 48) for i in range(49)]
    errs = [err(c) for c in grid]
    i = min(range(len(grid)), key=errs.__getitem__)
    if errs[i] > 0.5 * (1 + float(target.abs().max())):
        return None
    a, b = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    for _ in range(40):  # golden-section search on log c
        la, lb = math.log(a), math.log(b)
        m1, m2 = math.exp(la + 0.382 * (lb - la)), math.exp(la + 0.618 * (lb - la))
        if err(m1) < err(m2):
            b = m2
        else:
            a = m1
    c = math.sqrt(a * b)
    tol = 1e-4 * (1 + float(target.abs().max()))
    return c if err(c) <= tol else None


def _arity(fn: Callable[..., Any]) -> int | None:
    """The number of positional parameters of ``fn`` (None when it cannot be read or takes ``*args``)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return None
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


def _check_module_cls(module_cls: object) -> None:
    if not callable(module_cls):
        raise TypeError(f"module_cls: expected the module class to check, got {type(module_cls).__name__}")


def _linear(probe: dict[str, Any], name: str, shape: tuple[int, int], reference: str) -> None:
    """The student's projection ``name`` (read by :func:`_layers`), checked to be a linear layer of weight shape
    ``shape``."""
    cls = probe["cls"]
    found = probe["layers"][name][0]
    if found is None:
        raise TypeError(f"module_cls: expected {cls} to have a linear layer named {name} (as {reference} has), "
                        f"so that the clinic can copy the reference weights into it; {cls} has none")
    if tuple(found) != shape:
        raise TypeError(f"module_cls: expected {cls}.{name}.weight of shape {shape} (out, in), as {reference}; got "
                        f"shape {tuple(found)}")


def _random_params(g: torch.Generator, shapes: Sequence[tuple[int, ...]], scale: float = 1.0) -> list[Tensor]:
    return [scale * torch.randn(*shape, generator=g) / math.sqrt(shape[-1]) for shape in shapes]


def _first(out: Any) -> Any:
    return out[0] if isinstance(out, tuple) else out
