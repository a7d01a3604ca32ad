"""Seq2seq (GRU encoder, plain and Bahdanau decoders) and Transformer models: shapes, masking, gradients, KV cache."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.testing import assert_close

import attn_utils as au

F32 = {"rtol": 1e-5, "atol": 1e-5}
V_SRC, V_TGT = 11, 13


def tokens(B: int, T: int, V: int) -> torch.Tensor:
    return torch.randint(4, V, (B, T))  # ids 0..3 are the specials


def gru_bahdanau(num_layers: int = 2, dropout: float = 0.0) -> au.EncoderDecoder:
    return au.EncoderDecoder(au.GRUEncoder(V_SRC, 6, 8, num_layers, dropout),
                             au.BahdanauDecoder(V_TGT, 5, 8, num_layers, dropout))


def gru_plain(num_layers: int = 2) -> au.EncoderDecoder:
    return au.EncoderDecoder(au.GRUEncoder(V_SRC, 6, 8, num_layers), au.Seq2SeqDecoder(V_TGT, 5, 8, num_layers))


def tiny_transformer(dropout: float = 0.0, num_layers: int = 2) -> au.EncoderDecoder:
    cfg = au.TransformerConfig(V_SRC, V_TGT, d_model=8, num_heads=2, ffn_hidden=16, num_layers=num_layers,
                               dropout=dropout, max_len=16)
    return au.make_transformer(cfg)


MODELS = {"gru+bahdanau": gru_bahdanau, "gru+seq2seq": gru_plain, "transformer": tiny_transformer}


# --------------------------------------------------------------------------------------------------- GRU encoder


def test_gru_encoder_shapes_and_packing() -> None:
    enc = au.GRUEncoder(V_SRC, embed_size=6, num_hiddens=8, num_layers=2)
    src, lens = tokens(3, 5, V_SRC), torch.tensor([5, 2, 1])
    out = enc(src, lens)
    assert out.outputs.shape == (3, 5, 8) and out.hidden.shape == (2, 3, 8) and out.attn_weights == {}
    for b, n in enumerate(lens.tolist()):
        assert (out.outputs[b, n:] == 0).all()  # padding never reaches the GRU
        assert_close(out.hidden[-1, b], out.outputs[b, n - 1], rtol=0, atol=0)  # state after the last real token
    changed = src.clone()
    changed[1, 2:], changed[2, 1:] = 4, 5  # change only padding
    again = enc(changed, lens)
    assert_close(again.outputs, out.outputs, rtol=0, atol=0)
    assert_close(again.hidden, out.hidden, rtol=0, atol=0)


# ------------------------------------------------------------------------------------------------------ decoders


@pytest.mark.parametrize("name", ["gru+bahdanau", "gru+seq2seq", "transformer"])
def test_encoder_decoder_logit_shapes(name: str) -> None:
    model = MODELS[name]()
    logits = model(tokens(3, 5, V_SRC), torch.tensor([5, 3, 1]), tokens(3, 4, V_TGT))
    assert logits.shape == (3, 4, V_TGT)
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("name", ["gru+bahdanau", "gru+seq2seq", "transformer"])
def test_gradients_reach_every_parameter(name: str) -> None:
    model = MODELS[name]()
    src, lens, tgt = tokens(4, 6, V_SRC), torch.tensor([6, 4, 2, 1]), tokens(4, 5, V_TGT)
    logits = model(src, lens, tgt)
    loss = au.sequence_cross_entropy(logits, tgt, torch.tensor([5, 3, 4, 2]))
    loss.backward()
    params = dict(model.named_parameters())
    assert len(params) > 5
    for pname, p in params.items():
        assert p.grad is not None, f"{pname}: no gradient"
        assert torch.isfinite(p.grad).all(), f"{pname}: non-finite gradient"
        assert p.grad.abs().sum() > 0, f"{pname}: all-zero gradient"


@pytest.mark.parametrize("name", ["gru+bahdanau", "gru+seq2seq", "transformer"])
def test_decoding_in_pieces_equals_teacher_forcing(name: str) -> None:
    model = MODELS[name]().eval()
    src, lens, tgt = tokens(2, 5, V_SRC), torch.tensor([5, 3]), tokens(2, 6, V_TGT)
    with torch.no_grad():
        enc = model.encoder(src, lens)
        full = model.decoder(tgt, model.decoder.init_state(enc, lens)).logits
        state = model.decoder.init_state(enc, lens)
        pieces = []
        for chunk in (tgt[:, :1], tgt[:, 1:4], tgt[:, 4:5], tgt[:, 5:]):
            out = model.decoder(chunk, state)
            state = out.state
            pieces.append(out.logits)
    assert_close(torch.cat(pieces, dim=1), full, **F32)


def test_bahdanau_attention_weights() -> None:
    model = gru_bahdanau()
    src, lens, tgt = tokens(3, 6, V_SRC), torch.tensor([6, 3, 1]), tokens(3, 4, V_TGT)
    enc = model.encoder(src, lens)
    out = model.decoder(tgt, model.decoder.init_state(enc, lens), need_weights=True)
    w = out.attn_weights["cross"]
    assert w.shape == (3, 1, 1, 4, 6)
    for b, n in enumerate(lens.tolist()):
        assert (w[b, ..., n:] == 0).all()
        assert_close(w[b, ..., :n].sum(-1), torch.ones(1, 1, 4), **F32)
    assert model.decoder(tgt, model.decoder.init_state(enc, lens)).attn_weights == {}


def test_seq2seq_decoder_uses_the_final_encoder_state_as_context() -> None:
    dec = au.Seq2SeqDecoder(V_TGT, 5, 8, num_layers=2)
    hidden = torch.randn(2, 3, 8)
    enc = au.EncoderOutput(torch.randn(3, 4, 8), hidden, {})
    h, context = dec.init_state(enc, torch.tensor([4, 4, 4]))
    assert h is hidden and torch.equal(context, hidden[-1])
    other = au.EncoderOutput(torch.randn(3, 4, 8), hidden.clone().index_fill_(0, torch.tensor([1]), 0.0), {})
    tgt = tokens(3, 2, V_TGT)
    changed = dec(tgt, dec.init_state(other, torch.tensor([4, 4, 4]))).logits
    assert not torch.allclose(changed, dec(tgt, (h, context)).logits)


# --------------------------------------------------------------------------------------------------- transformer


def test_transformer_blocks_shapes() -> None:
    X, enc_out = torch.randn(2, 5, 8), torch.randn(2, 7, 8)
    ffn = au.PositionWiseFFN(8, 16)
    assert ffn(X).shape == (2, 5, 8)
    assert_close(ffn(X)[:, 2], ffn(X[:, 2:3])[:, 0], **F32)  # the same MLP at every position
    addnorm = au.AddNorm(8).eval()
    Y = addnorm(X, torch.randn(2, 5, 8))
    assert_close(Y.mean(-1), torch.zeros(2, 5), rtol=0, atol=1e-6)  # LayerNorm with its initial affine (1, 0)
    enc_block = au.TransformerEncoderBlock(8, 2, 16)
    out, w = enc_block(X, torch.tensor([5, 2]), need_weights=True)
    assert out.shape == (2, 5, 8) and w.shape == (2, 2, 5, 5) and (w[1, ..., 2:] == 0).all()
    dec_block = au.TransformerDecoderBlock(8, 2, 16)
    out, self_w, cross_w = dec_block(X, enc_out, torch.tensor([7, 3]), need_weights=True)
    assert out.shape == (2, 5, 8) and self_w.shape == (2, 2, 5, 5) and cross_w.shape == (2, 2, 5, 7)
    assert (self_w.triu(1) == 0).all() and (cross_w[1, ..., 3:] == 0).all()


def test_transformer_weights_per_layer_and_head() -> None:
    model = tiny_transformer().eval()
    src, lens, tgt = tokens(2, 6, V_SRC), torch.tensor([6, 4]), tokens(2, 5, V_TGT)
    enc = model.encoder(src, lens, need_weights=True)
    assert enc.outputs.shape == (2, 6, 8) and enc.hidden is None
    assert enc.attn_weights["self"].shape == (2, 2, 2, 6, 6)  # (B, L, H, T_src, T_src)
    assert (enc.attn_weights["self"][1, ..., 4:] == 0).all()
    out = model.decoder(tgt, model.decoder.init_state(enc, lens), need_weights=True)
    assert out.attn_weights["self"].shape == (2, 2, 2, 5, 5)
    assert out.attn_weights["cross"].shape == (2, 2, 2, 5, 6)
    assert (out.attn_weights["cross"][1, ..., 4:] == 0).all()
    assert_close(out.attn_weights["cross"].sum(-1), torch.ones(2, 2, 2, 5), **F32)


def test_encoder_ignores_padding_tokens() -> None:
    model = tiny_transformer().eval()
    src, lens = tokens(2, 6, V_SRC), torch.tensor([6, 3])
    changed = src.clone()
    changed[1, 3:] = 7
    with torch.no_grad():
        a, b = model.encoder(src, lens).outputs, model.encoder(changed, lens).outputs
    assert_close(a[:, :3], b[:, :3], **F32)
    assert_close(a[0], b[0], **F32)


def test_kv_cache_decoding_equals_the_full_prefix() -> None:
    model = tiny_transformer(dropout=0.3).eval()  # eval: the dropout must not matter
    src, lens, tgt = tokens(2, 6, V_SRC), torch.tensor([6, 2]), tokens(2, 7, V_TGT)
    with torch.no_grad():
        enc = model.encoder(src, lens)
        full = model.decoder(tgt, model.decoder.init_state(enc, lens), need_weights=True)
        state = model.decoder.init_state(enc, lens)
        for t in range(7):
            step = model.decoder(tgt[:, t : t + 1], state, need_weights=True)
            state = step.state
            assert state.offset == t + 1 and all(len(c) == t + 1 for c in state.caches)
            assert_close(step.logits[:, 0], full.logits[:, t], **F32)
            assert step.attn_weights["self"].shape == (2, 2, 2, 1, t + 1)
            assert_close(step.attn_weights["self"][..., 0, :], full.attn_weights["self"][..., t, : t + 1], **F32)
            assert_close(step.attn_weights["cross"][..., 0, :], full.attn_weights["cross"][..., t, :], **F32)


def test_causal_mask_blocks_the_future() -> None:
    model = tiny_transformer()  # training mode with dropout 0: the mask alone must do it
    src, lens, tgt = tokens(2, 5, V_SRC), torch.tensor([5, 3]), tokens(2, 6, V_TGT)
    changed = tgt.clone()
    changed[:, 4] = (tgt[:, 4] - 4 + 1) % (V_TGT - 4) + 4  # a different token at position 4
    a, b = model(src, lens, tgt), model(src, lens, changed)
    assert_close(a[:, :4], b[:, :4], rtol=0, atol=0)  # earlier positions cannot see position 4
    assert not torch.allclose(a[:, 4:], b[:, 4:])  # later ones do (so the test can fail)


def test_decoder_block_causal_mask_blocks_the_future() -> None:
    block = au.TransformerDecoderBlock(8, 2, 16)
    X, enc_out = torch.randn(2, 5, 8), torch.randn(2, 4, 8)
    changed = X.clone()
    changed[:, 3:] = torch.randn(2, 2, 8)
    a, b = block(X, enc_out, None)[0], block(changed, enc_out, None)[0]
    assert_close(a[:, :3], b[:, :3], rtol=0, atol=0)
    assert not torch.allclose(a[:, 3:], b[:, 3:])


def test_make_transformer_config_and_initialisation() -> None:
    cfg = au.TransformerConfig(V_SRC, V_TGT, d_model=8, num_heads=2, ffn_hidden=16, num_layers=3, max_len=16)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.d_model = 16  # type: ignore[misc]
    model = au.make_transformer(cfg)
    assert isinstance(model.encoder, au.TransformerEncoder) and isinstance(model.decoder, au.TransformerDecoder)
    assert len(model.encoder.blocks) == len(model.decoder.blocks) == 3
    assert model.decoder.dense.out_features == V_TGT
    for name, p in model.named_parameters():
        if p.dim() > 1:  # Xavier uniform: |w| <= sqrt(6 / (fan_in + fan_out))
            fan_out, fan_in = p.shape[0], p.shape[1]
            assert p.abs().max() <= (6 / (fan_in + fan_out)) ** 0.5 + 1e-7, name


def test_decoder_state_is_checked() -> None:
    model = tiny_transformer()
    with pytest.raises(TypeError, match=r"state: expected a TransformerDecoderState"):
        model.decoder(tokens(2, 3, V_TGT), (torch.zeros(1), None))
