"""Chapter 14: causal linear attention with the feature map elu + 1."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from hypothesis import strategies as st
from torch import Tensor

from ..linear import linear_attention
from ._core import CheckResult, Finding, Mistake, _batch_mixing, _check_fn, _run_check, _same


def _causal_linear(q: Tensor, k: Tensor, v: Tensor, *, feature: str = "elu1", normalise: bool = True,
                   prefix: bool | str = True, exclusive: bool = False, carry: bool = False) -> Tensor:
    """Causal linear attention written as a student would (a loop over positions with a running state, in the
    inputs' dtype), with deliberate mistakes (none with the defaults):

    * ``feature``: ``"elu1"`` (right), ``"identity"`` or ``"elu"`` (features that can go negative);
    * ``normalise=False``: the output ``φ(q)ᵀ S`` is not divided by ``φ(q)·z``;
    * ``prefix``: False sums over every position (numerator and normaliser), ``"numerator"`` only the numerator,
      ``"normaliser"`` only the normaliser;
    * ``exclusive``: the state is read before the token's own outer product is added;
    * ``carry``: the state is not reset between the sequences of the batch.
    """
    phi = {"elu1": lambda x: F.elu(x) + 1, "identity": lambda x: x, "elu": F.elu}[feature]
    fq, fk = phi(q), phi(k)  # (B, T, m)
    B, T, m = fk.shape
    outs = torch.zeros(B, T, v.shape[-1], dtype=v.dtype)
    S_all = torch.einsum("btm,btd->bmd", fk, v)  # the sums over every position
    z_all = fk.sum(1)
    S = torch.zeros(m, v.shape[-1], dtype=v.dtype)
    z = torch.zeros(m, dtype=v.dtype)
    for b in range(B):
        if not carry:
            S, z = torch.zeros_like(S), torch.zeros_like(z)
        for t in range(T):
            if not exclusive:
                S, z = S + torch.outer(fk[b, t], v[b, t]), z + fk[b, t]
            S_read = S_all[b] if prefix in (False, "numerator") else S
            z_read = z_all[b] if prefix in (False, "normaliser") else z
            num = fq[b, t] @ S_read
            outs[b, t] = num / (fq[b, t] @ z_read + 1e-6) if normalise else num
            if exclusive:
                S, z = S + torch.outer(fk[b, t], v[b, t]), z + fk[b, t]
    return outs


LINEAR_MISTAKES: dict[str, list[Mistake]] = {
    "linear-attention-no-normaliser": [{"normalise": False}],
    "linear-attention-not-causal": [{"prefix": p} for p in (False, "numerator", "normaliser")],
    "linear-attention-negative-features": [{"feature": f} for f in ("identity", "elu")],
    "linear-attention-state-not-reset": [{"carry": True}],
    "causal-no-diagonal": [{"exclusive": True}],
}


def _linear_invariants(case: dict[str, Any], out: Any, run: Callable[[dict[str, Any]], Any]) -> Finding | None:
    """The same input gives the same output; each sequence's output depends on that sequence alone; and each output
    row lies within the range of the values up to its position (a weighted average, weights >= 0 summing to 1)."""
    q, v = case["q"], case["v"]
    if not isinstance(out, Tensor) or out.shape != v.shape:
        return None
    again = run(case)
    if isinstance(again, Tensor) and again.shape == out.shape and not _same(out, again):
        shift = float((again.detach().double() - out.detach().double()).abs().nan_to_num(0.0).max())
        return Finding("linear-attention-state-not-reset", case=case,
                       what="the output changes from one call to the next with the same input", note=(
            f"two calls with the input shown gave outputs up to {shift:.3g} apart, although the same input must give "
            "the same output"))
    B = v.shape[0]
    if B > 1:  # a state carried along the batch: the last sequence moves when the first one changes
        g = torch.Generator().manual_seed(41)
        other = {name: case[name].clone() for name in ("q", "k", "v")}
        for name in other:
            other[name][0] = torch.randn(other[name][0].shape, generator=g, dtype=torch.float32).to(other[name].dtype)
        moved = run(other)
        if isinstance(moved, Tensor) and moved.shape == out.shape and not _same(moved[-1:], out[-1:]):
            shift = float((moved[-1:].detach().double() - out[-1:].detach().double()).abs().nan_to_num(0.0).max())
            return Finding("linear-attention-state-not-reset", case=case,
                           what="one sequence's output depends on another sequence of the batch", note=(
                f"with sequence 0 of the batch replaced by another, the output of sequence {B - 1} moves by up to "
                f"{shift:.3g}, although each sequence's output depends on its own q, k and v only"))
    T = v.shape[1]
    if T > 1:  # causality: nothing before the last position may move when the last position changes
        g = torch.Generator().manual_seed(42)
        later = {name: case[name].clone() for name in ("q", "k", "v")}
        for name in later:
            later[name][:, -1] = 3 * torch.randn(later[name][:, -1].shape, generator=g).to(later[name].dtype)
        moved = run(later)
        if isinstance(moved, Tensor) and moved.shape == out.shape and not _same(moved[:, :-1], out[:, :-1]):
            gap = (moved[:, :-1].detach().double() - out[:, :-1].detach().double()).abs().nan_to_num(0.0)
            b, t, _ = (int(x) for x in torch.nonzero(gap == gap.max())[0])
            return Finding("linear-attention-not-causal", case=case,
                           what="a position's output depends on the positions after it", note=(
                f"with the last position's q, k and v changed, the output of sequence {b} at position {t} moves "
                f"by up to {float(gap.max()):.3g}, although position {t} may see positions 0 to {t} only"))
    mixed = _batch_mixing(case, _reference(q, case["k"], v), out, run, _reference, ("q", "k", "v"))
    if mixed is not None:
        return mixed
    o, vals = out.detach().double(), v.double()
    if not bool(torch.isfinite(o).all()):
        return None
    lo, hi = vals.cummin(1).values, vals.cummax(1).values  # (B, T, D_v): the range of the values up to t
    outside = (o < lo - 1e-4 - 1e-4 * lo.abs()) | (o > hi + 1e-4 + 1e-4 * hi.abs())
    if bool(outside.any()):
        b, t, j = (int(x) for x in torch.nonzero(outside)[0])
        return Finding("output-outside-values", case=case, note=(
            f"sequence {b}, position {t}: the output in column {j} is {float(o[b, t, j]):.4g}, outside the range "
            f"[{float(lo[b, t, j]):.4g}, {float(hi[b, t, j]):.4g}] of that column of v at positions 0 to {t}"))
    return None


def _reference(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """The package's causal linear attention with ``elu + 1``, in float64."""
    return linear_attention(q.double(), k.double(), v.double(), causal=True)


@st.composite
def _linear_inputs(draw: st.DrawFn) -> dict[str, Any]:
    B, T, D, D_v = draw(st.integers(1, 3)), draw(st.integers(1, 9)), draw(st.sampled_from([1, 2, 4])), 2
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    return {"q": torch.randn(B, T, D, generator=g), "k": torch.randn(B, T, D, generator=g),
            "v": torch.randn(B, T, D_v, generator=g)}


def check_causal_linear_attention(fn: Callable[[Tensor, Tensor, Tensor], Tensor]) -> CheckResult:
    """Check ``fn(q, k, v)``: causal linear attention with the feature map ``φ(x) = elu(x) + 1`` (chapter 14),

    ``output_t = φ(q_t)ᵀ S_t / (φ(q_t)·z_t)`` with ``S_t = Σ_{j≤t} φ(k_j) v_jᵀ`` and ``z_t = Σ_{j≤t} φ(k_j)``,

    computed in any style (a loop with a running state, prefix sums with ``cumsum``, ``einsum``, chunks). A small
    ``eps`` (at most about 1e-5) added to the normaliser is accepted.

    Args:
        fn: takes ``q (B, T, D)``, ``k (B, T, D)`` and ``v (B, T, D_v)`` (float32 or float64) and returns
            ``(B, T, D_v)``. Every sequence of the batch starts from an empty state, and so does every call.
    Returns:
        a :class:`CheckResult`.
    Raises:
        AttentionBug: the output differs from :func:`~attn_utils.linear.linear_attention` with ``causal=True``.
    """
    _check_fn(fn)
    g = torch.Generator().manual_seed(14)

    def case(B: int, T: int, D: int, D_v: int = 2, sign: float = 0.0) -> dict[str, Any]:
        q, k = torch.randn(B, T, D, generator=g), torch.randn(B, T, D, generator=g)
        if sign:  # queries and keys of one sign: features that go negative give a normaliser far from 0
            q, k = sign * q.abs(), sign * k.abs()
        return {"q": q, "k": k, "v": torch.randn(B, T, D_v, generator=g)}

    edge = [case(2, 5, 4, 3), case(1, 1, 4), case(1, 6, 2), case(3, 4, 4), case(2, 4, 3, sign=1.0),
            case(2, 4, 3, sign=-1.0), case(1, 40, 8, 4)]
    late = [{n: t.double() for n, t in case(2, 7, 4).items()}]

    def make(q: Tensor, k: Tensor, v: Tensor, **mistake: Any) -> Tensor:
        return _causal_linear(q, k, v, **mistake)

    return _run_check("check_causal_linear_attention", lambda q, k, v: fn(q, k, v), _reference, LINEAR_MISTAKES,
                      edge, _linear_inputs(), make=make, invariants=_linear_invariants, late=late)
