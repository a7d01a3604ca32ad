"""Attention bugs that people really made, reported in public issue trackers, each written again from scratch in the
signature of a clinic check, with the bug code the clinic should name.

Each entry cites its source (repository and issue or pull-request number). The code is not copied: it reproduces the
reported mistake in the check's signature. ``REAL_BUGS`` holds (source, check name, expected code, function);
``COMPOSITES`` two mistakes together (constructed: pairs of the real mistakes above), with their two codes;
``CORRECT`` correct implementations in other styles, which must pass.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

import attn_utils as au


def _lens_mask(scores, valid_lens):
    lens = valid_lens[:, None, None] if valid_lens.dim() == 1 else valid_lens[..., None]
    return torch.arange(scores.shape[-1]) < lens  # True on the valid keys


def _masked(scores, valid_lens, fill=-1e9):
    if valid_lens is None:
        return scores
    return scores.masked_fill(~_lens_mask(scores, valid_lens), fill)


def _zero_empty(weights, scores, valid_lens):
    if valid_lens is None:
        return weights
    return weights.masked_fill(~_lens_mask(scores, valid_lens).any(-1, keepdim=True), 0.0)


# --------------------------------------------------------------------------------------------------------------------
# Scale


def cntkx_10(queries, keys, values, valid_lens=None):
    # delzac/cntkx#10: the scaled dot product divides by d_k, the square root never applied
    scores = queries @ keys.transpose(1, 2) / queries.shape[-1]
    return au.masked_softmax(scores, valid_lens) @ values


def perceiver_io_9(queries, keys, values, valid_lens=None):
    # esceptico/perceiver-io#9: scale = d ** -0.5, then the scores are divided by it
    scale = queries.shape[-1] ** -0.5
    return au.masked_softmax(queries @ keys.transpose(1, 2) / scale, valid_lens) @ values


def tiny_transformers_71(queries, keys, values, valid_lens=None):
    # PAIR-code/tiny-transformers#71: the raw scores are never divided by the square root of the dimension
    return au.masked_softmax(queries @ keys.transpose(1, 2), valid_lens) @ values


def mlc_llm_3426(queries, keys, values, valid_lens=None, sm_scale=1.0):
    # mlc-ai/mlc-llm#3426: a fallback path calls attention with its default sm_scale=1.0
    return au.masked_softmax(queries @ keys.transpose(1, 2) * sm_scale, valid_lens) @ values


class _MHA(torch.nn.Module):
    """Multi-head attention in the 4-D layout, with the scale's divisor as a parameter."""

    def __init__(self, d_model, num_heads, divisor=None, softmax_dim=-1):
        super().__init__()
        self.H, self.divisor, self.softmax_dim = num_heads, divisor, softmax_dim
        self.W_q, self.W_k, self.W_v, self.W_o = (torch.nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, queries, keys, values, valid_lens=None):
        B, T_q, D = queries.shape
        T_k, D_h = keys.shape[1], D // self.H

        def split(x):
            return x.reshape(B, -1, self.H, D_h).transpose(1, 2)

        q, k, v = split(self.W_q(queries)), split(self.W_k(keys)), split(self.W_v(values))
        divisor = math.sqrt(D_h) if self.divisor is None else self.divisor(D, D_h)
        scores = q @ k.transpose(-2, -1) / divisor  # (B, H, T_q, T_k)
        if valid_lens is not None:
            lens = valid_lens[:, None, None, None] if valid_lens.dim() == 1 else valid_lens[:, None, :, None]
            mask = torch.arange(T_k) < lens
            scores = scores.masked_fill(~mask, -1e9)
            weights = torch.softmax(scores, dim=self.softmax_dim).masked_fill(~mask.any(-1, keepdim=True), 0.0)
        else:
            weights = torch.softmax(scores, dim=self.softmax_dim)
        return self.W_o((weights @ v).transpose(1, 2).reshape(B, T_q, D))


class DL4Proteins_12(_MHA):
    # Graylab/DL4Proteins-notebooks#12: wei = q @ k.T * C ** -0.5, C the embedding width, not the head's
    def __init__(self, d_model, num_heads):
        super().__init__(d_model, num_heads, divisor=lambda D, D_h: math.sqrt(D))


class ViT_CIFAR_11(_MHA):
    # omihub777/ViT-CIFAR#11: self.sqrt_d = self.feats ** 0.5, the total width, instead of the head width
    def __init__(self, d_model, num_heads):
        super().__init__(d_model, num_heads, divisor=lambda D, D_h: D**0.5)


