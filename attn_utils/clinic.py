"""The attention clinic: checks that test a student's attention code and name the bug when it is wrong.

Each ``check_*`` function runs the student's function against the package's reference, first on a few small edge
cases and then on random inputs drawn by hypothesis (which also shrinks a failing input to a smallest one). On
success it prints one line and returns a :class:`CheckResult`. On failure it raises :class:`AttentionBug`, an
``AssertionError`` that carries

* ``bug``: a code from :data:`BUGS` (or ``"unknown"``): the clinic runs the known wrong variants of the reference on
  the inputs where the student's output differed, and names the one that gives the student's output;
* ``example``: the smallest input found where the outputs differ;

and whose message says, in plain words, what went wrong, shows that input with the expected and the actual output,
and says how to fix it. A function that still raises ``NotImplementedError`` (an exercise's starting point) fails
with the code ``"not-implemented"``.

The checks, by chapter:

============  ==============================================================================================
chapter 2     :func:`check_nadaraya_watson`
chapter 3     :func:`check_masked_softmax`, :func:`check_dot_product_attention`, :func:`check_additive_attention`
chapter 5     :func:`check_split_heads`, :func:`check_multihead_attention`
chapter 6     :func:`check_positional_encoding`
chapter 7     :func:`check_causal_mask`
chapter 8     :func:`check_online_softmax`
chapter 9     :func:`check_sampling`
chapter 10    :func:`check_patchify`
chapter 11    :func:`check_mean_pooling`
chapter 12    :func:`check_rope`
============  ==============================================================================================

>>> check_causal_mask(lambda T_q, T_k: causal_mask(T_q, T_k))
check_causal_mask: passed (8 edge cases, 40 random inputs)
CheckResult(check='check_causal_mask', edge_cases=8, random_cases=40)
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import HealthCheck, find, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample
from torch import Tensor, nn

from ._checks import check_positive_int
from .decoding import sampling_probs
from .masking import causal_mask, masked_softmax, sequence_mask
from .positional import apply_rope, sinusoidal_encoding
from .pretrained import mean_pool
from .vit import patchify

__all__ = [
    "BUGS",
    "AttentionBug",
    "CheckResult",
    "check_masked_softmax",
    "check_dot_product_attention",
    "check_additive_attention",
    "check_causal_mask",
    "check_split_heads",
    "check_multihead_attention",
    "check_positional_encoding",
    "check_nadaraya_watson",
    "check_online_softmax",
    "check_sampling",
    "check_patchify",
    "check_mean_pooling",
    "check_rope",
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
    "not-implemented": (
        "the function is not written yet: it raises NotImplementedError",
        "replace the `raise NotImplementedError` by your code, then run the check again",
    ),
    "scale-by-d-model": (
        "each head's scores are divided by √d_model instead of √d_head, although a head's dot products have only "
        "d_head = d_model / num_heads terms",
        "divide each head's scores by math.sqrt(d_model // num_heads)",
    ),
    "heads-interleaved": (
        "the reshape deals the features out to the heads in turn (head i gets features i, i + H, i + 2H, …) "
        "instead of giving each head a block of D_h neighbouring features",
        "reshape (B, T, D) to (B, T, H, D_h), not to (B, T, D_h, H): head i owns features i·D_h to (i + 1)·D_h - 1",
    ),
    "heads-no-transpose": (
        "(B, T, D) is reshaped straight into (B, H, T, D_h) (or merged back) without swapping the time and head "
        "axes, so a 'head' holds pieces of several positions",
        "reshape to (B, T, H, D_h) and then .transpose(1, 2); to merge, .transpose(1, 2) before the reshape",
    ),
    "heads-batch-order": (
        "the B·H rows are ordered head by head (row i·B + b) instead of sequence by sequence (row b·H + i), so "
        "per-sequence lengths repeated for each head land on the wrong rows",
        "permute to (B, H, T, D_h) before merging the first two axes: row b·H + i is head i of sequence b",
    ),
    "valid-lens-repeat": (
        "valid_lens is repeated with .repeat(H) instead of .repeat_interleave(H), so heads get the lengths of "
        "other sequences",
        "use torch.repeat_interleave(valid_lens, num_heads, dim=0): row b·H + i is head i of sequence b",
    ),
    "missing-output-projection": (
        "the heads are concatenated but never mixed by the output projection W_o",
        "return self.W_o(concatenated heads)",
    ),
    "additive-missing-tanh": (
        "the additive score has no tanh: w_vᵀ(W_q q + W_k k) splits into a query term, the same for every key, "
        "and a key term, so the weights cannot depend on the query",
        "apply torch.tanh to W_q q + W_k k before w_v",
    ),
    "online-no-rescale": (
        "when the running maximum grows, the running sum or the running output is not rescaled by "
        "exp(m_old - m_new), so earlier blocks keep too much weight",
        "multiply both the running sum and the running output by torch.exp(m_old - m_new) before adding the block",
    ),
    "online-rescale-inverted": (
        "the running sum is rescaled by exp(m_new - m_old) instead of exp(m_old - m_new)",
        "the factor is torch.exp(m_old - m_new), at most 1: the earlier terms were computed with a smaller maximum",
    ),
    "online-overflow": (
        "the exponentials are taken without subtracting the running maximum, so large scores overflow to inf and "
        "the output becomes NaN",
        "subtract the running maximum before torch.exp, and rescale the running sums when it grows",
    ),
    "online-partial-block-dropped": (
        "the last block is skipped when the block size does not divide the number of keys",
        "loop over range(0, T_k, block_size): slicing past the end simply gives a shorter last block",
    ),
    "rope-wrong-pairing": (
        "features are rotated in pairs (j, j + D_h/2), the 'rotate-half' layout, instead of neighbours (2j, 2j+1); "
        "both layouts exist, but weights only work in the layout they were trained with",
        "rotate the pair (x[..., 2j], x[..., 2j+1]), as au.apply_rope does",
    ),
    "rope-wrong-frequency": (
        "pair j turns with the frequency base^(-j/D_h) instead of base^(-2j/D_h)",
        "θ_j = base ** (-2j / D_h) for j = 0, …, D_h/2 - 1, i.e. base ** (-torch.arange(0, D_h, 2) / D_h)",
    ),
    "rope-wrong-direction": (
        "the rotation turns the other way (by -m θ_j): scores still depend only on the offset, but with the "
        "opposite sign to the package and to pretrained models",
        "x_even' = x_even cos - x_odd sin and x_odd' = x_even sin + x_odd cos",
    ),
    "rope-sin-cos-swapped": (
        "sine and cosine are swapped, which is no rotation at all: the vectors change length",
        "x_even' = x_even cos - x_odd sin and x_odd' = x_even sin + x_odd cos",
    ),
    "temperature-inverted": (
        "the logits are multiplied by the temperature instead of divided by it",
        "use softmax(logits / temperature)",
    ),
    "temperature-after-softmax": (
        "the temperature is applied to the probabilities, and the renormalisation undoes it: it has no effect",
        "divide the logits by the temperature before the softmax",
    ),
    "top-k-off-by-one": (
        "top-k keeps one token too few or too many",
        "keep the tokens whose probability is at least the k-th largest: probs.topk(k, dim=-1).values[:, -1:]",
    ),
    "top-p-excludes-crossing": (
        "top-p drops the token that brings the kept mass up to p, and keeps nothing at all when the most likely "
        "token alone has more than p",
        "keep a token when the mass of the tokens more likely than it is below p: cumsum - p_token < top_p",
    ),
    "top-p-unsorted": (
        "top-p adds up the probabilities in vocabulary order instead of from the most likely token down",
        "sort the probabilities in descending order before the cumulative sum, then scatter the mask back",
    ),
    "filters-wrong-order": (
        "top-p is applied before top-k, so the nucleus is measured on the whole distribution",
        "apply the temperature, then top-k, renormalise, and then top-p",
    ),
    "not-renormalised": (
        "the filtered probabilities are not renormalised: the rows no longer sum to 1",
        "divide by probs.sum(dim=-1, keepdim=True) after filtering",
    ),
    "patches-no-permute": (
        "the images are reshaped straight to (B, N, C·P·P), which cuts them into strips of pixel rows, not "
        "square patches",
        "reshape to (B, C, S/P, P, S/P, P), permute to (B, S/P, S/P, C, P, P), then reshape to (B, N, C·P·P)",
    ),
    "patches-column-order": (
        "the patches are numbered column by column instead of row by row",
        "put the axis of patch rows before the axis of patch columns: .permute(0, 2, 4, 1, 3, 5)",
    ),
    "patch-pixels-transposed": (
        "the pixels inside each patch are flattened column by column instead of row by row",
        "keep each patch's pixel rows before its pixel columns: .permute(0, 2, 4, 1, 3, 5)",
    ),
    "patch-channels-last": (
        "each patch is flattened with the channels last, (P, P, C), instead of first, (C, P, P), the order of a "
        "Conv2d weight and of F.unfold",
        "permute to (B, S/P, S/P, C, P, P) before the last reshape",
    ),
    "pooling-includes-padding": (
        "the mean runs over every position, padding included",
        "weight the tokens by attention_mask and divide by the number of real tokens",
    ),
    "pooling-divides-by-length": (
        "the real tokens are summed, but divided by the padded length T instead of their number",
        "divide by attention_mask.sum(dim=1, keepdim=True)",
    ),
    "pooling-cls-only": (
        "the first token's vector is returned instead of the mean of the real tokens",
        "average the vectors of the real tokens",
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

    def __init__(self, check: str, bug: str, example: dict[str, Any], expected: Any, actual: Any,
                 part: str | None = None) -> None:
        self.check, self.bug, self.expected, self.actual = check, bug, expected, actual
        self.example = {name: value for name, value in example.items() if not name.startswith("_")}
        what, fix = BUGS.get(bug, ("the output differs from the reference, and no known bug explains it",
                                   "compare your function with the chapter's, step by step, on this input"))
        shown = "\n".join(f"  {name} = {_show(value)}" for name, value in self.example.items())
        where = f" (in {part})" if part else ""
        super().__init__(
            f"{check}{where}: {what} [bug: {bug}]\n"
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
    part: str | None = None,
    quiet: bool = False,
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
            if not quiet:
                print(f"{check}: passed ({len(edge_cases)} edge cases, {random_cases} random inputs)")
            return CheckResult(check, len(edge_cases), random_cases)
    example = min(failing, key=_size)
    outputs = {id(case): _call(fn, case, pick) for case in failing}
    if isinstance(outputs[id(example)], NotImplementedError):
        raise AttentionBug(check, "not-implemented", example, reference(**example), outputs[id(example)], part)
    # A variant explains the bug if it gives the student's output on the smallest failing input; among several, the
    # one that also gives it on the most other inputs, failing or not.
    others = failing + [case for case in edge_cases if all(case is not f for f in failing)]
    outputs.update({id(case): _call(fn, case, pick) for case in others if id(case) not in outputs})
    explained: dict[str, int] = {}
    for code, wrongs in variants.items():
        for wrong in wrongs:
            if _same(wrong(**example), outputs[id(example)]):
                hits = sum(_same(wrong(**case), outputs[id(case)]) for case in others)
                explained[code] = max(explained.get(code, 0), hits)
    bug = max(explained, key=lambda code: explained[code]) if explained else "unknown"
    raise AttentionBug(check, bug, example, reference(**example), outputs[id(example)], part)


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


# --------------------------------------------------------------------------------------------------------------------
# Additive attention (chapters 3 and 4)


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


def _linear(module: nn.Module, name: str, shape: tuple[int, int], module_cls: Any, reference: str) -> nn.Module:
    """The student's projection ``name``, checked to be a linear layer of weight shape ``shape``."""
    layer = getattr(module, name, None)
    weight = getattr(layer, "weight", None)
    cls = getattr(module_cls, "__name__", type(module).__name__)
    if not isinstance(weight, Tensor):
        raise TypeError(f"module_cls: expected {cls} to have a linear layer named {name} (as {reference} has), "
                        f"so that the clinic can copy the reference weights into it; {cls} has none")
    if tuple(weight.shape) != shape:
        raise TypeError(f"module_cls: expected {cls}.{name}.weight of shape {shape} (out, in), as {reference}; got "
                        f"shape {tuple(weight.shape)}")
    return layer


