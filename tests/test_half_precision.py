"""float16 and bfloat16: every path that computes attention scores agrees with the fused kernel.

:func:`torch.nn.functional.scaled_dot_product_attention` computes the scores, the softmax and the weighted sum with
float32 accumulators and rounds only its output. The explicit paths must do as well, on inputs whose scores are large:

* in float16, ``q · k`` past 65,504 overflows to inf (and the softmax gives NaN), even when ``q · k / √D`` fits;
* in bfloat16 (8 bits of mantissa), a score of a few hundred is rounded by a whole unit, which changes the weights.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import attn_utils as au

HALF = [torch.float16, torch.bfloat16]


def ulp(dtype: torch.dtype, size: float = 1.0) -> float:
    """The rounding step of ``dtype`` at ``size``: how far one rounding of the output may move it."""
    return torch.finfo(dtype).eps * size


def large_scores(D: int = 64, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(2, 2, 4, D) queries and (2, 2, 6, D) keys whose products reach about 120,000 (past float16's 65,504, and
    still about 15,000 after the 1/√D scaling of D = 64), and values of size 1."""
    g = torch.Generator().manual_seed(seed)
    q = 3000.0 * torch.randn(2, 2, 4, 1, generator=g).sign() * torch.ones(D)  # every feature ±3000
    k = torch.randn(2, 2, 6, D, generator=g).clamp(-2, 2) + torch.tensor([5.0, 4.0, -4.5, 5.0, 0.0, 1.0])[:, None]
    v = torch.randn(2, 2, 6, 3, generator=g)
    return q, k, v


