"""Measuring and switching off attention heads.

A head's *score* for a pattern is the share of its attention that lands where the pattern says, averaged over the
queries the pattern applies to. With ``weights`` of shape ``(B, L, H, T_q, T_k)`` and a bool ``targets`` of shape
``(B, T_q, T_k)`` (True at the keys the pattern points to), :func:`attention_mass` gives one score per layer and head:

* previous token: ``targets[b, i, j] = (j == i - 1)``, built by :func:`offset_targets` with ``offset=-1``;
* next token: ``offset=+1``;
* special tokens: every query's targets are the ``[CLS]`` and ``[SEP]`` positions;
* the same word elsewhere: the keys holding the query's own token at another position.

:func:`ablate_heads` zeroes chosen heads' outputs inside a :class:`~attn_utils.multihead.MultiHeadAttention`, so that
their effect on what the model computes can be measured (an *ablation*).

>>> w = torch.eye(4).roll(1, dims=1)[None, None, None]  # one head; each query attends to the next key
>>> attention_mass(w, offset_targets(torch.ones(1, 4), offset=1))
tensor([[1.]])
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

from ._checks import check_floating, check_shape, check_tensor, first_non_finite, fmt_shape, host_ints
from .multihead import MultiHeadAttention

__all__ = ["attention_mass", "offset_targets", "ablate_heads"]


def attention_mass(weights: Tensor, targets: Tensor, query_mask: Tensor | None = None) -> Tensor:
    """Each head's average attention on its targets.

    Args:
        weights: ``(B, L, H, T_q, T_k)`` attention weights (rows summing to 1).
        targets: ``(B, T_q, T_k)`` bool, True at the keys the pattern points to for each query.
        query_mask: None, or ``(B, T_q)`` bool: the queries to average over. By default, the queries with at least
            one target.
    Returns:
        ``(L, H)`` scores in ``[0, 1]``: 1 when every counted query puts all its weight on its targets.
    Raises:
        ValueError: no query is counted, the shapes disagree, or a weight is NaN or infinite.
    """
    sizes = check_shape("weights", weights, ("B", "L", "H", "T_q", "T_k"))
    check_floating("weights", weights)
    check_shape("targets", targets, ("B", "T_q", "T_k"), sizes)
    if targets.dtype != torch.bool:
        raise TypeError(f"targets: expected a bool tensor, got dtype {targets.dtype}")
    if query_mask is None:
        query_mask = targets.any(dim=-1)  # (B, T_q)
    else:
        check_shape("query_mask", query_mask, ("B", "T_q"), sizes)
        if query_mask.dtype != torch.bool:
            raise TypeError(f"query_mask: expected a bool tensor, got dtype {query_mask.dtype}")
    count, finite = host_ints(query_mask.sum(), torch.isfinite(weights).all())  # one host read
    if count == 0:
        raise ValueError("targets: expected at least one query with a target to average over, got none")
    if not finite:
        value, at = first_non_finite(weights)
        raise ValueError(
            f"weights: expected finite attention weights, got {value} at index {at} of (B, L, H, T_q, T_k)"
        )
    t = targets.to(weights.dtype)[:, None, None]  # (B, 1, 1, T_q, T_k)
    per_query = (weights * t).sum(dim=-1)  # (B, L, H, T_q): the weight each query puts on its targets
    q = query_mask.to(weights.dtype)[:, None, None]  # (B, 1, 1, T_q)
    return (per_query * q).sum(dim=(0, 3)) / count  # (L, H)


def offset_targets(attention_mask: Tensor, offset: int) -> Tensor:
    """The targets of "attend ``offset`` positions away": key ``i + offset`` for query ``i``, both real tokens.

    Args:
        attention_mask: ``(B, T)``, nonzero (or True) for a real token, 0 for padding.
        offset: ``-1`` for the previous token, ``+1`` for the next, and so on.
    Returns:
        ``(B, T, T)`` bool.
    """
    sizes = check_shape("attention_mask", attention_mask, ("B", "T"))
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise TypeError(f"offset: expected an int, got {type(offset).__name__}")
    real = attention_mask.bool()  # (B, T)
    T = sizes["T"]
    idx = torch.arange(T, device=real.device)
    diagonal = idx[None, :] == idx[:, None] + offset  # (T_q, T_k): key = query + offset
    return diagonal[None] & real[:, :, None] & real[:, None, :]  # (B, T, T)


@contextmanager
def ablate_heads(attention: MultiHeadAttention, heads: Iterable[int]) -> Iterator[None]:
    """Inside the ``with`` block, the chosen heads of ``attention`` contribute nothing: their outputs are set to zero
    before ``W_o`` mixes the heads (the other heads, and the layer's bias, are untouched).

    Args:
        attention: a multi-head attention layer.
        heads: head indices in ``[0, H)``.
    """
    if not isinstance(attention, MultiHeadAttention):
        raise TypeError(f"attention: expected a MultiHeadAttention, got {type(attention).__name__}")
    if isinstance(heads, (str, Tensor)) or not isinstance(heads, Iterable):
        raise TypeError(f"heads: expected an iterable of int head indices, got {type(heads).__name__}")
    heads = list(heads)
    H, D_h = attention.num_heads, attention.d_head
    not_int = [h for h in heads if isinstance(h, bool) or not isinstance(h, int)]
    if not_int:
        raise TypeError(f"heads: expected int head indices, got {type(not_int[0]).__name__} {not_int[0]!r}")
    chosen = sorted(set(heads))
    bad = [h for h in chosen if not 0 <= h < H]
    if bad:
        raise ValueError(f"heads: expected head indices in [0, {H}), got {bad[0]!r}")
    keep = torch.ones(H, D_h)
    keep[chosen] = 0.0
    keep = keep.reshape(-1)  # (D,): the concatenated heads, head h at features [h D_h, (h + 1) D_h)

    def zero_heads(module: torch.nn.Module, inputs: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        x = check_tensor("input of W_o", inputs[0])
        if x.shape[-1] != keep.numel():
            raise ValueError(f"input of W_o: expected last axis {keep.numel()}, got shape {fmt_shape(x.shape)}")
        return (x * keep.to(x.device, x.dtype),) + tuple(inputs[1:])  # (B, T_q, D)

    handle = attention.W_o.register_forward_pre_hook(zero_heads)
    try:
        yield
    finally:
        handle.remove()
