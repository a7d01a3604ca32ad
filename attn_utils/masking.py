"""Masks and the masked softmax.

**Which way a mask points.** Everywhere in this package a boolean mask follows
:func:`torch.nn.functional.scaled_dot_product_attention`: ``True`` means *may attend*, ``False`` means *masked out*.
(:class:`torch.nn.MultiheadAttention`'s ``key_padding_mask`` uses the opposite convention.)

**Fully masked rows.** A query with no valid key gets all-zero attention weights: never NaN (which a plain softmax
over a row of ``-inf`` gives), and never uniform weights over padding (which a softmax over ``-1e6`` gives). Masked
scores are filled with ``-inf``, so that every valid score, even ``torch.finfo(dtype).min``, outweighs every masked one;
rows with no valid key are handled on their own.

**Values that are not finite.** Masked scores may hold anything (NaN in padding is ignored). A score of ``-inf`` at a
valid key counts as masked, as in :func:`torch.nn.functional.scaled_dot_product_attention`'s float masks: a row whose
valid scores are all ``-inf`` is a row with no valid key. NaN or ``+inf`` at a valid key is an error.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._checks import (
    check_broadcastable,
    check_int_tensor,
    check_nonempty,
    check_positive_int,
    check_tensor,
    first_index,
    fmt_shape,
    host_ints,
    value_ranges,
    values_checked,
    values_checked_scope,
)

__all__ = ["sequence_mask", "causal_mask", "sliding_window_mask", "attention_mask", "masked_softmax"]


def sequence_mask(valid_lens: Tensor, max_len: int) -> Tensor:
    """Boolean mask that is True at positions before each valid length.

    Args:
        valid_lens: integer tensor of any shape ``S``, each entry in ``[0, max_len]``.
        max_len: length of the masked axis.
    Returns:
        bool tensor of shape ``(*S, max_len)``; entry ``[..., j]`` is ``j < valid_lens[...]``.

    >>> sequence_mask(torch.tensor([1, 3]), 4)
    tensor([[ True, False, False, False],
            [ True,  True,  True, False]])
    """
    check_tensor("valid_lens", valid_lens)
    check_int_tensor("valid_lens", valid_lens)
    check_positive_int("max_len", max_len, minimum=0)
    if valid_lens.numel() and not values_checked():  # one host read, skipped inside a checked entry point
        (lo, hi), = value_ranges(valid_lens)
        _check_lens_range(lo, hi, max_len)
    positions = torch.arange(max_len, device=valid_lens.device)
    return positions < valid_lens.unsqueeze(-1)


def _check_lens_range(lo: int, hi: int, max_len: int) -> None:
    """Raise unless the smallest and largest valid lengths ``lo`` and ``hi`` lie in ``[0, max_len]``."""
    if lo < 0 or hi > max_len:
        raise ValueError(f"valid_lens: expected every entry in [0, {max_len}], got values in [{lo}, {hi}]")


def causal_mask(T_q: int, T_k: int | None = None, device: torch.device | str | None = None) -> Tensor:
    """Boolean causal mask: query ``i`` may attend key ``j`` when ``j <= i + (T_k - T_q)``.

    With ``T_k == T_q`` this is the lower triangle. With ``T_k > T_q`` the queries are the *last* ``T_q`` positions
    of a sequence of length ``T_k``, as when decoding with a cache of ``T_k - T_q`` earlier keys.

    Args:
        T_q: number of queries.
        T_k: number of keys (default ``T_q``); must be at least ``T_q``.
        device: where to build the mask.
    Returns:
        bool tensor of shape ``(T_q, T_k)``.

    >>> causal_mask(3).int()
    tensor([[1, 0, 0],
            [1, 1, 0],
            [1, 1, 1]], dtype=torch.int32)
    """
    check_positive_int("T_q", T_q)
    T_k = T_q if T_k is None else check_positive_int("T_k", T_k)
    if T_k < T_q:
        raise ValueError(f"T_k: expected T_k >= T_q={T_q} (queries are the last T_q positions), got T_k={T_k}")
    rows = torch.arange(T_q, device=device).unsqueeze(1)
    cols = torch.arange(T_k, device=device).unsqueeze(0)
    return cols <= rows + (T_k - T_q)


def _check_window(window: object) -> int:
    """Check a sliding window's size (an int >= 1) and return it; shared by the mask and the models that use it."""
    if isinstance(window, bool) or not isinstance(window, int):
        raise TypeError(f"window: expected an int (positions each query sees), got {type(window).__name__}")
    if window < 1:
        raise ValueError(f"window: expected at least 1 (a query always sees itself), got window={window}")
    return window


