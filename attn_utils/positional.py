"""Positional information: sinusoidal encoding, rotary position embedding (RoPE) and ALiBi.

Self-attention is blind to order, so position ``i`` is added to the token's representation as the row ``P_i`` of

    P[i, 2j]   = sin(i / 10000^(2j / D))
    P[i, 2j+1] = cos(i / 10000^(2j / D))

Low columns oscillate fast and high columns slowly, like the digits of a binary counter; and ``P_{i+δ}`` is a fixed
linear (rotation) function of ``P_i`` for every ``i``, which lets attention pick out relative positions.

Two schemes used by today's models put positions into the attention scores instead of the inputs:

* **RoPE** (:func:`apply_rope`, :class:`RotaryEmbedding`) rotates each pair of features ``(2j, 2j+1)`` of a query or
  key at position ``m`` by the angle ``m θ_j``, ``θ_j = base^(-2j / D_h)``. A rotation is orthogonal, so
  ``(R_m q) · (R_n k) = q · R_{n-m} k``: the score depends on the positions only through the offset ``n - m``.
* **ALiBi** (:func:`alibi_slopes`, :func:`alibi_bias`) adds ``-s_h |i - j|`` to head ``h``'s score of query ``i``
  and key ``j``: a penalty growing linearly with distance, with a different slope ``s_h`` per head.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ._checks import (
    check_floating,
    check_positive_float,
    check_positive_int,
    check_probability,
    check_shape,
    check_tensor,
    fmt_shape,
)

__all__ = [
    "sinusoidal_encoding",
    "PositionalEncoding",
    "rope_frequencies",
    "apply_rope",
    "RotaryEmbedding",
    "alibi_slopes",
    "alibi_bias",
]


def sinusoidal_encoding(max_len: int, d_model: int) -> Tensor:
    """The matrix ``P`` of sinusoidal positional encodings.

    Args:
        max_len: number of positions ``T``.
        d_model: width ``D`` (odd widths are allowed: the last column is then a sine).
    Returns:
        ``(T, D)`` float32 tensor with ``P[i, 2j] = sin(i / 10000^(2j/D))`` and ``P[i, 2j+1] = cos(i / 10000^(2j/D))``.

    >>> sinusoidal_encoding(2, 4)
    tensor([[0.0000, 1.0000, 0.0000, 1.0000],
            [0.8415, 0.5403, 0.0100, 0.9999]])
    """
    check_positive_int("max_len", max_len)
    check_positive_int("d_model", d_model)
    positions = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (T, 1)
    freqs = 10000.0 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (ceil(D/2),)
    angles = positions / freqs  # (T, 1) / (ceil(D/2),) -> (T, ceil(D/2))
    P = torch.zeros(max_len, d_model, dtype=torch.float64)
    P[:, 0::2] = torch.sin(angles)
    P[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return P.float()


class PositionalEncoding(nn.Module):
    """Add sinusoidal positional encodings to a batch of sequences, then apply dropout.

    Args:
        d_model: width ``D`` of the inputs.
        dropout: dropout probability applied after the addition.
        max_len: the longest sequence (offset included) that can be encoded.
    """

    P: Tensor

    def __init__(self, d_model: int, dropout: float = 0.0, max_len: int = 1000) -> None:
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        self.max_len = check_positive_int("max_len", max_len)
        self.dropout = nn.Dropout(check_probability("dropout", dropout))
        self.register_buffer("P", sinusoidal_encoding(max_len, d_model).unsqueeze(0), persistent=False)  # (1, T, D)

    def forward(self, X: Tensor, offset: int = 0) -> Tensor:
        """Return ``dropout(X + P[offset : offset + T])``.

        Args:
            X: ``(B, T, D)`` inputs.
            offset: position of ``X[:, 0]`` (non-zero when decoding one step at a time).
        Returns:
            ``(B, T, D)``.
        """
        sizes = check_shape("X", X, ("B", "T", self.d_model))
        check_floating("X", X)
        _check_device("X", X, self.P)
        check_positive_int("offset", offset, minimum=0)
        end = offset + sizes["T"]
        if end > self.max_len:
            raise ValueError(
                f"X: positions {offset}..{end - 1} exceed max_len={self.max_len}; got shape {tuple(X.shape)} "
                f"with offset={offset}, expected offset + T <= {self.max_len}"
            )
        return self.dropout(X + self.P[:, offset:end].to(X.dtype))


def _check_device(name: str, x: Tensor, buffer: Tensor) -> None:
    """Raise unless ``x`` is on the device of a module's precomputed table ``buffer`` (else torch fails inside)."""
    if x.device != buffer.device:
        raise ValueError(
            f"{name}: expected a tensor on {buffer.device} (the module's precomputed table), got one on {x.device}; "
            "move the input or the module with .to(device)"
        )


