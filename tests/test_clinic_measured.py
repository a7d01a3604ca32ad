"""The clinic's package: hints one step away, diagnosis by measured properties, composites, and the new checks.

Each wrong implementation below is written as a student would, with one mistake (two for the composites), and the
clinic must name it with exactly the code given; correct implementations in other styles must pass.
"""

from __future__ import annotations

import math
import time

import pytest
import torch

import attn_utils as au
from attn_utils import clinic


def named(check, fn) -> clinic.AttentionBug:
    with pytest.raises(clinic.AttentionBug) as info:
        check(fn)
    return info.value


def lens_mask(scores, valid_lens, op=torch.lt):
    T_k = scores.shape[-1]
    lens = valid_lens[:, None, None] if valid_lens.dim() == 1 else valid_lens[..., None]
    return op(torch.arange(T_k), lens)  # (B, 1 or T_q, T_k)


def softmax_masked_by(mask_fn, fill=-1e9, zero_empty=True):
    def fn(scores, valid_lens):
        if valid_lens is None:
            return torch.softmax(scores, dim=-1)
        mask = mask_fn(scores, valid_lens)
        weights = torch.softmax(scores.masked_fill(~mask, fill), dim=-1)
        return weights.masked_fill(~mask.any(-1, keepdim=True), 0.0) if zero_empty else weights

    return fn


# ---------------------------------------------------------------------------------------------------------------------
# Hints


def test_the_message_has_the_symptom_and_the_hint_has_the_fix() -> None:
    bug = named(clinic.check_causal_mask, lambda T_q, T_k: torch.ones(T_q, T_k, dtype=torch.bool).tril())
    assert bug.bug == "causal-top-left" and bug.bugs == ("causal-top-left",)
    text = str(bug)
    assert text.splitlines()[0].endswith("[bug: causal-top-left]")
    assert "smallest input" in text and "expected:" in text and "got:" in text and "fix:" not in text
    assert bug.hint() == "fix: " + clinic.BUGS["causal-top-left"][1] == clinic.hint()


# ---------------------------------------------------------------------------------------------------------------------
# Masks: recovered from the weights, whatever the fill


@pytest.mark.parametrize("code, fn", [
    ("mask-off-by-one", softmax_masked_by(lambda s, lens: lens_mask(s, lens, torch.le))),
    ("mask-fill-too-small", softmax_masked_by(lens_mask, fill=-3.0)),
    ("inverted-mask", softmax_masked_by(lambda s, lens: ~lens_mask(s, lens), fill=-1e4)),
    ("batch-mixing", softmax_masked_by(lambda s, lens: lens_mask(s, lens.flip(0)))),  # another sequence's lengths
    ("mask-wrong-keys", softmax_masked_by(  # key 0 masked for every query with two or more valid keys
        lambda s, lens: lens_mask(s, lens) & ((torch.arange(s.shape[-1]) > 0)
                                              | (lens_mask(s, lens).sum(-1, True) < 2)))),
])
def test_masks_are_read_from_the_weights(code: str, fn) -> None:
    assert named(clinic.check_masked_softmax, fn).bug == code


def test_an_additive_mask_of_zero_is_named_however_it_is_written() -> None:
    def additive(scores, valid_lens):  # a float mask added to the scores, 0 everywhere: the mask does nothing
        if valid_lens is None:
            return scores.softmax(-1)
        bias = torch.zeros_like(scores).masked_fill(~lens_mask(scores, valid_lens), 0.0)
        return (scores + bias).softmax(-1)

    assert named(clinic.check_masked_softmax, additive).bug in ("valid-lens-ignored", "mask-fill-zero")


# ---------------------------------------------------------------------------------------------------------------------
# Scale: recovered as a number


def attention_scaled(factor):
    def fn(queries, keys, values, valid_lens=None):
        scores = queries @ keys.transpose(1, 2) * factor(queries.shape[-1])
        return au.masked_softmax(scores, valid_lens) @ values

    return fn


