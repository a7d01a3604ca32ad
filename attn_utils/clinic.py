"""The attention clinic: checks that test a student's attention code and name the bug when it is wrong.

Each ``check_*`` function runs the student's function against the package's reference, first on a few small edge
cases and then on random inputs drawn by hypothesis (which also shrinks a failing input to a smallest one). On
success it prints one line and returns a :class:`CheckResult`. On failure it raises :class:`AttentionBug`, an
``AssertionError`` that carries

* ``bug``: a code from :data:`BUGS` (or ``"unknown"``): the clinic runs the known wrong variants of the reference on
  the inputs where the student's output differed, and names the one that gives the student's output;
* ``example``: the smallest input found where the outputs differ;

and whose message says, in plain words, what went wrong, shows that input with the expected and the actual output,
and says how to fix it.

>>> check_causal_mask(lambda T_q, T_k: causal_mask(T_q, T_k))
check_causal_mask: passed (8 edge cases, 40 random inputs)
CheckResult(check='check_causal_mask', edge_cases=8, random_cases=40)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import HealthCheck, find, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample
from torch import Tensor

from .masking import causal_mask, masked_softmax, sequence_mask
from .positional import sinusoidal_encoding

__all__ = [
    "BUGS",
    "AttentionBug",
    "CheckResult",
    "check_masked_softmax",
    "check_dot_product_attention",
    "check_causal_mask",
    "check_positional_encoding",
    "check_nadaraya_watson",
]

BUGS: dict[str, tuple[str, str]] = {
    "softmax-wrong-axis": (
        "the softmax runs over the queries instead of over the keys",
        "normalise over the last axis, the keys: torch.softmax(scores, dim=-1)",
    ),
    "missing-scale": (
        "the scores are not divided by √d",
        "divide Q Kᵀ by math.sqrt(d), d being the width of the queries and keys",
    ),
    "scale-by-d": (
        "the scores are divided by d instead of √d",
        "divide by math.sqrt(d), not by d",
    ),
    "inverted-mask": (
        "the mask is inverted: padding is attended and the valid keys are ignored",
        "mask the keys at positions j >= valid_len, keep those before it",
    ),
    "mask-fill-zero": (
        "masked scores are set to 0 instead of a very negative number, so padding still gets weight",
        "fill the masked scores with float('-inf') (or a very negative number such as -1e9) before the softmax",
    ),
    "empty-row-uniform": (
        "a query with no valid key gets uniform weights over the padding instead of all-zero weights",
        "after the softmax, set the weights of queries with valid_len == 0 to 0",
    ),
    "empty-row-nan": (
        "a query with no valid key gets NaN weights (a softmax of a row that is all -inf)",
        "give such rows finite scores before the softmax and set their weights to 0 after it",
    ),
    "valid-lens-ignored": (
        "valid_lens is never applied: every key is attended, padding included",
        "build the mask from valid_lens (j < valid_len) and apply it to the scores",
    ),
    "causal-leak": (
        "a query can see keys after its own position",
        "allow key j for query i only when j <= i + (T_k - T_q)",
    ),
    "causal-no-diagonal": (
        "a query cannot see its own position",
        "use <= rather than < : query i may attend key i itself",
    ),
    "causal-top-left": (
        "with fewer queries than keys, the mask is aligned top-left instead of bottom-right",
        "the queries are the last T_q positions: allow j <= i + (T_k - T_q)",
    ),
    "pe-sin-cos-swapped": (
        "sine and cosine are in each other's columns",
        "put sin in the even columns (0, 2, 4, …) and cos in the odd ones",
    ),
    "pe-wrong-exponent": (
        "the frequency exponent is wrong (for example j/d instead of 2j/d)",
        "pair j (columns 2j and 2j+1) uses the frequency 1 / 10000^(2j/d)",
    ),
    "nw-wrong-sign": (
        "the kernel grows with distance: exp(+(x - x_i)² / 2σ²) instead of exp(-(x - x_i)² / 2σ²)",
        "use the minus sign: the softmax of -(x - x_i)² / (2σ²)",
    ),
}
"""The bug codes the clinic can name, each mapped to a pair of sentences (what is wrong, how to fix it)."""


class AttentionBug(AssertionError):
    """A student's function disagrees with the reference.

    Attributes:
        check: the name of the check that failed.
        bug: a code from :data:`BUGS`, or ``"unknown"``.
        example: the smallest input found where the outputs differ, as a dict of argument names to values.
        expected: the reference's output on ``example``.
        actual: the student's output on ``example`` (or the exception it raised).
    """

    def __init__(self, check: str, bug: str, example: dict[str, Any], expected: Any, actual: Any) -> None:
        self.check, self.bug, self.example, self.expected, self.actual = check, bug, example, expected, actual
        what, fix = BUGS.get(bug, ("the output differs from the reference, and no known bug explains it",
                                   "compare your function with the chapter's, step by step, on this input"))
        shown = "\n".join(f"  {name} = {_show(value)}" for name, value in example.items())
        super().__init__(
            f"{check}: {what} [bug: {bug}]\n"
            f"smallest input where your output differs:\n{shown}\n"
            f"expected:\n  {_show(expected)}\n"
            f"got:\n  {_show(actual)}\n"
            f"fix: {fix}"
        )


@dataclass(frozen=True)
class CheckResult:
    """What a passed check tested."""

    check: str
    edge_cases: int
    random_cases: int


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


def _same(expected: Any, actual: Any) -> bool:
    if isinstance(actual, BaseException) or not isinstance(actual, Tensor):
        return False
    if tuple(actual.shape) != tuple(expected.shape):
        return False
    if expected.dtype == torch.bool:
        return actual.dtype == torch.bool and torch.equal(actual.cpu(), expected.cpu())
    if not actual.is_floating_point():
        return False
    return torch.allclose(actual.detach().cpu().double(), expected.double(), rtol=1e-4, atol=1e-5, equal_nan=True)


def _size(case: dict[str, Any]) -> int:
    return sum(v.numel() if isinstance(v, Tensor) else 1 for v in case.values())


def _check_fn(fn: object) -> None:
    if not callable(fn):
        raise TypeError(f"fn: expected the function to check, got {type(fn).__name__}")


def _run_check(
    check: str,
    fn: Callable[..., Any],
    reference: Callable[..., Any],
    variants: dict[str, Sequence[Callable[..., Any]]],
    edge_cases: list[dict[str, Any]],
    strategy: st.SearchStrategy[dict[str, Any]],
    pick: Callable[[Any], Any] = lambda out: out,
    random_cases: int = 40,
) -> CheckResult:
    def differs(case: dict[str, Any]) -> bool:
        return not _same(reference(**case), _call(fn, case, pick))

    failing = [case for case in edge_cases if differs(case)]
    if not failing:
        try:
            failing = [find(strategy, differs, settings=settings(
                max_examples=random_cases, database=None, derandomize=True,
                suppress_health_check=list(HealthCheck)))]
        except NoSuchExample:
            print(f"{check}: passed ({len(edge_cases)} edge cases, {random_cases} random inputs)")
            return CheckResult(check, len(edge_cases), random_cases)
    example = min(failing, key=_size)
    outputs = {id(case): _call(fn, case, pick) for case in failing}
    # A variant explains the bug if it gives the student's output on the smallest failing input; among several, the
    # one that also gives it on the most other failing inputs.
    explained: dict[str, int] = {}
    for code, wrongs in variants.items():
        for wrong in wrongs:
            if _same(wrong(**example), outputs[id(example)]):
                hits = sum(_same(wrong(**case), outputs[id(case)]) for case in failing)
                explained[code] = max(explained.get(code, 0), hits)
    bug = max(explained, key=lambda code: explained[code]) if explained else "unknown"
    raise AttentionBug(check, bug, example, reference(**example), outputs[id(example)])


# --------------------------------------------------------------------------------------------------------------------
# Masked softmax and dot-product attention, with their wrong variants


def _mask(scores: Tensor, valid_lens: Tensor | None) -> Tensor | None:
    if valid_lens is None:
        return None
    mask = sequence_mask(valid_lens, scores.shape[-1])  # (B, T_k) or (B, T_q, T_k)
    return mask[:, None, :] if valid_lens.dim() == 1 else mask


def _softmax(scores: Tensor, valid_lens: Tensor | None, *, axis: int = -1, fill: float | None = -math.inf,
             invert: bool = False, ignore: bool = False, empty: str = "zero") -> Tensor:
    """A masked softmax with one deliberate mistake (or none, with the defaults)."""
    mask = None if ignore else _mask(scores, valid_lens)
    if mask is None:
        return torch.softmax(scores, dim=axis)
    if invert:
        mask = ~mask
    has_key = mask.any(dim=-1, keepdim=True)
    if empty == "zero":
        filled = scores.masked_fill(~mask & has_key, fill)
        return torch.softmax(filled, dim=axis).masked_fill(~has_key, 0.0)
    return torch.softmax(scores.masked_fill(~mask, fill), dim=axis)  # empty rows as the fill makes them


SOFTMAX_VARIANTS: dict[str, list[Callable[..., Tensor]]] = {
    "valid-lens-ignored": [lambda scores, valid_lens: _softmax(scores, valid_lens, ignore=True)],
    "softmax-wrong-axis": [lambda scores, valid_lens: _softmax(scores, valid_lens, axis=-2),
                           lambda scores, valid_lens: _softmax(scores, valid_lens, axis=-2, empty="fill",
                                                               fill=-1e6)],
    "inverted-mask": [lambda scores, valid_lens: _softmax(scores, valid_lens, invert=True),
                      lambda scores, valid_lens: _softmax(scores, valid_lens, invert=True, empty="fill", fill=-1e6)],
    "mask-fill-zero": [lambda scores, valid_lens: _softmax(scores, valid_lens, fill=0.0, empty="fill")],
    "empty-row-uniform": [lambda scores, valid_lens: _softmax(scores, valid_lens, fill=-1e6, empty="fill")],
    "empty-row-nan": [lambda scores, valid_lens: _softmax(scores, valid_lens, fill=-math.inf, empty="fill")],
}


def _scores_cases(draw: st.DrawFn, per_query: bool | None = None) -> tuple[Tensor, Tensor | None, dict[str, int]]:
    B, T_q, T_k = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 5))
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(B, T_q, T_k, generator=g)
    kind = draw(st.sampled_from(["none", "batch", "query"]))
    if kind == "none":
        lens = None
    elif kind == "batch":
        lens = torch.tensor(draw(st.lists(st.integers(0, T_k), min_size=B, max_size=B)))
    else:
        lens = torch.tensor(draw(st.lists(st.lists(st.integers(0, T_k), min_size=T_q, max_size=T_q),
                                          min_size=B, max_size=B)))
    return scores, lens, {"B": B, "T_q": T_q, "T_k": T_k, "seed": seed}


@st.composite
def _softmax_inputs(draw: st.DrawFn) -> dict[str, Any]:
    scores, lens, _ = _scores_cases(draw)
    return {"scores": scores, "valid_lens": lens}


def check_masked_softmax(fn: Callable[[Tensor, Tensor | None], Tensor]) -> CheckResult:
    """Check ``fn(scores, valid_lens) -> weights``, the masked softmax of chapter 3.

    Args:
        fn: takes ``scores`` of shape ``(B, T_q, T_k)`` and ``valid_lens`` (None, ``(B,)`` or ``(B, T_q)`` numbers of
            valid keys) and returns the weights ``(B, T_q, T_k)``: a softmax over the valid keys, 0 on the others,
            and all 0 for a query with no valid key.
    Returns:
        a :class:`CheckResult` (and one line printed).
    Raises:
        AttentionBug: the weights differ from :func:`~attn_utils.masking.masked_softmax` on some input.
    """
    _check_fn(fn)
    g = torch.Generator().manual_seed(0)
    edge = [
        {"scores": torch.randn(1, 1, 3, generator=g), "valid_lens": None},
        {"scores": torch.randn(2, 2, 4, generator=g), "valid_lens": torch.tensor([2, 3])},
        {"scores": torch.randn(2, 3, 4, generator=g), "valid_lens": torch.tensor([[1, 2, 4], [3, 0, 2]])},
        {"scores": torch.randn(2, 2, 3, generator=g), "valid_lens": torch.tensor([3, 0])},
    ]
    return _run_check("check_masked_softmax", lambda scores, valid_lens: fn(scores, valid_lens),
                      lambda scores, valid_lens: masked_softmax(scores, valid_lens), SOFTMAX_VARIANTS, edge,
                      _softmax_inputs())


def _attention(queries: Tensor, keys: Tensor, values: Tensor, valid_lens: Tensor | None = None, *,
               scale: str = "sqrt", **softmax: Any) -> Tensor:
    d = queries.shape[-1]
    divisor = {"sqrt": math.sqrt(d), "none": 1.0, "d": float(d)}[scale]
    scores = queries @ keys.transpose(-2, -1) / divisor
    return _softmax(scores, valid_lens, **softmax) @ values


def _scaled(wrong_softmax: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """Attention whose only mistake is in its softmax."""

    def attention(queries: Tensor, keys: Tensor, values: Tensor, valid_lens: Tensor | None = None) -> Tensor:
        return wrong_softmax(queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1]), valid_lens) @ values

    return attention


ATTENTION_VARIANTS: dict[str, list[Callable[..., Tensor]]] = {
    "missing-scale": [lambda **c: _attention(**c, scale="none"),
                      lambda **c: _attention(**c, scale="none", fill=-1e6, empty="fill")],
    "scale-by-d": [lambda **c: _attention(**c, scale="d"),
                   lambda **c: _attention(**c, scale="d", fill=-1e6, empty="fill")],
    **{code: [_scaled(w) for w in wrongs] for code, wrongs in SOFTMAX_VARIANTS.items()},
}


@st.composite
def _attention_inputs(draw: st.DrawFn) -> dict[str, Any]:
    scores, lens, sizes = _scores_cases(draw)
    g = torch.Generator().manual_seed(sizes["seed"] + 1)
    D, D_v = draw(st.sampled_from([2, 4, 8])), draw(st.integers(1, 3))
    return {"queries": 2 * torch.randn(sizes["B"], sizes["T_q"], D, generator=g),
            "keys": 2 * torch.randn(sizes["B"], sizes["T_k"], D, generator=g),
            "values": torch.randn(sizes["B"], sizes["T_k"], D_v, generator=g), "valid_lens": lens}


def check_dot_product_attention(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(queries, keys, values, valid_lens=None)``, scaled dot-product attention with masking.

    Args:
        fn: takes ``queries (B, T_q, D)``, ``keys (B, T_k, D)``, ``values (B, T_k, D_v)`` and ``valid_lens`` (None,
            ``(B,)`` or ``(B, T_q)``) and returns the output ``(B, T_q, D_v)``, or ``(output, weights)``.
    Returns:
        a :class:`CheckResult`.
    Raises:
        AttentionBug: the output differs from ``softmax(Q Kᵀ / √D) V`` with the mask, on some input.
    """
    _check_fn(fn)
    g = torch.Generator().manual_seed(1)

    def case(B: int, T_q: int, T_k: int, lens: Tensor | None) -> dict[str, Any]:
        return {"queries": 2 * torch.randn(B, T_q, 4, generator=g), "keys": 2 * torch.randn(B, T_k, 4, generator=g),
                "values": torch.randn(B, T_k, 2, generator=g), "valid_lens": lens}

    edge = [case(1, 2, 3, None), case(2, 2, 4, torch.tensor([2, 4])),
            case(2, 3, 3, torch.tensor([[1, 2, 3], [3, 0, 2]])), case(2, 2, 3, torch.tensor([3, 0]))]

    def pick(out: Any) -> Any:
        return out[0] if isinstance(out, tuple) else out

    return _run_check("check_dot_product_attention",
                      lambda queries, keys, values, valid_lens: fn(queries, keys, values, valid_lens),
                      lambda **c: _attention(**c), ATTENTION_VARIANTS, edge, _attention_inputs(), pick)


