"""Chapter 8: attention over blocks of keys with the online softmax, and one decoding step with a KV cache."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from hypothesis import strategies as st
from torch import Tensor, nn

from ..masking import causal_mask
from ._core import CheckResult, Finding, Mistake, _check_fn, _fit_scale, _run_check, _size, _student_side
from .scoring import _name_scale

# --------------------------------------------------------------------------------------------------------------------
# Online softmax: attention over blocks of keys (chapter 8)


def _online(q: Tensor, k: Tensor, v: Tensor, block_size: int, *, rescale: str = "both", inverted: bool = False,
            safe: bool = True, drop_last: bool = False, scale: bool = True, start: float = -math.inf,
            guard: bool = False) -> Tensor:
    """Attention over blocks of keys with a running maximum, sum and output, and deliberate mistakes (none with the
    defaults): ``start`` is where the running maximum starts, and ``guard`` returns 0 for a query whose running sum
    is 0 (instead of 0 / 0). Computed in the inputs' dtype, as a student's function would."""
    T_q, D = q.shape
    divisor = math.sqrt(D) if scale else 1.0
    mu = torch.full((T_q, 1), start, dtype=q.dtype)
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
    return torch.where(ell > 0, o / ell, torch.zeros_like(o)) if guard else o / ell


_START_WORDS = {
    "what": "the running maximum starts at a finite number (0, or a stand-in for -inf such as -5e4) instead of -inf: "
            "a query whose scores are all below it never moves it, every exp() underflows to 0, and the query's "
            "output is lost",
    "fix": "start the running maximum at -inf, torch.full((T_q, 1), -math.inf), so that the first block sets it to "
           "that block's largest score",
}

ONLINE_MISTAKES: dict[str, list[Mistake]] = {
    "online-no-rescale": [{"rescale": r} for r in ("none", "sum", "output")],
    "online-rescale-inverted": [{"inverted": True}],
    "online-overflow": [{"safe": False}],
    "online-partial-block-dropped": [{"drop_last": True}],
    "missing-scale": [{"scale": False}],
    "online-wrong-combination": [
        {"start": 0.0, "guard": g, **{f"_{key}": words for key, words in _START_WORDS.items()}}
        for g in (False, True)],
}


def _measure_online(cases: list[dict[str, Any]], outputs: list[Any]) -> Finding | None:
    """Which invariant breaks: exactness with one block (the scale), or agreement across block sizes (the rescaling)."""
    ordered = sorted(zip(cases, outputs, strict=True), key=lambda co: _size(co[0]))
    nan_rows = []  # (case, the largest score of each query whose output has a NaN)
    for case, out in ordered:
        q, k, v = (case[n].double() for n in ("q", "k", "v"))
        if isinstance(out, Tensor) and out.shape == (q.shape[0], v.shape[1]) and bool(torch.isnan(out).any()):
            rows = torch.isnan(out).any(1)
            nan_rows.append((case, ((q @ k.T) / math.sqrt(q.shape[1])).amax(1)[rows]))
    if any(float(top.max()) > 80 for _, top in nan_rows):  # exp() of a score above 88 overflows float32
        return Finding("online-overflow", note="the output has NaN where the exact attention has none, for queries "
                                               "whose largest score is large enough for exp() to overflow")
    if nan_rows and all(float(top.max()) < -80 for _, top in nan_rows):
        case, top = nan_rows[0]
        return Finding("online-wrong-combination", case=case, note=(
            f"the output has NaN only for queries whose scores are all very negative (the largest {float(top[0]):.6g} "
            "on the input shown), where every exp() underflows to 0 unless the largest score itself is subtracted: "
            "consistent with a running maximum that starts at a finite number instead of -inf"), **_START_WORDS)
    if nan_rows:
        return Finding("online-wrong-combination", note="the output has NaN although no score is large enough to "
                                                        "overflow: look for -inf - (-inf) or 0 · inf in the running "
                                                        "values")
    for case, out in ordered:
        q, k, v = (case[n].double() for n in ("q", "k", "v"))
        if not isinstance(out, Tensor) or out.shape != (q.shape[0], v.shape[1]):
            continue
        fits = []
        for other, o in sorted(zip(cases, outputs, strict=True), key=lambda co: _size(co[0]))[:4]:
            qo, ko, vo = (other[n].double() for n in ("q", "k", "v"))
            c = _fit_scale(lambda c, q=qo, k=ko, v=vo: torch.softmax(q @ k.T * c, dim=1) @ v, o)
            fits.append((qo.shape[1], c))
        if len(fits) > 1 and all(c is not None and c > 2e-3 for _, c in fits):
            return _name_scale(fits)  # type: ignore[arg-type]
        if case["block_size"] < k.shape[0]:
            return Finding("online-wrong-combination", note=(
                f"with {k.shape[0]} keys in blocks of {case['block_size']} the output differs from exact "
                "attention, which a single block reproduces"))
    return None


def _online_invariants(case: dict[str, Any], out: Any, run: Callable[[dict[str, Any]], Any]) -> Finding | None:
    """The output does not depend on the block size, and each output row lies within the range of the values."""
    q, k, v, block = case["q"], case["k"], case["v"], case["block_size"]
    if not isinstance(out, Tensor) or out.shape != (q.shape[0], v.shape[1]) or not bool(torch.isfinite(out).all()):
        return None
    exact = torch.softmax(q.double() @ k.double().T / math.sqrt(q.shape[1]), dim=1) @ v.double()
    if block < k.shape[0]:
        whole = run({**case, "block_size": k.shape[0]})
        if isinstance(whole, Tensor) and whole.shape == out.shape and torch.allclose(
                whole.double(), exact, rtol=1e-4, atol=1e-5):
            gap = float((out.double() - exact).abs().max())
            return Finding("online-wrong-combination", note=f"with one block of all {k.shape[0]} keys your output is "
                                                        f"right; with blocks of {block} keys it is off by up to "
                                                        f"{gap:.3g}")
    lo, hi = v.double().amin(0), v.double().amax(0)
    o = out.double()
    outside = (o < lo - 1e-4) | (o > hi + 1e-4)
    if bool(outside.any()):
        i, j = (int(x) for x in torch.nonzero(outside)[0])
        return Finding("output-outside-values", note=f"query {i}'s output in column {j} is {float(o[i, j]):.4g}, "
                                                     f"outside the range [{float(lo[j]):.4g}, {float(hi[j]):.4g}] of "
                                                     "that column of v")
    return None


@st.composite
def _online_inputs(draw: st.DrawFn) -> dict[str, Any]:
    T_q, T_k, D, D_v = draw(st.integers(1, 3)), draw(st.integers(1, 9) | st.just(24)), draw(st.sampled_from([2, 4])), 2
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    size = draw(st.sampled_from([1.0, 8.0, -1.0]))  # 8: scores large enough that exp() alone overflows float32
    block = draw(st.integers(1, 5))
    if size < 0:  # every score about -60000, exact in float32 (D = 4, so √D = 2): all of a query's exp() underflow
        D = 4  # unless the largest score itself is subtracted
        q = -torch.randint(1, 3, (T_q, D), generator=g).float() / 2
        k = 60000.0 + torch.randint(0, 8, (T_k, D), generator=g).float()
        return {"q": q, "k": k, "v": torch.randn(T_k, D_v, generator=g), "block_size": block}
    return {"q": size * torch.randn(T_q, D, generator=g), "k": size * torch.randn(T_k, D, generator=g),
            "v": torch.randn(T_k, D_v, generator=g), "block_size": block}


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

    # in the fourth edge case (one block) every score is very negative, about -60000 and exact in float32: a running
    # maximum that starts at 0, or at a finite stand-in for -inf such as -5e4, stays above all of them, and every
    # exp() underflows to 0
    very_negative = {"q": torch.tensor([[-1.0, 0.0, 0.0, 0.0], [0.0, -1.0, 0.0, 0.0], [-0.5, -0.5, 0.0, 0.0]]),
                     "k": torch.tensor([[120000.0, 120004.0, 0.0, 0.0], [120002.0, 120001.0, 0.0, 0.0],
                                        [120005.0, 120000.0, 0.0, 0.0], [120001.0, 120006.0, 0.0, 0.0]])}
    edge = [case(2, 6, 4, 2, 1.0), case(2, 7, 4, 3, 1.0), case(1, 5, 2, 1, 1.0),
            {**case(3, 4, 4, 4, 1.0), **very_negative}, case(1, 6, 4, 2, 8.0)]

    def reference(q: Tensor, k: Tensor, v: Tensor, block_size: int) -> Tensor:
        q, k, v = q.double(), k.double(), v.double()
        return torch.softmax(q @ k.T / math.sqrt(q.shape[1]), dim=1) @ v

    return _run_check("check_online_softmax", lambda q, k, v, block_size: fn(q, k, v, block_size), reference,
                      ONLINE_MISTAKES, edge, _online_inputs(), make=_online, measure=_measure_online,
                      invariants=_online_invariants)



# --------------------------------------------------------------------------------------------------------------------
# One decoding step with a KV cache (chapters 8 and 9)


def _kv_steps(mha: nn.Module, X: Tensor, prefix: int = 0, *, update: str = "append", mask: str = "none",
              scale: str = "sqrt", axis: int = 2, prefill: str = "kept") -> Tensor:
    """Decode X (B, T, D) one position at a time with a cache, as chapter 8's step_with_my_cache, from position
    ``prefix`` on (the cache then holds the first ``prefix`` positions, as after a prompt); with mistakes."""
    B, T, D = X.shape
    H = mha.num_heads
    D_h = D // H

    def split(x: Tensor) -> Tensor:
        return x.view(x.shape[0], x.shape[1], H, D_h).transpose(1, 2)

    k_all = v_all = None
    if prefix and prefill == "kept":
        k_all, v_all = split(mha.W_k(X[:, :prefix])), split(mha.W_v(X[:, :prefix]))
    outs = []
    for t in range(prefix, T):
        x_t = X[:, t : t + 1]
        q, k_new, v_new = split(mha.W_q(x_t)), split(mha.W_k(x_t)), split(mha.W_v(x_t))
        k_old, v_old = k_all, v_all
        k_all = k_new if k_all is None else torch.cat([k_all, k_new], dim=axis)
        v_all = v_new if v_all is None else torch.cat([v_all, v_new], dim=axis)
        k_use, v_use = k_all, v_all
        if update == "replace":  # the cache keeps the newest position only
            k_use, v_use = k_all, v_all = k_new, v_new
        elif update == "stale" and k_old is not None:  # attends to the cache before the new position is added
            k_use, v_use = k_old, v_old
        divisor = {"sqrt": math.sqrt(D_h), "none": 1.0, "model": math.sqrt(D)}[scale]
        scores = q @ k_use.transpose(-2, -1) / divisor
        if mask == "top-left":
            scores = scores.masked_fill(~torch.ones(1, scores.shape[-1], dtype=torch.bool).tril(), -math.inf)
        weights = torch.softmax(scores, dim=-1)
        outs.append(mha.W_o((weights @ v_use).transpose(1, 2).reshape(B, 1, D)))
    return torch.cat(outs, dim=1)


KV_MISTAKES: dict[str, list[Mistake]] = {
    "kv-cache-not-appended": [{"update": "replace"}],
    "kv-cache-misses-new-token": [{"update": "stale"}],
    "kv-cache-top-left-mask": [{"mask": "top-left"}],
    "scale-by-d-model": [{"scale": "model"}],
    "missing-scale": [{"scale": "none"}],
    "kv-cache-prefill-ignored": [{"prefill": "ignored"}],
}


def _kv_decode(fn: Callable[..., Tensor], X: Tensor, d_model: int, num_heads: int,
               weights: dict[str, Tensor], prefix: int = 0) -> Tensor:
    """(the student's side) ``X`` decoded one position at a time by ``fn(mha, x_t, cache)``, ``mha`` a
    :class:`~attn_utils.multihead.MultiHeadAttention` with the clinic's ``weights``: from an empty cache, or from
    position ``prefix`` with a cache that holds the keys and values of the first ``prefix`` positions."""
    from ..multihead import MultiHeadAttention

    mha = MultiHeadAttention(d_model, num_heads).eval()
    mha.load_state_dict(weights)
    cache: dict[str, Tensor | None] = {"k": None, "v": None}
    if prefix:
        B, D_h = X.shape[0], d_model // num_heads
        with torch.no_grad():
            for name, layer in (("k", mha.W_k), ("v", mha.W_v)):
                cache[name] = layer(X[:, :prefix]).view(B, prefix, num_heads, D_h).transpose(1, 2)
    return torch.cat([fn(mha, X[:, t : t + 1], cache) for t in range(prefix, X.shape[1])], dim=1)


def check_kv_cache_step(fn: Callable[[nn.Module, Tensor, dict[str, Tensor | None]], Tensor]) -> CheckResult:
    """Check ``fn(mha, x_t, cache)``, one decoding step of self-attention with a KV cache (chapter 8), against one
    causal pass of ``mha`` over the whole sequence.

    Args:
        fn: takes an :class:`~attn_utils.multihead.MultiHeadAttention` ``mha`` (its ``W_q``, ``W_k``, ``W_v``,
            ``W_o`` and ``num_heads``), the newest position ``x_t (B, 1, D)`` and the cache, a dict with ``"k"`` and
            ``"v"`` (None at the first step, then ``(B, H, t, D_h)``), which it updates in place; it returns the
            output ``(B, 1, D)`` of position ``t``. The check decodes each sequence one position at a time, from an
            empty cache or from a position offset ``P`` (the cache then already holds the keys and values of the
            first ``P`` positions, as after a prompt), and compares the outputs with the rows from ``P`` on of
            ``mha(X, X, X, attn_mask=causal_mask(T))``.
    Returns:
        a :class:`CheckResult`.
    Raises:
        AttentionBug: the outputs differ from the full causal pass for some sequence.
    """
    _check_fn(fn)
    from ..multihead import MultiHeadAttention

    built: dict[tuple[int, int, int], nn.Module] = {}

    def build(D: int, H: int, seed: int) -> nn.Module:
        if (D, H, seed) not in built:
            torch.manual_seed(seed)  # the clinic's own weights; the caller's random state is restored below
            built[D, H, seed] = MultiHeadAttention(D, H).eval()
        return built[D, H, seed]

    def case(B: int, T: int, D: int, H: int, seed: int, prefix: int = 0) -> dict[str, Any]:
        g = torch.Generator().manual_seed(seed)
        return {"X": torch.randn(B, T, D, generator=g), "d_model": D, "num_heads": H, "prefix": prefix,
                "_seed": seed}

    steps = _student_side(fn, _kv_decode)

    def student(X: Tensor, d_model: int, num_heads: int, prefix: int, _seed: int) -> Tensor:
        mha = build(d_model, num_heads, _seed)
        weights = {name: value.detach().clone() for name, value in mha.state_dict().items()}
        return steps(X, d_model, num_heads, weights, prefix)

    def reference(X: Tensor, d_model: int, num_heads: int, prefix: int, _seed: int) -> Tensor:
        mha = build(d_model, num_heads, _seed)
        with torch.no_grad():
            return mha(X, X, X, attn_mask=causal_mask(X.shape[1]))[0][:, prefix:]

    def make(X: Tensor, d_model: int, num_heads: int, prefix: int, _seed: int, **mistake: Any) -> Tensor:
        with torch.no_grad():
            return _kv_steps(build(d_model, num_heads, _seed), X, prefix, **mistake)

    sizes = st.tuples(st.integers(1, 2), st.integers(1, 5), st.sampled_from([(4, 2), (8, 2), (8, 4)]),
                      st.integers(0, 2**10), st.integers(0, 3))
    # the second edge case starts at a position offset: its cache already holds the first 2 positions
    edge = [case(1, 3, 8, 2, 0), case(2, 4, 8, 4, 1, prefix=2), case(1, 5, 4, 1, 2)]
    state = torch.get_rng_state()
    try:
        return _run_check("check_kv_cache_step", student, reference, KV_MISTAKES, edge,
                          sizes.map(lambda s: case(s[0], s[1], *s[2], s[3], min(s[4], s[1] - 1))), make=make,
                          batched=("X",))
    finally:
        torch.set_rng_state(state)
