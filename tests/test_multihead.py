"""MultiHeadAttention: shapes, both paths, masking, low precision, gradients, the KV cache, and agreement with
torch.nn.MultiheadAttention."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.testing import assert_close

import attn_utils as au

F32 = {"rtol": 1e-5, "atol": 1e-6}


def make_pair(d_model: int = 8, num_heads: int = 2, **kwargs: object) -> tuple[nn.MultiheadAttention,
                                                                                au.MultiHeadAttention]:
    reference = nn.MultiheadAttention(d_model, num_heads, batch_first=True, **kwargs).eval()
    if kwargs.get("bias", True):  # torch initialises biases to 0: make them random so that copying them matters
        with torch.no_grad():
            reference.in_proj_bias.normal_()
            reference.out_proj.bias.normal_()
    mine = au.MultiHeadAttention(d_model, num_heads, bias=kwargs.get("bias", True), kdim=kwargs.get("kdim"),
                                 vdim=kwargs.get("vdim")).eval()
    return reference, mine.load_from_torch(reference)


def test_shapes_and_need_weights() -> None:
    mha = au.MultiHeadAttention(d_model=12, num_heads=3, kdim=5, vdim=7)
    q, k, v = torch.randn(2, 4, 12), torch.randn(2, 6, 5), torch.randn(2, 6, 7)
    out, weights = mha(q, k, v)
    assert out.shape == (2, 4, 12) and weights.shape == (2, 3, 4, 6)
    out_fused, none = mha(q, k, v, need_weights=False)
    assert none is None and out_fused.shape == (2, 4, 12)


@pytest.mark.parametrize("valid_lens", [None, torch.tensor([6, 2]), torch.tensor([[1, 2, 3, 4], [6, 5, 4, 3]])],
                         ids=["none", "1d", "2d"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_explicit_and_fused_paths_agree(valid_lens: torch.Tensor | None, causal: bool) -> None:
    mha = au.MultiHeadAttention(8, 2).eval()
    q, kv = torch.randn(2, 4, 8), torch.randn(2, 6, 8)
    mask = au.causal_mask(4, 6) if causal else None
    explicit, weights = mha(q, kv, kv, valid_lens, attn_mask=mask)
    fused, _ = mha(q, kv, kv, valid_lens, attn_mask=mask, need_weights=False)
    assert_close(fused, explicit, **F32)
    assert_close(weights.sum(-1), torch.ones(2, 2, 4), **F32)


CASES = {
    "defaults": {},
    "no bias": {"bias": False},
    "kdim/vdim": {"kdim": 5, "vdim": 3},
    "kdim/vdim, no bias": {"kdim": 5, "vdim": 3, "bias": False},
}


@pytest.mark.parametrize("kwargs", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("valid_lens", [None, torch.tensor([6, 3, 1])], ids=["no padding", "valid_lens"])
def test_agrees_with_torch_multihead_attention(kwargs: dict, valid_lens: torch.Tensor | None) -> None:
    reference, mine = make_pair(8, 2, **kwargs)
    q = torch.randn(3, 4, 8)
    k = torch.randn(3, 6, kwargs.get("kdim", 8))
    v = torch.randn(3, 6, kwargs.get("vdim", 8))
    # torch's key_padding_mask says True = ignore; ours says True = may attend: the opposite.
    padding = None if valid_lens is None else ~au.sequence_mask(valid_lens, 6)
    ref_out, ref_w = reference(q, k, v, key_padding_mask=padding, need_weights=True, average_attn_weights=False)
    out, weights = mine(q, k, v, valid_lens)
    assert_close(out, ref_out, **F32)
    assert_close(weights, ref_w, **F32)
    fused, _ = mine(q, k, v, valid_lens, need_weights=False)
    assert_close(fused, ref_out, **F32)


def test_agrees_with_torch_with_a_causal_mask() -> None:
    reference, mine = make_pair(12, 3)
    x = torch.randn(2, 5, 12)
    ref_out, ref_w = reference(x, x, x, attn_mask=~au.causal_mask(5), average_attn_weights=False)  # True = ignore
    out, weights = mine(x, x, x, attn_mask=au.causal_mask(5))
    assert_close(out, ref_out, **F32)
    assert_close(weights, ref_w, **F32)
    assert (weights.triu(1) == 0).all()


def test_agrees_with_torch_with_per_query_valid_lens() -> None:
    reference, mine = make_pair(8, 2)
    q, kv = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    lens = torch.tensor([[1, 4, 5], [2, 2, 3]])  # (B, T_q)
    # torch takes a per-query mask as a (B * H, T_q, T_k) attn_mask, batch-major then heads.
    torch_mask = (~au.sequence_mask(lens, 5)).repeat_interleave(2, dim=0)
    ref_out, ref_w = reference(q, kv, kv, attn_mask=torch_mask, average_attn_weights=False)
    out, weights = mine(q, kv, kv, lens)
    assert_close(out, ref_out, **F32)
    assert_close(weights, ref_w, **F32)


def test_load_from_torch_copies_every_weight() -> None:
    reference, mine = make_pair(8, 2, kdim=5, vdim=3)
    assert_close(mine.W_q.weight, reference.q_proj_weight, rtol=0, atol=0)
    assert_close(mine.W_k.weight, reference.k_proj_weight, rtol=0, atol=0)
    assert_close(mine.W_v.weight, reference.v_proj_weight, rtol=0, atol=0)
    assert_close(mine.W_o.weight, reference.out_proj.weight, rtol=0, atol=0)
    assert_close(torch.cat([mine.W_q.bias, mine.W_k.bias, mine.W_v.bias]), reference.in_proj_bias, rtol=0, atol=0)
    assert_close(mine.W_o.bias, reference.out_proj.bias, rtol=0, atol=0)


@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
def test_fully_masked_rows_give_zero_weights_and_finite_outputs(need_weights: bool) -> None:
    mha = au.MultiHeadAttention(8, 2)
    q, kv = torch.randn(3, 4, 8, requires_grad=True), torch.randn(3, 5, 8, requires_grad=True)
    lens = torch.tensor([[0, 1, 5, 0], [5, 5, 5, 5], [0, 0, 0, 0]])
    out, weights = mha(q, kv, kv, lens, need_weights=need_weights)
    assert torch.isfinite(out).all()
    # No key: the heads' outputs are zero, so only W_o's bias is left.
    assert_close(out[2], mha.W_o.bias.expand(4, 8), rtol=0, atol=0)
    assert_close(out[0, [0, 3]], mha.W_o.bias.expand(2, 8), rtol=0, atol=0)
    if need_weights:
        assert (weights[2] == 0).all() and (weights[0, :, [0, 3]] == 0).all()
        assert_close(weights[1].sum(-1), torch.ones(2, 4), **F32)
    (out * torch.randn_like(out)).sum().backward()
    for t in (q, kv, *mha.parameters()):
        assert torch.isfinite(t.grad).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
def test_low_precision_is_finite_and_close_to_float32(dtype: torch.dtype, need_weights: bool) -> None:
    mha = au.MultiHeadAttention(16, 4).eval()
    low = au.MultiHeadAttention(16, 4).to(dtype).eval()
    low.load_state_dict({k: v.to(dtype) for k, v in mha.state_dict().items()})
    mha.load_state_dict({k: v.float() for k, v in low.state_dict().items()})  # float32 copy of the rounded weights
    q, kv = torch.randn(2, 3, 16).to(dtype), torch.randn(2, 5, 16).to(dtype)
    lens = torch.tensor([5, 0])
    with torch.no_grad():
        reference, _ = mha(q.float(), kv.float(), kv.float(), lens)
        out, weights = low(q, kv, kv, lens, need_weights=need_weights)
    assert out.dtype == dtype and torch.isfinite(out).all()
    if need_weights:
        assert torch.isfinite(weights).all() and (weights[1] == 0).all()
    # Four matrix products in low precision (measured: below 0.8 units of the dtype's precision at the outputs' scale)
    assert_close(out.float(), reference, rtol=0, atol=2 * torch.finfo(dtype).eps * float(reference.abs().max()))


def test_gradients_reach_every_parameter() -> None:
    mha = au.MultiHeadAttention(8, 2, kdim=6, vdim=4)
    out, _ = mha(torch.randn(2, 3, 8), torch.randn(2, 5, 6), torch.randn(2, 5, 4), torch.tensor([5, 2]))
    (out * torch.randn_like(out)).sum().backward()
    for name, p in mha.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


def test_dropout_only_in_training_mode() -> None:
    mha = au.MultiHeadAttention(8, 2, dropout=0.5)
    x = torch.randn(2, 4, 8)
    mha.eval()
    assert torch.equal(mha(x, x, x)[0], mha(x, x, x)[0])
    assert torch.equal(mha(x, x, x, need_weights=False)[0], mha(x, x, x, need_weights=False)[0])
    evaluated = mha(x, x, x)[0]
    mha.train()
    assert not torch.allclose(mha(x, x, x)[0], evaluated)


def test_kv_cache_step_by_step_equals_full_causal_attention() -> None:
    mha = au.MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 5, 8)
    full, full_w = mha(x, x, x, attn_mask=au.causal_mask(5))
    cache = au.KVCache()
    outs = []
    for t in range(5):
        assert len(cache) == t
        step = x[:, t : t + 1]
        out, w = mha(step, step, step, attn_mask=au.causal_mask(1, t + 1), kv_cache=cache)
        assert w.shape == (2, 2, 1, t + 1)
        assert_close(w[:, :, 0], full_w[:, :, t, : t + 1], **F32)
        outs.append(out)
    assert_close(torch.cat(outs, dim=1), full, **F32)
    assert cache.k.shape == cache.v.shape == (2, 2, 5, 4)


def test_kv_cache_append_concatenates_along_time() -> None:
    cache = au.KVCache()
    a, b = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 2, 4)
    cache.append(a, a + 1)
    k, v = cache.append(b, b + 1)
    assert len(cache) == 5
    assert torch.equal(k, torch.cat([a, b], dim=2)) and torch.equal(v, torch.cat([a, b], dim=2) + 1)


@pytest.mark.parametrize("kwargs", [{"bias": False}, {"add_bias_kv": True}, {"add_zero_attn": True}])
def test_load_from_torch_refuses_what_it_cannot_copy_and_copies_nothing(kwargs: dict[str, bool]) -> None:
    mine = au.MultiHeadAttention(8, 2)
    before = {k: v.clone() for k, v in mine.state_dict().items()}
    with pytest.raises(ValueError, match=r"^reference: expected (bias=True, got bias=False|add_bias_kv=False)"):
        mine.load_from_torch(nn.MultiheadAttention(8, 2, batch_first=True, **kwargs))
    assert all(torch.equal(v, before[k]) for k, v in mine.state_dict().items())
