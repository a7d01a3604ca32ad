"""Input checks shared by the package.

Every public function checks its inputs with these helpers, so that bad input fails early with a message that names
the argument, the shape (or type) it got and the shape (or type) it expected. Nothing here is part of the public API.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

Dim = int | str | None
"""One expected dimension: an int (exact size), a shape letter such as ``"T_k"`` (any size, but the same size
wherever the letter repeats within one call of :func:`check_shape`), or None (any size)."""


def fmt_shape(shape: Sequence[int] | torch.Size) -> str:
    """Format a shape as ``(2, 3)``."""
    return "(" + ", ".join(str(int(s)) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def fmt_expected(dims: Sequence[Dim]) -> str:
    """Format an expected shape such as ``(B, T_q, 16)``."""
    parts = ["*" if d is None else str(d) for d in dims]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def check_tensor(name: str, x: object) -> Tensor:
    """Raise TypeError unless ``x`` is a tensor."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    return x


def check_shape(name: str, x: object, dims: Sequence[Dim], sizes: dict[str, int] | None = None) -> dict[str, int]:
    """Check that ``x`` is a tensor with ``len(dims)`` axes matching ``dims``.

    Args:
        name: the argument's name, used in the message.
        x: the value to check.
        dims: expected sizes; see :data:`Dim`.
        sizes: letters already bound by earlier checks of the same call (updated in place and returned), so that
            ``check_shape("keys", k, ("B", "T_k", "D"), sizes)`` can insist on the queries' ``B`` and ``D``.
    Returns:
        ``sizes``, with this tensor's letters bound.
    Raises:
        TypeError: ``x`` is not a tensor.
        ValueError: wrong number of axes, or a size that differs from the expected one.
    """
    sizes = {} if sizes is None else sizes
    t = check_tensor(name, x)
    got = fmt_shape(t.shape)
    if t.dim() != len(dims):
        raise ValueError(f"{name}: expected a {len(dims)}-D tensor of shape {fmt_expected(dims)}, got shape {got}")
    for axis, (want, have) in enumerate(zip(dims, t.shape, strict=True)):
        if isinstance(want, int) and have != want:
            raise ValueError(f"{name}: expected shape {fmt_expected(dims)}, got shape {got} (axis {axis} differs)")
        if isinstance(want, str):
            if want in sizes and sizes[want] != have:
                raise ValueError(
                    f"{name}: expected shape {fmt_expected(dims)} with {want}={sizes[want]}, got shape {got}"
                )
            sizes[want] = int(have)
    return sizes


def check_nonempty(name: str, x: Tensor, axes: Sequence[int]) -> None:
    """Raise ValueError if any of ``axes`` of ``x`` has size 0 (an empty batch or sequence)."""
    for axis in axes:
        if x.shape[axis] == 0:
            raise ValueError(
                f"{name}: axis {axis} is empty, got shape {fmt_shape(x.shape)}; expected at least 1 element"
            )


def check_floating(name: str, x: Tensor) -> None:
    """Raise TypeError unless ``x`` has a floating dtype."""
    if not x.is_floating_point():
        raise TypeError(f"{name}: expected a floating-point tensor, got dtype {x.dtype}")


def check_int_tensor(name: str, x: Tensor) -> None:
    """Raise TypeError unless ``x`` has an integer dtype (bool is not accepted)."""
    if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        raise TypeError(f"{name}: expected an integer tensor (e.g. torch.long), got dtype {x.dtype}")


def check_positive_int(name: str, value: object, minimum: int = 1) -> int:
    """Raise unless ``value`` is an int (not bool) at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name}: expected an int >= {minimum}, got {value}")
    return value


def check_probability(name: str, value: object) -> float:
    """Raise unless ``value`` is a number in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a float in [0, 1), got {type(value).__name__}")
    if not 0.0 <= float(value) < 1.0:
        raise ValueError(f"{name}: expected a float in [0, 1), got {value}")
    return float(value)


def check_positive_float(name: str, value: object) -> float:
    """Raise unless ``value`` is a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a positive float, got {type(value).__name__}")
    v = float(value)
    if not (v > 0.0 and v < float("inf")):
        raise ValueError(f"{name}: expected a finite float > 0, got {value}")
    return v


def check_seed(seed: object) -> int:
    """Raise TypeError unless ``seed`` is an int (bool is not)."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed: expected an int, got {type(seed).__name__}")
    return seed