def _random_params(g: torch.Generator, shapes: Sequence[tuple[int, ...]], scale: float = 1.0) -> list[Tensor]:
    return [scale * torch.randn(*shape, generator=g) / math.sqrt(shape[-1]) for shape in shapes]


def _additive(params: Sequence[Tensor], queries: Tensor, keys: Tensor, values: Tensor, valid_lens: Tensor | None,
              *, tanh: bool = True, softmax_fn: Callable[..., Tensor] | None = None, **softmax: Any) -> Tensor:
    W_q, W_k, w_v = params
    features = (queries @ W_q.T)[:, :, None] + (keys @ W_k.T)[:, None]  # (B, T_q, T_k, h)
    if tanh:
        features = torch.tanh(features)
    scores = (features @ w_v.T).squeeze(-1)  # (B, T_q, T_k)
    weights = softmax_fn(scores, valid_lens) if softmax_fn else _softmax(scores, valid_lens, **softmax)
    return weights @ values


def _additive_params(case: dict[str, Any]) -> list[Tensor]:
    g = torch.Generator().manual_seed(case["_seed"] + 7)
    h, D_q, D_k = case["num_hiddens"], case["queries"].shape[-1], case["keys"].shape[-1]
    return _random_params(g, [(h, D_q), (h, D_k), (1, h)], scale=2.0)


