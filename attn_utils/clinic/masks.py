"""Chapter 7: the causal mask, with the queries as the last positions (as with a KV cache)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from hypothesis import strategies as st
from torch import Tensor

from ..masking import causal_mask
from ._core import CheckResult, Finding, _check_fn, _run_check

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
                    lambda T_q, T_k: _causal(T_q, T_k, shift=1, top_left=True)],
    "causal-reversed": [lambda T_q, T_k: ~_causal(T_q, T_k, shift=-1),
                        lambda T_q, T_k: ~_causal(T_q, T_k, shift=-1, top_left=True)],
}


def _allowed(mask: Any, form: str) -> Tensor | None:
    """A student's mask written in ``form``, read as 'True where allowed'; None if it cannot be read so."""
    if not isinstance(mask, Tensor) or mask.dim() != 2:
        return None
    if form == "mask-inverted-convention":
        return ~mask if mask.dtype == torch.bool else None
    if mask.dtype == torch.bool or mask.is_complex():
        return None
    return mask != 0 if form == "mask-not-bool" else mask == 0


def _form(outputs: list[Any]) -> str | None:
    """How the masks are written, judged from all of them: bool, 0/1 numbers, or additive 0/-inf."""
    if not all(isinstance(out, Tensor) and out.dim() == 2 for out in outputs):
        return None
    if all(out.dtype == torch.bool for out in outputs):
        return "mask-inverted-convention"
    if any(out.dtype == torch.bool or out.is_complex() for out in outputs):
        return None
    values = set(torch.unique(torch.cat([out.flatten().double() for out in outputs])).tolist())
    if values <= {0.0, 1.0}:
        return "mask-not-bool"
    if 0.0 in values and all(v == 0.0 or v <= -1e4 for v in values):
        return "mask-additive"
    return None


def _measure_causal(cases: list[dict[str, Any]], outputs: list[Any]) -> Finding | None:
    """Read the mask whatever its form (bool either way round, 0/1, additive 0/-inf) and name the form and the bug."""
    form = _form(outputs)
    if form is None:
        return None
    read = [_allowed(out, form) for out in outputs]
    if any(r is None for r in read):
        return None
    allowed: list[Tensor] = [r for r in read if r is not None]
    if all(torch.equal(a, causal_mask(c["T_q"], c["T_k"])) for a, c in zip(allowed, cases, strict=True)):
        return Finding(form)
    for code, wrongs in CAUSAL_VARIANTS.items():
        for wrong in wrongs:
            if all(torch.equal(a, wrong(**c)) for a, c in zip(allowed, cases, strict=True)):
                return Finding(form, also=(code,))
    return None


def _causal_invariants(case: dict[str, Any], out: Any, run: Callable[[dict[str, Any]], Any]) -> Finding | None:
    """Query i, at position p = i + T_k - T_q, sees exactly the keys 0 to p (a bool mask, True = may attend)."""
    T_q, T_k = case["T_q"], case["T_k"]
    if not isinstance(out, Tensor) or out.dtype != torch.bool or tuple(out.shape) != (T_q, T_k):
        return None
    for i in range(T_q):
        p = i + T_k - T_q
        seen = torch.nonzero(out[i].cpu()).flatten().tolist()
        if seen != list(range(p + 1)):
            return Finding("causal-wrong-keys", note=f"with T_q = {T_q} and T_k = {T_k}, query {i} is at position {p} "
                                                     f"and sees keys {seen}, instead of 0 to {p}")
    return None


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
                      CAUSAL_VARIANTS, edge, sizes, measure=_measure_causal, invariants=_causal_invariants)

