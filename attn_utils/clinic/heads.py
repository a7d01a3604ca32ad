"""Chapter 5 (and 12): splitting into heads, multi-head attention, and grouped-query attention."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from hypothesis import strategies as st
from torch import Tensor, nn

from .._checks import check_positive_int
from ._core import (
    CheckResult,
    Finding,
    Mistake,
    _arity,
    _call,
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
from .scoring import SOFTMAX_MISTAKES, _name_scale, _scores_cases, _softmax

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


def _with_heads(fn: Callable[..., Tensor], X: Tensor, H: int) -> Tensor:
    """(the student's side) ``fn(X)`` if ``fn`` takes one positional parameter, else ``fn(X, H)``."""
    return fn(X) if _arity(fn) == 1 else fn(X, H)


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
        call = _student_side(fn, _with_heads)
        return lambda X: call(X, H)

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
         lens: str = "interleave", softmax_fn: Callable[..., Tensor] | None = None, factor: float | None = None,
         **softmax: Any) -> Tensor:
    """Multi-head attention written out, with deliberate mistakes (none with the defaults)."""
    W_q, W_k, W_v, W_o_, b_q, b_k, b_v, b_o = params
    q, k, v = queries @ W_q.T + b_q, keys @ W_k.T + b_k, values @ W_v.T + b_v  # (B, T, D)
    B, T_q, D = q.shape
    T_k, D_h = k.shape[1], D // H
    q4, k4, v4 = (_split(x, H, 4, split) for x in (q, k, v))  # (B, H, T, D_h)
    divisor = 1 / factor if factor is not None else {
        "head": math.sqrt(D_h), "model": math.sqrt(D), "none": 1.0, "d": float(D_h)}[scale]
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
    probe = _student_side(module_cls, _layers)((8, 2), PROJECTIONS)
    for name in PROJECTIONS[:3]:
        _linear(probe, name, (8, 8), "au.MultiHeadAttention")
    has_W_o = probe["layers"]["W_o"][0] is not None
    if has_W_o:
        _linear(probe, "W_o", (8, 8), "au.MultiHeadAttention")
    names = PROJECTIONS if has_W_o else PROJECTIONS[:3]
    biases = [probe["layers"][name][1] for name in PROJECTIONS]
    run_module = _student_side(module_cls, _run_module)

    def student(queries: Tensor, keys: Tensor, values: Tensor, valid_lens: Tensor | None, d_model: int,
                num_heads: int, _seed: int) -> Any:
        params = _mha_params({"d_model": d_model, "_seed": _seed}, biases)
        return run_module((d_model, num_heads), {name: (params[i], params[4 + i] if biases[i] else None)
                                                 for i, name in enumerate(names)},
                          (queries, keys, values, valid_lens))

    def make(**c: Any) -> Tensor:
        mistake = {k: v for k, v in c.items() if k not in case_keys}
        return _mha(_mha_params(c, biases), c["queries"], c["keys"], c["values"], c["valid_lens"], c["num_heads"],
                    **mistake)

    def measure(cases: list[dict[str, Any]], outputs: list[Any]) -> Finding | None:
        fits = []
        for case, out in sorted(zip(cases, outputs, strict=True), key=lambda co: _size(co[0])):
            c = _fit_scale(lambda c, case=case: make(**case, factor=c), out)
            if c is None:
                return None
            fits.append((case["d_model"] // case["num_heads"], c))
            if len(fits) == 4:
                break
        D = cases[0]["d_model"]
        found = _name_scale(fits, D) if all(k["d_model"] == D for k in cases[:4]) else _name_scale(fits)
        return None if found.bug == "scale-wrong" and all(abs(c * math.sqrt(d) - 1) < 1e-3 for d, c in fits) else found

    variants: dict[str, list[Mistake]] = {
        "scale-by-d-model": [{"scale": "model"}],
        "missing-scale": [{"scale": "none"}],
        "scale-by-d": [{"scale": "d"}],
        "heads-interleaved": [{"split": "heads-interleaved", "merge": "heads-interleaved"},
                              {"split": "heads-interleaved"}, {"merge": "heads-interleaved"}],
        "heads-no-transpose": [{"split": "heads-no-transpose", "merge": "heads-no-transpose"},
                               {"split": "heads-no-transpose"}, {"merge": "heads-no-transpose"}],
        "valid-lens-repeat": [{"lens": "repeat"}],
        "missing-output-projection": [{"W_o": False}],
        **SOFTMAX_MISTAKES,
    }
    g = torch.Generator().manual_seed(4)

    def case(B: int, T_q: int, T_k: int, lens: Tensor | None, D: int, H: int, seed: int) -> dict[str, Any]:
        return {"queries": torch.randn(B, T_q, D, generator=g), "keys": torch.randn(B, T_k, D, generator=g),
                "values": torch.randn(B, T_k, D, generator=g), "valid_lens": lens, "d_model": D, "num_heads": H,
                "_seed": seed}

    edge = [case(1, 2, 3, None, 8, 2, 0), case(2, 3, 2, None, 8, 4, 1), case(2, 2, 4, torch.tensor([2, 4]), 8, 2, 2),
            case(3, 2, 3, torch.tensor([3, 1, 2]), 6, 2, 3), case(2, 2, 3, torch.tensor([[1, 3], [0, 2]]), 12, 3, 4)]
    case_keys = set(edge[0])
    return _run_check("check_multihead_attention", student, make, variants, edge, _mha_inputs(), _first, make=make,
                      measure=measure, batched=("queries", "keys", "values", "valid_lens"))



# --------------------------------------------------------------------------------------------------------------------
# Grouped-query attention (chapter 12)


def _gqa(q: Tensor, k: Tensor, v: Tensor, *, share: str = "interleave", scale: str = "sqrt",
         factor: float | None = None, axis: int = -1) -> Tensor:
    """Grouped-query attention: query head i uses key/value head i // (H / G); with deliberate mistakes."""
    H, G, D = q.shape[1], k.shape[1], q.shape[-1]
    if share == "interleave":
        index = torch.arange(H) // (H // G)
    elif share == "tile":
        index = torch.arange(H) % G
    else:  # "first": every query head uses the first key/value head
        index = torch.zeros(H, dtype=torch.long)
    k, v = k.double()[:, index], v.double()[:, index]
    divisor = 1 / factor if factor is not None else {"sqrt": math.sqrt(D), "none": 1.0, "d": float(D)}[scale]
    return torch.softmax(q.double() @ k.transpose(-2, -1) / divisor, dim=axis) @ v


GQA_MISTAKES: dict[str, list[Mistake]] = {
    "gqa-heads-tiled": [{"share": "tile"}],
    "gqa-one-kv-head": [{"share": "first"}],
    "missing-scale": [{"scale": "none"}],
    "scale-by-d": [{"scale": "d"}],
    "softmax-wrong-axis": [{"axis": -2}],
}


def _gqa_case(g: torch.Generator, B: int, H: int, G: int, T_q: int, T_k: int, D: int) -> dict[str, Any]:
    return {"q": torch.randn(B, H, T_q, D, generator=g), "k": torch.randn(B, G, T_k, D, generator=g),
            "v": torch.randn(B, G, T_k, 2, generator=g)}


@st.composite
def _gqa_inputs(draw: st.DrawFn) -> dict[str, Any]:
    G = draw(st.integers(1, 3))
    H = G * draw(st.integers(1, 3))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    return _gqa_case(g, draw(st.integers(1, 2)), H, G, draw(st.integers(1, 3)), draw(st.integers(1, 4)),
                     draw(st.sampled_from([2, 4, 8])))


def _measure_gqa(cases: list[dict[str, Any]], outputs: list[Any]) -> Finding | None:
    """Recover which key/value head each query head really uses."""
    for case, out in sorted(zip(cases, outputs, strict=True), key=lambda co: -co[0]["q"].shape[1]):
        q, k, v = case["q"], case["k"], case["v"]
        H, G = q.shape[1], k.shape[1]
        if not isinstance(out, Tensor) or out.shape != (q.shape[0], H, q.shape[2], v.shape[-1]) or G < 2:
            continue
        used = []
        for i in range(H):
            match = [gk for gk in range(G) if _same(_gqa(q[:, i:i + 1], k[:, gk:gk + 1], v[:, gk:gk + 1]),
                                                    out[:, i:i + 1])]
            used.append(match[0] if len(match) == 1 else None)
        if None in used:
            continue
        want = [i // (H // G) for i in range(H)]
        if used != want:
            return Finding("gqa-wrong-group", note=f"with H = {H} query heads and G = {G} key/value heads, query "
                                                   f"head i uses key/value head {used}, expected {want}")
    return _measure_gqa_scale(cases, outputs)


def _measure_gqa_scale(cases: list[dict[str, Any]], outputs: list[Any]) -> Finding | None:
    """The factor that multiplies the scores, with the right heads shared, on the smallest inputs; named when it is
    1/√D_v, the width of the values."""
    fits: list[tuple[int, int, float]] = []
    smallest = sorted(zip(cases, outputs, strict=True), key=lambda co: _size(co[0]))[:3]
    for case, out in smallest:
        c = _fit_scale(lambda c, case=case: _gqa(case["q"], case["k"], case["v"], factor=c), out)
        if c is None:
            return None
        fits.append((case["q"].shape[-1], case["v"].shape[-1], c))
    if not fits:
        return None
    shown = {(d, d_v): c for d, d_v, c in reversed(fits)}  # the first fit of each pair of widths: the input shown
    note = "; ".join(f"for d = {d} (values {d_v} wide) the scores are multiplied by {c:.4g}, expected 1/√{d} = "
                     f"{1 / math.sqrt(d):.4g}" for (d, d_v), c in reversed(list(shown.items())))
    if all(abs(c * math.sqrt(d_v) - 1) < 1e-3 for _, d_v, c in fits) and any(d != d_v for d, d_v, _ in fits):
        return Finding("scale-wrong", what="the scores are divided by √D_v, the width of the values, instead of by "
                                           "√d, the width of the queries and keys", note=note, case=smallest[0][0])
    return _name_scale([(d, c) for d, _, c in fits])


def check_grouped_query_attention(fn: Callable[[Tensor, Tensor, Tensor], Tensor]) -> CheckResult:
    """Check ``fn(q, k, v)``, grouped-query attention (chapter 12): ``G`` key/value heads shared by ``H`` query heads.

    Args:
        fn: takes ``q (B, H, T_q, D)``, ``k (B, G, T_k, D)`` and ``v (B, G, T_k, D_v)`` (``G`` divides ``H``) and
            returns ``(B, H, T_q, D_v)``: query head ``i`` attends with key/value head ``i // (H / G)``, as
            ``repeat_interleave(H // G, dim=1)`` and ``F.scaled_dot_product_attention(..., enable_gqa=True)`` do.
    Returns:
        a :class:`CheckResult`.
    Raises:
        AttentionBug: the output differs from the reference on some input.

    >>> check_grouped_query_attention(lambda q, k, v: torch.softmax(
    ...     q @ k.repeat_interleave(q.shape[1] // k.shape[1], 1).transpose(-2, -1) / q.shape[-1] ** 0.5, -1)
    ...     @ v.repeat_interleave(q.shape[1] // k.shape[1], 1))
    check_grouped_query_attention: passed (4 edge cases, 40 random inputs)
    CheckResult(check='check_grouped_query_attention', edge_cases=4, random_cases=40)
    """
    _check_fn(fn)
    g = torch.Generator().manual_seed(12)
    edge = [_gqa_case(g, 1, 2, 1, 2, 3, 4), _gqa_case(g, 1, 4, 2, 2, 3, 4), _gqa_case(g, 2, 6, 3, 1, 4, 2),
            _gqa_case(g, 1, 4, 4, 2, 3, 8)]
    return _run_check("check_grouped_query_attention", lambda q, k, v: fn(q, k, v), lambda q, k, v: _gqa(q, k, v),
                      GQA_MISTAKES, edge, _gqa_inputs(), make=_gqa, measure=_measure_gqa, batched=("q", "k", "v"))