@st.composite
def _additive_inputs(draw: st.DrawFn) -> dict[str, Any]:
    scores, lens, sizes = _scores_cases(draw)
    g = torch.Generator().manual_seed(sizes["seed"] + 1)
    D_q, D_k, h, D_v = (draw(st.integers(1, 4)) for _ in range(4))
    return {"queries": torch.randn(sizes["B"], sizes["T_q"], D_q, generator=g),
            "keys": torch.randn(sizes["B"], sizes["T_k"], D_k, generator=g),
            "values": torch.randn(sizes["B"], sizes["T_k"], D_v, generator=g), "valid_lens": lens,
            "num_hiddens": h, "_seed": sizes["seed"]}


def check_additive_attention(module_cls: Callable[..., nn.Module]) -> CheckResult:
    """Check an additive (Bahdanau) attention module, ``a(q, k) = w_vᵀ tanh(W_q q + W_k k)``.

    The module is built as ``module_cls(query_size, key_size, num_hiddens)``, like
    :class:`~attn_utils.attention.AdditiveAttention`, and must hold three linear layers without bias named ``W_q``
    (``query_size → num_hiddens``), ``W_k`` (``key_size → num_hiddens``) and ``w_v`` (``num_hiddens → 1``): the
    clinic copies the reference weights into them. It is called as ``module(queries, keys, values, valid_lens)`` and
    returns the output ``(B, T_q, D_v)``, or ``(output, weights)``.

    Raises:
        TypeError: the module has no such layers.
        AttentionBug: the output differs from the reference on some input.
    """
    _check_module_cls(module_cls)
    probe = module_cls(3, 2, 5)
    for name, shape in (("W_q", (5, 3)), ("W_k", (5, 2)), ("w_v", (1, 5))):
        _linear(probe, name, shape, module_cls, "au.AdditiveAttention")

    def student(queries: Tensor, keys: Tensor, values: Tensor, valid_lens: Tensor | None, num_hiddens: int,
                _seed: int) -> Any:
        module = module_cls(queries.shape[-1], keys.shape[-1], num_hiddens).eval()
        params = _additive_params({"queries": queries, "keys": keys, "num_hiddens": num_hiddens, "_seed": _seed})
        with torch.no_grad():
            for name, weight in zip(("W_q", "W_k", "w_v"), params, strict=True):
                getattr(module, name).weight.copy_(weight)
        return module(queries, keys, values, valid_lens)

    def variant(**mistake: Any) -> Callable[..., Tensor]:
        return lambda **c: _additive(_additive_params(c), c["queries"], c["keys"], c["values"], c["valid_lens"],
                                     **mistake)

    variants = {"additive-missing-tanh": [variant(tanh=False), variant(tanh=False, fill=-1e6, empty="fill")]}
    variants.update({code: [lambda wrong=wrong, **c: _additive(
        _additive_params(c), c["queries"], c["keys"], c["values"], c["valid_lens"], softmax_fn=wrong)
        for wrong in wrongs] for code, wrongs in SOFTMAX_VARIANTS.items()})
    g = torch.Generator().manual_seed(3)

    def case(B: int, T_q: int, T_k: int, lens: Tensor | None, seed: int) -> dict[str, Any]:
        return {"queries": torch.randn(B, T_q, 2, generator=g), "keys": torch.randn(B, T_k, 3, generator=g),
                "values": torch.randn(B, T_k, 2, generator=g), "valid_lens": lens, "num_hiddens": 4, "_seed": seed}

    edge = [case(1, 2, 3, None, 0), case(2, 2, 4, torch.tensor([2, 4]), 1),
            case(2, 3, 3, torch.tensor([[1, 2, 3], [3, 0, 2]]), 2), case(2, 2, 3, torch.tensor([3, 0]), 3)]
    return _run_check("check_additive_attention", student, variant(), variants, edge, _additive_inputs(), _first)


def _first(out: Any) -> Any:
    return out[0] if isinstance(out, tuple) else out


# --------------------------------------------------------------------------------------------------------------------
# Splitting into heads, and multi-head attention (chapter 5)


