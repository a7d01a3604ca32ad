"""The Transformer (Vaswani et al., 2017), built from this package's attention parts.

The encoder–decoder is post-norm, as in the paper: each sublayer is
``AddNorm(X, sublayer(X)) = LayerNorm(X + dropout(sublayer(X)))``.

* encoder block: self-attention, add & norm, position-wise FFN, add & norm;
* decoder block: *causal* self-attention, add & norm, cross-attention to the encoder's outputs, add & norm, FFN,
  add & norm.

:class:`TransformerConfig` holds the sizes; :func:`make_transformer` builds an
:class:`~attn_utils.seq2seq.EncoderDecoder`.

The decoder-only Transformer (GPT) is one stack of *pre-norm* causal self-attention blocks,
``X + attention(LayerNorm(X))`` then ``X + FFN(LayerNorm(X))``, with a final layer norm and an output layer that
reuses the token embedding matrix. :class:`GPTConfig` holds its sizes; :func:`make_gpt` builds a
:class:`DecoderOnlyTransformer`. With ``attention="linear"`` its blocks use causal linear attention
(:class:`~attn_utils.linear.LinearMultiHeadAttention`), whose memory while it generates is a fixed-size state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from ._checks import (
    check_floating,
    check_lengths,
    check_positive_int,
    check_probability,
    check_same_device_dtype,
    check_shape,
    check_tokens,
    fmt_shape,
    values_checked_scope,
)
from .linear import LinearMultiHeadAttention, LinearStateCache
from .masking import _check_window, causal_mask, sliding_window_mask
from .multihead import KVCache, MultiHeadAttention, _check_num_kv_heads
from .positional import PositionalEncoding
from .seq2seq import Decoder, DecoderOutput, Encoder, EncoderDecoder, EncoderOutput

__all__ = [
    "TransformerConfig",
    "PositionWiseFFN",
    "AddNorm",
    "TransformerEncoderBlock",
    "TransformerDecoderBlock",
    "TransformerEncoder",
    "TransformerDecoder",
    "TransformerDecoderState",
    "make_transformer",
    "ACTIVATIONS",
    "POSITIONAL",
    "ATTENTION",
    "GPTConfig",
    "PreNormBlock",
    "LMState",
    "DecoderOnlyTransformer",
    "make_gpt",
]


@dataclass(frozen=True)
class TransformerConfig:
    """Sizes of an encoder–decoder Transformer."""

    src_vocab_size: int  # V_src, source vocabulary size
    tgt_vocab_size: int  # V_tgt, target vocabulary size
    d_model: int = 64  # D, width of every token representation
    num_heads: int = 4  # H, attention heads per layer (D_h = D // H)
    ffn_hidden: int = 128  # hidden width of the position-wise FFN
    num_layers: int = 2  # L, blocks in the encoder and in the decoder
    dropout: float = 0.1  # dropout after embeddings, on attention weights and before each add & norm
    max_len: int = 128  # longest sequence the positional encoding covers

    def __post_init__(self) -> None:
        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "num_heads", "ffn_hidden", "num_layers", "max_len"):
            check_positive_int(name, getattr(self, name))
        check_probability("dropout", self.dropout)
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model: expected a multiple of num_heads={self.num_heads}, got d_model={self.d_model}"
            )


ACTIVATIONS = ("relu", "gelu")
"""The nonlinearities :class:`PositionWiseFFN` offers: ReLU (the 2017 Transformer) and GELU (GPT-2, BERT)."""


class PositionWiseFFN(nn.Module):
    """The same two-layer MLP applied at every position: ``Linear(D, F) -> activation -> Linear(F, D)``, with ReLU
    or GELU as the activation.

    Args:
        d_model: input and output width ``D``.
        ffn_hidden: hidden width ``F``.
        activation: ``"relu"`` (the 2017 paper's) or ``"gelu"`` (GPT-2's and BERT's).
    """

    def __init__(self, d_model: int, ffn_hidden: int, activation: str = "relu") -> None:
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        check_positive_int("ffn_hidden", ffn_hidden)
        self.dense1 = nn.Linear(d_model, ffn_hidden)
        # The attribute keeps its name `relu` whatever the function, so that saved models load unchanged.
        self.relu = _activation(activation)
        self.dense2 = nn.Linear(ffn_hidden, d_model)

    def forward(self, X: Tensor) -> Tensor:
        """Args: X ``(B, T, D)``. Returns: ``(B, T, D)``."""
        check_shape("X", X, ("B", "T", self.d_model))
        check_floating("X", X)
        check_same_device_dtype("X", X, self.dense1.weight)
        return self.dense2(self.relu(self.dense1(X)))  # (B, T, D) -> (B, T, F) -> (B, T, D)


def _check_eps(eps: object) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < 1:
        raise ValueError(f"eps: expected a number in (0, 1) (the layer norm's epsilon), got {eps!r}")
    return float(eps)


def _activation(name: object) -> nn.Module:
    if name not in ACTIVATIONS:
        raise ValueError(f"activation: expected one of {ACTIVATIONS}, got {name!r}")
    return nn.ReLU() if name == "relu" else nn.GELU()


class AddNorm(nn.Module):
    """Residual connection followed by layer normalisation: ``LayerNorm(X + dropout(Y))``.

    Args:
        d_model: width ``D``.
        dropout: dropout probability on ``Y``.
        eps: the layer norm's ``ε`` (PyTorch's default 1e-5; BERT uses 1e-12).
    """

    def __init__(self, d_model: int, dropout: float = 0.0, eps: float = 1e-5) -> None:
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        self.dropout = nn.Dropout(check_probability("dropout", dropout))
        self.ln = nn.LayerNorm(d_model, eps=_check_eps(eps))

    def forward(self, X: Tensor, Y: Tensor) -> Tensor:
        """Args: X, Y ``(B, T, D)``. Returns: ``(B, T, D)``."""
        sizes = check_shape("X", X, ("B", "T", self.d_model))
        check_shape("Y", Y, ("B", "T", self.d_model), sizes)
        for name, t in (("X", X), ("Y", Y)):
            check_floating(name, t)
            check_same_device_dtype(name, t, self.ln.weight)
        return self.ln(X + self.dropout(Y))


class TransformerEncoderBlock(nn.Module):
    """Self-attention and a position-wise FFN, each wrapped in add & norm (post-norm, as in the 2017 paper and BERT).

    Args:
        d_model: width ``D``.
        num_heads: heads ``H``.
        ffn_hidden: FFN hidden width.
        dropout: dropout probability.
        activation: the FFN's nonlinearity, ``"relu"`` (the 2017 paper's) or ``"gelu"`` (BERT's).
        eps: the layer norms' ``ε`` (BERT uses 1e-12).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        ffn_hidden: int,
        dropout: float = 0.0,
        activation: str = "relu",
        eps: float = 1e-5,
    ) -> None:
        super().__init__()
        self.attention = MultiHeadAttention(d_model, num_heads, dropout)
        self.addnorm1 = AddNorm(d_model, dropout, eps)
        self.ffn = PositionWiseFFN(d_model, ffn_hidden, activation)
        self.addnorm2 = AddNorm(d_model, dropout, eps)

    def forward(
        self,
        X: Tensor,
        valid_lens: Tensor | None = None,
        need_weights: bool = False,
        attn_mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Encode one layer.

        Args:
            X: ``(B, T, D)``.
            valid_lens: None or ``(B,)``: the first ``valid_lens[b]`` positions are real, the rest padding.
            need_weights: return the attention weights.
            attn_mask: None, or a bool mask (True = may attend) as :class:`~attn_utils.multihead.MultiHeadAttention`
                takes it, e.g. ``(B, 1, T, T)`` from a tokenizer's padding mask.
        Returns:
            ``(Y, weights)``: ``(B, T, D)`` and ``(B, H, T, T)`` (None unless ``need_weights``).
        """
        attended, weights = self.attention(X, X, X, valid_lens, attn_mask, need_weights=need_weights)
        Y = self.addnorm1(X, attended)
        return self.addnorm2(Y, self.ffn(Y)), weights


def _self_attention_mask(T: int, T_past: int, device: torch.device) -> tuple[Tensor | None, bool]:
    """The causal mask of ``T`` new positions after ``T_past`` cached ones, as ``(attn_mask, is_causal)``."""
    if T_past == 0:  # all positions at once (training, prefill): the fused kernel's own causal masking
        return None, True
    if T == 1:  # one new position sees every cached one: nothing to mask
        return None, False
    return causal_mask(T, T_past + T, device=device), False  # aligned bottom-right, (T, T_past + T)


class TransformerDecoderBlock(nn.Module):
    """Causal self-attention, cross-attention to the encoder, and an FFN, each wrapped in add & norm.

    Args:
        d_model: width ``D``.
        num_heads: heads ``H``.
        ffn_hidden: FFN hidden width.
        dropout: dropout probability.
    """

    def __init__(self, d_model: int, num_heads: int, ffn_hidden: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model, num_heads, dropout)
        self.addnorm1 = AddNorm(d_model, dropout)
        self.cross_attention = MultiHeadAttention(d_model, num_heads, dropout)
        self.addnorm2 = AddNorm(d_model, dropout)
        self.ffn = PositionWiseFFN(d_model, ffn_hidden)
        self.addnorm3 = AddNorm(d_model, dropout)

    def forward(
        self,
        X: Tensor,
        enc_outputs: Tensor | tuple[Tensor, Tensor],
        src_valid_lens: Tensor | None,
        kv_cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """Decode ``T`` new positions.

        Args:
            X: ``(B, T, D)`` the new positions' inputs.
            enc_outputs: ``(B, T_src, D)`` the encoder's outputs; or the pair ``(k, v)``, each ``(B, H, T_src, D_h)``,
                that ``self.cross_attention.project_kv(enc_outputs, enc_outputs)`` made once for this source (as
                :class:`TransformerDecoder` does), so that decoding does not project them again at every step.
            src_valid_lens: None or ``(B,)`` source lengths.
            kv_cache: this block's cache of earlier positions' self-attention keys and values (updated in place);
                None attends only among the ``T`` given positions.
            need_weights: return the attention weights.
        Returns:
            ``(Y, self_weights, cross_weights)``: ``(B, T, D)``, ``(B, H, T, T_past + T)`` and ``(B, H, T, T_src)``,
            the weights None unless ``need_weights``.
        """
        T_past = 0 if kv_cache is None else len(kv_cache)
        mask, is_causal = _self_attention_mask(X.shape[1], T_past, X.device)
        attended, self_w = self.self_attention(
            X, X, X, attn_mask=mask, need_weights=need_weights, kv_cache=kv_cache, is_causal=is_causal
        )
        Y = self.addnorm1(X, attended)
        if isinstance(enc_outputs, tuple):
            crossed, cross_w = self.cross_attention.attend(Y, *enc_outputs, src_valid_lens, need_weights=need_weights)
        else:
            crossed, cross_w = self.cross_attention(
                Y, enc_outputs, enc_outputs, src_valid_lens, need_weights=need_weights
            )
        Z = self.addnorm2(Y, crossed)
        return self.addnorm3(Z, self.ffn(Z)), self_w, cross_w


def _stack_layers(weights: list[Tensor | None]) -> Tensor:
    """Per-layer ``(B, H, T_q, T_k)`` -> ``(B, L, H, T_q, T_k)``."""
    return torch.stack([w for w in weights if w is not None], dim=1)


POSITIONAL = ("sinusoidal", "learned", "rope", "alibi", "none")
"""The positional schemes of a decoder-only model. ``"sinusoidal"`` and ``"learned"`` add encodings to its inputs,
``"rope"`` and ``"alibi"`` act inside its attention scores, and with ``"none"`` only the causal mask tells positions
apart."""


ATTENTION = ("softmax", "linear")
"""The kinds of self-attention a decoder-only model can have, softmax attention
(:class:`~attn_utils.multihead.MultiHeadAttention`) or causal linear attention with the feature map ``elu + 1``
(:class:`~attn_utils.linear.LinearMultiHeadAttention`), whose memory is a fixed-size state."""


def _check_attention_kind(attention: object, feature_dim: object, positional: str, num_kv_heads: object,
                          window: object) -> str:
    """Check the choice of self-attention and the options that go with it, and return it."""
    if not isinstance(attention, str) or attention not in ATTENTION:
        raise ValueError(f"attention: expected one of {', '.join(map(repr, ATTENTION))}, got {attention!r}")
    if attention == "softmax":
        if feature_dim is not None:
            raise ValueError(f"feature_dim: expected None with attention='softmax' (it sizes linear attention's "
                             f"state), got {feature_dim!r}")
        return attention
    if feature_dim is not None:
        check_positive_int("feature_dim", feature_dim)
    if positional in ("rope", "alibi"):
        raise ValueError(f"positional: expected 'sinusoidal', 'learned' or 'none' with attention='linear' (RoPE and "
                         f"ALiBi act on softmax attention's scores), got {positional!r}")
    if num_kv_heads is not None:
        raise ValueError(f"num_kv_heads: expected None with attention='linear', got {num_kv_heads!r}")
    if window is not None:
        raise ValueError(f"window: expected None with attention='linear', got {window!r}")
    return attention


def _check_positional(positional: object) -> str:
    if not isinstance(positional, str) or positional not in POSITIONAL:
        raise ValueError(f"positional: expected one of {', '.join(map(repr, POSITIONAL))}, got {positional!r}")
    return positional


class _Embed(nn.Module):
    """Token embedding scaled by √D, plus sinusoidal or learned positional encoding (or none)."""

    def __init__(
        self, vocab_size: int, d_model: int, dropout: float, max_len: int, positional: str = "sinusoidal"
    ) -> None:
        super().__init__()
        self.vocab_size, self.d_model, self.max_len = vocab_size, d_model, max_len
        self.positional = _check_positional(positional)
        self.embedding = nn.Embedding(vocab_size, d_model)
        # The sinusoidal scheme adds pos_encoding's table; the others use only its dropout.
        self.pos_encoding = PositionalEncoding(d_model, dropout, max_len)
        self.pos_embedding = nn.Embedding(max_len, d_model) if positional == "learned" else None

    def forward(self, tokens: Tensor, offset: int = 0) -> Tensor:
        # (B, T) -> (B, T, D). The embedding weights start small (Xavier); scaling by √D keeps them from being
        # swamped by the positional encoding, whose entries are of size 1.
        X = self.embedding(tokens) * math.sqrt(self.d_model)
        if self.positional == "sinusoidal":
            return self.pos_encoding(X, offset)
        if offset + X.shape[1] > self.max_len:
            raise ValueError(
                f"tokens: positions {offset}..{offset + X.shape[1] - 1} exceed max_len={self.max_len}; got shape "
                f"{fmt_shape(tokens.shape)} with offset={offset}"
            )
        if self.pos_embedding is not None:  # one learned (D,) vector per position
            X = X + self.pos_embedding.weight[offset : offset + X.shape[1]]
        return self.pos_encoding.dropout(X)


class TransformerEncoder(Encoder):
    """Embedding × √D + positional encoding, then ``L`` encoder blocks.

    Args:
        vocab_size: source vocabulary size.
        d_model: width ``D``.
        num_heads: heads ``H``.
        ffn_hidden: FFN hidden width.
        num_layers: number of blocks ``L``.
        dropout: dropout probability.
        max_len: longest source sentence.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        num_heads: int,
        ffn_hidden: int,
        num_layers: int,
        dropout: float = 0.0,
        max_len: int = 128,
    ) -> None:
        super().__init__()
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        check_positive_int("num_layers", num_layers)
        self.embed = _Embed(vocab_size, d_model, dropout, max_len)
        self.blocks = nn.ModuleList(
            TransformerEncoderBlock(d_model, num_heads, ffn_hidden, dropout) for _ in range(num_layers)
        )

    def forward(self, src: Tensor, src_valid_lens: Tensor, need_weights: bool = False) -> EncoderOutput:
        """Encode; weights (if asked for) come back as ``{"self": (B, L, H, T_src, T_src)}``."""
        check_tokens("src", src, src_valid_lens, self.vocab_size)
        max_len = self.embed.max_len
        if src.shape[1] > max_len:
            raise ValueError(
                f"src: expected at most max_len={max_len} positions (the positional encoding's), got shape "
                f"{fmt_shape(src.shape)}"
            )
        with values_checked_scope():  # src and its lengths are checked: the layers need not read them again
            X = self.embed(src)
            weights = []
            for block in self.blocks:
                X, w = block(X, src_valid_lens, need_weights)
                weights.append(w)
        return EncoderOutput(X, None, {"self": _stack_layers(weights)} if need_weights else {})