@pytest.mark.parametrize("code, factor", [
    ("scale-inverted", lambda d: math.sqrt(d)),
    ("scale-wrong", lambda d: 1 / 8),  # a head width of 64 hard-coded
    ("scale-wrong", lambda d: 1 / math.sqrt(2 * d)),
    ("missing-scale", lambda d: 1.0),
])
def test_the_scale_is_measured(code: str, factor) -> None:
    bug = named(clinic.check_dot_product_attention, attention_scaled(factor))
    assert bug.bug == code
    if code == "scale-wrong":
        assert "measured: for d = " in str(bug) and "the scores are multiplied by" in str(bug)


def test_two_mistakes_together_are_both_named() -> None:
    def fn(queries, keys, values, valid_lens=None):  # no scale, and the -1e6 fill of empty rows
        scores = queries @ keys.transpose(1, 2)
        return softmax_masked_by(lens_mask, fill=-1e6, zero_empty=False)(scores, valid_lens) @ values

    bug = named(clinic.check_dot_product_attention, fn)
    assert set(bug.bugs) == {"missing-scale", "empty-row-uniform"}
    assert "two mistakes together" in str(bug).splitlines()[0]


# ---------------------------------------------------------------------------------------------------------------------
# Causal masks in every form


@pytest.mark.parametrize("code, fn", [
    ("causal-reversed", lambda T_q, T_k: torch.ones(T_q, T_k, dtype=torch.bool).triu(T_k - T_q)),
    ("mask-inverted-convention", lambda T_q, T_k: torch.ones(T_q, T_k, dtype=torch.bool).triu(T_k - T_q + 1)),
    ("mask-additive", lambda T_q, T_k: torch.full((T_q, T_k), float("-inf")).triu(T_k - T_q + 1)),
    ("mask-not-bool", lambda T_q, T_k: torch.ones(T_q, T_k).tril(T_k - T_q)),
])
def test_causal_masks_are_read_in_any_form(code: str, fn) -> None:
    assert named(clinic.check_causal_mask, fn).bug == code


def test_a_mask_in_another_form_with_a_mistake_names_both() -> None:
    bug = named(clinic.check_causal_mask, lambda T_q, T_k: torch.full((T_q, T_k), float("-inf")).triu(1))
    assert bug.bugs == ("mask-additive", "causal-top-left")


# ---------------------------------------------------------------------------------------------------------------------
# Positions: frequency, phase and pairing recovered


def test_positional_encoding_measures() -> None:
    def halves(max_len, d_model):
        angles = torch.arange(max_len)[:, None] / 10000 ** (torch.arange(0, d_model, 2) / d_model)
        return torch.cat((angles.sin(), angles.cos()), dim=1)

    def base_1000(max_len, d_model):
        angles = torch.arange(max_len)[:, None] / 1000 ** (torch.arange(0, d_model, 2) / d_model)
        return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(1)

    assert named(clinic.check_positional_encoding, halves).bug == "pe-halves-layout"
    bug = named(clinic.check_positional_encoding, base_1000)
    assert bug.bug == "pe-wrong-exponent" and "measured:" in str(bug)


def rope_with(start=0, base=10000.0, halves=False):
    def fn(x):
        T, D = x.shape[-2], x.shape[-1]
        theta = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
        angles = torch.arange(start, start + T, dtype=torch.float64)[:, None] * theta
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        if halves:
            a, b = x[..., : D // 2], x[..., D // 2 :]
            return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)

    return fn


def test_rope_measures() -> None:
    assert named(clinic.check_rope, rope_with(start=1)).bug == "rope-positions-shifted"
    bug = named(clinic.check_rope, rope_with(base=500.0))
    assert bug.bug == "rope-wrong-frequency" and "base 500" in str(bug)
    bug = named(clinic.check_rope, rope_with(halves=True))
    assert bug.bug == "rope-wrong-pairing" and "GPT-NeoX" in str(bug)
    bug = named(clinic.check_rope, rope_with(halves=True, base=500.0))
    assert set(bug.bugs) == {"rope-wrong-pairing", "rope-wrong-frequency"}
    clinic.check_rope(rope_with())


# ---------------------------------------------------------------------------------------------------------------------
# New checks


