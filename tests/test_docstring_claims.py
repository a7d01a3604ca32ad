"""What the public docstrings promise, checked on many inputs (hypothesis) where a doctest shows only one.

Each test names the docstring it holds to its word. Where a docstring disagreed with the code, the docstring or the
code was fixed, and the test here is the one that caught it:

* ``alibi_slopes`` said "decreasing": not when ``H`` is not a power of two (Press et al.'s rule interleaves);
* ``PositionWiseFFN`` said "ReLU": it takes GELU too;
* ``DecoderOnlyTransformer`` said "sinusoidal positions": it takes learned ones, RoPE, ALiBi or none;
* ``sampling_probs`` said "the ``top_k`` most likely tokens": ties with the k-th are kept, and ``top_p = 1`` ("every
  token") dropped tokens to the rounding of the running sums;
* ``KVCache.append`` said it refuses values of another dtype or device than the cache: it checked only the keys.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

import attn_utils as au

SETTINGS = settings(max_examples=60, deadline=None)


def is_power_of_two(n: int) -> bool:
    return n & (n - 1) == 0


@SETTINGS
@given(H=st.integers(1, 80))
def test_alibi_slopes_are_distinct_in_0_1_and_decreasing_for_powers_of_two(H: int) -> None:
    slopes = au.alibi_slopes(H)
    assert slopes.shape == (H,) and slopes.dtype == torch.float32
    assert ((slopes > 0) & (slopes < 1)).all()
    assert len(set(slopes.tolist())) == H
    decreasing = bool((slopes[1:] < slopes[:-1]).all())
    assert decreasing == is_power_of_two(H)
    below = 2 ** int(math.log2(H))
    assert torch.equal(slopes[:below], au.alibi_slopes(below))  # the largest power of two below H comes first


@pytest.mark.parametrize("activation", au.ACTIVATIONS)
def test_the_position_wise_ffn_applies_its_own_activation(activation: str) -> None:
    ffn = au.PositionWiseFFN(4, 8, activation)
    x = torch.randn(2, 3, 4)
    f = torch.relu if activation == "relu" else torch.nn.functional.gelu
    assert_close(ffn(x), ffn.dense2(f(ffn.dense1(x))))


@pytest.mark.parametrize("positional", au.POSITIONAL)
def test_a_decoder_only_model_adds_positions_only_as_its_scheme_says(positional: str) -> None:
    model = au.make_gpt(au.GPTConfig(10, d_model=8, num_heads=2, ffn_hidden=8, num_layers=1, positional=positional))
    tokens = torch.tensor([[1, 2, 3]])
    scaled = model.embed.embedding(tokens) * math.sqrt(8)  # embedding × √D
    added = model.embed(tokens) - scaled  # (1, 3, 8): what the inputs get for their positions
    if positional == "sinusoidal":
        assert_close(added[0], au.sinusoidal_encoding(3, 8))
    elif positional == "learned":
        assert_close(added[0], model.embed.pos_embedding.weight[:3])
    else:  # RoPE and ALiBi act inside the attention; "none" has only the causal mask
        assert (added == 0).all()


@SETTINGS
@given(
    V=st.integers(2, 12),
    k=st.integers(1, 12),
    levels=st.integers(1, 4),
    seed=st.integers(0, 2**16),
    temperature=st.sampled_from([1e-38, 1e-6, 0.3, 1.0, 7.0, 1e6]),
)
def test_sampling_probs_keep_the_top_k_and_their_ties_and_sum_to_one(
    V: int, k: int, levels: int, seed: int, temperature: float
) -> None:
    k = min(k, V)
    g = torch.Generator().manual_seed(seed)
    logits = torch.randint(0, levels, (3, V), generator=g).float() * 2.5  # few distinct values: many ties
    probs = au.sampling_probs(logits, temperature=temperature, top_k=k)
    kth = logits.topk(k, dim=-1).values[:, -1:]
    assert torch.isfinite(probs).all()
    assert_close(probs.sum(-1), torch.ones(3))
    assert ((probs > 0) <= (logits >= kth)).all()  # nothing below the k-th is kept ...
    assert ((probs > 0).sum(-1) >= k).all() or temperature < 1e-5  # ... and at least k, unless T -> 0 keeps the top


@SETTINGS
@given(V=st.integers(2, 3000), scale=st.floats(0.1, 20.0), seed=st.integers(0, 2**16))
def test_top_p_of_one_keeps_every_token(V: int, scale: float, seed: int) -> None:
    logits = scale * torch.randn(2, V, generator=torch.Generator().manual_seed(seed))
    assert torch.equal(au.sampling_probs(logits, top_p=1.0) > 0, au.sampling_probs(logits) > 0)


def test_kv_cache_append_refuses_values_unlike_its_keys() -> None:
    cache = au.KVCache()
    with pytest.raises(ValueError, match=r"kv_cache.append: v: expected dtype torch.float32 on cpu \(as k\)"):
        cache.append(torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4, dtype=torch.float16))
    assert len(cache) == 0  # nothing was added


# --------------------------------------------------------------------------- claims that were true: keep them so


@SETTINGS
@given(text=st.text(max_size=40))
def test_preprocessing_twice_changes_nothing(text: str) -> None:
    # translate and encode_sentences take "raw or preprocessed" sentences, and preprocess them again
    once = au.preprocess_text(text)
    assert au.preprocess_text(once) == once


words = st.lists(st.sampled_from(["le", "chat", "noir", "dort", ".", "un", "chien"]), max_size=8)


@SETTINGS
@given(pred=words, label=words.filter(bool), k=st.integers(1, 4))
def test_bleu_is_in_0_1_and_1_for_the_label_itself(pred: list[str], label: list[str], k: int) -> None:
    assert 0.0 <= au.bleu(pred, label, k) <= 1.0
    assert au.bleu(label, label, k) == 1.0
    assert au.bleu([], label, k) == 0.0


@SETTINGS
@given(pairs=st.lists(st.tuples(words, words.filter(lambda w: len(w) >= 4)), min_size=1, max_size=5))
def test_corpus_bleu_is_in_0_1_and_1_for_the_references(pairs: list[tuple[list[str], list[str]]]) -> None:
    preds, refs = [p for p, _ in pairs], [r for _, r in pairs]
    assert 0.0 <= au.corpus_bleu(preds, refs) <= 1.0
    assert au.corpus_bleu(refs, refs) == pytest.approx(1.0)


@SETTINGS
@given(sentences=st.lists(st.lists(st.sampled_from("abcdefg"), max_size=6), max_size=6), min_freq=st.integers(1, 3))
def test_vocab_ids_specials_first_then_most_frequent_ties_alphabetical(sentences: list[list[str]],
                                                                       min_freq: int) -> None:
    vocab = au.Vocab(sentences, min_freq)
    assert vocab.idx_to_token[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]
    counts = {t: sum(s.count(t) for s in sentences) for s in sentences for t in s}
    kept = vocab.idx_to_token[4:]
    assert set(kept) == {t for t, c in counts.items() if c >= min_freq}
    assert kept == sorted(kept, key=lambda t: (-counts[t], t))
    assert vocab["zzz"] == vocab.unk


@SETTINGS
@given(ids=st.lists(st.integers(0, 50), max_size=10), num_steps=st.integers(1, 12))
def test_truncate_pad_returns_exactly_num_steps_ids(ids: list[int], num_steps: int) -> None:
    out = au.truncate_pad(ids, num_steps, 0)
    assert len(out) == num_steps and out[: min(len(ids), num_steps)] == ids[:num_steps]


@SETTINGS
@given(T_q=st.integers(1, 9), extra=st.integers(0, 6), window=st.integers(1, 20))
def test_a_window_at_least_T_k_is_the_causal_mask(T_q: int, extra: int, window: int) -> None:
    T_k = T_q + extra
    mask = au.sliding_window_mask(T_q, T_k, window=window)
    assert (mask <= au.causal_mask(T_q, T_k)).all()  # a window only removes keys
    assert mask.sum(-1).le(window).all() and mask.any(-1).all()  # at most `window` keys, itself always
    if window >= T_k:
        assert torch.equal(mask, au.causal_mask(T_q, T_k))


@SETTINGS
@given(B=st.integers(1, 3), T_q=st.integers(1, 4), T_k=st.integers(1, 6), seed=st.integers(0, 2**16),
       minus_inf=st.floats(0.0, 0.6))
def test_masked_softmax_zeros_masked_keys_and_rows_sum_to_one_or_zero(B: int, T_q: int, T_k: int, seed: int,
                                                                      minus_inf: float) -> None:
    g = torch.Generator().manual_seed(seed)
    scores = 30 * torch.randn(B, T_q, T_k, generator=g)
    scores[torch.rand(B, T_q, T_k, generator=g) < minus_inf] = float("-inf")  # -inf masks its key
    lens = torch.randint(0, T_k + 1, (B, T_q), generator=g)
    weights = au.masked_softmax(scores, lens)
    valid = au.sequence_mask(lens, T_k) & (scores > float("-inf"))
    assert torch.isfinite(weights).all()
    assert (weights[~valid] == 0).all()
    sums = weights.sum(-1)
    has_key = valid.any(-1)
    assert_close(sums[has_key], torch.ones_like(sums[has_key]))
    assert (sums[~has_key] == 0).all()


@SETTINGS
@given(m=st.integers(0, 300), n=st.integers(0, 300), shift=st.integers(0, 300), seed=st.integers(0, 2**16))
def test_rope_scores_depend_only_on_the_offset(m: int, n: int, shift: int, seed: int) -> None:
    q, k = torch.randn(2, 8, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    score = (au.apply_rope(q[None], offset=m) * au.apply_rope(k[None], offset=n)).sum()
    shifted = (au.apply_rope(q[None], offset=m + shift) * au.apply_rope(k[None], offset=n + shift)).sum()
    assert_close(score, shifted, rtol=1e-9, atol=1e-9)
