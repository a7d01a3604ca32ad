"""Nadaraya–Watson pooling, additive attention and scaled dot-product attention (explicit and fused paths)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

import attn_utils as au

F32 = {"rtol": 1e-5, "atol": 1e-6}


def assert_grads_reach_every_parameter(module: torch.nn.Module) -> None:
    params = dict(module.named_parameters())
    assert params, "the module has no parameters"
    for name, p in params.items():
        assert p.grad is not None, f"{name}: no gradient"
        assert torch.isfinite(p.grad).all(), f"{name}: non-finite gradient"
        assert p.grad.abs().sum() > 0, f"{name}: all-zero gradient"


# ------------------------------------------------------------------------------------------ Nadaraya–Watson


def kernel_reference(x: float, xi: float, sigma: float, kernel: str) -> float:
    u = (x - xi) / sigma
    if kernel == "gaussian":
        return math.exp(-u * u / 2)
    if kernel == "boxcar":
        return 1.0 if abs(u) <= 1 else 0.0
    return 0.75 * (1 - u * u) if abs(u) <= 1 else 0.0


@pytest.mark.parametrize(("kernel", "sigma"), [("gaussian", 1.0), ("gaussian", 0.3), ("boxcar", 1.45),
                                               ("epanechnikov", 2.0)])
def test_nadaraya_watson_matches_the_formula(kernel: str, sigma: float) -> None:
    queries = torch.tensor([0.0, 0.7, 2.5, 4.0])
    keys = torch.tensor([0.1, 0.5, 1.3, 2.2, 3.0, 3.9, 4.8])
    values = torch.randn(7)
    preds, weights = au.nadaraya_watson(queries, keys, values, sigma=sigma, kernel=kernel)
    assert preds.shape == (4,) and weights.shape == (4, 7)
    for i, x in enumerate(queries.tolist()):
        k = [kernel_reference(x, xi, sigma, kernel) for xi in keys.tolist()]
        w = [kk / sum(k) for kk in k]
        assert weights[i].tolist() == pytest.approx(w, abs=1e-6)
        assert float(preds[i]) == pytest.approx(sum(wj * yj for wj, yj in zip(w, values.tolist(), strict=True)),
                                                abs=1e-5)
    assert_close(weights.sum(1), torch.ones(4), **F32)


def test_nadaraya_watson_default_is_the_courses_gaussian() -> None:
    data = au.make_regression_data()
    preds, weights = au.nadaraya_watson(data.x_test, data.x_train, data.y_train)
    expected = torch.softmax(-((data.x_test[:, None] - data.x_train[None, :]) ** 2) / 2, dim=1)
    assert_close(weights, expected, **F32)
    assert_close(preds, expected @ data.y_train, **F32)


def test_nw_kernel_regression_formula_and_nonparametric_special_case() -> None:
    x = torch.tensor([0.5, 1.5, 3.0])
    keys = torch.tensor([[0.0, 1.0, 2.0], [1.0, 2.0, 4.0], [2.5, 3.5, 4.5]])
    values = torch.randn(3, 3)
    w = 1.7
    with torch.no_grad():
        preds, weights = au.NWKernelRegression(w=w)(x, keys, values)
    assert preds.shape == (3,) and weights.shape == (3, 3)
    for i in range(3):
        k = [math.exp(-(((x[i] - keys[i, j]) * w) ** 2).item() / 2) for j in range(3)]
        expected = [kk / sum(k) for kk in k]
        assert weights[i].tolist() == pytest.approx(expected, abs=1e-6)
        assert float(preds[i]) == pytest.approx(float(torch.tensor(expected) @ values[i]), abs=1e-5)
    # w = 1/σ: the same numbers as the nonparametric Gaussian kernel with width σ when every query shares the keys.
    shared = torch.tensor([0.0, 1.0, 2.0, 4.0])
    y = torch.randn(4)
    p1, w1 = au.NWKernelRegression(w=2.0)(x, shared.expand(3, 4), y.expand(3, 4))
    p2, w2 = au.nadaraya_watson(x, shared, y, sigma=0.5)
    assert_close(w1, w2, **F32)
    assert_close(p1, p2, **F32)


def test_nw_kernel_regression_default_w_is_seeded_uniform() -> None:
    torch.manual_seed(3)
    expected = torch.rand(1)
    torch.manual_seed(3)
    assert_close(au.NWKernelRegression().w.data, expected, rtol=0, atol=0)


def test_nw_kernel_regression_gradient_reaches_w() -> None:
    model = au.NWKernelRegression(w=0.8)
    x = torch.rand(5) * 5
    keys, values = torch.rand(5, 4) * 5, torch.randn(5, 4)
    preds, _ = model(x, keys, values)
    ((preds - torch.randn(5)) ** 2).mean().backward()
    assert_grads_reach_every_parameter(model)


# ------------------------------------------------------------------------------------------- additive attention


def test_additive_attention_matches_the_formula() -> None:
    attn = au.AdditiveAttention(query_size=3, key_size=5, num_hiddens=7).eval()
    q, k, v = torch.randn(2, 4, 3), torch.randn(2, 6, 5), torch.randn(2, 6, 2)
    lens = torch.tensor([[6, 1, 3, 2], [4, 4, 5, 6]])
    out, weights = attn(q, k, v, lens)
    assert out.shape == (2, 4, 2) and weights.shape == (2, 4, 6)
    Wq, Wk, wv = attn.W_q.weight, attn.W_k.weight, attn.w_v.weight[0]
    for b in range(2):
        for i in range(4):
            n = int(lens[b, i])
            scores = torch.stack([wv @ torch.tanh(Wq @ q[b, i] + Wk @ k[b, j]) for j in range(n)])
            expected = torch.zeros(6)
            expected[:n] = torch.softmax(scores, 0)
            assert_close(weights[b, i], expected, **F32)
            assert_close(out[b, i], expected @ v[b], **F32)


def test_additive_attention_valid_lens_1d_and_causal_mask() -> None:
    attn = au.AdditiveAttention(4, 4, 8)
    q, k, v = torch.randn(3, 5, 4), torch.randn(3, 5, 4), torch.randn(3, 5, 6)
    _, weights = attn(q, k, v, torch.tensor([5, 2, 0]), attn_mask=au.causal_mask(5))
    assert (weights[2] == 0).all()
    assert (weights[1, :, 2:] == 0).all() and (weights.triu(1) == 0).all()
    assert_close(weights[0].sum(-1), torch.ones(5), **F32)
    assert_close(weights[1, 1:].sum(-1), torch.ones(4), **F32)


def test_additive_attention_gradients_reach_every_parameter() -> None:
    attn = au.AdditiveAttention(3, 5, 7)
    out, _ = attn(torch.randn(2, 4, 3), torch.randn(2, 6, 5), torch.randn(2, 6, 2), torch.tensor([3, 6]))
    (out * torch.randn_like(out)).sum().backward()
    assert_grads_reach_every_parameter(attn)


def test_additive_attention_dropout_only_in_training() -> None:
    attn = au.AdditiveAttention(4, 4, 8, dropout=0.5)
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 3)
    attn.eval()
    first, second = attn(q, k, v)[0], attn(q, k, v)[0]
    assert torch.equal(first, second)
    attn.train()
    assert not torch.allclose(attn(q, k, v)[0], first)


# ------------------------------------------------------------------------------------ scaled dot-product attention


def explicit_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """softmax(QKᵀ/√D) V with masked keys dropped, written out with plain tensor ops and -inf."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a row of -inf gives NaN: no keys, weights 0
    return weights @ v


