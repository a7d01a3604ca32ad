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
  A model trained on ``L`` positions meets offsets it never saw on longer inputs; ``scaling`` stretches the rotations
  so that a longer context turns by the angles of the trained one: ``"linear"`` (position interpolation, Chen et al.
  2023), ``"ntk"`` (a larger base) and ``"yarn"`` (Peng et al. 2024); :func:`rescale_rope` switches a trained model.
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
    "ROPE_SCALINGS",
    "rope_frequencies",
    "rope_attention_factor",
    "apply_rope",
    "RotaryEmbedding",
    "rescale_rope",
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


ROPE_SCALINGS = ("none", "linear", "ntk", "yarn")
"""The ways :func:`rope_frequencies` can stretch RoPE to a context ``scale`` times the trained one."""


def _check_scaling(scaling: object, scale: object, original_len: object) -> tuple[str, float, int | None]:
    """Check RoPE's context-extension arguments together and return them."""
    if scaling not in ROPE_SCALINGS:
        raise ValueError(f"scaling: expected one of {', '.join(map(repr, ROPE_SCALINGS))}, got {scaling!r}")
    scale = check_positive_float("scale", scale)
    if scale < 1.0:
        raise ValueError(f"scale: expected a factor >= 1 (the new context over the trained one), got {scale}")
    if scaling == "none" and scale != 1.0:
        raise ValueError(f"scale: expected 1.0 with scaling='none' (nothing is stretched), got {scale}")
    if scaling == "yarn":
        if original_len is None:
            raise ValueError("original_len: expected the trained context length (an int) with scaling='yarn', got None")
        original_len = check_positive_int("original_len", original_len)
    elif original_len is not None:
        raise ValueError(f"original_len: expected None unless scaling='yarn', got {original_len} with {scaling!r}")
    return str(scaling), scale, original_len  # type: ignore[return-value]


def rope_frequencies(
    d_head: int,
    base: float = 10000.0,
    *,
    scaling: str = "none",
    scale: float = 1.0,
    original_len: int | None = None,
    ramp: tuple[float, float] = (1.0, 32.0),
) -> Tensor:
    """The rotation frequencies ``θ_j = base^(-2j / D_h)`` of RoPE, one per pair of features, optionally stretched.

    A model trained on ``L`` positions and run on ``s L`` (``scale = s``) meets offsets, and so angles, that it never
    saw. The three ``scaling`` methods change the frequencies so that the longer context turns by trained angles:

    * ``"linear"``, position interpolation (Chen et al. 2023): every ``θ_j / s``, as if position ``m`` were ``m / s``;
    * ``"ntk"``, the "NTK-aware" rule: a larger base, ``base · s^(D_h / (D_h - 2))``, which leaves the fastest pair
      unchanged and divides the slowest one's frequency by exactly ``s``;
    * ``"yarn"`` (Peng et al. 2024): pair ``j`` completes ``r_j = L θ_j / 2π`` turns within the trained context
      ``L = original_len``; pairs with ``r_j < α`` are interpolated (``θ_j / s``), pairs with ``r_j > β`` are kept,
      and those between mix the two linearly, ``(1 - γ_j) θ_j / s + γ_j θ_j`` with ``γ_j = (r_j - α) / (β - α)``
      (``ramp = (α, β)``, 1 and 32 in the paper). YaRN also sharpens the softmax (:func:`rope_attention_factor`).

    Args:
        d_head: head width ``D_h``, even.
        base: the longest wavelength's scale (10000, as in the sinusoidal encoding).
        scaling: one of :data:`ROPE_SCALINGS`; ``"none"`` is plain RoPE.
        scale: ``s >= 1``, the new context over the trained one (1 with ``"none"``).
        original_len: with ``"yarn"`` only, the trained context length ``L``.
        ramp: with ``"yarn"``, the turn counts ``(α, β)`` where the ramp from interpolated to kept starts and ends.
    Returns:
        ``(D_h / 2,)`` float64 frequencies, from the fastest to the slowest pair.

    >>> rope_frequencies(4)
    tensor([1.0000, 0.0100], dtype=torch.float64)
    >>> rope_frequencies(4, scaling="linear", scale=4.0)
    tensor([0.2500, 0.0025], dtype=torch.float64)
    >>> rope_frequencies(4, scaling="ntk", scale=4.0)  # base 10000 * 4^2: the slow pair / 4, the fast one kept
    tensor([1.0000, 0.0025], dtype=torch.float64)
    """
    d_head = _check_head_width(d_head)
    base = check_positive_float("base", base)
    if base <= 1:
        raise ValueError(f"base: expected a number greater than 1, got {base}")
    scaling, scale, original_len = _check_scaling(scaling, scale, original_len)
    exponents = torch.arange(0, d_head, 2, dtype=torch.float64) / d_head  # (D_h / 2,): 2j / D_h
    if scaling == "ntk":
        if d_head == 2:
            raise ValueError("d_head: expected at least 4 with scaling='ntk' (its rule needs two pairs), got 2")
        base = base * scale ** (d_head / (d_head - 2))
    theta = base ** (-exponents)
    if scaling == "linear":
        return theta / scale
    if scaling == "yarn":
        if not isinstance(ramp, (tuple, list)) or len(ramp) != 2:
            raise ValueError(f"ramp: expected a pair (alpha, beta) of turn counts, got {ramp!r}")
        alpha, beta = (check_positive_float("ramp", r) for r in ramp)
        if not alpha < beta:
            raise ValueError(f"ramp: expected (alpha, beta) with alpha < beta, got {tuple(ramp)}")
        turns = original_len * theta / (2 * math.pi)  # r_j: turns of pair j within the trained context
        keep = ((turns - alpha) / (beta - alpha)).clamp(0.0, 1.0)  # γ_j: 0 interpolate, 1 keep
        return (1 - keep) * theta / scale + keep * theta
    return theta


