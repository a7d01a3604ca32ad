"""Chapters 9 to 11: sentence vectors by mean pooling, the class token, and the last real token."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from hypothesis import strategies as st
from torch import Tensor

from ..pretrained import mean_pool
from ._core import CheckResult, Finding, _arity, _check_fn, _run_check

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
                      _pooling_inputs(), measure=_measure_pooling, probes=_pooling_probes(),
                      invariants=_pooling_invariants, batched=("hidden",))


def _pooling_invariants(case: dict[str, Any], out: Any, run: Callable[[dict[str, Any]], Any]) -> Finding | None:
    """A padding position never moves the sentence vector, which lies within the range of the real tokens."""
    hidden, mask = case["hidden"], case["attention_mask"]
    if not isinstance(out, Tensor) or out.shape != (hidden.shape[0], hidden.shape[2]) or not out.is_floating_point():
        return None
    pad = mask == 0
    if bool(pad.any()):
        g = torch.Generator().manual_seed(44)
        moved = hidden.clone()
        moved[pad] = 5 * torch.randn(moved[pad].shape, generator=g, dtype=torch.float32).to(hidden.dtype)
        again = run({**case, "hidden": moved})
        if isinstance(again, Tensor) and again.shape == out.shape and not torch.allclose(
                again.double(), out.double(), rtol=1e-4, atol=1e-5):
            b = int(torch.nonzero((again.double() - out.double()).abs().amax(-1) > 1e-5).flatten()[0])
            return Finding("pooling-sees-padding", note=f"with the padding positions of the input shown given other "
                                                        f"vectors, sentence {b}'s vector moves (its mask is "
                                                        f"{mask[b].tolist()})")
    real = mask[..., None].bool()
    h = hidden.double()
    lo = torch.where(real, h, torch.full_like(h, float("inf"))).amin(1)
    hi = torch.where(real, h, torch.full_like(h, float("-inf"))).amax(1)
    o = out.double()
    outside = (o < lo - 1e-4) | (o > hi + 1e-4)
    if bool(outside.any()):
        b, d = (int(x) for x in torch.nonzero(outside)[0])
        return Finding("output-outside-values", what="a sentence vector lies outside the range of its real tokens: "
                                                     "a mean of them cannot",
                       note=f"sentence {b}, feature {d}: {float(o[b, d]):.4g}, outside [{float(lo[b, d]):.4g}, "
                            f"{float(hi[b, d]):.4g}], the range of that feature over its real tokens")
    return None


def _pooling_probes(left: bool = False) -> list[dict[str, Any]]:
    """Wide hidden vectors (D > T), so that the weight of each position can be read back from the output."""
    g = torch.Generator().manual_seed(13)
    masks = [[[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], [[1, 1, 0, 0], [1, 1, 1, 0]]]
    out = []
    for m in masks:
        mask = torch.tensor(m)
        if left:
            mask = mask.flip(1)
        out.append({"hidden": torch.randn(mask.shape[0], mask.shape[1], 8, generator=g), "attention_mask": mask})
    return out


def _position_weights(hidden: Tensor, out: Tensor) -> Tensor | None:
    """The weights w (B, T) with out[b] = Σ_t w[b, t] hidden[b, t], when they can be read back exactly."""
    B, T, D = hidden.shape
    if not isinstance(out, Tensor) or out.shape != (B, D) or D < T or not out.is_floating_point():
        return None
    H = hidden.double()
    # gelsd (by the SVD): the default gelsy can return a wrong solution when singular values repeat
    driver = "gelsd" if H.device.type == "cpu" else None
    w = torch.linalg.lstsq(H.transpose(1, 2), out.double()[..., None], driver=driver).solution[..., 0]  # (B, T)
    if not torch.allclose((w[:, None, :] @ H)[:, 0], out.double(), atol=1e-5):
        return None
    return w


def _describe(w: Tensor) -> str:
    return "; ".join(f"row {b}: " + ", ".join(f"{float(x):.3g}" for x in w[b]) for b in range(w.shape[0]))


def _measure_pooling(cases: list[dict[str, Any]], outputs: list[Any]) -> Finding | None:
    """Recover the weight each position gets in each sentence vector, and compare with 1/n on the n real tokens."""
    for case, out in zip(cases, outputs, strict=True):
        hidden, mask = case["hidden"], case["attention_mask"].double()
        w = _position_weights(hidden, out)
        if w is None:
            continue
        T = hidden.shape[1]
        known = {"pooling-includes-padding": torch.full_like(w, 1 / T), "pooling-divides-by-length": mask / T,
                 "pooling-cls-only": torch.nn.functional.one_hot(torch.zeros(w.shape[0], dtype=torch.long), T)}
        for code, want in known.items():
            if torch.allclose(w, want.double(), atol=1e-5):
                return Finding(code, note=f"the weight of each position: {_describe(w)}")
        return Finding("pooling-wrong-positions", note=f"the weight of each position: {_describe(w)}; expected "
                                                       f"{_describe(mask / mask.sum(1, keepdim=True))}")
    return None


# --------------------------------------------------------------------------------------------------------------------
# CLS and last-token pooling (chapters 10, 11 and 9)


def _last(hidden: Tensor, attention_mask: Tensor, mistake: str = "") -> Tensor:
    B, T = attention_mask.shape
    rows = torch.arange(B)
    if mistake == "last-token-padding":
        return hidden[:, -1]
    if mistake == "last-token-assumes-right-padding":
        return hidden[rows, attention_mask.sum(1) - 1]
    if mistake == "last-token-off-by-one":
        return hidden[rows, attention_mask.sum(1).clamp(max=T - 1)]
    last = T - 1 - attention_mask.flip(1).long().argmax(1)  # the last position holding a real token
    return hidden[rows, last]


def _mask_cases(left: bool) -> list[dict[str, Any]]:
    g = torch.Generator().manual_seed(14 + left)
    out = []
    for m in ([[1, 1, 1]], [[1, 1, 1, 1], [1, 1, 0, 0]], [[1, 0, 0], [1, 1, 0], [1, 1, 1]]):
        mask = torch.tensor(m)
        out.append({"hidden": torch.randn(mask.shape[0], mask.shape[1], 8, generator=g),
                    "attention_mask": mask.flip(1) if left else mask})
    return out


@st.composite
def _padded_inputs(draw: st.DrawFn) -> dict[str, Any]:
    case = draw(_pooling_inputs())
    if draw(st.booleans()):
        case["attention_mask"] = case["attention_mask"].flip(1)
    return case


def _measure_last(cases: list[dict[str, Any]], outputs: list[Any]) -> Finding | None:
    """Recover which position each sentence vector is taken from, and compare with the last real token."""
    for case, out in zip(cases, outputs, strict=True):
        hidden, mask = case["hidden"], case["attention_mask"]
        w = _position_weights(hidden, out)
        if w is None:
            continue
        picked = w.argmax(1)
        if not torch.allclose(w, torch.nn.functional.one_hot(picked, hidden.shape[1]).double(), atol=1e-5):
            return Finding("pooling-wrong-positions", note=f"the weight of each position: {_describe(w)}")
        want = hidden.shape[1] - 1 - mask.flip(1).long().argmax(1)
        return Finding("last-token-wrong-position", note=f"the vectors are taken at positions {picked.tolist()}, "
                                                         f"expected {want.tolist()} (the last real tokens)")
    return None


def check_last_token_pooling(fn: Callable[[Tensor, Tensor], Tensor]) -> CheckResult:
    """Check ``fn(hidden, attention_mask)``, the vector of each sequence's last real token (the pooling of a
    decoder-only model, whose last position is the only one that has seen the whole sequence).

    Args:
        fn: takes ``hidden (B, T, D)`` and ``attention_mask (B, T)`` (1 for a real token, 0 for padding, at least one
            1 per row), the padding on the right **or on the left** (as decoder-only models are often batched), and
            returns ``(B, D)``.
    Returns:
        a :class:`CheckResult`.
    Raises:
        AttentionBug: the vectors differ from the reference on some input.
    """
    _check_fn(fn)
    edge = _mask_cases(False) + _mask_cases(True)
    variants = {m: [lambda hidden, attention_mask, m=m: _last(hidden, attention_mask, m)]
                for m in ("last-token-padding", "last-token-assumes-right-padding", "last-token-off-by-one")}
    return _run_check("check_last_token_pooling", lambda hidden, attention_mask: fn(hidden, attention_mask),
                      lambda hidden, attention_mask: _last(hidden, attention_mask), variants, edge, _padded_inputs(),
                      measure=_measure_last)


def _cls(hidden: Tensor, attention_mask: Tensor, mistake: str = "") -> Tensor:
    """The class token's vector: the first real token of each sequence (padding on either side), with mistakes."""
    rows = torch.arange(hidden.shape[0])
    real = attention_mask.bool()
    if mistake == "cls-assumes-right-padding":
        return hidden[:, 0]
    if mistake == "cls-last-token":
        return hidden[rows, hidden.shape[1] - 1 - real.flip(1).long().argmax(1)]
    if mistake == "cls-mean":
        w = real.to(hidden.dtype)[..., None]
        return (hidden * w).sum(1) / w.sum(1)
    if mistake == "cls-first-padding":
        return hidden[rows, (~real).long().argmax(1)]
    return hidden[rows, real.long().argmax(1)]  # the first position holding a real token


