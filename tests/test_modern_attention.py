"""RoPE, ALiBi, grouped-query attention and sliding windows (chapter 12): each checked against a second, independent
computation, and each through the KV cache against the whole sequence at once."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import attn_utils as au
import attn_utils.attention as attention_module


def rope_complex(x: torch.Tensor, offset: int = 0, base: float = 10000.0) -> torch.Tensor:
    """RoPE as multiplication by unit complex numbers: pair j of position m is z_j · e^{i m θ_j}."""
    z = torch.view_as_complex(x.double().unflatten(-1, (-1, 2)).contiguous())  # (..., T, D_h / 2)
    theta = base ** (-torch.arange(0, x.shape[-1], 2, dtype=torch.float64) / x.shape[-1])
    m = torch.arange(offset, offset + x.shape[-2], dtype=torch.float64)
    return torch.view_as_real(z * torch.exp(1j * torch.outer(m, theta))).flatten(-2)


@settings(max_examples=30, deadline=None)
@given(m=st.integers(0, 500), n=st.integers(0, 500), shift=st.integers(0, 2000), seed=st.integers(0, 10**6))
def test_rope_scores_depend_only_on_the_offset(m: int, n: int, shift: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 16, generator=g, dtype=torch.float64)

    def rotated(x: torch.Tensor, position: int) -> torch.Tensor:
        return au.apply_rope(x[None], offset=position)[0]

    score = rotated(q, m) @ rotated(k, n)
    shifted = rotated(q, m + shift) @ rotated(k, n + shift)
    assert math.isclose(float(score), float(shifted), rel_tol=1e-9, abs_tol=1e-9)


def test_rope_equals_the_complex_number_implementation_and_keeps_norms() -> None:
    x = torch.randn(2, 3, 50, 8, dtype=torch.float64)
    for offset in (0, 7, 1000):
        rotated = au.apply_rope(x, offset=offset)
        torch.testing.assert_close(rotated, rope_complex(x, offset), rtol=0, atol=1e-12)
        torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1))
    table = au.RotaryEmbedding(8, max_len=64)
    torch.testing.assert_close(table(x.float(), offset=9), au.apply_rope(x.float(), offset=9), rtol=0, atol=1e-5)
    assert torch.equal(au.apply_rope(x, offset=0)[..., 0, :], x[..., 0, :])  # position 0 is not rotated


def test_alibi_slopes_and_bias_follow_the_paper() -> None:
    torch.testing.assert_close(au.alibi_slopes(8), torch.tensor([2.0 ** -(i + 1) for i in range(8)]))
    assert au.alibi_slopes(1).tolist() == [2.0 ** -8]
    # 6 heads: the 4 slopes of 4 heads, then every other slope of 8 heads
    torch.testing.assert_close(au.alibi_slopes(6), torch.tensor([2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3]))
    slopes = au.alibi_slopes(4)
    bias = au.alibi_bias(slopes, 2, 5)  # the queries are positions 3 and 4
    for h in range(4):
        for i in range(2):
            for j in range(5):
                assert math.isclose(float(bias[h, i, j]), -float(slopes[h]) * abs(3 + i - j), rel_tol=1e-6)


def test_attention_bias_is_added_to_the_scores_on_both_paths_with_gradients() -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 4, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    bias = au.alibi_bias(au.alibi_slopes(3).double(), 4)
    mask = au.causal_mask(4)
    reference = torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(8) + bias).masked_fill(~mask, -math.inf), -1) @ v
    explicit, _ = au.dot_product_attention(q, k, v, attn_mask=mask, attn_bias=bias)
    fused, _ = au.dot_product_attention(q, k, v, attn_bias=bias, is_causal=True, need_weights=False)
    torch.testing.assert_close(explicit, reference)
    torch.testing.assert_close(fused, reference)
    grads = torch.autograd.grad(explicit.square().sum(), (q, k, v))
    expected = torch.autograd.grad(reference.square().sum(), (q, k, v))
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want)


def repeat_kv_weights(gqa: au.MultiHeadAttention) -> au.MultiHeadAttention:
    """The multi-head module whose key/value heads are the GQA module's, each repeated for its group."""
    H, H_kv, D_h, D = gqa.num_heads, gqa.num_kv_heads, gqa.d_head, gqa.d_model
    mha = au.MultiHeadAttention(D, H, rope=gqa.rope is not None, alibi=gqa.alibi_slopes is not None)
    with torch.no_grad():
        mha.W_q.load_state_dict(gqa.W_q.state_dict())
        mha.W_o.load_state_dict(gqa.W_o.state_dict())
        for full, shared in ((mha.W_k, gqa.W_k), (mha.W_v, gqa.W_v)):
            full.weight.copy_(shared.weight.view(H_kv, D_h, D).repeat_interleave(H // H_kv, dim=0).reshape(D, D))
            full.bias.copy_(shared.bias.view(H_kv, D_h).repeat_interleave(H // H_kv, dim=0).reshape(D))
    return mha


@pytest.mark.parametrize("num_kv_heads", [1, 2, 4])
@pytest.mark.parametrize("scheme", ["none", "rope", "alibi"])
def test_gqa_equals_mha_with_each_kv_head_repeated(num_kv_heads: int, scheme: str) -> None:
    torch.manual_seed(0)
    gqa = au.MultiHeadAttention(16, 4, num_kv_heads=num_kv_heads, rope=scheme == "rope", alibi=scheme == "alibi")
    assert gqa.W_k.weight.shape == (num_kv_heads * 4, 16)
    mha = repeat_kv_weights(gqa)
    X = torch.randn(3, 6, 16)
    lens = torch.tensor([6, 4, 2])
    for kwargs in ({"attn_mask": au.causal_mask(6)}, {"valid_lens": lens}):
        out, w = gqa(X, X, X, **kwargs)
        ref, w_ref = mha(X, X, X, **kwargs)
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(w, w_ref)
        fused, _ = gqa(X, X, X, need_weights=False, **kwargs)
        torch.testing.assert_close(fused, ref)


def test_gqa_without_enable_gqa_gives_the_same_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    gqa = au.MultiHeadAttention(16, 4, num_kv_heads=2, rope=True)
    X = torch.randn(2, 5, 16)
    shared, _ = gqa(X, X, X, is_causal=True, need_weights=False)
    monkeypatch.setattr(attention_module, "SDPA_HAS_GQA", False)
    repeated, _ = gqa(X, X, X, is_causal=True, need_weights=False)
    torch.testing.assert_close(shared, repeated)


@pytest.mark.skipif(not au.SDPA_HAS_GQA, reason="this torch's fused attention has no enable_gqa")
def test_enable_gqa_matches_torch_repeat_interleave() -> None:
    torch.manual_seed(0)
    q = torch.randn(2, 8, 5, 4)
    k, v = torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4)
    ours, _ = au.dot_product_attention(q, k, v, is_causal=True, need_weights=False, enable_gqa=True)
    ref = F.scaled_dot_product_attention(q, k.repeat_interleave(4, 1), v.repeat_interleave(4, 1), is_causal=True)
    torch.testing.assert_close(ours, ref)


@pytest.mark.parametrize(
    "options",
    [{"rope": True}, {"alibi": True}, {"num_kv_heads": 1, "rope": True}, {"num_kv_heads": 2, "alibi": True}],
)
def test_decoding_with_the_cache_equals_the_whole_sequence(options: dict[str, object]) -> None:
    torch.manual_seed(0)
    mha = au.MultiHeadAttention(16, 4, **options)  # type: ignore[arg-type]
    X = torch.randn(2, 7, 16)
    whole, _ = mha(X, X, X, attn_mask=au.causal_mask(7))
    cache = au.KVCache()
    prefix, _ = mha(X[:, :3], X[:, :3], X[:, :3], kv_cache=cache, is_causal=True)  # a prompt of 3
    steps = [prefix] + [mha(X[:, t : t + 1], X[:, t : t + 1], X[:, t : t + 1], kv_cache=cache)[0] for t in range(3, 7)]
    torch.testing.assert_close(torch.cat(steps, dim=1), whole)
    H_kv = options.get("num_kv_heads", 4)
    assert cache.k is not None and cache.k.shape == (2, H_kv, 7, 4)
    assert cache.nbytes == 2 * (2 * H_kv * 7 * 4) * 4  # keys and values, float32


def test_rope_decoding_uses_absolute_positions() -> None:
    """Keys are cached already rotated: a key rotated at position 0 but used at position 5 would change the scores."""
    torch.manual_seed(0)
    mha = au.MultiHeadAttention(8, 2, rope=True)
    X = torch.randn(1, 6, 8)
    cache = au.KVCache()
    mha(X[:, :5], X[:, :5], X[:, :5], kv_cache=cache, is_causal=True)
    step, _ = mha(X[:, 5:], X[:, 5:], X[:, 5:], kv_cache=cache)
    alone, _ = mha(X[:, 5:], X[:, 5:], X[:, 5:])  # the same token seen as position 0, with no past
    whole, _ = mha(X, X, X, attn_mask=au.causal_mask(6))
    torch.testing.assert_close(step, whole[:, 5:])
    assert not torch.allclose(step, alone)


def test_sliding_window_mask_against_its_definition() -> None:
    for T_q, T_k, window in ((5, 5, 1), (5, 5, 3), (2, 6, 3), (4, 4, 10)):
        mask = au.sliding_window_mask(T_q, T_k, window=window)
        for i in range(T_q):
            for j in range(T_k):
                position = i + T_k - T_q
                assert bool(mask[i, j]) == (0 <= position - j < window)
    assert torch.equal(au.sliding_window_mask(6, window=6), au.causal_mask(6))


def test_a_window_of_w_in_l_layers_reaches_l_times_w_minus_1_back() -> None:
    """The receptive field through L layers: position i depends on i - L (w - 1) and nothing before it."""
    T, window = 20, 3
    reach = au.sliding_window_mask(T, window=window).long()
    path = torch.eye(T, dtype=torch.long)
    for layers in range(1, 5):
        path = (reach @ path).clamp(max=1)
        first_seen = int(path[T - 1].nonzero().min())
        assert T - 1 - first_seen == layers * (window - 1)


@pytest.mark.parametrize("positional", au.POSITIONAL)
def test_every_positional_scheme_decodes_as_it_trains(positional: str) -> None:
    torch.manual_seed(0)
    cfg = au.GPTConfig(vocab_size=11, d_model=16, num_heads=4, ffn_hidden=16, num_layers=2, max_len=12,
                       positional=positional, num_kv_heads=2, window=4 if positional == "rope" else None)
    model = au.make_gpt(cfg).eval()
    tokens = torch.randint(0, 11, (2, 9))
    whole = model(tokens)
    state = model.init_state()
    steps = [model.step(tokens[:, :4], state).logits]
    steps += [model.step(tokens[:, t : t + 1], state).logits for t in range(4, 9)]
    torch.testing.assert_close(torch.cat(steps, dim=1), whole, rtol=1e-5, atol=1e-5)
    assert state.caches[0].k is not None and state.caches[0].k.shape[1] == 2  # two key/value heads cached


def test_only_a_model_without_positions_ignores_the_order_of_earlier_tokens() -> None:
    """One causal layer without positions sees the earlier tokens as a set: shuffling them leaves the last output."""
    torch.manual_seed(0)
    tokens = torch.tensor([[1, 2, 3, 4, 5, 6]])
    shuffled = torch.tensor([[4, 1, 5, 3, 2, 6]])  # the same earlier tokens, the same last token
    for positional in au.POSITIONAL:
        cfg = au.GPTConfig(vocab_size=11, d_model=16, num_heads=4, ffn_hidden=16, num_layers=1, max_len=12,
                           positional=positional)
        model = au.make_gpt(cfg).eval()
        same = torch.allclose(model(tokens)[:, -1], model(shuffled)[:, -1], atol=1e-5)
        assert same == (positional == "none"), positional