def sliding_window_mask(
    T_q: int, T_k: int | None = None, *, window: int, device: torch.device | str | None = None
) -> Tensor:
    """Causal local attention: each query sees itself and the ``window - 1`` positions before it.

    It is :func:`causal_mask` with the keys further back than the window removed, so query ``i`` (at position
    ``i + T_k - T_q``) may attend key ``j`` when ``0 <= (i + T_k - T_q) - j < window``. A window of at least ``T_k``
    is the causal mask itself.

    Args:
        T_q: number of queries.
        T_k: number of keys (default ``T_q``), at least ``T_q``.
        window: how many positions each query sees, itself included; at least 1.
        device: where to build the mask.
    Returns:
        bool tensor of shape ``(T_q, T_k)`` (True = may attend).

    >>> sliding_window_mask(4, window=2).int()
    tensor([[1, 0, 0, 0],
            [1, 1, 0, 0],
            [0, 1, 1, 0],
            [0, 0, 1, 1]], dtype=torch.int32)
    """
    _check_window(window)
    causal = causal_mask(T_q, T_k, device=device)  # (T_q, T_k)
    T_k = causal.shape[1]
    rows = torch.arange(T_q, device=device).unsqueeze(1) + (T_k - T_q)  # the queries' positions, (T_q, 1)
    cols = torch.arange(T_k, device=device).unsqueeze(0)  # (1, T_k)
    return causal & (rows - cols < window)


def _check_device(name: str, x: Tensor, device: torch.device | str | None) -> None:
    """Raise ValueError unless ``x`` is on ``device`` (the scores'), when one is given."""
    if device is None:
        return
    want = torch.device(device)
    if x.device.type != want.type or (want.index is not None and x.device.index not in (None, want.index)):
        raise ValueError(f"{name}: expected a tensor on {want} (as the scores), got one on {x.device}; "
                         f"move it with .to({str(want)!r})")


def attention_mask(
    scores_shape: torch.Size | tuple[int, ...],
    valid_lens: Tensor | None = None,
    attn_mask: Tensor | None = None,
    device: torch.device | str | None = None,
) -> Tensor | None:
    """Combine ``valid_lens`` and a boolean ``attn_mask`` into one mask for scores of ``scores_shape``.

    Args:
        scores_shape: ``(B, *, T_q, T_k)``, e.g. ``(B, T_q, T_k)`` or ``(B, H, T_q, T_k)``.
        valid_lens: None, ``(B,)`` (the same number of valid keys for every query of a batch element) or ``(B, T_q)``
            (one number per query); each entry in ``[0, T_k]``.
        attn_mask: None, or a bool tensor broadcastable to ``scores_shape``; True means *may attend*.
        device: device of the result (default: that of ``valid_lens`` or ``attn_mask``); when given, ``valid_lens``
            and ``attn_mask`` must be on it.
    Returns:
        None when nothing is masked, else a bool tensor broadcastable to ``scores_shape`` (True = may attend).
    """
    shape = tuple(scores_shape)
    if len(shape) < 3:
        raise ValueError(f"scores: expected shape (B, *, T_q, T_k) with at least 3 axes, got shape {fmt_shape(shape)}")
    B, T_q, T_k = shape[0], shape[-2], shape[-1]
    mask: Tensor | None = None
    if valid_lens is not None:
        check_tensor("valid_lens", valid_lens)
        check_int_tensor("valid_lens", valid_lens)
        _check_device("valid_lens", valid_lens, device)
        if valid_lens.dim() == 1 and valid_lens.shape[0] == B:
            mask = sequence_mask(valid_lens, T_k)[:, None, :]  # (B,) -> (B, 1, T_k)
        elif valid_lens.dim() == 2 and tuple(valid_lens.shape) == (B, T_q):
            mask = sequence_mask(valid_lens, T_k)  # (B, T_q) -> (B, T_q, T_k)
        else:
            raise ValueError(
                f"valid_lens: expected shape ({B},) or ({B}, {T_q}) for scores of shape {fmt_shape(shape)}, "
                f"got shape {fmt_shape(valid_lens.shape)}"
            )
        mask = mask.reshape(B, *([1] * (len(shape) - 3)), mask.shape[-2], T_k)  # insert the head axes
        if device is not None:
            mask = mask.to(device)
    if attn_mask is not None:
        check_tensor("attn_mask", attn_mask)
        if attn_mask.dtype != torch.bool:
            raise TypeError(f"attn_mask: expected a bool tensor (True = may attend), got dtype {attn_mask.dtype}")
        check_broadcastable("attn_mask", attn_mask, shape)
        _check_device("attn_mask", attn_mask, device)
        m = attn_mask if device is None else attn_mask.to(device)
        mask = m if mask is None else (mask.to(m.device) & m)
    return mask