class fastNLP_254(_MHA):
    # FudanNLP/fastNLP#254: softmax(dim=2), right for 3-D scores, runs over the queries of 4-D (B, H, T_q, T_k)
    def __init__(self, d_model, num_heads):
        super().__init__(d_model, num_heads, softmax_dim=2)


# --------------------------------------------------------------------------------------------------------------------
# Softmax axis and masks


def pytorch_nlp_2(scores, valid_lens):
    # PetrochukM/PyTorch-NLP#2: nn.Softmax(dim=0) over the flattened (batch * queries) axis
    B, T_q, T_k = scores.shape
    weights = torch.softmax(_masked(scores, valid_lens).reshape(B * T_q, T_k), dim=0).reshape(B, T_q, T_k)
    return _zero_empty(weights, scores, valid_lens)


def vision_transformer_1(scores, valid_lens):
    # nerminnuraydogan/vision-transformer#1: the attention softmax is taken over the query axis
    return _zero_empty(torch.softmax(_masked(scores, valid_lens), dim=1), scores, valid_lens)


def llms_from_scratch_rs_30(queries, keys, values, valid_lens=None):
    # nerdai/llms-from-scratch-rs#30: the attention weights' softmax runs over the wrong dimension
    scores = _masked(queries @ keys.transpose(1, 2) / math.sqrt(queries.shape[-1]), valid_lens)
    return _zero_empty(torch.softmax(scores, dim=1), scores, valid_lens) @ values


def minimind_v_76(scores, valid_lens):
    # jingyaogong/minimind-v#76: no attention mask is set; padding is only left out of the loss
    return torch.softmax(scores, dim=-1)


def bert_nli_3(scores, valid_lens):
    # yg211/bert_nli#3: the attention masks are initialised with every value 1, padding included
    mask = torch.ones_like(scores, dtype=torch.bool)
    return torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1)


def mlverse_torch_1205(scores, valid_lens):
    # mlverse/torch#1205: a float padding mask (-inf on padding) is only applied when it is boolean, so it is ignored
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    float_mask = torch.zeros_like(scores).masked_fill(~_lens_mask(scores, valid_lens), -math.inf)
    if float_mask.dtype == torch.bool:
        scores = scores.masked_fill(float_mask, -math.inf)
    return torch.softmax(scores, dim=-1)


def torchTextClassifiers_92(queries, keys, values, valid_lens=None):
    # InseeFrLab/torchTextClassifiers#92: the padding mask (True = padding) is passed to scaled_dot_product_attention,
    # whose boolean attn_mask means True = attend: the mask is inverted
    if valid_lens is None:
        return F.scaled_dot_product_attention(queries, keys, values)
    padding = ~_lens_mask(queries @ keys.transpose(1, 2), valid_lens)
    padding = padding.expand(-1, queries.shape[1], -1)
    out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=padding)
    return torch.nan_to_num(out)


def TransformerTranslation_6(scores, valid_lens):
    # mlwithme/TransformerTranslation#6: masked_fill(key_padding_mask, -inf) where the mask is 1 on the real tokens
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    keep = _lens_mask(scores, valid_lens)
    return torch.nan_to_num(torch.softmax(scores.masked_fill(keep, -math.inf), dim=-1))


# --------------------------------------------------------------------------------------------------------------------
# Causal masks and the KV cache


def executorch_21749(T_q, T_k):
    # pytorch/executorch#21749: a chunked prefill uses is_causal's mask, aligned top-left when T_q < T_k
    return torch.ones(T_q, T_k, dtype=torch.bool).tril()


def onnx_8068(T_q, T_k):
    # onnx/onnx#8068: the Attention operator's is_causal frontier is top-left aligned: query i attends keys j <= i
    i, j = torch.arange(T_q)[:, None], torch.arange(T_k)[None, :]
    return j <= i


