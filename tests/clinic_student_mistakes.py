"""Mistakes a student makes in the clinic exercises of chapters 3, 5, 8 and 12, each written as a student would write
the function, with the one mistake.

``MISTAKES`` holds rows ``(name, check, codes, says, fn)``: the clinic check the chapter runs (``fn`` is a function, or
a tuple of arguments for checks that take several), the bug codes whose fix is the fix of this mistake (the first is
the mistake itself; the others name the same fix in other words, or a consequence that leads to it), and a regular
expression that the message must match: the mistake's real symptom, in the words the clinic uses for it. A row helps
when the clinic's message matches ``says`` and names one of ``codes``, first or on the hint.

``EXERCISES`` names the checks a chapter uses as a find-the-bug exercise: there the mistakes are also tried in
exercise mode, where the first message must give the symptom and keep the bug for the hint.

``python tests/clinic_student_mistakes.py`` prints each row's outcome: helped, partly (the right code with a symptom
that the message does not state, or the symptom with a code that is not the mistake), not (``unknown``, or the check
passed), or wrong (a code that does not lead to the fix).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

import attn_utils as au


def _valid(scores, valid_lens):
    """True on the keys each query may see (valid_lens of shape (B,) or (B, T_q))."""
    lens = valid_lens[:, None, None] if valid_lens.dim() == 1 else valid_lens[..., None]
    return torch.arange(scores.shape[-1]) < lens


# --------------------------------------------------------------------------------------------------------------------
# Chapter 3: the masked softmax


def softmax_mask_off_by_one(scores, valid_lens):
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    lens = valid_lens[:, None, None] if valid_lens.dim() == 1 else valid_lens[..., None]
    mask = torch.arange(scores.shape[-1]) <= lens  # one key too many
    weights = torch.softmax(scores.masked_fill(~mask, torch.finfo(scores.dtype).min), dim=-1)
    return weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)


def softmax_mask_after(scores, valid_lens):
    weights = torch.softmax(scores, dim=-1)
    if valid_lens is None:
        return weights
    return weights * _valid(scores, valid_lens)  # masked, but never renormalised


def softmax_over_queries(scores, valid_lens):
    if valid_lens is None:
        return torch.softmax(scores, dim=1)
    mask = _valid(scores, valid_lens)
    weights = torch.softmax(scores.masked_fill(~mask, torch.finfo(scores.dtype).min), dim=1)
    return weights.masked_fill(~mask, 0.0)


def softmax_fill_minus_inf(scores, valid_lens):
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    return torch.softmax(scores.masked_fill(~_valid(scores, valid_lens), float("-inf")), dim=-1)


def softmax_fill_3_4e38(scores, valid_lens):
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    mask = _valid(scores, valid_lens)
    return torch.softmax(scores.masked_fill(~mask, -3.4e38), dim=-1).masked_fill(~mask, 0.0)


def softmax_fill_zero(scores, valid_lens):
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    mask = _valid(scores, valid_lens)
    return torch.softmax(scores * mask, dim=-1).masked_fill(~mask.any(-1, keepdim=True), 0.0)


def softmax_lengths_1d_only(scores, valid_lens):
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    mask = torch.arange(scores.shape[-1]) < valid_lens[:, None, None]  # (B,) lengths only
    mask = mask.reshape(scores.shape[0], -1, scores.shape[-1])[:, : scores.shape[1]]
    weights = torch.softmax(scores.masked_fill(~mask, torch.finfo(scores.dtype).min), dim=-1)
    return weights.masked_fill(~mask, 0.0)


def softmax_mask_inverted(scores, valid_lens):
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    lens = valid_lens[:, None, None] if valid_lens.dim() == 1 else valid_lens[..., None]
    mask = torch.arange(scores.shape[-1]) >= lens  # the padding kept, the valid keys masked
    weights = torch.softmax(scores.masked_fill(~mask, torch.finfo(scores.dtype).min), dim=-1)
    return weights.masked_fill(~mask, 0.0)


def softmax_edits_its_input(scores, valid_lens):
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    mask = _valid(scores, valid_lens)
    scores.masked_fill_(~mask, torch.finfo(scores.dtype).min)  # in place: the caller's scores are changed
    return torch.softmax(scores, dim=-1).masked_fill(~mask, 0.0)


def softmax_lengths_on_the_query_axis(scores, valid_lens):
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    lens = valid_lens[:, None] if valid_lens.dim() == 1 else valid_lens[..., None]
    mask = torch.arange(scores.shape[-1]) < lens  # (B, T_k) for (B,) lengths: broadcast as (T_q, T_k)
    weights = torch.softmax(scores.masked_fill(~mask, torch.finfo(scores.dtype).min), dim=-1)
    return weights.masked_fill(~mask, 0.0)


# --------------------------------------------------------------------------------------------------------------------
# Chapter 3: scaled dot-product and additive attention


def _dot(divide):
    def attention(queries, keys, values, valid_lens=None):
        scores = queries @ keys.transpose(1, 2) / divide(queries, values)
        return au.masked_softmax(scores, valid_lens) @ values

    return attention


dot_scale_by_d = _dot(lambda q, v: q.shape[-1])
dot_no_scale = _dot(lambda q, v: 1.0)
dot_scale_by_d_v = _dot(lambda q, v: math.sqrt(v.shape[-1]))
dot_times_sqrt_d = _dot(lambda q, v: 1 / math.sqrt(q.shape[-1]))


def dot_keys_dot_T(queries, keys, values, valid_lens=None):
    scores = queries @ keys.mT.transpose(0, 2) / math.sqrt(queries.shape[-1])  # .T of a 3-d tensor, written out
    return au.masked_softmax(scores, valid_lens) @ values


def dot_lengths_ignored(queries, keys, values, valid_lens=None):
    return torch.softmax(queries @ keys.transpose(1, 2) / math.sqrt(queries.shape[-1]), dim=-1) @ values


class AdditiveNoTanh(nn.Module):
    def __init__(self, query_size, key_size, num_hiddens):
        super().__init__()
        self.W_q = nn.Linear(query_size, num_hiddens, bias=False)
        self.W_k = nn.Linear(key_size, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)

    def forward(self, queries, keys, values, valid_lens=None):
        features = self.W_q(queries)[:, :, None] + self.W_k(keys)[:, None]  # (B, T_q, T_k, h); tanh forgotten
        scores = self.w_v(features).squeeze(-1)
        return au.masked_softmax(scores, valid_lens) @ values


# --------------------------------------------------------------------------------------------------------------------
# Chapter 5: splitting into heads, and multi-head attention


def split_no_transpose(X, H):
    B, T, D = X.shape
    return X.reshape(B, H, T, D // H)  # the features cut into heads without moving the head axis


def merge_no_transpose(Y, H):
    B, _, T, D_h = Y.shape
    return Y.reshape(B, T, H * D_h)


def split_head_last(X, H):
    B, T, D = X.shape
    return X.reshape(B, T, D // H, H).permute(0, 3, 1, 2)  # (D_h, H) instead of (H, D_h)


def merge_head_last(Y, H):
    B, _, T, D_h = Y.shape
    return Y.permute(0, 2, 3, 1).reshape(B, T, H * D_h)


def split_heads_first(X, H):  # chapter 5's transpose_qkv with the heads before the batch
    B, T, D = X.shape
    return X.reshape(B, T, H, D // H).permute(2, 0, 1, 3).reshape(H * B, T, D // H)


def merge_heads_first(Y, H):
    _, T, D_h = Y.shape
    return Y.reshape(H, -1, T, D_h).permute(1, 2, 0, 3).reshape(-1, T, H * D_h)


def _mha(scale="head", repeat="interleave", output=True, merge="transpose", softmax_dim=-1):
    class MyMultiHeadAttention(nn.Module):
        def __init__(self, d_model, num_heads):
            super().__init__()
            self.num_heads = num_heads
            self.W_q, self.W_k = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
            self.W_v, self.W_o = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

        def forward(self, queries, keys, values, valid_lens=None):
            B, T_q, D = queries.shape
            H = self.num_heads

            def split(x):
                return x.reshape(B, x.shape[1], H, D // H).transpose(1, 2)  # (B, H, T, D_h)

            q, k, v = split(self.W_q(queries)), split(self.W_k(keys)), split(self.W_v(values))
            width = D // H if scale == "head" else D
            scores = q @ k.transpose(-2, -1) / math.sqrt(width)  # (B, H, T_q, T_k)
            if valid_lens is not None:
                if repeat == "interleave":
                    lens = valid_lens.repeat_interleave(H, 0)
                else:  # as d2l's transpose_qkv layout needs, but here the heads come after the batch
                    lens = valid_lens.repeat(H) if valid_lens.dim() == 1 else valid_lens.repeat(H, 1)
                lens = lens.reshape(B, H, *valid_lens.shape[1:])
                lens = lens[..., None, None] if valid_lens.dim() == 1 else lens[..., None]
                mask = torch.arange(k.shape[2]) < lens
                scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
                weights = torch.softmax(scores, dim=softmax_dim).masked_fill(~mask.any(-1, keepdim=True), 0.0)
            else:
                weights = torch.softmax(scores, dim=softmax_dim)
            heads = weights @ v  # (B, H, T_q, D_h)
            merged = heads.transpose(1, 2).reshape(B, T_q, D) if merge == "transpose" else heads.reshape(B, T_q, D)
            return self.W_o(merged) if output else merged

    return MyMultiHeadAttention


# --------------------------------------------------------------------------------------------------------------------
# Chapter 8: attention over blocks of keys, and a step with a KV cache


def _blocks(rescale="both", subtract_max=True, start=-math.inf, last_block=True, scale=True):
    def attention_over_key_blocks(q, k, v, block_size):
        T_q, D = q.shape
        m = torch.full((T_q, 1), start)
        ell, o = torch.zeros(T_q, 1), torch.zeros(T_q, v.shape[1])
        stop = k.shape[0] if last_block else k.shape[0] - block_size + 1
        for j in range(0, stop, block_size):
            s = q @ k[j : j + block_size].T / (math.sqrt(D) if scale else 1.0)
            m_new = torch.maximum(m, s.amax(1, keepdim=True)) if subtract_max else torch.zeros_like(m)
            p = torch.exp(s - m_new)
            factor = torch.exp(m - m_new) if rescale != "inverted" else torch.exp(m_new - m)
            ell = ell * (factor if rescale != "none" else 1.0) + p.sum(1, keepdim=True)
            o = o * (factor if rescale != "none" else 1.0) + p @ v[j : j + block_size]
            m = m_new
        return o / ell

    return attention_over_key_blocks


def _step(update="append", causal=False, cat_dim=2, divide="head"):
    def step_with_my_cache(mha, x_t, cache):
        B, _, D = x_t.shape
        H = mha.num_heads

        def split(x):
            return x.view(B, 1, H, D // H).transpose(1, 2)  # (B, H, 1, D_h)

        q, k, v = split(mha.W_q(x_t)), split(mha.W_k(x_t)), split(mha.W_v(x_t))
        if update == "replace":
            cache["k"], cache["v"] = k, v
            keys, values = k, v
        elif update == "before":  # attends to what was cached, then appends
            keys = k if cache["k"] is None else cache["k"]
            values = v if cache["v"] is None else cache["v"]
            cache["k"] = k if cache["k"] is None else torch.cat([cache["k"], k], dim=2)
            cache["v"] = v if cache["v"] is None else torch.cat([cache["v"], v], dim=2)
        else:
            cache["k"] = k if cache["k"] is None else torch.cat([cache["k"], k], dim=cat_dim)
            cache["v"] = v if cache["v"] is None else torch.cat([cache["v"], v], dim=cat_dim)
            keys, values = cache["k"], cache["v"]
        if causal:
            out = F.scaled_dot_product_attention(q, keys, values, is_causal=True)
        else:
            width = D // H if divide == "head" else D
            weights = torch.softmax(q @ keys.transpose(-2, -1) / math.sqrt(width), dim=-1)
            out = weights @ values
        return mha.W_o(out.transpose(1, 2).reshape(B, 1, D))

    return step_with_my_cache


# --------------------------------------------------------------------------------------------------------------------
# Chapter 12: RoPE, ALiBi's slopes, grouped-query attention


def _angles(x, exponent=2.0, first=0):
    T, D = x.shape[-2], x.shape[-1]
    theta = 10000.0 ** (-exponent * torch.arange(D // 2, dtype=torch.float64) / D)
    return (torch.arange(first, first + T, dtype=torch.float64)[:, None] * theta).to(x.dtype)  # (T, D/2)


def _rope(exponent=2.0, first=0, sign=1.0, swap=False, layout="pairs"):
    def my_rope(x):
        angles = _angles(x, exponent, first)
        cos, sin = angles.cos(), sign * angles.sin()
        if swap:
            cos, sin = sin, cos
        if layout == "halves":  # rotate_half: features j and j + D/2 turned together
            half = x.shape[-1] // 2
            a, b = x[..., :half], x[..., half:]
        else:
            a, b = x[..., 0::2], x[..., 1::2]
        first_, second = a * cos - b * sin, a * sin + b * cos
        if layout in ("halves", "concatenated"):
            return torch.cat((first_, second), dim=-1)
        return torch.stack((first_, second), dim=-1).flatten(-2)

    return my_rope


def alibi_slopes_from_zero(num_heads):
    return torch.tensor([2.0 ** (-8.0 * i / num_heads) for i in range(num_heads)])


def alibi_slopes_any_h(num_heads):
    return torch.tensor([2.0 ** (-8.0 * (i + 1) / num_heads) for i in range(num_heads)])


def _gqa(expand="interleave", divide="d", softmax_dim=-1, one_head=False):
    def gqa_attend(q, k, v):
        H, G = q.shape[1], k.shape[1]
        if one_head:
            k, v = k[:, :1], v[:, :1]
            G = 1
        if expand == "interleave":
            k, v = k.repeat_interleave(H // G, dim=1), v.repeat_interleave(H // G, dim=1)
        else:
            k, v = k.repeat(1, H // G, 1, 1), v.repeat(1, H // G, 1, 1)
        width = q.shape[-1] if divide == "d" else v.shape[-1]
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(width), dim=softmax_dim) @ v

    return gqa_attend


# --------------------------------------------------------------------------------------------------------------------
# The table

_ROWS = "sums to|do not sum to 1"
MISTAKES = [
    # chapter 3: the masked softmax
    ("mask one key too long (<= valid_len)", "check_masked_softmax", ("mask-off-by-one",),
     r"one key more|gives weight to keys", softmax_mask_off_by_one),
    ("mask after the softmax", "check_masked_softmax", ("rows-not-normalised",), r"do not sum to 1",
     softmax_mask_after),
    ("softmax over the query axis", "check_masked_softmax", ("softmax-wrong-axis",), r"axis|queries",
     softmax_over_queries),
    ("fill of -inf: an empty row is NaN", "check_masked_softmax", ("empty-row-nan", "non-finite-output"),
     r"NaN|not finite", softmax_fill_minus_inf),
    ("fill of -3.4e38 in float16", "check_masked_softmax", ("function-raised", "mask-fill-too-small"),
     r"float16", softmax_fill_3_4e38),
    ("masked scores set to 0, not to a very negative number", "check_masked_softmax", ("mask-fill-zero",),
     r"padding|masked|invalid", softmax_fill_zero),
    ("lengths read as (B,) only", "check_masked_softmax", ("function-raised", "valid-lens-repeat"),
     r"raised|valid_lens", softmax_lengths_1d_only),
    ("mask inverted (>= valid_len)", "check_masked_softmax", ("inverted-mask",), r"padding|valid",
     softmax_mask_inverted),
    ("fill in place: the caller's scores are changed", "check_masked_softmax", ("input-modified",),
     r"changes its input", softmax_edits_its_input),
    ("(B,) lengths broadcast along the queries", "check_masked_softmax", ("batch-mixing", "valid-lens-repeat",
                                                                          "mask-wrong-keys", "function-raised"),
     r"sequence|valid length|keys|raised", softmax_lengths_on_the_query_axis),
    # chapter 3: attention
    ("scores divided by d, not √d", "check_dot_product_attention", ("scale-by-d", "scale-wrong"), r"√d|d =",
     dot_scale_by_d),
    ("scores never scaled", "check_dot_product_attention", ("missing-scale", "scale-wrong"), r"scale|√d",
     dot_no_scale),
    ("scores divided by √d_v, the values' width", "check_dot_product_attention", ("scale-wrong",), r"values|D_v",
     dot_scale_by_d_v),
    ("scores multiplied by √d", "check_dot_product_attention", ("scale-inverted", "scale-wrong"), r"√d|sharper",
     dot_times_sqrt_d),
    ("keys transposed on the wrong axes (.T of a 3-d tensor)", "check_dot_product_attention", ("function-raised",),
     r"raised", dot_keys_dot_T),
    ("valid_lens ignored", "check_dot_product_attention", ("valid-lens-ignored", "weights-on-masked-keys"),
     r"padding|valid|masked", dot_lengths_ignored),
    ("additive attention without the tanh", "check_additive_attention", ("additive-missing-tanh",), r"tanh",
     AdditiveNoTanh),
    # chapter 5: heads
    ("split without moving the head axis", "check_split_heads", ("heads-no-transpose",), r"head",
     (split_no_transpose, merge_no_transpose, 2)),
    ("split as (D_h, H) instead of (H, D_h)", "check_split_heads", ("heads-interleaved",), r"head|feature",
     (split_head_last, merge_head_last, 2)),
    ("(B·H) rows ordered head first", "check_split_heads", ("heads-batch-order", "batch-mixing"),
     r"head|sequence|batch", (split_heads_first, merge_heads_first, 2)),
    ("each head scaled by √d_model", "check_multihead_attention", ("scale-by-d-model",), r"d_model|d_head",
     _mha(scale="model")),
    ("lengths repeated with repeat, not repeat_interleave", "check_multihead_attention",
     ("valid-lens-repeat", "batch-mixing"), r"length|sequence", _mha(repeat="tile")),
    ("no output projection W_o", "check_multihead_attention", ("missing-output-projection",), r"W_o|output",
     _mha(output=False)),
    ("heads merged without the transpose", "check_multihead_attention", ("heads-no-transpose",), r"head",
     _mha(merge="reshape")),
    # chapter 8: online softmax
    ("running values never rescaled", "check_online_softmax", ("online-no-rescale",), r"maximum|rescal",
     _blocks(rescale="none")),
    ("rescaled by exp(m_new - m_old)", "check_online_softmax", ("online-rescale-inverted",), r"maximum|NaN|inf",
     _blocks(rescale="inverted")),
    ("no running maximum subtracted", "check_online_softmax", ("online-overflow",), r"overflow|NaN|inf",
     _blocks(subtract_max=False)),
    ("running maximum starts at 0", "check_online_softmax", ("online-wrong-combination",),
     r"starts at|block|exact", _blocks(start=0.0)),
    ("last, shorter block dropped", "check_online_softmax", ("online-partial-block-dropped",), r"block|last",
     _blocks(last_block=False)),
    # chapter 8: KV cache
    ("cache replaced, not appended", "check_kv_cache_step", ("kv-cache-not-appended",), r"cache|newest|position",
     _step(update="replace")),
    ("attends to the cache before adding its own key", "check_kv_cache_step", ("kv-cache-misses-new-token",),
     r"own|new|cache", _step(update="before")),
    ("is_causal=True with one query and a cache", "check_kv_cache_step", ("kv-cache-top-left-mask",),
     r"first key|top-left|causal|is_causal", _step(causal=True)),
    ("cache grown along the head axis", "check_kv_cache_step", ("function-raised", "wrong-shape"),
     r"raised|shape", _step(cat_dim=1)),
    ("cached step scaled by √D", "check_kv_cache_step", ("scale-by-d-model", "scale-wrong"), r"√|d_model|D",
     _step(divide="model")),
    # chapter 12
    ("RoPE with rotate_half pairs", "check_rope", ("rope-wrong-pairing",), r"pair|half", _rope(layout="halves")),
    ("RoPE frequencies with -j/D instead of -2j/D", "check_rope", ("rope-wrong-frequency",), r"frequenc|θ",
     _rope(exponent=1.0)),
    ("RoPE positions from 1", "check_rope", ("rope-positions-shifted",), r"position", _rope(first=1)),
    ("RoPE's right pairs written back as two halves", "check_rope", ("rope-not-rotation", "rope-wrong-pairing"),
     r"position 0|pair", _rope(layout="concatenated")),
    ("ALiBi slopes from i = 0", "check_alibi_slopes", ("alibi-slopes-off-by-one",), r"slope|1", alibi_slopes_from_zero),
    ("ALiBi's geometric slopes for every H", "check_alibi_slopes", ("alibi-slopes-not-power-of-two",),
     r"power of two|H =", alibi_slopes_any_h),
    ("GQA with repeat, not repeat_interleave", "check_grouped_query_attention", ("gqa-heads-tiled", "gqa-wrong-group"),
     r"head|group", _gqa(expand="repeat")),
    ("GQA scaled by the values' width", "check_grouped_query_attention", ("scale-wrong",), r"values|D_v",
     _gqa(divide="v")),
    ("GQA softmax over the queries", "check_grouped_query_attention", ("softmax-wrong-axis", "rows-not-normalised"),
     r"axis|queries|sum", _gqa(softmax_dim=-2)),
]

EXERCISES = {"check_masked_softmax", "check_multihead_attention", "check_online_softmax", "check_rope"}
"""The checks of chapters 3, 5, 8 and 12 that the chapters use as a find-the-bug exercise."""


def run(check, args, exercise=False):
    """("bug", the AttentionBug) or (the outcome, None): run one row's check, quietly."""
    import contextlib
    import io

    from attn_utils import clinic

    args = args if isinstance(args, tuple) else (args,)
    clinic.exercise_mode(exercise)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            getattr(clinic, check)(*args)
    except clinic.AttentionBug as err:
        return "bug", err
    finally:
        clinic.exercise_mode(False)
    return "passed", None


def grade(codes, says, result):
    """One of "helped", "partly", "not" or "wrong", and the codes named."""
    import re

    kind, err = result
    if kind != "bug":
        return "not", []
    named = list(err.bugs)
    right = bool(set(named) & set(codes))
    stated = re.search(says, str(err)) is not None
    if right and stated:
        return "helped", named
    if named == ["unknown"]:
        return "not", named
    if right or stated and not set(named) - {"unknown"}:
        return "partly", named
    return "wrong", named


if __name__ == "__main__":
    counts: dict[str, int] = {}
    for name, check, codes, says, fn in MISTAKES:
        outcome, named = grade(codes, says, run(check, fn))
        counts[outcome] = counts.get(outcome, 0) + 1
        print(f"{outcome:7s} {check:32s} {name}: {named}")
    print(len(MISTAKES), "mistakes:", counts)