@dataclass
class TransformerDecoderState:
    """What the Transformer decoder carries between calls.

    Attributes:
        enc_outputs: ``(B, T_src, D)`` the encoder's outputs (keys and values of cross-attention).
        src_valid_lens: ``(B,)`` source lengths.
        caches: one :class:`~attn_utils.multihead.KVCache` per block, holding the self-attention keys and values of
            every position decoded so far.
        offset: number of target positions decoded so far (the position of the next token).
        cross_kv: one ``(k, v)`` pair per block, each ``(B, H, T_src, D_h)``: the encoder's outputs projected into
            that block's cross-attention heads, once per source (they do not change while decoding).
    """

    enc_outputs: Tensor
    src_valid_lens: Tensor | None
    caches: list[KVCache] = field(default_factory=list)
    offset: int = 0
    cross_kv: list[tuple[Tensor, Tensor]] = field(default_factory=list)


class TransformerDecoder(Decoder):
    """Embedding × √D + positional encoding, ``L`` decoder blocks, and a linear layer to the vocabulary.

    Decoding one token at a time reuses the cached keys and values of earlier positions (a KV cache), so each step
    costs ``O(T)`` instead of recomputing the whole prefix.

    Args:
        vocab_size: target vocabulary size ``V``.
        d_model: width ``D``.
        num_heads: heads ``H``.
        ffn_hidden: FFN hidden width.
        num_layers: number of blocks ``L``.
        dropout: dropout probability.
        max_len: longest target sentence.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        num_heads: int,
        ffn_hidden: int,
        num_layers: int,
        dropout: float = 0.0,
        max_len: int = 128,
    ) -> None:
        super().__init__()
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        self.d_model = check_positive_int("d_model", d_model)
        self.num_layers = check_positive_int("num_layers", num_layers)
        self.embed = _Embed(vocab_size, d_model, dropout, max_len)
        self.blocks = nn.ModuleList(
            TransformerDecoderBlock(d_model, num_heads, ffn_hidden, dropout) for _ in range(num_layers)
        )
        self.dense = nn.Linear(d_model, vocab_size)

    def init_state(self, enc: EncoderOutput, src_valid_lens: Tensor | None) -> TransformerDecoderState:
        """A fresh state: empty self-attention caches, and every block's cross-attention keys and values projected
        from the encoder's outputs once."""
        sizes = check_shape("enc.outputs", enc.outputs, ("B", "T_src", self.d_model))
        check_floating("enc.outputs", enc.outputs)
        check_same_device_dtype("enc.outputs", enc.outputs, self.dense.weight)
        if src_valid_lens is not None:
            check_shape("src_valid_lens", src_valid_lens, (sizes["B"],))
            check_lengths("src_valid_lens", src_valid_lens, sizes["T_src"])
        cross_kv = [block.cross_attention.project_kv(enc.outputs, enc.outputs) for block in self.blocks]
        return TransformerDecoderState(enc.outputs, src_valid_lens, [KVCache() for _ in self.blocks], 0, cross_kv)

    def reorder_state(
        self, state: TransformerDecoderState, index: Tensor, *, same_source: bool = False
    ) -> TransformerDecoderState:
        """The state of the batch rows ``index``: the caches, and (unless ``same_source``) the source, its length and
        its projected keys and values. See :meth:`~attn_utils.seq2seq.Decoder.reorder_state`."""
        if not isinstance(state, TransformerDecoderState):
            raise TypeError(f"state: expected a TransformerDecoderState from init_state, got {type(state).__name__}")
        caches = [c.index_select(index) for c in state.caches]
        if same_source:
            return TransformerDecoderState(state.enc_outputs, state.src_valid_lens, caches, state.offset,
                                           state.cross_kv)
        lens = None if state.src_valid_lens is None else state.src_valid_lens.index_select(0, index)
        cross_kv = [(k.index_select(0, index), v.index_select(0, index)) for k, v in state.cross_kv]
        return TransformerDecoderState(state.enc_outputs.index_select(0, index), lens, caches, state.offset, cross_kv)

    def forward(self, tgt: Tensor, state: TransformerDecoderState, need_weights: bool = False) -> DecoderOutput:
        """Decode ``T`` new positions after the ``state.offset`` already decoded.

        Returns logits ``(B, T, V)``, the updated state, and (if asked for) ``{"self": (B, L, H, T, offset + T),
        "cross": (B, L, H, T, T_src)}``.
        """
        if not isinstance(state, TransformerDecoderState):
            raise TypeError(f"state: expected a TransformerDecoderState from init_state, got {type(state).__name__}")
        check_tokens("tgt", tgt, vocab_size=self.vocab_size)
        if tgt.shape[0] != state.enc_outputs.shape[0]:
            raise ValueError(
                f"tgt: expected batch size B={state.enc_outputs.shape[0]} (as the encoder's), got shape "
                f"{tuple(tgt.shape)}"
            )
        max_len = self.embed.max_len
        if state.offset + tgt.shape[1] > max_len:
            raise ValueError(
                f"tgt: expected at most max_len={max_len} target positions in all, got shape {tuple(tgt.shape)} "
                f"after {state.offset} decoded positions"
            )
        if len(state.cross_kv) != len(self.blocks):
            raise ValueError(
                f"state: expected cross-attention keys and values for {len(self.blocks)} blocks (from init_state), "
                f"got {len(state.cross_kv)}"
            )
        with values_checked_scope():  # tgt is checked here, the source lengths by init_state
            X = self.embed(tgt, state.offset)
            self_ws, cross_ws = [], []
            for block, cache, kv in zip(self.blocks, state.caches, state.cross_kv, strict=True):
                X, self_w, cross_w = block(X, kv, state.src_valid_lens, cache, need_weights)
                self_ws.append(self_w)
                cross_ws.append(cross_w)
        state.offset += tgt.shape[1]
        attn = {"self": _stack_layers(self_ws), "cross": _stack_layers(cross_ws)} if need_weights else {}
        return DecoderOutput(self.dense(X), state, attn)