def test_dot_product_attention_matches_the_formula() -> None:
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    lens = torch.tensor([2, 5])
    out, weights = au.dot_product_attention(q, k, v, lens)
    assert out.shape == (2, 3, 6) and weights.shape == (2, 3, 5)
    mask = au.sequence_mask(lens, 5)[:, None, :]
    assert_close(out, explicit_reference(q, k, v, mask), **F32)
    assert (weights[0, :, 2:] == 0).all()
    assert_close(weights.sum(-1), torch.ones(2, 3), **F32)
    # scaled by √D: doubling D with duplicated features multiplies the raw dot product by 2 and √D by √2
    out2, _ = au.dot_product_attention(torch.cat([q, q], -1), torch.cat([k, k], -1), v, lens)
    assert_close(out2, explicit_reference(q * math.sqrt(2), k, v, mask), **F32)


FUSED_CASES = {
    "no mask": dict(shape=(2, 3, 5), valid_lens=None, causal=False),
    "valid_lens 1d": dict(shape=(2, 3, 5), valid_lens=torch.tensor([1, 5]), causal=False),
    "valid_lens 2d": dict(shape=(2, 3, 5), valid_lens=torch.tensor([[1, 2, 3], [5, 4, 1]]), causal=False),
    "causal": dict(shape=(2, 4, 4), valid_lens=None, causal=True),
    "causal T_k > T_q": dict(shape=(2, 3, 6), valid_lens=None, causal=True),
    "heads": dict(shape=(2, 3, 4, 5), valid_lens=None, causal=False),
    "heads + valid_lens 1d": dict(shape=(2, 3, 4, 5), valid_lens=torch.tensor([3, 5]), causal=False),
    "heads + valid_lens 2d": dict(shape=(2, 3, 4, 5), valid_lens=torch.tensor([[1, 2, 3, 4], [5, 5, 2, 1]]),
                                  causal=False),
    "heads + causal + valid_lens": dict(shape=(2, 3, 4, 6), valid_lens=torch.tensor([4, 6]), causal=True),
}


