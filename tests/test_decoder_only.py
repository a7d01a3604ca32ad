"""The decoder-only Transformer (GPT): shapes, causality, the KV cache, tied embeddings, the pre-norm block; the loss
with label smoothing and a start position; language-modelling data, perplexity and training."""

from __future__ import annotations

import dataclasses
import functools
import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

import attn_utils as au

F32 = {"rtol": 1e-5, "atol": 1e-5}
V, D, H, FFN, CONTEXT = 7, 8, 2, 16, 12


def tiny_gpt(
    num_layers: int = 2, *, tie: bool = True, activation: str = "gelu", dropout: float = 0.0, vocab_size: int = V,
    max_len: int = CONTEXT,
) -> au.DecoderOnlyTransformer:
    cfg = au.GPTConfig(vocab_size, d_model=D, num_heads=H, ffn_hidden=FFN, num_layers=num_layers, dropout=dropout,
                       max_len=max_len, activation=activation, tie_embeddings=tie)
    return au.make_gpt(cfg)


def tokens(B: int, T: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


@functools.lru_cache(maxsize=1)
def small_corpus() -> au.TranslationData:
    """40 pairs of the synthetic corpus (built once; treat it as read-only)."""
    return au.load_translation(num_pairs=40)


# ---------------------------------------------------------------------------------------------------- the model


def test_forward_maps_tokens_to_next_token_logits() -> None:
    model = tiny_gpt()
    X = tokens(3, 5)
    assert model(X).shape == (3, 5, V)
    assert model.max_len == CONTEXT and model.vocab_size == V
    state = model.init_state()
    assert isinstance(state, au.LMState) and len(state.caches) == 2 and state.offset == 0
    out = model.step(X, state, need_weights=True)
    assert out.logits.shape == (3, 5, V)
    assert out.attn_weights["self"].shape == (3, 2, H, 5, 5)  # (B, L, H, T, offset + T)
    assert out.state is state and state.offset == 5
    assert all(len(cache) == 5 for cache in state.caches)
    assert model.step(X[:, :1], state).attn_weights == {}  # no weights unless asked for


def test_make_gpt_builds_what_the_config_says() -> None:
    cfg = au.GPTConfig(V, d_model=D, num_heads=H, ffn_hidden=FFN, num_layers=3, max_len=CONTEXT, activation="relu")
    model = au.make_gpt(cfg)
    assert isinstance(model, au.DecoderOnlyTransformer)
    assert len(model.blocks) == 3 and all(isinstance(b, au.PreNormBlock) for b in model.blocks)
    assert all(isinstance(b.ffn.relu, nn.ReLU) for b in model.blocks)
    assert isinstance(tiny_gpt().blocks[0].ffn.relu, nn.GELU)  # GELU is the default
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.d_model = 16  # type: ignore[misc]


def test_changing_a_token_changes_no_earlier_logit() -> None:
    model = tiny_gpt().eval()
    X = tokens(2, 6)
    before = model(X)
    for t in range(6):
        changed = X.clone()
        changed[:, t] = (changed[:, t] + 1) % V
        after = model(changed)
        assert_close(after[:, :t], before[:, :t], rtol=0, atol=0)  # the past cannot see the future, not even a bit
        assert not torch.allclose(after[:, t], before[:, t])  # position t reads its own token


@pytest.mark.parametrize("prefill", [1, 3, 5])
def test_prefill_then_one_token_at_a_time_equals_the_forward_pass(prefill: int) -> None:
    model = tiny_gpt().eval()
    X = tokens(3, 7)
    whole = model(X)
    state = model.init_state()
    pieces = [model.step(X[:, :prefill], state).logits]
    for t in range(prefill, 7):
        pieces.append(model.step(X[:, t : t + 1], state).logits)
    assert state.offset == 7
    assert_close(torch.cat(pieces, dim=1), whole, **F32)


def test_a_chunk_of_two_tokens_after_cached_ones_equals_the_forward_pass() -> None:
    model = tiny_gpt().eval()
    X = tokens(2, 7)
    whole = model(X)
    state = model.init_state()
    first = model.step(X[:, :2], state).logits
    chunk = model.step(X[:, 2:4], state, need_weights=True)  # two new positions see 2 cached ones and each other
    w = chunk.attn_weights["self"]  # (B, L, H, 2, 4)
    assert w.shape == (2, 2, H, 2, 4)
    assert_close(w.sum(-1), torch.ones(2, 2, H, 2), **F32)
    assert (w[..., 0, 3] == 0).all() and (w[..., 1, 3] > 0).all()  # position 2 does not see position 3; 3 sees itself
    rest = [model.step(X[:, t : t + 1], state).logits for t in range(4, 7)]
    assert_close(torch.cat([first, chunk.logits, *rest], dim=1), whole, **F32)


def test_right_padding_leaves_the_real_positions_unchanged() -> None:
    model = tiny_gpt().eval()
    short = tokens(1, 3)
    padded = torch.cat([short, torch.zeros(1, 4, dtype=torch.long)], dim=1)  # three real tokens, four <pad>
    other = tokens(1, 7, seed=1)
    batch = model(torch.cat([padded, other]))
    assert_close(batch[:1, :3], model(short), **F32)
    assert_close(batch[1:], model(other), **F32)  # the rows of a batch do not mix


def test_tied_embeddings_are_one_parameter() -> None:
    tied, untied = tiny_gpt(tie=True), tiny_gpt(tie=False)
    assert tied.lm_head.weight is tied.embed.embedding.weight
    names = [name for name, _ in tied.named_parameters()]
    assert "embed.embedding.weight" in names and "lm_head.weight" not in names  # counted once
    with torch.no_grad():
        tied.embed.embedding.weight[4] += 1.0  # writing one row of the embedding ...
    X = torch.tensor([[1, 2, 3]])
    logits = tied(X)
    # ... moves the output layer's row too: logit 4 is h · E[4]
    assert_close(logits[..., 4], tied.ln_f(_hidden(tied, X)) @ tied.embed.embedding.weight[4], **F32)
    assert untied.lm_head.weight is not untied.embed.embedding.weight
    assert untied.lm_head.weight.data_ptr() != untied.embed.embedding.weight.data_ptr()
    assert "lm_head.weight" in [name for name, _ in untied.named_parameters()]


def _hidden(model: au.DecoderOnlyTransformer, X: torch.Tensor) -> torch.Tensor:
    """The residual stream after the last block (before the final layer norm)."""
    h = model.embed(X)
    for block in model.blocks:
        h, _ = block(h)
    return h


def test_the_tied_weight_gets_the_gradient_of_both_its_uses() -> None:
    model = tiny_gpt(tie=True)
    X = tokens(2, 5)
    model(X).square().mean().backward()
    total = model.embed.embedding.weight.grad
    # The same forward pass with two copies of E, one that reads the tokens and one that writes the logits.
    E_in, E_out = (model.embed.embedding.weight.detach().clone().requires_grad_(True) for _ in range(2))
    h = model.embed.pos_encoding(F.embedding(X, E_in) * math.sqrt(D))
    for block in model.blocks:
        h, _ = block(h)
    (model.ln_f(h) @ E_out.T).square().mean().backward()
    assert E_in.grad.abs().sum() > 0 and E_out.grad.abs().sum() > 0
    assert_close(total, E_in.grad + E_out.grad, **F32)  # one parameter: the gradients of both uses add up


@pytest.mark.parametrize(("num_layers", "tie"), [(1, True), (2, True), (2, False)])
def test_parameter_count_formula(num_layers: int, tie: bool) -> None:
    model = tiny_gpt(num_layers, tie=tie)
    attention = 4 * (D * D + D)  # W_q, W_k, W_v, W_o with biases
    ffn = D * FFN + FFN + FFN * D + D
    layer_norms = 2 * (2 * D)
    expected = V * D + num_layers * (attention + ffn + layer_norms) + 2 * D + (0 if tie else V * D)
    assert sum(p.numel() for p in model.parameters()) == expected


def test_pre_norm_block_written_out_by_hand() -> None:
    block = au.PreNormBlock(D, H, FFN).eval()
    with torch.no_grad():
        for p in block.parameters():  # the layer norms too: their weights start at 1 and their biases at 0
            p.copy_(torch.randn_like(p) * 0.5)
    X = torch.randn(2, 5, D)
    Y, w = block(X, need_weights=True)

    # X + attention(LN(X)), every head by hand
    Z = F.layer_norm(X, (D,), block.ln1.weight, block.ln1.bias)
    mha = block.self_attention
    D_h = D // H

    def heads(x: torch.Tensor) -> torch.Tensor:
        return x.view(2, 5, H, D_h).transpose(1, 2)  # (B, T, D) -> (B, H, T, D_h)

    q, k, v = (heads(F.linear(Z, lin.weight, lin.bias)) for lin in (mha.W_q, mha.W_k, mha.W_v))
    scores = q @ k.transpose(-1, -2) / math.sqrt(D_h)  # (B, H, T, T)
    scores = scores.masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf"))  # the causal mask
    weights = scores.softmax(dim=-1)
    attended = F.linear((weights @ v).transpose(1, 2).reshape(2, 5, D), mha.W_o.weight, mha.W_o.bias)
    X1 = X + attended
    # then X + FFN(LN(X)), with GELU
    Z2 = F.layer_norm(X1, (D,), block.ln2.weight, block.ln2.bias)
    ffn = block.ffn
    expected = X1 + F.linear(F.gelu(F.linear(Z2, ffn.dense1.weight, ffn.dense1.bias)), ffn.dense2.weight,
                             ffn.dense2.bias)
    assert_close(Y, expected, **F32)
    assert_close(w, weights, **F32)
    assert_close(block(X)[0], expected, **F32)  # the fused kernel (no weights asked for) agrees


def test_post_norm_block_written_out_by_hand() -> None:
    block = au.PreNormBlock(D, H, FFN, norm_first=False).eval()
    with torch.no_grad():
        for p in block.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    X = torch.randn(2, 5, D)
    mask = au.causal_mask(5)
    # LN(X + attention(X)), then LN(X + FFN(X)): the sublayers read the unnormalised input
    attended = block.self_attention(X, X, X, attn_mask=mask)[0]
    X1 = F.layer_norm(X + attended, (D,), block.ln1.weight, block.ln1.bias)
    ffn = block.ffn
    hidden = F.linear(F.gelu(F.linear(X1, ffn.dense1.weight, ffn.dense1.bias)), ffn.dense2.weight, ffn.dense2.bias)
    expected = F.layer_norm(X1 + hidden, (D,), block.ln2.weight, block.ln2.bias)
    assert_close(block(X)[0], expected, **F32)
    # the same parameters as a pre-norm block, and a different function of them
    pre = au.PreNormBlock(D, H, FFN).eval()
    pre.load_state_dict(block.state_dict())
    assert not torch.allclose(pre(X)[0], expected, atol=1e-3)


def test_post_norm_model_has_no_final_layer_norm_and_decodes_with_the_cache() -> None:
    cfg = au.GPTConfig(V, d_model=D, num_heads=H, ffn_hidden=FFN, num_layers=2, max_len=CONTEXT, norm_first=False)
    model = au.make_gpt(cfg).eval()
    assert isinstance(model.ln_f, nn.Identity) and all(not b.norm_first for b in model.blocks)
    assert isinstance(au.make_gpt(dataclasses.replace(cfg, norm_first=True)).ln_f, nn.LayerNorm)
    x = tokens(3, 6)
    logits = model(x)
    h = model.embed(x)
    for block in model.blocks:
        h = block(h)[0]
    assert_close(logits, model.lm_head(h), **F32)  # no layer norm after the last block
    state = model.init_state()
    cached = torch.cat([model.step(x[:, :2], state).logits] + [model.step(x[:, t : t + 1], state).logits
                                                                 for t in range(2, 6)], dim=1)
    assert_close(cached, logits, **F32)


@pytest.mark.parametrize("make", [
    lambda: au.GPTConfig(V, norm_first=1),
    lambda: au.PreNormBlock(D, H, FFN, norm_first="post"),
    lambda: au.DecoderOnlyTransformer(V, D, H, FFN, 2, norm_first=None),
])
def test_norm_first_must_be_a_bool(make) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(TypeError, match=r"norm_first: expected a bool, got"):
        make()


@pytest.mark.parametrize(("activation", "function"), [("gelu", F.gelu), ("relu", F.relu)])
def test_ffn_activation_option(activation: str, function) -> None:  # type: ignore[no-untyped-def]
    ffn = au.PositionWiseFFN(D, FFN, activation=activation)
    X = torch.randn(2, 3, D)
    by_hand = F.linear(function(F.linear(X, ffn.dense1.weight, ffn.dense1.bias)), ffn.dense2.weight, ffn.dense2.bias)
    assert_close(ffn(X), by_hand, **F32)
    other = au.PositionWiseFFN(D, FFN, activation="relu" if activation == "gelu" else "gelu")
    other.load_state_dict(ffn.state_dict())  # the same weights, the other function: different outputs
    assert not torch.allclose(other(X), ffn(X))


def test_the_ffn_defaults_to_relu_as_in_the_2017_paper() -> None:
    assert isinstance(au.PositionWiseFFN(D, FFN).relu, nn.ReLU)
    assert au.ACTIVATIONS == ("relu", "gelu")


def test_reorder_state_selects_batch_rows() -> None:
    model = tiny_gpt().eval()
    X = tokens(3, 4)
    state = model.init_state()
    model.step(X, state)
    index = torch.tensor([2, 0, 0])
    picked = model.reorder_state(state, index)
    assert isinstance(picked, au.LMState) and picked.offset == 4
    for old, new in zip(state.caches, picked.caches, strict=True):
        assert torch.equal(new.k, old.k[index]) and torch.equal(new.v, old.v[index])
    nxt = tokens(3, 1, seed=5)
    logits = model.step(nxt, picked).logits  # continue the picked rows
    assert_close(logits[:, 0], model(torch.cat([X[index], nxt], dim=1))[:, -1], **F32)
    assert all(len(c) == 4 for c in state.caches)  # the original state is left as it was
    empty = model.reorder_state(model.init_state(), index)
    assert all(len(c) == 0 for c in empty.caches)


def test_dropout_only_in_training_mode() -> None:
    model = tiny_gpt(dropout=0.5)
    X = tokens(2, 5)
    assert not torch.allclose(model.train()(X), model(X))
    model.eval()
    assert torch.equal(model(X), model(X))


# ---------------------------------------------------------------------------------------------------- bad input

MODEL_ERRORS = [
    ("forward beyond the context", lambda m: m(tokens(1, CONTEXT + 1)), ValueError,
     rf"tokens: expected at most max_len={CONTEXT} positions in all \(the model's context\), got shape "
     rf"\(1, {CONTEXT + 1}\) after 0 positions"),
    ("a step past the context", lambda m: (lambda s: (m.step(tokens(1, 10), s), m.step(tokens(1, 3), s)))(
        m.init_state()), ValueError,
     rf"tokens: expected at most max_len={CONTEXT} positions in all .*got shape \(1, 3\) after 10 positions"),
    ("a state of another type", lambda m: m.step(tokens(1, 2), {}), TypeError,
     r"state: expected an LMState from init_state, got dict"),
    ("an encoder-decoder's state", lambda m: m.step(tokens(1, 2), au.TransformerDecoderState(torch.ones(1, 2, D),
                                                                                             None)), TypeError,
     r"state: expected an LMState from init_state, got TransformerDecoderState"),
    ("a state of another batch size", lambda m: (lambda s: (m.step(tokens(2, 2), s), m.step(tokens(3, 1), s)))(
        m.init_state()), ValueError, r"tokens: expected batch size B=2 \(as the state's\), got shape \(3, 1\)"),
    ("a state with too few caches", lambda m: m.step(tokens(1, 2), au.LMState([au.KVCache()])), ValueError,
     r"state: expected 2 caches \(one per block\), got 1"),
    ("token ids outside the vocabulary", lambda m: m(torch.tensor([[1, V]])), ValueError,
     rf"tokens: expected token ids in \[0, {V}\), got values in \[1, {V}\]"),
    ("float token ids", lambda m: m(torch.ones(1, 2)), TypeError,
     r"tokens: expected an integer tensor \(e.g. torch.long\), got dtype torch.float32"),
]

CONFIG_ERRORS = [
    ("d_model not a multiple of num_heads", lambda: au.GPTConfig(V, d_model=10, num_heads=4), ValueError,
     r"d_model: expected a multiple of num_heads=4, got d_model=10"),
    ("unknown activation", lambda: au.GPTConfig(V, activation="tanh"), ValueError,
     r"activation: expected one of \('relu', 'gelu'\), got 'tanh'"),
    ("tie_embeddings not a bool", lambda: au.GPTConfig(V, tie_embeddings=1), TypeError,
     r"tie_embeddings: expected a bool, got int"),
    ("dropout = 1", lambda: au.GPTConfig(V, dropout=1.0), ValueError,
     r"dropout: expected a float in \[0, 1\), got 1.0"),
    ("vocab_size 0", lambda: au.GPTConfig(0), ValueError, r"vocab_size: expected an int >= 1, got 0"),
    ("make_gpt without a config", lambda: au.make_gpt({"vocab_size": V}), TypeError,
     r"cfg: expected a GPTConfig, got dict"),
    ("FFN activation unknown", lambda: au.PositionWiseFFN(D, FFN, activation="swish"), ValueError,
     r"activation: expected one of \('relu', 'gelu'\), got 'swish'"),
]


@pytest.mark.parametrize(("func", "exc", "pattern"), [c[1:] for c in MODEL_ERRORS], ids=[c[0] for c in MODEL_ERRORS])
def test_bad_model_input_raises_a_clear_error(func, exc: type[Exception], pattern: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(exc) as info:
        func(tiny_gpt().eval())
    assert type(info.value) is exc
    assert re.search(pattern, str(info.value)), f"message {str(info.value)!r} does not match {pattern!r}"


@pytest.mark.parametrize(("func", "exc", "pattern"), [c[1:] for c in CONFIG_ERRORS], ids=[c[0] for c in CONFIG_ERRORS])
def test_bad_config_raises_a_clear_error(func, exc: type[Exception], pattern: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(exc) as info:
        func()
    assert type(info.value) is exc
    assert re.search(pattern, str(info.value)), f"message {str(info.value)!r} does not match {pattern!r}"


# ---------------------------------------------------------------------------------------------------- the loss


def reference_loss(logits: torch.Tensor, targets: torch.Tensor, valid_lens: torch.Tensor, eps: float = 0.0,
                   start: torch.Tensor | None = None) -> torch.Tensor:
    """The loss one counted position at a time: ``(1 - ε) (-log p[y]) + ε mean_v (-log p[v])``."""
    total, count = torch.zeros((), dtype=torch.float64), 0
    for b in range(logits.shape[0]):
        first = 0 if start is None else int(start[b])
        for t in range(first, int(valid_lens[b])):
            log_p = torch.log_softmax(logits[b, t].double(), dim=-1)
            total += (1 - eps) * -log_p[targets[b, t]] + eps * -log_p.mean()
            count += 1
    return (total / count).float()


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3, 0.9])
def test_label_smoothing_equals_torch_cross_entropy_without_padding(eps: float) -> None:
    logits, targets = torch.randn(3, 4, 6), torch.randint(0, 6, (3, 4))
    expected = F.cross_entropy(logits.reshape(-1, 6), targets.reshape(-1), label_smoothing=eps)
    got = au.sequence_cross_entropy(logits, targets, torch.tensor([4, 4, 4]), label_smoothing=eps)
    assert_close(got, expected, **F32)


@pytest.mark.parametrize("eps", [0.0, 0.2])
def test_label_smoothing_with_padding_equals_the_reference(eps: float) -> None:
    logits, targets, lens = torch.randn(3, 5, 6), torch.randint(0, 6, (3, 5)), torch.tensor([5, 2, 1])
    assert_close(au.sequence_cross_entropy(logits, targets, lens, label_smoothing=eps),
                 reference_loss(logits, targets, lens, eps), **F32)
    if eps > 0:  # smoothing changes the number
        assert not torch.isclose(au.sequence_cross_entropy(logits, targets, lens), reference_loss(logits, targets,
                                                                                                 lens, eps))


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_start_excludes_the_positions_before_it(eps: float) -> None:
    logits, targets = torch.randn(3, 5, 6), torch.randint(0, 6, (3, 5))
    lens, start = torch.tensor([5, 4, 3]), torch.tensor([2, 0, 2])
    got = au.sequence_cross_entropy(logits, targets, lens, label_smoothing=eps, start=start)
    assert_close(got, reference_loss(logits, targets, lens, eps, start), **F32)
    assert not torch.isclose(got, au.sequence_cross_entropy(logits, targets, lens, label_smoothing=eps))
    # a row whose start is at or past its length counts nothing (the others still count)
    lens = torch.tensor([3, 4, 3])
    got = au.sequence_cross_entropy(logits, targets, lens, start=torch.tensor([3, 0, 4]))
    assert_close(got, reference_loss(logits[1:2], targets[1:2], lens[1:2]), **F32)


def test_the_loss_gradient_is_finite_and_zero_where_nothing_counts() -> None:
    logits = (torch.randn(2, 5, 6) * 30).requires_grad_(True)  # large logits: the smoothed term must stay finite
    targets, lens, start = torch.randint(0, 6, (2, 5)), torch.tensor([5, 3]), torch.tensor([1, 0])
    au.sequence_cross_entropy(logits, targets, lens, label_smoothing=0.1, start=start).backward()
    grad = logits.grad
    assert torch.isfinite(grad).all()
    assert (grad[0, 0] == 0).all() and (grad[1, 3:] == 0).all()  # before start, and padding
    assert (grad[0, 1:].abs().sum(-1) > 0).all() and (grad[1, :3].abs().sum(-1) > 0).all()


LOSS_ERRORS = [
    ("label_smoothing = 1", {"label_smoothing": 1.0}, ValueError,
     r"label_smoothing: expected a float in \[0, 1\), got 1.0"),
    ("label_smoothing < 0", {"label_smoothing": -0.1}, ValueError,
     r"label_smoothing: expected a float in \[0, 1\), got -0.1"),
    ("label_smoothing a string", {"label_smoothing": "0.1"}, TypeError,
     r"label_smoothing: expected a float in \[0, 1\), got str"),
    ("start = T", {"start": torch.tensor([3, 0])}, ValueError,
     r"start: expected positions in \[0, 3\), got values in \[0, 3\]"),
    ("start < 0", {"start": torch.tensor([-1, 0])}, ValueError,
     r"start: expected positions in \[0, 3\), got values in \[-1, 0\]"),
    ("start at or past every valid length", {"start": torch.tensor([2, 1])}, ValueError,
     r"start: expected at least one counted position in the batch \(start < valid_lens\), got none"),
    ("start of another batch size", {"start": torch.tensor([0, 0, 0])}, ValueError,
     r"start: expected shape \(B,\) with B=2, got shape \(3,\)"),
    ("start of floats", {"start": torch.tensor([0.0, 1.0])}, TypeError,
     r"start: expected an integer tensor \(e.g. torch.long\), got dtype torch.float32"),
]


@pytest.mark.parametrize(("kwargs", "exc", "pattern"), [c[1:] for c in LOSS_ERRORS], ids=[c[0] for c in LOSS_ERRORS])
def test_bad_loss_options_raise_a_clear_error(kwargs: dict, exc: type[Exception], pattern: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(exc) as info:
        au.sequence_cross_entropy(torch.zeros(2, 3, 5), torch.ones(2, 3, dtype=torch.long), torch.tensor([2, 1]),
                                  **kwargs)
    assert type(info.value) is exc
    assert re.search(pattern, str(info.value)), f"message {str(info.value)!r} does not match {pattern!r}"


# ---------------------------------------------------------------------------------------- language-modelling data


def test_translation_sequences_are_scored_from_the_first_french_token() -> None:
    corpus = small_corpus()
    lm = au.make_lm_data(corpus, "translation")
    assert au.SEP in lm.vocab.token_to_idx
    for split in ("train", "valid", "test"):
        inputs, targets, valid_lens, start = lm.tensors(split)
        pairs = corpus.split(split)
        assert inputs.shape == targets.shape == (len(pairs), lm.num_steps)
        assert torch.equal(inputs[:, 1:], targets[:, :-1])  # targets are the inputs shifted by one
        for b, (en, fr) in enumerate(pairs):
            n_en, n_fr = len(en.split()), len(fr.split())
            assert int(valid_lens[b]) == n_en + n_fr + 2  # <bos> en <sep> fr <eos>, less one
            s = int(start[b])
            assert s == n_en + 1 and int(inputs[b, s]) == lm.vocab[au.SEP]
            assert lm.vocab.to_tokens(targets[b, s : valid_lens[b]].tolist()) == [
                *(t if t in lm.vocab.token_to_idx else au.Vocab.UNK for t in fr.split()), au.Vocab.EOS]
            assert int(inputs[b, 0]) == lm.vocab.bos and (targets[b, valid_lens[b] :] == lm.vocab.pad).all()


def test_lm_data_keeps_the_corpus_split() -> None:
    corpus = small_corpus()
    for task in au.LM_TASKS:
        lm = au.make_lm_data(corpus, task)
        assert lm.corpus is corpus and lm.task == task
        for split in ("train", "valid", "test"):
            rows = lm.sequences(split)
            pairs = corpus.split(split)
            if task == "translation":
                assert [" ".join(tok[1 : tok.index(au.SEP)]) for tok, _ in rows] == [en for en, _ in pairs]
            elif task in ("en", "fr"):
                side = 0 if task == "en" else 1
                assert [" ".join(tok[1:-1]) for tok, _ in rows] == [p[side] for p in pairs]
                assert all(start == 0 for _, start in rows)


def test_both_has_two_tagged_rows_per_pair() -> None:
    corpus = small_corpus()
    lm = au.make_lm_data(corpus, "both")
    inputs, targets, valid_lens, start = lm.tensors("train")
    assert inputs.shape[0] == 2 * len(corpus.train)
    tags = lm.vocab.to_tokens(inputs[:, 1].tolist())
    assert tags == ["<en>", "<fr>"] * len(corpus.train)
    assert (start == 1).all()  # the tag is given, not predicted
    en, fr = corpus.train[0]
    assert lm.vocab.to_tokens(targets[1, 1 : valid_lens[1]].tolist()) == [*fr.split(), au.Vocab.EOS]
    assert lm.vocab.to_tokens(targets[0, 1 : valid_lens[0]].tolist()) == [*en.split(), au.Vocab.EOS]
    assert lm.prompt(language="fr") == [lm.vocab.bos, lm.vocab["<fr>"]]


def test_the_loader_cuts_each_batch_to_its_longest_row() -> None:
    lm = au.make_lm_data(small_corpus(), "en")
    batches = list(lm.loader("train", batch_size=8))
    assert sum(b.inputs.shape[0] for b in batches) == len(small_corpus().train)
    for b in batches:
        assert b.inputs.shape[1] == int(b.valid_lens.max()) and b.targets.shape == b.inputs.shape


def test_perplexity_of_a_uniform_model_is_the_vocabulary_size() -> None:
    lm = au.make_lm_data(small_corpus(), "translation")
    model = tiny_gpt(tie=False, vocab_size=len(lm.vocab), max_len=lm.num_steps)
    with torch.no_grad():
        model.lm_head.weight.zero_()  # every logit 0: the uniform distribution
    for split in ("train", "test"):
        assert math.isclose(au.evaluate_perplexity(model, lm, split, batch_size=7), len(lm.vocab), rel_tol=1e-4)
    with torch.no_grad():
        model.lm_head.weight.normal_()  # any other model: a different number
    assert not math.isclose(au.evaluate_perplexity(model, lm), len(lm.vocab), rel_tol=1e-2)


def test_perplexity_is_exp_of_the_mean_loss_over_the_counted_positions() -> None:
    lm = au.make_lm_data(small_corpus(), "translation")
    model = tiny_gpt(vocab_size=len(lm.vocab), max_len=lm.num_steps).eval()
    inputs, targets, valid_lens, start = lm.tensors("valid")
    with torch.no_grad():
        loss = au.sequence_cross_entropy(model(inputs), targets, valid_lens, start=start)
    # batches of 3 rows weigh each by its number of counted tokens: the same as all rows at once
    assert math.isclose(au.evaluate_perplexity(model, lm, "valid", batch_size=3), math.exp(float(loss)), rel_tol=1e-4)


def test_train_lm_lowers_the_loss() -> None:
    lm = au.make_lm_data(small_corpus(), "en")
    model = tiny_gpt(vocab_size=len(lm.vocab), max_len=lm.num_steps)
    before = au.evaluate_perplexity(model, lm, "train")
    history = au.train_lm(model, lm.loader("train", batch_size=16), num_epochs=8, lr=0.01, progress=False)
    assert len(history.epoch_losses) == 8 and len(history.step_losses) == 8 * 2
    assert history.epoch_losses[-1] < 0.9 * history.epoch_losses[0]
    inputs, targets, valid_lens, start = lm.tensors("train")
    assert history.tokens == 8 * int((valid_lens - start).sum())
    assert au.evaluate_perplexity(model, lm, "train") < before
    assert model.training  # train_lm leaves the model in training mode


LM_DATA_ERRORS = [
    ("translation vocabulary without <sep>",
     lambda: au.LMData(task="translation", vocab=au.Vocab([["a"]]), corpus=small_corpus(), num_steps=5), ValueError,
     r"vocab: expected the token\(s\) \['<sep>'\] that the task 'translation' uses, got a vocabulary of 5 tokens "
     r"without them"),
    ("both vocabulary without tags",
     lambda: au.LMData(task="both", vocab=au.Vocab([["a"]]), corpus=small_corpus(), num_steps=5), ValueError,
     r"vocab: expected the token\(s\) \['<en>', '<fr>'\] that the task 'both' uses, got a vocabulary of 5 tokens"),
    ("LMData of an unknown task",
     lambda: au.LMData(task="de", vocab=au.Vocab([["a"]]), corpus=small_corpus(), num_steps=5), ValueError,
     r"task: expected one of \('en', 'fr', 'both', 'translation'\), got 'de'"),
    ("make_lm_data of an unknown task", lambda: au.make_lm_data(small_corpus(), "german"), ValueError,
     r"task: expected one of \('en', 'fr', 'both', 'translation'\), got 'german'"),
    ("make_lm_data of a list", lambda: au.make_lm_data([("a .", "b .")]), TypeError,
     r"corpus: expected a TranslationData from load_translation, got list"),
    ("make_lm_data num_steps 0", lambda: au.make_lm_data(small_corpus(), "en", num_steps=0), ValueError,
     r"num_steps: expected an int >= 1, got 0"),
    ("both prompt without a language", lambda: au.make_lm_data(small_corpus(), "both").prompt(), ValueError,
     r"language: expected 'en' or 'fr' for the task 'both', got None"),
    ("translation prompt without a sentence", lambda: au.make_lm_data(small_corpus(), "translation").prompt(),
     TypeError, r"sentence: expected the English sentence to translate, got NoneType"),
    ("train_lm of a plain module", lambda: au.train_lm(nn.Linear(2, 2), [], num_epochs=1, lr=0.1), TypeError,
     r"model: expected a language model \(an nn.Module with a vocab_size\), got Linear"),
    ("train_lm with inputs outside the vocabulary",
     lambda: au.train_lm(tiny_gpt(), [(torch.tensor([[1, V]]), torch.tensor([[1, 2]]), torch.tensor([2]),
                                      torch.tensor([0]))], num_epochs=1, lr=0.1, progress=False), ValueError,
     rf"inputs: expected token ids in \[0, {V}\) \(the model's vocabulary\), got values in \[1, {V}\]"),
    ("perplexity of a model smaller than the vocabulary",
     lambda: au.evaluate_perplexity(tiny_gpt(), au.make_lm_data(small_corpus(), "en")), ValueError,
     rf"data.vocab: expected at most {V} tokens \(the size of the model's embedding\), got a vocabulary of \d+"),
]


@pytest.mark.parametrize(("func", "exc", "pattern"), [c[1:] for c in LM_DATA_ERRORS],
                         ids=[c[0] for c in LM_DATA_ERRORS])
def test_bad_lm_data_raises_a_clear_error(func, exc: type[Exception], pattern: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(exc) as info:
        func()
    assert type(info.value) is exc
    assert re.search(pattern, str(info.value)), f"message {str(info.value)!r} does not match {pattern!r}"
