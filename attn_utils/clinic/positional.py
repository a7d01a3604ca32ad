"""Chapters 6 and 12: the sinusoidal encoding, rotary position embeddings and ALiBi's slopes."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from hypothesis import strategies as st
from torch import Tensor

from ..masking import causal_mask
from ..positional import alibi_bias, alibi_slopes, apply_rope, sinusoidal_encoding
from ._core import CheckResult, Finding, Mistake, _call, _check_fn, _run_check

# --------------------------------------------------------------------------------------------------------------------
# The sinusoidal positional encoding (chapter 6)


def _encoding(max_len: int, d_model: int, *, swap: bool = False, half_exponent: bool = False,
              halves: bool = False) -> Tensor:
    positions = torch.arange(max_len, dtype=torch.float64)[:, None]
    pairs = torch.arange(0, d_model, 2, dtype=torch.float64)
    exponent = pairs / 2 / d_model if half_exponent else pairs / d_model
    angles = positions / 10000.0**exponent
    P = torch.zeros(max_len, d_model, dtype=torch.float64)
    first, second = (torch.cos, torch.sin) if swap else (torch.sin, torch.cos)
    P[:, 0::2], P[:, 1::2] = first(angles), second(angles[:, : d_model // 2])
    if halves:
        P = torch.cat((P[:, 0::2], P[:, 1::2]), dim=1)
    return P.float()


PE_MISTAKES: dict[str, list[Mistake]] = {
    "pe-sin-cos-swapped": [{"swap": True}],
    "pe-wrong-exponent": [{"half_exponent": True}],
    "pe-halves-layout": [{"halves": True}],
}


def _column_waves(P: Tensor) -> tuple[Tensor, Tensor] | None:
    """Each column's angular frequency and phase, read from ``P[t, c] = sin(ω_c t + φ_c)``; None if not waves."""
    if P.dim() != 2 or P.shape[0] < 4 or not P.is_floating_point():
        return None
    P = P.double()
    prev, mid, nxt = P[:-2], P[1:-1], P[2:]
    cos_w = ((prev + nxt) * mid).sum(0) / (2 * (mid * mid).sum(0)).clamp_min(1e-12)  # x(t±1) = 2 cos ω x(t)
    w = torch.arccos(cos_w.clamp(-1, 1))
    if float((prev + nxt - 2 * cos_w * mid).abs().max()) > 1e-3:
        return None
    phase = torch.atan2(P[0] * torch.sin(w), P[1] - P[0] * torch.cos(w))  # sin φ and cos φ, up to sin ω > 0
    return w, torch.remainder(phase, 2 * math.pi)