def make_transformer(cfg: TransformerConfig) -> EncoderDecoder:
    """Build an encoder–decoder Transformer from a config, with Xavier-uniform initialised weight matrices.

    Args:
        cfg: the sizes.
    Returns:
        an :class:`~attn_utils.seq2seq.EncoderDecoder` whose forward maps ``(B, T_src)``, ``(B,)``, ``(B, T_tgt)`` to
        ``(B, T_tgt, V_tgt)`` logits.

    >>> model = make_transformer(TransformerConfig(src_vocab_size=10, tgt_vocab_size=12, d_model=8, num_heads=2))
    >>> model(torch.ones(2, 5, dtype=torch.long), torch.tensor([5, 3]), torch.ones(2, 4, dtype=torch.long)).shape
    torch.Size([2, 4, 12])
    """
    if not isinstance(cfg, TransformerConfig):
        raise TypeError(f"cfg: expected a TransformerConfig, got {type(cfg).__name__}")
    sizes = (cfg.d_model, cfg.num_heads, cfg.ffn_hidden, cfg.num_layers, cfg.dropout, cfg.max_len)
    model = EncoderDecoder(
        TransformerEncoder(cfg.src_vocab_size, *sizes),
        TransformerDecoder(cfg.tgt_vocab_size, *sizes),
    )
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    return model


