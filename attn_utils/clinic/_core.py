"""The clinic's shared machinery: running a check, and diagnosing a failure.

A check compares the student's function with the reference, first on its edge cases and then on random inputs drawn
by hypothesis. When they differ, the diagnosis looks at **every** input where they differ (the edge cases, the
random input hypothesis shrank, and the check's extra probes), not only the smallest, and names the bug by, in turn:

1. a known mistake (a wrong variant of the reference) that gives the student's output on all of them;
2. a pair of known mistakes, made together, that does;
3. the check's measurements: properties recovered from the student's outputs (a scale factor, the keys a query
   attends to, a frequency, …) and compared with what they should be;
4. the known mistake that gives the student's output on the most of them.

A variant whose output has a NaN never explains a student's NaN unless the NaN is what the bug is about.
"""

from __future__ import annotations

import inspect
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from hypothesis import HealthCheck, find, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample
from torch import Tensor

from ._bugs import BUGS

NAN_CODES = frozenset({"empty-row-nan", "online-overflow", "online-rescale-inverted", "top-p-excludes-crossing",
                       "not-renormalised"})
"""The bugs whose symptom is a NaN: only their variants may explain a student's NaN."""

UNKNOWN = ("the output differs from the reference, and no known bug explains it",
           "compare your function with the chapter's, step by step, on this input")

Mistake = dict[str, Any]
"""One known mistake: keyword arguments of the check's mistaken reference (``{"_fn": f}`` for an opaque variant)."""


@dataclass(frozen=True)
class Finding:
    """What a check's measurements found: a bug code, and optionally the words that replace its stored ones."""

    bug: str
    what: str | None = None
    fix: str | None = None
    note: str | None = None
    also: tuple[str, ...] = field(default_factory=tuple)


_LAST: list[AttentionBug] = []


class AttentionBug(AssertionError):
    """A student's function disagrees with the reference.

    Attributes:
        check: the name of the check that failed.
        bug: a code from ``BUGS``, or ``"unknown"``.
        bugs: every cause named: ``(bug,)``, or two codes when two mistakes together explain the output.
        example: the smallest input found where the outputs differ, as a dict of argument names to values.
        expected: the reference's output on ``example``.
        actual: the student's output on ``example`` (or the exception it raised).

    The message states the symptom and names the bug; the fix is one step further, :meth:`hint`.
    """

    def __init__(self, check: str, bug: str, example: dict[str, Any], expected: Any, actual: Any,
                 part: str | None = None, *, what: str | None = None, fix: str | None = None,
                 note: str | None = None, also: Sequence[str] = ()) -> None:
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
        shown = "\n".join(f"  {name} = {_show(value)}" for name, value in self.example.items())
        where = f" (in {part})" if part else ""
        measured = f"measured: {note}\n" if note else ""
        super().__init__(
            f"{check}{where}: {what} [bug: {bug}]\n"
            f"{measured}"
            f"smallest input found where your output differs:\n{shown}\n"
            f"expected:\n  {_show(expected)}\n"
            f"got:\n  {_show(actual)}"
        )
        _LAST[:] = [self]

    def hint(self) -> str:
        """The fix, one step further than the diagnosis: ``fix: ...``."""
        return f"fix: {self._fix}"


def hint() -> str:
    """The fix for the bug of the last failed check (``fix: ...``), for a student who has read the diagnosis.

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
    return torch.allclose(actual.detach().cpu().double(), expected.detach().cpu().double(), rtol=1e-4, atol=1e-5,
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
    return lambda **case: make(**case, **mistake)


def _pairs(mistakes: dict[str, list[Mistake]]) -> list[tuple[str, str, Mistake]]:
    """Every compatible pair of mistakes of two different codes, merged (keys must not overlap)."""
    out = []
    codes = [c for c in mistakes if all("_fn" not in m for m in mistakes[c])]
    for a, b in itertools.combinations(codes, 2):
        for ma, mb in itertools.product(mistakes[a], mistakes[b]):
            if not set(ma) & set(mb):
                out.append((a, b, {**ma, **mb}))
    return out


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
) -> CheckResult:
    """Run a check; on failure raise :class:`AttentionBug` with the diagnosis described in the module docstring.

    ``variants`` maps codes to wrong functions of the case, or (with ``make``) to keyword arguments of
    ``make(**case, **mistake)``, the reference with deliberate mistakes; only the latter are paired into composites.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # thousands of tiny operations: fastest on one thread (the numbers are the same)
    try:
        return _check(check, fn, reference, variants, edge_cases, strategy, pick, random_cases, part, quiet, make,
                      measure, probes)
    finally:
        torch.set_num_threads(threads)