def moderate_scores(seed: int = 0, scale: float = 5.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random (2, 3, 5, 16) queries and (2, 3, 7, 16) keys with scores of a few hundred: softmax weights that are
    neither uniform nor one-hot, so that every rounding of a score shows."""
    g = torch.Generator().manual_seed(seed)
    q, k = (scale * torch.randn(2, 3, T, 16, generator=g) for T in (5, 7))
    return q, k, torch.randn(2, 3, 7, 4, generator=g)


MASKS = {
    "none": {},
    "valid_lens": {"valid_lens": torch.tensor([4, 2])},
    "causal mask": {"attn_mask": au.causal_mask(4, 6)},
}


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("mask", list(MASKS), ids=list(MASKS))
def test_explicit_path_with_large_scores_equals_the_fused_kernel(dtype: torch.dtype, mask: str) -> None:
    q, k, v = (t.to(dtype) for t in large_scores())
    options = MASKS[mask]
    explicit, weights = au.dot_product_attention(q, k, v, **options)
    fused, _ = au.dot_product_attention(q, k, v, need_weights=False, **options)
    torch_mask = au.attention_mask((2, 2, 4, 6), options.get("valid_lens"), options.get("attn_mask"))
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=torch_mask)  # torch's own, in the same dtype
    reference64, weights64 = au.dot_product_attention(q.double(), k.double(), v.double(), **options)
    assert explicit.dtype == weights.dtype == dtype
    assert torch.isfinite(explicit).all() and torch.isfinite(weights).all()
    tolerance = {"rtol": 0, "atol": ulp(dtype, float(v.abs().max()))}
    assert_close(explicit.double(), reference.double(), **tolerance)
    assert_close(fused.double(), reference.double(), **tolerance)
    assert_close(explicit.double(), reference64, **tolerance)
    assert_close(weights.double(), weights64, rtol=0, atol=ulp(dtype))


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("seed", range(4))
def test_explicit_path_with_moderate_scores_rounds_once_like_the_fused_kernel(dtype: torch.dtype, seed: int) -> None:
    # Rounding the scores to bfloat16 before the softmax (as a computation in bfloat16 does) moved the output by
    # several of its own rounding steps here; the fused kernel, and now the explicit path, round only the output.
    q, k, v = (t.to(dtype) for t in moderate_scores(seed))
    explicit, weights = au.dot_product_attention(q, k, v, valid_lens=torch.tensor([7, 5]))
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=au.sequence_mask(torch.tensor([7, 5]), 7)[:, None,
                                                                                                               None])
    reference64, weights64 = au.dot_product_attention(q.double(), k.double(), v.double(),
                                                      valid_lens=torch.tensor([7, 5]))
    size = float(v.abs().max())
    assert_close(explicit.double(), reference.double(), rtol=0, atol=ulp(dtype, size))
    assert (explicit.double() - reference64).abs().max() <= (reference.double() - reference64).abs().max() + ulp(
        dtype, size
    )
    assert_close(weights.double(), weights64, rtol=0, atol=ulp(dtype))


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_half_precision_gradients_are_finite_and_close_to_float64(dtype: torch.dtype) -> None:
    q, k, v = moderate_scores(scale=2.0)
    leaves = [t.to(dtype).requires_grad_() for t in (q, k, v)]
    out, weights = au.dot_product_attention(*leaves, valid_lens=torch.tensor([7, 4]))
    grad_out = torch.randn_like(out, dtype=torch.float32).to(dtype)
    grads = torch.autograd.grad((out * grad_out).sum(), leaves)
    leaves64 = [t.detach().double().requires_grad_() for t in leaves]
    out64, _ = au.dot_product_attention(*leaves64, valid_lens=torch.tensor([7, 4]))
    grads64 = torch.autograd.grad((out64 * grad_out.double()).sum(), leaves64)
    for mine, ref in zip(grads, grads64, strict=True):
        assert mine.dtype == dtype and torch.isfinite(mine).all()
        assert_close(mine.double(), ref, rtol=0, atol=8 * ulp(dtype, float(ref.abs().max())))


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_grouped_query_attention_in_half_precision_equals_the_fused_kernel(dtype: torch.dtype) -> None:
    q, k, v = (t.to(dtype) for t in large_scores())
    k, v = k[:, :1], v[:, :1]  # one key/value head for both query heads
    explicit, _ = au.dot_product_attention(q, k, v, enable_gqa=True)
    fused, _ = au.dot_product_attention(q, k, v, need_weights=False, enable_gqa=True)
    reference = F.scaled_dot_product_attention(q, k.expand(-1, 2, -1, -1), v.expand(-1, 2, -1, -1))
    assert torch.isfinite(explicit).all()
    for out in (explicit, fused):
        assert_close(out.double(), reference.double(), rtol=0, atol=ulp(dtype, float(v.abs().max())))


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("options", [{}, {"alibi": True}, {"num_kv_heads": 1}], ids=["plain", "alibi", "mqa"])
def test_multihead_attention_with_large_activations_both_paths_in_half_precision(
    dtype: torch.dtype, options: dict[str, object]
) -> None:
    mha = au.MultiHeadAttention(64, 2, bias=False, **options).eval()  # type: ignore[arg-type]
    with torch.no_grad():
        for lin in (mha.W_q, mha.W_k, mha.W_v, mha.W_o):
            lin.weight.copy_(torch.eye(64)[: lin.weight.shape[0]])
    q, k, _ = large_scores()
    queries = q[0].transpose(0, 1).reshape(4, 2 * 64)[None, :, :64].contiguous()  # (1, 4, 64), entries ±3000
    keys = k[0, 0][None]  # (1, 6, 64): per-head products q · k reach about 100,000
    with torch.no_grad():
        reference, _ = mha.double()(queries.double(), keys.double(), keys.double())
        half = mha.to(dtype)
        outs = [half(queries.to(dtype), keys.to(dtype), keys.to(dtype), need_weights=w)[0] for w in (True, False)]
    for out in outs:
        assert out.dtype == dtype and torch.isfinite(out).all()
    assert_close(outs[0].double(), outs[1].double(), rtol=0, atol=ulp(dtype, float(reference.abs().max())))
    assert_close(outs[0].double(), reference, rtol=2 * ulp(dtype), atol=2 * ulp(dtype))


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_additive_attention_with_large_scores_in_half_precision(dtype: torch.dtype) -> None:
    attention = au.AdditiveAttention(4, 4, 256).eval()
    with torch.no_grad():
        attention.W_q.weight.zero_()
        attention.W_k.weight.fill_(5.0)  # every feature is tanh(5 Σ_j k_j): about +1 or -1
        attention.w_v.weight.fill_(300.0)  # so the scores are about ±256 × 300 = ±76,800, past float16's 65,504
    q = torch.randn(2, 3, 4)
    k = torch.tensor([[1.0, 1.0, 1.0, 1.0], [-1.0, -1.0, -1.0, -1.0], [0.5, 0.5, 0.5, 0.5], [0.0, 0.0, 0.0, 0.1],
                      [1.0, 1.0, 1.0, 1.0]])[None].expand(2, 5, 4)
    v = torch.randn(2, 5, 2)
    lens = torch.tensor([5, 2])
    with torch.no_grad():
        reference, ref_weights = attention.double()(q.double(), k.double(), v.double(), lens)
        out, weights = attention.to(dtype)(q.to(dtype), k.to(dtype), v.to(dtype), lens)
    assert out.dtype == weights.dtype == dtype
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    assert_close(weights.double(), ref_weights, rtol=0, atol=1e-3)  # keys 0, 2 and 4 share the weight
    assert_close(out.double(), reference, rtol=0, atol=4 * ulp(dtype, float(v.abs().max())))


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("kernel", au.KERNELS)
def test_nadaraya_watson_far_from_the_keys_in_half_precision(dtype: torch.dtype, kernel: str) -> None:
    # (x - x_i)² overflows float16 past 256: for the first query every Gaussian score is then -inf (a softmax of NaN),
    # and the compact kernels' 1 - u² is -inf, times 0 outside the window: NaN. (The compact kernels need a key
    # within σ of every query, so the first query is far only from most keys.)
    x = torch.tensor([1000.0, 1.5]) if kernel == "gaussian" else torch.tensor([400.0, 1.5])
    x_i, y_i = torch.tensor([1.0, 2.0, 3.0, 399.5]), torch.tensor([1.0, 2.0, 3.0, 4.0])
    sigma = 1.0
    reference, ref_weights = au.nadaraya_watson(x.double(), x_i.double(), y_i.double(), sigma, kernel=kernel)
    out, weights = au.nadaraya_watson(x.to(dtype), x_i.to(dtype), y_i.to(dtype), sigma, kernel=kernel)
    assert out.dtype == weights.dtype == dtype and torch.isfinite(out).all()
    # x and x_i are rounded to dtype first (399.5 is exact in float16, 399 in bfloat16's steps of 2)
    exact, exact_weights = au.nadaraya_watson(*(t.to(dtype).double() for t in (x, x_i, y_i)), kernel=kernel)
    assert_close(out.double(), exact, rtol=0, atol=ulp(dtype, 4.0))
    assert_close(weights.double(), exact_weights, rtol=0, atol=ulp(dtype))
    if dtype == torch.float16:
        assert_close(out.double(), reference, rtol=0, atol=ulp(dtype, 4.0))


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_parametric_nadaraya_watson_far_from_the_keys_in_half_precision(dtype: torch.dtype) -> None:
    model = au.NWKernelRegression(1.0)
    x = torch.tensor([400.0, 1.5])
    x_i = torch.tensor([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    y_i = torch.tensor([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    reference, _ = model.double()(x.double(), x_i.double(), y_i.double())
    out, weights = model.to(dtype)(x.to(dtype), x_i.to(dtype), y_i.to(dtype))
    assert out.dtype == weights.dtype == dtype and torch.isfinite(out).all()
    assert_close(out.double(), reference, rtol=0, atol=ulp(dtype, 3.0))
    out.sum().backward()
    assert torch.isfinite(model.w.grad).all()


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_masked_softmax_in_half_precision_rounds_the_float32_result_once(dtype: torch.dtype) -> None:
    scores = (200 * torch.randn(2, 3, 9)).to(dtype)  # a spread far beyond what exp can take in float16
    lens = torch.tensor([9, 4])
    weights = au.masked_softmax(scores, lens)
    assert weights.dtype == dtype and torch.isfinite(weights).all()
    assert torch.equal(weights, au.masked_softmax(scores.float(), lens).to(dtype))
