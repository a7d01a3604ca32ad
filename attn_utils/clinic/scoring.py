"""Chapters 2 to 4: Nadaraya–Watson regression, the masked softmax, dot-product and additive attention."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from hypothesis import strategies as st
from torch import Tensor, nn

from ..masking import masked_softmax, sequence_mask
from ._core import (
    CheckResult,
    Finding,
    Mistake,
    _check_fn,
    _check_module_cls,
    _first,
    _fit_scale,
    _layers,
    _linear,
    _random_params,
    _run_check,
    _run_module,
    _same,
    _size,
    _student_side,
)

# --------------------------------------------------------------------------------------------------------------------
# Masked softmax and dot-product attention, with their wrong variants


def _mask(scores: Tensor, valid_lens: Tensor | None) -> Tensor | None:
    if valid_lens is None:
        return None
    mask = sequence_mask(valid_lens, scores.shape[-1])  # (B, T_k) or (B, T_q, T_k)
    return mask[:, None, :] if valid_lens.dim() == 1 else mask


def _softmax(scores: Tensor, valid_lens: Tensor | None, *, axis: int = -1, fill: float | None = -math.inf,
             invert: bool = False, ignore: bool = False, empty: str = "zero", shift: int = 0,
             rows: bool = False, _what: str | None = None) -> Tensor:
    """A masked softmax with one deliberate mistake (or none, with the defaults). With ``rows``, the valid lengths
    mask the queries' rows (a padding mask shaped (B, T, 1) where (B, 1, T) was meant), not the keys. ``_what`` is
    the mistake's own words (see ``Mistake``), ignored here, so that a mistake's dict can be passed on whole."""
    if rows and valid_lens is not None:
        lens = valid_lens[:, None] if valid_lens.dim() == 1 else valid_lens
        real = (torch.arange(scores.shape[-2]) < lens)[..., None]  # (B, T_q, 1): the queries of real tokens
        weights = torch.softmax(scores.masked_fill(~real, -1e9 if fill is None else fill), dim=axis)
        if empty == "zero":
            weights = weights.masked_fill(~_mask(scores, valid_lens).any(-1, keepdim=True), 0.0)
        return weights
    mask = None if ignore else _mask(scores, valid_lens)
    if mask is not None and shift:
        mask = _mask(scores, (valid_lens + shift).clamp(0, scores.shape[-1]))
    if mask is None:
        return torch.softmax(scores, dim=axis)
    if invert:
        mask = ~mask
    has_key = mask.any(dim=-1, keepdim=True)
    if empty == "zero":
        filled = scores.masked_fill(~mask & has_key, fill)
        return torch.softmax(filled, dim=axis).masked_fill(~has_key, 0.0)
    return torch.softmax(scores.masked_fill(~mask, fill), dim=axis)  # empty rows as the fill makes them


SOFTMAX_MISTAKES: dict[str, list[Mistake]] = {
    "valid-lens-ignored": [{"ignore": True}],
    "softmax-wrong-axis": [{"axis": -2}, {"axis": -2, "fill": -1e9}, {"axis": -2, "empty": "fill", "fill": -1e6},
                           {"axis": -2, "empty": "fill", "fill": -1e9}],
    "inverted-mask": [{"invert": True}, {"invert": True, "empty": "fill", "fill": -1e6}],
    "mask-fill-zero": [{"fill": 0.0, "empty": "fill"}],
    "empty-row-uniform": [{"fill": -1e6, "empty": "fill"}],
    "empty-row-nan": [{"fill": -math.inf, "empty": "fill"}],
    "mask-off-by-one": [{"shift": 1}, {"shift": -1}, {"shift": 1, "fill": -1e6, "empty": "fill"}],
    "mask-wrong-keys": [
        {"rows": True, "fill": -1e9, "empty": e, "_what": "the valid lengths mask the queries instead of the keys "
                                                          "(the padding mask is laid along the query axis, a "
                                                          "(B, T, 1) shape where (B, 1, T) was meant): a real "
                                                          "query still attends the padded keys"}
        for e in ("zero", "fill")],
}
"""The known mistakes of a masked softmax, as keyword arguments of :func:`_softmax`."""

SOFTMAX_VARIANTS: dict[str, list[Callable[..., Tensor]]] = {
    code: [lambda scores, valid_lens, m=m: _softmax(scores, valid_lens, **m) for m in ms]
    for code, ms in SOFTMAX_MISTAKES.items()}


def _attended(weights: Tensor) -> Tensor:
    return weights.detach().double().abs() > 1e-6


def _measure_mask(scores: Tensor, valid_lens: Tensor | None, weights: Any) -> Finding | None:
    """Which keys each query really attends to, compared with the valid ones (whatever the fill or mask form)."""
    if valid_lens is None or not isinstance(weights, Tensor) or weights.shape != scores.shape:
        return None
    if not weights.is_floating_point() or bool(torch.isnan(weights).any()):
        return None
    valid = _mask(scores, valid_lens).expand_as(scores)
    rows = valid.any(-1)  # queries with at least one valid key
    w = weights.detach().double()
    rows_sum_to_one = torch.allclose(w.sum(-1)[rows], torch.ones_like(w.sum(-1)[rows]), atol=1e-4)
    for axis, name in ((-2, "the queries (each column)"), (0, "the batch")):
        sums = w.sum(axis)
        if w.shape[axis] > 1 and torch.allclose(sums, torch.ones_like(sums), atol=1e-4) and not rows_sum_to_one:
            return Finding("softmax-wrong-axis", note=f"the weights sum to 1 over {name}, not over the keys")
    if not bool(rows.any()):
        return None
    got, want = _attended(weights)[rows], valid[rows]
    if torch.equal(got, want):
        return None
    if torch.equal(got, ~want) and bool((~want).any()):
        return Finding("inverted-mask", note="each query attends exactly the keys it should not")
    for shift, word in ((1, "one key past"), (-1, "one key short of")):
        shifted = _mask(scores, (valid_lens + shift).clamp(0, scores.shape[-1])).expand_as(scores)[rows]
        if torch.equal(got, shifted):
            return Finding("mask-off-by-one", note=f"each query attends up to {word} its valid length")
    if bool(got.all()):
        w, s = weights.detach().double()[rows], scores.double()[rows]
        pad = ~want
        ref = torch.where(want, s, torch.full_like(s, -math.inf)).amax(-1, keepdim=True)  # a valid key's score
        w_ref = torch.where(want & (s == ref), w, torch.zeros_like(w)).amax(-1, keepdim=True)
        replaced = (w.log() - w_ref.log() + ref)[pad]  # the score a padded key was given
        added = replaced - s[pad]  # or the bias added to its score
        for values, how in ((replaced, "set to"), (added, "shifted by")):
            if values.numel() and float(values.max() - values.min()) < 1e-3:
                fill = float(values.mean())
                if how == "shifted by" and abs(fill) < 1e-3:
                    return Finding("valid-lens-ignored", note="the padded keys get their unmasked weights")
                code = "mask-fill-zero" if how == "set to" and abs(fill) < 1e-3 else "mask-fill-too-small"
                return Finding(code, note=f"the masked scores are {how} {fill:.4g}: padding keeps "
                                          f"{float(w[pad].sum() / rows.sum()):.3g} of the weight per query, on average")
    r = int(torch.nonzero((got != want).any(-1)).flatten()[0])
    return Finding("mask-wrong-keys", note=f"a query attends keys {torch.nonzero(got[r]).flatten().tolist()} "
                                           f"instead of {torch.nonzero(want[r]).flatten().tolist()}")


def _weights_broken(scores: Tensor, valid_lens: Tensor | None, weights: Any, of: str = "") -> Finding | None:
    """The invariant of attention weights that ``weights`` breaks, in words: nonnegative, 0 on the keys a query may not
    see, summing to 1 over those it may see, all 0 for a query that may see none. ``of`` names where the weights come
    from, when they are not the output itself."""
    if not isinstance(weights, Tensor) or weights.shape != scores.shape or not weights.is_floating_point():
        return None
    w = weights.detach().cpu().double()
    if not bool(torch.isfinite(w).all()):
        return None  # the generic invariant reports it
    tol = 2e-3 if weights.dtype in (torch.float16, torch.bfloat16) else 1e-4
    if w.shape[-1] > 1 and bool(((w - 1).abs() < tol).all()):
        return Finding("softmax-wrong-axis", note=f"every weight is 1{of}: that is a softmax over an axis of length 1 "
                                                  "(a column of scores, say), while it must run over the keys")
    mask = _mask(scores, valid_lens)
    visible = torch.ones_like(w, dtype=torch.bool) if mask is None else mask.expand_as(w).cpu()
    lens = visible.sum(-1)

    def query(index: Tensor) -> str:
        b, i = (int(k) for k in index[:2])
        return f"query {i} of sequence {b}"

    negative = w < -tol
    if bool(negative.any()):
        at = torch.nonzero(negative)[0]
        return Finding("output-outside-values" if of else "rows-not-normalised",
                       what="a weight is negative: attention weights are a softmax, nonnegative and summing to 1",
                       note=f"{query(at)} gives key {int(at[-1])} the weight {float(w[tuple(at)]):.4g}{of}")
    leak = (w.abs() > tol) & ~visible & (lens[..., None] > 0)
    if bool(leak.any()):
        at = torch.nonzero(leak)[0]
        b, i = int(at[0]), int(at[1])
        keys = torch.nonzero(w[b, i].abs() > tol).flatten().tolist()
        return Finding("weights-on-masked-keys",
                       note=f"{query(at)} may see keys 0 to {int(lens[b, i]) - 1} (its valid length is "
                            f"{int(lens[b, i])}), and gives weight to keys {keys}{of}: key {int(at[-1])} gets "
                            f"{float(w[b, i, int(at[-1])]):.4g}")
    sums = (w * visible).sum(-1)
    off = ((sums - 1).abs() > 10 * tol) & (lens > 0)
    if bool(off.any()):
        at = torch.nonzero(off)[0]
        b, i = int(at[0]), int(at[1])
        after = torch.softmax(scores.detach().cpu().double(), -1) * visible
        cause = ""
        if torch.allclose(w, after, atol=10 * tol):
            cause = ("; consistent with a mask applied after the softmax: the weights are those of a softmax over "
                     "every key, with the masked keys then set to 0")
        elif bool(((w.sum(-2) - 1).abs() < 10 * tol).all()) and w.shape[-2] > 1:
            return Finding("softmax-wrong-axis", note=f"{query(at)}'s weights sum to {float(sums[b, i]):.4g}{of}, "
                                                      "while each column (one key, every query) sums to 1")
        return Finding("rows-not-normalised",
                       note=f"{query(at)} may see keys 0 to {int(lens[b, i]) - 1}, and its weights on them sum to "
                            f"{float(sums[b, i]):.4g}{of}{cause}")
    empty = (w.abs().sum(-1) > tol) & (lens == 0)
    if bool(empty.any()):
        at = torch.nonzero(empty)[0]
        b, i = int(at[0]), int(at[1])
        return Finding("empty-row-not-zero",
                       note=f"{query(at)} has valid length 0, and its weights sum to {float(w[b, i].sum()):.4g} "
                            f"instead of 0{of}")
    return None


def _softmax_invariants(case: dict[str, Any], out: Any, run: Callable[[dict[str, Any]], Any]) -> Finding | None:
    return _weights_broken(case["scores"], case["valid_lens"], out)


def _attention_weights(case: dict[str, Any], out: Any, run: Callable[[dict[str, Any]], Any]) -> Tensor | None:
    """The student's weights, read off its output on the same queries and keys with the identity as values (each
    output row is then the row of weights), when the output is that linear map of the values."""
    B, T_k = case["keys"].shape[0], case["keys"].shape[-2]
    eye = torch.eye(T_k, dtype=case["values"].dtype).expand(B, T_k, T_k).clone()
    weights = run({**case, "values": eye})
    if not isinstance(weights, Tensor) or not isinstance(out, Tensor) or not weights.is_floating_point():
        return None
    if weights.shape[:-1] != out.shape[:-1] or weights.shape[-1] != T_k or case["values"].shape[-2] != T_k:
        return None
    if not _same(weights @ case["values"].to(weights.dtype), out):
        return None  # not linear in the values: the weights cannot be read this way
    return weights


def _attention_invariants(case: dict[str, Any], out: Any, run: Callable[[dict[str, Any]], Any]) -> Finding | None:
    """The invariants of the weights (read off the output), and that the output depends on the queries."""
    weights = _attention_weights(case, out, run)
    if weights is None:
        return _ignores_queries(case, out, run)
    found = _weights_of(case, weights)
    return found if found is not None else _ignores_queries(case, out, run)


def _ignores_queries(case: dict[str, Any], out: Any, run: Callable[[dict[str, Any]], Any]) -> Finding | None:
    """Whether the output stays the same when the queries are replaced by others (attention's weights, and so its
    output, depend on the query: on these inputs the expected output moves)."""
    if not isinstance(out, Tensor) or case["keys"].shape[-2] < 2 or case["queries"].shape[-2] < 1:
        return None
    g = torch.Generator().manual_seed(45)
    other = {**case, "queries": 2 * torch.randn(case["queries"].shape, generator=g).to(case["queries"].dtype)}
    moved = run(other)
    if not isinstance(moved, Tensor) or moved.shape != out.shape or not _same(moved, out):
        return None
    queries = case["queries"].shape[-2]
    same_rows = "; and every query of a sequence gets the same output" if queries > 1 and bool(
        (out - out[..., :1, :]).abs().max() < 1e-6) else ""
    return Finding("output-ignores-queries", note=f"with the queries of the input shown replaced by others, your "
                                                  f"output stays the same{same_rows}")


def _weights_of(case: dict[str, Any], weights: Tensor) -> Finding | None:
    q, k = case["queries"].double(), case["keys"].double()
    # the scores of dot-product attention (with which a mask after the softmax is recognised); zeros otherwise
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) if q.shape[-1] == k.shape[-1] else torch.zeros(
        weights.shape, dtype=torch.float64)
    of = " (your weights, read off your output with the identity matrix as the values)"
    return _scaled_after(case, weights, of) or _weights_broken(scores, case["valid_lens"], weights, of=of)


def _scaled_after(case: dict[str, Any], weights: Tensor, of: str) -> Finding | None:
    """Whether the weights are softmax(Q Kᵀ) times 1/√d: the scale applied to the weights instead of the scores."""
    q, k, lens = case["queries"].double(), case["keys"].double(), case["valid_lens"]
    if q.shape[-1] != k.shape[-1] or weights.shape[-1] != k.shape[-2] or not weights.is_floating_point():
        return None
    raw = q @ k.transpose(-2, -1)
    w, mask = weights.detach().cpu().double(), _mask(raw, lens)
    rows = torch.ones(w.shape[:-1], dtype=torch.bool) if mask is None else mask.expand_as(w).any(-1)
    if w.shape != raw.shape or not bool(rows.any()) or not bool(torch.isfinite(w).all()):
        return None
    d, sums = q.shape[-1], w.sum(-1)[rows]
    c = float(sums.mean())
    if abs(c - 1 / math.sqrt(d)) > 1e-4 or abs(c - 1) < 1e-3 or float((sums - c).abs().max()) > 1e-4:
        return None
    if not torch.allclose((w / c)[rows], _softmax(raw, lens)[rows], atol=1e-4):
        return None
    return Finding("missing-scale", what="the scores are not divided by √d: the factor 1/√d multiplies the weights "
                                         "after the softmax instead of the scores before it",
                   note=f"every query's weights sum to {c:.4g} = 1/√{d}{of}, and divided by it they are "
                        "softmax(Q Kᵀ) without the scale")


def _measure_axis(scores: Tensor, weights: Any) -> Finding | None:
    """Whether the weights sum to 1 over another axis than the keys."""
    if not isinstance(weights, Tensor) or weights.shape != scores.shape or not weights.is_floating_point():
        return None
    w = weights.detach().double()
    axes: tuple[tuple[tuple[int, ...], str], ...] = (
        ((-2,), "the queries (each column)"), ((0,), "the batch"), ((0, 1), "the batch and the queries together"))
    for axis, name in axes:
        sums = w.sum(axis)
        if math.prod(w.shape[a] for a in axis) > 1 and torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
            return Finding("softmax-wrong-axis", note=f"the weights sum to 1 over {name}, not over the keys")
    return None


def _measure_softmax(cases: list[dict[str, Any]], outputs: list[Any]) -> Finding | None:
    ordered = sorted(zip(cases, outputs, strict=True), key=lambda co: _size(co[0]))
    for case, out in ordered:
        found = _measure_axis(case["scores"], out)
        if found is not None:
            return found
    for case, out in ordered:
        found = _measure_mask(case["scores"], case["valid_lens"], out)
        if found is not None:
            return found
    return None


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
        fn: takes ``scores`` of shape ``(B, T_q, T_k)`` in any floating-point dtype, half precision included,
            and ``valid_lens`` (None, ``(B,)`` or ``(B, T_q)`` numbers of valid keys) and returns the weights
            ``(B, T_q, T_k)``: a softmax over the valid keys, 0 on the others, and all 0 for a query with no valid
            key.
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
                      lambda scores, valid_lens: masked_softmax(scores, valid_lens), SOFTMAX_MISTAKES, edge,
                      _softmax_inputs(), make=lambda scores, valid_lens, **m: _softmax(scores, valid_lens, **m),
                      measure=_measure_softmax, probes=_SOFTMAX_PROBES, invariants=_softmax_invariants,
                      batched=("scores", "valid_lens"), late=_half_cases())


def _half_cases() -> list[dict[str, Any]]:
    """Scores in float16 (whose largest finite number is 65504), with a masked key and a query with no valid key."""
    g = torch.Generator().manual_seed(12)
    return [{"scores": torch.randn(2, 2, 3, generator=g).half(), "valid_lens": torch.tensor([2, 0])}]


def _probe_cases() -> list[tuple[Tensor, Tensor]]:
    """Scores and valid lengths where a mask's mistakes show (several lengths, per-query lengths, no empty row)."""
    g = torch.Generator().manual_seed(10)
    return [(torch.randn(2, 3, 5, generator=g), torch.tensor([2, 4])),
            (torch.randn(2, 3, 6, generator=g), torch.tensor([[1, 3, 6], [5, 2, 4]])),
            (torch.randn(3, 2, 4, generator=g), torch.tensor([1, 3, 2]))]