def _kv_step(is_causal):
    def step(mha, x_t, cache):
        B, _, D = x_t.shape
        H = mha.num_heads

        def split(x):
            return x.reshape(B, -1, H, D // H).transpose(1, 2)

        q = split(mha.W_q(x_t))
        k, v = split(mha.W_k(x_t)), split(mha.W_v(x_t))
        cache["k"] = k if cache["k"] is None else torch.cat([cache["k"], k], dim=2)
        cache["v"] = v if cache["v"] is None else torch.cat([cache["v"], v], dim=2)
        out = F.scaled_dot_product_attention(q, cache["k"], cache["v"], is_causal=is_causal)
        return mha.W_o(out.transpose(1, 2).reshape(B, 1, D))

    return step


pytorch_144858 = _kv_step(True)  # pytorch/pytorch#144858: is_causal with a KV cache: one query sees the first key
lag_llama_81 = _kv_step(True)  # time-series-foundation-models/lag-llama#81: is_causal=True in cached decoding


# --------------------------------------------------------------------------------------------------------------------
# Positional encodings


def _pe_columns(max_len, d_model, exponent, base=10000.0):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    P = torch.zeros(max_len, d_model, dtype=torch.float64)
    for c in range(d_model):
        angle = pos[:, 0] / base ** exponent(c, d_model)
        P[:, c] = torch.sin(angle) if c % 2 == 0 else torch.cos(angle)
    return P.float()


def aiayn_pytorch_32(max_len, d_model):
    # jadore801120/attention-is-all-you-need-pytorch#32: pos / 10000^(2i/d) with i the column, not the pair
    return _pe_columns(max_len, d_model, lambda c, d: 2 * c / d)


def SamLynnEvans_25(max_len, d_model):
    # SamLynnEvans/Transformer#25: i steps by 2, sin uses 10000^(2i/d) and cos 10000^(2(i+1)/d)
    return _pe_columns(max_len, d_model, lambda c, d: 2 * c / d)


def maxjcohen_62(max_len, d_model):
    # maxjcohen/transformer#62: base 1000 instead of 10000, and the cosines' exponents start at 1
    return _pe_columns(max_len, d_model, lambda c, d: (c - c % 2) / d if c % 2 == 0 else c / d, base=1000.0)


def DeepCTR_379(max_len, d_model):
    # shenweichen/DeepCTR#379: pos / 10000^(2i/d) for every column i, then sin on the even, cos on the odd columns
    return _pe_columns(max_len, d_model, lambda c, d: 2 * c / d)


def pytorch_advanced_79(max_len, d_model):
    # YutaroOgawa/pytorch_advanced#79: the cosine column uses 10000^(2(i+1)/d) (i the even column)
    return _pe_columns(max_len, d_model, lambda c, d: 2 * c / d if c % 2 == 0 else 2 * (c - 1 + 1) / d)


def transformer_tensorflow_6(max_len, d_model):
    # DongjunLee/transformer-tensorflow#6: the denominator uses 2 i / d with i the column instead of 2 (i // 2) / d
    return _pe_columns(max_len, d_model, lambda c, d: 2 * c / d)


def allennlp_2993(max_len, d_model):
    # allenai/allennlp#2993: torch.cat([sin, cos]): sines in the first half, cosines in the second (tensor2tensor)
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    angles = pos / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    return torch.cat([angles.sin(), angles.cos()], dim=1).float()


def WaveGrad_12(max_len, d_model):
    # ivanvovk/WaveGrad#12: exponents ** 1e-4 instead of 1e-4 ** exponents (with the sines and cosines concatenated)
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    exponents = (torch.arange(d_model // 2, dtype=torch.float64) / (d_model // 2)) ** 1e-4
    angles = pos * exponents
    return torch.cat([angles.sin(), angles.cos()], dim=1).float()


def _rope(x, pairs, freqs):
    T, D = x.shape[-2], x.shape[-1]
    inv = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    angles = torch.arange(T, dtype=torch.float64)[:, None] * inv  # (T, D/2)
    emb = angles.repeat_interleave(2, dim=-1) if freqs == "interleave" else torch.cat([angles, angles], dim=-1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    if pairs == "halves":
        x1, x2 = x[..., : D // 2], x[..., D // 2 :]
        rotated = torch.cat([-x2, x1], dim=-1)
    else:
        rotated = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)
    return x * cos + rotated * sin


def how_to_train_your_gpt_6(x):
    # raiyanyahya/how-to-train-your-gpt#6: emb = freqs.repeat_interleave(2) (neighbour pairs), rotate_half splits
    # at the middle (pairs (j, j + D/2)): the two conventions mixed
    return _rope(x, "halves", "interleave")


def gpt_neox_834(x):
    # EleutherAI/gpt-neox#834: rotate_half turns (j, j + D/2), not the neighbours of the RoFormer formula
    return _rope(x, "halves", "halves")


def nanochat_264(x):
    # karpathy/nanochat#264: half-split pairing (i, i + D/2) with frequencies built for interleaved pairs
    return _rope(x, "halves", "halves")


def vllm_ascend_12820(x):
    # vllm-project/vllm-ascend#12820: Neox-style (chunk-half) rotation where GPT-J style (interleaved) was needed
    return _rope(x, "halves", "halves")


# --------------------------------------------------------------------------------------------------------------------
# ALiBi, grouped-query attention


def mlx_343(num_heads):
    # ml-explore/mlx#343 (fixed in ml-explore/mlx#3071): (2**8) ** (-i / H) for every H, powers of two or not
    x = (2**8) ** (1 / num_heads)
    return x ** -torch.arange(1, num_heads + 1, dtype=torch.float64)


def aprender_2143(num_heads):
    # paiml/aprender#2143: 2^(-8 h / n) with h from 0, so the first head's slope is 1
    return torch.tensor([2.0 ** (-8 * h / num_heads) for h in range(num_heads)])


def _gqa(index):
    def fn(q, k, v):
        H, G = q.shape[1], k.shape[1]
        idx = index(H, G)
        return F.scaled_dot_product_attention(q, k[:, idx], v[:, idx])

    return fn


axlearn_842 = _gqa(lambda H, G: torch.arange(H) % G)  # apple/axlearn#842: tiling [0, 1, 0, 1], not [0, 0, 1, 1]
onnx_7274 = _gqa(lambda H, G: torch.arange(H) % G)  # onnx/onnx#7274: Tile where torch uses repeat_interleave


# --------------------------------------------------------------------------------------------------------------------
# Sampling


def _top_p(logits, temperature, top_k, top_p, keep_rule):
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_k is not None:
        kth = probs.topk(top_k, dim=-1).values[:, -1:]
        probs = torch.where(probs >= kth, probs, torch.zeros_like(probs))
        probs = probs / probs.sum(-1, keepdim=True)
    if top_p is not None:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        keep = keep_rule(sorted_p.cumsum(-1), sorted_p, top_p)
        probs = probs * torch.zeros_like(keep).scatter(-1, order, keep)
    return probs / probs.sum(-1, keepdim=True)


def fish_speech_1171(logits, temperature=1.0, top_k=None, top_p=None):
    # fishaudio/fish-speech#1171: remove = cum_probs > top_p drops the token that crosses the threshold
    return _top_p(logits, temperature, top_k, top_p, lambda cum, p, t: ~(cum > t))


def esm_360(logits, temperature=1.0, top_k=None, top_p=None):
    # Biohub/esm#360: top_p_mask = cumsum <= top_p
    return _top_p(logits, temperature, top_k, top_p, lambda cum, p, t: cum <= t)


def C2C_21(logits, temperature=1.0, top_k=None, top_p=None):
    # thu-nics/C2C#21: keeps the sorted tokens whose cumulative probability is <= top_p
    return _top_p(logits, temperature, top_k, top_p, lambda cum, p, t: cum <= t)


def reasoning_from_scratch_164(logits, temperature=1.0, top_k=None, top_p=None):
    # rasbt/reasoning-from-scratch#164: keep = cumprobas <= top_p
    return _top_p(logits, temperature, top_k, top_p, lambda cum, p, t: cum <= t)


def mesh_transformer_jax_164(logits, temperature=1.0, top_k=None, top_p=None):
    # kingoflolz/mesh-transformer-jax#164: remove where index > top_k instead of >= top_k: keeps top_k + 1 tokens
    k = None if top_k is None else min(top_k + 1, logits.shape[-1])
    return au.sampling_probs(logits, temperature=temperature, top_k=k, top_p=top_p)


def PaLM_rlhf_60(logits, temperature=1.0, top_k=None, top_p=None):
    # lucidrains/PaLM-rlhf-pytorch#60: the filtered sorted values are scattered back with sorted_indices[sorted_indices]
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_k is not None:
        kth = probs.topk(top_k, dim=-1).values[:, -1:]
        probs = torch.where(probs >= kth, probs, torch.zeros_like(probs))
        probs = probs / probs.sum(-1, keepdim=True)
    if top_p is not None:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        kept = torch.where(sorted_p.cumsum(-1) - sorted_p < top_p, sorted_p, torch.zeros_like(sorted_p))
        probs = torch.zeros_like(probs).scatter(-1, order.gather(-1, order), kept)
    return probs / probs.sum(-1, keepdim=True)


# --------------------------------------------------------------------------------------------------------------------
# Pooling


def transformers_24979(hidden, attention_mask):
    # huggingface/transformers#24979 (issue #24265): sequence_lengths = (input_ids != pad).sum(-1) - 1, wrong when
    # the padding is on the left
    return hidden[torch.arange(hidden.shape[0]), attention_mask.sum(-1) - 1]


def CLoud_5(hidden, attention_mask):
    # zankner/CLoud#5: the last token's index from the number of real tokens: right padding assumed
    return hidden[torch.arange(hidden.shape[0]), attention_mask.sum(1) - 1]


def peft_3620(hidden, attention_mask):
    # huggingface/peft#3620: _pool_last_token uses attention_mask.sum(dim=1) - 1
    return hidden[torch.arange(hidden.shape[0]), attention_mask.sum(dim=1) - 1]


def sentence_transformers_2111(hidden, attention_mask):
    # huggingface/sentence-transformers#2111: argmin(mask) - 1 finds the last real token, but a row without padding
    # has argmin 0, and the first token is taken
    values, first_zero = attention_mask.min(1)
    index = torch.where(values == 0, first_zero - 1, torch.zeros_like(first_zero))
    return hidden[torch.arange(hidden.shape[0]), index]


def CoursIA_15045(hidden, attention_mask):
    # jsboige/CoursIA#15045: last_hidden_state.mean(dim=1) without the attention mask
    return hidden.mean(dim=1)


def BERT_whitening_13(hidden, attention_mask):
    # autoliuweijie/BERT-whitening-pytorch#13: avg pooling of the hidden states, padding positions included
    return hidden.mean(dim=1)


REAL_BUGS = [
    ("delzac/cntkx#10", "check_dot_product_attention", "scale-by-d", cntkx_10),
    ("esceptico/perceiver-io#9", "check_dot_product_attention", "scale-inverted", perceiver_io_9),
    ("PAIR-code/tiny-transformers#71", "check_dot_product_attention", "missing-scale", tiny_transformers_71),
    ("mlc-ai/mlc-llm#3426", "check_dot_product_attention", "missing-scale", mlc_llm_3426),
    ("Graylab/DL4Proteins-notebooks#12", "check_multihead_attention", "scale-by-d-model", DL4Proteins_12),
    ("omihub777/ViT-CIFAR#11", "check_multihead_attention", "scale-by-d-model", ViT_CIFAR_11),
    ("FudanNLP/fastNLP#254", "check_multihead_attention", "softmax-wrong-axis", fastNLP_254),
    ("PetrochukM/PyTorch-NLP#2", "check_masked_softmax", "softmax-wrong-axis", pytorch_nlp_2),
    ("nerminnuraydogan/vision-transformer#1", "check_masked_softmax", "softmax-wrong-axis", vision_transformer_1),
    ("nerdai/llms-from-scratch-rs#30", "check_dot_product_attention", "softmax-wrong-axis", llms_from_scratch_rs_30),
    ("jingyaogong/minimind-v#76", "check_masked_softmax", "valid-lens-ignored", minimind_v_76),
    ("yg211/bert_nli#3", "check_masked_softmax", "valid-lens-ignored", bert_nli_3),
    ("mlverse/torch#1205", "check_masked_softmax", "valid-lens-ignored", mlverse_torch_1205),
    ("InseeFrLab/torchTextClassifiers#92", "check_dot_product_attention", "inverted-mask", torchTextClassifiers_92),
    ("mlwithme/TransformerTranslation#6", "check_masked_softmax", "inverted-mask", TransformerTranslation_6),
    ("pytorch/executorch#21749", "check_causal_mask", "causal-top-left", executorch_21749),
    ("onnx/onnx#8068", "check_causal_mask", "causal-top-left", onnx_8068),
    ("pytorch/pytorch#144858", "check_kv_cache_step", "kv-cache-top-left-mask", pytorch_144858),
    ("time-series-foundation-models/lag-llama#81", "check_kv_cache_step", "kv-cache-top-left-mask", lag_llama_81),
    ("jadore801120/attention-is-all-you-need-pytorch#32", "check_positional_encoding", "pe-wrong-exponent",
     aiayn_pytorch_32),
    ("SamLynnEvans/Transformer#25", "check_positional_encoding", "pe-wrong-exponent", SamLynnEvans_25),
    ("maxjcohen/transformer#62", "check_positional_encoding", "pe-wrong-exponent", maxjcohen_62),
    ("shenweichen/DeepCTR#379", "check_positional_encoding", "pe-wrong-exponent", DeepCTR_379),
    ("YutaroOgawa/pytorch_advanced#79", "check_positional_encoding", "pe-wrong-exponent", pytorch_advanced_79),
    ("DongjunLee/transformer-tensorflow#6", "check_positional_encoding", "pe-wrong-exponent",
     transformer_tensorflow_6),
    ("allenai/allennlp#2993", "check_positional_encoding", "pe-halves-layout", allennlp_2993),
    ("ivanvovk/WaveGrad#12", "check_positional_encoding", "pe-wrong-exponent", WaveGrad_12),
    ("raiyanyahya/how-to-train-your-gpt#6", "check_rope", "rope-wrong-pairing", how_to_train_your_gpt_6),
    ("EleutherAI/gpt-neox#834", "check_rope", "rope-wrong-pairing", gpt_neox_834),
    ("karpathy/nanochat#264", "check_rope", "rope-wrong-pairing", nanochat_264),
    ("vllm-project/vllm-ascend#12820", "check_rope", "rope-wrong-pairing", vllm_ascend_12820),
    ("ml-explore/mlx#343", "check_alibi_slopes", "alibi-slopes-not-power-of-two", mlx_343),
    ("paiml/aprender#2143", "check_alibi_slopes", "alibi-slopes-off-by-one", aprender_2143),
    ("apple/axlearn#842", "check_grouped_query_attention", "gqa-heads-tiled", axlearn_842),
    ("onnx/onnx#7274", "check_grouped_query_attention", "gqa-heads-tiled", onnx_7274),
    ("fishaudio/fish-speech#1171", "check_sampling", "top-p-excludes-crossing", fish_speech_1171),
    ("Biohub/esm#360", "check_sampling", "top-p-excludes-crossing", esm_360),
    ("thu-nics/C2C#21", "check_sampling", "top-p-excludes-crossing", C2C_21),
    ("rasbt/reasoning-from-scratch#164", "check_sampling", "top-p-excludes-crossing", reasoning_from_scratch_164),
    ("kingoflolz/mesh-transformer-jax#164", "check_sampling", "top-k-off-by-one", mesh_transformer_jax_164),
    ("lucidrains/PaLM-rlhf-pytorch#60", "check_sampling", "kept-set-wrong", PaLM_rlhf_60),
    ("huggingface/transformers#24979", "check_last_token_pooling", "last-token-assumes-right-padding",
     transformers_24979),
    ("zankner/CLoud#5", "check_last_token_pooling", "last-token-assumes-right-padding", CLoud_5),
    ("huggingface/peft#3620", "check_last_token_pooling", "last-token-assumes-right-padding", peft_3620),
    ("huggingface/sentence-transformers#2111", "check_last_token_pooling", "last-token-wrong-position",
     sentence_transformers_2111),
    ("jsboige/CoursIA#15045", "check_mean_pooling", "pooling-includes-padding", CoursIA_15045),
    ("autoliuweijie/BERT-whitening-pytorch#13", "check_mean_pooling", "pooling-includes-padding", BERT_whitening_13),
]
"""(source, check, expected bug code, the function or module class written with the reported mistake)."""


# --------------------------------------------------------------------------------------------------------------------
# Two mistakes together (constructed from the mistakes above)


def _attention_two(scale, softmax):
    def fn(queries, keys, values, valid_lens=None):
        return softmax(queries @ keys.transpose(1, 2) * scale(queries.shape[-1]), valid_lens) @ values

    return fn


def _softmax_uniform_empty(scores, valid_lens):  # the -1e6 fill of Dive into Deep Learning, no zeroed empty rows
    return torch.softmax(_masked(scores, valid_lens, -1e6), dim=-1)


def _softmax_keys(scores, valid_lens):
    return _zero_empty(torch.softmax(_masked(scores, valid_lens), dim=-1), scores, valid_lens)


def _softmax_queries(scores, valid_lens):
    return vision_transformer_1(scores, valid_lens)


COMPOSITES = [
    ("check_dot_product_attention", {"missing-scale", "empty-row-uniform"},
     _attention_two(lambda d: 1.0, _softmax_uniform_empty)),
    ("check_dot_product_attention", {"scale-by-d", "valid-lens-ignored"},
     _attention_two(lambda d: 1 / d, lambda s, lens: torch.softmax(s, -1))),
    ("check_dot_product_attention", {"scale-inverted", "softmax-wrong-axis"},
     _attention_two(lambda d: math.sqrt(d), _softmax_queries)),
    ("check_dot_product_attention", {"missing-scale", "inverted-mask"},
     _attention_two(lambda d: 1.0, lambda s, lens: TransformerTranslation_6(s, lens))),
    ("check_dot_product_attention", {"scale-wrong", "valid-lens-ignored"},
     _attention_two(lambda d: 1 / 8, lambda s, lens: torch.softmax(s, -1))),
    ("check_positional_encoding", {"pe-halves-layout", "pe-wrong-exponent"}, WaveGrad_12),
    ("check_rope", {"rope-wrong-pairing", "rope-wrong-direction"}, lambda x: _rope_neg(x)),
    ("check_rope", {"rope-wrong-pairing", "rope-positions-shifted"}, lambda x: _rope_shift(x)),
    ("check_causal_mask", {"mask-additive", "causal-top-left"},
     lambda T_q, T_k: torch.full((T_q, T_k), float("-inf")).triu(1)),
    ("check_causal_mask", {"mask-inverted-convention", "causal-no-diagonal"},
     lambda T_q, T_k: torch.ones(T_q, T_k, dtype=torch.bool).triu(T_k - T_q)),
    ("check_sampling", {"temperature-inverted", "top-p-excludes-crossing"},
     lambda logits, temperature=1.0, top_k=None, top_p=None: _top_p(
         logits * temperature**2, temperature, top_k, top_p, lambda cum, p, t: cum <= t)),
    ("check_sampling", {"top-k-off-by-one", "not-renormalised"},
     lambda logits, temperature=1.0, top_k=None, top_p=None: _unrenormalised(logits, temperature, top_k, top_p)),
    ("check_online_softmax", {"missing-scale", "online-partial-block-dropped"},
     lambda q, k, v, block_size: _online_two(q, k, v, block_size)),
    ("check_grouped_query_attention", {"gqa-heads-tiled", "missing-scale"},
     lambda q, k, v: torch.softmax(q @ k[:, torch.arange(q.shape[1]) % k.shape[1]].transpose(-2, -1), -1)
     @ v[:, torch.arange(q.shape[1]) % k.shape[1]]),
    ("check_multihead_attention", {"scale-by-d-model", "softmax-wrong-axis"}, None),  # filled below
    ("check_alibi_slopes", {"alibi-slopes-off-by-one", "alibi-slopes-reversed"},
     lambda H: aprender_2143(H).flip(0)),
]


def _rope_neg(x):
    T, D = x.shape[-2], x.shape[-1]
    inv = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    angles = -torch.arange(T, dtype=torch.float64)[:, None] * inv
    emb = torch.cat([angles, angles], dim=-1)
    x1, x2 = x[..., : D // 2], x[..., D // 2 :]
    return x * emb.cos().to(x.dtype) + torch.cat([-x2, x1], dim=-1) * emb.sin().to(x.dtype)


def _rope_shift(x):
    T, D = x.shape[-2], x.shape[-1]
    inv = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    angles = torch.arange(1, T + 1, dtype=torch.float64)[:, None] * inv
    emb = torch.cat([angles, angles], dim=-1)
    x1, x2 = x[..., : D // 2], x[..., D // 2 :]
    return x * emb.cos().to(x.dtype) + torch.cat([-x2, x1], dim=-1) * emb.sin().to(x.dtype)


def _unrenormalised(logits, temperature, top_k, top_p):
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_k is not None:
        kth = probs.topk(min(top_k + 1, logits.shape[-1]), dim=-1).values[:, -1:]
        probs = torch.where(probs >= kth, probs, torch.zeros_like(probs))
    if top_p is not None:
        p = probs / probs.sum(-1, keepdim=True)
        sorted_p, order = p.sort(dim=-1, descending=True)
        keep = sorted_p.cumsum(-1) - sorted_p < top_p
        probs = p * torch.zeros_like(keep).scatter(-1, order, keep)
    return probs


def _online_two(q, k, v, block_size):
    T_q = q.shape[0]
    m = torch.full((T_q, 1), -math.inf)
    ell, out = torch.zeros(T_q, 1), torch.zeros(T_q, v.shape[1])
    for j in range(0, k.shape[0] - block_size + 1, block_size):  # the last, shorter block is dropped
        s = q @ k[j : j + block_size].T  # no scale
        m_new = torch.maximum(m, s.max(1, keepdim=True).values)
        a, p = torch.exp(m - m_new), torch.exp(s - m_new)
        ell, out, m = ell * a + p.sum(1, keepdim=True), out * a + p @ v[j : j + block_size], m_new
    return out / ell


class _MHA_two(_MHA):
    def __init__(self, d_model, num_heads):
        super().__init__(d_model, num_heads, divisor=lambda D, D_h: math.sqrt(D), softmax_dim=2)


COMPOSITES[14] = ("check_multihead_attention", {"scale-by-d-model", "softmax-wrong-axis"}, _MHA_two)


# --------------------------------------------------------------------------------------------------------------------
# Correct implementations in other styles (no false alarm allowed)


def _sdpa_attention(queries, keys, values, valid_lens=None):
    if valid_lens is None:
        return F.scaled_dot_product_attention(queries, keys, values)
    mask = _lens_mask(queries @ keys.transpose(1, 2), valid_lens).expand(-1, queries.shape[1], -1)
    out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask | ~mask.any(-1, keepdim=True))
    return out.masked_fill(~mask.any(-1, keepdim=True), 0.0)


def _additive_mask_softmax(scores, valid_lens):
    if valid_lens is None:
        return scores.softmax(-1)
    bias = torch.zeros_like(scores).masked_fill(~_lens_mask(scores, valid_lens), torch.finfo(scores.dtype).min)
    return _zero_empty((scores + bias).softmax(-1), scores, valid_lens)


def _pe_loops(max_len, d_model):
    P = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for i in range(0, d_model, 2):
            P[pos, i] = math.sin(pos / 10000 ** (i / d_model))
            P[pos, i + 1] = math.cos(pos / 10000 ** (i / d_model))
    return P


def _rope_rotate_every_two(x):
    return _rope(x, "neighbours", "interleave")


def _alibi_press(n):
    def powers(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return torch.tensor(powers(n))
    closest = 2 ** math.floor(math.log2(n))
    return torch.tensor(powers(closest) + _alibi_press(2 * closest)[0::2][: n - closest].tolist())


def _gqa_expand(q, k, v):
    B, G, T, D = k.shape
    r = q.shape[1] // G
    k = k[:, :, None].expand(B, G, r, T, D).reshape(B, G * r, T, D)
    v = v[:, :, None].expand(B, G, r, T, v.shape[-1]).reshape(B, G * r, T, v.shape[-1])
    return torch.softmax(q @ k.transpose(-2, -1) * D**-0.5, -1) @ v


def _last_token_gather(hidden, attention_mask):
    positions = torch.arange(attention_mask.shape[1]) * attention_mask
    return hidden[torch.arange(hidden.shape[0]), positions.argmax(1)]


def _online_loops(q, k, v, block_size):
    outs = []
    for i in range(q.shape[0]):
        m, ell, acc = -math.inf, 0.0, torch.zeros(v.shape[1], dtype=torch.float64)
        for j in range(0, k.shape[0], block_size):
            s = (k[j : j + block_size].double() @ q[i].double()) / math.sqrt(q.shape[1])
            m_new = max(m, float(s.max()))
            scale = math.exp(m - m_new) if m != -math.inf else 0.0
            p = torch.exp(s - m_new)
            ell = ell * scale + float(p.sum())
            acc = acc * scale + p @ v[j : j + block_size].double()
            m = m_new
        outs.append(acc / ell)
    return torch.stack(outs).float()


CORRECT = [
    ("check_dot_product_attention", _sdpa_attention),
    ("check_masked_softmax", _additive_mask_softmax),
    ("check_positional_encoding", _pe_loops),
    ("check_rope", _rope_rotate_every_two),
    ("check_alibi_slopes", _alibi_press),
    ("check_grouped_query_attention", _gqa_expand),
    ("check_last_token_pooling", _last_token_gather),
    ("check_online_softmax", _online_loops),
    ("check_kv_cache_step", _kv_step(False)),
    ("check_causal_mask", lambda T_q, T_k: torch.ones(T_k, T_k, dtype=torch.bool).tril()[-T_q:]),
    ("check_sampling", lambda logits, temperature=1.0, top_k=None, top_p=None: au.sampling_probs(
        logits.double(), temperature=temperature, top_k=top_k, top_p=top_p)),
    ("check_mean_pooling", lambda h, m: torch.einsum("btd,bt->bd", h, m.float()) / m.sum(1, keepdim=True)),
    ("check_cls_pooling", lambda h: h.select(1, 0)),
    ("check_patchify", lambda x, P: F.unfold(x, P, stride=P).transpose(1, 2)),
    ("check_multihead_attention", au.MultiHeadAttention),
]
