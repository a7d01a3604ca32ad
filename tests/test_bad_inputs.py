"""Bad input is part of the API: each case raises the right exception with a message that names the argument, what it
got and what was expected."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch import nn

import attn_utils as au


def q(B: int = 2, T: int = 3, D: int = 4, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.ones(B, T, D, dtype=dtype)


def ids(*shape: int, value: int = 4) -> torch.Tensor:
    return torch.full(shape, value, dtype=torch.long)


def dpa(**kwargs: object) -> Callable[[], object]:
    args = {"queries": q(), "keys": q(T=5), "values": q(T=5, D=6)} | kwargs
    return lambda: au.dot_product_attention(**args)  # type: ignore[arg-type]


def mha(**kwargs: object) -> Callable[[], object]:
    args = {"queries": q(D=8), "keys": q(T=5, D=8), "values": q(T=5, D=8)} | kwargs
    return lambda: au.MultiHeadAttention(8, 2)(**args)  # type: ignore[arg-type]


def gru_encoder(src: torch.Tensor, lens: torch.Tensor) -> Callable[[], object]:
    return lambda: au.GRUEncoder(vocab_size=10, embed_size=4, num_hiddens=8)(src, lens)


def transformer() -> au.EncoderDecoder:
    return au.make_transformer(au.TransformerConfig(10, 12, d_model=8, num_heads=2, ffn_hidden=8, num_layers=1,
                                                    max_len=6))


def load_mismatched_torch() -> object:
    return au.MultiHeadAttention(8, 2).load_from_torch(nn.MultiheadAttention(8, 4, batch_first=True))


def greedy(**kwargs: object) -> Callable[[], object]:
    args = {"src": ids(2, 3), "src_valid_lens": torch.tensor([3, 1]), "bos_id": 1, "eos_id": 2, "max_len": 4} | kwargs
    return lambda: au.greedy_decode(transformer(), **args)  # type: ignore[arg-type]


def tiny_vit() -> au.VisionTransformer:
    return au.make_vit(au.ViTConfig(d_model=8, num_heads=2, ffn_hidden=8, num_layers=1))


def digits_8x8(B: int = 4) -> torch.Tensor:
    return torch.rand(B, 1, 8, 8)


VOCAB = au.Vocab([["a", "b"]])
TOKS = ["a", "b", "c"]
TINY_BERT = au.BertConfig(vocab_size=20, d_model=8, num_heads=2, ffn_hidden=8, num_layers=1, max_len=6)


def nan_at(t: torch.Tensor, index: tuple[int, ...], value: float = float("nan")) -> torch.Tensor:
    """A copy of ``t`` with ``value`` (NaN by default) at ``index``."""
    t = t.clone()
    t[index] = value
    return t


def nan_transformer() -> au.EncoderDecoder:
    """A tiny Transformer whose output layer's bias is NaN, as after a training step that diverged."""
    model = transformer()
    with torch.no_grad():
        model.decoder.dense.bias.fill_(float("nan"))
    return model


def diverged_nw() -> au.NWKernelRegression:
    """A parametric Nadaraya-Watson model whose w has become NaN, as after a training step that diverged."""
    model = au.NWKernelRegression(1.0)
    with torch.no_grad():
        model.w.fill_(float("nan"))
    return model


def attn(*shape: int) -> torch.Tensor:
    """Attention weights of ``shape``: every row sums to 1."""
    return torch.softmax(torch.arange(float(np.prod(shape))).reshape(shape).sin(), dim=-1)