# --------------------------------------------------------------------------------------------------------------------
# Rotary position embedding (RoPE)


def _check_head_width(d_head: object) -> int:
    d_head = check_positive_int("d_head", d_head)
    if d_head % 2:
        raise ValueError(
            f"d_head: expected an even head width (RoPE rotates pairs of features), got d_head={d_head}"
        )
    return d_head


def rope_frequencies(d_head: int, base: float = 10000.0) -> Tensor:
    """The rotation frequencies ``θ_j = base^(-2j / D_h)`` of RoPE, one per pair of features.

    Args:
        d_head: head width ``D_h``, even.
        base: the longest wavelength's scale (10000, as in the sinusoidal encoding).
    Returns:
        ``(D_h / 2,)`` float64 frequencies, from 1 (fast) down to nearly ``1 / base`` (slow).

    >>> rope_frequencies(4)
    tensor([1.0000, 0.0100], dtype=torch.float64)
    """
    d_head = _check_head_width(d_head)
    base = check_positive_float("base", base)
    if base <= 1:
        raise ValueError(f"base: expected a number greater than 1, got {base}")
    return base ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)


def _rotate_pairs(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate the pairs ``(x[..., 2j], x[..., 2j+1])`` by the angles whose cosines and sines are given.

    ``x`` is ``(..., T, D_h)``; ``cos`` and ``sin`` are ``(T, D_h / 2)``.
    """
    pairs = x.unflatten(-1, (-1, 2))  # (..., T, D_h) -> (..., T, D_h / 2, 2)
    x_even, x_odd = pairs[..., 0], pairs[..., 1]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    rotated = torch.stack((x_even * cos - x_odd * sin, x_even * sin + x_odd * cos), dim=-1)
    return rotated.flatten(-2)  # (..., T, D_h / 2, 2) -> (..., T, D_h)


def apply_rope(x: Tensor, offset: int = 0, base: float = 10000.0) -> Tensor:
    """Rotate queries or keys by their positions: pair ``j`` of position ``m`` turns by the angle ``m θ_j``.

    Args:
        x: ``(..., T, D_h)`` queries or keys of one or more heads, e.g. ``(B, H, T, D_h)``; ``D_h`` even.
        offset: the position of ``x[..., 0, :]`` (the number of cached positions when decoding).
        base: as in :func:`rope_frequencies`.
    Returns:
        ``(..., T, D_h)``, the rotated features (same dtype and device).

    >>> q = torch.tensor([[1.0, 0.0]])  # one position, one pair
    >>> apply_rope(q, offset=1)  # turned by 1 radian
    tensor([[0.5403, 0.8415]])
    """
    check_tensor("x", x)
    if x.dim() < 2:
        raise ValueError(f"x: expected shape (..., T, D_h) with at least 2 axes, got shape {fmt_shape(x.shape)}")
    check_floating("x", x)
    freqs = rope_frequencies(_check_head_width(x.shape[-1]), base)
    check_positive_int("offset", offset, minimum=0)
    positions = torch.arange(offset, offset + x.shape[-2], dtype=torch.float64)
    angles = torch.outer(positions, freqs).to(x.device)  # (T, D_h / 2), in float64 for large positions
    return _rotate_pairs(x, torch.cos(angles), torch.sin(angles))


class RotaryEmbedding(nn.Module):
    """RoPE with the cosines and sines of every position up to ``max_len`` computed once.

    Args:
        d_head: head width ``D_h``, even.
        max_len: the most positions it can rotate (offset included).
        base: as in :func:`rope_frequencies`.

    >>> rope = RotaryEmbedding(d_head=4, max_len=8)
    >>> torch.allclose(rope(torch.ones(1, 2, 3, 4), offset=5), apply_rope(torch.ones(1, 2, 3, 4), offset=5))
    True
    """

    cos: Tensor
    sin: Tensor

    def __init__(self, d_head: int, max_len: int = 4096, base: float = 10000.0) -> None:
        super().__init__()
        self.d_head = _check_head_width(d_head)
        self.max_len = check_positive_int("max_len", max_len)
        self.base = check_positive_float("base", base)
        angles = torch.outer(torch.arange(max_len, dtype=torch.float64), rope_frequencies(d_head, base))
        self.register_buffer("cos", torch.cos(angles).float(), persistent=False)  # (max_len, D_h / 2)
        self.register_buffer("sin", torch.sin(angles).float(), persistent=False)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """Rotate ``x`` as :func:`apply_rope` does.

        Args:
            x: ``(..., T, D_h)``.
            offset: the position of ``x[..., 0, :]``; ``offset + T`` must not exceed ``max_len``.
        Returns:
            ``(..., T, D_h)``.
        """
        check_tensor("x", x)
        if x.dim() < 2 or x.shape[-1] != self.d_head:
            raise ValueError(f"x: expected shape (..., T, {self.d_head}), got shape {fmt_shape(x.shape)}")
        check_floating("x", x)
        _check_device("x", x, self.cos)
        check_positive_int("offset", offset, minimum=0)
        end = offset + x.shape[-2]
        if end > self.max_len:
            raise ValueError(
                f"offset: positions {offset}..{end - 1} run past the {self.max_len} positions whose rotations are "
                f"precomputed; got offset={offset} for x of shape {fmt_shape(x.shape)}, expected offset + T <= "
                f"{self.max_len} (build the module with a larger max_len)"
            )
        return _rotate_pairs(x, self.cos[offset:end], self.sin[offset:end])


# --------------------------------------------------------------------------------------------------------------------
# ALiBi


def alibi_slopes(num_heads: int) -> Tensor:
    """ALiBi's per-head slopes: the geometric sequence ``2^(-8/H), 2^(-16/H), …, 2^(-8)``.

    When ``H`` is not a power of two, the slopes of the largest power of two below ``H`` are followed by every other
    slope of the next power of two (the rule of Press et al.): two decreasing runs, so the slopes as a whole are then
    not in decreasing order.

    Args:
        num_heads: heads ``H``.
    Returns:
        ``(H,)`` float32 slopes in ``(0, 1)``, all different; decreasing when ``H`` is a power of two.

    >>> alibi_slopes(4)
    tensor([0.2500, 0.0625, 0.0156, 0.0039])
    >>> alibi_slopes(3)  # the 2 slopes of H = 2, then every other slope of H = 4, as many as needed
    tensor([0.0625, 0.0039, 0.2500])
    """
    check_positive_int("num_heads", num_heads)

    def powers_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]

    below = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = powers_of_two(below) + powers_of_two(2 * below)[0::2][: num_heads - below]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(
    slopes: Tensor, T_q: int, T_k: int | None = None, device: torch.device | str | None = None
) -> Tensor:
    """ALiBi's additive score bias ``-s_h |i - j|``, with the queries as the last ``T_q`` of ``T_k`` positions.

    Args:
        slopes: ``(H,)`` per-head slopes, e.g. :func:`alibi_slopes`.
        T_q: number of queries.
        T_k: number of keys (default ``T_q``), at least ``T_q``; query ``i`` sits at position ``i + T_k - T_q``, as in
            :func:`~attn_utils.masking.causal_mask`.
        device: where to build it (default: that of ``slopes``).
    Returns:
        ``(H, T_q, T_k)``, 0 on the diagonal and more negative with distance, in ``slopes``' dtype.

    >>> alibi_bias(torch.tensor([0.5]), 3)
    tensor([[[ 0.0000, -0.5000, -1.0000],
             [-0.5000,  0.0000, -0.5000],
             [-1.0000, -0.5000,  0.0000]]])
    """
    check_shape("slopes", slopes, ("H",))
    check_floating("slopes", slopes)
    check_positive_int("T_q", T_q)
    T_k = T_q if T_k is None else check_positive_int("T_k", T_k)
    if T_k < T_q:
        raise ValueError(f"T_k: expected T_k >= T_q={T_q} (queries are the last T_q positions), got T_k={T_k}")
    device = slopes.device if device is None else device
    query_pos = torch.arange(T_k - T_q, T_k, device=device)[:, None]  # (T_q, 1)
    key_pos = torch.arange(T_k, device=device)[None, :]  # (1, T_k)
    distance = (query_pos - key_pos).abs().to(slopes.dtype)  # (T_q, T_k)
    bias = -slopes.to(device)[:, None, None] * distance  # (H, 1, 1) * (T_q, T_k) -> (H, T_q, T_k)
    return bias + 0.0  # -0.0 on the diagonal becomes 0.0