# --------------------------------------------------------------------------------------------------------------------
# Decoder-only (GPT)


@dataclass(frozen=True)
class GPTConfig:
    """Sizes of a decoder-only Transformer."""

    vocab_size: int  # V, one vocabulary for every token the model reads and predicts
    d_model: int = 64  # D, width of every token representation
    num_heads: int = 4  # H, attention heads per layer (D_h = D // H)
    ffn_hidden: int = 256  # hidden width of the position-wise FFN (GPT-2 uses 4 D)
    num_layers: int = 4  # L, pre-norm blocks
    dropout: float = 0.0  # dropout after the embeddings, on attention weights and on each sublayer's output
    max_len: int = 128  # the context: the longest sequence the positional encoding covers
    activation: str = "gelu"  # the FFN's nonlinearity, "gelu" (GPT-2) or "relu"
    tie_embeddings: bool = True  # the output layer reuses the token embedding matrix (no separate V x D weights)
    positional: str = "sinusoidal"  # one of POSITIONAL: "sinusoidal", "learned", "rope", "alibi" or "none"
    num_kv_heads: int | None = None  # H_kv key/value heads (grouped-query attention); None: one per head (H)
    window: int | None = None  # sliding-window attention: each position sees itself and window - 1 before it
    norm_first: bool = True  # pre-norm blocks (GPT-2); False: post-norm (GPT-1, the 2017 Transformer)
    attention: str = "softmax"  # one of ATTENTION: "softmax" or "linear" (elu + 1 features, a fixed-size state)
    feature_dim: int | None = None  # linear attention's features per head, m (state m x D_h); None: D_h
    token_shift: bool = False  # each position's input also holds the previous token (a second embedding table)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "num_heads", "ffn_hidden", "num_layers", "max_len"):
            check_positive_int(name, getattr(self, name))
        check_probability("dropout", self.dropout)
        _activation(self.activation)
        if not isinstance(self.tie_embeddings, bool):
            raise TypeError(f"tie_embeddings: expected a bool, got {type(self.tie_embeddings).__name__}")
        _check_norm_first(self.norm_first)
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model: expected a multiple of num_heads={self.num_heads}, got d_model={self.d_model}"
            )
        _check_positional(self.positional)
        _check_attention_options(self.num_heads, self.d_model, self.positional, self.num_kv_heads, self.window)
        _check_attention_kind(self.attention, self.feature_dim, self.positional, self.num_kv_heads, self.window)
        if not isinstance(self.token_shift, bool):
            raise TypeError(f"token_shift: expected a bool, got {type(self.token_shift).__name__}")


