"""Chapter 9: the distribution that sampling draws the next token from."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from hypothesis import strategies as st
from torch import Tensor

from ..decoding import sampling_probs
from ._core import CheckResult, Finding, Mistake, _check_fn, _fit_scale, _run_check, _size

# --------------------------------------------------------------------------------------------------------------------
# Decoding: the distribution that sampling draws from (chapter 9)


def _sampling(logits: Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None, *,
              temp: str = "divide", k_shift: int = 0, p_rule: str = "before", p_sorted: bool = True,
              order: str = "k-then-p", renormalise: bool = True, between: str = "renormalise") -> Tensor:
    """Temperature, top-k and top-p with deliberate mistakes (none with the defaults). ``between`` is what top-p
    does with probabilities that no longer sum to 1 (after top-k): renormalise them, or cut its nucleus on them as
    they are, from the most likely token down ("raw") or, as with an ascending sort, from the least likely up
    ("raw-ascending", which keeps a token while the mass from it down exceeds 1 - top_p)."""
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
        if between == "renormalise":
            p = p / p.sum(dim=-1, keepdim=True)
        if p_sorted:
            sorted_p, order_ = p.sort(dim=-1, descending=True)
        else:
            sorted_p, order_ = p, torch.arange(V).expand_as(p)
        cum = sorted_p.cumsum(dim=-1)
        if between == "raw-ascending":
            keep_sorted = p.sum(dim=-1, keepdim=True) - (cum - sorted_p) > 1 - top_p
        else:
            keep_sorted = {"before": cum - sorted_p < top_p, "lt": cum < top_p, "le": cum <= top_p}[p_rule]
        return p * torch.zeros_like(keep_sorted).scatter(-1, order_, keep_sorted)

    probs = p_filter(k_filter(probs)) if order == "k-then-p" else k_filter(p_filter(probs))
    return probs / probs.sum(dim=-1, keepdim=True) if renormalise else probs


SAMPLING_MISTAKES: dict[str, list[Mistake]] = {
    "temperature-inverted": [{"temp": "multiply"}],
    "temperature-after-softmax": [{"temp": "ignore"}],
    "top-k-off-by-one": [{"k_shift": -1}, {"k_shift": 1}],
    "top-p-excludes-crossing": [{"p_rule": "lt"}, {"p_rule": "le"}],
    "top-p-unsorted": [{"p_sorted": False}],
    "filters-wrong-order": [{"order": "p-then-k"}],
    "not-renormalised": [{"renormalise": False}] + [
        {"between": b, "_what": "top-k's output is not renormalised before top-p cuts its nucleus on it: the "
                                "kept probabilities sum to less than 1, so the nucleus is measured against the "
                                "wrong total"} for b in ("raw", "raw-ascending")],
}


def _measure_sampling(cases: list[dict[str, Any]], outputs: list[Any]) -> Finding | None:
    """Recover the kept set and whether the kept tokens keep their relative probabilities, renormalised."""
    for case, out in sorted(zip(cases, outputs, strict=True), key=lambda co: _size(co[0])):
        if not isinstance(out, Tensor) or out.shape != case["logits"].shape or bool(torch.isnan(out).any()):
            continue
        ref = sampling_probs(**case).double()
        out = out.double()
        kept, want = out > 1e-9, ref > 1e-9
        if not torch.allclose(out.sum(-1), torch.ones(out.shape[0], dtype=torch.float64), atol=1e-4):
            return Finding("not-renormalised", note=f"the rows sum to {[round(float(s), 4) for s in out.sum(-1)]}")
        if torch.equal(kept, want):
            base = (case["logits"].double() / case["temperature"]).softmax(-1)
            if torch.allclose(out, base * kept / (base * kept).sum(-1, keepdim=True), atol=1e-5):
                continue
            logits = case["logits"].double()

            def renormalised(c: float, logits: Tensor = logits, kept: Tensor = kept) -> Tensor:
                p = (logits * c).softmax(-1) * kept
                return p / p.sum(-1, keepdim=True)

            c = _fit_scale(renormalised, out)
            note = "the kept tokens are right, but their probabilities do not follow softmax(logits / temperature)"
            if c is not None:
                note += (f": the logits are multiplied by {c:.4g}; expected 1/temperature = "
                         f"{1 / case['temperature']:.4g}")
            return Finding("temperature-wrong", note=note)
        n_got, n_want = kept.sum(-1).tolist(), want.sum(-1).tolist()
        return Finding("kept-set-wrong", note=f"the number of tokens kept per row is {n_got}, expected {n_want} "
                                              f"(top_k = {case['top_k']}, top_p = {case['top_p']})")
    return None


def _sampling_invariants(case: dict[str, Any], out: Any, run: Callable[[dict[str, Any]], Any]) -> Finding | None:
    """A distribution over the tokens, whose kept tokens are the most likely ones, within top_k, and the smallest such
    set whose mass reaches top_p."""
    logits = case["logits"]
    if not isinstance(out, Tensor) or out.shape != logits.shape or not out.is_floating_point():
        return None
    p = out.detach().cpu().double()
    if not bool(torch.isfinite(p).all()):
        return None
    base = (logits.double() / case["temperature"]).softmax(-1)
    kept = p > 1e-9
    for b in range(p.shape[0]):
        if bool(kept[b].any()) and bool((~kept[b]).any()):
            lowest_kept = float(base[b][kept[b]].min())
            dropped = base[b][~kept[b]]
            if float(dropped.max()) > lowest_kept * (1 + 1e-6) + 1e-12:
                i = int(torch.nonzero(kept[b] & (base[b] == lowest_kept)).flatten()[0])
                j = int(torch.nonzero(~kept[b] & (base[b] == dropped.max())).flatten()[0])
                return Finding("kept-set-wrong", what="a token is dropped while a less likely token is kept: the "
                                                      "filters keep the most likely tokens",
                               note=f"in row {b}, token {j} (probability {float(base[b, j]):.4g} after the "
                                    f"temperature) is dropped while token {i} ({lowest_kept:.4g}) is kept")
        n = int(kept[b].sum())
        if case["top_k"] is not None and n > case["top_k"]:
            return Finding("kept-set-wrong", note=f"row {b} keeps {n} tokens with top_k = {case['top_k']}")
        if case["top_p"] is not None:
            q = sampling_probs(logits[b : b + 1], temperature=case["temperature"], top_k=case["top_k"]).double()[0]
            mass = float(q[kept[b]].sum())
            smallest = float(q[kept[b]].min()) if n else 0.0
            if mass < case["top_p"] - 1e-6:
                return Finding("kept-set-wrong", note=f"the {n} tokens kept in row {b} hold {mass:.4g} of the mass "
                                                      f"(after top-k), less than top_p = {case['top_p']}: the kept "
                                                      "set must reach p")
            if n > 1 and mass - smallest >= case["top_p"] + 1e-6:
                return Finding("kept-set-wrong", note=f"the {n} tokens kept in row {b} hold {mass:.4g} of the mass "
                                                      f"(after top-k), and {mass - smallest:.4g} without the least "
                                                      f"likely of them, still at least top_p = {case['top_p']}: "
                                                      "the kept set must be the smallest that reaches p")
    return None


@st.composite
def _sampling_inputs(draw: st.DrawFn) -> dict[str, Any]:
    B, V = draw(st.integers(1, 3)), draw(st.integers(2, 8) | st.just(16))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    kind = draw(st.sampled_from(["spread", "flat", "ties"]))
    temperature = draw(st.sampled_from([0.5, 1.0, 2.0]))
    if kind == "ties":  # exact ties, where the documented rule leaves no choice: no token is cut
        return {"logits": torch.round(2 * torch.randn(B, V, generator=g)), "temperature": temperature,
                "top_k": None, "top_p": draw(st.sampled_from([None, 1.0]))}
    # flat logits: nuclei that need many tokens
    logits = (0.3 if kind == "flat" else 2.0) * torch.randn(B, V, generator=g)
    return {"logits": logits, "temperature": temperature, "top_k": draw(st.none() | st.integers(1, V)),
            "top_p": draw(st.none() | st.sampled_from([0.3, 0.6, 0.9, 0.99, 1.0]))}


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
            # top_p = 1 keeps every token, also in the second row, whose float32 cumulative sum ends below 1
            {"logits": torch.cat([(2 * torch.randn(2, 5, generator=g))[:1],
                                  torch.tensor([[0.5, -0.8, -1.0, -3.1, -0.2]])]),
             "temperature": 2.0, "top_k": None, "top_p": 1.0},
            {"logits": 2 * torch.randn(2, 6, generator=g), "temperature": 1.0, "top_k": 3, "top_p": None},
            {"logits": 2 * torch.randn(1, 6, generator=g), "temperature": 1.0, "top_k": None, "top_p": 0.8},
            {"logits": 2 * torch.randn(2, 6, generator=g), "temperature": 0.5, "top_k": 4, "top_p": 0.6},
            {"logits": torch.tensor([[0.0, -0.5, -0.9]]), "temperature": 1.0, "top_k": 2, "top_p": 0.6}]
    return _run_check(
        "check_sampling", lambda logits, temperature, top_k, top_p: fn(logits, temperature=temperature, top_k=top_k,
                                                                        top_p=top_p),
        lambda logits, temperature, top_k, top_p: sampling_probs(logits, temperature=temperature, top_k=top_k,
                                                                 top_p=top_p),
        SAMPLING_MISTAKES, edge, _sampling_inputs(), make=_sampling, measure=_measure_sampling,
        invariants=_sampling_invariants, batched=("logits",))