# (id, callable, exception type, regex the message must match)
CASES: list[tuple[str, Callable[[], object], type[Exception], str]] = [
    # --- masking
    ("masked_softmax 2-D scores", lambda: au.masked_softmax(torch.ones(3, 4)), ValueError,
     r"scores: expected shape \(B, \*, T_q, T_k\) with at least 3 axes, got shape \(3, 4\)"),
    ("masked_softmax int scores", lambda: au.masked_softmax(torch.ones(2, 3, 4, dtype=torch.long)), TypeError,
     r"scores: expected a floating-point tensor, got dtype torch.int64"),
    ("masked_softmax empty key axis", lambda: au.masked_softmax(torch.ones(2, 3, 0)), ValueError,
     r"scores: axis -1 is empty, got shape \(2, 3, 0\); expected at least 1 element"),
    ("valid_lens wrong shape", lambda: au.masked_softmax(q(), torch.tensor([1, 2, 3])), ValueError,
     r"valid_lens: expected shape \(2,\) or \(2, 3\) for scores of shape \(2, 3, 4\), got shape \(3,\)"),
    ("valid_lens wrong 2-D shape", lambda: au.masked_softmax(q(), torch.ones(2, 4, dtype=torch.long)), ValueError,
     r"valid_lens: expected shape \(2,\) or \(2, 3\) for scores of shape \(2, 3, 4\), got shape \(2, 4\)"),
    ("valid_lens scalar", lambda: au.masked_softmax(q(), torch.tensor(2)), ValueError,
     r"valid_lens: expected shape \(2,\) or \(2, 3\) .*got shape \(\)"),
    ("valid_lens negative", lambda: au.masked_softmax(q(), torch.tensor([-1, 2])), ValueError,
     r"valid_lens: expected every entry in \[0, 4\], got values in \[-1, 2\]"),
    ("valid_lens > T_k", lambda: au.masked_softmax(q(), torch.tensor([2, 5])), ValueError,
     r"valid_lens: expected every entry in \[0, 4\], got values in \[2, 5\]"),
    ("valid_lens float", lambda: au.masked_softmax(q(), torch.tensor([1.0, 2.0])), TypeError,
     r"valid_lens: expected an integer tensor \(e.g. torch.long\), got dtype torch.float32"),
    ("valid_lens bool", lambda: au.masked_softmax(q(), torch.tensor([True, False])), TypeError,
     r"valid_lens: expected an integer tensor .*got dtype torch.bool"),
    ("valid_lens list", lambda: au.masked_softmax(q(), [1, 2]), TypeError,
     r"valid_lens: expected a torch.Tensor, got list"),
    ("attn_mask int dtype", lambda: au.masked_softmax(q(), attn_mask=torch.ones(3, 4, dtype=torch.long)), TypeError,
     r"attn_mask: expected a bool tensor \(True = may attend\), got dtype torch.int64"),
    ("attn_mask wrong shape", lambda: au.masked_softmax(q(), attn_mask=torch.ones(3, 5, dtype=torch.bool)),
     ValueError, r"attn_mask: expected a shape broadcastable to the scores' shape \(2, 3, 4\), got shape \(3, 5\)"),
    ("attn_mask that would broadcast scores up",
     lambda: au.masked_softmax(q(), attn_mask=torch.ones(5, 2, 3, 4, dtype=torch.bool)), ValueError,
     r"attn_mask: expected a shape broadcastable to the scores' shape \(2, 3, 4\), got shape \(5, 2, 3, 4\)"),
    ("sequence_mask out of range", lambda: au.sequence_mask(torch.tensor([1, 5]), 4), ValueError,
     r"valid_lens: expected every entry in \[0, 4\], got values in \[1, 5\]"),
    ("causal_mask T_k < T_q", lambda: au.causal_mask(3, 2), ValueError,
     r"T_k: expected T_k >= T_q=3 .*got T_k=2"),
    ("causal_mask float size", lambda: au.causal_mask(2.0), TypeError, r"T_q: expected an int, got float"),
    # --- attention
    ("dot-product query/key widths differ", dpa(queries=q(D=5)), ValueError,
     r"keys: expected shape \(B, T_k, D\) with D=5, got shape \(2, 5, 4\)"),
    ("dot-product batch sizes differ", dpa(keys=q(B=3, T=5)), ValueError,
     r"keys: expected shape \(B, T_k, D\) with B=2, got shape \(3, 5, 4\)"),
    ("dot-product keys/values lengths differ", dpa(values=q(T=4, D=6)), ValueError,
     r"values: expected shape \(B, T_k, D_v\) with T_k=5, got shape \(2, 4, 6\)"),
    ("dot-product int queries", dpa(queries=q(dtype=torch.long)), TypeError,
     r"queries: expected a floating-point tensor, got dtype torch.int64"),
    ("dot-product mixed dtypes", dpa(keys=q(T=5, dtype=torch.float64)), TypeError,
     r"queries, keys, values: expected one dtype, got torch.float32, torch.float64 and torch.float32"),
    ("dot-product empty sequence", dpa(keys=q(T=0), values=q(T=0, D=6)), ValueError,
     r"keys: axis 1 is empty, got shape \(2, 0, 4\); expected at least 1 element"),
    ("dot-product 2-D queries", dpa(queries=torch.ones(3, 4)), ValueError,
     r"queries: expected shape \(B, \*, T_q, D\) with at least 3 axes, got shape \(3, 4\)"),
    ("dot-product valid_lens out of range", dpa(valid_lens=torch.tensor([6, 1])), ValueError,
     r"valid_lens: expected every entry in \[0, 5\], got values in \[1, 6\]"),
    ("dot-product dropout_p = 1", dpa(dropout_p=1.0), ValueError, r"dropout_p: expected a float in \[0, 1\), got 1.0"),
    ("additive widths differ", lambda: au.AdditiveAttention(4, 6, 8)(q(), q(T=5), q(T=5)), ValueError,
     r"queries, keys: expected widths D_q=4 and D_k=6, got shapes \(2, 3, 4\) and \(2, 5, 4\)"),
    ("additive 4-D queries", lambda: au.AdditiveAttention(4, 4, 8)(q()[None], q(T=5)[None], q(T=5)[None]),
     ValueError, r"queries: expected shape \(B, T_q, D_q\), got shape \(1, 2, 3, 4\)"),
    ("NW unknown kernel", lambda: au.nadaraya_watson(torch.ones(3), torch.ones(4), torch.ones(4), kernel="tri"),
     ValueError, r"kernel: expected one of \('gaussian', 'boxcar', 'epanechnikov'\), got 'tri'"),
    ("NW sigma = 0", lambda: au.nadaraya_watson(torch.ones(3), torch.ones(4), torch.ones(4), sigma=0), ValueError,
     r"sigma: expected a finite float > 0, got 0"),
    ("NW sigma < 0", lambda: au.nadaraya_watson(torch.ones(3), torch.ones(4), torch.ones(4), sigma=-0.5),
     ValueError, r"sigma: expected a finite float > 0, got -0.5"),
    ("NW sigma a string", lambda: au.nadaraya_watson(torch.ones(3), torch.ones(4), torch.ones(4), sigma="1"),
     TypeError, r"sigma: expected a positive float, got str"),
    ("NW keys/values lengths differ", lambda: au.nadaraya_watson(torch.ones(3), torch.ones(4), torch.ones(5)),
     ValueError, r"values: expected shape \(n_k,\) with n_k=4, got shape \(5,\)"),
    ("NW 2-D queries", lambda: au.nadaraya_watson(torch.ones(3, 1), torch.ones(4), torch.ones(4)), ValueError,
     r"queries: expected a 1-D tensor of shape \(n_q,\), got shape \(3, 1\)"),
    ("NW empty training set", lambda: au.nadaraya_watson(torch.ones(3), torch.ones(0), torch.ones(0)), ValueError,
     r"keys: axis 0 is empty, got shape \(0,\); expected at least 1 element"),
    ("NW compact kernel with no key in reach",
     lambda: au.nadaraya_watson(torch.tensor([9.0]), torch.ones(4), torch.ones(4), sigma=0.5, kernel="boxcar"),
     ValueError, r"sigma: with the boxcar kernel and sigma=0.5, 1 queries \(the first at x=9\) have no key within"),
    ("NW regression w = nan", lambda: au.NWKernelRegression(w=float("nan")), ValueError,
     r"w: expected a finite float \(the inverse kernel width\), got nan"),
    ("NW regression w a string", lambda: au.NWKernelRegression(w="1"), TypeError,
     r"w: expected a float or None, got str"),
    ("NW regression keys not per query",
     lambda: au.NWKernelRegression(1.0)(torch.ones(3), torch.ones(4), torch.ones(3, 4)), ValueError,
     r"keys: expected a 2-D tensor of shape \(n_q, n_k\), got shape \(4,\)"),
    # --- multi-head attention
    ("d_model not divisible by num_heads", lambda: au.MultiHeadAttention(10, 3), ValueError,
     r"d_model: expected a multiple of num_heads=3 .*got d_model=10"),
    ("config d_model not divisible", lambda: au.TransformerConfig(10, 10, d_model=10, num_heads=4), ValueError,
     r"d_model: expected a multiple of num_heads=4, got d_model=10"),
    ("MHA wrong query width", mha(queries=q(D=6)), ValueError,
     r"queries: expected shape \(B, T_q, 8\), got shape \(2, 3, 6\) \(axis 2 differs\)"),
    ("MHA int queries", mha(queries=q(D=8, dtype=torch.long)), TypeError,
     r"queries: expected a floating-point tensor, got dtype torch.int64"),
    ("MHA empty keys", mha(keys=q(T=0, D=8), values=q(T=0, D=8)), ValueError,
     r"keys: axis 1 is empty, got shape \(2, 0, 8\); expected at least 1 element"),
    ("MHA batch sizes differ", mha(values=q(B=3, T=5, D=8)), ValueError,
     r"values: expected shape \(B, T_k, 8\) with B=2, got shape \(3, 5, 8\)"),
    ("MHA valid_lens wrong shape", mha(valid_lens=torch.tensor([5, 5, 5])), ValueError,
     r"valid_lens: expected shape \(2,\) or \(2, 3\) for scores of shape \(2, 2, 3, 5\), got shape \(3,\)"),
    ("MHA float mask", mha(attn_mask=torch.ones(3, 5)), TypeError,
     r"attn_mask: expected a bool tensor \(True = may attend\), got dtype torch.float32"),
    ("MHA kv_cache of the wrong type", mha(kv_cache={}), TypeError,
     r"kv_cache: expected a KVCache or None, got dict"),
    ("MHA load_from_torch with other sizes", load_mismatched_torch, ValueError,
     r"reference: expected \(embed_dim, num_heads, kdim, vdim\) = \(8, 2, 8, 8\), got \(8, 4, 8, 8\)"),
    ("KV cache of another width",
     lambda: au.KVCache(torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4)).append(torch.ones(1, 2, 1, 5),
                                                                                 torch.ones(1, 2, 1, 5)),
     ValueError, r"kv_cache: expected new keys and values of shape \(1, 2, T_new, 4\) to match the cache's 3 "
     r"positions, got shape \(1, 2, 1, 5\)"),
    # --- positional encoding and the Transformer
    ("PositionalEncoding longer than max_len", lambda: au.PositionalEncoding(8, max_len=10)(q(B=1, T=11, D=8)),
     ValueError,
     r"X: positions 0..10 exceed max_len=10; got shape \(1, 11, 8\) with offset=0, expected offset \+ T <= 10"),
    ("PositionalEncoding offset past max_len",
     lambda: au.PositionalEncoding(8, max_len=10)(q(B=1, T=5, D=8), offset=6), ValueError,
     r"X: positions 6..10 exceed max_len=10; got shape \(1, 5, 8\) with offset=6"),
    ("PositionalEncoding wrong width", lambda: au.PositionalEncoding(8)(q(D=7)), ValueError,
     r"X: expected shape \(B, T, 8\), got shape \(2, 3, 7\) \(axis 2 differs\)"),
    ("PositionalEncoding negative offset", lambda: au.PositionalEncoding(8)(q(D=8), offset=-1), ValueError,
     r"offset: expected an int >= 0, got -1"),
    ("AddNorm shapes differ", lambda: au.AddNorm(4)(q(), q(T=2)), ValueError,
     r"Y: expected shape \(B, T, 4\) with T=3, got shape \(2, 2, 4\)"),
    ("make_transformer without a config", lambda: au.make_transformer({"d_model": 8}), TypeError,
     r"cfg: expected a TransformerConfig, got dict"),
    ("config dropout = 1", lambda: au.TransformerConfig(10, 10, dropout=1.0), ValueError,
     r"dropout: expected a float in \[0, 1\), got 1.0"),
    # --- seq2seq
    ("token ids out of the vocabulary", gru_encoder(torch.tensor([[1, 12]]), torch.tensor([2])), ValueError,
     r"src: expected token ids in \[0, 10\), got values in \[1, 12\]"),
    ("negative token ids", gru_encoder(torch.tensor([[-1, 2]]), torch.tensor([2])), ValueError,
     r"src: expected token ids in \[0, 10\), got values in \[-1, 2\]"),
    ("float token ids", gru_encoder(torch.tensor([[1.0, 2.0]]), torch.tensor([2])), TypeError,
     r"src: expected an integer tensor \(e.g. torch.long\), got dtype torch.float32"),
    ("src_valid_lens > T", gru_encoder(ids(1, 2), torch.tensor([3])), ValueError,
     r"src_valid_lens: expected lengths in \[1, 2\] for src of shape \(1, 2\), got values in \[3, 3\]"),
    ("src_valid_lens 0", gru_encoder(ids(1, 2), torch.tensor([0])), ValueError,
     r"src_valid_lens: expected lengths in \[1, 2\] .*got values in \[0, 0\]"),
    ("src_valid_lens of another batch size", gru_encoder(ids(1, 2), torch.tensor([1, 1])), ValueError,
     r"src_valid_lens: expected shape \(1,\), got shape \(2,\)"),
    ("empty source", gru_encoder(ids(1, 0), torch.tensor([1])), ValueError,
     r"src: expected a non-empty batch of shape \(B, T\), got shape \(1, 0\)"),
    ("1-D source", gru_encoder(ids(3), torch.tensor([3])), ValueError,
     r"src: expected a 2-D tensor of shape \(B, T\), got shape \(3,\)"),
    ("tgt_in of another batch size", lambda: transformer()(ids(2, 3), torch.tensor([3, 3]), ids(3, 3)), ValueError,
     r"tgt_in: expected batch size B=2 \(as src\), got shape \(3, 3\)"),
    ("target ids out of the vocabulary", lambda: transformer()(ids(2, 3), torch.tensor([3, 3]), ids(2, 3, value=12)),
     ValueError, r"tgt_in: expected token ids in \[0, 12\), got values in \[12, 12\]"),
    ("EncoderDecoder of a plain module", lambda: au.EncoderDecoder(nn.Linear(2, 2), au.Seq2SeqDecoder(5, 2, 2)),
     TypeError, r"encoder: expected an attn_utils Encoder, got Linear"),
    # --- the inference path: arguments that contradict each other or the model
    ("3-D attn_mask to multi-head attention", mha(attn_mask=torch.ones(2, 3, 5, dtype=torch.bool)), ValueError,
     r"attn_mask: expected shape \(T_q, T_k\) .*\(B, 1, T_q, T_k\) / \(B, H, T_q, T_k\), got shape \(2, 3, 5\); "
     r"for one mask per batch element use attn_mask\[:, None\]"),
    ("3-D attn_mask with B == H, once applied per head", mha(queries=q(B=2, D=8), keys=q(B=2, T=5, D=8),
                                                               values=q(B=2, T=5, D=8),
                                                               attn_mask=torch.ones(2, 3, 5, dtype=torch.bool)),
     ValueError, r"attn_mask: expected shape \(T_q, T_k\)"),
    ("is_causal with T_q != T_k", dpa(is_causal=True), ValueError,
     r"is_causal: expected T_q == T_k .*got T_q=3 and T_k=5; with cached keys pass attn_mask=causal_mask\(T_q, T_k\)"),
    ("is_causal with a filled KV cache",
     lambda: au.MultiHeadAttention(8, 2)(q(D=8), q(D=8), q(D=8), is_causal=True,
                                         kv_cache=au.KVCache(torch.ones(2, 2, 4, 4), torch.ones(2, 2, 4, 4))),
     ValueError, r"is_causal: expected no cached keys .*got a kv_cache of 4 positions"),
    ("KV cache: keys and values of different lengths",
     lambda: au.KVCache().append(torch.ones(1, 2, 3, 4), torch.ones(1, 2, 2, 4)), ValueError,
     r"kv_cache.append: v: expected shape \(B, H, T_new, D_h\) with T_new=3, got shape \(1, 2, 2, 4\)"),
    ("KV cache: keys of rank 3", lambda: au.KVCache().append(torch.ones(2, 3, 4), torch.ones(2, 3, 4)), ValueError,
     r"kv_cache.append: k: expected a 4-D tensor of shape \(B, H, T_new, D_h\), got shape \(2, 3, 4\)"),
    ("KV cache: new keys of another dtype",
     lambda: au.KVCache(torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4)).append(
         torch.ones(1, 2, 1, 4, dtype=torch.float64), torch.ones(1, 2, 1, 4, dtype=torch.float64)), ValueError,
     r"kv_cache: expected new keys of dtype torch.float32 on cpu \(as the cache\), got torch.float64 on cpu"),
    ("encoder and decoder with different numbers of GRU layers",
     lambda: au.EncoderDecoder(au.GRUEncoder(10, 4, 8, num_layers=2), au.BahdanauDecoder(10, 4, 8, num_layers=1)),
     ValueError, r"decoder: expected num_layers=2 \(the encoder's.*got num_layers=1"),
    ("decoder state from a shallower encoder",
     lambda: au.Seq2SeqDecoder(10, 4, 8, num_layers=2).init_state(
         au.GRUEncoder(10, 4, 8, num_layers=1)(ids(1, 3), torch.tensor([3])), torch.tensor([3])), ValueError,
     r"enc.hidden: expected shape \(2, B, 8\), got shape \(1, 1, 8\)"),
    ("translate with a target vocabulary larger than the output layer",
     lambda: au.translate(transformer(), ["a"], VOCAB, au.Vocab([[str(i) for i in range(20)]]), num_steps=4),
     ValueError, r"tgt_vocab: expected at most 12 tokens \(the size of the model's output layer\), got a "
                 r"vocabulary of 24"),
    ("translate with a source vocabulary larger than the embedding",
     lambda: au.translate(transformer(), ["a"], au.Vocab([[str(i) for i in range(20)]]), VOCAB, num_steps=4),
     ValueError, r"src_vocab: expected at most 10 tokens \(the size of the model's source embedding\)"),
    ("greedy decoding with eos_id outside the vocabulary", greedy(eos_id=12), ValueError,
     r"eos_id: expected an id in \[0, 12\) \(the decoder's vocabulary\), got 12"),
    ("greedy decoding with bos_id outside the vocabulary", greedy(bos_id=40), ValueError,
     r"bos_id: expected an id in \[0, 12\) \(the decoder's vocabulary\), got 40"),
    ("training with bos_id outside the vocabulary",
     lambda: au.train_seq2seq(transformer(), [], num_epochs=1, lr=0.1, bos_id=12), ValueError,
     r"bos_id: expected an id in \[0, 12\) \(the decoder's vocabulary\), got 12"),
    ("training batch with source ids outside the vocabulary",
     lambda: au.train_seq2seq(transformer(), [(ids(2, 3, value=10), torch.tensor([3, 2]), ids(2, 3),
                                               torch.tensor([3, 1]))], num_epochs=1, lr=0.1, bos_id=1,
                              progress=False), ValueError,
     r"src: expected token ids in \[0, 10\) \(the model's vocabulary\), got values in \[10, 10\]"),
    ("training batch with a target length of 0",
     lambda: au.train_seq2seq(transformer(), [(ids(2, 3), torch.tensor([3, 2]), ids(2, 3), torch.tensor([3, 0]))],
                              num_epochs=1, lr=0.1, bos_id=1, progress=False), ValueError,
     r"tgt_valid_lens: expected lengths in \[1, 3\], got values in \[0, 3\]"),
    ("source longer than the encoder's max_len",
     lambda: transformer().encoder(ids(1, 7), torch.tensor([7])), ValueError,
     r"src: expected at most max_len=6 positions \(the positional encoding's\), got shape \(1, 7\)"),
    ("loss valid_lens with a negative entry", lambda: au.sequence_cross_entropy(
        torch.zeros(2, 3, 5), ids(2, 3, value=1), torch.tensor([-1, 1])), ValueError,
     r"valid_lens: expected lengths in \[0, 3\], got values in \[-1, 1\]"),
    ("Bahdanau state with a source length past the source",
     lambda: au.BahdanauDecoder(10, 4, 8).init_state(au.GRUEncoder(10, 4, 8)(ids(2, 3), torch.tensor([3, 2])),
                                                     torch.tensor([4, 2])), ValueError,
     r"src_valid_lens: expected lengths in \[1, 3\], got values in \[2, 4\]"),
    ("Transformer decoder state with a source length of 0",
     lambda: transformer().decoder.init_state(au.EncoderOutput(torch.ones(2, 3, 8), None, {}), torch.tensor([0, 3])),
     ValueError, r"src_valid_lens: expected lengths in \[1, 3\], got values in \[0, 3\]"),
    ("Transformer decoder state built by hand, without cross-attention keys",
     lambda: (lambda m: m.decoder(ids(1, 2), au.TransformerDecoderState(torch.ones(1, 3, 8), torch.tensor([3]),
                                                                        [au.KVCache()])))(transformer()),
     ValueError, r"state: expected cross-attention keys and values for 1 blocks \(from init_state\), got 0"),
    # --- dtype and device, checked where the input enters a module
    ("float64 into the FFN", lambda: au.PositionWiseFFN(4, 8)(q(dtype=torch.float64)), TypeError,
     r"X: expected dtype torch.float32 \(the module's parameters\), got torch.float64"),
    ("float64 into add & norm", lambda: au.AddNorm(4)(q(), q(dtype=torch.float64)), TypeError,
     r"Y: expected dtype torch.float32 \(the module's parameters\), got torch.float64"),
    ("float64 into additive attention",
     lambda: au.AdditiveAttention(4, 4, 8)(*(q(T=t, dtype=torch.float64) for t in (3, 5, 5))), TypeError,
     r"queries: expected dtype torch.float32 \(the module's parameters\), got torch.float64"),
    ("float64 into parametric Nadaraya-Watson",
     lambda: au.NWKernelRegression(1.0)(torch.ones(3, dtype=torch.float64), torch.ones(3, 4), torch.ones(3, 4)),
     TypeError, r"queries: expected dtype torch.float32 \(the module's parameters\), got torch.float64"),
    ("FFN input on another device", lambda: au.PositionWiseFFN(4, 8)(torch.ones(2, 3, 4, device="meta")),
     ValueError, r"X: expected a tensor on cpu \(the module's parameters\), got one on meta"),
    ("multi-head keys on another device", mha(keys=torch.ones(2, 5, 8, device="meta")), ValueError,
     r"keys: expected a tensor on cpu \(the module's parameters\), got one on meta"),
    ("additive attention values on another device",
     lambda: au.AdditiveAttention(4, 4, 8)(q(), q(T=5), torch.ones(2, 5, 4, device="meta")), ValueError,
     r"values: expected a tensor on cpu \(the module's parameters\), got one on meta"),
    ("decoder state with encoder outputs on another device",
     lambda: transformer().decoder.init_state(au.EncoderOutput(torch.ones(1, 3, 8, device="meta"), None, {}),
                                               torch.tensor([3])), ValueError,
     r"enc.outputs: expected a tensor on cpu \(the module's parameters\), got one on meta"),
    # --- the Vision Transformer
    ("ViT image not divisible into patches", lambda: au.ViTConfig(image_size=8, patch_size=3), ValueError,
     r"image_size: expected a multiple of patch_size=3 \(the image is cut into whole patches\), got image_size=8"),
    ("ViT d_model not divisible by heads", lambda: au.ViTConfig(d_model=30, num_heads=4), ValueError,
     r"d_model: expected a multiple of num_heads=4, got d_model=30"),
    ("ViT zero layers", lambda: au.ViTConfig(num_layers=0), ValueError, r"num_layers: expected an int >= 1, got 0"),
    ("ViT patch size a float", lambda: au.ViTConfig(patch_size=2.0), TypeError,
     r"patch_size: expected an int, got float"),
    ("ViT dropout 1", lambda: au.ViTConfig(dropout=1.0), ValueError, r"dropout: expected a float in \[0, 1\), got 1.0"),
    ("make_vit of a GPT config", lambda: au.make_vit(au.GPTConfig(vocab_size=5)), TypeError,
     r"cfg: expected a ViTConfig, got GPTConfig"),
    ("patchify a non-square image", lambda: au.patchify(torch.rand(2, 1, 8, 6), 2), ValueError,
     r"images: expected square images of shape \(B, C, S, S\), got shape \(2, 1, 8, 6\) \(height 8, width 6\)"),
    ("patchify into patches that do not fit", lambda: au.patchify(torch.rand(2, 1, 8, 8), 3), ValueError,
     r"patch_size: expected a divisor of the image side S=8 \(images of shape \(2, 1, 8, 8\)\), got 3"),
    ("patchify an image without channels", lambda: au.patchify(torch.rand(2, 8, 8), 2), ValueError,
     r"images: expected a 4-D tensor of shape \(B, C, \*, \*\), got shape \(2, 8, 8\)"),
    ("patchify an empty batch", lambda: au.patchify(torch.rand(0, 1, 8, 8), 2), ValueError,
     r"images: expected a non-empty batch of images, got shape \(0, 1, 8, 8\)"),
    ("patchify with patch size 0", lambda: au.patchify(torch.rand(2, 1, 8, 8), 0), ValueError,
     r"patch_size: expected an int >= 1, got 0"),
    ("ViT of colour images", lambda: tiny_vit()(torch.rand(2, 3, 8, 8)), ValueError,
     r"images: expected shape \(B, 1, 8, 8\), got shape \(2, 3, 8, 8\) \(axis 1 differs\)"),
    ("ViT of larger images", lambda: tiny_vit()(torch.rand(2, 1, 16, 16)), ValueError,
     r"images: expected shape \(B, 1, 8, 8\), got shape \(2, 1, 16, 16\) \(axis 2 differs\)"),
    ("ViT of a non-square image", lambda: tiny_vit()(torch.rand(2, 1, 8, 6)), ValueError,
     r"images: expected shape \(B, 1, 8, 8\), got shape \(2, 1, 8, 6\) \(axis 3 differs\)"),
    ("ViT of integer pixels", lambda: tiny_vit()(torch.ones(2, 1, 8, 8, dtype=torch.long)), TypeError,
     r"images: expected a floating-point tensor, got dtype torch.int64"),
    ("ViT of float64 pixels", lambda: tiny_vit()(digits_8x8().double()), TypeError,
     r"images: expected dtype torch.float32 \(the module's parameters\), got torch.float64"),
    ("ViT of images on another device", lambda: tiny_vit()(torch.rand(2, 1, 8, 8, device="meta")), ValueError,
     r"images: expected a tensor on cpu \(the module's parameters\), got one on meta"),
    ("ViT need_weights a string", lambda: tiny_vit()(digits_8x8(), need_weights="yes"), TypeError,
     r"need_weights: expected a bool, got str"),
    ("digits with no training images left", lambda: au.load_digits_split(valid_fraction=0.5, test_fraction=0.5),
     ValueError, r"valid_fraction, test_fraction: expected a sum below 1 \(the rest is the training split\), "
     r"got 0.5 \+ 0.5"),
    ("digits test_fraction 0", lambda: au.load_digits_split(test_fraction=0), ValueError,
     r"test_fraction: expected a float in \(0, 1\), got 0"),
    ("digits seed a string", lambda: au.load_digits_split(seed="0"), TypeError, r"seed: expected an int, got str"),
    ("classifier labels out of range",
     lambda: au.train_classifier(tiny_vit(), digits_8x8(), torch.tensor([0, 1, 12, 3]), num_epochs=1, lr=0.1,
                                 progress=False), ValueError,
     r"labels: expected classes in \[0, 10\), got values in \[0, 12\]"),
    ("classifier labels negative", lambda: au.train_classifier(nn.Sequential(nn.Flatten(), nn.Linear(64, 3)),
                                                               digits_8x8(), torch.tensor([0, -1, 2, 1]),
                                                               num_epochs=1, lr=0.1, progress=False), ValueError,
     r"labels: expected classes in \[0, K\), got values in \[-1, 2\]"),
    ("classifier labels beyond the logits", lambda: au.train_classifier(nn.Sequential(nn.Flatten(), nn.Linear(64, 3)),
                                                                        digits_8x8(), torch.tensor([0, 1, 2, 3]),
                                                                        num_epochs=1, lr=0.1, progress=False),
     ValueError, r"labels: expected classes in \[0, 3\) \(the model's K\), got values in \[0, 3\]"),
    ("classifier float labels", lambda: au.train_classifier(tiny_vit(), digits_8x8(), torch.zeros(4), num_epochs=1,
                                                            lr=0.1), TypeError,
     r"labels: expected an integer tensor \(e.g. torch.long\), got dtype torch.float32"),
    ("classifier fewer labels than images", lambda: au.train_classifier(tiny_vit(), digits_8x8(), torch.zeros(3).long(),
                                                                        num_epochs=1, lr=0.1), ValueError,
     r"labels: expected shape \(B,\) with B=4, got shape \(3,\)"),
    ("classifier batch_size 0", lambda: au.train_classifier(tiny_vit(), digits_8x8(), torch.zeros(4).long(),
                                                            num_epochs=1, lr=0.1, batch_size=0), ValueError,
     r"batch_size: expected an int >= 1, got 0"),
    ("classifier of no images", lambda: au.train_classifier(tiny_vit(), torch.rand(0, 1, 8, 8), torch.zeros(0).long(),
                                                            num_epochs=1, lr=0.1), ValueError,
     r"images: expected at least one image, got shape \(0, 1, 8, 8\)"),
    ("predict integer images", lambda: au.predict(tiny_vit(), torch.ones(2, 1, 8, 8, dtype=torch.long)), TypeError,
     r"images: expected a floating-point tensor, got dtype torch.int64"),
    ("accuracy with labels of another length", lambda: au.accuracy(tiny_vit(), digits_8x8(), torch.zeros(5).long()),
     ValueError, r"labels: expected shape \(B,\) with B=4, got shape \(5,\)"),
    ("predict with something that is not a model", lambda: au.predict(lambda x: x, digits_8x8()), TypeError,
     r"model: expected a torch.nn.Module, got function"),
    # --- data
    ("unknown data source", lambda: au.load_translation("wmt14"), ValueError,
     r"source: expected one of \('synthetic', 'synthetic-long', 'tatoeba'\), got 'wmt14'"),
    ("max_train_len zero", lambda: au.load_translation(num_pairs=10, max_train_len=0), ValueError,
     r"max_train_len: expected an int >= 1, got 0"),
    ("max_train_len a float", lambda: au.load_translation(num_pairs=10, max_train_len=9.5), TypeError,
     r"max_train_len: expected an int, got float"),
    ("max_train_len below every sentence", lambda: au.load_translation("synthetic-long", num_pairs=26, max_train_len=4),
     ValueError, r"max_train_len: expected at least the shortest English sentence's 5 tokens, got 4"),
    ("long grammar num_pairs 0", lambda: au.generate_long_pairs(num_pairs=0), ValueError,
     r"num_pairs: expected an int >= 1, got 0"),
    ("long grammar max_len too long", lambda: au.generate_long_pairs(num_pairs=5, max_len=41), ValueError,
     r"min_len, max_len: expected 4 <= min_len <= max_len <= 40, got 5 and 41"),
    ("long grammar lengths crossed", lambda: au.generate_long_pairs(num_pairs=5, min_len=9, max_len=8), ValueError,
     r"min_len, max_len: expected 4 <= min_len <= max_len <= 40, got 9 and 8"),
    ("long grammar too many pairs", lambda: au.generate_long_pairs(num_pairs=10_000, min_len=4, max_len=4),
     ValueError, r"num_pairs: the long grammar has only \d+ distinct sentences of 4 tokens, too few for 10000 pairs"),
    ("long grammar seed a bool", lambda: au.generate_long_pairs(seed=False), TypeError,
     r"seed: expected an int, got bool"),
    ("num_pairs too small", lambda: au.load_translation(num_pairs=3), ValueError,
     r"num_pairs: expected an int >= 4, got 3"),
    ("num_pairs a float", lambda: au.load_translation(num_pairs=100.0), TypeError,
     r"num_pairs: expected an int, got float"),
    ("num_pairs too large", lambda: au.generate_pairs(num_pairs=10**7), ValueError,
     r"num_pairs: expected an int in \[4, \d+\] or None, got 10000000"),
    ("grammar num_pairs too small", lambda: au.generate_pairs(num_pairs=2), ValueError,
     r"num_pairs: expected an int in \[4, \d+\] or None, got 2"),
    ("seed a string", lambda: au.load_translation(seed="0"), TypeError, r"seed: expected an int, got str"),
    ("seed a float", lambda: au.make_regression_data(seed=1.5), TypeError, r"seed: expected an int, got float"),
    ("seed a bool", lambda: au.set_seed(True), TypeError, r"seed: expected an int, got bool"),
    ("grammar seed None", lambda: au.generate_pairs(seed=None), TypeError, r"seed: expected an int, got NoneType"),
    ("splits not summing to 1", lambda: au.load_translation(splits=(0.8, 0.1, 0.2)), ValueError,
     r"splits: expected three non-negative fractions \(train, valid, test\) summing to 1, got \(0.8, 0.1, 0.2\)"),
    ("bad sha1 string", lambda: au.download("http://127.0.0.1:9/x.zip", "not-a-sha1"), ValueError,
     r"sha1: expected 40 hexadecimal digits, got 'not-a-sha1'"),
    ("sha1 of the wrong length", lambda: au.download("http://127.0.0.1:9/x.zip", "ab" * 19), ValueError,
     r"sha1: expected 40 hexadecimal digits, got 'abab"),
    ("url not a string", lambda: au.download(None, "a" * 40), TypeError, r"url: expected a non-empty str, got None"),
    ("n_train = 0", lambda: au.make_regression_data(n_train=0), ValueError, r"n_train: expected an int >= 1, got 0"),
    ("noise < 0", lambda: au.make_regression_data(noise=-0.1), ValueError,
     r"noise: expected a finite float >= 0 \(the noise's standard deviation\), got -0.1"),
    ("regression target below 0", lambda: au.regression_target(torch.tensor([-1.0, 2.0])), ValueError,
     r"x: expected non-negative inputs .*got min -1"),
    ("vocab min_freq 0", lambda: au.Vocab([["a"]], min_freq=0), ValueError, r"min_freq: expected an int >= 1, got 0"),
    ("vocab of strings, not token lists", lambda: au.Vocab(["a b", "c"]), TypeError,
     r"sentences: expected lists of str tokens, got str at index 0"),
    ("vocab id out of range", lambda: VOCAB.to_tokens([4, 9]), ValueError, r"ids: expected ids in \[0, 6\), got 9"),
    ("unknown split", lambda: au.load_translation(num_pairs=10).split("dev"), ValueError,
     r"split: expected 'train', 'valid' or 'test', got 'dev'"),
    ("loader batch_size 0", lambda: au.load_translation(num_pairs=10).loader(batch_size=0), ValueError,
     r"batch_size: expected an int >= 1, got 0"),
    # --- training
    ("loss targets out of the vocabulary",
     lambda: au.sequence_cross_entropy(torch.zeros(2, 3, 5), torch.tensor([[1, 2, 7], [0, 0, 0]]),
                                       torch.tensor([2, 1])), ValueError,
     r"targets: expected token ids in \[0, 5\) \(V from logits of shape \(2, 3, 5\)\), got values in \[0, 7\]"),
    ("loss valid_lens > T",
     lambda: au.sequence_cross_entropy(torch.zeros(2, 3, 5), ids(2, 3, value=1), torch.tensor([4, 1])), ValueError,
     r"valid_lens: expected lengths in \[0, 3\], got values in \[1, 4\]"),
    ("loss targets of another shape",
     lambda: au.sequence_cross_entropy(torch.zeros(2, 3, 5), ids(2, 4, value=1), torch.tensor([3, 1])), ValueError,
     r"targets: expected shape \(B, T\) with T=3, got shape \(2, 4\)"),
    ("loss int logits",
     lambda: au.sequence_cross_entropy(torch.zeros(2, 3, 5, dtype=torch.long), ids(2, 3, value=1),
                                       torch.tensor([3, 1])), TypeError,
     r"logits: expected a floating-point tensor, got dtype torch.int64"),
    ("loss with no valid position",
     lambda: au.sequence_cross_entropy(torch.zeros(2, 3, 5), ids(2, 3, value=1), torch.tensor([0, 0])), ValueError,
     r"valid_lens: expected at least one valid target position in the batch, got all zeros"),
    ("train a plain module", lambda: au.train_seq2seq(nn.Linear(2, 2), [], num_epochs=1, lr=0.1, bos_id=1),
     TypeError, r"model: expected an attn_utils EncoderDecoder, got Linear"),
    ("train with lr 0", lambda: au.train_seq2seq(transformer(), [], num_epochs=1, lr=0.0, bos_id=1), ValueError,
     r"lr: expected a finite float > 0, got 0.0"),
    ("train with a schedule that is not a function",
     lambda: au.train_seq2seq(transformer(), [], num_epochs=1, lr=0.1, bos_id=1, lr_lambda=0.5), TypeError,
     r"lr_lambda: expected a function of the step or None, got float"),
    ("train on an empty loader", lambda: au.train_seq2seq(transformer(), [], num_epochs=1, lr=0.1, bos_id=1,
                                                          progress=False), ValueError,
     r"loader: expected at least one batch, got an empty loader"),
    ("greedy_decode max_len 0", greedy(max_len=0), ValueError, r"max_len: expected an int >= 1, got 0"),
    ("greedy_decode src_valid_lens of another batch", greedy(src_valid_lens=torch.tensor([3])), ValueError,
     r"src_valid_lens: expected shape \(2,\), got shape \(1,\)"),
    ("translate a single string", lambda: au.translate(transformer(), "go .", VOCAB, VOCAB, num_steps=4), TypeError,
     r"sentences: expected a sequence of str \(wrap a single sentence in a list\)"),
    ("translate with no sentence", lambda: au.translate(transformer(), [], VOCAB, VOCAB, num_steps=4), ValueError,
     r"sentences: expected at least one sentence, got an empty sequence"),
    ("bleu k = 0", lambda: au.bleu("a b", "a b", k=0), ValueError, r"k: expected an int >= 1, got 0"),
    ("bleu empty reference", lambda: au.bleu("a b", ""), ValueError,
     r"label: expected at least one token, got an empty reference"),
    ("corpus_bleu lengths differ", lambda: au.corpus_bleu(["a"], ["a", "b"]), ValueError,
     r"refs: expected one reference per prediction \(1\), got 2"),
    ("corpus_bleu of one string", lambda: au.corpus_bleu("a b", "a b"), TypeError,
     r"preds, refs: expected sequences of sentences, got a single str"),
    # --- plotting
    ("heatmap of a 2-D matrix", lambda: au.show_heatmaps(torch.rand(3, 4)), ValueError,
     r"matrices: expected shape \(rows, cols, T_q, T_k\), got shape \(3, 4\); for one matrix pass m\[None, None\]"),
    ("heatmap of a 3-D tensor", lambda: au.show_heatmaps(np.zeros((2, 3, 4))), ValueError,
     r"matrices: expected shape \(rows, cols, T_q, T_k\), got shape \(2, 3, 4\)"),
    ("heatmap of a list", lambda: au.show_heatmaps([[1.0]]), TypeError,
     r"matrices: expected a torch.Tensor or numpy array, got list"),
    ("heatmap with wrong tick labels", lambda: au.show_heatmaps(torch.rand(1, 1, 3, 4), xticklabels=["a"]),
     ValueError, r"xticklabels: expected 4 labels \(T_k\), got 1"),
    ("heatmap with wrong titles", lambda: au.show_heatmaps(torch.rand(1, 2, 3, 3), titles=["a"]), ValueError,
     r"titles: expected 2 strings \(one per column\) or 1 lists of 2, got \['a'\]"),
    ("loss curve of nothing", lambda: au.plot_losses([]), ValueError,
     r"losses: expected at least one non-empty sequence of values, got an empty one"),
    ("static slider without values", lambda: au.static_slider(lambda fig, v: None, []), ValueError,
     r"values: expected at least one parameter value, got none"),
    ("static slider with fps 0", lambda: au.static_slider(lambda fig, v: None, [1.0], fps=0), ValueError,
     r"fps: expected a finite float > 0, got 0"),
    ("static slider with dpi a float", lambda: au.static_slider(lambda fig, v: None, [1.0], dpi=60.0), TypeError,
     r"dpi: expected an int, got float"),
    ("static slider without a function", lambda: au.static_slider("draw", [1.0]), TypeError,
     r"draw: expected a function draw\(fig, value\), got str"),
    # --- the interactive head view
    ("head view of a list of floats", lambda: au.head_view([[0.5, 0.5]], ["a"]), TypeError,
     r"weights\[0\]: expected a torch.Tensor or numpy array of shape \(H, T_q, T_k\) \(one layer\), got list"),
    ("head view of one layer's 3-D weights", lambda: au.head_view(attn(2, 3, 3), TOKS), ValueError,
     r"weights: expected a 4-D tensor of shape \(L, H, T_q, T_k\) .*got shape \(2, 3, 3\); "
     r"for one layer pass weights\[None\]"),
    ("head view of a batch of two", lambda: au.head_view(attn(2, 1, 1, 3, 3), TOKS), ValueError,
     r"weights: expected one example, .* got shape \(2, 1, 1, 3, 3\) \(a batch of 2\); pass weights\[i\]"),
    ("head view of an empty list of layers", lambda: au.head_view([], TOKS), ValueError,
     r"weights: expected at least one layer's weights, got an empty list"),
    ("head view of a list of 2-D layers", lambda: au.head_view([torch.eye(3)], TOKS), ValueError,
     r"weights\[0\]: expected one layer's weights of shape \(H, T_q, T_k\) or \(1, H, T_q, T_k\), "
     r"got shape \(3, 3\)"),
    ("head view of layers of different shapes", lambda: au.head_view([attn(1, 3, 3), attn(2, 3, 3)], TOKS),
     ValueError, r"weights\[1\]: expected shape \(1, 3, 3\) like weights\[0\], got shape \(2, 3, 3\)"),
    ("head view of integer weights", lambda: au.head_view(torch.ones(1, 1, 3, 3, dtype=torch.long), TOKS),
     TypeError, r"weights: expected floating-point attention weights, got dtype torch.int64"),
    ("head view with an empty axis", lambda: au.head_view(torch.ones(1, 0, 3, 3), TOKS), ValueError,
     r"weights: expected no empty axis in \(L, H, T_q, T_k\), got shape \(1, 0, 3, 3\)"),
    ("head view of NaN weights", lambda: au.head_view(torch.tensor([[[[0.5, 0.5], [1.0, float("nan")]]]]), ["a", "b"]),
     ValueError, r"weights: expected finite values, got nan at index \(0, 0, 1, 1\) of \(L, H, T_q, T_k\)"),
    ("head view of negative weights", lambda: au.head_view(torch.tensor([[[[1.5, -0.5], [0.5, 0.5]]]]), ["a", "b"]),
     ValueError, r"weights: expected attention weights >= 0 \(after the softmax\), got -0.5 at index "
     r"\(0, 0, 0, 1\) of \(L, H, T_q, T_k\)"),
    ("head view of scores, not weights", lambda: au.head_view(torch.ones(1, 1, 3, 3), TOKS), ValueError,
     r"weights: expected every row to sum to 1 over the keys \(attention weights after the softmax\) or to be "
     r"all zeros \(a query with no valid key\), got a sum of 3 at index \(0, 0, 0\) of \(L, H, T_q\)"),
    ("head view with a sentence for tokens", lambda: au.head_view(attn(1, 1, 3, 3), "my cat sat"), TypeError,
     r"tokens: expected a sequence of str \(one per token\), got a str; split it first"),
    ("head view with token ids", lambda: au.head_view(attn(1, 1, 3, 3), [1, 2, 3]), TypeError,
     r"tokens: expected str items, got items of types \['int', 'int', 'int'\]"),
    ("head view with tokens None", lambda: au.head_view(attn(1, 1, 3, 3), None), TypeError,
     r"tokens: expected a sequence of str \(one per token\), got NoneType"),
    ("head view with no tokens", lambda: au.head_view(attn(1, 1, 3, 3), []), ValueError,
     r"tokens: expected at least one token, got an empty sequence"),
    ("head view with too few tokens", lambda: au.head_view(attn(2, 4, 3, 5), ["a", "b"], list("abcde")), ValueError,
     r"tokens: expected 3 tokens \(T_q of weights of shape \(2, 4, 3, 5\)\), got 2"),
    ("head view of cross-attention without key tokens", lambda: au.head_view(attn(1, 1, 3, 5), TOKS), ValueError,
     r"key_tokens: expected 5 key tokens \(T_k of weights of shape \(1, 1, 3, 5\)\), got None; the weights are "
     r"not square \(T_q=3, T_k=5\), so pass the keys' tokens"),
    ("head view with too many key tokens", lambda: au.head_view(attn(1, 1, 3, 5), TOKS, list("abcdef")),
     ValueError, r"key_tokens: expected 5 key tokens \(T_k of weights of shape \(1, 1, 3, 5\)\), got 6"),
    ("head view with a name for each head, not layer", lambda: au.head_view(attn(1, 2, 3, 3), TOKS,
                                                                          layer_names=["h1", "h2"]),
     ValueError, r"layer_names: expected 1 layer names \(L of weights of shape \(1, 2, 3, 3\)\), got 2"),
    ("head view with an empty title", lambda: au.head_view(attn(1, 1, 3, 3), TOKS, title=" "), ValueError,
     r"title: expected a non-empty str, got ' '"),
    ("head view with sum_tol 0", lambda: au.head_view(attn(1, 1, 3, 3), TOKS, sum_tol=0), ValueError,
     r"sum_tol: expected a finite float > 0, got 0"),
    ("float64 input to a float32 module", mha(queries=q(D=8, dtype=torch.float64)), TypeError,
     r"queries: expected dtype torch.float32 \(the module's parameters\), got torch.float64"),
    ("vocab lookup of non-str tokens", lambda: au.Vocab([["a"]])[["a", 3]], TypeError,
     r"tokens: expected a str or a sequence of str, got items of types \['str', 'int'\]"),
    ("target longer than the decoder's max_len", lambda: (lambda m: m.decoder(
        ids(1, 40), m.decoder.init_state(m.encoder(ids(1, 3), torch.tensor([3])), torch.tensor([3]))))(transformer()),
     ValueError, r"tgt: expected at most max_len=\d+ target positions in all, got shape \(1, 40\) after 0"),
    ("greedy decoding with a negative bos_id", lambda: au.greedy_decode(transformer(), ids(1, 3), torch.tensor([3]),
                                                                     bos_id=-1, eos_id=2, max_len=4),
     ValueError, r"bos_id: expected an int >= 0, got -1"),
    ("download URL without a file name", lambda: au.download("http://127.0.0.1:9/", "0" * 40), ValueError,
     r"url: expected a URL that ends in a file name, got 'http://127.0.0.1:9/'"),
    # --- data and downloads
    ("download timeout 0", lambda: au.download("http://127.0.0.1:9/x.zip", "a" * 40, timeout=0), ValueError,
     r"timeout: expected a finite float > 0, got 0"),
    ("download timeout a string", lambda: au.download("http://127.0.0.1:9/x.zip", "a" * 40, timeout="30"),
     TypeError, r"timeout: expected a positive float, got str"),
    ("download over ftp", lambda: au.download("ftp://127.0.0.1/x.zip", "a" * 40), ValueError,
     r"url: expected an http://, https:// or file:// URL, got 'ftp://127.0.0.1/x.zip'"),
    ("download URL without a scheme", lambda: au.download("fra-eng.zip", "a" * 40), ValueError,
     r"url: expected an http://, https:// or file:// URL, got 'fra-eng.zip'"),
    ("download cache_dir an int", lambda: au.download("http://127.0.0.1:9/x.zip", "a" * 40, cache_dir=3), TypeError,
     r"cache_dir: expected a str, a Path or None, got int"),
    ("download a missing local file", lambda: au.download("file:///nonexistent/attn_utils/fra-eng.zip", "a" * 40),
     ConnectionError, r"could not download file:///nonexistent/attn_utils/fra-eng.zip \(no such file: "
     r"/nonexistent/attn_utils/fra-eng.zip\)\. Without network access, use source='synthetic', the course's offline "
     r"corpus, or copy the file fra-eng.zip \(SHA-1 a{40}\) into "),
    ("tatoeba from a missing local file",
     lambda: au.load_translation("tatoeba", url="file:///nonexistent/fra-eng.zip", sha1="a" * 40), ConnectionError,
     r"could not download file:///nonexistent/fra-eng.zip .*use source='synthetic'"),
    ("download with the wrong checksum", lambda: au.download(f"file://{__file__}", "0" * 40), ValueError,
     r"sha1: the file downloaded from file://\S+/test_bad_inputs.py has SHA-1 [0-9a-f]{40}, expected 0{40}; "
     r"it was deleted"),
    # --- a pretrained BERT encoder (chapter 11)
    ("BERT config heads do not divide the width", lambda: au.BertConfig(vocab_size=5, d_model=10, num_heads=4),
     ValueError, r"d_model: expected a multiple of num_heads=4, got d_model=10"),
    ("BERT config eps 0", lambda: au.BertConfig(vocab_size=5, eps=0.0), ValueError,
     r"eps: expected a number in \(0, 1\) \(the layer norm's epsilon\), got 0.0"),
    ("BERT config of another model", lambda: au.BertConfig.from_hf({"model_type": "gpt2"}), ValueError,
     r"config: expected model_type 'bert', got 'gpt2'"),
    ("BERT encoder of a GPT config", lambda: au.BertEncoder(au.GPTConfig(vocab_size=5)), TypeError,  # type: ignore[arg-type]
     r"cfg: expected a BertConfig, got GPTConfig"),
    ("BERT checkpoint whose shapes do not match the config",
     lambda: au.load_bert_weights(au.BertEncoder(TINY_BERT), {
         theirs: torch.zeros(3) for theirs in au.checkpoint_names(TINY_BERT).values()}), ValueError,
     r"state_dict: expected 'embeddings.word_embeddings.weight' of shape \(20, 8\) \(from the config\), got shape "
     r"\(3,\); does the config match the checkpoint\?"),
    ("BERT checkpoint with a tensor missing", lambda: au.load_bert_weights(au.BertEncoder(TINY_BERT), {}), KeyError,
     r"state_dict: expected the checkpoint tensors of a 1-layer BERT, 21 missing, "
     r"e.g. 'embeddings.word_embeddings.weight'"),
    ("BERT weights file with a checksum mismatch", lambda: au.load_minilm(sha256="0" * 64), ValueError,
     r"model.safetensors: expected SHA-256 0{64}, got 53aa5117[0-9a-f]{56}; the file is not the one the course "
     r"was written for"),
    ("BERT checksum not hexadecimal", lambda: au.load_minilm(sha256="xyz"), ValueError,
     r"sha256: expected 64 hexadecimal digits or None, got 'xyz'"),
    ("BERT mask with a row of padding only",
     lambda: au.BertEncoder(TINY_BERT)(ids(2, 3), torch.tensor([[1, 1, 0], [0, 0, 0]])), ValueError,
     r"attention_mask: expected at least one real token \(a 1\) in every row, got a row of 0s"),
    ("BERT input longer than its positions", lambda: au.BertEncoder(TINY_BERT)(ids(1, 7)), ValueError,
     r"input_ids: expected at most max_len=6 positions \(the learned position table's\), got shape \(1, 7\)"),
    ("mean_pool of integer states", lambda: au.mean_pool(torch.ones(2, 3, 4, dtype=torch.long), torch.ones(2, 3)),
     TypeError, r"hidden: expected a floating-point tensor"),
    ("tokenize one string", lambda: au.tokenize(None, "a sentence"), TypeError,
     r"sentences: expected a list of strings, got str"),
    ("sentence_embeddings of raw ids", lambda: au.sentence_embeddings(au.BertEncoder(TINY_BERT), ids(1, 3)),
     TypeError, r"batch: expected a TokenBatch from tokenize, got Tensor"),
    # --- measuring and ablating heads
    ("attention_mass of 4-D weights", lambda: au.attention_mass(torch.ones(1, 2, 3, 3), torch.ones(1, 3, 3).bool()),
     ValueError, r"weights: expected a 5-D tensor of shape \(B, L, H, T_q, T_k\), got shape \(1, 2, 3, 3\)"),
    ("attention_mass targets of another length",
     lambda: au.attention_mass(torch.ones(1, 1, 1, 3, 3), torch.ones(1, 3, 4).bool()), ValueError,
     r"targets: expected shape \(B, T_q, T_k\) with T_k=3, got shape \(1, 3, 4\)"),
    ("offset_targets with a float offset", lambda: au.offset_targets(torch.ones(1, 3), 0.5), TypeError,
     r"offset: expected an int, got float"),
    ("ablate a head that does not exist", lambda: au.ablate_heads(au.MultiHeadAttention(8, 2), [2]).__enter__(),
     ValueError, r"heads: expected head indices in \[0, 2\), got 2"),
    ("ablate heads of a linear layer", lambda: au.ablate_heads(nn.Linear(2, 2), [0]).__enter__(), TypeError,
     r"attention: expected a MultiHeadAttention, got Linear"),
    # --- positions and memory in today's attention (chapter 12)
    ("num_kv_heads not dividing num_heads", lambda: au.MultiHeadAttention(8, 4, num_kv_heads=3), ValueError,
     r"num_kv_heads: expected a divisor of num_heads=4 .*, got num_kv_heads=3"),
    ("num_kv_heads of zero", lambda: au.MultiHeadAttention(8, 4, num_kv_heads=0), ValueError,
     r"num_kv_heads: expected an int >= 1, got 0"),
    ("GPTConfig num_kv_heads not dividing num_heads",
     lambda: au.GPTConfig(vocab_size=10, d_model=8, num_heads=4, num_kv_heads=3), ValueError,
     r"num_kv_heads: expected a divisor of num_heads=4 .*, got num_kv_heads=3"),
    ("RoPE with an odd head width", lambda: au.MultiHeadAttention(6, 2, rope=True), ValueError,
     r"rope: expected an even head width d_model // num_heads .*, got 3 \(d_model=6, num_heads=2\)"),
    ("apply_rope to an odd width", lambda: au.apply_rope(torch.ones(2, 3, 5)), ValueError,
     r"d_head: expected an even head width .*, got d_head=5"),
    ("GPTConfig rope with an odd head width",
     lambda: au.GPTConfig(vocab_size=10, d_model=6, num_heads=2, positional="rope"), ValueError,
     r"positional: 'rope' needs an even head width .*, got 3"),
    ("RoPE offset past the rotation cache", lambda: au.RotaryEmbedding(4, max_len=8)(torch.ones(1, 3, 4), offset=6),
     ValueError, r"offset: positions 6\.\.8 run past the 8 positions .* got offset=6 .* expected offset \+ T <= 8"),
    ("MHA with RoPE decoding past its cache",
     lambda: au.MultiHeadAttention(8, 2, rope=True, max_len=4)(q(T=2, D=8), q(T=2, D=8), q(T=2, D=8),
                                                                kv_cache=au.KVCache(torch.ones(2, 2, 3, 4),
                                                                                    torch.ones(2, 2, 3, 4))),
     ValueError, r"offset: positions 3\.\.4 run past the 4 positions"),
    ("RoPE with a negative offset", lambda: au.apply_rope(torch.ones(3, 4), offset=-1), ValueError,
     r"offset: expected an int >= 0, got -1"),
    ("RoPE and ALiBi at once", lambda: au.MultiHeadAttention(8, 2, rope=True, alibi=True), ValueError,
     r"rope, alibi: expected at most one positional scheme"),
    ("an unknown positional scheme", lambda: au.GPTConfig(vocab_size=10, positional="relative"), ValueError,
     r"positional: expected one of 'sinusoidal', 'learned', 'rope', 'alibi', 'none', got 'relative'"),
    ("alibi_bias with fewer keys than queries", lambda: au.alibi_bias(au.alibi_slopes(2), 4, 3), ValueError,
     r"T_k: expected T_k >= T_q=4"),
    ("a sliding window of zero", lambda: au.sliding_window_mask(4, window=0), ValueError,
     r"window: expected at least 1 \(a query always sees itself\), got window=0"),
    ("a sliding window given as a float", lambda: au.sliding_window_mask(4, window=2.0), TypeError,
     r"window: expected an int .*, got float"),
    ("GPTConfig window of zero", lambda: au.GPTConfig(vocab_size=10, window=0), ValueError,
     r"window: expected at least 1 .*, got window=0"),
    ("attention bias that needs a gradient", dpa(attn_bias=torch.zeros(3, 5, requires_grad=True)), ValueError,
     r"attn_bias: expected a constant tensor \(requires_grad=False\)"),
    ("attention bias of the wrong shape", dpa(attn_bias=torch.zeros(3, 4)), ValueError,
     r"attn_bias: expected a shape broadcastable to the scores' shape \(2, 3, 5\), got shape \(3, 4\)"),
    ("grouped keys whose heads do not divide the queries'",
     lambda: au.dot_product_attention(torch.ones(1, 4, 2, 4), torch.ones(1, 3, 2, 4), torch.ones(1, 3, 2, 4),
                                      enable_gqa=True), ValueError,
     r"keys: expected a number of heads dividing the queries' H=4, got shape \(1, 3, 2, 4\)"),
    ("a KV cache of the wrong number of key/value heads",
     lambda: au.MultiHeadAttention(8, 4, num_kv_heads=2)(q(B=1, T=1, D=8), q(B=1, T=1, D=8), q(B=1, T=1, D=8),
                                                         kv_cache=au.KVCache(torch.ones(1, 4, 3, 2),
                                                                             torch.ones(1, 4, 3, 2))),
     ValueError, r"kv_cache: expected new keys and values of shape \(1, 4, T_new, 2\)"),
    ("load nn.MultiheadAttention into a GQA module",
     lambda: au.MultiHeadAttention(8, 2, num_kv_heads=1).load_from_torch(nn.MultiheadAttention(8, 2, batch_first=True)),
     ValueError, r"reference: nn.MultiheadAttention has no shared key/value heads, RoPE or ALiBi"),
    ("learned positions past max_len",
     lambda: au.make_gpt(au.GPTConfig(vocab_size=10, d_model=8, num_heads=2, max_len=4, positional="learned"))(
         ids(1, 5)), ValueError, r"tokens: expected at most max_len=4 positions"),
    # --- NaN and inf where the result depends on them (in padding they are ignored: see test_extreme_values.py)
    ("NaN in a key that a query attends", dpa(keys=nan_at(q(T=5), (1, 2, 0))), ValueError,
     r"keys: expected finite values at every key that a query may attend \(padding may hold anything\), got nan "
     r"at batch element 1, position 2"),
    ("inf in a value that a query attends, fused path", dpa(values=nan_at(q(T=5, D=6), (0, 4, 5), float("inf")),
                                                            valid_lens=torch.tensor([5, 1]), need_weights=False),
     ValueError, r"values: expected finite values at every key that a query may attend .*got inf at batch element 0, "
                 r"position 4"),
    ("NaN in a query that has keys", dpa(queries=nan_at(q(), (0, 1, 3))), ValueError,
     r"queries: expected finite values at every query that has a key to attend \(padding may hold anything\), got "
     r"nan at batch element 0, position 1"),
    ("NaN in an attention bias", dpa(attn_bias=nan_at(torch.zeros(3, 5), (2, 4))), ValueError,
     r"attn_bias: expected finite values \(or -inf, which masks the key\) where a query may attend, got nan at "
     r"index \(0, 2, 4\) of the scores"),
    ("+inf in an attention bias", dpa(attn_bias=nan_at(torch.zeros(3, 5), (0, 0), float("inf"))), ValueError,
     r"attn_bias: expected finite values .*got inf at index \(0, 0, 0\)"),
    ("valid_lens out of range, checked with the values in one read", dpa(valid_lens=torch.tensor([-1, 5])),
     ValueError, r"valid_lens: expected every entry in \[0, 5\], got values in \[-1, 5\]"),
    ("NaN in the keys of multi-head attention", mha(keys=nan_at(q(T=5, D=8), (1, 3, 7))), ValueError,
     r"keys: expected finite values at every key that a query may attend .*got nan at batch element 1, position 3"),
    ("inf in the queries of multi-head attention", mha(queries=nan_at(q(D=8), (0, 2, 0), float("-inf"))), ValueError,
     r"queries: expected finite values at every query that has a key to attend .*got -inf at batch element 0, "
     r"position 2"),
    ("NaN in projected keys given to attend",
     lambda: (lambda m: m.attend(q(D=8), nan_at(torch.ones(2, 2, 5, 4), (0, 1, 2, 3)), torch.ones(2, 2, 5, 4)))(
         au.MultiHeadAttention(8, 2)), ValueError,
     r"k: expected finite values at every key that a query may attend .*got nan at batch element 0, position 2"),
    ("NaN in the values of additive attention", lambda: au.AdditiveAttention(4, 4, 8)(q(), q(T=5),
                                                                                     nan_at(q(T=5), (1, 0, 0))),
     ValueError, r"values: expected finite values at every key that a query may attend .*got nan at batch element 1, "
                 r"position 0"),
    ("NaN at a valid score", lambda: au.masked_softmax(nan_at(q(), (1, 2, 1)), torch.tensor([4, 2])), ValueError,
     r"scores: expected finite values \(or -inf, which masks the key\) at the valid keys, got nan at index "
     r"\(1, 2, 1\) of shape \(2, 3, 4\)"),
    ("+inf at a valid score", lambda: au.masked_softmax(nan_at(q(), (0, 0, 0), float("inf"))), ValueError,
     r"scores: expected finite values .*got inf at index \(0, 0, 0\)"),
    ("NaN in Nadaraya-Watson keys", lambda: au.nadaraya_watson(torch.ones(3), nan_at(torch.ones(4), (2,)),
                                                               torch.ones(4)), ValueError,
     r"keys: expected finite values, got nan at index \(2,\) of shape \(4,\)"),
    ("inf in Nadaraya-Watson queries with a compact kernel",
     lambda: au.nadaraya_watson(nan_at(torch.ones(3), (0,), float("inf")), torch.ones(4), torch.ones(4),
                                kernel="boxcar"), ValueError,
     r"queries: expected finite values, got inf at index \(0,\)"),
    ("Nadaraya-Watson of mixed dtypes",
     lambda: au.nadaraya_watson(torch.ones(3), torch.ones(4), torch.ones(4, dtype=torch.float64)), TypeError,
     r"queries, keys, values: expected one dtype, got torch.float32, torch.float32 and torch.float64"),
    ("parametric Nadaraya-Watson with w gone NaN",
     lambda: diverged_nw()(torch.ones(2), torch.ones(2, 3), torch.ones(2, 3)), ValueError,
     r"w: expected a finite inverse kernel width, got nan; did a training step diverge\?"),
    ("NaN in the inputs of parametric Nadaraya-Watson",
     lambda: au.NWKernelRegression(1.0)(torch.ones(2), torch.ones(2, 3), nan_at(torch.ones(2, 3), (1, 1))),
     ValueError, r"values: expected finite values, got nan at index \(1, 1\) of shape \(2, 3\)"),
    ("NaN logits to sample from", lambda: au.sampling_probs(nan_at(torch.zeros(2, 5), (1, 3))), ValueError,
     r"logits: expected finite values \(or -inf for a token that may not be drawn\), got nan at index \(1, 3\)"),
    ("a row of -inf logits", lambda: au.sampling_probs(torch.tensor([[0.0, 1.0], [float("-inf")] * 2])), ValueError,
     r"logits: expected at least one finite logit in every row, got a row of -inf at index 1; no token could be "
     r"drawn"),
    ("mean pooling NaN at a real token",
     lambda: au.mean_pool(nan_at(torch.ones(2, 3, 4), (1, 1, 2)), torch.tensor([[1, 1, 0], [1, 1, 1]])), ValueError,
     r"hidden: expected finite values at the real tokens, got nan at index \(1, 1, 2\)"),
    ("mean pooling with a mask of 2s", lambda: au.mean_pool(torch.ones(1, 3, 4), torch.tensor([[1, 2, 0]])),
     ValueError, r"attention_mask: expected only 0 \(padding\) and 1 \(a real token\), got other values"),
    ("attention_mass of NaN weights",
     lambda: au.attention_mass(nan_at(torch.ones(1, 1, 1, 3, 3), (0, 0, 0, 1, 2)),
                               torch.eye(3, dtype=torch.bool)[None]),
     ValueError, r"weights: expected finite attention weights, got nan at index \(0, 0, 0, 1, 2\) of "
                 r"\(B, L, H, T_q, T_k\)"),
    ("decoding with a model whose logits are NaN", lambda: au.greedy_decode(nan_transformer(), ids(2, 3),
                                                                          torch.tensor([3, 2]), bos_id=1, eos_id=2,
                                                                          max_len=4),
     ValueError, r"model: expected next-token logits without NaN, got NaN at decoding step 0 \(row 0\); are the "
                 r"model's weights finite\?"),
    # --- a bool where an int is expected, a str where a list of str is
    ("greedy decoding with eos_id=True", greedy(eos_id=True), TypeError, r"eos_id: expected an int, got bool"),
    ("greedy decoding with bos_id=False", greedy(bos_id=False), TypeError, r"bos_id: expected an int, got bool"),
    ("multi-head attention with num_heads=True", lambda: au.MultiHeadAttention(8, True), TypeError,
     r"num_heads: expected an int, got bool"),
    ("a seed of True", lambda: au.set_seed(True), TypeError, r"seed: expected an int, got bool"),
    ("regression data with noise=True", lambda: au.make_regression_data(noise=True), TypeError,
     r"noise: expected a finite float >= 0 \(the noise's standard deviation\), got bool"),
    ("a bool as a token id", lambda: VOCAB.to_tokens(True), TypeError, r"ids: expected int ids, got bool True"),
    ("bools as token ids", lambda: VOCAB.to_tokens([1, False]), TypeError, r"ids: expected int ids, got bool False"),
    ("a float as a token id", lambda: VOCAB.to_tokens([2.0]), TypeError, r"ids: expected int ids, got float 2.0"),
    ("a float tensor of token ids", lambda: VOCAB.to_tokens(torch.tensor([1.0])), TypeError,
     r"ids: expected integer ids, got a tensor of dtype torch.float32"),
    ("vocabulary lookup of an int", lambda: VOCAB[3], TypeError,
     r"tokens: expected a str or a sequence of str, got int"),
    ("truncate_pad of a str", lambda: au.truncate_pad("abc", 4, 0), TypeError,
     r"ids: expected a sequence of int ids, got str"),
    ("truncate_pad with pad_id=True", lambda: au.truncate_pad([5], 4, True), TypeError,
     r"pad_id: expected an int, got bool"),
    ("truncate_pad of bools", lambda: au.truncate_pad([True, 5], 4, 0), TypeError,
     r"ids: expected int ids, got bool True"),
    ("encode_sentences of one sentence", lambda: au.encode_sentences("a b", VOCAB, 4), TypeError,
     r"sentences: expected a sequence of str \(wrap a single sentence in a list\)"),
    ("translate one sentence", lambda: au.translate(transformer(), "a b", VOCAB, VOCAB, num_steps=4), TypeError,
     r"sentences: expected a sequence of str \(wrap a single sentence in a list\)"),
    ("a split given as a list", lambda: au.evaluate_bleu(transformer(), au.load_translation(num_pairs=20), ["test"]),
     TypeError, r"split: expected 'train', 'valid' or 'test', got list"),
    ("sentence_embeddings of one sentence", lambda: au.sentence_embeddings(au.BertEncoder(TINY_BERT), "a sentence"),
     TypeError, r"batch: expected a TokenBatch from tokenize, got str"),
    ("sentence_embeddings with batch_size=True",
     lambda: au.sentence_embeddings(au.BertEncoder(TINY_BERT), au.TokenBatch(ids(1, 3), ids(1, 3, value=1),
                                                                            ids(1, 3, value=0), [["a"] * 3]),
                                    batch_size=True), TypeError, r"batch_size: expected an int, got bool"),
    ("checkpoint names of a dict", lambda: au.checkpoint_names({"num_layers": 1}), TypeError,  # type: ignore[arg-type]
     r"cfg: expected a BertConfig, got dict"),
    ("mean pooling with a float mask", lambda: au.mean_pool(torch.ones(1, 3, 4), torch.ones(1, 3)), TypeError,
     r"attention_mask: expected an integer tensor \(e.g. torch.long\), got dtype torch.float32"),
    ("top_p given as a str", lambda: au.sampling_probs(torch.zeros(1, 3), top_p="0.9"), TypeError,
     r"top_p: expected a float in \(0, 1\] or None, got str"),
    ("length_penalty=True", lambda: au.beam_search(transformer(), ids(1, 3), torch.tensor([3]), bos_id=1, eos_id=2,
                                                   max_len=2, beam_size=2, length_penalty=True), TypeError,
     r"length_penalty: expected a finite float >= 0, got bool"),
    ("ablate heads=True", lambda: au.ablate_heads(au.MultiHeadAttention(8, 2), True).__enter__(), TypeError,
     r"heads: expected an iterable of int head indices, got bool"),
    ("ablate heads given as a str", lambda: au.ablate_heads(au.MultiHeadAttention(8, 2), "01").__enter__(), TypeError,
     r"heads: expected an iterable of int head indices, got str"),
    ("ablate head True", lambda: au.ablate_heads(au.MultiHeadAttention(8, 2), [True]).__enter__(), TypeError,
     r"heads: expected int head indices, got bool True"),
    ("heatmap tick labels given as a str", lambda: au.show_heatmaps(torch.ones(1, 1, 2, 3), xticklabels="abc"),
     TypeError, r"xticklabels: expected a sequence of str \(one per position\) or None, got str"),
    ("heatmap titles given as a str", lambda: au.show_heatmaps(torch.ones(1, 3, 2, 2), titles="abc"), TypeError,
     r"titles: expected 3 strings \(one per column\) or 1 lists of 3, got a str"),
    ("loss curve given as a str", lambda: au.plot_losses("123"), TypeError,
     r"losses: expected a sequence of numbers, got str"),
    ("slider values given as a str", lambda: au.static_slider(lambda fig, value: None, "123"), TypeError,
     r"values: expected a sequence of parameter values, got str"),
    ("KV cache: values of another dtype than the keys",
     lambda: au.KVCache().append(torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4, dtype=torch.float64)), ValueError,
     r"kv_cache.append: v: expected dtype torch.float32 on cpu \(as k\), got torch.float64 on cpu"),
    ("dot-product keys on another device", dpa(keys=torch.ones(2, 5, 4, device="meta")), ValueError,
     r"keys: expected a tensor on cpu \(as queries\), got one on meta"),
    ("positional encoding of a tensor on another device",
     lambda: au.PositionalEncoding(8)(torch.ones(2, 3, 8, device="meta")), ValueError,
     r"X: expected a tensor on cpu \(the module's precomputed table\), got one on meta"),
    ("rotary embedding of a tensor on another device",
     lambda: au.RotaryEmbedding(4, max_len=8)(torch.ones(1, 3, 4, device="meta")), ValueError,
     r"x: expected a tensor on cpu \(the module's precomputed table\), got one on meta"),
]