def masked_softmax(scores: Tensor, valid_lens: Tensor | None = None, attn_mask: Tensor | None = None) -> Tensor:
    """Softmax over the last axis that ignores masked keys.

    Args:
        scores: ``(B, *, T_q, T_k)`` attention scores, e.g. ``(B, T_q, T_k)`` or ``(B, H, T_q, T_k)``.
        valid_lens: None, ``(B,)`` or ``(B, T_q)``: keys at positions ``>= valid_lens`` are masked.
        attn_mask: None, or a bool tensor broadcastable to ``scores`` (True = may attend), e.g. a
            :func:`causal_mask`.
    Returns:
        attention weights with the shape and dtype of ``scores``. Masked entries are exactly 0; every row with at
        least one valid key sums to 1; a row with no valid key is all zeros. A score of ``-inf`` counts as masked.
    Raises:
        ValueError: NaN or ``+inf`` at a valid key (masked keys may hold anything).

    >>> w = masked_softmax(torch.zeros(2, 1, 4), torch.tensor([2, 0]))
    >>> w
    tensor([[[0.5000, 0.5000, 0.0000, 0.0000]],
    <BLANKLINE>
            [[0.0000, 0.0000, 0.0000, 0.0000]]])
    >>> masked_softmax(torch.tensor([[[float("-inf"), float("-inf"), float("nan")]]]), torch.tensor([2]))
    tensor([[[0., 0., 0.]]])
    """
    check_tensor("scores", scores)
    if not scores.is_floating_point():
        raise TypeError(f"scores: expected a floating-point tensor, got dtype {scores.dtype}")
    if scores.dim() < 3:
        raise ValueError(
            f"scores: expected shape (B, *, T_q, T_k) with at least 3 axes, got shape {fmt_shape(scores.shape)}"
        )
    check_nonempty("scores", scores, axes=(-1,))
    if values_checked():
        mask = attention_mask(scores.shape, valid_lens, attn_mask, device=scores.device)
    else:
        with values_checked_scope():  # the lengths are checked below, with the scores, in one host read
            mask = attention_mask(scores.shape, valid_lens, attn_mask, device=scores.device)
        mask = _check_scores(scores, mask, valid_lens)
    return _softmax_with_mask(scores, mask)


def _check_scores(scores: Tensor, mask: Tensor | None, valid_lens: Tensor | None) -> Tensor | None:
    """The value checks of :func:`masked_softmax`, in one host read (more only for scores that are not finite).

    Args:
        scores: ``(B, *, T_q, T_k)``.
        mask: from :func:`attention_mask` for ``scores`` and ``valid_lens`` (None: every key is valid).
        valid_lens: the lengths the mask was made from, whose range is checked here.
    Returns:
        the mask, with the keys whose score is ``-inf`` masked too (None if nothing is masked).
    Raises:
        ValueError: lengths outside ``[0, T_k]``; NaN or ``+inf`` at a valid key.
    """
    stats = [torch.isfinite(scores).all()]
    if valid_lens is not None and valid_lens.numel():
        stats += [valid_lens.min(), valid_lens.max()]
    got = host_ints(*stats)  # the one host read
    if len(got) == 3:
        _check_lens_range(got[1], got[2], scores.shape[-1])
    if got[0]:
        return mask
    # Some score is NaN or infinite: where? (More host reads, only here.)
    valid = torch.ones((), dtype=torch.bool, device=scores.device) if mask is None else mask
    bad = (torch.isnan(scores) | (scores == float("inf"))) & valid
    if bool(bad.any()):
        at = first_index(bad)
        raise ValueError(
            f"scores: expected finite values (or -inf, which masks the key) at the valid keys, got "
            f"{float(scores[at])} at index {at} of shape {fmt_shape(scores.shape)}"
        )
    above = scores != float("-inf")  # -inf masks its key: a row of -inf has no valid key, and gets zeros, not NaN
    return above if mask is None else mask & above


def _softmax_with_mask(scores: Tensor, mask: Tensor | None, in_place: bool = False) -> Tensor:
    """The body of :func:`masked_softmax`, for a mask already made by :func:`attention_mask` (no checks).

    Args:
        scores: ``(B, *, T_q, T_k)`` attention scores.
        mask: None, or a bool tensor broadcastable to ``scores`` (True = may attend).
        in_place: overwrite ``scores`` with the weights instead of making new tensors. Only where autograd does not
            record (the in-place softmax has no gradient), e.g. inside a custom :class:`torch.autograd.Function`.
    Returns:
        the weights, as :func:`masked_softmax` returns them (``scores`` itself when ``in_place``).
    """

    def softmax(x: Tensor) -> Tensor:
        return torch.softmax(x, dim=-1, out=x) if in_place else torch.softmax(x, dim=-1)

    if mask is None:
        return softmax(scores)
    # -inf, not the dtype's most negative finite number: a valid score may be that number itself, and would then tie
    # with the masked keys. exp(-inf - max) is exactly 0 as long as the row has one valid (finite) score.
    has_key = mask.any(dim=-1, keepdim=True)  # (..., T_q, 1): computed on the mask, which is often much smaller
    # A row with no valid key would be all -inf, and its softmax 0/0 = NaN. Such rows keep their finite scores (a
    # softmax with finite gradients) and are zeroed after it. No branch on whether there are any: that would read the
    # mask back to the host, and make a GPU wait, in every layer.
    no_key = ~has_key
    masked_out = ~mask & has_key  # broadcast: as small as the mask
    neg_inf = float("-inf")
    filled = scores.masked_fill_(masked_out, neg_inf) if in_place else scores.masked_fill(masked_out, neg_inf)
    weights = softmax(filled)
    return weights.masked_fill_(no_key, 0.0) if in_place else weights.masked_fill(no_key, 0.0)