def _measure_cls(cases: list[dict[str, Any]], outputs: list[Any]) -> Finding | None:
    """Recover which position each vector is taken from, and compare with each sequence's first real token."""
    for case, out in zip(cases, outputs, strict=True):
        hidden, mask = case["hidden"], case.get("attention_mask")
        w = _position_weights(hidden, out)
        if w is None:
            continue
        if mask is None:
            return Finding("pooling-wrong-positions", note=f"the weight of each position: {_describe(w)}; "
                                                           "expected 1 on position 0")
        want = mask.bool().long().argmax(1)
        picked = w.argmax(1)
        if not torch.allclose(w, torch.nn.functional.one_hot(picked, hidden.shape[1]).double(), atol=1e-5):
            return Finding("pooling-wrong-positions", note=f"the weight of each position: {_describe(w)}; expected "
                                                           f"1 on position{'s' if len(want) > 1 else ''} "
                                                           f"{want.tolist()}", case=case)
        where = f" (the first real tokens; the masks are {mask.tolist()})"
        return Finding("pooling-wrong-positions", note=f"the vectors are taken at positions {picked.tolist()}, "
                                                       f"expected {want.tolist()}{where}", case=case)
    return None


def check_cls_pooling(fn: Callable[..., Tensor]) -> CheckResult:
    """Check ``fn(hidden)``, the class token's vector ``hidden[:, 0]`` (BERT's and the ViT's pooling), or
    ``fn(hidden, attention_mask)``, the class token of sequences padded on either side.

    Args:
        fn: takes ``hidden (B, T, D)``, the class token first, and returns ``(B, D)``. A function of two
            parameters also takes ``attention_mask (B, T)`` (1 for a real token, 0 for padding, at least one 1 per
            row), the padding on the right **or on the left** (as decoder-only batches are padded): the class token
            is then each sequence's first real token.
    Returns:
        a :class:`CheckResult`.
    Raises:
        AttentionBug: the vectors differ from the reference on some input.
    """
    _check_fn(fn)
    g = torch.Generator().manual_seed(15)
    sizes = st.tuples(st.integers(1, 3), st.integers(1, 6), st.integers(1, 4), st.integers(0, 2**10))
    if _arity(fn) == 2:
        edge = _mask_cases(False) + _mask_cases(True)
        masked = {m: [lambda hidden, attention_mask, m=m: _cls(hidden, attention_mask, m)]
                  for m in ("cls-assumes-right-padding", "cls-last-token", "cls-mean", "cls-first-padding")}
        return _run_check("check_cls_pooling", lambda hidden, attention_mask: fn(hidden, attention_mask),
                          lambda hidden, attention_mask: _cls(hidden, attention_mask), masked, edge,
                          _padded_inputs(), measure=_measure_cls, probes=_pooling_probes() + _pooling_probes(True),
                          invariants=_pooling_invariants, batched=("hidden",))
    edge = [{"hidden": torch.randn(B, T, 8, generator=g)} for B, T in ((1, 1), (2, 3), (3, 5))]
    variants = {"cls-last-token": [lambda hidden: hidden[:, -1]], "cls-mean": [lambda hidden: hidden.mean(1)],
                "cls-wrong-axis": [lambda hidden: hidden[0]]}

    def case(B: int, T: int, D: int, seed: int) -> dict[str, Any]:
        return {"hidden": torch.randn(B, T, D, generator=torch.Generator().manual_seed(seed))}

    return _run_check("check_cls_pooling", lambda hidden: fn(hidden), lambda hidden: hidden[:, 0], variants, edge,
                      sizes.map(lambda s: case(*s)), measure=_measure_cls)
