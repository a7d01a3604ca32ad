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

The circuits of a head, in the residual-stream basis of Elhage et al. (2021) (column vectors):
:func:`head_circuits` gives each head's ``W_QK`` (the score of query position ``x_q`` and key position ``x_k`` is
``x_q^T W_QK x_k``, biases left out) and ``W_OV`` (what the head writes for a value ``x``: ``W_OV x``).
:func:`composition_score` measures how much one matrix reads what another writes, and :func:`copying_score` how
much a square matrix maps each vector to itself (the share of its eigenvalues that are positive, weighted).

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

__all__ = [
    "attention_mass", "offset_targets", "ablate_heads", "head_circuits", "composition_score", "copying_score",
]


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


def head_circuits(attention: MultiHeadAttention) -> tuple[Tensor, Tensor]:
    """Each head's query-key and output-value matrices, ``W_QK`` and ``W_OV``, in the residual stream's basis.

    With ``nn.Linear`` weights (``y = x W^T``) and head ``h`` at rows ``[h D_h, (h + 1) D_h)`` of ``W_q``, ``W_k``,
    ``W_v`` and at the same columns of ``W_o``: ``W_QK = W_q,h^T W_k,h / sqrt(D_h)``, so that the head's score of a
    query vector ``x_q`` and a key vector ``x_k`` is ``x_q^T W_QK x_k`` (biases left out), and
    ``W_OV = W_o[:, h] W_v,h``, so that a value vector ``x`` is written to the output as ``W_OV x``.

    Args:
        attention: a multi-head attention layer whose queries, keys and values have the same width (self-attention)
            and as many key/value heads as query heads.
    Returns:
        ``(W_QK, W_OV)``, each ``(H, D, D)``, detached.

    >>> attention = MultiHeadAttention(8, 2)
    >>> W_QK, W_OV = head_circuits(attention)
    >>> W_QK.shape, W_OV.shape
    (torch.Size([2, 8, 8]), torch.Size([2, 8, 8]))
    """
    if not isinstance(attention, MultiHeadAttention):
        raise TypeError(f"attention: expected a MultiHeadAttention, got {type(attention).__name__}")
    H, D_h = attention.num_heads, attention.d_head
    D = attention.W_q.weight.shape[1]
    shapes = {name: tuple(getattr(attention, name).weight.shape) for name in ("W_q", "W_k", "W_v", "W_o")}
    if any(shape != (H * D_h, D) for shape in shapes.values()):
        raise ValueError(
            f"attention: expected W_q, W_k, W_v and W_o of shape ({H * D_h}, {D}) (self-attention, one key/value "
            f"head per head), got {shapes}"
        )
    W_q, W_k, W_v, W_o = (getattr(attention, name).weight.detach() for name in ("W_q", "W_k", "W_v", "W_o"))
    q = W_q.reshape(H, D_h, D)  # (H, D_h, D)
    k = W_k.reshape(H, D_h, D)
    v = W_v.reshape(H, D_h, D)
    o = W_o.reshape(D, H, D_h).transpose(0, 1)  # (H, D, D_h)
    W_QK = q.transpose(1, 2) @ k / D_h**0.5  # (H, D, D)
    W_OV = o @ v  # (H, D, D)
    return W_QK, W_OV


def composition_score(reader: Tensor, writer: Tensor) -> Tensor:
    """How much ``reader`` reads of what ``writer`` writes: ``||reader writer||_F / (||reader||_F ||writer||_F)``.

    This is the composition score of Elhage et al. (2021): with ``writer`` an earlier head's ``W_OV``,
    ``reader`` is a later head's ``W_QK`` for K-composition (the keys read the earlier head's output), ``W_QK^T``
    for Q-composition (the queries read it) and ``W_OV`` for V-composition. It lies in ``[0, 1]``; it is 1 when the
    product keeps all the norm (for matrices of rank one that are aligned) and 0 when ``reader`` ignores what
    ``writer`` writes. Leading axes are batch axes.

    Args:
        reader: ``(..., D_out, D)``.
        writer: ``(..., D, D_in)``.
    Returns:
        ``(...)`` scores.

    >>> e = torch.zeros(4, 4); e[0, 0] = 1.0
    >>> composition_score(e, e), composition_score(e, e.roll(1, dims=0))
    (tensor(1.), tensor(0.))
    """
    for name, m in (("reader", reader), ("writer", writer)):
        check_tensor(name, m)
        check_floating(name, m)
        if m.dim() < 2:
            raise ValueError(f"{name}: expected a matrix (at least 2 axes), got shape {fmt_shape(m.shape)}")
    if reader.shape[-1] != writer.shape[-2]:
        raise ValueError(
            f"writer: expected {reader.shape[-1]} rows (the columns of reader, shape {fmt_shape(reader.shape)}), "
            f"got shape {fmt_shape(writer.shape)}"
        )
    norms = torch.linalg.matrix_norm(reader) * torch.linalg.matrix_norm(writer)
    if bool((norms == 0).any()):
        raise ValueError("reader, writer: expected nonzero matrices, got one with Frobenius norm 0")
    return torch.linalg.matrix_norm(reader @ writer) / norms


def copying_score(matrix: Tensor) -> Tensor:
    """The eigenvalue copying score of Elhage et al. (2021): ``sum(λ) / sum(|λ|)`` (real part).

    For a square matrix that maps each token to logits (a head's full OV circuit), positive eigenvalues mean that
    directions are mapped onto themselves: the score is 1 when all eigenvalues are positive reals (copying), -1 when
    all are negative, and near 0 for a random matrix. Leading axes are batch axes.

    Args:
        matrix: ``(..., N, N)``.
    Returns:
        ``(...)`` scores in ``[-1, 1]``.

    >>> copying_score(torch.eye(3)), copying_score(-torch.eye(3))
    (tensor(1.), tensor(-1.))
    """
    check_tensor("matrix", matrix)
    check_floating("matrix", matrix)
    if matrix.dim() < 2 or matrix.shape[-1] != matrix.shape[-2]:
        raise ValueError(f"matrix: expected square matrices (..., N, N), got shape {fmt_shape(matrix.shape)}")
    eig = torch.linalg.eigvals(matrix.double())  # (..., N) complex
    total = eig.abs().sum(-1)
    if bool((total == 0).any()):
        raise ValueError("matrix: expected a matrix with a nonzero eigenvalue, got all eigenvalues 0")
    return (eig.sum(-1).real / total).to(matrix.dtype)