def _split(X: Tensor, H: int, layout: int, mistake: str | None = None) -> Tensor:
    """(B, T, D) -> (B, H, T, D_h) (layout 4) or (B·H, T, D_h) (layout 3), with one deliberate mistake or none."""
    B, T, D = X.shape
    D_h = D // H
    if mistake == "heads-interleaved":
        x4 = X.reshape(B, T, D_h, H).permute(0, 3, 1, 2)
    elif mistake == "heads-no-transpose":
        x4 = X.reshape(B, H, T, D_h)
    else:
        x4 = X.reshape(B, T, H, D_h).transpose(1, 2)
    if layout == 4:
        return x4
    if mistake == "heads-batch-order":
        return x4.transpose(0, 1).reshape(B * H, T, D_h)
    return x4.reshape(B * H, T, D_h)


def _merge(Y: Tensor, H: int, layout: int, mistake: str | None = None) -> Tensor:
    """The inverse of :func:`_split`: (B, H, T, D_h) or (B·H, T, D_h) -> (B, T, D)."""
    if layout == 3:
        BH, T, D_h = Y.shape
        B = BH // H
        y4 = Y.reshape(H, B, T, D_h).transpose(0, 1) if mistake == "heads-batch-order" else Y.reshape(B, H, T, D_h)
    else:
        y4 = Y
    B, _, T, D_h = y4.shape
    if mistake == "heads-interleaved":
        return y4.permute(0, 2, 3, 1).reshape(B, T, H * D_h)
    if mistake == "heads-no-transpose":
        return y4.reshape(B, T, H * D_h)
    return y4.transpose(1, 2).reshape(B, T, H * D_h)


HEAD_MISTAKES = ("heads-interleaved", "heads-no-transpose", "heads-batch-order")


def check_split_heads(split_fn: Callable[..., Tensor], merge_fn: Callable[..., Tensor], num_heads: int) -> CheckResult:
    """Check a pair of functions that split ``(B, T, D)`` into heads and merge them back.

    Two layouts are accepted, read from what ``split_fn`` returns: ``(B, H, T, D_h)``, or ``(B·H, T, D_h)`` with row
    ``b·H + i`` holding head ``i`` of sequence ``b`` (chapter 5's ``transpose_qkv`` and ``transpose_output``). Head
    ``i`` holds features ``i·D_h`` to ``(i + 1)·D_h - 1``.

    Args:
        split_fn: ``split_fn(X, num_heads)`` (or ``split_fn(X)``) for ``X`` of shape ``(B, T, D)``.
        merge_fn: ``merge_fn(Y, num_heads)`` (or ``merge_fn(Y)``), the inverse.
        num_heads: the number of heads ``H`` (``D`` is a multiple of it in every input).
    Returns:
        a :class:`CheckResult` (one line printed).
    Raises:
        AttentionBug: either function differs from the reference on some input (the message says which).
    """
    for name, fn in (("split_fn", split_fn), ("merge_fn", merge_fn)):
        if not callable(fn):
            raise TypeError(f"{name}: expected the function to check, got {type(fn).__name__}")
    H = check_positive_int("num_heads", num_heads)

    def with_heads(fn: Callable[..., Tensor]) -> Callable[[Tensor], Tensor]:
        return (lambda X: fn(X)) if _arity(fn) == 1 else (lambda X: fn(X, H))

    split, merge = with_heads(split_fn), with_heads(merge_fn)
    probe = _call(lambda X: split(X), {"X": torch.arange(24.0 * H).reshape(2, 3, 4 * H)}, lambda out: out)
    layout = 4 if isinstance(probe, Tensor) and probe.dim() == 4 else 3

    def inputs(B: int, T: int, D_h: int) -> dict[str, Any]:
        return {"X": torch.arange(float(B * T * H * D_h)).reshape(B, T, H * D_h)}

    sizes = st.tuples(st.integers(1, 3), st.integers(1, 5), st.integers(1, 4))
    edge = [inputs(2, 3, 2), inputs(1, 4, 3), inputs(3, 1, 2)]
    mistakes = [m for m in HEAD_MISTAKES if layout == 3 or m != "heads-batch-order"]
    _run_check("check_split_heads", lambda X: split(X), lambda X: _split(X, H, layout),
               {m: [lambda X, m=m: _split(X, H, layout, m)] for m in mistakes}, edge,
               sizes.map(lambda s: inputs(*s)), part="split_fn", quiet=True)

    def split_inputs(case: dict[str, Any]) -> dict[str, Any]:
        return {"X": _split(case["X"], H, layout)}

    result = _run_check("check_split_heads", lambda X: merge(X), lambda X: _merge(X, H, layout),
                        {m: [lambda X, m=m: _merge(X, H, layout, m)] for m in mistakes},
                        [split_inputs(c) for c in edge], sizes.map(lambda s: split_inputs(inputs(*s))),
                        part="merge_fn", quiet=True)
    shape = "(B, H, T, D_h)" if layout == 4 else "(B * H, T, D_h)"
    print(f"check_split_heads: passed ({shape} layout; split and merge, {len(edge)} edge cases and "
          f"{result.random_cases} random inputs each)")
    return result


def _mha_params(case: dict[str, Any], biases: Sequence[bool]) -> list[Tensor]:
    D = case["d_model"]
    g = torch.Generator().manual_seed(case["_seed"] + 11)
    weights = _random_params(g, [(D, D)] * 4, scale=2.0)
    return weights + [
        0.3 * torch.randn(D, generator=g) if has else torch.zeros(D) for has in biases]


