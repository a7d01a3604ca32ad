"""The checks added where a real bug had none: ALiBi's bias matrix, RoPE at a position offset, a KV-cache step from a
prefilled cache, and the class token of sequences padded on either side. Each passes correct implementations in other
styles, names each of its bugs, and stays fast."""

from __future__ import annotations

import math
import re
import time

import pytest
import torch
import torch.nn.functional as F

import attn_utils as au
from attn_utils import clinic


def failure(check, fn, **kwargs) -> clinic.AttentionBug:
    with pytest.raises(clinic.AttentionBug) as info:
        check(fn, **kwargs)
    return info.value


# ---------------------------------------------------------------------------------------------------------------------
# ALiBi's bias matrix


def bias_loops(slopes, T_q, T_k):
    out = torch.zeros(len(slopes), T_q, T_k, dtype=slopes.dtype)
    for h in range(len(slopes)):
        for i in range(T_q):
            for j in range(T_k):
                out[h, i, j] = -slopes[h] * abs(i + T_k - T_q - j)
    return out


def bias_bloom(slopes, T_q, T_k):  # BLOOM: slopes · j, equal to -slopes · (i - j) up to a constant per row
    return (slopes[:, None, None] * torch.arange(T_k, dtype=slopes.dtype)).expand(-1, T_q, -1)


def bias_from(query_first=False, sign=-1.0, absolute=True, one_slope=False, key_only=False):
    def bias(slopes, T_q, T_k):
        i = torch.arange(T_q)[:, None] + (0 if query_first else T_k - T_q)
        j = torch.arange(T_k)[None, :]
        distance = j.expand(T_q, T_k) if key_only else (i - j).abs() if absolute else i - j
        s = slopes[:1].expand_as(slopes) if one_slope else slopes
        return sign * s[:, None, None] * distance.to(slopes.dtype)

    return bias


def test_alibi_bias_passes_correct_implementations_in_other_styles() -> None:
    for fn in (au.alibi_bias, bias_loops, bias_from()):
        clinic.check_alibi_bias(fn)
        clinic.check_alibi_bias(fn, causal=True)
    clinic.check_alibi_bias(bias_bloom, causal=True)  # correct where a causal mask hides the keys after a query
    clinic.check_alibi_bias(bias_from(absolute=False), causal=True)


@pytest.mark.parametrize("fn, causal, code", [
    (bias_from(sign=1.0), False, "alibi-bias-sign"),
    (bias_from(sign=1.0), True, "alibi-bias-sign"),
    (bias_from(query_first=True), False, "alibi-bias-queries-first"),
    (bias_from(query_first=True), True, "alibi-bias-queries-first"),
    (bias_from(absolute=False), False, "alibi-bias-signed-distance"),
    (bias_from(key_only=True), False, "alibi-bias-wrong-index"),
    (bias_from(key_only=True), True, "alibi-bias-sign"),  # -s·j is +s·(i - j) up to a constant per row
    (bias_bloom, False, "alibi-bias-wrong-index"),
    (bias_from(one_slope=True), False, "alibi-bias-one-slope"),
    (lambda s, T_q, T_k: au.alibi_bias(s.flip(0), T_q, T_k), False, "alibi-slopes-reversed"),
])
def test_alibi_bias_names_its_bugs(fn, causal, code) -> None:
    bug = failure(clinic.check_alibi_bias, fn, causal=causal)
    assert bug.bug == code, str(bug)
    assert "no known bug explains it" not in str(bug)


def test_alibi_bias_measures_the_slopes_it_cannot_name() -> None:
    bug = failure(clinic.check_alibi_bias, lambda s, T_q, T_k: au.alibi_bias(s**2, T_q, T_k))
    assert bug.bug == "alibi-bias-wrong-slopes"
    found = re.search(r"changes by \[([^\]]*)\]; expected -slope = \[([^\]]*)\]", str(bug))
    assert found
    slopes = bug.example["slopes"]
    assert [float(x) for x in found.group(2).split(", ")] == pytest.approx((-slopes).tolist(), rel=1e-3)
    assert [float(x) for x in found.group(1).split(", ")] == pytest.approx((-(slopes**2)).tolist(), rel=1e-3)


def test_alibi_bias_refuses_a_causal_that_is_not_a_bool() -> None:
    with pytest.raises(TypeError, match="causal: expected True or False, got 1"):
        clinic.check_alibi_bias(au.alibi_bias, causal=1)