_SOFTMAX_PROBES = [{"scores": s, "valid_lens": lens} for s, lens in _probe_cases()]


def _attention_probes() -> list[dict[str, Any]]:
    """Probes with the identity as values, whose output is the weights themselves; and two widths, for the scale."""
    g = torch.Generator().manual_seed(11)
    out = []
    for scores, lens in _probe_cases():
        B, T_q, T_k = scores.shape
        out.append({"queries": 2 * torch.randn(B, T_q, 4, generator=g), "keys": 2 * torch.randn(B, T_k, 4, generator=g),
                    "values": torch.eye(T_k).expand(B, T_k, T_k).clone(), "valid_lens": lens})
    for D in (2, 8, 16):
        out.append({"queries": torch.randn(1, 2, D, generator=g), "keys": torch.randn(1, 3, D, generator=g),
                    "values": torch.randn(1, 3, 2, generator=g), "valid_lens": None})
    return out



def _attention(queries: Tensor, keys: Tensor, values: Tensor, valid_lens: Tensor | None = None, *,
               scale: str = "sqrt", factor: float | None = None, **softmax: Any) -> Tensor:
    d = queries.shape[-1]
    divisor = 1 / factor if factor is not None else {"sqrt": math.sqrt(d), "none": 1.0, "d": float(d)}[scale]
    scores = queries @ keys.transpose(-2, -1) / divisor
    return _softmax(scores, valid_lens, **softmax) @ values