def _mha(params: Sequence[Tensor], queries: Tensor, keys: Tensor, values: Tensor, valid_lens: Tensor | None,
         H: int, *, scale: str = "head", split: str | None = None, merge: str | None = None, W_o: bool = True,
         lens: str = "interleave", softmax_fn: Callable[..., Tensor] | None = None, **softmax: Any) -> Tensor:
    """Multi-head attention written out, with deliberate mistakes (none with the defaults)."""
    W_q, W_k, W_v, W_o_, b_q, b_k, b_v, b_o = params
    q, k, v = queries @ W_q.T + b_q, keys @ W_k.T + b_k, values @ W_v.T + b_v  # (B, T, D)
    B, T_q, D = q.shape
    T_k, D_h = k.shape[1], D // H
    q4, k4, v4 = (_split(x, H, 4, split) for x in (q, k, v))  # (B, H, T, D_h)
    divisor = {"head": math.sqrt(D_h), "model": math.sqrt(D), "none": 1.0, "d": float(D_h)}[scale]
    scores = (q4 @ k4.transpose(-2, -1) / divisor).reshape(B * H, T_q, T_k)
    if valid_lens is not None:
        if lens == "repeat":
            valid_lens = valid_lens.repeat(H, *[1] * (valid_lens.dim() - 1))
        else:
            valid_lens = valid_lens.repeat_interleave(H, dim=0)
    weights = softmax_fn(scores, valid_lens) if softmax_fn else _softmax(scores, valid_lens, **softmax)
    weights = weights.reshape(B, H, T_q, T_k)
    out = _merge(weights @ v4, H, 4, merge)  # (B, T_q, D)
    return out @ W_o_.T + b_o if W_o else out


@st.composite
def _mha_inputs(draw: st.DrawFn) -> dict[str, Any]:
    scores, lens, sizes = _scores_cases(draw)
    D, H = draw(st.sampled_from([(8, 2), (6, 2), (8, 4), (12, 3)]))
    g = torch.Generator().manual_seed(sizes["seed"] + 1)
    return {"queries": torch.randn(sizes["B"], sizes["T_q"], D, generator=g),
            "keys": torch.randn(sizes["B"], sizes["T_k"], D, generator=g),
            "values": torch.randn(sizes["B"], sizes["T_k"], D, generator=g), "valid_lens": lens,
            "d_model": D, "num_heads": H, "_seed": sizes["seed"]}


PROJECTIONS = ("W_q", "W_k", "W_v", "W_o")


def check_multihead_attention(module_cls: Callable[..., nn.Module]) -> CheckResult:
    """Check a multi-head attention module against :class:`~attn_utils.multihead.MultiHeadAttention`.

    The module is built as ``module_cls(d_model, num_heads)`` and called as
    ``module(queries, keys, values, valid_lens)`` with ``queries (B, T_q, D)``, ``keys`` and ``values``
    ``(B, T_k, D)``; it returns the output ``(B, T_q, D)``, or ``(output, weights)``. It must hold linear layers
    ``D → D`` named ``W_q``, ``W_k``, ``W_v`` and ``W_o``, as the package's module: the clinic copies the reference
    weights into them (and their biases, when they have any), so that the outputs can be compared. Head ``i`` uses
    features ``i·D_h`` to ``(i + 1)·D_h - 1`` of each projection.

    Raises:
        TypeError: the module has no ``W_q``, ``W_k`` or ``W_v`` of that shape.
        AttentionBug: the output differs from the reference on some input.
    """
    _check_module_cls(module_cls)
    probe = module_cls(8, 2)
    for name in PROJECTIONS[:3]:
        _linear(probe, name, (8, 8), module_cls, "au.MultiHeadAttention")
    has_W_o = getattr(getattr(probe, "W_o", None), "weight", None) is not None
    if has_W_o:
        _linear(probe, "W_o", (8, 8), module_cls, "au.MultiHeadAttention")
    names = PROJECTIONS if has_W_o else PROJECTIONS[:3]
    biases = [getattr(getattr(probe, name, None), "bias", None) is not None for name in PROJECTIONS]

    def student(queries: Tensor, keys: Tensor, values: Tensor, valid_lens: Tensor | None, d_model: int,
                num_heads: int, _seed: int) -> Any:
        module = module_cls(d_model, num_heads).eval()
        params = _mha_params({"d_model": d_model, "_seed": _seed}, biases)
        with torch.no_grad():
            for i, name in enumerate(names):
                layer = getattr(module, name)
                layer.weight.copy_(params[i])
                if layer.bias is not None:
                    layer.bias.copy_(params[4 + i])
        return module(queries, keys, values, valid_lens)

    def variant(**mistake: Any) -> Callable[..., Tensor]:
        return lambda **c: _mha(_mha_params(c, biases), c["queries"], c["keys"], c["values"], c["valid_lens"],
                                c["num_heads"], **mistake)

    variants: dict[str, list[Callable[..., Tensor]]] = {
        "scale-by-d-model": [variant(scale="model")],
        "missing-scale": [variant(scale="none")],
        "scale-by-d": [variant(scale="d")],
        "heads-interleaved": [variant(split="heads-interleaved", merge="heads-interleaved"),
                              variant(split="heads-interleaved"), variant(merge="heads-interleaved")],
        "heads-no-transpose": [variant(split="heads-no-transpose", merge="heads-no-transpose"),
                               variant(split="heads-no-transpose"), variant(merge="heads-no-transpose")],
        "valid-lens-repeat": [variant(lens="repeat"), variant(lens="repeat", fill=-1e6, empty="fill")],
        "missing-output-projection": [variant(W_o=False)],
    }
    for code, wrongs in SOFTMAX_VARIANTS.items():
        variants[code] = [lambda wrong=wrong, **c: _mha(_mha_params(c, biases), c["queries"], c["keys"], c["values"],
                                                       c["valid_lens"], c["num_heads"], softmax_fn=wrong)
                          for wrong in wrongs]
    g = torch.Generator().manual_seed(4)

    def case(B: int, T_q: int, T_k: int, lens: Tensor | None, D: int, H: int, seed: int) -> dict[str, Any]:
        return {"queries": torch.randn(B, T_q, D, generator=g), "keys": torch.randn(B, T_k, D, generator=g),
                "values": torch.randn(B, T_k, D, generator=g), "valid_lens": lens, "d_model": D, "num_heads": H,
                "_seed": seed}

    edge = [case(1, 2, 3, None, 8, 2, 0), case(2, 3, 2, None, 8, 4, 1), case(2, 2, 4, torch.tensor([2, 4]), 8, 2, 2),
            case(3, 2, 3, torch.tensor([3, 1, 2]), 6, 2, 3), case(2, 2, 3, torch.tensor([[1, 3], [0, 2]]), 12, 3, 4)]
    return _run_check("check_multihead_attention", student, variant(), variants, edge, _mha_inputs(), _first)