# --------------------------------------------------------------------------------------------------------------------
# Causal masks


def _causal(T_q: int, T_k: int, *, shift: int = 0, top_left: bool = False) -> Tensor:
    rows = torch.arange(T_q)[:, None] + (0 if top_left else T_k - T_q)
    return torch.arange(T_k)[None, :] <= rows + shift


CAUSAL_VARIANTS: dict[str, list[Callable[..., Tensor]]] = {
    "causal-top-left": [lambda T_q, T_k: _causal(T_q, T_k, top_left=True)],
    "causal-no-diagonal": [lambda T_q, T_k: _causal(T_q, T_k, shift=-1),
                           lambda T_q, T_k: _causal(T_q, T_k, shift=-1, top_left=True)],
    "causal-leak": [lambda T_q, T_k: torch.ones(T_q, T_k, dtype=torch.bool),
                    lambda T_q, T_k: _causal(T_q, T_k, shift=1),
                    lambda T_q, T_k: ~_causal(T_q, T_k, shift=-1),
                    lambda T_q, T_k: _causal(T_q, T_k, shift=1, top_left=True)],
}


def check_causal_mask(fn: Callable[[int, int], Tensor]) -> CheckResult:
    """Check ``fn(T_q, T_k) -> mask``, a causal mask with the queries as the last ``T_q`` positions.

    Args:
        fn: returns a bool ``(T_q, T_k)`` tensor, True where query ``i`` may attend key ``j``: ``j <= i + T_k - T_q``.
    Returns:
        a :class:`CheckResult`.
    Raises:
        AttentionBug: the mask differs from :func:`~attn_utils.masking.causal_mask` for some sizes.
    """
    _check_fn(fn)
    edge = [{"T_q": T_q, "T_k": T_k} for T_q, T_k in ((1, 1), (2, 2), (3, 3), (5, 5), (1, 4), (2, 5), (3, 4), (4, 6))]
    sizes = st.integers(1, 8).flatmap(lambda T_q: st.fixed_dictionaries(
        {"T_q": st.just(T_q), "T_k": st.integers(T_q, T_q + 6)}))
    return _run_check("check_causal_mask", lambda T_q, T_k: fn(T_q, T_k), lambda T_q, T_k: causal_mask(T_q, T_k),
                      CAUSAL_VARIANTS, edge, sizes)