def test_the_table_is_large_and_unambiguous() -> None:
    assert len(CASES) >= 25
    names = [c[0] for c in CASES]
    assert len(set(names)) == len(names)


@pytest.mark.parametrize(("func", "exc", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_raises_a_clear_error(func: Callable[[], object], exc: type[Exception], pattern: str) -> None:
    with pytest.raises(exc) as info:
        func()
    assert type(info.value) is exc  # exactly this type (not some subclass that merely matches)
    assert re.search(pattern, str(info.value)), f"message {str(info.value)!r} does not match {pattern!r}"


def test_checks_that_pass_format_no_message(monkeypatch: pytest.MonkeyPatch) -> None:
    # The shape checks run in every layer at every step (about 30 times per decoding step): they format their
    # messages only when they fail.
    from attn_utils import _checks

    def refuse(*args: object) -> str:
        raise AssertionError("a message was formatted for a check that passed")

    monkeypatch.setattr(_checks, "fmt_shape", refuse)
    monkeypatch.setattr(_checks, "fmt_expected", refuse)
    sizes = _checks.check_shape("queries", q(), ("B", "T_q", 4))
    _checks.check_shape("keys", q(T=5), ("B", None, "D"), sizes)
    _checks.check_tokens("src", ids(2, 3), torch.tensor([3, 1]), vocab_size=10)
    au.MultiHeadAttention(8, 2)(q(D=8), q(T=5, D=8), q(T=5, D=8), torch.tensor([5, 2]))
    with pytest.raises(AssertionError, match="a message was formatted"):  # ... and do format it when they fail
        _checks.check_shape("queries", q(), ("B", "T_q", 5))