ATTENTION_MISTAKES: dict[str, list[Mistake]] = {
    "missing-scale": [{"scale": "none"}],
    "scale-by-d": [{"scale": "d"}],
    **SOFTMAX_MISTAKES,
}
"""The known mistakes of scaled dot-product attention, as keyword arguments of :func:`_attention`."""

ATTENTION_VARIANTS: dict[str, list[Callable[..., Tensor]]] = {
    code: [lambda m=m, **c: _attention(**c, **m) for m in ms] for code, ms in ATTENTION_MISTAKES.items()}


def _name_scale(fits: list[tuple[int, float]], d_model: int | None = None,
                verify: Callable[[Callable[[int], float]], bool] | None = None) -> Finding:
    """Name the rule behind the factors ``c`` recovered for widths ``d`` (the right one being ``1/√d``).

    ``verify(rule)``, when given, says whether the rule reproduces the outputs (a saturated softmax pins ``c`` down
    only loosely, so the outputs decide).
    """
    rules: list[tuple[str, Callable[[int], float]]] = [
        ("missing-scale", lambda d: 1.0), ("scale-by-d", lambda d: 1 / d), ("scale-inverted", lambda d: math.sqrt(d))]
    if d_model is not None:
        rules.insert(0, ("scale-by-d-model", lambda d: 1 / math.sqrt(d_model)))
    d0, c0 = fits[0]
    note = "; ".join(f"for d = {d} the scores are multiplied by {c:.4g}, expected 1/√{d} = {1 / math.sqrt(d):.4g}"
                     for d, c in sorted(set(fits))[:3])
    for code, rule in rules:
        if all(abs(c / rule(d) - 1) < 1e-3 for d, c in fits) or (verify is not None and verify(rule)):
            return Finding(code, note=note)
    if len({d for d, _ in fits}) > 1 and all(abs(c / c0 - 1) < 1e-3 for _, c in fits):
        return Finding("scale-wrong", what=f"the scores are scaled by the constant {c0:.4g} whatever the width d, "
                                           "instead of by 1/√d", note=note)
    return Finding("scale-wrong", what=f"the scores are scaled by {c0:.4g} for d = {d0}, expected 1/√d = "
                                       f"{1 / math.sqrt(d0):.4g}", note=note)


