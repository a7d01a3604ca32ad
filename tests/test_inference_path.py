"""The inference path: encode() and step(), the fast causal kernel, the cross-attention cache, and eval mode."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

import attn_utils as au
import attn_utils.attention as attention_module


def tiny_transformer(num_layers: int = 2, dropout: float = 0.0) -> au.EncoderDecoder:
    return au.make_transformer(au.TransformerConfig(10, 12, d_model=16, num_heads=2, ffn_hidden=32,
                                                    num_layers=num_layers, dropout=dropout, max_len=16))


def tiny_gru() -> au.EncoderDecoder:
    return au.EncoderDecoder(au.GRUEncoder(10, 8, 16, 2), au.BahdanauDecoder(12, 8, 16, 2))


SRC, SRC_LEN = torch.randint(4, 10, (3, 6), generator=torch.Generator().manual_seed(0)), torch.tensor([6, 4, 2])
TGT = torch.randint(4, 12, (3, 5), generator=torch.Generator().manual_seed(1))


# ---------------------------------------------------------------------------------------------------- encode/step


@pytest.mark.parametrize("make", [tiny_transformer, tiny_gru])
def test_forward_is_encode_then_one_step(make) -> None:  # type: ignore[no-untyped-def]
    model = make().eval()
    state, _ = model.encode(SRC, SRC_LEN)
    assert_close(model(SRC, SRC_LEN, TGT), model.step(TGT, state).logits)


@pytest.mark.parametrize("make", [tiny_transformer, tiny_gru])
def test_steps_one_token_at_a_time_equal_one_step_over_the_target(make) -> None:  # type: ignore[no-untyped-def]
    model = make().eval()
    whole = model(SRC, SRC_LEN, TGT)
    state, _ = model.encode(SRC, SRC_LEN)
    steps = []
    for t in range(TGT.shape[1]):
        out = model.step(TGT[:, t : t + 1], state)
        state = out.state
        steps.append(out.logits)
    assert_close(torch.cat(steps, dim=1), whole, atol=1e-5, rtol=1e-5)


def test_encode_returns_the_encoders_weights() -> None:
    model = tiny_transformer().eval()
    _, weights = model.encode(SRC, SRC_LEN, need_weights=True)
    assert weights["self"].shape == (3, 2, 2, 6, 6)  # (B, L, H, T_src, T_src)
    assert model.encode(SRC, SRC_LEN).attn_weights == {}


def test_step_checks_the_target_ids_against_the_decoder() -> None:
    model = tiny_transformer()
    state, _ = model.encode(SRC, SRC_LEN)
    with pytest.raises(ValueError, match=r"tgt: expected token ids in \[0, 12\), got values in \[12, 12\]"):
        model.step(torch.full((3, 1), 12), state)


# ---------------------------------------------------------------------------------------------------- causal masks


@pytest.mark.parametrize("need_weights", [True, False])
def test_is_causal_equals_the_lower_triangle_mask(need_weights: bool) -> None:
    q, k, v = torch.randn(3, 2, 5, 8), torch.randn(3, 2, 5, 8), torch.randn(3, 2, 5, 4)
    with_flag, w1 = au.dot_product_attention(q, k, v, need_weights=need_weights, is_causal=True)
    with_mask, w2 = au.dot_product_attention(q, k, v, attn_mask=au.causal_mask(5), need_weights=need_weights)
    assert_close(with_flag, with_mask)
    if need_weights:
        assert_close(w1, w2)
        assert (w1.triu(1) == 0).all()


def test_is_causal_combines_with_valid_lens() -> None:
    q = torch.randn(2, 2, 4, 8)
    lens = torch.tensor([4, 2])
    fused, _ = au.dot_product_attention(q, q, q, lens, need_weights=False, is_causal=True)
    explicit, w = au.dot_product_attention(q, q, q, lens, need_weights=True, is_causal=True)
    reference, _ = au.dot_product_attention(q, q, q, lens, attn_mask=au.causal_mask(4), need_weights=True)
    assert_close(fused, explicit)
    assert_close(explicit, reference)
    assert (w[1, ..., 2:] == 0).all()  # padding stays masked


def test_cached_decoding_needs_the_bottom_right_mask_not_torch_is_causal() -> None:
    # 3 new queries after 4 cached positions: the queries are positions 4, 5, 6 of a sequence of 7.
    q_all, k, v = torch.randn(1, 1, 7, 8), torch.randn(1, 1, 7, 8), torch.randn(1, 1, 7, 8)
    full, _ = au.dot_product_attention(q_all, k, v, is_causal=True)  # every position at once
    q_new = q_all[:, :, 4:]
    ours, _ = au.dot_product_attention(q_new, k, v, attn_mask=au.causal_mask(3, 7))  # bottom-right aligned
    assert_close(ours, full[:, :, 4:])  # where they should agree, they do
    # torch's is_causal is aligned top-left: the first new query would see key 0 alone.
    top_left = F.scaled_dot_product_attention(q_new, k, v, is_causal=True)
    assert_close(top_left[:, :, 0], v[:, :, 0])
    assert not torch.allclose(top_left, full[:, :, 4:])


def test_the_decoder_uses_the_fused_causal_kernel_without_a_mask(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = F.scaled_dot_product_attention

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append((kwargs.get("attn_mask") is None, kwargs.get("is_causal", False), args[0].shape[-2]))
        return real(*args, **kwargs)

    monkeypatch.setattr(attention_module.F, "scaled_dot_product_attention", spy)
    model = tiny_transformer(num_layers=1).train()
    model(SRC, SRC_LEN, TGT)
    # Encoder self-attention (padding mask), decoder self-attention (no mask: is_causal), cross-attention (mask).
    assert calls == [(False, False, 6), (True, True, 5), (False, False, 5)]


def test_one_new_token_with_a_cache_builds_no_mask(monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_transformer(num_layers=1).eval()
    state, _ = model.encode(SRC, SRC_LEN)
    model.step(TGT[:, :2], state)  # prefill two positions
    built = []
    real = au.transformer.causal_mask
    monkeypatch.setattr(au.transformer, "causal_mask", lambda *a, **k: built.append(a) or real(*a, **k))
    model.step(TGT[:, 2:3], state)  # one new position sees all 3: nothing to mask
    assert built == []
    model.step(TGT[:, 3:5], state)  # two new positions after 3 cached: the bottom-right mask
    assert built == [(2, 5)]


# ---------------------------------------------------------------------------------------------------- cross-attention


def test_cross_attention_projects_the_source_once_per_sentence() -> None:
    model = tiny_transformer()
    projections = []
    for block in model.decoder.blocks:
        for layer in (block.cross_attention.W_k, block.cross_attention.W_v):
            layer.register_forward_hook(lambda module, args, out: projections.append(module))
    model.decoder.dense.bias.data[2] = -1e4  # never <eos>: all 6 steps
    result = au.greedy_decode(model, SRC, SRC_LEN, bos_id=1, eos_id=2, max_len=6)
    assert all(len(t) == 6 for t in result.tokens)
    assert len(projections) == 2 * len(model.decoder.blocks)  # W_k and W_v of each block, once


def test_the_block_accepts_projected_keys_and_values() -> None:
    block = au.TransformerDecoderBlock(16, 2, 32).eval()
    X, enc = torch.randn(2, 4, 16), torch.randn(2, 6, 16)
    lens = torch.tensor([6, 3])
    from_outputs = block(X, enc, lens)
    from_projection = block(X, block.cross_attention.project_kv(enc, enc), lens)
    assert_close(from_outputs[0], from_projection[0])


# ---------------------------------------------------------------------------------------------------- eval mode


def test_decoding_restores_every_submodules_mode() -> None:
    model = tiny_transformer(dropout=0.3)
    model.train()
    model.encoder.eval()  # a frozen encoder inside a model that is training
    au.greedy_decode(model, SRC, SRC_LEN, bos_id=1, eos_id=2, max_len=3)
    assert model.training and model.decoder.training
    assert not model.encoder.training
    assert not any(m.training for m in model.encoder.modules())


def test_decoding_runs_in_eval_mode_and_restores_it_after_an_error() -> None:
    model = tiny_transformer(dropout=0.5).train()
    seen = []
    model.decoder.register_forward_pre_hook(lambda module, args: seen.append(module.training))
    a = au.greedy_decode(model, SRC, SRC_LEN, bos_id=1, eos_id=2, max_len=4).tokens
    b = au.greedy_decode(model, SRC, SRC_LEN, bos_id=1, eos_id=2, max_len=4).tokens
    assert a == b and seen and not any(seen)  # no dropout while decoding
    with pytest.raises(ValueError):
        with au.eval_mode(model):
            raise ValueError("a failure inside")
    assert all(m.training for m in model.modules())


def test_eval_mode_refuses_what_is_not_a_module() -> None:
    with pytest.raises(TypeError, match=r"model: expected a torch.nn.Module, got str"):
        with au.eval_mode("model"):  # type: ignore[arg-type]
            pass


def test_translate_and_greedy_decode_tokenise_like_the_training_data() -> None:
    data = au.load_translation(num_pairs=100)
    src, lens = data.encode([en for en, _ in data.test[:5]], data.src_vocab)
    again, lens_again = au.encode_sentences([en.upper() for en, _ in data.test[:5]], data.src_vocab, data.num_steps)
    assert torch.equal(src, again) and torch.equal(lens, lens_again)


def test_a_module_of_another_kind_is_refused() -> None:
    with pytest.raises(TypeError, match=r"model: expected an attn_utils EncoderDecoder, got Linear"):
        au.greedy_decode(nn.Linear(2, 2), SRC, SRC_LEN, bos_id=1, eos_id=2, max_len=3)  # type: ignore[arg-type]