# ---------------------------------------------------------------------------------------------------------------------
# RoPE at a position offset


def rope_complex(x, offset):  # chapter 12's complex-number form
    T, D = x.shape[-2], x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    angles = torch.arange(offset, offset + T, dtype=torch.float64)[:, None] * theta
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], D // 2, 2).contiguous())
    return torch.view_as_real(z * torch.polar(torch.ones_like(angles), angles)).flatten(-2).to(x.dtype)


def rope_table(x, offset):  # a table of 256 positions, sliced from the offset, as a cached module does
    rope = au.RotaryEmbedding(x.shape[-1], max_len=256) if hasattr(au, "RotaryEmbedding") else None
    if rope is None:
        return au.apply_rope(x, offset=offset)
    return rope(x, offset=offset)


def rope_with(start=lambda offset, T: torch.arange(offset, offset + T)):
    def rope(x, offset):
        T, D = x.shape[-2], x.shape[-1]
        theta = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
        angles = start(offset, T).double()[:, None] * theta
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2)

    return rope


def test_rope_offset_passes_correct_implementations_in_other_styles() -> None:
    for fn in (lambda x, offset: au.apply_rope(x, offset=offset), rope_complex, rope_table, rope_with()):
        clinic.check_rope_offset(fn)


@pytest.mark.parametrize("fn, code", [
    (rope_with(lambda offset, T: torch.arange(T)), "rope-offset-ignored"),
    (rope_with(lambda offset, T: torch.full((T,), offset)), "rope-offset-one-position"),
    (rope_with(lambda offset, T: torch.arange(T) - offset), "rope-offset-wrong-sign"),
    (rope_with(lambda offset, T: torch.arange(offset + 1, offset + 1 + T)), "rope-positions-shifted"),
])
def test_rope_offset_names_its_bugs(fn, code) -> None:
    bug = failure(clinic.check_rope_offset, fn)
    assert bug.bug == code, str(bug)
    assert "no known bug explains it" not in str(bug)


def test_rope_offset_measures_the_positions_used() -> None:
    bug = failure(clinic.check_rope_offset, rope_with(lambda offset, T: torch.arange(2 * offset, 2 * offset + T)))
    text = str(bug)
    found = re.search(r"with offset = (\d+) and T = (\d+), the rows are turned as positions \[([^\]]*)\]", text)
    assert found, text
    offset, T = int(found.group(1)), int(found.group(2))
    assert [float(p) for p in found.group(3).split(", ")] == pytest.approx([2 * offset + t for t in range(T)])
    assert bug.example["offset"] == offset and bug.example["x"].shape[-2] == T  # the input shown is the one measured


def test_rope_offset_diagnoses_a_wrong_rotation_as_check_rope_does() -> None:
    def halves(x, offset):
        return au.apply_rope(x[..., torch.arange(x.shape[-1]).reshape(2, -1).T.flatten()], offset=offset)[
            ..., torch.arange(x.shape[-1]).reshape(-1, 2).T.flatten()]

    assert failure(clinic.check_rope_offset, halves).bug == "rope-wrong-pairing"


# ---------------------------------------------------------------------------------------------------------------------
# A KV-cache step from a prefilled cache


