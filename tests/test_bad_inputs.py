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


VOCAB = au.Vocab([["a", "b"]])

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