def _measure_encoding(cases: list[dict[str, Any]], outputs: list[Any]) -> Finding | None:
    """Recover each column's frequency and phase, and compare them with the formula; read the sines-then-cosines
    layout too, as a layout."""
    found = _measure_columns(cases, outputs)
    if found is not None:
        return found
    halves = [torch.stack((P[:, : P.shape[1] // 2], P[:, P.shape[1] // 2 :]), dim=-1).flatten(1)
              if isinstance(P, Tensor) and P.dim() == 2 and P.shape[1] % 2 == 0 else P for P in outputs]
    found = _measure_columns(cases, halves)
    if found is None:
        return None
    return Finding(found.bug, note=f"{found.note}, once the sines in the first half of the columns and the cosines "
                                   "in the second are interleaved", also=("pe-halves-layout", *found.also),
                   case=found.case)


def _measure_columns(cases: list[dict[str, Any]], outputs: list[Any]) -> Finding | None:
    """Each column's frequency and phase compared with the formula (interleaved sines and cosines)."""
    # the smallest input where every column's wave can be read: shown with what was measured on it
    for case, P in sorted(zip(cases, outputs, strict=True), key=lambda co: co[0]["max_len"] * co[0]["d_model"]):
        if not isinstance(P, Tensor) or case["max_len"] < 8 or case["d_model"] < 4:
            continue
        waves = _column_waves(P)
        if waves is None:
            continue
        w, _ = waves
        d = case["d_model"]
        cols = torch.arange(d)
        want_w = 10000.0 ** (-(2 * (cols // 2)).double() / d)
        want_phase = (cols % 2).double() * math.pi / 2
        t = torch.arange(P.shape[0], dtype=torch.float64)[:, None]
        Pd = P.double()
        exps = -torch.log(w.clamp_min(1e-12)) / math.log(10000.0)
        shown = ", ".join(f"{float(e) if abs(float(e)) > 1e-9 else 0.0:.3g}" for e in exps[: min(d, 6)])
        note = (f"for d_model = {d}, the columns' frequencies are 10000^(-e) with e = {shown}, …; expected "
                f"e = 2⌊c/2⌋/d = " + ", ".join(f"{float(2 * (c // 2) / d):.3g}" for c in range(min(d, 6))) + ", …")
        right = torch.sin(want_w * t + want_phase)
        swapped = torch.sin(want_w * t + math.pi / 2 - want_phase)
        if torch.allclose(Pd, swapped, atol=1e-4):
            return Finding("pe-sin-cos-swapped", note="the even columns are cosines and the odd ones sines",
                           case=case)
        phases_ok = torch.allclose(Pd[0], right[0], atol=1e-4)
        if phases_ok and not torch.allclose(Pd, right, atol=1e-4):
            return Finding("pe-wrong-exponent", note=note, case=case)
        if torch.allclose(Pd[0], swapped[0], atol=1e-4):
            return Finding("pe-wrong-exponent", note=note + "; and the even columns are cosines, the odd ones sines",
                           also=("pe-sin-cos-swapped",), case=case)
    return None


def check_positional_encoding(fn: Callable[[int, int], Tensor]) -> CheckResult:
    """Check ``fn(max_len, d_model) -> P``, the sinusoidal positional encoding of chapter 6 (``d_model`` even).

    Raises:
        AttentionBug: ``P`` differs from :func:`~attn_utils.positional.sinusoidal_encoding` for some sizes.
    """
    _check_fn(fn)
    edge = [{"max_len": n, "d_model": d} for n, d in ((1, 2), (3, 4), (10, 8), (60, 16))]
    sizes = st.fixed_dictionaries({"max_len": st.integers(1, 64), "d_model": st.integers(1, 16).map(lambda k: 2 * k)})
    return _run_check("check_positional_encoding", lambda max_len, d_model: fn(max_len, d_model),
                      lambda max_len, d_model: sinusoidal_encoding(max_len, d_model), PE_MISTAKES, edge, sizes,
                      make=_encoding, measure=_measure_encoding)



# --------------------------------------------------------------------------------------------------------------------
# Rotary position embeddings (chapter 12)


def _rope(x: Tensor, *, pairing: str = "neighbours", exponent: float = 2.0, direction: float = 1.0,
          swap: bool = False, base: float = 10000.0, start: int = 0) -> Tensor:
    D, T = x.shape[-1], x.shape[-2]
    theta = base ** (-exponent * torch.arange(D // 2, dtype=torch.float64) / D)  # (D/2,)
    angles = direction * torch.arange(start, start + T, dtype=torch.float64)[:, None] * theta  # (T, D/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    if swap:
        cos, sin = sin, cos
    a, b = (x[..., 0::2], x[..., 1::2]) if pairing == "neighbours" else (x[..., : D // 2], x[..., D // 2 :])
    ra, rb = a * cos - b * sin, a * sin + b * cos
    return torch.stack((ra, rb), dim=-1).flatten(-2) if pairing == "neighbours" else torch.cat((ra, rb), dim=-1)


ROPE_MISTAKES: dict[str, list[Mistake]] = {
    "rope-wrong-pairing": [{"pairing": "halves"}],
    "rope-wrong-frequency": [{"exponent": 1.0}],
    "rope-wrong-direction": [{"direction": -1.0}],
    "rope-sin-cos-swapped": [{"swap": True}],
    "rope-positions-shifted": [{"start": 1}],
}

_HALVES = ("pairs (j, j + D_h/2), the 'rotate-half' layout of GPT-NeoX and of Hugging Face's Llama: a convention of "
           "those libraries, not a mistake there, but not the layout of au.apply_rope and of this check, which turn "
           "neighbours (2j, 2j+1), as the RoFormer paper and Meta's Llama code do")


def _rotations(fn: Callable[[Tensor], Tensor], T: int, D: int) -> Tensor | None:
    """The matrix ``R_t`` (T, D, D) with ``fn(x)[t] = R_t x[t]``, read by feeding basis vectors; None if not linear."""
    eye = torch.eye(D, dtype=torch.float64)
    cols = []
    for j in range(D):
        out = _call(lambda x: fn(x), {"x": eye[j].expand(T, D).float().clone()}, lambda o: o)
        if not isinstance(out, Tensor) or tuple(out.shape) != (T, D) or not out.is_floating_point():
            return None
        cols.append(out.detach().double())
    return torch.stack(cols, dim=-1)  # (T, D, D): column j is R_t e_j


def _turns_pairs(R0: Tensor) -> bool:
    """Whether ``R0`` (D, D) only mixes features within pairs, neighbours (2j, 2j+1) or halves (j, j + D/2)."""
    D = R0.shape[0]
    idx = torch.arange(D)
    neighbours = (idx[:, None] // 2) == (idx[None, :] // 2)
    halves = (idx[:, None] % (D // 2)) == (idx[None, :] % (D // 2))
    return any(bool((R0.abs() * ~same < 1e-6).all()) for same in (neighbours, halves))


def _rope_probe() -> dict[str, Tensor]:
    """The input shown beside what :func:`_measure_rope` measured: the same sizes, T = 6 and D_h = 8."""
    return {"x": torch.randn(6, 8, generator=torch.Generator().manual_seed(14))}


def _rope_invariants(case: dict[str, Any], out: Any, run: Callable[[dict[str, Any]], Any]) -> Finding | None:
    """Position 0 is left as it is (its angle is 0), and every pair (2j, 2j+1) keeps its length."""
    x = case["x"]
    if not isinstance(out, Tensor) or out.shape != x.shape or not out.is_floating_point():
        return None
    o, xd = out.detach().double(), x.double()
    first, want = o[..., 0, :].reshape(-1, x.shape[-1]), xd[..., 0, :].reshape(-1, x.shape[-1])
    if not torch.allclose(first, want, rtol=1e-4, atol=1e-5):
        goes = []
        for j in range(x.shape[-1]):
            hits = torch.nonzero((first - want[:, j : j + 1]).abs().amax(0) < 1e-5).flatten().tolist()
            goes.append(str(hits[0]) if hits else "?")
        where = f"; feature j goes to column [{', '.join(goes)}][j]" if "?" not in goes else ""
        return Finding("rope-not-rotation", note=f"position 0 (angle 0) should be left as it is, and changes{where}, "
                                                 f"with D_h = {x.shape[-1]} on the input shown")
    pairs = lambda t: t[..., 0::2] ** 2 + t[..., 1::2] ** 2  # noqa: E731
    lengths, want_lengths = pairs(o), pairs(xd)
    if not torch.allclose(lengths, want_lengths, rtol=1e-3, atol=1e-5):
        at = torch.nonzero(~torch.isclose(lengths, want_lengths, rtol=1e-3, atol=1e-5))[0].tolist()
        pos, j = at[-2], at[-1]
        return Finding("rope-not-rotation", note=f"at position {pos} the pair ({2 * j}, {2 * j + 1}) has squared "
                                                 f"length {float(lengths[tuple(at)]):.4g}, and "
                                                 f"{float(want_lengths[tuple(at)]):.4g} before: a rotation keeps it")
    return None


def _measure_rope(fn: Callable[[Tensor], Tensor]) -> Finding | None:
    """Recover the pairing, each pair's frequency, the direction and the positions from the rotation matrices (the
    finding is shown with an input of the sizes it was measured at)."""
    found = _measure_rope_sizes(fn)
    if found is None:
        return None
    return Finding(found.bug, found.what, found.fix, found.note, found.also, _rope_probe())


def _measure_rope_sizes(fn: Callable[[Tensor], Tensor]) -> Finding | None:
    T, D = 6, 8
    R = _rotations(fn, T, D)
    if R is None or not bool(torch.isfinite(R).all()):
        return None
    found: list[tuple[str, str]] = []
    partner = [int(torch.argmax(R[1, :, j].abs() * (torch.arange(D) != j))) for j in range(D)]
    if partner == [j ^ 1 for j in range(D)]:
        pairs = [(2 * j, 2 * j + 1) for j in range(D // 2)]
    elif partner == [(j + D // 2) % D for j in range(D)]:
        pairs = [(j, j + D // 2) for j in range(D // 2)]
        found.append(("rope-wrong-pairing", f"features are turned in {_HALVES}"))
    elif not _turns_pairs(R[0]):
        return None  # position 0 is not left alone, nor turned pair by pair: the invariants say how
    else:
        return Finding("rope-wrong-pairing", note=f"feature j is mixed with feature {partner} at position 1")
    a, b = torch.tensor([p[0] for p in pairs]), torch.tensor([p[1] for p in pairs])
    gram = R.transpose(-2, -1) @ R
    if not torch.allclose(gram, torch.eye(D, dtype=torch.float64).expand_as(gram), atol=1e-4):
        found.append(("rope-sin-cos-swapped", "R_t is not a rotation: it changes the vectors' lengths"))
        return Finding(found[-1][0], note=found[-1][1], also=tuple(c for c, _ in found[:-1]))
    angle = torch.atan2(R[:, b, a], R[:, a, a])  # (T, D/2): the angle of each pair at each position
    start = angle[0]
    step = torch.remainder(angle[1] - angle[0] + math.pi, 2 * math.pi) - math.pi  # θ_j (signed), per position
    want = 10000.0 ** (-2 * torch.arange(D // 2, dtype=torch.float64) / D)
    if bool((step < -1e-6).all()) and torch.allclose(-step, want, rtol=1e-3):
        found.append(("rope-wrong-direction", "every pair turns by -t θ_j"))
        step = -step
    if not torch.allclose(step.abs(), want, rtol=1e-3, atol=1e-5):
        base = float(step[1].abs()) ** (-D / 2) if D >= 4 else float("nan")
        shown = ", ".join(f"{float(s):.4g}" for s in step.abs())
        note = (f"with D_h = {D}, pair j turns by θ_j = {shown} per position; expected 10000^(-2j/D_h) = "
                + ", ".join(f"{float(w):.4g}" for w in want))
        if abs(step[1].abs() / want[1] - 1) > 1e-3 and torch.allclose(
                step.abs(), base ** (-2 * torch.arange(D // 2, dtype=torch.float64) / D), rtol=1e-3):
            note += f" (the formula with base {base:.4g} instead of 10000)"
        found.append(("rope-wrong-frequency", note))
    if not torch.allclose(start, torch.zeros_like(start), atol=1e-5):
        found.append(("rope-positions-shifted", "the first position is already turned: positions are counted "
                                                f"from {float(start[0] / step[0]):.3g}, not 0"))
    if not found:
        return None
    main = next((f for f in found if f[0] != "rope-wrong-pairing"), found[0])
    others = tuple(c for c, _ in found if c != main[0])
    wrong_freq = main[0] == "rope-wrong-frequency"
    what = "the pairs turn with other frequencies θ_j than base^(-2j/D_h)" if wrong_freq else None
    return Finding(main[0], what=what, note="; ".join(n for _, n in [main, *(f for f in found if f is not main)]),
                   also=others)


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
    return _run_check("check_rope", lambda x: fn(x), lambda x: apply_rope(x), ROPE_MISTAKES, edge, _rope_inputs(),
                      make=_rope, measure=lambda cases, outputs: _measure_rope(fn), invariants=_rope_invariants)


# --------------------------------------------------------------------------------------------------------------------
# ALiBi's slopes (chapter 12)


def _slopes(num_heads: int, *, start: int = 1, rule: str = "press", reverse: bool = False,
            exponent: float = 8.0) -> Tensor:
    def powers(n: int) -> list[float]:
        return [2.0 ** (-exponent * (i + start) / n) for i in range(n)]

    if rule == "press":
        below = 2 ** int(math.floor(math.log2(num_heads)))
        slopes = powers(below) + powers(2 * below)[0::2][: num_heads - below]
    else:  # the geometric sequence for any H
        slopes = powers(num_heads)
    out = torch.tensor(slopes, dtype=torch.float64)
    return out.flip(0) if reverse else out


ALIBI_MISTAKES: dict[str, list[Mistake]] = {
    "alibi-slopes-off-by-one": [{"start": 0}],
    "alibi-slopes-not-power-of-two": [{"rule": "geometric"}],
    "alibi-slopes-reversed": [{"reverse": True}],
}


def _measure_slopes(cases: list[dict[str, Any]], outputs: list[Any]) -> Finding | None:
    """Recover the first slope and the ratio of the geometric sequence, for a power-of-two number of heads."""
    for case, out in zip(cases, outputs, strict=True):
        H = case["num_heads"]
        if H < 2 or H & (H - 1) or not isinstance(out, Tensor) or out.shape != (H,) or not bool((out > 0).all()):
            continue
        out = out.double()
        ratios = out[1:] / out[:-1]
        if float(ratios.max() - ratios.min()) < 1e-4 * float(ratios.abs().max()):
            r, first = float(ratios.mean()), float(out[0])
            return Finding("alibi-slopes-wrong-ratio", note=(
                f"with H = {H}, the slopes are {first:.4g} · {r:.4g}^i; expected 2^(-8/H) · (2^(-8/H))^i = "
                f"{2 ** (-8 / H):.4g} · {2 ** (-8 / H):.4g}^i"))
    return None


def check_alibi_slopes(fn: Callable[[int], Tensor]) -> CheckResult:
    """Check ``fn(num_heads) -> slopes``, ALiBi's per-head slopes (:func:`~attn_utils.positional.alibi_slopes`).

    Args:
        fn: takes the number of heads ``H`` and returns ``(H,)`` slopes: ``2^(-8 i / H)`` for ``i = 1, …, H`` when
            ``H`` is a power of two; otherwise those of the largest power of two below ``H``, followed by every
            other slope of the next power of two (Press et al.'s rule).
    Returns:
        a :class:`CheckResult`.
    Raises:
        AttentionBug: the slopes differ from the reference for some number of heads.

    >>> check_alibi_slopes(alibi_slopes)
    check_alibi_slopes: passed (6 edge cases, 40 random inputs)
    CheckResult(check='check_alibi_slopes', edge_cases=6, random_cases=40)
    """
    _check_fn(fn)
    edge = [{"num_heads": H} for H in (1, 2, 4, 8, 3, 12)]
    return _run_check("check_alibi_slopes", lambda num_heads: fn(num_heads),
                      lambda num_heads: alibi_slopes(num_heads), ALIBI_MISTAKES, edge,
                      st.fixed_dictionaries({"num_heads": st.integers(1, 32)}), make=_slopes, measure=_measure_slopes)


# --------------------------------------------------------------------------------------------------------------------
# RoPE at a position offset, as in cached decoding (chapter 12)


def _rope_at(x: Tensor, offset: int, *, positions: str = "offset", **mistake: Any) -> Tensor:
    """:func:`_rope` of ``x`` whose first row is at position ``offset``, with deliberate mistakes in how the offset is
    used (``positions``) or in the rotation itself (``mistake``, as for :func:`_rope`)."""
    if positions == "ignored":  # every call counts its rows from 0
        return _rope(x, **mistake)
    if positions == "one":  # every row at the offset, as if T were always 1
        rows = [_rope(x[..., t : t + 1, :], start=offset, **mistake) for t in range(x.shape[-2])]
        return torch.cat(rows, dim=-2)
    if positions == "negative":  # arange(T) - offset
        return _rope(x, start=-offset, **mistake)
    return _rope(x, start=offset + mistake.pop("start", 0), **mistake)


ROPE_OFFSET_MISTAKES: dict[str, list[Mistake]] = {
    "rope-offset-ignored": [{"positions": "ignored"}],
    "rope-offset-one-position": [{"positions": "one"}],
    "rope-offset-wrong-sign": [{"positions": "negative"}],
    **ROPE_MISTAKES,
}


def _positions_used(fn: Callable[[Tensor, int], Tensor], T: int, D: int, offset: int) -> list[float] | None:
    """The position each row of ``fn(x, offset)`` is turned by, read from the slowest pair (its angle stays below π
    for thousands of positions), when ``fn`` turns neighbours with the right frequencies; None otherwise."""
    x = torch.zeros(T, D)
    x[:, D - 2] = 1.0
    out = _call(lambda x: fn(x, offset), {"x": x}, lambda o: o)
    if not isinstance(out, Tensor) or tuple(out.shape) != (T, D) or not out.is_floating_point():
        return None
    o = out.detach().double()
    if not torch.allclose(o[:, : D - 2], torch.zeros(T, D - 2, dtype=torch.float64), atol=1e-6):
        return None
    theta = 10000.0 ** (-(D - 2) / D)
    return [float(torch.atan2(o[t, D - 1], o[t, D - 2])) / theta for t in range(T)]


def check_rope_offset(fn: Callable[[Tensor, int], Tensor]) -> CheckResult:
    """Check ``fn(x, offset)``, rotary position embeddings whose first row is at position ``offset``
    (:func:`~attn_utils.positional.apply_rope`), as cached decoding needs: the new queries and keys of a step come
    after the ``offset`` positions already in the cache.

    Args:
        fn: takes ``x (..., T, D_h)`` (``D_h`` even) and ``offset`` (an int, 0 or more) and rotates the pair of
            features ``(2j, 2j+1)`` of row ``m`` by the angle ``(offset + m) θ_j``, ``θ_j = 10000^(-2j / D_h)``:
            ``fn(x[..., offset:, :], offset)`` equals the last rows of ``fn(x, 0)``.
    Returns:
        a :class:`CheckResult`.
    Raises:
        AttentionBug: the rotated vectors differ from the reference on some input.

    >>> check_rope_offset(lambda x, offset: apply_rope(x, offset=offset))
    check_rope_offset: passed (6 edge cases, 40 random inputs)
    CheckResult(check='check_rope_offset', edge_cases=6, random_cases=40)
    """
    _check_fn(fn)
    g = torch.Generator().manual_seed(21)
    shapes_offsets = (((3, 4), 0), ((1, 4), 5), ((3, 8), 2), ((1, 2, 2, 6), 7), ((1, 2), 1), ((4, 8), 100))
    edge = [{"x": torch.randn(*shape, generator=g), "offset": offset} for shape, offset in shapes_offsets]

    @st.composite
    def inputs(draw: st.DrawFn) -> dict[str, Any]:
        return {**draw(_rope_inputs()), "offset": draw(st.sampled_from([0, 1, 2, 3, 5, 9, 17, 64]))}

    def measure(cases: list[dict[str, Any]], outputs: list[Any]) -> Finding | None:
        at_zero = _measure_rope(lambda x: fn(x, 0))
        if at_zero is not None:
            return at_zero
        for case in sorted(cases, key=lambda c: (c["offset"] == 0, c["x"].shape[-2])):
            T, offset = max(case["x"].shape[-2], 3), max(case["offset"], 2)
            used = _positions_used(fn, T, 8, offset)
            want = [float(offset + t) for t in range(T)]
            if used is None or all(abs(u - w) < 1e-3 for u, w in zip(used, want, strict=True)):
                continue
            shown = {"x": torch.randn(T, 8, generator=torch.Generator().manual_seed(22)), "offset": offset}
            return Finding(_offset_code(used, want), case=shown, note=(
                f"with offset = {offset} and T = {T}, the rows are turned as positions "
                f"[{', '.join(f'{u:.3g}' for u in used)}]; expected [{', '.join(f'{w:.3g}' for w in want)}]"))
        return None

    def invariants(case: dict[str, Any], out: Any, run: Callable[[dict[str, Any]], Any]) -> Finding | None:
        """Rows at an offset are the last rows of the same vectors rotated from position 0, and pairs keep their
        length."""
        x, offset = case["x"], case["offset"]
        if not isinstance(out, Tensor) or out.shape != x.shape or not out.is_floating_point():
            return None
        pairs = lambda t: t[..., 0::2] ** 2 + t[..., 1::2] ** 2  # noqa: E731
        if not torch.allclose(pairs(out.double()), pairs(x.double()), rtol=1e-3, atol=1e-5):
            return _rope_invariants({"x": x}, out, run)
        if offset == 0 or offset > 32:
            return None
        longer = torch.cat((torch.zeros(*x.shape[:-2], offset, x.shape[-1], dtype=x.dtype), x), dim=-2)
        whole = run({"x": longer, "offset": 0})
        if isinstance(whole, Tensor) and whole.shape == longer.shape and not torch.allclose(
                whole[..., offset:, :].double(), out.double(), rtol=1e-4, atol=1e-5):
            return Finding("rope-offset-inconsistent", note=(
                f"rotating the input shown with offset = {offset} gives other rows than rotating it after {offset} "
                "rows of zeros with offset = 0: row m must be turned as position offset + m"))
        return None

    return _run_check("check_rope_offset", lambda x, offset: fn(x, offset), lambda x, offset: apply_rope(x, offset),
                      ROPE_OFFSET_MISTAKES, edge, inputs(), make=_rope_at, measure=measure, invariants=invariants)


def _offset_code(used: list[float], want: list[float]) -> str:
    if all(abs(u - t) < 1e-3 for t, u in enumerate(used)):
        return "rope-offset-ignored"
    if all(abs(u - want[0]) < 1e-3 for u in used):
        return "rope-offset-one-position"
    if all(abs(u - (t - want[0])) < 1e-3 for t, u in enumerate(used)):
        return "rope-offset-wrong-sign"
    if all(abs(u - w - (used[0] - want[0])) < 1e-3 for u, w in zip(used, want, strict=True)):
        return "rope-positions-shifted"
    return "rope-offset-inconsistent"


# --------------------------------------------------------------------------------------------------------------------
# ALiBi's bias matrix (chapter 12)


def _bias(slopes: Tensor, T_q: int, T_k: int, *, sign: float = -1.0, queries: str = "last", distance: str = "abs",
          index: str = "both", one_slope: bool = False, reverse: bool = False) -> Tensor:
    """ALiBi's bias ``-s_h |i - j|`` with the queries as the last ``T_q`` of ``T_k`` positions, with mistakes."""
    s = slopes.double()
    if one_slope:
        s = s[:1].expand_as(s)
    if reverse:
        s = s.flip(0)
    start = T_k - T_q if queries == "last" else 0
    i = torch.arange(start, start + T_q, dtype=torch.float64)[:, None]
    j = torch.arange(T_k, dtype=torch.float64)[None, :]
    if index == "key":
        dist = j.expand(T_q, T_k)
    elif index == "query":
        dist = i.expand(T_q, T_k)
    else:
        dist = (i - j).abs() if distance == "abs" else i - j
    return (sign * s[:, None, None] * dist + 0.0).to(slopes.dtype)


ALIBI_BIAS_MISTAKES: dict[str, list[Mistake]] = {
    "alibi-bias-sign": [{"sign": 1.0}],
    "alibi-bias-queries-first": [{"queries": "first"}],
    "alibi-bias-signed-distance": [{"distance": "signed"}, {"distance": "signed", "sign": 1.0}],
    "alibi-bias-wrong-index": [{"index": "key"}, {"index": "query"}, {"index": "key", "sign": 1.0}],
    "alibi-bias-one-slope": [{"one_slope": True}],
    "alibi-slopes-reversed": [{"reverse": True}],
}


def _visible(bias: Any, T_q: int, T_k: int) -> Any:
    """A bias as a causal softmax sees it: the keys after a query's position set to 0, and each row shifted so that
    the query's own key is 0 (a constant added to a row of scores changes no weight)."""
    if not isinstance(bias, Tensor) or bias.dim() != 3 or tuple(bias.shape[1:]) != (T_q, T_k):
        return bias
    b = bias.double()
    own = T_k - T_q + torch.arange(T_q)  # the key at each query's position
    shifted = b - b[:, torch.arange(T_q), own][..., None]
    return shifted.masked_fill(~causal_mask(T_q, T_k), 0.0).to(bias.dtype)


def _measure_bias(cases: list[dict[str, Any]], outputs: list[Any]) -> Finding | None:
    """The slope of each head, read from how the bias of the last query falls from its own key to the one before."""
    for case, out in sorted(zip(cases, outputs, strict=True), key=lambda co: co[0]["T_k"]):
        slopes, T_q, T_k = case["slopes"], case["T_q"], case["T_k"]
        if T_k < 2 or not isinstance(out, Tensor) or out.shape != (slopes.shape[0], T_q, T_k):
            continue
        o = out.double()
        fall = o[:, -1, -1] - o[:, -1, -2]  # expected: s_h (the bias falls by s_h one key further away)
        want = slopes.double()
        if torch.allclose(fall, want, rtol=1e-3, atol=1e-5) or not bool(torch.isfinite(fall).all()):
            continue
        return Finding("alibi-bias-wrong-slopes", note=(
            f"from the last query's own key to the key before it, the bias of each head changes by "
            f"[{', '.join(f'{float(-f):.4g}' for f in fall)}]; expected -slope = "
            f"[{', '.join(f'{float(-w):.4g}' for w in want)}], on the input shown"), case=case)
    return None


def _bias_invariants(case: dict[str, Any], out: Any, run: Callable[[dict[str, Any]], Any]) -> Finding | None:
    """0 at each query's own key, never positive, and falling with the distance from the query."""
    slopes, T_q, T_k = case["slopes"], case["T_q"], case["T_k"]
    if not isinstance(out, Tensor) or out.shape != (slopes.shape[0], T_q, T_k) or not out.is_floating_point():
        return None
    o = out.double()
    own = T_k - T_q + torch.arange(T_q)
    if not case["_causal"]:
        diagonal = o[:, torch.arange(T_q), own]
        if not torch.allclose(diagonal, torch.zeros_like(diagonal), atol=1e-6):
            h, i = (int(v) for v in torch.nonzero(diagonal.abs() > 1e-6)[0])
            return Finding("alibi-bias-not-zero-at-own-key", note=(
                f"head {h}: query {i} sits at position {int(own[i])} (the queries are the last {T_q} of {T_k} "
                f"positions), and its bias on its own key is {float(o[h, i, int(own[i])]):.4g}, not 0"))
        if bool((o > 1e-6).any()):
            h, i, j = (int(v) for v in torch.nonzero(o > 1e-6)[0])
            return Finding("alibi-bias-positive", note=(
                f"head {h}, query {i} (position {int(own[i])}), key {j}: the bias is {float(o[h, i, j]):.4g} > 0; "
                "ALiBi only subtracts, more the farther the key"))
    return None


def check_alibi_bias(fn: Callable[[Tensor, int, int], Tensor], causal: bool = False) -> CheckResult:
    """Check ``fn(slopes, T_q, T_k)``, ALiBi's bias matrix (:func:`~attn_utils.positional.alibi_bias`).

    Args:
        fn: takes the per-head ``slopes (H,)``, ``T_q`` and ``T_k >= T_q`` and returns the ``(H, T_q, T_k)`` bias
            ``-slopes[h] · |i - j|`` added to the scores, query ``i`` at position ``i + T_k - T_q`` (the last ``T_q``
            of ``T_k`` positions, as in cached decoding), in the slopes' dtype.
        causal: False compares the whole matrix, which is symmetric in ``|i - j|`` (an encoder's bias); True compares
            it as a causal softmax uses it: only the keys at or before each query's position, and each row up to a
            constant (which changes no weight), so that BLOOM's ``slopes · j`` also passes.
    Returns:
        a :class:`CheckResult`.
    Raises:
        AttentionBug: the bias differs from the reference on some input.

    >>> check_alibi_bias(alibi_bias)
    check_alibi_bias: passed (7 edge cases, 40 random inputs)
    CheckResult(check='check_alibi_bias', edge_cases=7, random_cases=40)
    """
    _check_fn(fn)
    if not isinstance(causal, bool):
        raise TypeError(f"causal: expected True or False, got {causal!r}")
    view = (lambda b, T_q, T_k: _visible(b, T_q, T_k)) if causal else (lambda b, T_q, T_k: b)

    def case(slopes: Tensor, T_q: int, T_k: int) -> dict[str, Any]:
        return {"slopes": slopes, "T_q": T_q, "T_k": T_k, "_causal": causal}

    edge = [case(alibi_slopes(1).float(), 1, 1), case(alibi_slopes(2).float(), 3, 3),
            case(alibi_slopes(4).float(), 1, 5), case(alibi_slopes(8).float(), 2, 6),
            case(torch.tensor([0.5, 0.25, 0.125]), 4, 4), case(alibi_slopes(4), 3, 7)]
    late = [case(alibi_slopes(4).to(torch.bfloat16), 2, 5)]

    @st.composite
    def inputs(draw: st.DrawFn) -> dict[str, Any]:
        H, T_q = draw(st.integers(1, 8)), draw(st.integers(1, 6))
        T_k = T_q + draw(st.integers(0, 5))
        rule = draw(st.sampled_from(["alibi", "random"]))
        g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
        slopes = alibi_slopes(H).float() if rule == "alibi" else torch.rand(H, generator=g) + 0.05
        return case(slopes, T_q, T_k)

    def student(slopes: Tensor, T_q: int, T_k: int, _causal: bool) -> Any:
        return view(fn(slopes, T_q, T_k), T_q, T_k)

    def reference(slopes: Tensor, T_q: int, T_k: int, _causal: bool) -> Tensor:
        return view(alibi_bias(slopes, T_q, T_k), T_q, T_k)

    def make(slopes: Tensor, T_q: int, T_k: int, _causal: bool, **mistake: Any) -> Tensor:
        return view(_bias(slopes, T_q, T_k, **mistake), T_q, T_k)

    return _run_check("check_alibi_bias", student, reference, ALIBI_BIAS_MISTAKES, edge + late[:0], inputs(),
                      make=make, measure=_measure_bias, invariants=_bias_invariants, late=late)