def step(mha, x_t, cache):
    B, _, D = x_t.shape
    H = mha.num_heads

    def split(x):
        return x.view(B, 1, H, D // H).transpose(1, 2)

    q, k, v = split(mha.W_q(x_t)), split(mha.W_k(x_t)), split(mha.W_v(x_t))
    cache["k"] = k if cache["k"] is None else torch.cat([cache["k"], k], dim=2)
    cache["v"] = v if cache["v"] is None else torch.cat([cache["v"], v], dim=2)
    out = F.scaled_dot_product_attention(q, cache["k"], cache["v"])
    return mha.W_o(out.transpose(1, 2).reshape(B, 1, D))


def step_own_list(mha, x_t, cache):  # keeps its own list of steps: a prompt already in the cache is lost
    B, _, D = x_t.shape
    H = mha.num_heads

    def split(x):
        return x.view(B, 1, H, D // H).transpose(1, 2)

    q, k, v = split(mha.W_q(x_t)), split(mha.W_k(x_t)), split(mha.W_v(x_t))
    cache.setdefault("steps", []).append((k, v))
    cache["k"] = torch.cat([k for k, _ in cache["steps"]], dim=2)
    cache["v"] = torch.cat([v for _, v in cache["steps"]], dim=2)
    weights = torch.softmax(q @ cache["k"].transpose(-2, -1) / math.sqrt(D // H), dim=-1)
    return mha.W_o((weights @ cache["v"]).transpose(1, 2).reshape(B, 1, D))


def test_a_kv_cache_step_from_a_prefilled_cache() -> None:
    clinic.check_kv_cache_step(step)
    bug = failure(clinic.check_kv_cache_step, step_own_list)
    assert bug.bug == "kv-cache-prefill-ignored"
    assert "already in the cache" in str(bug)


# ---------------------------------------------------------------------------------------------------------------------
# The class token, padding on either side


def cls_first_real(hidden, attention_mask):
    return hidden[torch.arange(hidden.shape[0]), attention_mask.long().argmax(1)]


def cls_loop(hidden, attention_mask):
    return torch.stack([h[m.bool()][0] for h, m in zip(hidden, attention_mask, strict=True)])


def test_cls_pooling_with_a_mask_passes_other_styles_and_the_plain_check_is_unchanged() -> None:
    for fn in (cls_first_real, cls_loop):
        clinic.check_cls_pooling(fn)
    result = clinic.check_cls_pooling(lambda hidden: hidden[:, 0])
    assert result.edge_cases == 3  # chapter 10's check, as before


@pytest.mark.parametrize("fn, code", [
    (lambda h, m: h[:, 0], "cls-assumes-right-padding"),
    (lambda h, m: h[torch.arange(h.shape[0]), (m == 0).long().argmax(1)], "cls-first-padding"),
    (lambda h, m: au.mean_pool(h, m), "cls-mean"),
    (lambda h, m: h[torch.arange(h.shape[0]), h.shape[1] - 1 - m.flip(1).long().argmax(1)], "cls-last-token"),
])
def test_cls_pooling_with_a_mask_names_its_bugs(fn, code) -> None:
    assert failure(clinic.check_cls_pooling, fn).bug == code


# ---------------------------------------------------------------------------------------------------------------------
# Speed


@pytest.mark.parametrize("check, correct, wrong", [
    (clinic.check_alibi_bias, au.alibi_bias, bias_from(query_first=True)),
    (clinic.check_rope_offset, rope_complex, rope_with(lambda offset, T: torch.arange(2 * offset, 2 * offset + T))),
    (clinic.check_cls_pooling, cls_loop, lambda h, m: h[:, 0]),
    (clinic.check_kv_cache_step, step, step_own_list),
])
def test_the_new_checks_are_fast(check, correct, wrong) -> None:
    # CPU time of this thread (the checks run on one thread), which a busy machine does not inflate
    check(correct)  # the first call pays for imports and caches
    start = time.thread_time()
    check(correct)
    assert time.thread_time() - start < 0.5
    start = time.thread_time()
    with pytest.raises(clinic.AttentionBug):
        check(wrong)
    assert time.thread_time() - start < 5.0


# ---------------------------------------------------------------------------------------------------------------------
# What no named bug explains: the invariants of the new checks


def test_the_invariants_of_the_alibi_bias() -> None:
    bug = failure(clinic.check_alibi_bias, lambda s, T_q, T_k: au.alibi_bias(s, T_q, T_k) - 0.1)
    assert bug.bug == "alibi-bias-not-zero-at-own-key" and "its bias on its own key is" in str(bug)

    def positive_after(slopes, T_q, T_k):  # right up to the query, positive and twice as steep after it
        i = torch.arange(T_k - T_q, T_k)[:, None]
        j = torch.arange(T_k)[None, :]
        distance = torch.where(j <= i, -(i - j), 2 * (j - i)).to(slopes.dtype)
        return slopes[:, None, None] * distance

    bug = failure(clinic.check_alibi_bias, positive_after)
    assert bug.bug == "alibi-bias-positive" and "ALiBi only subtracts" in str(bug)
    clinic.check_alibi_bias(positive_after, causal=True)  # a causal softmax never sees those keys


def test_rope_rows_spaced_wrongly_at_an_offset() -> None:
    spaced = rope_with(lambda offset, T: offset + torch.arange(T) * (2 if offset else 1))
    bug = failure(clinic.check_rope_offset, spaced)
    assert bug.bug == "rope-offset-inconsistent", str(bug)
    assert "the rows are turned as positions" in str(bug)
