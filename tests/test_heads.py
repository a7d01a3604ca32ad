"""A head's circuits (attn_utils.heads.head_circuits) and the scores read from them: composition and copying."""

from __future__ import annotations

import math

import pytest
import torch

import attn_utils as au


def _no_bias_attention(d_model: int = 8, num_heads: int = 2, seed: int = 0) -> au.MultiHeadAttention:
    torch.manual_seed(seed)
    return au.MultiHeadAttention(d_model, num_heads, bias=False)


def test_head_circuits_give_the_scores_and_the_outputs_of_the_layer() -> None:
    attention = _no_bias_attention()
    H = attention.num_heads
    X = torch.randn(3, 5, 8)  # (B, T, D)
    W_QK, W_OV = au.head_circuits(attention)
    assert W_QK.shape == W_OV.shape == (H, 8, 8)
    out, weights = attention(X, X, X)  # (B, T, D), (B, H, T, T)
    # the scores: x_q^T W_QK x_k, whose softmax is the layer's attention
    scores = torch.einsum("bqd,hde,bke->bhqk", X, W_QK, X)
    assert torch.allclose(scores.softmax(-1), weights, atol=1e-5)
    # the output: the sum over heads of the weights times W_OV x
    written = torch.einsum("bhqk,hde,bke->bqd", weights, W_OV, X)
    assert torch.allclose(written, out, atol=1e-5)


def test_head_circuits_are_detached_and_reject_other_modules() -> None:
    W_QK, W_OV = au.head_circuits(_no_bias_attention())
    assert not W_QK.requires_grad and not W_OV.requires_grad
    with pytest.raises(TypeError, match="attention: expected a MultiHeadAttention"):
        au.head_circuits(torch.nn.Linear(4, 4))  # type: ignore[arg-type]
    grouped = au.MultiHeadAttention(8, 2, num_kv_heads=1)
    with pytest.raises(ValueError, match="attention: expected W_q, W_k, W_v and W_o of shape"):
        au.head_circuits(grouped)


def test_composition_score_known_values_and_scale() -> None:
    e = torch.zeros(4, 4)
    e[0, 0] = 1.0
    assert au.composition_score(e, e).item() == pytest.approx(1.0)
    assert au.composition_score(e, e.roll(1, dims=0)).item() == pytest.approx(0.0)
    # the identity reads all of a rank-one writer: ||w|| / (2 ||w||) for a 4 x 4 identity
    assert au.composition_score(torch.eye(4), e).item() == pytest.approx(0.5)
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(6, 5, generator=g), torch.randn(5, 7, generator=g)
    s = au.composition_score(a, b)
    assert 0 <= s.item() <= 1
    assert au.composition_score(3 * a, -0.5 * b).item() == pytest.approx(s.item(), rel=1e-5)


def test_composition_score_batches_and_random_baseline() -> None:
    g = torch.Generator().manual_seed(1)
    d = 64
    a, b = torch.randn(500, d, d, generator=g), torch.randn(500, d, d, generator=g)
    s = au.composition_score(a, b)
    assert s.shape == (500,)
    # two independent Gaussian matrices: about 1 / sqrt(d)
    assert s.mean().item() == pytest.approx(1 / math.sqrt(d), rel=0.05)
    pair = au.composition_score(a[:3, None], b[None, :2])  # (3, 2) by broadcasting
    assert pair.shape == (3, 2)
    assert pair[2, 1].item() == pytest.approx(au.composition_score(a[2], b[1]).item())


def test_composition_score_errors() -> None:
    with pytest.raises(ValueError, match="writer: expected 4 rows"):
        au.composition_score(torch.ones(3, 4), torch.ones(5, 2))
    with pytest.raises(ValueError, match="reader: expected a matrix"):
        au.composition_score(torch.ones(4), torch.ones(4, 2))
    with pytest.raises(TypeError, match="writer: expected a floating-point tensor"):
        au.composition_score(torch.ones(3, 4), torch.ones(4, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="expected nonzero matrices"):
        au.composition_score(torch.zeros(3, 4), torch.ones(4, 2))


def test_copying_score_known_values() -> None:
    assert au.copying_score(torch.eye(5)).item() == pytest.approx(1.0)
    assert au.copying_score(-torch.eye(5)).item() == pytest.approx(-1.0)
    assert au.copying_score(torch.diag(torch.tensor([3.0, -1.0]))).item() == pytest.approx(0.5)
    rotation = torch.tensor([[0.0, -1.0], [1.0, 0.0]])  # eigenvalues ±i: no copying
    assert au.copying_score(rotation).item() == pytest.approx(0.0, abs=1e-6)
    # a similarity transform keeps the eigenvalues, hence the score
    g = torch.Generator().manual_seed(2)
    P = torch.randn(5, 5, generator=g) + 5 * torch.eye(5)
    D = torch.diag(torch.tensor([2.0, 1.0, 0.5, -0.5, 1.0]))
    assert au.copying_score(P @ D @ torch.linalg.inv(P)).item() == pytest.approx(4 / 5, abs=1e-4)


def test_copying_score_random_matrices_average_near_zero() -> None:
    g = torch.Generator().manual_seed(3)
    s = au.copying_score(torch.randn(200, 32, 32, generator=g))
    assert s.shape == (200,) and s.dtype == torch.float32
    assert abs(s.mean().item()) < 0.03 and s.abs().max().item() < 0.5


def test_copying_score_errors() -> None:
    with pytest.raises(ValueError, match="matrix: expected square matrices"):
        au.copying_score(torch.ones(3, 4))
    with pytest.raises(TypeError, match="matrix: expected a floating-point tensor"):
        au.copying_score(torch.ones(3, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="matrix: expected a matrix with a nonzero eigenvalue"):
        au.copying_score(torch.zeros(3, 3))