def qkv_for(shape: tuple[int, ...], D: int = 8, D_v: int = 3) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    *lead, T_q, T_k = shape
    return torch.randn(*lead, T_q, D), torch.randn(*lead, T_k, D), torch.randn(*lead, T_k, D_v)


@pytest.mark.parametrize("case", FUSED_CASES.values(), ids=FUSED_CASES.keys())
def test_explicit_and_fused_paths_agree(case: dict) -> None:
    q, k, v = qkv_for(case["shape"])
    T_q, T_k = case["shape"][-2:]
    attn_mask = au.causal_mask(T_q, T_k) if case["causal"] else None
    explicit, weights = au.dot_product_attention(q, k, v, case["valid_lens"], attn_mask, need_weights=True)
    fused, none = au.dot_product_attention(q, k, v, case["valid_lens"], attn_mask, need_weights=False)
    assert none is None and weights is not None
    assert explicit.shape == fused.shape == (*case["shape"][:-1], 3)
    assert weights.shape == case["shape"]
    assert_close(fused, explicit, **F32)
    mask = au.attention_mask(case["shape"], case["valid_lens"], attn_mask)
    assert_close(explicit, explicit_reference(q, k, v, mask), **F32)


@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
def test_fully_masked_rows_give_zero_output_and_finite_gradients(need_weights: bool) -> None:
    q, k, v = (t.requires_grad_() for t in qkv_for((3, 2, 4, 5)))  # (B, H, T_q, T_k)
    lens = torch.tensor([[0, 2, 0, 1], [5, 5, 5, 5], [0, 0, 0, 0]])
    out, weights = au.dot_product_attention(q, k, v, lens, need_weights=need_weights)
    assert torch.isfinite(out).all()
    assert (out[0, :, 0] == 0).all() and (out[0, :, 2] == 0).all() and (out[2] == 0).all()
    assert (out[1].abs().sum(-1) > 0).all()
    if need_weights:
        assert (weights[0, :, 0] == 0).all() and (weights[2] == 0).all()
    (out * torch.randn_like(out)).sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert (q.grad[2] == 0).all() and (k.grad[2] == 0).all() and (v.grad[2] == 0).all()
    assert (v.grad[0, :, 2:] == 0).all() and (k.grad[0, :, 2:] == 0).all()  # b = 0 sees 2 keys at most
    assert q.grad[1].abs().sum() > 0


def test_fully_masked_rows_with_a_causal_and_padding_mask_both_paths() -> None:
    q, k, v = qkv_for((2, 4, 4))
    mask = au.causal_mask(4) & torch.tensor([False, True, True, True])  # query 0 sees nothing
    explicit, _ = au.dot_product_attention(q, k, v, attn_mask=mask)
    fused, _ = au.dot_product_attention(q, k, v, attn_mask=mask, need_weights=False)
    assert (explicit[:, 0] == 0).all() and (fused[:, 0] == 0).all()
    assert_close(fused, explicit, **F32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
def test_low_precision_paths_are_finite_and_close(dtype: torch.dtype, need_weights: bool) -> None:
    q, k, v = (t.to(dtype) for t in qkv_for((2, 2, 3, 6), D=8, D_v=4))
    lens = torch.tensor([[6, 0, 2], [1, 3, 6]])
    # float32 on the same (already rounded) inputs, so that only the arithmetic in low precision differs
    reference, ref_weights = au.dot_product_attention(q.float(), k.float(), v.float(), lens)
    out, weights = au.dot_product_attention(q, k, v, lens, need_weights=need_weights)
    assert out.dtype == dtype and torch.isfinite(out).all()
    assert (out[0, :, 1] == 0).all()
    eps = torch.finfo(dtype).eps  # one unit of the dtype's precision, relative to the values' scale
    assert_close(out.float(), reference, rtol=0, atol=eps * float(v.abs().max()))
    if need_weights:
        assert torch.isfinite(weights).all() and (weights[0, :, 1] == 0).all()
        assert_close(weights.float(), ref_weights, rtol=0, atol=eps)


def test_dot_product_attention_module_uses_dropout_only_in_training() -> None:
    q, k, v = qkv_for((2, 3, 5))
    module = au.DotProductAttention(dropout=0.5).eval()
    out, w = module(q, k, v, torch.tensor([2, 5]))
    ref_out, ref_w = au.dot_product_attention(q, k, v, torch.tensor([2, 5]))
    assert_close(out, ref_out, rtol=0, atol=0)
    assert_close(w, ref_w, rtol=0, atol=0)
    module.train()
    assert not torch.allclose(module(q, k, v, torch.tensor([2, 5]))[0], ref_out)
    assert not torch.allclose(module(q, k, v, torch.tensor([2, 5]), need_weights=False)[0], ref_out)