def _check(check: str, fn: Callable[..., Any], reference: Callable[..., Any], variants: Any,
           edge_cases: list[dict[str, Any]], strategy: st.SearchStrategy[dict[str, Any]], pick: Callable[[Any], Any],
           random_cases: int, part: str | None, quiet: bool, make: Callable[..., Any] | None,
           measure: Callable[..., Finding | None] | None, probes: Sequence[dict[str, Any]]) -> CheckResult:
    def differs(case: dict[str, Any]) -> bool:
        return not _same(reference(**case), _call(fn, case, pick))

    failing = [case for case in edge_cases if differs(case)]
    if not failing:
        try:
            failing = [find(strategy, differs, settings=settings(
                max_examples=random_cases, database=None, derandomize=True, deadline=None,
                suppress_health_check=list(HealthCheck)))]
        except NoSuchExample:
            _LAST.clear()  # a passing check leaves no stale hint behind
            if not quiet:
                print(f"{check}: passed ({len(edge_cases)} edge cases, {random_cases} random inputs)")
            return CheckResult(check, len(edge_cases), random_cases)
    example = min(failing, key=_size)
    actual = _call(fn, example, pick)
    if isinstance(actual, NotImplementedError):
        raise AttentionBug(check, "not-implemented", example, reference(**example), actual, part)
    bug = _diagnose(check, fn, reference, variants, edge_cases, failing, example, pick, part, make, measure, probes)
    raise AttentionBug(check, bug.bug, example, reference(**example), actual, part, what=bug.what, fix=bug.fix,
                       note=bug.note, also=bug.also)


def _diagnose(check: str, fn: Callable[..., Any], reference: Callable[..., Any], variants: Any,
              edge_cases: list[dict[str, Any]], failing: list[dict[str, Any]], example: dict[str, Any],
              pick: Callable[[Any], Any], part: str | None, make: Callable[..., Any] | None,
              measure: Callable[..., Finding | None] | None, probes: Sequence[dict[str, Any]]) -> Finding:
    mistakes: dict[str, list[Mistake]] = {
        code: [w if isinstance(w, dict) else {"_fn": w} for w in wrongs] for code, wrongs in variants.items()}
    cases = list(failing)
    for case in [*edge_cases, *probes]:
        if all(case is not c for c in cases):
            cases.append(case)
    actual = [_call(fn, case, pick) for case in cases]
    expected = [reference(**case) for case in cases]
    fails = [i for i in range(len(cases)) if not _same(expected[i], actual[i])]

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
    for code, ms in mistakes.items():
        for m in ms:
            score = hits(_wrong(make, m), code in NAN_CODES)
            single[code] = max(single.get(code, (0, 0)), score)
    full = {c: s for c, s in single.items() if s[0] == len(fails)}
    if full:
        return Finding(max(full, key=lambda c: full[c][1]))
    if make is not None:
        best: tuple[int, str, str] | None = None
        for a, b, m in _pairs(mistakes):
            score = hits(_wrong(make, m), a in NAN_CODES or b in NAN_CODES, need_all=True)
            if score[0] == len(fails) and (best is None or score[1] > best[0]):
                best = (score[1], a, b)
        if best is not None:
            _, a, b = best
            first, second = (a, b) if single.get(a, (0, 0)) >= single.get(b, (0, 0)) else (b, a)
            return Finding(first, also=(second,))
    if measure is not None:
        finding = measure([cases[i] for i in fails], [actual[i] for i in fails])
        if finding is not None:
            return finding
    partial = {c: s for c, s in single.items() if s[0] > 0}
    return Finding(max(partial, key=lambda c: partial[c]) if partial else "unknown")


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