# --------------------------------------------------------------------------------------------------------------------
# Online softmax: attention over blocks of keys (chapter 8)


def _online(q: Tensor, k: Tensor, v: Tensor, block_size: int, *, rescale: str = "both", inverted: bool = False,
            safe: bool = True, drop_last: bool = False, scale: bool = True) -> Tensor:
    """Attention over blocks of keys with a running maximum, sum and output, and deliberate mistakes (none with the
    defaults). Computed in the inputs' dtype, as a student's function would."""
    T_q, D = q.shape
    divisor = math.sqrt(D) if scale else 1.0
    mu = torch.full((T_q, 1), -math.inf, dtype=q.dtype)
    ell = torch.zeros(T_q, 1, dtype=q.dtype)
    o = torch.zeros(T_q, v.shape[1], dtype=q.dtype)
    stop = k.shape[0] - k.shape[0] % block_size if drop_last else k.shape[0]
    for start in range(0, stop, block_size):
        s = q @ k[start : start + block_size].T / divisor  # (T_q, block)
        if safe:
            mu_new = torch.maximum(mu, s.amax(dim=1, keepdim=True))
            p = torch.exp(s - mu_new)
            factor = torch.exp(mu_new - mu) if inverted else torch.exp(mu - mu_new)
        else:
            mu_new, p, factor = mu, torch.exp(s), torch.ones_like(mu)
        ell = ell * (factor if rescale in ("both", "sum") else 1.0) + p.sum(dim=1, keepdim=True)
        o = o * (factor if rescale in ("both", "output") else 1.0) + p @ v[start : start + block_size]
        mu = mu_new
    return o / ell


ONLINE_VARIANTS: dict[str, list[Callable[..., Tensor]]] = {
    "online-no-rescale": [lambda r=r, **c: _online(**c, rescale=r) for r in ("none", "sum", "output")],
    "online-rescale-inverted": [lambda **c: _online(**c, inverted=True)],
    "online-overflow": [lambda **c: _online(**c, safe=False)],
    "online-partial-block-dropped": [lambda **c: _online(**c, drop_last=True)],
    "missing-scale": [lambda **c: _online(**c, scale=False)],
}


@st.composite
def _online_inputs(draw: st.DrawFn) -> dict[str, Any]:
    T_q, T_k, D, D_v = draw(st.integers(1, 3)), draw(st.integers(1, 9)), draw(st.sampled_from([2, 4])), 2
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    size = draw(st.sampled_from([1.0, 8.0]))  # 8: scores large enough that exp() alone overflows float32
    return {"q": size * torch.randn(T_q, D, generator=g), "k": size * torch.randn(T_k, D, generator=g),
            "v": torch.randn(T_k, D_v, generator=g), "block_size": draw(st.integers(1, 5))}


def check_online_softmax(fn: Callable[[Tensor, Tensor, Tensor, int], Tensor]) -> CheckResult:
    """Check ``fn(q, k, v, block_size)``: attention ``softmax(q kᵀ / √D) v`` computed over blocks of keys with the
    online softmax (a running maximum, a running sum and a running output), as in chapter 8.

    Args:
        fn: takes ``q (T_q, D)``, ``k (T_k, D)``, ``v (T_k, D_v)`` and the number of keys per block (the last
            block may be shorter) and returns ``(T_q, D_v)``. Some inputs have scores large enough that ``exp``
            overflows unless the running maximum is subtracted.
    Returns:
        a :class:`CheckResult`.
    Raises:
        AttentionBug: the output differs from the reference on some input.
    """
    _check_fn(fn)
    g = torch.Generator().manual_seed(5)

    def case(T_q: int, T_k: int, D: int, block: int, size: float) -> dict[str, Any]:
        return {"q": size * torch.randn(T_q, D, generator=g), "k": size * torch.randn(T_k, D, generator=g),
                "v": torch.randn(T_k, 2, generator=g), "block_size": block}

    edge = [case(2, 6, 4, 2, 1.0), case(2, 7, 4, 3, 1.0), case(1, 5, 2, 1, 1.0), case(3, 4, 4, 4, 1.0),
            case(1, 6, 4, 2, 8.0)]

    def reference(q: Tensor, k: Tensor, v: Tensor, block_size: int) -> Tensor:
        q, k, v = q.double(), k.double(), v.double()
        return torch.softmax(q @ k.T / math.sqrt(q.shape[1]), dim=1) @ v

    return _run_check("check_online_softmax", lambda q, k, v, block_size: fn(q, k, v, block_size), reference,
                      ONLINE_VARIANTS, edge, _online_inputs())


# --------------------------------------------------------------------------------------------------------------------
# Decoding: the distribution that sampling draws from (chapter 9)


def _sampling(logits: Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None, *,
              temp: str = "divide", k_shift: int = 0, p_rule: str = "before", p_sorted: bool = True,
              order: str = "k-then-p", renormalise: bool = True) -> Tensor:
    """Temperature, top-k and top-p with deliberate mistakes (none with the defaults)."""
    V = logits.shape[-1]
    scores = {"divide": logits.double() / temperature, "multiply": logits.double() * temperature,
              "ignore": logits.double()}[temp]
    probs = scores.softmax(dim=-1)

    def k_filter(p: Tensor) -> Tensor:
        if top_k is None:
            return p
        kth = p.topk(min(max(top_k + k_shift, 1), V), dim=-1).values[:, -1:]  # (B, 1)
        return torch.where(p >= kth, p, torch.zeros_like(p))

    def p_filter(p: Tensor) -> Tensor:
        if top_p is None:
            return p
        p = p / p.sum(dim=-1, keepdim=True)
        if p_sorted:
            sorted_p, order_ = p.sort(dim=-1, descending=True)
        else:
            sorted_p, order_ = p, torch.arange(V).expand_as(p)
        cum = sorted_p.cumsum(dim=-1)
        keep_sorted = {"before": cum - sorted_p < top_p, "lt": cum < top_p, "le": cum <= top_p}[p_rule]
        return p * torch.zeros_like(keep_sorted).scatter(-1, order_, keep_sorted)

    probs = p_filter(k_filter(probs)) if order == "k-then-p" else k_filter(p_filter(probs))
    return probs / probs.sum(dim=-1, keepdim=True) if renormalise else probs