def rope_attention_factor(scale: float) -> float:
    """YaRN's factor on queries and keys, ``0.1 ln s + 1`` (1 for ``s = 1``).

    Multiplying both by it divides the softmax's temperature by its square: the scores of a longer context, spread
    over more keys, are sharpened back (Peng et al. 2024 fitted the constant 0.1 on LLaMA models).

    Args:
        scale: ``s >= 1``, the new context over the trained one.
    Returns:
        the factor, a float >= 1.

    >>> round(rope_attention_factor(4.0), 4)
    1.1386
    """
    scale = check_positive_float("scale", scale)
    if scale < 1.0:
        raise ValueError(f"scale: expected a factor >= 1 (the new context over the trained one), got {scale}")
    return 0.1 * math.log(scale) + 1.0


def _rotate_pairs(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate the pairs ``(x[..., 2j], x[..., 2j+1])`` by the angles whose cosines and sines are given.

    ``x`` is ``(..., T, D_h)``; ``cos`` and ``sin`` are ``(T, D_h / 2)``.
    """
    pairs = x.unflatten(-1, (-1, 2))  # (..., T, D_h) -> (..., T, D_h / 2, 2)
    x_even, x_odd = pairs[..., 0], pairs[..., 1]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    rotated = torch.stack((x_even * cos - x_odd * sin, x_even * sin + x_odd * cos), dim=-1)
    return rotated.flatten(-2)  # (..., T, D_h / 2, 2) -> (..., T, D_h)


def apply_rope(
    x: Tensor,
    offset: int = 0,
    base: float = 10000.0,
    *,
    scaling: str = "none",
    scale: float = 1.0,
    original_len: int | None = None,
    ramp: tuple[float, float] = (1.0, 32.0),
) -> Tensor:
    """Rotate queries or keys by their positions: pair ``j`` of position ``m`` turns by the angle ``m θ_j``.

    Args:
        x: ``(..., T, D_h)`` queries or keys of one or more heads, e.g. ``(B, H, T, D_h)``; ``D_h`` even.
        offset: the position of ``x[..., 0, :]`` (the number of cached positions when decoding).
        base: as in :func:`rope_frequencies`.
        scaling, scale, original_len, ramp: context extension, as in :func:`rope_frequencies`. With ``"yarn"`` the
            rotated features are also multiplied by :func:`rope_attention_factor` (so lengths are not kept).
    Returns:
        ``(..., T, D_h)``, the rotated features (same dtype and device).

    >>> q = torch.tensor([[1.0, 0.0]])  # one position, one pair
    >>> apply_rope(q, offset=1)  # turned by 1 radian
    tensor([[0.5403, 0.8415]])
    >>> apply_rope(q, offset=4, scaling="linear", scale=4.0)  # position 4 turns as position 1 did
    tensor([[0.5403, 0.8415]])
    """
    check_tensor("x", x)
    if x.dim() < 2:
        raise ValueError(f"x: expected shape (..., T, D_h) with at least 2 axes, got shape {fmt_shape(x.shape)}")
    check_floating("x", x)
    freqs = rope_frequencies(
        _check_head_width(x.shape[-1]), base, scaling=scaling, scale=scale, original_len=original_len, ramp=ramp
    )
    check_positive_int("offset", offset, minimum=0)
    positions = torch.arange(offset, offset + x.shape[-2], dtype=torch.float64)
    angles = torch.outer(positions, freqs).to(x.device)  # (T, D_h / 2), in float64 for large positions
    factor = rope_attention_factor(scale) if scaling == "yarn" else 1.0
    return _rotate_pairs(x, factor * torch.cos(angles), factor * torch.sin(angles))


class RotaryEmbedding(nn.Module):
    """RoPE with the cosines and sines of every position up to ``max_len`` computed once.

    Args:
        d_head: head width ``D_h``, even.
        max_len: the most positions it can rotate (offset included).
        base: as in :func:`rope_frequencies`.
        scaling, scale, original_len, ramp: context extension, as in :func:`apply_rope`.

    >>> rope = RotaryEmbedding(d_head=4, max_len=8)
    >>> torch.allclose(rope(torch.ones(1, 2, 3, 4), offset=5), apply_rope(torch.ones(1, 2, 3, 4), offset=5))
    True
    """

    cos: Tensor
    sin: Tensor

    def __init__(
        self,
        d_head: int,
        max_len: int = 4096,
        base: float = 10000.0,
        *,
        scaling: str = "none",
        scale: float = 1.0,
        original_len: int | None = None,
        ramp: tuple[float, float] = (1.0, 32.0),
    ) -> None:
        super().__init__()
        self.d_head = _check_head_width(d_head)
        self.max_len = check_positive_int("max_len", max_len)
        self.base = check_positive_float("base", base)
        self.scaling, self.scale, self.original_len = _check_scaling(scaling, scale, original_len)
        freqs = rope_frequencies(d_head, base, scaling=scaling, scale=scale, original_len=original_len, ramp=ramp)
        self.ramp = (float(ramp[0]), float(ramp[1]))
        angles = torch.outer(torch.arange(max_len, dtype=torch.float64), freqs)  # (max_len, D_h / 2)
        factor = rope_attention_factor(scale) if scaling == "yarn" else 1.0
        self.register_buffer("cos", (factor * torch.cos(angles)).float(), persistent=False)  # (max_len, D_h / 2)
        self.register_buffer("sin", (factor * torch.sin(angles)).float(), persistent=False)

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


def rescale_rope(
    model: nn.Module,
    scaling: str,
    scale: float = 1.0,
    original_len: int | None = None,
    ramp: tuple[float, float] = (1.0, 32.0),
) -> int:
    """Switch every :class:`RotaryEmbedding` inside ``model`` to a context-extension method, in place.

    No weight changes: only the precomputed rotations are rebuilt (same head width, ``max_len`` and base), so a
    model trained with plain RoPE can be run on a longer context, and ``rescale_rope(model, "none")`` undoes it.

    Args:
        model: a module holding rotary embeddings, e.g. ``make_gpt(GPTConfig(..., positional="rope"))``.
        scaling, scale, original_len, ramp: as in :func:`rope_frequencies`.
    Returns:
        the number of rotary embeddings rebuilt (one per attention layer).
    Raises:
        ValueError: ``model`` holds no :class:`RotaryEmbedding`.

    >>> attn = nn.ModuleDict({"rope": RotaryEmbedding(d_head=4, max_len=8)})
    >>> rescale_rope(attn, "linear", scale=2.0), attn["rope"].scale
    (1, 2.0)
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    scaling, scale, original_len = _check_scaling(scaling, scale, original_len)
    count = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, RotaryEmbedding):
                new = RotaryEmbedding(
                    child.d_head, child.max_len, child.base, scaling=scaling, scale=scale,
                    original_len=original_len, ramp=ramp,
                )
                setattr(parent, name, new.to(child.cos.device))
                count += 1
    if count == 0:
        raise ValueError(
            f"model: expected a module with rotary embeddings (RotaryEmbedding), found none in a "
            f"{type(model).__name__}"
        )
    return count


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
