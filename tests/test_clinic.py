"""The clinic names each bug of its list on a wrong implementation written for it, and passes correct ones, written
in other styles."""

from __future__ import annotations

import math

import pytest
import torch

import attn_utils as au
from attn_utils import clinic


def softmax_with(fill: float, zero_empty: bool = True, axis: int = -1, invert: bool = False, ignore: bool = False):
    def fn(scores, valid_lens):
        if valid_lens is None or ignore:
            return torch.softmax(scores, dim=axis)
        T_k = scores.shape[-1]
        lens = valid_lens[:, None, None] if valid_lens.dim() == 1 else valid_lens[..., None]
        mask = torch.arange(T_k) < lens  # (B, 1 or T_q, T_k)
        if invert:
            mask = ~mask
        weights = torch.softmax(scores.masked_fill(~mask, fill), dim=axis)
        return weights.masked_fill(~mask.any(-1, keepdim=True), 0.0) if zero_empty else weights

    return fn


SOFTMAX_BUGS = {
    "softmax-wrong-axis": softmax_with(-1e9, axis=-2),
    "inverted-mask": softmax_with(-1e9, invert=True),
    "mask-fill-zero": softmax_with(0.0, zero_empty=False),
    "empty-row-uniform": softmax_with(-1e6, zero_empty=False),
    "empty-row-nan": softmax_with(-math.inf, zero_empty=False),
    "valid-lens-ignored": softmax_with(-1e9, ignore=True),
}


@pytest.mark.parametrize("code", sorted(SOFTMAX_BUGS))
def test_each_masked_softmax_bug_is_named(code: str) -> None:
    with pytest.raises(clinic.AttentionBug) as info:
        clinic.check_masked_softmax(SOFTMAX_BUGS[code])
    assert info.value.bug == code
    assert f"[bug: {code}]" in str(info.value) and "fix:" in str(info.value)
    assert isinstance(info.value, AssertionError) and info.value.example


def attention_with(scale: str = "sqrt", softmax=None):
    softmax = softmax or softmax_with(-1e9)

    def fn(queries, keys, values, valid_lens=None):
        d = queries.shape[-1]
        divisor = {"sqrt": math.sqrt(d), "none": 1.0, "d": d}[scale]
        return softmax(queries @ keys.transpose(1, 2) / divisor, valid_lens) @ values

    return fn


ATTENTION_BUGS = {
    "missing-scale": attention_with("none"),
    "scale-by-d": attention_with("d"),
    **{code: attention_with(softmax=fn) for code, fn in SOFTMAX_BUGS.items()},
}


@pytest.mark.parametrize("code", sorted(ATTENTION_BUGS))
def test_each_attention_bug_is_named(code: str) -> None:
    with pytest.raises(clinic.AttentionBug) as info:
        clinic.check_dot_product_attention(ATTENTION_BUGS[code])
    assert info.value.bug == code


CAUSAL_BUGS = {
    "causal-leak": lambda T_q, T_k: torch.ones(T_q, T_k, dtype=torch.bool),
    "causal-no-diagonal": lambda T_q, T_k: torch.ones(T_q, T_k, dtype=torch.bool).tril(T_k - T_q - 1),
    "causal-top-left": lambda T_q, T_k: torch.ones(T_q, T_k, dtype=torch.bool).tril(),
}


@pytest.mark.parametrize("code", sorted(CAUSAL_BUGS))
def test_each_causal_mask_bug_is_named(code: str) -> None:
    with pytest.raises(clinic.AttentionBug) as info:
        clinic.check_causal_mask(CAUSAL_BUGS[code])
    assert info.value.bug == code


def encoding(swap: bool = False, exponent: str = "2j/d"):
    def fn(max_len, d_model):
        pos = torch.arange(max_len)[:, None].double()
        j = torch.arange(d_model // 2).double()
        power = 2 * j / d_model if exponent == "2j/d" else j / d_model
        angles = pos / 10000**power
        P = torch.empty(max_len, d_model)
        P[:, 0::2], P[:, 1::2] = (angles.cos(), angles.sin()) if swap else (angles.sin(), angles.cos())
        return P

    return fn


def test_positional_encoding_bugs_are_named() -> None:
    for code, fn in (("pe-sin-cos-swapped", encoding(swap=True)), ("pe-wrong-exponent", encoding(exponent="j/d"))):
        with pytest.raises(clinic.AttentionBug) as info:
            clinic.check_positional_encoding(fn)
        assert info.value.bug == code
    clinic.check_positional_encoding(encoding())


def test_nadaraya_watson_sign_is_named() -> None:
    def wrong(queries, keys, values, sigma):
        return torch.softmax((queries[:, None] - keys) ** 2 / (2 * sigma**2), dim=1) @ values

    with pytest.raises(clinic.AttentionBug) as info:
        clinic.check_nadaraya_watson(wrong)
    assert info.value.bug == "nw-wrong-sign"
    clinic.check_nadaraya_watson(lambda q, k, v, sigma: au.nadaraya_watson(q, k, v, sigma=sigma)[0])


def test_the_package_and_other_correct_styles_pass() -> None:
    clinic.check_masked_softmax(au.masked_softmax)
    clinic.check_masked_softmax(lambda s, lens: softmax_with(-1e30)(s.double(), lens).double())  # float64, -1e30
    clinic.check_dot_product_attention(au.dot_product_attention)  # returns (output, weights)

    def with_einsum(queries, keys, values, valid_lens=None):
        scores = torch.einsum("bqd,bkd->bqk", queries, keys) / queries.shape[-1] ** 0.5
        return torch.einsum("bqk,bkv->bqv", au.masked_softmax(scores, valid_lens), values)

    clinic.check_dot_product_attention(with_einsum)
    clinic.check_causal_mask(lambda T_q, T_k: au.causal_mask(T_q, T_k))
    clinic.check_causal_mask(lambda T_q, T_k: torch.ones(T_q, T_k).tril(T_k - T_q).bool())
    clinic.check_positional_encoding(au.sinusoidal_encoding)


def test_an_unexplained_difference_is_unknown_and_shows_the_smallest_input() -> None:
    with pytest.raises(clinic.AttentionBug) as info:
        clinic.check_masked_softmax(lambda s, lens: au.masked_softmax(s, lens) * 2)
    assert info.value.bug == "unknown"
    assert "scores =" in str(info.value) and "expected:" in str(info.value)


def test_a_crash_is_reported_as_a_bug_not_raised() -> None:
    def crashes(scores, valid_lens):
        raise RuntimeError("oops")

    with pytest.raises(clinic.AttentionBug, match="RuntimeError: oops"):
        clinic.check_masked_softmax(crashes)


def test_a_non_function_is_refused() -> None:
    with pytest.raises(TypeError, match="fn: expected the function to check, got int"):
        clinic.check_causal_mask(3)