def _sampling_variant(**mistake: Any) -> Callable[..., Tensor]:
    return lambda **c: _sampling(**c, **mistake)


SAMPLING_VARIANTS: dict[str, list[Callable[..., Tensor]]] = {
    "temperature-inverted": [_sampling_variant(temp="multiply")],
    "temperature-after-softmax": [_sampling_variant(temp="ignore")],
    "top-k-off-by-one": [_sampling_variant(k_shift=-1), _sampling_variant(k_shift=1)],
    "top-p-excludes-crossing": [_sampling_variant(p_rule="lt"), _sampling_variant(p_rule="le")],
    "top-p-unsorted": [_sampling_variant(p_sorted=False)],
    "filters-wrong-order": [_sampling_variant(order="p-then-k")],
    "not-renormalised": [_sampling_variant(renormalise=False)],
}


@st.composite
def _sampling_inputs(draw: st.DrawFn) -> dict[str, Any]:
    B, V = draw(st.integers(1, 3)), draw(st.integers(2, 8))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    return {"logits": 2 * torch.randn(B, V, generator=g), "temperature": draw(st.sampled_from([0.5, 1.0, 2.0])),
            "top_k": draw(st.none() | st.integers(1, V)), "top_p": draw(st.none() | st.sampled_from([0.3, 0.6, 0.9]))}


def check_sampling(fn: Callable[..., Tensor]) -> CheckResult:
    """Check ``fn(logits, temperature=..., top_k=..., top_p=...)``, the distribution that sampling draws the next
    token from, against :func:`~attn_utils.decoding.sampling_probs`.

    Args:
        fn: takes ``logits (B, V)`` and the keyword arguments ``temperature`` (> 0), ``top_k`` (None or ``1..V``) and
            ``top_p`` (None or in ``(0, 1]``), and returns ``(B, V)`` probabilities: the softmax of
            ``logits / temperature``, restricted to the ``top_k`` most likely tokens, then to the smallest set of
            most likely tokens whose mass reaches ``top_p``, renormalised.
    Returns:
        a :class:`CheckResult`.
    Raises:
        AttentionBug: the probabilities differ from the reference on some input.
    """
    _check_fn(fn)
    g = torch.Generator().manual_seed(6)
    edge = [{"logits": torch.tensor([[3.0, 1.0, 0.5, -1.0]]), "temperature": 1.0, "top_k": None, "top_p": 0.5},
            {"logits": 2 * torch.randn(2, 5, generator=g), "temperature": 2.0, "top_k": None, "top_p": None},
            {"logits": 2 * torch.randn(2, 6, generator=g), "temperature": 1.0, "top_k": 3, "top_p": None},
            {"logits": 2 * torch.randn(1, 6, generator=g), "temperature": 1.0, "top_k": None, "top_p": 0.8},
            {"logits": 2 * torch.randn(2, 6, generator=g), "temperature": 0.5, "top_k": 4, "top_p": 0.6},
            {"logits": torch.tensor([[0.0, -0.5, -0.9]]), "temperature": 1.0, "top_k": 2, "top_p": 0.6}]
    return _run_check(
        "check_sampling", lambda logits, temperature, top_k, top_p: fn(logits, temperature=temperature, top_k=top_k,
                                                                        top_p=top_p),
        lambda logits, temperature, top_k, top_p: sampling_probs(logits, temperature=temperature, top_k=top_k,
                                                                 top_p=top_p),
        SAMPLING_VARIANTS, edge, _sampling_inputs())


# --------------------------------------------------------------------------------------------------------------------
# Patches of an image (chapter 10)


PATCH_ORDERS = {"ok": (0, 2, 4, 1, 3, 5), "patches-column-order": (0, 4, 2, 1, 3, 5),
                "patch-pixels-transposed": (0, 2, 4, 1, 5, 3), "patch-channels-last": (0, 2, 4, 3, 5, 1)}


def _patches(images: Tensor, patch_size: int, mistake: str = "ok") -> Tensor:
    B, C, S, _ = images.shape
    n, P = S // patch_size, patch_size
    if mistake == "patches-no-permute":
        return images.reshape(B, n * n, C * P * P)
    return images.reshape(B, C, n, P, n, P).permute(*PATCH_ORDERS[mistake]).reshape(B, n * n, C * P * P)


def _image_case(B: int, C: int, n: int, P: int) -> dict[str, Any]:
    S = n * P
    return {"images": torch.arange(float(B * C * S * S)).reshape(B, C, S, S), "patch_size": P}


def check_patchify(fn: Callable[[Tensor, int], Tensor]) -> CheckResult:
    """Check ``fn(images, patch_size)``, which cuts images into patches, the first step of a patch embedding
    (:func:`~attn_utils.vit.patchify`).

    Args:
        fn: takes ``images (B, C, S, S)`` (``S`` a multiple of ``patch_size``) and returns ``(B, N, C·P·P)``:
            patches numbered row by row, each flattened channel first, then by pixel row, then by pixel column
            (the order of ``F.unfold`` and of a ``Conv2d`` weight).
    Returns:
        a :class:`CheckResult`.
    Raises:
        AttentionBug: the patches differ from the reference for some images.
    """
    _check_fn(fn)
    edge = [_image_case(1, 1, 2, 2), _image_case(1, 1, 3, 2), _image_case(1, 2, 2, 2), _image_case(2, 1, 2, 3)]
    sizes = st.tuples(st.integers(1, 2), st.integers(1, 3), st.integers(1, 4), st.integers(1, 4))
    variants = {m: [lambda images, patch_size, m=m: _patches(images, patch_size, m)]
                for m in ("patches-no-permute", *list(PATCH_ORDERS)[1:])}
    return _run_check("check_patchify", lambda images, patch_size: fn(images, patch_size),
                      lambda images, patch_size: patchify(images, patch_size), variants, edge,
                      sizes.map(lambda s: _image_case(*s)))


