"""sequence_mask, causal_mask, attention_mask and masked_softmax."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import attn_utils as au


def reference_masked_softmax(scores: torch.Tensor, valid_lens: torch.Tensor) -> torch.Tensor:
    """Loop-by-loop reference: softmax over the first ``n`` keys of each row, zeros elsewhere (and for n = 0)."""
    B, T_q, T_k = scores.shape
    out = torch.zeros_like(scores)
    for b in range(B):
        for i in range(T_q):
            n = int(valid_lens[b] if valid_lens.dim() == 1 else valid_lens[b, i])
            if n > 0:
                out[b, i, :n] = torch.softmax(scores[b, i, :n], dim=0)
    return out


# ---------------------------------------------------------------------------------------------------------- masks


def test_sequence_mask_values_and_shape() -> None:
    lens = torch.tensor([[0, 2], [4, 1], [3, 3]])  # any shape S: here (3, 2)
    mask = au.sequence_mask(lens, 4)
    assert mask.shape == (3, 2, 4) and mask.dtype == torch.bool
    for idx in [(a, b) for a in range(3) for b in range(2)]:
        expected = [j < int(lens[idx]) for j in range(4)]
        assert mask[idx].tolist() == expected


def test_sequence_mask_max_len_zero_and_full() -> None:
    assert au.sequence_mask(torch.tensor([0, 0]), 0).shape == (2, 0)
    assert au.sequence_mask(torch.tensor([5]), 5).all()


def test_causal_mask_square_is_lower_triangle() -> None:
    assert torch.equal(au.causal_mask(5), torch.tril(torch.ones(5, 5, dtype=torch.bool)))


@pytest.mark.parametrize(("T_q", "T_k"), [(1, 1), (1, 6), (3, 7), (4, 4)])
def test_causal_mask_with_more_keys_than_queries(T_q: int, T_k: int) -> None:
    mask = au.causal_mask(T_q, T_k)
    assert mask.shape == (T_q, T_k)
    for i in range(T_q):
        for j in range(T_k):
            assert bool(mask[i, j]) == (j <= i + T_k - T_q)
    # The queries are the last T_q positions of a length-T_k sequence: the last rows of the square mask.
    assert torch.equal(mask, au.causal_mask(T_k)[T_k - T_q :])


def test_attention_mask_is_none_without_masks() -> None:
    assert au.attention_mask((2, 3, 4)) is None


def test_attention_mask_combines_valid_lens_and_attn_mask() -> None:
    lens = torch.tensor([2, 4])
    causal = au.causal_mask(3, 4)
    mask = au.attention_mask((2, 3, 4), lens, causal)
    expected = au.sequence_mask(lens, 4)[:, None, :] & causal
    assert torch.equal(mask.expand(2, 3, 4), expected)


def test_attention_mask_inserts_head_axes() -> None:
    lens = torch.tensor([[1, 2, 3], [3, 0, 2]])  # (B, T_q)
    mask = au.attention_mask((2, 5, 3, 4), lens)  # scores (B, H, T_q, T_k)
    assert mask.shape == (2, 1, 3, 4)
    assert torch.equal(mask[:, 0], au.sequence_mask(lens, 4))


# ------------------------------------------------------------------------------------------------ masked_softmax


def test_masked_softmax_without_mask_is_softmax() -> None:
    scores = torch.randn(2, 3, 5)
    assert_close(au.masked_softmax(scores), torch.softmax(scores, dim=-1), rtol=0, atol=0)


@pytest.mark.parametrize(
    "valid_lens",
    [torch.tensor([2, 5, 1]), torch.tensor([[1, 2, 3, 4], [5, 5, 1, 2], [3, 1, 4, 2]])],
    ids=["1d", "2d"],
)
def test_masked_softmax_matches_reference(valid_lens: torch.Tensor) -> None:
    scores = torch.randn(3, 4, 5) * 3
    weights = au.masked_softmax(scores, valid_lens)
    assert weights.shape == scores.shape
    assert_close(weights, reference_masked_softmax(scores, valid_lens), rtol=1e-6, atol=1e-7)
    mask = au.sequence_mask(valid_lens, 5)
    if valid_lens.dim() == 1:
        mask = mask[:, None, :].expand(3, 4, 5)
    assert (weights[~mask] == 0).all()  # exactly 0, not merely tiny
    assert_close(weights.sum(-1), torch.ones(3, 4), rtol=0, atol=1e-6)


def test_masked_softmax_four_axes_with_heads() -> None:
    scores = torch.randn(2, 3, 4, 6)  # (B, H, T_q, T_k)
    lens_1d, lens_2d = torch.tensor([4, 2]), torch.tensor([[1, 6, 3, 2], [2, 2, 5, 4]])
    for lens in (lens_1d, lens_2d):
        weights = au.masked_softmax(scores, lens)
        for h in range(3):
            assert_close(weights[:, h], reference_masked_softmax(scores[:, h], lens), rtol=1e-6, atol=1e-7)


def test_masked_softmax_with_causal_attn_mask() -> None:
    scores = torch.randn(2, 4, 4)
    weights = au.masked_softmax(scores, attn_mask=au.causal_mask(4))
    assert (weights.triu(diagonal=1) == 0).all()
    ref = reference_masked_softmax(scores, torch.arange(1, 5).expand(2, 4))  # row i sees keys 0..i
    assert_close(weights, ref, rtol=1e-6, atol=1e-7)


def test_masked_softmax_ignores_values_of_masked_scores() -> None:
    scores = torch.randn(2, 3, 5)
    changed = scores.clone()
    changed[:, :, 3:] = 1e4  # huge scores behind the mask
    lens = torch.tensor([3, 2])
    assert_close(au.masked_softmax(changed, lens), au.masked_softmax(scores, lens), rtol=0, atol=0)


def test_fully_masked_rows_are_zero_never_nan_or_uniform() -> None:
    scores = torch.randn(3, 2, 4)
    weights = au.masked_softmax(scores, torch.tensor([0, 4, 2]))
    assert torch.isfinite(weights).all()
    assert (weights[0] == 0).all()  # d2l's -1e6 fill gives 0.25 everywhere here
    assert_close(weights[1:].sum(-1), torch.ones(2, 2), rtol=0, atol=1e-6)
    per_query = au.masked_softmax(scores, torch.tensor([[0, 1], [4, 0], [2, 2]]))
    assert (per_query[0, 0] == 0).all() and (per_query[1, 1] == 0).all()
    assert_close(per_query[0, 1].sum(), torch.tensor(1.0))
    all_false = au.masked_softmax(scores, attn_mask=torch.zeros(2, 4, dtype=torch.bool))
    assert (all_false == 0).all()


def test_fully_masked_row_with_extreme_scores() -> None:
    scores = torch.tensor([[[3e38, -3e38, float(torch.finfo(torch.float32).min)]]])
    weights = au.masked_softmax(scores, torch.tensor([0]))
    assert (weights == 0).all()


def test_gradients_stay_finite_through_fully_masked_rows() -> None:
    scores = torch.randn(2, 3, 4, requires_grad=True)
    weights = au.masked_softmax(scores, torch.tensor([[0, 2, 4], [0, 0, 1]]))
    (weights * torch.randn(2, 3, 4)).sum().backward()
    assert torch.isfinite(scores.grad).all()
    assert (scores.grad[0, 0] == 0).all() and (scores.grad[1, :2] == 0).all()  # nothing flows into masked rows
    assert (scores.grad[0, 1, 2:] == 0).all()  # nor into masked keys
    assert scores.grad[0, 2].abs().sum() > 0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_is_finite_and_close_to_float32(dtype: torch.dtype) -> None:
    scores = (torch.randn(3, 4, 6) * 4).to(dtype)
    lens = torch.tensor([[6, 3, 0, 1], [2, 2, 2, 2], [0, 0, 5, 6]])
    reference = au.masked_softmax(scores.float(), lens)  # float32 on the same rounded scores
    weights = au.masked_softmax(scores, lens)
    assert weights.dtype == dtype
    assert torch.isfinite(weights).all()
    assert_close(weights.float(), reference, rtol=0, atol=torch.finfo(dtype).eps)
    assert (weights.float()[reference == 0] == 0).all()  # masked entries and empty rows stay exactly 0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_with_scores_near_the_dtype_limits(dtype: torch.dtype) -> None:
    big = torch.finfo(dtype).max / 2
    scores = torch.tensor([[[big, -big, 0.0], [-big, -big, -big]]], dtype=dtype)
    weights = au.masked_softmax(scores, torch.tensor([[2, 0]]))
    assert torch.isfinite(weights).all()
    assert weights[0, 0].float().tolist() == [1.0, 0.0, 0.0]
    assert (weights[0, 1] == 0).all()