def _fit_attention(case: dict[str, Any], out: Any, mistake: Mistake) -> float | None:
    return _fit_scale(lambda c: _attention(**case, factor=c, **mistake), out)


def _measure_attention(cases: list[dict[str, Any]], outputs: list[Any]) -> Finding | None:
    """Recover the factor that multiplies the scores (with the right mask, or with a known masking mistake)."""
    pairs = sorted(zip(cases, outputs, strict=True), key=lambda co: _size(co[0]))
    tries: list[tuple[str, Mistake]] = [("", {})] + [(code, m) for code, ms in SOFTMAX_MISTAKES.items() for m in ms]
    for code, m in tries:
        c = _fit_attention(*pairs[0], m)
        if c is None:
            continue
        by_width: dict[int, tuple[dict[str, Any], Any]] = {}
        for k, o in pairs:
            by_width.setdefault(k["queries"].shape[-1], (k, o))
        chosen = list(by_width.values())[:4]
        fits = [(k["queries"].shape[-1], _fit_attention(k, o, m)) for k, o in chosen]
        if any(f is None for _, f in fits):
            continue
        if all(abs(f * math.sqrt(d) - 1) < 1e-3 for d, f in fits):  # type: ignore[operator]
            if code:
                return Finding(code, note="the scale is right; the mistake is in the softmax")
            continue

        def verify(rule: Callable[[int], float], m: Mistake = m, chosen: list[Any] = chosen) -> bool:
            return all(_same(_attention(**k, factor=rule(k["queries"].shape[-1]), **m), o) for k, o in chosen)

        found = _name_scale(fits, verify=verify)  # type: ignore[arg-type]
        return Finding(found.bug, what=found.what, note=found.note, also=(code,) if code else ())
    for case, out in pairs:
        if case["valid_lens"] is not None and case["values"].shape[-1] == case["keys"].shape[-2]:
            scores = case["queries"] @ case["keys"].transpose(-2, -1) / math.sqrt(case["queries"].shape[-1])
            if torch.equal(case["values"], torch.eye(scores.shape[-1]).expand_as(case["values"])):
                found = _measure_mask(scores, case["valid_lens"], out)
                if found is not None:
                    return found
    return None


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
                      lambda **c: _attention(**c), ATTENTION_MISTAKES, edge, _attention_inputs(), pick,
                      make=_attention, measure=_measure_attention, probes=_attention_probes(),
                      invariants=_attention_invariants, batched=("queries", "keys", "values", "valid_lens"))


