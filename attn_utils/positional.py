"""Sinusoidal positional encoding.

Self-attention is blind to order, so position ``i`` is added to the token's representation as the row ``P_i`` of

    P[i, 2j]   = sin(i / 10000^(2j / D))
    P[i, 2j+1] = cos(i / 10000^(2j / D))

Low columns oscillate fast and high columns slowly, like the digits of a binary counter; and ``P_{i+δ}`` is a fixed
linear (rotation) function of ``P_i`` for every ``i``, which lets attention pick out relative positions.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ._checks import check_floating, check_positive_int, check_probability, check_shape

__all__ = ["sinusoidal_encoding", "PositionalEncoding"]


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
        check_positive_int("offset", offset, minimum=0)
        end = offset + sizes["T"]
        if end > self.max_len:
            raise ValueError(
                f"X: positions {offset}..{end - 1} exceed max_len={self.max_len}; got shape {tuple(X.shape)} "
                f"with offset={offset}, expected offset + T <= {self.max_len}"
            )
        return self.dropout(X + self.P[:, offset:end].to(X.dtype))