def test_alibi_slopes() -> None:
    def geometric(H, start=1, exponent=8.0):
        return torch.tensor([2.0 ** (-exponent * (i + start) / H) for i in range(H)])

    clinic.check_alibi_slopes(au.alibi_slopes)
    assert named(clinic.check_alibi_slopes, lambda H: geometric(H, start=0)).bug == "alibi-slopes-off-by-one"
    assert named(clinic.check_alibi_slopes, geometric).bug == "alibi-slopes-not-power-of-two"
    assert named(clinic.check_alibi_slopes, lambda H: au.alibi_slopes(H).flip(0)).bug == "alibi-slopes-reversed"
    assert named(clinic.check_alibi_slopes, lambda H: geometric(H, exponent=4.0)).bug == "alibi-slopes-wrong-ratio"


def gqa(share):
    def fn(q, k, v):
        H, G = q.shape[1], k.shape[1]
        index = share(H, G)
        k, v = k[:, index], v[:, index]
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v

    return fn


def test_grouped_query_attention() -> None:
    clinic.check_grouped_query_attention(gqa(lambda H, G: torch.arange(H) // (H // G)))
    clinic.check_grouped_query_attention(
        lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True))
    assert named(clinic.check_grouped_query_attention, gqa(lambda H, G: torch.arange(H) % G)).bug == "gqa-heads-tiled"
    assert named(clinic.check_grouped_query_attention,
                 gqa(lambda H, G: torch.zeros(H, dtype=torch.long))).bug == "gqa-one-kv-head"
    bug = named(clinic.check_grouped_query_attention, gqa(lambda H, G: (torch.arange(H) // G).clamp(max=G - 1)))
    assert bug.bug == "gqa-wrong-group" and "measured:" in str(bug)


def test_pooling_checks() -> None:
    def last(hidden, mask):
        idx = mask.shape[1] - 1 - mask.flip(1).long().argmax(1)
        return hidden[torch.arange(hidden.shape[0]), idx]

    clinic.check_last_token_pooling(last)
    rows = torch.arange
    assert named(clinic.check_last_token_pooling, lambda h, m: h[:, -1]).bug == "last-token-padding"
    assert named(clinic.check_last_token_pooling,
                 lambda h, m: h[rows(h.shape[0]), m.sum(1) - 1]).bug == "last-token-assumes-right-padding"
    assert named(clinic.check_last_token_pooling,
                 lambda h, m: h[rows(h.shape[0]), m.sum(1).clamp(max=h.shape[1] - 1)]).bug == "last-token-off-by-one"
    assert named(clinic.check_last_token_pooling,
                 lambda h, m: h[rows(h.shape[0]), m.long().argmax(1)]).bug == "last-token-wrong-position"
    clinic.check_cls_pooling(lambda h: h[:, 0, :])
    assert named(clinic.check_cls_pooling, lambda h: h[:, -1]).bug == "cls-last-token"
    assert named(clinic.check_cls_pooling, lambda h: h.mean(1)).bug == "cls-mean"
    assert named(clinic.check_cls_pooling, lambda h: h[0]).bug == "cls-wrong-axis"
    assert named(clinic.check_cls_pooling, lambda h: h[:, :2].mean(1)).bug == "pooling-wrong-positions"
    bug = named(clinic.check_mean_pooling, lambda h, m: (h * m[..., None])[:, 1:].sum(1) / m[:, 1:].sum(1, True)
                .clamp(min=1))
    assert bug.bug == "pooling-wrong-positions"


def kv_step(update="append", mask=False):
    def fn(mha, x_t, cache):
        B, _, D = x_t.shape
        H = mha.num_heads

        def split(x):
            return x.view(B, -1, H, D // H).transpose(1, 2)

        q, k, v = split(mha.W_q(x_t)), split(mha.W_k(x_t)), split(mha.W_v(x_t))
        if update == "stale" and cache["k"] is not None:  # attends before appending
            keys, vals = cache["k"], cache["v"]
            cache["k"], cache["v"] = torch.cat([keys, k], dim=2), torch.cat([vals, v], dim=2)
            out = torch.nn.functional.scaled_dot_product_attention(q, keys, vals)
            return mha.W_o(out.transpose(1, 2).reshape(B, 1, D))
        if update in ("append", "stale"):
            cache["k"] = k if cache["k"] is None else torch.cat([cache["k"], k], dim=2)
            cache["v"] = v if cache["v"] is None else torch.cat([cache["v"], v], dim=2)
        else:
            cache["k"], cache["v"] = k, v
        out = torch.nn.functional.scaled_dot_product_attention(q, cache["k"], cache["v"], is_causal=mask)
        return mha.W_o(out.transpose(1, 2).reshape(B, 1, D))

    return fn


def test_kv_cache_step() -> None:
    clinic.check_kv_cache_step(kv_step())
    assert named(clinic.check_kv_cache_step, kv_step(update="replace")).bug == "kv-cache-not-appended"
    assert named(clinic.check_kv_cache_step, kv_step(mask=True)).bug == "kv-cache-top-left-mask"
    assert named(clinic.check_kv_cache_step, kv_step(update="stale")).bug == "kv-cache-misses-new-token"
    state = torch.get_rng_state()
    clinic.check_kv_cache_step(kv_step())
    assert torch.equal(state, torch.get_rng_state())  # the clinic's weights leave the caller's random state alone


def test_sampling_and_online_measures() -> None:
    def squared_temperature(logits, temperature=1.0, top_k=None, top_p=None):
        return au.sampling_probs(logits, temperature=temperature**2, top_k=top_k, top_p=top_p)

    def top_k_plus_two(logits, temperature=1.0, top_k=None, top_p=None):
        k = None if top_k is None else min(top_k + 2, logits.shape[-1])
        return au.sampling_probs(logits, temperature=temperature, top_k=k, top_p=top_p)

    bug = named(clinic.check_sampling, squared_temperature)
    assert bug.bug == "temperature-wrong" and "multiplied by" in str(bug)
    assert named(clinic.check_sampling, top_k_plus_two).bug == "kept-set-wrong"

    def mean_of_blocks(q, k, v, block_size):  # each block's attention, averaged: the blocks are not combined
        outs = [torch.softmax(q @ k[i : i + block_size].T / math.sqrt(q.shape[1]), dim=1) @ v[i : i + block_size]
                for i in range(0, k.shape[0], block_size)]
        return torch.stack(outs).mean(0)

    assert named(clinic.check_online_softmax, mean_of_blocks).bug == "online-wrong-combination"


def test_patch_measures() -> None:
    def patches(order):
        def fn(images, P):
            B, C, S, _ = images.shape
            n = S // P
            return images.reshape(B, C, n, P, n, P).permute(*order).reshape(B, n * n, C * P * P)

        return fn

    assert named(clinic.check_patchify, patches((0, 2, 4, 5, 1, 3))).bug == "patch-pixels-order"
    assert named(clinic.check_patchify, lambda x, P: au.patchify(x, P).reshape(x.shape[0], -1, P, P * x.shape[1])
                 ).bug == "patch-shape"

    def wrong_reshape(images, P):
        B, C, S, _ = images.shape
        n = S // P
        return images.reshape(B, C, P, n, P, n).permute(0, 3, 5, 1, 2, 4).reshape(B, n * n, C * P * P)

    assert named(clinic.check_patchify, wrong_reshape).bug == "patches-wrong-pixels"


def test_nadaraya_watson_width() -> None:
    def width(queries, keys, values, sigma):
        return torch.softmax(-((queries[:, None] - keys) ** 2) / sigma**2, dim=1) @ values

    assert named(clinic.check_nadaraya_watson, width).bug == "nw-wrong-width"


def test_a_passing_check_is_fast_and_a_diagnosis_too() -> None:
    start = time.perf_counter()
    clinic.check_multihead_attention(au.MultiHeadAttention)
    passing = time.perf_counter() - start
    start = time.perf_counter()
    named(clinic.check_dot_product_attention, attention_scaled(lambda d: 1 / 8))
    diagnosis = time.perf_counter() - start
    assert passing < 5 and diagnosis < 20  # generous: the machine may be loaded (the report gives idle times)
