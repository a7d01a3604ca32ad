"""Encoder–decoder models for sequence-to-sequence learning.

The interfaces are small on purpose:

* an :class:`Encoder` reads the source ``(B, T_src)`` and returns an :class:`EncoderOutput`;
* a :class:`Decoder` turns that into a *state* with :meth:`Decoder.init_state`, then reads target tokens
  ``(B, T)`` and returns a :class:`DecoderOutput`: logits and the state for the next call. Called on a whole target
  sequence it is teacher forcing (training); called one token at a time it is autoregressive decoding.

Attention weights are never stored on a module: pass ``need_weights=True`` and they come back in the output, as a
dict from a name (``"self"``, ``"cross"``) to a tensor of shape ``(B, L, H, T_q, T_k)`` (layers, heads, queries,
keys), ready for :func:`~attn_utils.plotting.show_heatmaps` once a batch element is picked.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ._checks import (
    check_floating,
    check_lengths,
    check_positive_int,
    check_probability,
    check_shape,
    check_tokens,
    fmt_shape,
    values_checked_scope,
)
from .attention import AdditiveAttention

__all__ = [
    "EncoderOutput",
    "DecoderOutput",
    "Encoder",
    "Decoder",
    "EncoderDecoder",
    "GRUEncoder",
    "Seq2SeqDecoder",
    "BahdanauDecoder",
    "Encoded",
]


class EncoderOutput(NamedTuple):
    """What an encoder returns.

    Attributes:
        outputs: ``(B, T_src, D)`` one vector per source position (zeros at padded positions for the GRU).
        hidden: ``(L, B, D)`` final hidden state of a recurrent encoder, None for the Transformer.
        attn_weights: name -> ``(B, L, H, T_src, T_src)``; empty unless weights were asked for.
    """

    outputs: Tensor
    hidden: Tensor | None
    attn_weights: dict[str, Tensor]


class DecoderOutput(NamedTuple):
    """What a decoder returns.

    Attributes:
        logits: ``(B, T, V)`` unnormalised scores of the next token at each position.
        state: the decoder state to pass to the next call.
        attn_weights: name -> ``(B, L, H, T, T_k)``; empty unless weights were asked for.
    """

    logits: Tensor
    state: Any
    attn_weights: dict[str, Tensor]


class Encoded(NamedTuple):
    """What :meth:`EncoderDecoder.encode` returns.

    Attributes:
        state: the decoder's first state, to pass to :meth:`EncoderDecoder.step`.
        attn_weights: the encoder's attention weights, name -> ``(B, L, H, T_src, T_src)``; empty unless asked for.
    """

    state: Any
    attn_weights: dict[str, Tensor]


class Encoder(nn.Module, ABC):
    """Interface of an encoder: source tokens -> :class:`EncoderOutput`."""

    @abstractmethod
    def forward(self, src: Tensor, src_valid_lens: Tensor, need_weights: bool = False) -> EncoderOutput:
        """Encode a batch.

        Args:
            src: ``(B, T_src)`` token ids.
            src_valid_lens: ``(B,)`` number of real (non-padding) tokens per sentence.
            need_weights: return attention weights, if the encoder has any.
        Returns:
            an :class:`EncoderOutput`.
        """


class Decoder(nn.Module, ABC):
    """Interface of a decoder: :meth:`init_state` once, then :meth:`forward` on target tokens."""

    @abstractmethod
    def init_state(self, enc: EncoderOutput, src_valid_lens: Tensor) -> Any:
        """Build the decoder's first state from the encoder's output.

        Args:
            enc: what the encoder returned.
            src_valid_lens: ``(B,)`` source lengths.
        Returns:
            the state to pass to :meth:`forward`.
        """

    @abstractmethod
    def forward(self, tgt: Tensor, state: Any, need_weights: bool = False) -> DecoderOutput:
        """Decode target tokens.

        Args:
            tgt: ``(B, T)`` input token ids (``<bos>`` then the target shifted right, in training).
            state: from :meth:`init_state` or the previous call.
            need_weights: return attention weights.
        Returns:
            a :class:`DecoderOutput` with ``(B, T, V)`` logits.
        """

    def reorder_state(self, state: Any, index: Tensor, *, same_source: bool = False) -> Any:
        """The state of the batch rows ``index`` (beam search keeps the rows of its best hypotheses).

        Args:
            state: a state of batch size ``B``.
            index: ``(B',)`` long row indices into ``B``.
            same_source: the caller promises that row ``index[i]`` has the same source as row ``i`` (beam search
                reorders hypotheses within each sentence), so the source's part of the state is kept as it is.
        Returns:
            the state of batch size ``B'``.
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement reorder_state, which beam search needs")


class EncoderDecoder(nn.Module):
    """An encoder and a decoder, with the three calls every use of the model is made of.

    * :meth:`encode` reads the source once and returns the decoder's first state;
    * :meth:`step` feeds target tokens to the decoder and returns their logits and the next state: the whole
      target at once (teacher forcing), or one token at a time (decoding);
    * :meth:`forward` is ``encode`` then one ``step`` over the whole target: what training calls.

    Each of them checks the values of its inputs once (token ids and lengths in range); the layers inside do not
    read them back again.

    Args:
        encoder: an :class:`Encoder`.
        decoder: a :class:`Decoder` whose state comes from that encoder.
    """

    def __init__(self, encoder: Encoder, decoder: Decoder) -> None:
        super().__init__()
        if not isinstance(encoder, Encoder):
            raise TypeError(f"encoder: expected an attn_utils Encoder, got {type(encoder).__name__}")
        if not isinstance(decoder, Decoder):
            raise TypeError(f"decoder: expected an attn_utils Decoder, got {type(decoder).__name__}")
        recurrent = isinstance(encoder, GRUEncoder) and isinstance(decoder, Seq2SeqDecoder)
        if recurrent and encoder.num_layers != decoder.num_layers:
            raise ValueError(
                f"decoder: expected num_layers={encoder.num_layers} (the encoder's: the decoder's GRU starts from the "
                f"encoder's final state of every layer), got num_layers={decoder.num_layers}"
            )
        self.encoder, self.decoder = encoder, decoder

    @property
    def src_vocab_size(self) -> int | None:
        """Size of the source vocabulary the encoder embeds, if it says."""
        return getattr(self.encoder, "vocab_size", None)

    @property
    def tgt_vocab_size(self) -> int | None:
        """Size of the target vocabulary the decoder reads and predicts, if it says."""
        return getattr(self.decoder, "vocab_size", None)

    def encode(self, src: Tensor, src_valid_lens: Tensor, *, need_weights: bool = False) -> Encoded:
        """Encode a batch of sources and build the decoder's first state.

        Args:
            src: ``(B, T_src)`` source ids.
            src_valid_lens: ``(B,)`` source lengths, each in ``[1, T_src]``.
            need_weights: also return the encoder's attention weights.
        Returns:
            an :class:`Encoded` ``(state, attn_weights)``.
        """
        check_tokens("src", src, src_valid_lens, self.src_vocab_size)
        with values_checked_scope():
            enc = self.encoder(src, src_valid_lens, need_weights=need_weights)
            state = self.decoder.init_state(enc, src_valid_lens)
        return Encoded(state, enc.attn_weights)

    def step(self, tgt: Tensor, state: Any, *, need_weights: bool = False) -> DecoderOutput:
        """Feed target tokens to the decoder.

        Args:
            tgt: ``(B, T)`` target ids: the whole decoder input in training, one token per sentence in decoding.
            state: from :meth:`encode` or the previous :meth:`step`.
            need_weights: also return the decoder's attention weights.
        Returns:
            a :class:`DecoderOutput` with ``(B, T, V)`` logits and the next state.
        """
        check_tokens("tgt", tgt, vocab_size=self.tgt_vocab_size)
        with values_checked_scope():
            return self.decoder(tgt, state, need_weights=need_weights)

    def forward(self, src: Tensor, src_valid_lens: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing: predict each next target token from the source and the previous target tokens.

        Args:
            src: ``(B, T_src)`` source ids.
            src_valid_lens: ``(B,)`` source lengths.
            tgt_in: ``(B, T_tgt)`` decoder inputs (``<bos>`` followed by the target without its last token).
        Returns:
            ``(B, T_tgt, V)`` logits.
        """
        check_tokens("tgt_in", tgt_in, vocab_size=self.tgt_vocab_size)
        if tgt_in.shape[0] != src.shape[0]:
            raise ValueError(
                f"tgt_in: expected batch size B={src.shape[0]} (as src), got shape {fmt_shape(tgt_in.shape)}"
            )
        state = self.encode(src, src_valid_lens).state
        with values_checked_scope():  # tgt_in is checked: step() need not read it again
            return self.step(tgt_in, state).logits


class GRUEncoder(Encoder):
    """A GRU encoder: embedding, then a multi-layer GRU over the valid tokens of each sentence.

    Padding never reaches the GRU (the batch is packed), so ``hidden`` is the state after the last real token.

    Args:
        vocab_size: source vocabulary size ``V_src``.
        embed_size: embedding width.
        num_hiddens: GRU width ``D``.
        num_layers: number of GRU layers ``L``.
        dropout: dropout between GRU layers.
    """

    def __init__(
        self, vocab_size: int, embed_size: int, num_hiddens: int, num_layers: int = 1, dropout: float = 0.0
    ) -> None:
        super().__init__()
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        check_positive_int("embed_size", embed_size)
        self.num_hiddens = check_positive_int("num_hiddens", num_hiddens)
        self.num_layers = check_positive_int("num_layers", num_layers)
        dropout = check_probability("dropout", dropout)
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.rnn = nn.GRU(embed_size, num_hiddens, num_layers, dropout=dropout if num_layers > 1 else 0.0,
                          batch_first=True)

    def forward(self, src: Tensor, src_valid_lens: Tensor, need_weights: bool = False) -> EncoderOutput:
        """Encode; see :meth:`Encoder.forward`. Returns outputs ``(B, T_src, D)`` and hidden ``(L, B, D)``."""
        check_tokens("src", src, src_valid_lens, self.vocab_size)
        T = src.shape[1]
        X = self.embedding(src)  # (B, T_src) -> (B, T_src, E)
        packed = pack_padded_sequence(X, src_valid_lens.cpu(), batch_first=True, enforce_sorted=False)
        packed_out, hidden = self.rnn(packed)  # hidden: (L, B, D)
        outputs, _ = pad_packed_sequence(packed_out, batch_first=True, total_length=T)  # (B, T_src, D)
        return EncoderOutput(outputs, hidden, {})


class Seq2SeqDecoder(Decoder):
    """A GRU decoder *without* attention: the encoder's final state is the only context (the bottleneck).

    At every step the input is the previous token's embedding concatenated with a context vector. Here the context
    is the same at every step, ``c = h_T``, the encoder's last top-layer state; :class:`BahdanauDecoder` changes
    just that.

    Args:
        vocab_size: target vocabulary size ``V``.
        embed_size: embedding width.
        num_hiddens: GRU width ``D`` (the encoder's).
        num_layers: number of GRU layers ``L`` (the encoder's).
        dropout: dropout between GRU layers.
    """

    def __init__(
        self, vocab_size: int, embed_size: int, num_hiddens: int, num_layers: int = 1, dropout: float = 0.0
    ) -> None:
        super().__init__()
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        check_positive_int("embed_size", embed_size)
        self.num_hiddens = check_positive_int("num_hiddens", num_hiddens)
        self.num_layers = check_positive_int("num_layers", num_layers)
        dropout = check_probability("dropout", dropout)
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.rnn = nn.GRU(embed_size + num_hiddens, num_hiddens, num_layers,
                          dropout=dropout if num_layers > 1 else 0.0, batch_first=True)
        self.dense = nn.Linear(num_hiddens, vocab_size)

    def _check_encoder_output(self, enc: EncoderOutput) -> Tensor:
        """Check that ``enc`` comes from a recurrent encoder of this width and depth; return its hidden state."""
        if not isinstance(enc, EncoderOutput):
            raise TypeError(f"enc: expected an EncoderOutput, got {type(enc).__name__}")
        if enc.hidden is None:
            raise ValueError(
                "enc: expected a recurrent encoder's output, with the final hidden state of shape "
                f"(L={self.num_layers}, B, D={self.num_hiddens}), got hidden=None"
            )
        sizes = check_shape("enc.hidden", enc.hidden, (self.num_layers, "B", self.num_hiddens))
        check_shape("enc.outputs", enc.outputs, ("B", "T_src", self.num_hiddens), sizes)
        check_floating("enc.outputs", enc.outputs)
        return enc.hidden

    def init_state(self, enc: EncoderOutput, src_valid_lens: Tensor) -> tuple[Tensor, Tensor]:
        """State: ``(hidden (L, B, D), context (B, D))``, both from the encoder's final hidden state."""
        hidden = self._check_encoder_output(enc)
        return hidden, hidden[-1]

    def reorder_state(
        self, state: tuple[Tensor, Tensor], index: Tensor, *, same_source: bool = False
    ) -> tuple[Tensor, Tensor]:
        """See :meth:`Decoder.reorder_state`. The GRU's hidden state ``(L, B, D)`` has its batch on axis 1."""
        hidden, context = state
        return hidden.index_select(1, index), context if same_source else context.index_select(0, index)

    def forward(self, tgt: Tensor, state: tuple[Tensor, Tensor], need_weights: bool = False) -> DecoderOutput:
        """Decode; see :meth:`Decoder.forward`. Returns no attention weights (there is no attention)."""
        check_tokens("tgt", tgt, vocab_size=self.vocab_size)
        hidden, context = state
        X = self.embedding(tgt)  # (B, T) -> (B, T, E)
        context_t = context.unsqueeze(1).expand(-1, X.shape[1], -1)  # (B, D) -> (B, T, D)
        outputs, hidden = self.rnn(torch.cat([X, context_t], dim=-1), hidden)  # (B, T, E + D) -> (B, T, D)
        return DecoderOutput(self.dense(outputs), (hidden, context), {})


class BahdanauDecoder(Seq2SeqDecoder):
    """A GRU decoder with additive (Bahdanau) attention over the encoder's outputs.

    Everything is :class:`Seq2SeqDecoder`'s (embedding, GRU, output layer) except the context. Instead of the fixed
    ``h_T``, step ``t'`` computes its own: the query is the decoder's previous top-layer state ``s_{t'-1}``, the keys
    and values are the encoder outputs ``h_1..h_T``, and ``c_{t'} = Σ_t α(s_{t'-1}, h_t) h_t``. Since each context
    depends on the state the previous step produced, the steps run one after another.

    Args:
        vocab_size: target vocabulary size ``V``.
        embed_size: embedding width.
        num_hiddens: GRU and attention width ``D`` (the encoder's).
        num_layers: number of GRU layers ``L``.
        dropout: dropout between GRU layers and on the attention weights.
    """

    def __init__(
        self, vocab_size: int, embed_size: int, num_hiddens: int, num_layers: int = 1, dropout: float = 0.0
    ) -> None:
        # What attention adds: W_q, W_k and w_v, 2·D² + D parameters. (Made before the GRU decoder's layers, so that
        # a seeded model draws its initial weights in the same order as the chapter's decoder written from scratch.)
        check_positive_int("num_hiddens", num_hiddens)
        attention = AdditiveAttention(num_hiddens, num_hiddens, num_hiddens, check_probability("dropout", dropout))
        super().__init__(vocab_size, embed_size, num_hiddens, num_layers, dropout)
        self.attention = attention

    def init_state(self, enc: EncoderOutput, src_valid_lens: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """State: ``(enc_outputs (B, T_src, D), hidden (L, B, D), src_valid_lens (B,))``."""
        hidden = self._check_encoder_output(enc)
        check_shape("src_valid_lens", src_valid_lens, (hidden.shape[1],))
        check_lengths("src_valid_lens", src_valid_lens, enc.outputs.shape[1])
        return enc.outputs, hidden, src_valid_lens

    def reorder_state(  # type: ignore[override]
        self, state: tuple[Tensor, Tensor, Tensor], index: Tensor, *, same_source: bool = False
    ) -> tuple[Tensor, Tensor, Tensor]:
        """See :meth:`Decoder.reorder_state`. The GRU's hidden state ``(L, B, D)`` has its batch on axis 1."""
        enc_outputs, hidden, src_valid_lens = state
        if same_source:
            return enc_outputs, hidden.index_select(1, index), src_valid_lens
        return enc_outputs.index_select(0, index), hidden.index_select(1, index), src_valid_lens.index_select(0, index)

    def forward(  # type: ignore[override]
        self, tgt: Tensor, state: tuple[Tensor, Tensor, Tensor], need_weights: bool = False
    ) -> DecoderOutput:
        """Decode step by step; weights (if asked for) come back as ``{"cross": (B, 1, 1, T, T_src)}``."""
        check_tokens("tgt", tgt, vocab_size=self.vocab_size)
        enc_outputs, hidden, src_valid_lens = state
        X = self.embedding(tgt)  # (B, T) -> (B, T, E)
        outputs, weights = [], []
        with values_checked_scope():  # src_valid_lens was checked by init_state
            for t in range(X.shape[1]):
                query = hidden[-1].unsqueeze(1)  # (L, B, D) -> (B, 1, D): s_{t'-1}
                context, w = self.attention(query, enc_outputs, enc_outputs, src_valid_lens)  # (B,1,D), (B,1,T_src)
                x = torch.cat([context, X[:, t : t + 1]], dim=-1)  # (B, 1, D + E)
                out, hidden = self.rnn(x, hidden)  # (B, 1, D)
                outputs.append(out)
                weights.append(w)
        logits = self.dense(torch.cat(outputs, dim=1))  # (B, T, D) -> (B, T, V)
        attn = {"cross": torch.cat(weights, dim=1)[:, None, None]} if need_weights else {}  # (B, 1, 1, T, T_src)
        return DecoderOutput(logits, (enc_outputs, hidden, src_valid_lens), attn)