def _nw(queries: Tensor, keys: Tensor, values: Tensor, sigma: float, sign: float = -1.0,
        width: str = "2σ²") -> Tensor:
    divisor = {"2σ²": 2 * sigma**2, "σ²": sigma**2, "2σ": 2 * sigma, "σ": sigma}[width]
    scores = sign * (queries[:, None] - keys[None, :]) ** 2 / divisor  # (n, m)
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
    variants = {"nw-wrong-sign": [{"sign": 1.0}],
                "nw-wrong-width": [{"width": "σ²"}, {"width": "2σ"}, {"width": "σ"}]}
    return _run_check("check_nadaraya_watson", lambda **c: fn(c["queries"], c["keys"], c["values"], c["sigma"]),
                      lambda **c: _nw(**c), variants, edge, _nw_inputs(), make=_nw)


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
    layers = (("W_q", (5, 3)), ("W_k", (5, 2)), ("w_v", (1, 5)))
    probe = _student_side(module_cls, _layers)((3, 2, 5), [name for name, _ in layers])
    for name, shape in layers:
        _linear(probe, name, shape, "au.AdditiveAttention")
    run_module = _student_side(module_cls, _run_module)

    def make(queries: Tensor, keys: Tensor, values: Tensor, valid_lens: Tensor | None, num_hiddens: int,
             _seed: int, **mistake: Any) -> Tensor:
        params = _additive_params({"queries": queries, "keys": keys, "num_hiddens": num_hiddens, "_seed": _seed})
        return _additive(params, queries, keys, values, valid_lens, **mistake)

    def student(queries: Tensor, keys: Tensor, values: Tensor, valid_lens: Tensor | None, num_hiddens: int,
                _seed: int) -> Any:
        params = _additive_params({"queries": queries, "keys": keys, "num_hiddens": num_hiddens, "_seed": _seed})
        return run_module((queries.shape[-1], keys.shape[-1], num_hiddens),
                          {name: (weight, None) for name, weight in zip(("W_q", "W_k", "w_v"), params, strict=True)},
                          (queries, keys, values, valid_lens))

    def variant(**mistake: Any) -> Callable[..., Tensor]:
        return lambda **c: make(**c, **mistake)

    variants: dict[str, list[Mistake]] = {"additive-missing-tanh": [{"tanh": False}], **SOFTMAX_MISTAKES}
    g = torch.Generator().manual_seed(3)

    def case(B: int, T_q: int, T_k: int, lens: Tensor | None, seed: int) -> dict[str, Any]:
        return {"queries": torch.randn(B, T_q, 2, generator=g), "keys": torch.randn(B, T_k, 3, generator=g),
                "values": torch.randn(B, T_k, 2, generator=g), "valid_lens": lens, "num_hiddens": 4, "_seed": seed}

    edge = [case(1, 2, 3, None, 0), case(2, 2, 4, torch.tensor([2, 4]), 1),
            case(2, 3, 3, torch.tensor([[1, 2, 3], [3, 0, 2]]), 2), case(2, 2, 3, torch.tensor([3, 0]), 3)]
    return _run_check("check_additive_attention", student, variant(), variants, edge, _additive_inputs(), _first,
                      make=make, invariants=_attention_invariants,
                      batched=("queries", "keys", "values", "valid_lens"))