# --------------------------------------------------------------------------------------------------------------------
# Positional encoding and Nadaraya–Watson


def _encoding(max_len: int, d_model: int, *, swap: bool = False, half_exponent: bool = False) -> Tensor:
    positions = torch.arange(max_len, dtype=torch.float64)[:, None]
    pairs = torch.arange(0, d_model, 2, dtype=torch.float64)
    exponent = pairs / 2 / d_model if half_exponent else pairs / d_model
    angles = positions / 10000.0**exponent
    P = torch.zeros(max_len, d_model, dtype=torch.float64)
    first, second = (torch.cos, torch.sin) if swap else (torch.sin, torch.cos)
    P[:, 0::2], P[:, 1::2] = first(angles), second(angles[:, : d_model // 2])
    return P.float()


PE_VARIANTS: dict[str, list[Callable[..., Tensor]]] = {
    "pe-sin-cos-swapped": [lambda max_len, d_model: _encoding(max_len, d_model, swap=True)],
    "pe-wrong-exponent": [lambda max_len, d_model: _encoding(max_len, d_model, half_exponent=True),
                          lambda max_len, d_model: _encoding(max_len, d_model, half_exponent=True, swap=True)],
}


def check_positional_encoding(fn: Callable[[int, int], Tensor]) -> CheckResult:
    """Check ``fn(max_len, d_model) -> P``, the sinusoidal positional encoding of chapter 6 (``d_model`` even).

    Raises:
        AttentionBug: ``P`` differs from :func:`~attn_utils.positional.sinusoidal_encoding` for some sizes.
    """
    _check_fn(fn)
    edge = [{"max_len": n, "d_model": d} for n, d in ((1, 2), (3, 4), (10, 8), (60, 16))]
    sizes = st.fixed_dictionaries({"max_len": st.integers(1, 64), "d_model": st.integers(1, 16).map(lambda k: 2 * k)})
    return _run_check("check_positional_encoding", lambda max_len, d_model: fn(max_len, d_model),
                      lambda max_len, d_model: sinusoidal_encoding(max_len, d_model), PE_VARIANTS, edge, sizes)


def _nw(queries: Tensor, keys: Tensor, values: Tensor, sigma: float, sign: float = -1.0) -> Tensor:
    scores = sign * (queries[:, None] - keys[None, :]) ** 2 / (2 * sigma**2)  # (n, m)
    return torch.softmax(scores, dim=-1) @ values


@st.composite
def _nw_inputs(draw: st.DrawFn) -> dict[str, Any]:
    n, m, seed = draw(st.integers(1, 5)), draw(st.integers(2, 8)), draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    return {"queries": 3 * torch.rand(n, generator=g), "keys": 3 * torch.rand(m, generator=g),
            "values": torch.randn(m, generator=g), "sigma": draw(st.sampled_from([0.5, 1.0, 2.0]))}


def check_nadaraya_watson(fn: Callable[[Tensor, Tensor, Tensor, float], Tensor]) -> CheckResult:
    """Check ``fn(queries, keys, values, sigma) -> predictions``, Gaussian-kernel Nadaraya–Watson regression.

    Args:
        fn: takes ``queries (n,)``, ``keys (m,)``, ``values (m,)`` and the width ``sigma`` and returns ``(n,)``
            predictions ``Σ_i softmax_i(-(x - x_i)² / 2σ²) y_i``.
    Raises:
        AttentionBug: the predictions differ from the reference on some input.
    """
    _check_fn(fn)
    g = torch.Generator().manual_seed(2)
    edge = [{"queries": torch.tensor([0.5]), "keys": torch.tensor([0.0, 1.0, 3.0]),
             "values": torch.tensor([1.0, 2.0, -1.0]), "sigma": 1.0},
            {"queries": 3 * torch.rand(4, generator=g), "keys": 3 * torch.rand(6, generator=g),
             "values": torch.randn(6, generator=g), "sigma": 0.5}]
    variants = {"nw-wrong-sign": [lambda **c: _nw(**c, sign=1.0)]}
    return _run_check("check_nadaraya_watson", lambda **c: fn(c["queries"], c["keys"], c["values"], c["sigma"]),
                      lambda **c: _nw(**c), variants, edge, _nw_inputs())