def _check_attention_options(
    num_heads: int, d_model: int, positional: str, num_kv_heads: int | None, window: int | None
) -> None:
    """The checks of :class:`MultiHeadAttention` and :func:`sliding_window_mask`, made once when a config is set up."""
    _check_num_kv_heads(num_heads, num_kv_heads)
    if positional == "rope" and (d_model // num_heads) % 2:
        raise ValueError(
            f"positional: 'rope' needs an even head width d_model // num_heads (RoPE rotates pairs of features), "
            f"got {d_model // num_heads} (d_model={d_model}, num_heads={num_heads})"
        )
    if window is not None:
        _check_window(window)


def _check_norm_first(norm_first: object) -> bool:
    if not isinstance(norm_first, bool):
        raise TypeError(f"norm_first: expected a bool, got {type(norm_first).__name__}")
    return norm_first


class PreNormBlock(nn.Module):
    """A pre-norm self-attention block, causal by default (GPT-2):
    ``X = X + dropout(attention(LN(X)))``, then ``X = X + dropout(FFN(LN(X)))``.

    The residual path is never normalised: each block *adds* to it. (Compare :class:`AddNorm`, which normalises
    after the addition.) With ``norm_first=False`` the block is post-norm instead, as in GPT-1 and the 2017
    Transformer: ``X = LN(X + dropout(attention(X)))``, then ``X = LN(X + dropout(FFN(X)))``, so the residual path
    is normalised after every sublayer.

    Args:
        d_model: width ``D``.
        num_heads: heads ``H``.
        ffn_hidden: FFN hidden width.
        dropout: dropout probability.
        activation: the FFN's nonlinearity.
        causal: each position sees only itself and earlier ones (GPT). ``False`` lets every position see every
            other (the Vision Transformer's pre-norm encoder); it takes no KV cache.
        num_kv_heads, rope, alibi, max_len: the attention's options (see
            :class:`~attn_utils.multihead.MultiHeadAttention`).
        window: causal sliding-window attention (:func:`~attn_utils.masking.sliding_window_mask`): each position
            sees itself and the ``window - 1`` before it; None sees every earlier position.
        norm_first: normalise each sublayer's input (pre-norm, the default); False normalises the residual sum
            after each sublayer (post-norm). The parameters are the same either way.
        attention: ``"softmax"`` (the default) or ``"linear"``: causal linear attention
            (:class:`~attn_utils.linear.LinearMultiHeadAttention`, feature map ``elu + 1``), which takes a
            :class:`~attn_utils.linear.LinearStateCache` instead of a KV cache, and none of the options above it.
        feature_dim: with ``"linear"``, the features per head ``m`` (the state is ``m × D_h`` per head); None: ``D_h``.

    >>> X = torch.randn(2, 5, 8)
    >>> post = PreNormBlock(8, 2, 16, norm_first=False)
    >>> Y, _ = post(X)
    >>> torch.allclose(Y.mean(-1), torch.zeros(2, 5), atol=1e-5)  # the output is layer-normalised
    True
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        ffn_hidden: int,
        dropout: float = 0.0,
        activation: str = "gelu",
        causal: bool = True,
        *,
        num_kv_heads: int | None = None,
        rope: bool = False,
        alibi: bool = False,
        max_len: int = 4096,
        window: int | None = None,
        norm_first: bool = True,
        attention: str = "softmax",
        feature_dim: int | None = None,
    ) -> None:
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        self.norm_first = _check_norm_first(norm_first)
        if not isinstance(causal, bool):
            raise TypeError(f"causal: expected a bool, got {type(causal).__name__}")
        self.causal = causal
        if window is not None:
            _check_window(window)
        if window is not None and not causal:
            raise ValueError("window: expected None for a block with causal=False (the window is causal)")
        self.window = window
        positional = "rope" if rope else "alibi" if alibi else "none"
        self.attention = _check_attention_kind(attention, feature_dim, positional, num_kv_heads, window)
        if attention == "linear" and not causal:
            raise ValueError("attention: expected 'softmax' for a block with causal=False (linear attention here is "
                             "causal)")
        self.ln1 = nn.LayerNorm(d_model)
        self.self_attention: MultiHeadAttention | LinearMultiHeadAttention
        if attention == "linear":
            self.self_attention = LinearMultiHeadAttention(d_model, num_heads, feature_dim)
        else:
            self.self_attention = MultiHeadAttention(
                d_model, num_heads, dropout, num_kv_heads=num_kv_heads, rope=rope, alibi=alibi, max_len=max_len
            )
        self.ln2 = nn.LayerNorm(d_model)
        self.ffn = PositionWiseFFN(d_model, ffn_hidden, activation)
        self.dropout = nn.Dropout(check_probability("dropout", dropout))

    def forward(
        self, X: Tensor, kv_cache: KVCache | LinearStateCache | None = None, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """Process ``T`` new positions.

        Args:
            X: ``(B, T, D)`` the new positions' inputs.
            kv_cache: this block's cache of earlier positions' keys and values (updated in place), or with linear
                attention its :class:`~attn_utils.linear.LinearStateCache`; None attends only among the ``T`` given
                positions.
            need_weights: return the attention weights.
        Returns:
            ``(Y, weights)``: ``(B, T, D)`` and ``(B, H, T, T_past + T)`` (None unless ``need_weights``).
        """
        check_shape("X", X, ("B", "T", self.d_model))
        if not self.causal and kv_cache is not None:
            raise ValueError("kv_cache: expected None for a block with causal=False (a cache serves decoding only)")
        if self.attention == "linear" or isinstance(kv_cache, LinearStateCache):
            return self._forward_linear(X, kv_cache, need_weights)
        T_past = 0 if kv_cache is None else len(kv_cache)
        if self.window is not None:
            T = X.shape[1]
            mask, is_causal = sliding_window_mask(T, T_past + T, window=self.window, device=X.device), False
        elif self.causal:
            mask, is_causal = _self_attention_mask(X.shape[1], T_past, X.device)
        else:
            mask, is_causal = None, False
        Z = self.ln1(X) if self.norm_first else X  # (B, T, D)
        attended, weights = self.self_attention(
            Z, Z, Z, attn_mask=mask, need_weights=need_weights, kv_cache=kv_cache, is_causal=is_causal
        )
        if not self.norm_first:  # post-norm: normalise each residual sum
            X = self.ln1(X + self.dropout(attended))  # (B, T, D)
            return self.ln2(X + self.dropout(self.ffn(X))), weights
        X = X + self.dropout(attended)  # the residual stream, (B, T, D)
        return X + self.dropout(self.ffn(self.ln2(X))), weights

    def _forward_linear(
        self, X: Tensor, cache: KVCache | LinearStateCache | None, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        """The same block with linear attention: its state in place of the KV cache."""
        if not isinstance(self.self_attention, LinearMultiHeadAttention):
            raise TypeError("kv_cache: expected a KVCache or None for a block with softmax attention, got "
                            "LinearStateCache")
        if cache is not None and not isinstance(cache, LinearStateCache):
            raise TypeError(f"kv_cache: expected a LinearStateCache or None for a block with linear attention, got "
                            f"{type(cache).__name__}")
        Z = self.ln1(X) if self.norm_first else X  # (B, T, D)
        attended, weights = self.self_attention(Z, cache, need_weights)
        if not self.norm_first:
            X = self.ln1(X + self.dropout(attended))
            return self.ln2(X + self.dropout(self.ffn(X))), weights
        X = X + self.dropout(attended)  # the residual stream, (B, T, D)
        return X + self.dropout(self.ffn(self.ln2(X))), weights


@dataclass
class LMState:
    """What a decoder-only model carries between calls while it generates.

    Attributes:
        caches: one :class:`~attn_utils.multihead.KVCache` per block, the keys and values of every position so far
            (with linear attention, a :class:`~attn_utils.linear.LinearStateCache`: a fixed-size state).
        offset: number of positions processed so far (the position of the next token).
        last_tokens: ``(B, 1)`` the last token processed, which a model with ``token_shift`` adds to the next
            position's input; None before the first step.
    """

    caches: list[KVCache | LinearStateCache] = field(default_factory=list)
    offset: int = 0
    last_tokens: Tensor | None = None


class DecoderOnlyTransformer(nn.Module):
    """A decoder-only Transformer language model (GPT): embedding × √D (plus sinusoidal or learned positions, as
    ``positional`` says; RoPE and ALiBi act inside the attention instead), ``L`` :class:`PreNormBlock` s, a final
    layer norm, and an output layer to the vocabulary. With ``norm_first=False`` the blocks are post-norm and there
    is no final layer norm (``ln_f`` is the identity), as in GPT-1: the last block's output is already normalised.

    With ``tie_embeddings`` the output layer's weight *is* the embedding matrix ``E`` (logits ``= h Eᵀ``): one
    ``V × D`` matrix both reads and writes tokens.

    * :meth:`forward` maps ``(B, T)`` tokens to ``(B, T, V)`` next-token logits, every position at once (training);
    * :meth:`init_state` and :meth:`step` decode with a KV cache: the prompt in one step, then one token per step.

    Args:
        vocab_size: vocabulary size ``V``.
        d_model: width ``D``.
        num_heads: heads ``H``.
        ffn_hidden: FFN hidden width.
        num_layers: number of blocks ``L``.
        dropout: dropout probability.
        max_len: the context length.
        activation: the FFN's nonlinearity.
        tie_embeddings: share the embedding matrix with the output layer.
        positional: one of :data:`POSITIONAL`: sinusoidal or learned encodings added to the inputs, RoPE or ALiBi
            inside every attention layer, or none.
        num_kv_heads: key/value heads per layer (grouped-query attention); None gives one per head.
        window: sliding-window attention in every layer; None attends to every earlier position.
        norm_first: pre-norm blocks (default) or, with False, post-norm blocks.
        attention: one of :data:`ATTENTION`: softmax attention (the default) or causal linear attention in every
            layer (with :meth:`step`, a fixed-size state per layer instead of a KV cache).
        feature_dim: with linear attention, the features per head ``m``; None gives ``D_h``.
        token_shift: add to each position's input the embedding (× √D) of the token before it, from a second
            table ``prev_embedding`` (the first position gets nothing): every layer then sees the previous token
            without having to attend to it, as the short convolutions of Arora et al.'s recall models provide.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        num_heads: int,
        ffn_hidden: int,
        num_layers: int,
        dropout: float = 0.0,
        max_len: int = 128,
        activation: str = "gelu",
        tie_embeddings: bool = True,
        positional: str = "sinusoidal",
        num_kv_heads: int | None = None,
        window: int | None = None,
        norm_first: bool = True,
        attention: str = "softmax",
        feature_dim: int | None = None,
        token_shift: bool = False,
    ) -> None:
        super().__init__()
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        self.d_model = check_positive_int("d_model", d_model)
        self.num_layers = check_positive_int("num_layers", num_layers)
        self.embed = _Embed(vocab_size, d_model, dropout, max_len, positional)  # checks the scheme
        self.positional = positional
        options = {"num_kv_heads": num_kv_heads, "window": window, "max_len": max_len,
                   "rope": positional == "rope", "alibi": positional == "alibi",
                   "norm_first": _check_norm_first(norm_first), "attention": attention, "feature_dim": feature_dim}
        self.blocks = nn.ModuleList(
            PreNormBlock(d_model, num_heads, ffn_hidden, dropout, activation, **options) for _ in range(num_layers)
        )
        self.norm_first = norm_first
        self.attention = attention
        if not isinstance(token_shift, bool):
            raise TypeError(f"token_shift: expected a bool, got {type(token_shift).__name__}")
        self.prev_embedding = nn.Embedding(vocab_size, d_model) if token_shift else None
        # Pre-norm leaves the residual stream unnormalised: one last layer norm. Post-norm has just normalised it.
        self.ln_f: nn.Module = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.tie_embeddings = tie_embeddings
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        if tie_embeddings:
            self.lm_head.weight = self.embed.embedding.weight  # one (V, D) parameter, read and written

    @property
    def max_len(self) -> int:
        """The most positions the model can see (its context length)."""
        return self.embed.max_len

    def init_state(self) -> LMState:
        """A fresh state: an empty KV cache per block (with linear attention, an empty state per block)."""
        if self.attention == "linear":
            return LMState([LinearStateCache() for _ in self.blocks], 0)
        return LMState([KVCache() for _ in self.blocks], 0)

    def step(self, tokens: Tensor, state: LMState, *, need_weights: bool = False) -> DecoderOutput:
        """Process ``T`` new positions after the ``state.offset`` already processed, with the KV cache.

        Args:
            tokens: ``(B, T)`` token ids: the prompt at the first step, then one token per step.
            state: from :meth:`init_state` or the previous :meth:`step` (updated in place and returned).
            need_weights: also return the attention weights, ``{"self": (B, L, H, T, offset + T)}``.
        Returns:
            a :class:`~attn_utils.seq2seq.DecoderOutput` with ``(B, T, V)`` logits, the state, and the weights.
        """
        if not isinstance(state, LMState):
            raise TypeError(f"state: expected an LMState from init_state, got {type(state).__name__}")
        if len(state.caches) != len(self.blocks):
            raise ValueError(f"state: expected {len(self.blocks)} caches (one per block), got {len(state.caches)}")
        first = state.caches[0]
        cached = first.state.S if isinstance(first, LinearStateCache) and first.state is not None else (
            first.k if isinstance(first, KVCache) else None)
        if cached is not None and isinstance(tokens, Tensor) and tokens.dim() == 2 and (
            tokens.shape[0] != cached.shape[0]
        ):
            raise ValueError(
                f"tokens: expected batch size B={cached.shape[0]} (as the state's), got shape "
                f"{fmt_shape(tokens.shape)}"
            )
        logits, weights = self._run(tokens, list(state.caches), state.offset, need_weights, state.last_tokens)
        state.offset += tokens.shape[1]
        state.last_tokens = tokens[:, -1:]
        return DecoderOutput(logits, state, {"self": weights} if weights is not None else {})

    def _run(
        self, tokens: Tensor, caches: list[KVCache | LinearStateCache] | list[None], offset: int, need_weights: bool,
        last_tokens: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        check_tokens("tokens", tokens, vocab_size=self.vocab_size)
        if offset + tokens.shape[1] > self.max_len:
            raise ValueError(
                f"tokens: expected at most max_len={self.max_len} positions in all (the model's context), got shape "
                f"{fmt_shape(tokens.shape)} after {offset} positions"
            )
        with values_checked_scope():  # the ids are checked: the layers need not read them again
            X = self.embed(tokens, offset)  # (B, T) -> (B, T, D)
            if self.prev_embedding is not None:
                X = X + self._shifted(tokens, last_tokens)
            weights = []
            for block, cache in zip(self.blocks, caches, strict=True):
                X, w = block(X, cache, need_weights)  # (B, T, D), (B, H, T, offset + T)
                weights.append(w)
        logits = self.lm_head(self.ln_f(X))  # (B, T, D) -> (B, T, V)
        return logits, _stack_layers(weights) if need_weights else None

    def forward(self, tokens: Tensor) -> Tensor:
        """Next-token logits at every position, all at once (no cache): what training calls.

        Args:
            tokens: ``(B, T)`` token ids, ``T <= max_len``. Right padding needs no mask: causal attention never lets
                a real position see the padding after it.
        Returns:
            ``(B, T, V)`` logits; position ``t`` predicts token ``t + 1``.
        """
        return self._run(tokens, [None] * len(self.blocks), 0, False)[0]

    def _shifted(self, tokens: Tensor, last_tokens: Tensor | None) -> Tensor:
        """The previous token's embedding × √D at every position, ``(B, T, D)``; zeros where there is none."""
        assert self.prev_embedding is not None
        prev = self.prev_embedding(tokens[:, :-1]) * math.sqrt(self.d_model)  # (B, T - 1, D)
        first = (self.prev_embedding(last_tokens) * math.sqrt(self.d_model) if last_tokens is not None
                 else prev.new_zeros(tokens.shape[0], 1, self.d_model))  # (B, 1, D)
        return torch.cat([first, prev], dim=1)

    @staticmethod
    def reorder_state(state: LMState, index: Tensor, *, same_source: bool = False) -> LMState:
        """The state of the batch rows ``index`` (beam search keeps the rows of its best hypotheses).

        Args:
            state: a state of batch size ``B``.
            index: ``(B',)`` long row indices into ``B``.
            same_source: accepted for the same call as an encoder–decoder's; a decoder-only model's prompt is in
                its caches, which are always reordered.
        Returns:
            a new state of batch size ``B'``.
        """
        last = state.last_tokens.index_select(0, index) if state.last_tokens is not None else None
        return LMState([c.index_select(index) for c in state.caches], state.offset, last)


def make_gpt(cfg: GPTConfig) -> DecoderOnlyTransformer:
    """Build a decoder-only Transformer from a config, with Xavier-uniform initialised weight matrices.

    Args:
        cfg: the sizes.
    Returns:
        a :class:`DecoderOnlyTransformer` whose forward maps ``(B, T)`` tokens to ``(B, T, V)`` logits.

    >>> model = make_gpt(GPTConfig(vocab_size=12, d_model=8, num_heads=2, ffn_hidden=16, num_layers=2))
    >>> model(torch.ones(3, 5, dtype=torch.long)).shape
    torch.Size([3, 5, 12])
    """
    if not isinstance(cfg, GPTConfig):
        raise TypeError(f"cfg: expected a GPTConfig, got {type(cfg).__name__}")
    model = DecoderOnlyTransformer(cfg.vocab_size, cfg.d_model, cfg.num_heads, cfg.ffn_hidden, cfg.num_layers,
                                   cfg.dropout, cfg.max_len, cfg.activation, cfg.tie_embeddings, cfg.positional,
                                   cfg.num_kv_heads, cfg.window, cfg.norm_first, cfg.attention, cfg.feature_dim,
                                   cfg.token_shift)
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    return model