# --------------------------------------------------------------------------------------------------------------------
# Sentence embeddings: mean pooling over the real tokens (chapter 11)


@st.composite
def _pooling_inputs(draw: st.DrawFn) -> dict[str, Any]:
    B, T, D = draw(st.integers(1, 3)), draw(st.integers(1, 6)), draw(st.integers(1, 4))
    lens = torch.tensor(draw(st.lists(st.integers(1, T), min_size=B, max_size=B)))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    return {"hidden": torch.randn(B, T, D, generator=g),
            "attention_mask": (torch.arange(T)[None, :] < lens[:, None]).long()}


def _pool(hidden: Tensor, attention_mask: Tensor, mistake: str) -> Tensor:
    if mistake == "pooling-includes-padding":
        return hidden.mean(dim=1)
    if mistake == "pooling-divides-by-length":
        return (hidden * attention_mask[..., None].to(hidden.dtype)).sum(dim=1) / hidden.shape[1]
    return hidden[:, 0]  # pooling-cls-only


def check_mean_pooling(fn: Callable[[Tensor, Tensor], Tensor]) -> CheckResult:
    """Check ``fn(hidden, attention_mask)``, the mean of each sentence's real tokens
    (:func:`~attn_utils.pretrained.mean_pool`).

    Args:
        fn: takes ``hidden (B, T, D)`` and ``attention_mask (B, T)`` (1 for a real token, 0 for padding, at least
            one 1 per row) and returns ``(B, D)``.
    Returns:
        a :class:`CheckResult`.
    Raises:
        AttentionBug: the sentence vectors differ from the reference on some input.
    """
    _check_fn(fn)
    g = torch.Generator().manual_seed(8)
    edge = [{"hidden": torch.randn(1, 3, 2, generator=g), "attention_mask": torch.tensor([[1, 1, 1]])},
            {"hidden": torch.randn(2, 4, 2, generator=g), "attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])},
            {"hidden": torch.randn(2, 3, 3, generator=g), "attention_mask": torch.tensor([[1, 0, 0], [1, 1, 0]])}]
    variants = {m: [lambda hidden, attention_mask, m=m: _pool(hidden, attention_mask, m)]
                for m in ("pooling-includes-padding", "pooling-divides-by-length", "pooling-cls-only")}
    return _run_check("check_mean_pooling", lambda hidden, attention_mask: fn(hidden, attention_mask),
                      lambda hidden, attention_mask: mean_pool(hidden, attention_mask), variants, edge,
                      _pooling_inputs())


# --------------------------------------------------------------------------------------------------------------------
# Rotary position embeddings (chapter 12)


def _rope(x: Tensor, *, pairing: str = "neighbours", exponent: float = 2.0, direction: float = 1.0,
          swap: bool = False, base: float = 10000.0) -> Tensor:
    D, T = x.shape[-1], x.shape[-2]
    theta = base ** (-exponent * torch.arange(D // 2, dtype=torch.float64) / D)  # (D/2,)
    angles = direction * torch.arange(T, dtype=torch.float64)[:, None] * theta  # (T, D/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    if swap:
        cos, sin = sin, cos
    a, b = (x[..., 0::2], x[..., 1::2]) if pairing == "neighbours" else (x[..., : D // 2], x[..., D // 2 :])
    ra, rb = a * cos - b * sin, a * sin + b * cos
    return torch.stack((ra, rb), dim=-1).flatten(-2) if pairing == "neighbours" else torch.cat((ra, rb), dim=-1)


ROPE_VARIANTS: dict[str, list[Callable[..., Tensor]]] = {
    "rope-wrong-pairing": [lambda x: _rope(x, pairing="halves")],
    "rope-wrong-frequency": [lambda x: _rope(x, exponent=1.0)],
    "rope-wrong-direction": [lambda x: _rope(x, direction=-1.0)],
    "rope-sin-cos-swapped": [lambda x: _rope(x, swap=True)],
}


@st.composite
def _rope_inputs(draw: st.DrawFn) -> dict[str, Any]:
    lead = draw(st.sampled_from([(), (1, 2), (2, 1)]))
    T, D = draw(st.integers(1, 12)), draw(st.sampled_from([2, 4, 6, 8]))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    return {"x": torch.randn(*lead, T, D, generator=g)}


def check_rope(fn: Callable[[Tensor], Tensor]) -> CheckResult:
    """Check ``fn(x)``, rotary position embeddings (:func:`~attn_utils.positional.apply_rope` with ``offset=0``).

    Args:
        fn: takes queries or keys ``x (..., T, D_h)`` (``D_h`` even; for example ``(T, D_h)`` or ``(B, H, T, D_h)``)
            and rotates the pair of features ``(2j, 2j+1)`` of position ``m`` (``x[..., m, :]``) by the angle
            ``m θ_j``, ``θ_j = 10000^(-2j / D_h)``.
    Returns:
        a :class:`CheckResult`.
    Raises:
        AttentionBug: the rotated vectors differ from the reference on some input.
    """
    _check_fn(fn)
    g = torch.Generator().manual_seed(9)
    edge = [{"x": torch.randn(3, 2, generator=g)}, {"x": torch.randn(4, 4, generator=g)},
            {"x": torch.randn(1, 2, 5, 6, generator=g)}, {"x": torch.randn(12, 8, generator=g)}]
    return _run_check("check_rope", lambda x: fn(x), lambda x: apply_rope(x), ROPE_VARIANTS, edge, _rope_inputs())
